"""A pending pilot withdrawn while its agent, unseen, has claimed the task handed ahead to it
(issue 29 §1: the crash soak's withdrawal window).

The engine gives a withdrawn pilot's handed-ahead tasks back at once and hands them to a free
slot elsewhere in the same decision (tests/test_engine.py pins it: no later event may come to
fill that slot). Live, the pilot may have started between the coordinator's last read and the
stop reaching it, and its agent may have claimed the inbox file: the new attempt must then not
run while the old one does. These tests drive the real coordinator, its site threads and the
real file protocol with real agents (``resel/shipped/agent.py`` as subprocesses); only the
scheduler is a stand-in, whose answers the test sets — a pilot it still lists as pending while
its agent runs (its answer lags), and a cancel that reaches the node only when the test says.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resel.backends.jobs import JobInfo, JobState
from resel.backends.pilotsite import PilotSite
from resel.backends.transport import LocalTransport
from resel.config import load_bag, load_sites
from resel.events import BagSubmitted
from resel.live.coordinator import Coordinator
from resel.live.stored import LiveOptions
from resel.shipped import agent as agent_module
from resel.states import PilotState
from resel.store import open_store, to_json
from agent_files import keyed, run_records
from waiting import wait_until

#: task 1's first attempt runs until it is killed; every other attempt ends at once
COMMAND = 'test "$RESEL_TASK-$RESEL_ATTEMPT" != 1-1 || sleep 60'


class LaggingScheduler:
    """A scheduler whose pilots run only when the test starts their agents (real subprocesses
    of resel's agent), that lists a pilot as pending for as long as the test says even while its
    agent runs, and whose cancel of a ``late`` job reaches the agent only on :meth:`deliver`."""

    scheduler = "slurm"

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str]] = {}         # job id -> (name, pilot dir)
        self.agents: dict[str, subprocess.Popen] = {}
        self.shown_running: set[str] = set()
        self.cancelled: set[str] = set()
        self.late: set[str] = set()

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None, **_: object) -> str:
        job = str(100 + len(self.names))
        self.names[job] = (name, workdir)
        return job

    def start_agent(self, job: str, poll: float) -> None:
        """The batch job starts: resel's agent on the pilot's directory, one slot."""
        _name, pdir = self.names[job]
        self.agents[job] = subprocess.Popen(
            [sys.executable, agent_module.__file__, "--dir", pdir, "--pilot", pdir.rsplit("p", 1)[1], "--slots", "1",
             "--walltime", "600", "--poll", str(poll)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def deliver(self, job: str) -> None:
        """The cancel reaches the node: the agent gets scancel's SIGTERM."""
        self.late.discard(job)
        if job in self.cancelled and job in self.agents:
            self.agents[job].send_signal(signal.SIGTERM)

    def _state(self, job: str) -> JobState:
        proc = self.agents.get(job)
        if job in self.cancelled and job not in self.late and (proc is None or proc.poll() is not None):
            return JobState.CANCELLED
        if proc is not None and proc.poll() is not None:
            return JobState.DONE
        return JobState.RUNNING if job in self.shown_running else JobState.PENDING

    def _info(self, job: str) -> JobInfo:
        state = self._state(job)
        return JobInfo(job, self.names[job][0], state, None, None, None, 600.0, 1, None, None,
                       native=state.value.upper())

    def jobs(self, ids=None, *, user=None, name_prefix=None) -> dict[str, JobInfo]:
        if name_prefix is not None:
            return {j: self._info(j) for j, (n, _) in self.names.items() if n.startswith(name_prefix)}
        return {j: self._info(j) for j in ids or () if j in self.names}

    def cancel(self, ids) -> None:
        for job in ids:
            self.cancelled.add(job)
            if job not in self.late:
                self.deliver(job)

    def close(self) -> None:
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _pool(tmp_path: Path, sched: LaggingScheduler) -> Coordinator:
    """The pinned engine test's pool, live: two per-task pilots of one slot, a task handed ahead
    to each (``--prefetch 1``), over the real file protocol in ``tmp_path/work``."""
    work = tmp_path / "work"
    (tmp_path / "sites.toml").write_text(
        '[[site]]\nname = "pool"\nkind = "slurm"\ncores = 2\nclock = { base = 1.0 }\n'
        'pilot = { mode = "per-task", max_pilots = 2, walltime = 600 }\n'
        f'access = {{ transport = "local", workdir = "{work}" }}\n', encoding="utf-8")
    (tmp_path / "bag.toml").write_text(f'[bag]\nname = "t"\ncommand = {json.dumps(COMMAND)}\ncount = 2\n\n'
                                       '[bag.profile]\ninstructions = 1e9\n', encoding="utf-8")
    sites, bag = load_sites(tmp_path / "sites.toml"), load_bag(tmp_path / "bag.toml")
    options = LiveOptions(strategy="model", prefetch=1, poll=0.2)
    db = open_store(tmp_path / "resel.db")
    run = db["runs"].insert({"mode": "live", "bag": bag.name, "status": "running", "t0": time.time(),
                             "run_key": "r1-abcdef", "options": to_json(options), "sites": to_json(sites),
                             "bag_spec": to_json(bag)}).last_pk
    coord = Coordinator(db, run, bag, sites, options, "r1-abcdef", time.time(),
                        lambda site: PilotSite(site, LocalTransport(), sched))
    coord.feed([BagSubmitted(time=0.0)])
    return coord


def _turns_until(coord: Coordinator, done, timeout: float, what: str) -> None:
    """Run the coordinator's loop, turn by turn, until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        coord.step(wait=True)


def _record(pdir: Path, sub: str, key: str) -> dict | None:
    """The agent's ``sub`` record of attempt ``key`` (in a wave or a per-key file), or None."""
    found = keyed(pdir / sub).get(key) if (pdir / sub).is_dir() else None
    return found[0] if found else None


def _sent(pdir: Path, key: str) -> bool:
    """Whether attempt ``key`` reached this pilot (in its inbox, claimed or started)."""
    return any((pdir / sub / f"{key}.json").exists() for sub in ("inbox", "claimed")) \
        or _record(pdir, "started", key) is not None


@pytest.fixture
def sched():
    s = LaggingScheduler()
    yield s
    s.close()


def test_a_withdrawn_pilot_whose_agent_claimed_its_task_keeps_it_until_its_end_is_read(tmp_path, sched):
    """Pilot 1, pending as far as the scheduler says, has in fact started: its agent claimed
    task 1 (handed ahead) and runs it. Pilot 0 finishes task 0, so pilot 1 is surplus and
    withdrawn, and task 1 given back to pilot 0's free slot in the same decision. Before, the
    new attempt went to pilot 0 at once and ran while the first still ran on pilot 1 (until the
    stop reached it): twice at once. Now the withdrawal takes the inbox file back first; it
    was claimed, so the new attempt waits until the first one's end is read."""
    coord = _pool(tmp_path, sched)
    p0, p1 = (Path(coord.site("pool").pilot_dir(coord.run_key, p)) for p in (0, 1))
    try:
        _turns_until(coord, lambda: _sent(p0, "t0-a1") and _sent(p1, "t1-a1"), 30, "the first tasks' inbox files")
        job0, job1 = coord.pilots[0].job_id, coord.pilots[1].job_id
        sched.late.add(job1)                    # its cancel reaches it only when delivered below
        sched.start_agent(job1, poll=60)        # started, unseen: the scheduler still says pending
        wait_until(lambda: _record(p1, "started", "t1-a1"), 30, "pilot 1's agent to start task 1")
        sched.start_agent(job0, poll=0.1)
        sched.shown_running.add(job0)
        _turns_until(coord, lambda: coord.pilots[1].state is PilotState.CANCELLED, 30,
                     "pilot 1 withdrawn (task 0 done on pilot 0) and its stop carried out")
        _turns_until(coord, lambda: not any(w.pending for w in coord.all_workers()) or _sent(p0, "t1-a2"), 10,
                     "the turn's actions carried out")
        assert _record(p1, "results", "t1-a1") is None, "task 1 still runs on pilot 1 (its stop is on its way)"
        assert not _sent(p0, "t1-a2"), "task 1 sent to pilot 0 while its attempt 1 runs on pilot 1: twice at once"

        sched.deliver(job1)                     # the cancel reaches pilot 1: its agent ends task 1
        _turns_until(coord, lambda: coord.finished, 60, "the bag to finish")
    finally:
        coord.close()
    first, second = _record(p1, "results", "t1-a1"), _record(p0, "started", "t1-a2")
    assert first is not None and first["outcome"] in ("lost", "cancelled"), first
    assert second is not None and second["time"] >= first["end"], (first, second)
    done = [rec["task"] for run in tmp_path.glob("work/*") for rec in run_records(run)
            if rec["outcome"] == "done"]
    assert sorted(done) == [0, 1]
    assert coord.engine.done_count == 2


def test_a_withdrawn_pilot_that_never_claimed_its_task_gives_it_to_the_free_slot_at_once(tmp_path, sched):
    """The usual case: pilot 1 has not started, so its inbox file is taken back (renamed out of
    any agent's reach) and task 1 goes to pilot 0's free slot without waiting for anything —
    the engine's give-back at once (tests/test_engine.py) stays at once live."""
    coord = _pool(tmp_path, sched)
    p0, p1 = (Path(coord.site("pool").pilot_dir(coord.run_key, p)) for p in (0, 1))
    try:
        _turns_until(coord, lambda: _sent(p0, "t0-a1") and _sent(p1, "t1-a1"), 30, "the first tasks' inbox files")
        sched.start_agent(coord.pilots[0].job_id, poll=0.1)
        sched.shown_running.add(coord.pilots[0].job_id)
        _turns_until(coord, lambda: coord.finished, 30, "the bag to finish")
    finally:
        coord.close()
    assert (p1 / "inbox" / ".withdrawn-t1-a1").exists() and not (p1 / "claimed" / "t1-a1.json").exists()
    assert _record(p0, "results", "t1-a2")["outcome"] == "done"
    assert coord.engine.done_count == 2


def test_a_coordinator_killed_while_it_waits_takes_the_task_back_again_on_resume(tmp_path, sched):
    """The withdrawn pilot's CancelPilot is marked done only once the attempt it found claimed
    has ended: killed while it waits, the coordinator resumes with that CancelPilot undone,
    takes the inbox file back again (still claimed), and the task's next attempt waits again —
    it is not sent while the first still runs."""
    from resel import journal
    coord = _pool(tmp_path, sched)
    p0, p1 = (Path(coord.site("pool").pilot_dir(coord.run_key, p)) for p in (0, 1))
    try:
        _turns_until(coord, lambda: _sent(p0, "t0-a1") and _sent(p1, "t1-a1"), 30, "the first tasks' inbox files")
        job0, job1 = coord.pilots[0].job_id, coord.pilots[1].job_id
        sched.late.add(job1)
        sched.start_agent(job1, poll=60)
        wait_until(lambda: _record(p1, "started", "t1-a1"), 30, "pilot 1's agent to start task 1")
        sched.start_agent(job0, poll=0.1)
        sched.shown_running.add(job0)
        _turns_until(coord, lambda: coord.pilots[1].state is PilotState.CANCELLED, 30, "pilot 1 withdrawn")
        for _ in range(3):
            coord.step(wait=True)          # turns that write (their marks with them), the task still held
    finally:
        coord._stop_workers()               # killed: no clean-up, nothing more written
    cancel = [r for r in journal.rows(coord.db, coord.run_id) if r["kind"] == "CancelPilot"]
    assert [(json.loads(r["data"])["pilot"], r["done"]) for r in cancel] == [(1, 0)]
    assert not _sent(p0, "t1-a2")

    again = Coordinator.resume(open_store(tmp_path / "resel.db"), coord.run_id,
                               lambda site: PilotSite(site, LocalTransport(), sched))
    try:
        for _ in range(3):
            again.step(wait=True)
        assert _record(p1, "results", "t1-a1") is None and not _sent(p0, "t1-a2"), \
            "resumed, the coordinator sent task 1 to pilot 0 while its attempt 1 runs on pilot 1"
        sched.deliver(job1)
        _turns_until(again, lambda: again.finished, 60, "the bag to finish")
        again.flush_marks()
    finally:
        again.close()
    first, second = _record(p1, "results", "t1-a1"), _record(p0, "started", "t1-a2")
    assert second is not None and second["time"] >= first["end"], (first, second)
    cancel = [r for r in journal.rows(again.db, again.run_id) if r["kind"] == "CancelPilot"
              and json.loads(r["data"])["pilot"] == 1]
    assert [r["done"] for r in cancel] == [1]


def _held(tmp_path: Path, now: list[float]):
    """The pinned engine test's pool on the coordinator's own books (no site): task 1, handed
    ahead to pilot 1, given back when pilot 1 is withdrawn, its take-back answered "claimed",
    and its next attempt's dispatch (to pilot 0's free slot) parked. ``sent`` collects what
    a release carries out; the coordinator's own ``execute`` is returned too."""
    from conftest import make_bag, make_site
    from resel import journal
    from resel.events import CancelPilot, DispatchTask, PilotStarted, TaskFinished, TaskStarted
    from resel.live.pilot_views import PilotView
    db = open_store(tmp_path / "s.db")
    options = LiveOptions(strategy="model", prefetch=1, site_timeout=100.0, missing_polls=2)
    run = db["runs"].insert({"mode": "live", "bag": "b", "status": "running", "t0": 0.0, "run_key": "r1-abcdef",
                             "options": to_json(options), "sites": "[]", "bag_spec": "{}"}).last_pk
    pool = make_site("pool", 1.0, mode="per-task", target=True, max_pilots=2)
    coord = Coordinator(db, run, make_bag(2), [pool], options, "r1-abcdef", 0.0,
                        lambda site: pytest.fail("no site is opened here"), clock=lambda: now[0])
    coord.feed([BagSubmitted(time=0.0), PilotStarted(time=1.0, pilot=0), TaskStarted(time=1.1, task=0, attempt=1),
                TaskFinished(time=5.0, task=0, attempt=1)], execute=False)
    rows = [(r["seq"], journal.decode(r["kind"], r["time"], r["data"])) for r in journal.rows(db, run)]
    again = DispatchTask(task=1, attempt=2, pilot=0, site="pool")          # the engine's give-back at once
    cancel_seq = next(seq for seq, a in rows if a == CancelPilot(pilot=1, site="pool"))
    again_seq = next(seq for seq, a in rows if a == again)
    for seq in (cancel_seq, again_seq):
        journal.mark(db, run, seq, done=False)                            # undone, as when recorded to run
    view = coord.pilots[1] = PilotView(1, "pool", job_id="101", state=PilotState.CANCELLED)
    assert coord.takebacks.take(1, view) == [(1, 1)]
    assert not coord.takebacks.answered(1, cancel_seq, {(1, 1): "asked"})     # claimed
    real = coord.acts.execute
    real(again_seq, again)                                                # held: parked, nothing sent
    sent = []
    coord.acts.execute = lambda seq, action: sent.append((seq, action))   # what a release carries out
    return coord, view, cancel_seq, (again_seq, again), sent, real


@pytest.mark.parametrize("way", ["result read", "job over", "job missing", "site lost", "site_timeout"])
def test_a_claimed_task_is_sent_on_once_its_end_or_its_pilots_end_is_known_and_not_before(tmp_path, way):
    """Each way a held task's next attempt is let go (resel/live/takeback.py), on the
    coordinator's own books — no site: the withdrawn pilot's result for the attempt read; its
    job final, or missing from the scheduler's answer for ``missing_polls`` polls; its site
    given up; or ``site_timeout`` passed with none of those. A poll that shows the job still
    listed, with nothing read, lets nothing go; the CancelPilot is marked done with the release."""
    from resel.backends.pilotsite import PilotFiles
    now = [5.0]
    coord, view, cancel_seq, (again_seq, again), sent, _execute = _held(tmp_path, now)
    listed = {"101": JobInfo("101", "resel-r1-abcdef-p1", JobState.RUNNING, None, None, None, 600.0, 1, None, None)}
    coord.takebacks.seen(now[0], view, listed, PilotFiles())                           # still runs, nothing read
    assert [v.pilot for v in coord.takebacks.watched_views()] == [1] and sent == []

    if way == "result read":
        ended = {"task": 1, "attempt": 1, "outcome": "cancelled", "reason": "stopped", "start": 2.0, "end": 6.0}
        coord.takebacks.seen(now[0], view, listed, PilotFiles(results=[ended]))
    elif way == "job over":
        coord.takebacks.seen(now[0], view, {"101": JobInfo("101", "resel-r1-abcdef-p1", JobState.CANCELLED, None,
                                                           None, None, 600.0, 1, None, None)}, None)
    elif way == "job missing":
        coord.takebacks.seen(now[0], view, {}, None)
        assert sent == [], "one poll without the job is not its end"
        coord.takebacks.seen(now[0], view, {}, None)
    elif way == "site lost":
        coord.engine.lost_sites["pool"] = "unreachable"
    else:
        now[0] += 99.0
        assert coord.takebacks.watched_views() and sent == []
        now[0] += 2.0
    coord.takebacks.watched_views()
    assert sent == [(again_seq, again)] and not coord.takebacks.holds(1)
    assert coord.takebacks.watched_views() == [] and coord._marks_due == [cancel_seq]


def test_a_parked_attempt_asked_back_is_withdrawn_at_once(tmp_path):
    """Re-selection (or a quarantine) may ask back a task whose dispatch is parked: it was never
    sent, so it is withdrawn for sure — answered at once (TaskWithdrawn, recorded with its
    WithdrawTask marked done, the parked dispatch marked done and never sent), not left for an
    agent that will never see it."""
    from resel import journal
    from resel.events import TaskWithdrawn, WithdrawTask
    from resel.backends.pilotsite import PilotFiles
    now = [5.0]
    coord, view, cancel_seq, (again_seq, again), sent, execute = _held(tmp_path, now)
    back = WithdrawTask(task=1, attempt=2, pilot=0, site="pool")
    back_seq = coord.record(now[0], back, 0)
    execute(back_seq, back)
    rows = {r["seq"]: (r["kind"], r["done"]) for r in journal.rows(coord.db, coord.run_id)}
    assert rows[back_seq] == ("WithdrawTask", 1) and rows[again_seq] == ("DispatchTask", 1)
    withdrawn = [journal.decode(r["kind"], r["time"], r["data"]) for r in journal.rows(coord.db, coord.run_id)
                 if r["kind"] == "TaskWithdrawn"]
    assert withdrawn == [TaskWithdrawn(time=now[0], task=1, attempt=2)]
    ended = {"task": 1, "attempt": 1, "outcome": "cancelled", "reason": "stopped", "start": 2.0, "end": 6.0}
    coord.takebacks.seen(now[0], view, None, PilotFiles(results=[ended]))
    assert sent == [] and not coord.takebacks.holds(1), "the withdrawn attempt is never sent"
