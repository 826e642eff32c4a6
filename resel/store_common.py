"""What both sides of the run store share, standard library only: the names of its migrations
and the check that a connection still has the file it opened.

:mod:`resel.store` (opening, reading; the standard library) and :mod:`resel.store_migrations`
(the writing side, on sqlite-utils) both import this module and not each other's names: the
store loads the writing side when a store is created, written or migrated, and the writing side
needs only what is here, so the two form no import cycle.
"""

from __future__ import annotations

from typing import Any

#: the name of resel's migration set in the store's migrations table (sqlite-utils' ``Migrations``)
MIGRATION_SET = "resel"
#: the table in which sqlite-utils' ``Migrations`` records the migrations applied
MIGRATIONS_TABLE = "_sqlite_migrations"
#: every migration of this version, in order: those of :mod:`resel.store_migrations` (which
#: refuses to load if the two differ), named here so a reader can tell an up-to-date store
#: without importing sqlite-utils
MIGRATIONS = ("m001_initial", "m002_live", "m003_pilot_hosts", "m004_profiles", "m005_site_probes",
              "m006_model_fits", "m007_wait_history", "m008_live_notes", "m009_task_data")


def verify_unchanged(db: Any) -> None:
    """Raise unless the store's path still names the file this connection opened.

    Called before each write transaction (:meth:`resel.store_migrations.Store.atomic`) and
    before a live run's stored sites are acted on (:func:`resel.live.stored.load_live_run`): a
    store moved away (or replaced) under a running command would take its writes with it, or
    hand it someone else's sites. An in-memory store has nothing to compare.

    Raises:
        StoreError: the store was moved, deleted or replaced since it was opened.
    """
    identity = getattr(db, "resel_identity", None)
    if identity is not None:
        identity.verify(db.resel_path)

