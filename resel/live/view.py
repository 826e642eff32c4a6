"""What a live run looks like right now: per-site pilot and task counts, and the bag's progress.

Computed from an engine's state, so the live display (inside the coordinator) and
``resel status`` (another process, which rebuilds the engine by replaying the stored events)
show the same numbers; what the coordinator noticed besides events (a site not answering and
since when, a job state resel does not know, a relaunched agent, records skipped) comes from
its view inside the run and from ``live_notes`` in ``resel status``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from resel.errors import IllegalTransition
from resel.live.notes import SiteNotes
from resel.live.notes import read as read_notes
from resel.safe_text import markup
from resel.states import AttemptOutcome, PilotState, TaskState

if TYPE_CHECKING:
    from rich.table import Table

    from sqlite_utils import Database

    from resel.engine import Engine
    from resel.engine_books import PilotRecord, TaskRecord
    from resel.store import StoreReader

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
    #: quarantined as a black hole: the counts that decided it and until when (docs/engine.md)
    quarantined: str | None = None
    quarantined_until: float | None = None
    #: seconds since the run started at which the site stopped answering (None: it answers)
    not_answering_since: float | None = None
    bad_records: int = 0
    notes: list[str] = field(default_factory=list)
    #: the attempt running longest there: task, seconds it has run, its overdue limit (None:
    #: none yet, its rerun, or the rule off) — engine_overdue; None: nothing runs
    longest_running: dict | None = None


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
             errors: dict[str, str | None] | None = None, notes: dict[str, SiteNotes] | None = None) -> Snapshot:
    """Counts per site: queued = waiting (or handed ahead) with the site as origin, running/done
    where they run; ``notes`` what the coordinator noticed per site."""
    names = [s.name for s in engine.sites]
    rows = {n: SiteRow(n, error=(errors or {}).get(n), lost=engine.lost_sites.get(n)) for n in names}
    for name, health in engine.quarantined.items():
        rows[name].quarantined, rows[name].quarantined_until = health.reason, health.until
    _add_notes(rows, notes)
    for i, name in enumerate(names):
        rows[name].longest_running = _longest(engine.longest_running(i), elapsed)
    for pilot in engine.pilots.values():
        cell = pilot_cell(pilot)
        if cell is not None:
            _count(rows[names[cell[1]]], cell[0])
    for task in engine.tasks:
        cell = task_cell(task)
        if cell is not None:
            _count(rows[names[cell[1]]], cell[0])
    return Snapshot(run_id, status, elapsed, len(engine.tasks), engine.done_count, engine.failed_count,
                    list(rows.values()))


def summary_snapshot(summary: dict[str, Any], run_id: int, status: str, elapsed: float,
                     notes: dict[str, SiteNotes] | None = None, errors: dict[str, str | None] | None = None
                     ) -> Snapshot:
    """The same snapshot from the counts the coordinator keeps (:mod:`resel.live.summary`):
    what ``resel status`` shows of a run without replaying its journal, and ``resel run``'s
    live table without counting every task again at each turn."""
    rows = {s["site"]: SiteRow(s["site"], error=(errors or {}).get(s["site"]), lost=s["lost"],
                               quarantined=s["quarantined"], quarantined_until=s["quarantined_until"])
            for s in summary["sites"]}
    _add_notes(rows, notes)
    for s in summary["sites"]:
        for column in COLUMNS:
            setattr(rows[s["site"]], column, s[column])
        longest = s.get("longest_running")      # (a summary stored before it has none)
        rows[s["site"]].longest_running = _longest(longest, elapsed) if longest else None
    return Snapshot(run_id, status, elapsed, summary["total"], summary["done"], summary["failed"],
                    list(rows.values()))


#: the counted columns of a site's row, each a cell of :func:`task_cell` or :func:`pilot_cell`
COLUMNS = ("pilots_pending", "pilots_running", "queued", "running", "done", "failed")


def task_cell(task: TaskRecord) -> tuple[str, int] | None:
    """Where a task is counted: ("queued", its origin) while waiting or handed ahead,
    ("running", its site), ("done", the site of its finished attempt), ("failed", its origin);
    None otherwise (its outputs on their way home, or cancelled)."""
    state = task.state
    if state is TaskState.WAITING or state is TaskState.QUEUED or state is TaskState.RECALLED:
        return "queued", task.origin
    if state is TaskState.RUNNING or state is TaskState.PROVISIONAL:
        return "running", task.site
    if state is TaskState.DONE:
        return "done", next(a for a in reversed(task.attempts) if a.outcome == AttemptOutcome.DONE).site
    if state is TaskState.FAILED:
        return "failed", task.origin
    return None


def pilot_cell(pilot: PilotRecord) -> tuple[str, int] | None:
    """Where a pilot is counted: pending or running on its site; None once it ended."""
    if pilot.state is PilotState.PENDING:
        return "pilots_pending", pilot.site
    if pilot.state is PilotState.ACTIVE:
        return "pilots_running", pilot.site
    return None


def _longest(found: tuple | list | None, elapsed: float) -> dict | None:
    """(task, start, limit) of a site's longest running attempt as a row shows it at
    ``elapsed`` seconds into the run."""
    if found is None:
        return None
    tid, start, limit = found
    return {"task": tid, "ran": max(0.0, elapsed - start), "limit": limit}


def _count(row: SiteRow, column: str) -> None:
    setattr(row, column, getattr(row, column) + 1)


def _add_notes(rows: dict[str, SiteRow], notes: dict[str, SiteNotes] | None) -> None:
    for name, found in (notes or {}).items():
        if name in rows:
            row = rows[name]
            row.not_answering_since, row.bad_records, row.notes = (found.not_answering_since, found.bad_records,
                                                                   list(found.lines))
            if found.not_answering and not row.error:
                row.error = found.not_answering


def table(snap: Snapshot) -> Table:
    """The rich table the live display and ``resel status`` print (rich imported here: ``resel
    status --json`` prints none)."""
    from rich import box
    from rich.table import Table

    from resel.units import span
    t = Table(title=f"run {snap.run_id} ({markup(snap.status)}) — {snap.done}/{snap.total} done, {snap.failed} failed, "
                    f"{'TTC' if snap.status == 'done' else 'TTC so far'} {span(snap.elapsed)}", title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("site", "pilots pending", "pilots running", "queued", "running", "done", "failed", "note"):
        t.add_column(col, justify="left" if col in ("site", "note") else "right")
    for r in snap.sites:
        t.add_row(markup(r.site), str(r.pilots_pending), str(r.pilots_running), str(r.queued), str(r.running),
                  str(r.done), str(r.failed), markup("; ".join(site_notes(r))))
    return t


def site_notes(r: SiteRow) -> list[str]:
    """The note column: given up, not answering (since when), job states, relaunches, skips."""
    from resel.units import span
    out = []
    if r.lost:
        out.append(f"gave up: {r.lost}")
    if r.quarantined:
        out.append(f"quarantined until {span(r.quarantined_until)} (black hole: {r.quarantined})")
    if r.not_answering_since is not None:
        out.append(f"not answering since {span(r.not_answering_since)}" + (f" ({r.error})" if r.error else ""))
    elif r.error and not (r.lost and r.error in r.lost):     # a site given up for it: said once
        out.append(f"error: {r.error}")
    out += r.notes
    longest = r.longest_running
    if longest and longest["limit"] and longest["ran"] >= longest["limit"] / 2:
        when = ("overdue: cancelled and run again at the next sweep" if longest["ran"] >= longest["limit"]
                else f"overdue at {span(longest['limit'])}: then cancelled and run again")
        out.append(f"task {longest['task']} has run {span(longest['ran'])} ({when})")
    if r.bad_records:
        out.append(f"{r.bad_records} bad record(s) skipped")
    return out


def replayed_engine(db: Database | StoreReader, run_id: int) -> tuple[Engine, dict]:
    """A fresh engine fed the run's recorded events (read-only: touches no site)."""
    from resel import journal
    from resel.engine import Engine    # here: status from a stored summary builds no engine
    from resel.live.stored import load_live_run

    run, bag, sites, options = load_live_run(db, run_id)
    engine = Engine(bag, sites, options.strategy, **options.engine_options())
    for row in journal.rows(db, run_id):
        if journal.is_event(row["kind"]):
            try:
                engine.handle(journal.decode(row["kind"], row["time"], row["data"]))
            except (IllegalTransition, TypeError, ValueError) as exc:   # a record an older resel let in
                import logging   # here: only a damaged record needs it (8 ms of every status otherwise)
                logging.getLogger("resel.live").warning("run %s: recorded %s #%s skipped: %s", run_id, row["kind"],
                                                        row["seq"], exc)
    return engine, run


def stored_notes(db: Database | StoreReader, run_id: int) -> dict[str, SiteNotes]:
    """What the run's coordinator noticed, per site (``live_notes``)."""
    return read_notes(db, run_id)
