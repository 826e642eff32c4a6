"""What a live run looks like right now: per-site pilot and task counts, and the bag's progress.

Computed from an engine's state, so the live display (inside the coordinator) and
``resel status`` (another process, which rebuilds the engine by replaying the stored events)
show the same numbers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.table import Table
from sqlite_utils import Database

from resel.engine import Engine
from resel.states import PilotState, TaskState


@dataclass
class SiteRow:
    site: str
    pilots_pending: int = 0
    pilots_running: int = 0
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    error: str | None = None
    lost: str | None = None


@dataclass
class Snapshot:
    run_id: int
    status: str
    elapsed: float
    total: int
    done: int
    failed: int
    sites: list[SiteRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot(engine: Engine, run_id: int, status: str, elapsed: float,
             errors: dict[str, str | None] | None = None) -> Snapshot:
    """Counts per site: queued = waiting with the site as origin, running/done where they run."""
    names = [s.name for s in engine.sites]
    rows = {n: SiteRow(n, error=(errors or {}).get(n), lost=engine.lost_sites.get(n)) for n in names}
    for pilot in engine.pilots.values():
        row = rows[names[pilot.site]]
        if pilot.state is PilotState.PENDING:
            row.pilots_pending += 1
        elif pilot.state is PilotState.ACTIVE:
            row.pilots_running += 1
    for task in engine.tasks:
        if task.state is TaskState.WAITING:
            rows[names[task.origin]].queued += 1
        elif task.state in (TaskState.RUNNING, TaskState.PROVISIONAL):
            rows[names[task.site]].running += 1
        elif task.state is TaskState.DONE:
            final = next(a for a in reversed(task.attempts) if a[4] == "done")
            rows[names[final[0]]].done += 1
        elif task.state is TaskState.FAILED:
            rows[names[task.origin]].failed += 1
    return Snapshot(run_id, status, elapsed, len(engine.tasks), engine.done_count, engine.failed_count,
                    list(rows.values()))


def table(snap: Snapshot) -> Table:
    """The rich table the live display and ``resel status`` print."""
    t = Table(title=f"run {snap.run_id} ({snap.status}) — {snap.done}/{snap.total} done, {snap.failed} failed, "
                    f"{'TTC' if snap.status == 'done' else 'TTC so far'} {snap.elapsed:,.0f} s", title_justify="left")
    for col in ("site", "pilots pending", "pilots running", "queued", "running", "done", "failed", "note"):
        t.add_column(col, justify="left" if col in ("site", "note") else "right")
    for r in snap.sites:
        note = f"gave up: {r.lost}" if r.lost else (f"error: {r.error}" if r.error else "")
        t.add_row(r.site, str(r.pilots_pending), str(r.pilots_running), str(r.queued), str(r.running),
                  str(r.done), str(r.failed), note)
    return t


def replayed_engine(db: Database, run_id: int) -> tuple[Engine, dict]:
    """A fresh engine fed the run's recorded events (read-only: touches no site)."""
    from resel.live import EVENT_TYPES, load_live_run

    run, bag, sites, options = load_live_run(db, run_id)
    engine = Engine(bag, sites, options.strategy, seed=options.seed, clock=options.clock,
                    rates=options.engine_rates())
    for row in db.query("select kind, time, data from events where run_id = ? order by seq", [run_id]):
        if row["kind"] in EVENT_TYPES:
            engine.handle(EVENT_TYPES[row["kind"]](time=row["time"], **json.loads(row["data"])))
    return engine, run
