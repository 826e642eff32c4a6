"""The run store: one SQLite file, opened through :func:`open_store`, which applies migrations.

Tables are named after the domain so users can query them with ``sqlite-utils`` or
Datasette: ``experiments`` (one ``resel simulate`` call), ``runs`` (one bag × strategy × size ×
seed), ``tasks`` (per-task T_q/T_x/TTC), ``pilots``, ``decisions`` (every engine choice with its
inputs) and ``events`` (every event and action, in order).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import functools
import json
import math
import os
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any, Iterable, Iterator

from sqlite_utils import Database, Migrations

from resel.errors import StoreError
from resel.json_safe import clean

migrations = Migrations("resel")


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


class Store(Database):
    """The run store's connection: every top-level transaction takes the write lock up front.

    ``BEGIN IMMEDIATE`` instead of sqlite-utils' deferred ``BEGIN``: a deferred transaction that
    reads and then writes cannot wait for another writer (SQLite answers ``database is
    locked`` at once to avoid a deadlock), while an immediate one queues behind it for up to
    :data:`BUSY_TIMEOUT_S`. Several ``resel simulate`` processes and a live ``resel run`` on
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
    if memory:
        db = Store(memory=True)
        migrations.apply(db)
        return db
    target = Path(path) if path else default_path()
    try:
        _make_private_dirs(target.parent)
        if not target.exists() and (write or os.access(target.parent, os.W_OK)):
            _create_private_file(target)
        if target.exists() and not target.is_file():
            raise StoreError(f"run store {target} is not a file; give the path of a store file with --db")
        _check_is_resel_store(target)
        writable = os.access(target, os.W_OK) and os.access(target.parent, os.W_OK)
        if write and not writable:
            raise StoreError(f"run store {target} is read-only for this user (it or its folder cannot be "
                             "written); give a writable store with --db or $RESEL_DB, or fix its permissions")
        if writable:
            conn = sqlite3.connect(str(target), timeout=BUSY_TIMEOUT_S, isolation_level="IMMEDIATE")
        else:
            conn = _read_only(target)
        db = Store(conn)
        if writable:
            _use_wal(db, target)
            _migrate(db)
        elif migrations.pending(db):
            raise StoreError(f"run store {target} is read-only and was made by an older resel: open it once "
                             "with write access to upgrade it")
        _check_schema(db, target)
        return db
    except StoreError:
        raise
    except (OSError, sqlite3.DatabaseError) as exc:
        raise StoreError(f"cannot open run store {target}: {exc}") from None


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


def _check_is_resel_store(target: Path) -> None:
    """Refuse, without changing a byte of it, a file that is not an (empty or) resel store.

    Read through ``immutable=1``: no lock, no journal or WAL recovery, no -shm file, so
    another application's database is only read.
    """
    with open(target, "rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    if not head:
        return      # a new, empty file: the store is made here
    if head != _SQLITE_MAGIC:
        raise StoreError(f"{target} is not a resel run store (not an SQLite database); resel leaves it "
                         "untouched — give the run store with --db or $RESEL_DB")
    conn = sqlite3.connect(_uri(target, "mode=ro&immutable=1"), uri=True)
    try:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        if not tables:
            return
        applied: set[str] = set()
        if Migrations.migrations_table in tables:
            applied = {r[0] for r in conn.execute(
                f"select name from {Migrations.migrations_table} where migration_set = ?", [migrations.name])}
    finally:
        conn.close()
    if not applied:
        shown = ", ".join(sorted(tables)[:6]) + (", …" if len(tables) > 6 else "")
        raise StoreError(f"{target} is not a resel run store: it holds another application's tables ({shown}); "
                         "resel leaves it untouched — give the run store with --db or $RESEL_DB")
    newer = sorted(applied - {m.name for m in migrations._migrations})
    if newer:
        raise StoreError(f"run store {target} was made by a newer resel (its schema has {', '.join(newer)}, "
                         f"which resel {_version()} does not know); upgrade resel, or give another store with --db")


def _version() -> str:
    from resel import __version__
    return __version__


def _use_wal(db: Database, target: Path) -> None:
    """WAL, so readers never block the writer, unless the store is on a network filesystem
    (WAL's shared memory does not work there: SQLite's rollback journal and the busy
    timeout serialise writers instead)."""
    if _filesystem(target) in NETWORK_FILESYSTEMS:
        return
    if db.execute("pragma journal_mode").fetchone()[0] != "wal":
        db.execute("pragma journal_mode = wal")


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


def _migrate(db: Database) -> None:
    """Apply pending migrations holding the write lock, so processes opening a new store at
    once apply each migration exactly once (the others wait, then find nothing pending)."""
    if not migrations.pending(db):
        return
    with db.atomic():
        migrations.apply(db)


#: The tables and columns that the migrations above give an empty store, for :func:`_check_schema`.
#: Applying them to an in-memory store cost every command that opens a store 20-50 ms at each
#: start-up (sqlite-utils inspects each table it changes); while the migrations are these, their
#: result is read from here instead. tests/test_store.py checks it against applying them; with a
#: migration added later they are applied in memory, as before, until this is brought up to date.
_SCHEMA_SNAPSHOT: tuple[tuple[str, ...], dict[str, str]] = (
    ("m001_initial", "m002_live", "m003_pilot_hosts", "m004_profiles", "m005_site_probes", "m006_model_fits",
     "m007_wait_history", "m008_live_notes"),
    {
        "attempts": ("attempt end exit_code host outcome perf pilot reason run_id site start stderr_tail "
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
                 "reassigned restarts run_key seed sites sites_file size status steps strategy t0 tq_wkd ttc_wkd "
                 "tx_wkd wasted_core_s"),
        "site_probes": ("clock_ghz clock_method cpu_mhz cpu_model created cycles error host instructions job_id "
                        "kind site task_clock_s wait_s wall_s"),
        "tasks": "attempts origin run_id site state task tq ttc tx",
        "wait_history": "cores job_id partition site source start submit walltime",
    },
)


@functools.lru_cache(maxsize=1)
def _expected_schema() -> dict[str, frozenset[str]]:
    """Tables and columns a store of this version has: the migrations applied to an empty one
    (read from :data:`_SCHEMA_SNAPSHOT` while it names exactly the migrations there are)."""
    names, tables = _SCHEMA_SNAPSHOT
    if tuple(m.name for m in migrations._migrations) == names:
        return {table: frozenset(columns.split()) for table, columns in tables.items()}
    return _applied_schema()


def _applied_schema() -> dict[str, frozenset[str]]:
    """Tables and columns that applying the migrations to an empty in-memory store gives."""
    db = Store(memory=True)
    migrations.apply(db)
    return {t.name: frozenset(c.name for c in t.columns) for t in db.tables
            if t.name != Migrations.migrations_table}


def _check_schema(db: Database, target: Path) -> None:
    present = {t.name: {c.name for c in t.columns} for t in db.tables}
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


def save_run(db: Database, result, *, experiment_id: int | None = None, events: bool = True) -> int:
    """Write one simulated run (a :class:`~resel.backends.simulated.SimResult`) in one transaction.

    Every row is built before the transaction starts, and inserted with ``executemany``: the
    write lock, which other processes sharing the store wait for, is held only for the inserts
    (about 0.1 s for a 1,024-task run) — not for turning thousands of records into rows.
    """
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
        "events": (("seq", "time", "kind", "data"), list(_event_tuples(result.events)) if events else []),
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


def _event_tuples(log: Iterable[tuple]) -> Iterable[tuple]:
    """The run's events and actions as (seq, time, kind, data) rows: the record's fields but its
    time as JSON ``data`` (the field names of each record type read once)."""
    names: dict[type, tuple[str, ...]] = {}
    dumps = json.dumps
    for seq, (time, kind, record) in enumerate(log):
        cls = type(record)
        fields = names.get(cls)
        if fields is None:
            fields = names[cls] = tuple(f.name for f in dataclasses.fields(record) if f.name != "time")
        yield seq, time, kind, dumps({f: getattr(record, f) for f in fields})


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
