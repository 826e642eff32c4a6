"""The run store: one SQLite file, opened through :func:`open_store`, which applies migrations.

Tables are named after the domain so users can query them with ``sqlite-utils`` or
Datasette: ``experiments`` (one ``resel simulate`` call), ``runs`` (one bag × strategy × size ×
seed), ``tasks`` (per-task T_q/T_x/TTC), ``pilots``, ``decisions`` (every engine choice with its
inputs) and ``events`` (every event and action, in order: the journal, encoded by
:mod:`resel.journal`; a simulated run's without the ones other tables hold,
:data:`KEPT_ELSEWHERE`).

This module imports the standard library only: the migrations and the sqlite-utils connection
that writers get (:mod:`resel.store_migrations`, 0.1 s of imports with numpy) are loaded when a
store is created, written or migrated. Commands that only read (``resel runs``, ``resel
status``) open the store with :func:`read_store`, through :mod:`sqlite3` alone, after the same
checks as :func:`open_store`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import sqlite3
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from resel.errors import StoreError
from resel.json_safe import clean
from resel.store_common import MIGRATION_SET, MIGRATIONS, MIGRATIONS_TABLE, verify_unchanged
from resel.trust import StoreIdentity, check_store_file, check_store_folders

if TYPE_CHECKING:
    from sqlite_utils import Database


#: names kept readable here that live in the writing side, imported from it on first use
_WRITING_SIDE = {"migrations": "migrations", "Store": "Store"}


def __getattr__(name: str) -> Any:
    """``resel.store.migrations`` and ``resel.store.Store``, as before the writing side moved out
    to :mod:`resel.store_migrations` (PEP 562: importing it costs only those who read them)."""
    if name in _WRITING_SIDE:
        from resel import store_migrations
        return getattr(store_migrations, _WRITING_SIDE[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_path() -> Path:
    """``$RESEL_DB``, else ``$XDG_DATA_HOME/resel/resel.db`` (``~/.local/share/resel/resel.db``)."""
    if os.environ.get("RESEL_DB"):
        return Path(os.environ["RESEL_DB"])
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "resel" / "resel.db"


#: seconds a writer waits for another process's transaction before giving up
BUSY_TIMEOUT_S = 120.0
#: filesystems on which SQLite's WAL (shared memory between processes) does not work
NETWORK_FILESYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph",
                                 "glusterfs", "fuse.glusterfs", "fuse.sshfs", "afs", "panfs", "9p", "orangefs"})


def open_store(path: str | Path | None = None, *, memory: bool = False, write: bool = True) -> Database:
    """Open (creating if needed) the store and bring its schema up to date.

    A store resel creates is private: the file 0600, each folder it makes 0700. A file that is
    not a resel store (another application's SQLite file, a report) is refused before anything
    is written to it, as is a store from a newer resel or one whose tables are damaged. With
    ``write`` (commands that store something) a store this user cannot write is refused here,
    before any work starts; without it (commands that only read) it is opened read-only.

    Raises:
        StoreError: the file cannot be created or opened, is not a resel store, is from a newer
            resel, is damaged, or (``write``) is read-only — saying which, and what to do.
    """
    from resel import store_migrations
    if memory:
        return store_migrations.memory_store()
    target = Path(path) if path else default_path()
    try:
        _make_private_dirs(target.parent)
        real = Path(check_store_folders(target))     # before a file is made in a folder it refuses
        if not real.exists() and (write or os.access(real.parent, os.W_OK)):
            _create_private_file(real)
        if real.exists() and not real.is_file():
            raise StoreError(f"run store {target} is not a file; give the path of a store file with --db")
        identity = check_store_file(target, str(real)) if real.exists() else None
        _check_is_resel_store(real, target)
        writable = _writable(real)
        if write and not writable:
            raise StoreError(f"run store {target} is read-only for this user (it or its folder cannot be "
                             "written); give a writable store with --db or $RESEL_DB, or fix its permissions")
        if writable:
            conn = sqlite3.connect(str(real), timeout=BUSY_TIMEOUT_S, isolation_level="IMMEDIATE")
        else:
            conn = _read_only(real)
        db = store_migrations.Store(conn)
        _remember(db, identity, target)
        if writable:
            _use_wal(db.conn, real)
            store_migrations.migrate(db)
        elif store_migrations.pending(db):
            raise _older_read_only(target)
        _check_schema(db.conn, target)
        verify_unchanged(db)     # the file the checks saw is the one the connection read
        return db
    except StoreError:
        raise
    except (OSError, sqlite3.DatabaseError) as exc:
        raise StoreError(f"cannot open run store {target}: {exc}") from None


class StoreReader:
    """A run store opened to be read, through :mod:`sqlite3` alone.

    It answers the part of sqlite-utils' ``Database`` that the reading commands use —
    :meth:`query` (rows as dicts), :meth:`execute`, :meth:`table_names`, ``conn`` — so the
    functions they call (:func:`list_runs`, the live run's replay, its notes) take either.
    The connection is ``query_only``: nothing read through it can change the store.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        conn.execute("pragma query_only = on")

    def execute(self, sql: str, parameters: Iterable[Any] | dict | None = None) -> sqlite3.Cursor:
        return self.conn.execute(sql, parameters or ())

    def query(self, sql: str, params: Iterable[Any] | dict | None = None) -> Iterator[dict]:
        """The rows ``sql`` selects, each a dict of column name to value (as sqlite-utils')."""
        cursor = self.execute(sql, params)
        keys = [d[0] for d in cursor.description]
        for row in cursor:
            yield dict(zip(keys, row))

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("select name from sqlite_master where type = 'table'")]

    def close(self) -> None:
        self.conn.close()


def read_store(path: str | Path | None = None) -> StoreReader | Database:
    """The store opened for reading, as ``open_store(path, write=False)`` opens it, without sqlite-utils.

    The same checks, in the same order, with the same errors: a file that is not a resel store,
    one from a newer resel, a damaged one. A store that ``open_store(write=False)`` would change
    first — none there yet (it is created), migrations pending (they are applied, or a
    read-only one is refused), a writable one not yet in WAL mode — is handed to it, and
    what it returns (a sqlite-utils ``Database``) answers the same calls. Otherwise the store
    is read through a :class:`StoreReader` on the same connection ``open_store`` makes (read-only
    when this user cannot write it).

    Raises:
        StoreError: as :func:`open_store` with ``write=False``.
    """
    target = Path(path) if path else default_path()
    try:
        if not target.is_file():
            return open_store(target, write=False)       # made here, or refused with its own words
        real = Path(check_store_folders(target))
        identity = check_store_file(target, str(real))
        applied = _check_is_resel_store(real, target)
        writable = _writable(real)
        if writable and not _in_wal_mode(real) and _filesystem(real) not in NETWORK_FILESYSTEMS:
            return open_store(target, write=False)       # converted to WAL first
        if writable:
            conn = sqlite3.connect(str(real), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        else:
            conn = _read_only(real)
        if applied != set(MIGRATIONS):
            # the check above reads the file alone; a migration a running writer recorded may
            # still be in the -wal file, which the connection sees
            applied = _applied_migrations(conn)
        if applied != set(MIGRATIONS):
            conn.close()
            return open_store(target, write=False)       # migrations to apply (or refuse) first
        reader = StoreReader(conn)
        _remember(reader, identity, target)
        _check_schema(reader.conn, target)
        verify_unchanged(reader)
        return reader
    except StoreError:
        raise
    except (OSError, sqlite3.DatabaseError) as exc:
        raise StoreError(f"cannot open run store {target}: {exc}") from None


def _remember(db: Any, identity: StoreIdentity | None, target: Path) -> None:
    """Keep on the connection's object the file it opened, for :func:`verify_unchanged`."""
    db.resel_identity, db.resel_path = identity, target


def _applied_migrations(conn: sqlite3.Connection) -> set[str]:
    """The names of resel's migrations the store records (none without the migrations table)."""
    if not conn.execute("select 1 from sqlite_master where type = 'table' and name = ?",
                        [MIGRATIONS_TABLE]).fetchone():
        return set()
    return {r[0] for r in conn.execute(f"select name from {MIGRATIONS_TABLE} where migration_set = ?",
                                       [MIGRATION_SET])}


def _writable(target: Path) -> bool:
    """This user can write the store (the file, and its folder for the journal or WAL files)."""
    return os.access(target, os.W_OK) and os.access(target.parent, os.W_OK)


def _older_read_only(target: Path) -> StoreError:
    return StoreError(f"run store {target} is read-only and was made by an older resel: open it once "
                      "with write access to upgrade it")


def _read_only(target: Path) -> sqlite3.Connection:
    """A connection that only reads a store this user cannot write.

    A WAL store needs its -shm file even to be read, which a reader without write access to the
    folder cannot create; when the store has no -wal file (its last writer closed it cleanly,
    so the file holds everything) it is read as ``immutable`` instead, without locks or -shm.
    """
    wal = Path(f"{target}-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        return sqlite3.connect(_uri(target, "mode=ro&immutable=1"), uri=True)
    return sqlite3.connect(_uri(target, "mode=ro"), uri=True, timeout=BUSY_TIMEOUT_S)


def _make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each 0700 (the store's runs are the user's)."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.exists():
            break
        missing.append(parent)
    for parent in reversed(missing):
        try:
            os.mkdir(parent, 0o700)
        except FileExistsError:
            pass


def _create_private_file(target: Path) -> None:
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:   # another process made it first
        pass


def _uri(target: Path, query: str) -> str:
    return "file:" + urllib.parse.quote(str(target.resolve())) + "?" + query


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_is_resel_store(real: Path, target: Path | None = None) -> set[str]:
    """Refuse, without changing a byte of it, a file that is not an (empty or) resel store;
    return the migrations it has (none: a new, empty file or database, made into a store here).
    ``real`` is read; ``target`` (the path as the user gave it) names it in the errors.

    Read through ``immutable=1``: no lock, no journal or WAL recovery, no -shm file, so
    another application's database is only read — unless a -wal file holds pages: then the
    file alone may be half of a checkpoint that a killed writer left (pages copied from the WAL
    in page order, the WAL kept to finish it), which only the two together read right (the
    crash soak, seed 5, point 808: "database disk image is malformed" on a resume). Then it is
    read ``mode=ro`` through the WAL, which changes no byte of the database file either.
    """
    target = real if target is None else target
    with open(real, "rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    if not head:
        return set()      # a new, empty file: the store is made here
    if head != _SQLITE_MAGIC:
        raise StoreError(f"{target} is not a resel run store (not an SQLite database); resel leaves it "
                         "untouched — give the run store with --db or $RESEL_DB")
    wal = Path(f"{real}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        conn = sqlite3.connect(_uri(real, "mode=ro"), uri=True, timeout=BUSY_TIMEOUT_S)
    else:
        conn = sqlite3.connect(_uri(real, "mode=ro&immutable=1"), uri=True)
    try:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        if not tables:
            return set()
        applied: set[str] = set()
        if MIGRATIONS_TABLE in tables:
            applied = {r[0] for r in conn.execute(
                f"select name from {MIGRATIONS_TABLE} where migration_set = ?", [MIGRATION_SET])}
    finally:
        conn.close()
    if not applied:
        shown = ", ".join(sorted(tables)[:6]) + (", …" if len(tables) > 6 else "")
        raise StoreError(f"{target} is not a resel run store: it holds another application's tables ({shown}); "
                         "resel leaves it untouched — give the run store with --db or $RESEL_DB")
    newer = sorted(applied - set(MIGRATIONS))
    if newer:
        raise StoreError(f"run store {target} was made by a newer resel (its schema has {', '.join(newer)}, "
                         f"which resel {_version()} does not know); upgrade resel, or give another store with --db")
    return applied


def _version() -> str:
    from resel import __version__
    return __version__


def _in_wal_mode(target: Path) -> bool:
    """The database file says it is in WAL mode (header bytes 18 and 19 are 2: SQLite's file
    format, section 1.3), read without opening a connection."""
    with open(target, "rb") as f:
        head = f.read(20)
    return len(head) == 20 and head[18] == 2 and head[19] == 2


def _use_wal(conn: sqlite3.Connection, target: Path) -> None:
    """WAL, so readers never block the writer, unless the store is on a network filesystem
    (WAL's shared memory does not work there: SQLite's rollback journal and the busy
    timeout serialise writers instead)."""
    if _filesystem(target) in NETWORK_FILESYSTEMS:
        return
    if conn.execute("pragma journal_mode").fetchone()[0] != "wal":
        conn.execute("pragma journal_mode = wal")


def _filesystem(path: Path) -> str | None:
    """The type of the filesystem ``path`` is on (from /proc/self/mounts), None if unknown."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best, kind = "", None
    for fields in mounts:
        if len(fields) < 3:
            continue
        point = fields[1].encode().decode("unicode_escape")    # '\040' is a space
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


#: The tables and columns that the migrations above give an empty store, for :func:`_check_schema`.
#: Applying them to an in-memory store cost every command that opens a store 20-50 ms at each
#: start-up (sqlite-utils inspects each table it changes); while the migrations are these, their
#: result is read from here instead. tests/test_store.py checks it against applying them; with a
#: migration added later they are applied in memory, as before, until this is brought up to date.
_SCHEMA_SNAPSHOT: tuple[tuple[str, ...], dict[str, str]] = (
    ("m001_initial", "m002_live", "m003_pilot_hosts", "m004_profiles", "m005_site_probes", "m006_model_fits",
     "m007_wait_history", "m008_live_notes", "m009_task_data"),
    {
        "attempts": ("attempt end exit_code host outcome outputs perf pilot reason run_id site start stderr_tail "
                     "stdout_tail task"),
        "decisions": "a_r a_r2 kind origin run_id seq target task time tx_r tx_r2 window",
        "events": "data done error kind run_id seq time",
        "experiments": "created id params",
        "live_notes": "count detail first key kind last run_id site",
        "live_pilots": ("agent_started cores cpu_mhz cpu_model ended host job_id pilot reason run_id site "
                        "started state submitted walltime"),
        "model_fits": "baseline_label created evaluation fit holdout id lim n_evidence runs",
        "pilots": "cancelled cores pilot run_id site start started submitted",
        "profiles": ("argv avg_ghz base_ghz cpu_model created cycles exit_status host id instructions ipc label "
                     "max_ghz methods reduced_argv run scale task_clock_s wall_s"),
        "runs": ("audit bag bag_file bag_spec clock created done experiment_id failed id mode options per_site "
                 "reassigned restarts results run_key seed sites sites_file size status steps strategy t0 tq_wkd "
                 "ttc_wkd tx_wkd wasted_core_s"),
        "site_files": "run_id seconds sent sha256 site size",
        "site_probes": ("clock_ghz clock_method cpu_mhz cpu_model created cycles error host instructions job_id "
                        "kind site task_clock_s wait_s wall_s"),
        "task_inputs": "name path run_id sha256 size task",
        "task_outputs": "attempt fetched name path run_id seconds sha256 site size task",
        "tasks": "attempts origin run_id site state task tq ttc tx",
        "wait_history": "cores job_id partition site source start submit walltime",
    },
)


@functools.lru_cache(maxsize=1)
def _expected_schema() -> dict[str, frozenset[str]]:
    """Tables and columns a store of this version has: the migrations applied to an empty one
    (read from :data:`_SCHEMA_SNAPSHOT` while it names exactly the migrations there are)."""
    names, tables = _SCHEMA_SNAPSHOT
    if tuple(names) == MIGRATIONS:
        return {table: frozenset(columns.split()) for table, columns in tables.items()}
    return _applied_schema()


def _applied_schema() -> dict[str, frozenset[str]]:
    """Tables and columns that applying the migrations to an empty in-memory store gives."""
    from resel.store_migrations import applied_schema
    return applied_schema()


def _present_schema(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The store's tables and the columns of each, as SQLite lists them."""
    tables = [r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")]
    return {t: {r[1] for r in conn.execute("select * from pragma_table_info(?)", [t])} for t in tables}


def _check_schema(conn: sqlite3.Connection, target: Path) -> None:
    present = _present_schema(conn)
    for table, columns in _expected_schema().items():
        if table not in present:
            raise StoreError(f"run store {target} is damaged: table {table} is missing (the store's migrations "
                             "say it exists); give another store with --db")
        lacking = sorted(columns - present[table])
        if lacking:
            raise StoreError(f"run store {target} is damaged: table {table} lacks column(s) {', '.join(lacking)}; "
                             "give another store with --db")


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


#: JSON-safe values (NaN/inf -> None, dataclasses -> dicts); defined in resel/json_safe.py,
#: which a command can import without the store
_clean = clean


def to_json(value: Any) -> str:
    return json.dumps(_clean(value), default=str)


def add_experiment(db: Database, params: dict) -> int:
    return db["experiments"].insert({"created": utc_now(), "params": to_json(params)}).last_pk


#: the events a simulated run's ``events`` table leaves out, because another table holds each
#: of them exactly (checked on every run of a default ``resel simulate``): a ``TaskFinished``
#: is the task's row in ``tasks`` (its ``attempts`` and ``ttc``, state done), a ``PilotStarted``
#: the pilot's row in ``pilots`` (``start``, ``started`` 1). They were 36 % of the rows and 18 %
#: of the store a ``resel simulate`` adds (17.1 -> 14.0 MB); ``seq`` keeps each event's place
#: in the log. Live runs keep their whole journal (``--resume`` replays it).
KEPT_ELSEWHERE = frozenset({"TaskFinished", "PilotStarted"})


def save_run(db: Database, result, *, experiment_id: int | None = None, events: bool = True) -> int:
    """Write one simulated run (a :class:`~resel.sim.simulation.SimResult`) in one transaction.

    Its events are stored but those another table holds (:data:`KEPT_ELSEWHERE`).

    Every row is built before the transaction starts, and inserted with ``executemany``: the
    write lock, which other processes sharing the store wait for, is held only for the inserts
    (about 0.1 s for a 1,024-task run) — not for turning thousands of records into rows.
    """
    from resel.journal import encode
    from resel.metrics import task_times

    m = result.metrics
    names = [s.name for s in result.sites]
    run_row = {
        "experiment_id": experiment_id, "created": utc_now(), "mode": "simulated",
        "bag": result.bag.name, "strategy": result.strategy, "size": result.bag.count,
        "seed": result.seed, "clock": result.engine_clock, "ttc_wkd": m.ttc_wkd, "tx_wkd": m.tx_wkd,
        "tq_wkd": m.tq_wkd, "done": m.done, "failed": m.failed, "reassigned": m.reassigned,
        "restarts": m.restarts, "wasted_core_s": m.wasted_core_s, "per_site": to_json(m.per_site),
        "audit": to_json(result.audit.as_dict()), "sites": to_json(result.sites),
        "bag_spec": to_json(result.bag), "steps": result.steps,
    }
    # (columns, rows without run_id): prepared tuples, built before the lock is taken
    tables = {
        "tasks": (("task", "origin", "site", "tq", "tx", "ttc", "attempts", "state"),
                  [(t.task, t.origin, t.site, _finite(t.tq), _finite(t.tx), _finite(t.ttc), t.attempts, t.state)
                   for t in task_times(result.engine.tasks, names)]),
        "pilots": (("pilot", "site", "cores", "submitted", "start", "started", "cancelled"),
                   [(p.id, names[p.site], p.cores, p.submitted, p.start, int(p.started), int(p.cancelled))
                    for p in result.pilots]),
        "decisions": (("seq", *_DECISION_FIELDS),
                      [(i, *map(_finite, (getattr(d, f) for f in _DECISION_FIELDS)))
                       for i, d in enumerate(result.decisions)]),
        "events": (("seq", "time", "kind", "data"),
                   [(seq, time, kind, encode(record)) for seq, (time, kind, record) in enumerate(result.events)
                    if kind not in KEPT_ELSEWHERE] if events else []),
    }
    with db.atomic():
        run_id = db["runs"].insert(run_row).last_pk
        for table, (columns, rows) in tables.items():
            _insert_rows(db, table, ("run_id", *columns), ((run_id, *row) for row in rows))
    return run_id


#: a Decision's fields as stored, in the decisions table's column order
_DECISION_FIELDS = ("time", "kind", "task", "origin", "target", "a_r", "a_r2", "tx_r", "tx_r2", "window")


def _finite(value: Any) -> Any:
    """A value as the store keeps it: NaN and infinities as NULL (as :func:`_clean`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _insert_rows(db: Database, table: str, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
    """Bulk insert of prepared rows: one statement, prepared once, for every row (sqlite_utils'
    ``insert_all`` rebuilds a statement and inspects every value per chunk, which is most of
    what storing a simulated run cost)."""
    sql = f"INSERT INTO [{table}] ({', '.join(f'[{c}]' for c in columns)}) VALUES ({', '.join('?' * len(columns))})"
    db.conn.executemany(sql, rows)


def list_runs(db: Database, limit: int = 50) -> list[dict]:
    return list(db.query(
        "select id, experiment_id, created, mode, bag, strategy, size, seed, ttc_wkd, tx_wkd, tq_wkd, "
        "done, failed, reassigned from runs order by id desc limit ?", [limit]))


def get_run(db: Database, run_id: int) -> dict:
    """One run with its per-site and audit summaries decoded.

    Raises:
        StoreError: no such run.
    """
    rows = list(db.query("select * from runs where id = ?", [run_id]))
    if not rows:
        raise StoreError(f"no run {run_id} in the store (list them with `resel runs`)")
    run = rows[0]
    for key in ("per_site", "audit", "sites", "bag_spec", "options"):
        run[key] = stored_json(run[key], f"runs.{key} of run {run_id}")
    return run


def stored_json(text: str | None, where: str) -> Any:
    """A JSON column's value (None for NULL or empty).

    Raises:
        StoreError: the text is not JSON — the store was damaged or written by something else.
    """
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise StoreError(f"the run store is damaged: {where} is not JSON ({str(text)[:40]!r}…)") from None
