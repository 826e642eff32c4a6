"""Choosing stored runs (``resel runs`` filters) and removing them (``resel prune``).

A default ``resel simulate`` stores 75 runs and ~14 MB; an afternoon of them made a 218 MB
store that nothing could shrink. Runs are chosen here by kind, experiment, id and age; a
chosen run is removed with every row of it (each table keyed by ``run_id``) and experiments
left without runs go too; the file is then compacted (``VACUUM``) when no other process holds
the store. A live run that has not finished (running, or being cancelled: ``resel run
--resume`` and ``resel cancel`` still need it) is never removed, whatever was asked.

Standard library only (the reading side of the store, :class:`resel.store.StoreReader`, and a
writer's connection answer the same ``query``), so ``resel runs`` stays fast to start.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from resel.errors import ReselError

#: every table that holds rows of a run, by ``run_id`` (the migrations' m001, m002, m008, m009;
#: tests/test_first_hour.py checks the list against every ``run_id`` column a new store has)
RUN_TABLES = ("tasks", "pilots", "decisions", "events", "attempts", "live_pilots", "live_notes",
              "task_inputs", "site_files", "task_outputs")
#: a live run in one of these states is over; in any other it may still be resumed or cancelled
FINISHED = ("done", "cancelled")
#: kinds of run, as ``--kind`` names them, and the ``mode`` column's values
KINDS = {"simulated": "simulated", "live": "live"}

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|min|m|h|d|w)\s*", re.IGNORECASE)
_AGE_SECONDS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def moment(text: str, *, now: _dt.datetime | None = None) -> str:
    """The instant ``text`` names, as the store writes ``created`` (ISO 8601 in UTC, to the
    second), for comparing with it: an age back from now (``30d``, ``12h``, ``90min``, ``2w``)
    or a date or date and time (``2026-11-01``, ``2026-11-01T08:00``; UTC unless it names its
    offset).

    Raises:
        ReselError: neither an age nor a date, naming both forms.
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    age = _AGE.fullmatch(text)
    if age:
        try:
            when = now - _dt.timedelta(seconds=float(age.group(1)) * _AGE_SECONDS[age.group(2).lower()])
        except OverflowError:    # older than the calendar (99999999999w): before any run
            when = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    else:
        try:
            when = _dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise ReselError(f"{text!r} is neither an age nor a date",
                             hint="give an age such as 30d, 12h, 90min or 2w, or a date such as 2026-11-01") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
    return when.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


#: the largest id SQLite can store (a signed 64-bit integer)
MAX_ID = 2 ** 63 - 1


def run_ids(text: str) -> list[int]:
    """``3``, ``3,7`` or ``3-9,12``: run ids (a range counts both ends).

    Raises:
        ReselError: anything else.
    """
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        if not (low.isdigit() and (not dash or high.isdigit())) or (dash and int(high) < int(low)):
            raise ReselError(f"{text!r}: {part!r} is not a run id or a range of them",
                             hint="give run ids such as 3, 3,7 or 3-9 (`resel runs` lists them)")
        if max(int(low), int(high or 0)) > MAX_ID:
            raise ReselError(f"{text!r}: {part!r} is beyond any run id (at most {MAX_ID:,})",
                             hint="`resel runs` lists the stored runs and their ids")
        if len(ids) + (int(high) - int(low) + 1 if dash else 1) > 1_000_000:   # before the list is made: 1-1e9
            raise ReselError(f"{text!r} names more than a million runs", hint="use --older-than or --experiment")
        ids += range(int(low), int(high) + 1) if dash else [int(low)]
    return ids


def where(*, kind: str | None = None, experiment: int | None = None, since: str | None = None,
          before: str | None = None, ids: Iterable[int] | None = None) -> tuple[str, list[Any]]:
    """The SQL condition on ``runs`` (and its parameters) that chooses runs by kind, experiment,
    creation time (``since`` ≤ created ≤ ``before``, both as :func:`moment` gives them) and id."""
    clauses, params = [], []
    if kind is not None:
        clauses.append("mode = ?")
        params.append(KINDS[kind])
    if experiment is not None:
        clauses.append("experiment_id = ?")
        params.append(experiment)
    if since is not None:
        clauses.append("created >= ?")
        params.append(since)
    if before is not None:      # inclusive: ``created`` has whole seconds, and --older-than 0d means every run
        clauses.append("created <= ?")
        params.append(before)
    if ids is not None:
        ids = sorted(set(ids))
        # one parameter whatever the count (a million ids as as many `?` is more than SQLite takes)
        clauses.append("id in (select value from json_each(?))")
        params.append(json.dumps(ids))
    return (" and ".join(clauses) or "1"), params


def list_runs(db: Any, limit: int, **filters: Any) -> list[dict]:
    """The newest ``limit`` runs that the filters of :func:`where` choose, newest first, with
    what ``resel runs`` shows."""
    cond, params = where(**filters)
    return list(db.query(
        "select id, experiment_id, created, mode, status, bag, strategy, size, seed, ttc_wkd, tx_wkd, tq_wkd, "
        f"done, failed, reassigned from runs where {cond} order by id desc limit ?", [*params, limit]))


@dataclass
class Pruning:
    """What ``resel prune`` removes (or, dry, would remove), and what it keeps though chosen."""

    runs: list[dict] = field(default_factory=list)          # id, experiment_id, created, mode, status
    kept: list[dict] = field(default_factory=list)          # live runs not finished: id and why
    experiments: list[int] = field(default_factory=list)    # experiments left without runs, removed too
    rows: dict[str, int] = field(default_factory=dict)      # rows removed per table
    bytes_before: int | None = None
    bytes_after: int | None = None
    compacted: str | None = None                            # why the file was not compacted, if it was not

    def as_dict(self) -> dict:
        return {"runs": [r["id"] for r in self.runs], "experiments": self.experiments, "kept": self.kept,
                "rows": self.rows, "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "not_compacted": self.compacted}


def choose(db: Any, **filters: Any) -> Pruning:
    """The runs the filters choose, split into those to remove and the live ones kept (not
    finished), with the rows of each table they hold and the experiments they would empty."""
    cond, params = where(**filters)
    chosen = list(db.query(f"select id, experiment_id, created, mode, status from runs where {cond} order by id",
                           params))
    out = Pruning()
    for r in chosen:
        if r["mode"] == "live" and r["status"] not in FINISHED:
            out.kept.append({"run": r["id"], "status": r["status"],
                             "why": f"live run {r['id']} is {r['status'] or 'not finished'}: "
                                    f"`resel cancel {r['id']}` first, or let it finish"})
        else:
            out.runs.append(r)
    ids = [r["id"] for r in out.runs]
    tables = set(db.table_names())
    for table in RUN_TABLES:
        if table in tables and ids:
            out.rows[table] = sum(next(iter(db.query(f"select count(*) as n from [{table}] where run_id in "
                                                     f"({', '.join('?' * len(chunk))})", chunk)))["n"]
                                  for chunk in _chunks(ids))
    out.rows["runs"] = len(ids)
    touched = sorted({r["experiment_id"] for r in out.runs if r["experiment_id"] is not None})
    for exp in touched:
        left = next(iter(db.query("select count(*) as n from runs where experiment_id = ?", [exp])))["n"]
        if left == sum(1 for r in out.runs if r["experiment_id"] == exp):
            out.experiments.append(exp)
    out.rows["experiments"] = len(out.experiments)
    return out


def remove(db: Any, pruning: Pruning, path: Path) -> Pruning:
    """Delete the chosen runs' rows in one transaction, then compact the file (VACUUM) if no
    other process holds the store; sizes before and after are recorded (file and write-ahead
    log together). A store another process holds keeps its freed pages (SQLite reuses them,
    so it grows no further) and says so."""
    pruning.bytes_before = _size(path)
    ids = [r["id"] for r in pruning.runs]
    tables = set(db.table_names())
    with db.conn:
        for chunk in _chunks(ids):
            marks = ", ".join("?" * len(chunk))
            for table in RUN_TABLES:
                if table in tables:
                    db.conn.execute(f"delete from [{table}] where run_id in ({marks})", chunk)
            db.conn.execute(f"delete from runs where id in ({marks})", chunk)
        for chunk in _chunks(pruning.experiments):
            db.conn.execute(f"delete from experiments where id in ({', '.join('?' * len(chunk))})", chunk)
    try:
        db.conn.execute("pragma busy_timeout = 2000")
        db.conn.execute("vacuum")
        db.conn.execute("pragma wal_checkpoint(truncate)")
    except Exception as exc:   # noqa: BLE001 - sqlite3.OperationalError: another process holds the store
        pruning.compacted = (f"the file was not compacted ({exc}): another resel holds the store; SQLite reuses "
                             "the freed space, and the next `resel prune` compacts it")
    pruning.bytes_after = _size(path)
    return pruning


def _chunks(ids: list[int], size: int = 500) -> Iterable[list[int]]:
    """Ids in groups SQLite takes as parameters of one statement (its limit is 999 in old builds)."""
    for at in range(0, len(ids), size):
        yield ids[at:at + size]


def _size(path: Path) -> int:
    """The store's bytes on disk: the file and its write-ahead log."""
    total = 0
    for p in (path, Path(f"{path}-wal")):
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total
