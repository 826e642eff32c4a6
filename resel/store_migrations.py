"""The run store's writing side: the schema's migrations and the connection writers use.

Everything here needs sqlite-utils (its ``Migrations`` and ``Database``), which costs a
command about 0.1 s to import (``sqlite_utils.db`` pulls in numpy): :mod:`resel.store`
imports this module only when a store is created, written or migrated, so the commands that
only read a store (``resel runs``, ``resel status``) never load it. The names ``migrations``
and ``Store`` stay readable from :mod:`resel.store`, which imports them from here on first use.

A migration added here needs its name in :data:`resel.store_common.MIGRATIONS` too: that tuple is
how a reader knows, without this module, whether a store is up to date (importing this
module with the two apart fails at once, naming what to add).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from sqlite_utils import Database, Migrations

from resel.store_common import MIGRATION_SET, MIGRATIONS, MIGRATIONS_TABLE, verify_unchanged

migrations = Migrations(MIGRATION_SET)


@migrations()
def m001_initial(db: Database) -> None:
    db["experiments"].create({"id": int, "created": str, "params": str}, pk="id")
    db["runs"].create({
        "id": int, "experiment_id": int, "created": str, "mode": str, "bag": str, "strategy": str,
        "size": int, "seed": int, "clock": str, "ttc_wkd": float, "tx_wkd": float, "tq_wkd": float,
        "done": int, "failed": int, "reassigned": int, "restarts": int, "wasted_core_s": float,
        "per_site": str, "audit": str, "sites": str, "bag_spec": str, "steps": int,
    }, pk="id", foreign_keys=[("experiment_id", "experiments", "id")])
    db["tasks"].create({"run_id": int, "task": int, "origin": str, "site": str, "tq": float,
                        "tx": float, "ttc": float, "attempts": int, "state": str},
                       pk=("run_id", "task"), foreign_keys=[("run_id", "runs", "id")])
    db["pilots"].create({"run_id": int, "pilot": int, "site": str, "cores": int, "submitted": float,
                         "start": float, "started": int, "cancelled": int},
                        pk=("run_id", "pilot"), foreign_keys=[("run_id", "runs", "id")])
    db["decisions"].create({"run_id": int, "seq": int, "time": float, "kind": str, "task": int,
                            "origin": str, "target": str, "a_r": float, "a_r2": float,
                            "tx_r": float, "tx_r2": float, "window": float},
                           pk=("run_id", "seq"), foreign_keys=[("run_id", "runs", "id")])
    db["events"].create({"run_id": int, "seq": int, "time": float, "kind": str, "data": str},
                        pk=("run_id", "seq"), foreign_keys=[("run_id", "runs", "id")])
    db["runs"].create_index(["experiment_id"])


@migrations()
def m002_live(db: Database) -> None:
    """Live runs: status and clock origin of a run, pilots' batch jobs, agents' attempt records.

    ``events.done`` is NULL for an event, 0 for an action recorded but not yet carried out, 1
    once carried out: the coordinator writes both before acting, so a crashed run resumes by
    replaying the events and finishing the actions still at 0.
    """
    runs = db["runs"]
    for col, typ in (("status", str), ("t0", float), ("run_key", str), ("options", str), ("sites_file", str),
                     ("bag_file", str)):
        runs.add_column(col, typ)
    db["events"].add_column("done", int)
    db["events"].add_column("error", str)
    db["live_pilots"].create({"run_id": int, "pilot": int, "site": str, "job_id": str, "cores": int,
                              "walltime": float, "submitted": float, "started": float, "ended": float,
                              "state": str, "reason": str},
                             pk=("run_id", "pilot"), foreign_keys=[("run_id", "runs", "id")])
    db["attempts"].create({"run_id": int, "task": int, "attempt": int, "site": str, "pilot": int,
                           "host": str, "start": float, "end": float, "exit_code": int, "outcome": str,
                           "reason": str, "perf": str, "stdout_tail": str, "stderr_tail": str},
                          pk=("run_id", "task", "attempt"), foreign_keys=[("run_id", "runs", "id")])


@migrations()
def m003_pilot_hosts(db: Database) -> None:
    """Where each live pilot landed, from its agent: host, CPU model and clock of the node or
    slot (on a pool every slot can differ; calibration reads them per pilot)."""
    for col, typ in (("host", str), ("cpu_model", str), ("cpu_mhz", float), ("agent_started", float)):
        db["live_pilots"].add_column(col, typ)


@migrations()
def m004_profiles(db: Database) -> None:
    """``resel profile``: one row per measured run, every figure with the method that gave it."""
    from resel.probes.profile import ensure_tables
    ensure_tables(db)


@migrations()
def m005_site_probes(db: Database) -> None:
    """``resel sites probe``: what each site's compute nodes measured, per probe."""
    db["site_probes"].create({
        "created": str, "site": str, "kind": str, "host": str, "cpu_model": str, "cpu_mhz": float,
        "task_clock_s": float, "cycles": float, "instructions": float, "clock_ghz": float, "clock_method": str,
        "wait_s": float, "wall_s": float, "job_id": str, "error": str})


@migrations()
def m006_model_fits(db: Database) -> None:
    """``resel model fit``: one row per fit (per-site fits, the LIM it replaced, held-out scores)."""
    db["model_fits"].create({
        "id": int, "created": str, "runs": str, "holdout": str, "baseline_label": str, "n_evidence": int,
        "fit": str, "lim": str, "evaluation": str,
    }, pk="id")


@migrations()
def m007_wait_history(db: Database) -> None:
    """``resel history import``: past queue waits per site (sacct, SWF traces) for wait bounds.

    Keyed by (site, source, job_id) so importing the same file twice adds nothing; the index
    on (site, submit) serves reading one site's history in submission order.
    """
    db["wait_history"].create({
        "site": str, "source": str, "job_id": str, "partition": str, "cores": int, "walltime": float,
        "submit": float, "start": float,
    }, pk=("site", "source", "job_id"))
    db["wait_history"].create_index(["site", "submit"])


@migrations()
def m008_live_notes(db: Database) -> None:
    """What a live coordinator noticed besides events, for ``resel status`` in another process:
    a site not answering (and since when), a pilot in a job state resel does not know, an agent
    relaunched under the same job, a record refused by the protocol check, and the
    coordinator's own lease (so ``resel cancel`` can wait for it to let go of the run).

    One row per (run, site, key); ``first``/``last`` are seconds since the run started,
    ``count`` how often it was seen, ``detail`` the words to show.
    """
    db["live_notes"].create({"run_id": int, "site": str, "key": str, "kind": str, "first": float,
                             "last": float, "count": int, "detail": str},
                            pk=("run_id", "site", "key"), foreign_keys=[("run_id", "runs", "id")])


@migrations()
def m009_task_data(db: Database) -> None:
    """Task data (docs/data.md): the run's manifest of inputs (``task_inputs``; a shared file
    once, as task −1), what each site's cache holds for the run (``site_files``, with how long
    sending it took), what came home (``task_outputs``: where, size, sha256, how long), the
    run's results folder (``runs.results``) and each attempt's outputs as its agent recorded
    them (``attempts.outputs``, JSON: what a resumed run fetches again)."""
    db["runs"].add_column("results", str)
    db["attempts"].add_column("outputs", str)
    db["task_inputs"].create({"run_id": int, "task": int, "name": str, "path": str, "size": int, "sha256": str},
                             pk=("run_id", "task", "name"), foreign_keys=[("run_id", "runs", "id")])
    db["site_files"].create({"run_id": int, "site": str, "sha256": str, "size": int, "sent": float,
                             "seconds": float}, pk=("run_id", "site", "sha256"), foreign_keys=[("run_id", "runs", "id")])
    db["task_outputs"].create({"run_id": int, "task": int, "attempt": int, "site": str, "name": str, "size": int,
                               "sha256": str, "path": str, "fetched": float, "seconds": float},
                              pk=("run_id", "task", "name"), foreign_keys=[("run_id", "runs", "id")])


if tuple(m.name for m in migrations._migrations) != MIGRATIONS or Migrations.migrations_table != MIGRATIONS_TABLE:
    raise RuntimeError(f"resel.store_common.MIGRATIONS {MIGRATIONS} (table {MIGRATIONS_TABLE}) is not the migrations "
                       f"defined in resel/store_migrations.py {tuple(m.name for m in migrations._migrations)} "
                       f"(table {Migrations.migrations_table}): add the new migration's name to it")


class Store(Database):
    """The run store's connection: every top-level transaction takes the write lock up front.

    Each one first checks that the store's path still names the file opened
    (:func:`resel.store_common.verify_unchanged`), so nothing is written into a store moved away.

    ``BEGIN IMMEDIATE`` instead of sqlite-utils' deferred ``BEGIN``: a deferred transaction that
    reads and then writes cannot wait for another writer (SQLite answers ``database is
    locked`` at once to avoid a deadlock), while an immediate one queues behind it for up to
    :data:`resel.store.BUSY_TIMEOUT_S`. Several ``resel simulate`` processes and a live ``resel run`` on
    one store therefore all finish, each transaction in turn.

    sqlite-utils plugins (its ``prepare_connection`` hook, meant for the ``sqlite-utils``
    command) are not run on resel's connections: resel's queries need none, no installed
    package should change what resel's store does, and finding them scans the entry points of
    every installed distribution — a third of what opening a store cost a ``resel runs``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("execute_plugins", False)
        super().__init__(*args, **kwargs)

    @contextlib.contextmanager
    def atomic(self) -> Iterator["Store"]:
        if self.conn.in_transaction:
            with super().atomic():
                yield self
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            verify_unchanged(self)      # the write lock is held: the store is still the file opened
            yield self
        except BaseException:
            self.conn.rollback()
            raise
        else:
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.rollback()
                raise


def migrate(db: Database) -> None:
    """Apply pending migrations holding the write lock, so processes opening a new store at
    once apply each migration exactly once (the others wait, then find nothing pending)."""
    if not migrations.pending(db):
        return
    with db.atomic():
        migrations.apply(db)


def pending(db: Database) -> bool:
    """Whether the store lacks a migration of this version."""
    return bool(migrations.pending(db))


def memory_store() -> Store:
    """An in-memory store with every migration applied (tests, ``open_store(memory=True)``)."""
    db = Store(memory=True)
    migrations.apply(db)
    return db


def applied_schema() -> dict[str, frozenset[str]]:
    """Tables and columns that applying the migrations to an empty in-memory store gives."""
    db = memory_store()
    return {t.name: frozenset(c.name for c in t.columns) for t in db.tables
            if t.name != Migrations.migrations_table}
