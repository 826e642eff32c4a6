"""The run store: one SQLite file, opened through :func:`open_store`, which applies migrations.

Tables are named after the domain so users can query them with ``sqlite-utils`` or
Datasette: ``experiments`` (one ``resel simulate`` call), ``runs`` (one bag × strategy × size ×
seed), ``tasks`` (per-task T_q/T_x/TTC), ``pilots``, ``decisions`` (every engine choice with its
inputs) and ``events`` (every event and action, in order).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import sqlite_utils
from sqlite_utils import Database, Migrations

from resel.errors import StoreError

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


def open_store(path: str | Path | None = None, *, memory: bool = False) -> Database:
    """Open (creating if needed) the store and bring its schema up to date.

    Raises:
        StoreError: the file cannot be created or is not a resel store.
    """
    try:
        if memory:
            db = Database(memory=True)
        else:
            target = Path(path) if path else default_path()
            target.parent.mkdir(parents=True, exist_ok=True)
            db = Database(target)
        migrations.apply(db)
        return db
    except (OSError, sqlite_utils.db.sqlite3.DatabaseError) as exc:
        raise StoreError(f"cannot open run store {path or default_path()}: {exc}") from None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, dataclasses become dicts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _clean(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_json(value: Any) -> str:
    return json.dumps(_clean(value), default=str)


def add_experiment(db: Database, params: dict) -> int:
    return db["experiments"].insert({"created": _now(), "params": to_json(params)}).last_pk


def save_run(db: Database, result, *, experiment_id: int | None = None, events: bool = True) -> int:
    """Write one simulated run (a :class:`~resel.backends.simulated.SimResult`) in one transaction."""
    from resel.metrics import task_times

    m = result.metrics
    names = [s.name for s in result.sites]
    with db.atomic():
        run_id = db["runs"].insert({
            "experiment_id": experiment_id, "created": _now(), "mode": "simulated",
            "bag": result.bag.name, "strategy": result.strategy, "size": result.bag.count,
            "seed": result.seed, "clock": result.engine_clock, "ttc_wkd": m.ttc_wkd, "tx_wkd": m.tx_wkd,
            "tq_wkd": m.tq_wkd, "done": m.done, "failed": m.failed, "reassigned": m.reassigned,
            "restarts": m.restarts, "wasted_core_s": m.wasted_core_s, "per_site": to_json(m.per_site),
            "audit": to_json(result.audit.as_dict()), "sites": to_json(result.sites),
            "bag_spec": to_json(result.bag), "steps": result.steps,
        }).last_pk
        db["tasks"].insert_all(
            ({"run_id": run_id, **_clean(dataclasses.asdict(t))} for t in task_times(result.engine.tasks, names)),
            batch_size=1000)
        db["pilots"].insert_all(
            ({"run_id": run_id, "pilot": p.id, "site": names[p.site], "cores": p.cores,
              "submitted": p.submitted, "start": p.start, "started": int(p.started),
              "cancelled": int(p.cancelled)} for p in result.pilots), batch_size=1000)
        db["decisions"].insert_all(
            ({"run_id": run_id, "seq": i, **_clean(dataclasses.asdict(d))} for i, d in enumerate(result.decisions)),
            batch_size=1000)
        if events:
            db["events"].insert_all(_event_rows(run_id, result.events), batch_size=2000)
    return run_id


def _event_rows(run_id: int, log: Iterable[tuple]) -> Iterable[dict]:
    for seq, (time, kind, record) in enumerate(log):
        data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "time"}
        yield {"run_id": run_id, "seq": seq, "time": time, "kind": kind, "data": json.dumps(data)}


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
        run[key] = json.loads(run[key]) if run[key] else None
    return run
