"""`resel status` from the coordinator's summary (issue 29 §2): the same output as the replay
of the journal, byte for byte, on runs stored by the real coordinator (its sites answered on
paper: benchmarks/bench_status.py's PaperRun) — finished, mid-run (tasks waiting, running,
handed ahead, re-selected, failed), with a site given up, cancelled, and resumed after a crash;
the summary written in the transaction of the rows it covers, never ahead of them."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_status import PaperRun, paper_site, without_summary  # noqa: E402

import resel.live.summary as summary  # noqa: E402
from resel.live.coordinator import Coordinator  # noqa: E402
from resel.live.resume import replay  # noqa: E402
from resel.live.view import COLUMNS  # noqa: E402
from resel.states import AttemptOutcome, PilotState, TaskState  # noqa: E402
from resel.store import open_store  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _sites():
    """A fast cluster, one whose pilot waits long (its tasks are re-selected), a per-task pool."""
    return [paper_site("hpc", 8), paper_site("slow", 4, 3.0), paper_site("pool", 3, 1.0, mode="per-task",
                                                                           max_pilots=3)]


def _run(db, tasks: int = 240, **kw) -> PaperRun:
    run = PaperRun(db, tasks, _sites(), strategy=kw.pop("strategy", "topk:3+reselect"),
                   waits={"hpc": (1, 3), "slow": (60, 80), "pool": (2, 10)}, run_time=(4.0, 12.0),
                   fail=kw.pop("fail", 0.3), lose=kw.pop("lose", 0.15), seed=kw.pop("seed", 3), **kw)
    run.start()
    return run


def _recount(engine) -> dict:
    """The counts by their definition (docs/live.md's `resel status`), every task and pilot of
    the engine counted from scratch: pilots pending and running per site; tasks queued (waiting
    or handed ahead, or asked back) on their origin, running (or provisional, in a window) where
    they run, done where their finished attempt ran, failed on their origin."""
    names = [s.name for s in engine.sites]
    rows = {n: dict.fromkeys(COLUMNS, 0) for n in names}
    for p in engine.pilots.values():
        if p.state is PilotState.PENDING:
            rows[names[p.site]]["pilots_pending"] += 1
        elif p.state is PilotState.ACTIVE:
            rows[names[p.site]]["pilots_running"] += 1
    for t in engine.tasks:
        if t.state in (TaskState.WAITING, TaskState.QUEUED, TaskState.RECALLED):
            rows[names[t.origin]]["queued"] += 1
        elif t.state in (TaskState.RUNNING, TaskState.PROVISIONAL):
            rows[names[t.site]]["running"] += 1
        elif t.state is TaskState.DONE:
            rows[names[[a for a in t.attempts if a.outcome is AttemptOutcome.DONE][-1].site]]["done"] += 1
        elif t.state is TaskState.FAILED:
            rows[names[t.origin]]["failed"] += 1
    quarantined = engine.quarantined
    return {"total": len(engine.tasks), "done": sum(t.state is TaskState.DONE for t in engine.tasks),
            "failed": sum(t.state is TaskState.FAILED for t in engine.tasks),
            "sites": [{"site": n, **rows[n], "lost": engine.lost_sites.get(n),
                       "quarantined": quarantined[n].reason if n in quarantined else None,
                       "quarantined_until": quarantined[n].until if n in quarantined else None,
                       "longest_running": _longest_running(engine, i)} for i, n in enumerate(names)]}


def _longest_running(engine, x: int) -> list | None:
    """By its definition (resel/engine_overdue.py): of the attempts running (or provisional) on
    site x, the earliest started (the lowest task on a tie), with its overdue limit — max(600 s,
    10 × the longest attempt that ended well on x) once 3 did, None before (these bags are of
    equal tasks; no task here was cancelled as overdue)."""
    running = sorted((t.attempts[-1].start, t.id) for t in engine.tasks
                     if t.state in (TaskState.RUNNING, TaskState.PROVISIONAL) and t.site == x)
    if not running:
        return None
    start, tid = running[0]
    ended = [a.end - a.start for t in engine.tasks for a in t.attempts
             if a.site == x and a.outcome is AttemptOutcome.DONE]
    return [tid, start, max(600.0, 10 * max(ended)) if len(ended) >= 3 else None]


@pytest.mark.parametrize("seed, strategy", [(3, "topk:3+reselect"), (5, "auto"), (8, "model+reselect")])
def test_the_tally_follows_the_engine_event_by_event(tmp_path, seed, strategy):
    """After every instant fed, the coordinator's tally equals the engine counted whole — through
    failures, pilots lost under their tasks, windows opened and committed or moved back, a site
    given up and the bag cancelled."""
    db = open_store(tmp_path / "s.db")
    run = _run(db, 150, seed=seed, strategy=strategy)
    seen = Counter()
    steps = 0
    while not run.done and run.step():
        steps += 1
        assert run.coord.summary.tally.summary() == _recount(run.coord.engine), f"after {run.events} events"
        seen.update(t.state for t in run.coord.engine.tasks)
        if steps == 150:
            run.lose_site("pool")
            assert run.coord.summary.tally.summary() == _recount(run.coord.engine)
        if steps == 300:
            break
    run.cancel()
    assert run.coord.summary.tally.summary() == _recount(run.coord.engine)
    # failed and re-selected (provisional) tasks are asked of the stored fixtures below
    assert {TaskState.QUEUED, TaskState.RUNNING, TaskState.DONE, TaskState.WAITING} <= set(seen)


def _status(db: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "resel.cli", "status", "--db", str(db), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _same_as_the_replay(tmp_path: Path, db_path: Path, run_id: int) -> str:
    """Status from the summary (checked to be the path taken) against status from a copy without
    it (the replay), human and --json; returns the table."""
    reader = sqlite3.connect(db_path)
    reader.row_factory = sqlite3.Row

    class R:   # what summary.read asks of a store
        conn = reader

        def table_names(self):
            return [r[0] for r in reader.execute("select name from sqlite_master where type = 'table'")]

        def query(self, sql, params=()):
            return (dict(r) for r in reader.execute(sql, params))
    assert summary.read(R(), run_id) is not None, "status would not use the summary"
    reader.close()
    copy = without_summary(db_path, tmp_path / "replayed.db")
    human, as_json = _status(db_path), _status(db_path, "--json")
    assert human == _status(copy) and as_json == _status(copy, "--json")
    return human


#: what a run stored mid-run holds at once (the mid-run fixtures stop at the first instant it does)
EVERY_STATE = {TaskState.WAITING, TaskState.QUEUED, TaskState.RUNNING, TaskState.PROVISIONAL, TaskState.DONE,
               TaskState.FAILED}


def _stored(tmp_path: Path, what: str) -> tuple[Path, int, PaperRun]:
    path = tmp_path / "s.db"
    db = open_store(path)
    run = _run(db, seed=1)
    if what == "finished":
        run.run()
        assert run.done
        run.finish()
    else:
        while not EVERY_STATE <= {t.state for t in run.coord.engine.tasks}:   # waiting, handed ahead,
            assert not run.done and run.step()            # running, re-selected, done, failed at once
        if what == "site lost":
            run.lose_site("slow")
            run.run(until=run.events + 100)
        elif what == "cancelled":
            run.cancel()
    return path, run.run_id, run


@pytest.mark.parametrize("what", ["finished", "mid-run", "site lost", "cancelled"])
def test_status_prints_the_same_from_the_summary_as_from_the_replay(tmp_path, what):
    path, run_id, _run_ = _stored(tmp_path, what)
    table = _same_as_the_replay(tmp_path, path, run_id)
    assert {"finished": "(done)", "mid-run": "(running)", "site lost": "gave up", "cancelled": "(cancelled)"}[what] \
        in table


#: what printing a run from its stored counts needs none of: the event classes (the journal's
#: decoding), the bag and sites (resel.domain), the engine and its books (a replay's)
NOT_FOR_THE_SUMMARY = ("resel.events", "resel.journal", "resel.domain", "resel.engine", "resel.engine_books")


@pytest.mark.parametrize("args", [(), ("--json",)], ids=["table", "json"])
def test_status_from_the_summary_loads_no_event_domain_or_engine_module(tmp_path, args):
    """Most of `resel status`'s CPU was its imports (issue 29: 0.2-0.3 s a call, one call at
    1.11 s under load); from a summary it builds none of a replay's objects, so it loads none of
    their modules — and the replay (no summary row) still does, to count."""
    path, _run_id, _r = _stored(tmp_path, "mid-run")
    probe = ("import runpy, sys; sys.argv = ['resel', 'status', '--db', sys.argv[1], *sys.argv[2:]]\n"
             "try:\n    runpy.run_module('resel.cli', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('MODULES', ' '.join(sorted(m for m in sys.modules if m.startswith('resel'))))")

    def loaded(db: Path) -> set[str]:
        done = subprocess.run([sys.executable, "-c", probe, str(db), *args], capture_output=True, text=True,
                              cwd=REPO, timeout=120)
        assert done.returncode == 0, done.stderr
        return set(done.stdout.rsplit("MODULES", 1)[1].split())
    assert not set(NOT_FOR_THE_SUMMARY) & loaded(path), sorted(set(NOT_FOR_THE_SUMMARY) & loaded(path))
    assert {"resel.events", "resel.engine"} <= loaded(without_summary(path, tmp_path / "replayed.db"))


def test_a_run_resumed_after_a_crash_keeps_its_summary(tmp_path):
    """Killed mid-run (the coordinator gone without a word), resumed: the new coordinator counts
    its replayed engine once and goes on; status still prints what the replay prints."""
    path, run_id, run = _stored(tmp_path, "mid-run")
    old = run.coord
    fresh = Coordinator(old.db, run_id, old.bag, old.sites, old.options, old.run_key, old.t0, run._no_site,
                        clock=old.clock)
    replay(fresh)                      # what Coordinator.resume does before it reads the sites
    assert fresh.seq == old.seq
    fresh.acts.execute = run._act
    run.coord = fresh
    run.run(until=run.events + 300)
    assert fresh.summary.tally is not None and fresh.summary.tally.summary() == _recount(fresh.engine)
    _same_as_the_replay(tmp_path, path, run_id)


def test_the_summary_is_written_with_its_rows_or_not_at_all(tmp_path):
    """A crash inside the transaction (here: the summary's own write failing) leaves neither the
    event's rows nor a summary ahead of them; a row a resel without summaries appends makes the
    stored summary stale, and status replays."""
    path, run_id, run = _stored(tmp_path, "mid-run")
    db = run.coord.db
    rows = db.execute("select count(*) from events where run_id = ?", [run_id]).fetchone()[0]

    def crash(*args):
        raise RuntimeError("killed")
    saved = run.coord.summary.save
    run.coord.summary.save = crash
    with pytest.raises(RuntimeError):
        run.step()
    assert db.execute("select count(*) from events where run_id = ?", [run_id]).fetchone()[0] == rows
    assert summary.read(db, run_id) is not None
    run.coord.summary.save = saved
    from resel.events import SetTimer
    run.coord.record(run.t, SetTimer(at=1e9, task=0, attempt=1), 0)     # as an older resel would: no summary
    assert summary.read(db, run_id) is None


def test_the_status_benchmark_stores_its_run(tmp_path):
    """benchmarks/bench_status.py's own recipe (a transaction per 2,000 events around the
    coordinator's turns) stopped working unnoticed when a turn began to refuse an outer
    transaction: its store is built here, small, to the end."""
    from bench_status import build
    seen = [figures for _run_id, figures in build(tmp_path / "b.db", 300, (0.5, 1.0))]
    assert [f["fraction"] for f in seen] == [0.5, 1.0] and seen[-1]["done"] == 300
