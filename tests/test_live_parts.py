"""The coordinator's small parts that need no testbed: the job-state table, the check of the
agents' records, the lease `resel cancel` waits on, and how old runs replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from resel.live import notes as live_notes
from resel.backends.pilotsite import check_result, check_started, job_phase
from resel.backends.jobs import JobState, htcondor_state, pbs_state, slurm_state
from resel.backends.slurm.formats import STATE_CODES
from resel.errors import ReselError
from resel.live.stored import LiveOptions, load_live_run, parse_prefetch
from resel.store import open_store, to_json


@pytest.mark.parametrize("state, phase", [
    (slurm_state("RUNNING"), "running"), (slurm_state("COMPLETING"), "running"),
    (slurm_state("SUSPENDED"), "running"), (slurm_state("RESIZING"), "running"),
    (slurm_state("PENDING"), "pending"), (slurm_state("REQUEUED"), "pending"),
    (slurm_state("REQUEUE_HOLD"), "pending"), (slurm_state("SPECIAL_EXIT"), "pending"),
    (slurm_state("CONFIGURING"), "pending"),
    (slurm_state("COMPLETED"), "final"), (slurm_state("CANCELLED"), "final"), (slurm_state("TIMEOUT"), "final"),
    (slurm_state("NODE_FAIL"), "final"), (slurm_state("PREEMPTED"), "final"), (slurm_state("OUT_OF_MEMORY"), "final"),
    (slurm_state("SIGNALING"), "unknown"), (slurm_state("STAGE_OUT"), "unknown"),
    (slurm_state("RESV_DEL_HOLD"), "unknown"), (slurm_state(""), "unknown"),
    (pbs_state("Z"), "unknown"), (pbs_state(""), "unknown"), (htcondor_state(8)[1], "unknown"),
    (JobState.HELD, "pending"), (JobState.UNKNOWN, "unknown"),
])
def test_job_phases(state, phase):
    assert job_phase(state) == phase == state.phase
    assert state.final is (phase == "final")


def test_every_slurm_state_code_has_a_phase_and_only_the_three_in_between_are_unknown():
    """squeue's own list of states: each is running, pending or final, except the three that
    say nothing about the pilot's end (the job signals, stages out, or waits on a deleted
    reservation) — so a state Slurm adds is unknown until it is put in a table on purpose."""
    unknown = {name for name in STATE_CODES.values() if job_phase(slurm_state(name)) == "unknown"}
    assert unknown == {"SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}


GOOD = {"task": 3, "attempt": 1, "exit_code": 0, "signal": None, "start": 10.0, "end": 12.5, "host": "c1",
        "outcome": "done", "reason": None, "perf": None, "stdout_tail": "x", "stderr_tail": "",
        "incarnation": "ab12"}


@pytest.mark.parametrize("change, stem, why", [
    ({}, "t3-a1", None),
    ({}, "t3-a2", "not the key t3-a1"),
    ({"task": None, "attempt": None}, "README", "non-negative integers"),
    ({"task": "3"}, "t3-a1", "non-negative integers"),
    ({"task": True}, "t3-a1", "non-negative integers"),
    ({"attempt": -1}, "t3-a-1", "non-negative integers"),
    ({"outcome": "finished"}, "t3-a1", "outcome must be one of"),
    ({"end": "noon"}, "t3-a1", "end must be a number"),
    ({"end": float("nan")}, "t3-a1", "end must be a number"),
    ({"exit_code": 1.5}, "t3-a1", "exit_code must be an integer"),
    ({"reason": ["x"]}, "t3-a1", "reason must be a string"),
    ({"perf": "fast"}, "t3-a1", "perf must be an object"),
    # a lone surrogate (JSON's "\\udcff") is no UTF-8 text: stored, it stopped the coordinator
    # (SQLite refuses it) at once and at every --resume
    ({"outputs": [{"name": "bad\udcff.dat", "size": 1, "sha256": "a" * 64}]}, "t3-a1", "not UTF-8"),
    ({"reason": "exit \udcff"}, "t3-a1", "not UTF-8"),
    ({"host": "\ud800"}, "t3-a1", "not UTF-8"),
    ({"refused": [{"name": "x\udcff", "why": "a symbolic link"}]}, "t3-a1", "not UTF-8"),
    ({"perf": {"\udcff": 1.0}}, "t3-a1", "not UTF-8"),
])
def test_result_records_are_checked(change, stem, why):
    got = check_result({**GOOD, **change}, stem)
    assert (got is None) if why is None else (why in got), got


def test_started_records_are_checked():
    assert check_started({"task": 1, "attempt": 2, "time": 5.0, "host": "c"}, "t1-a2") is None
    assert "time must be a number" in check_started({"task": 1, "attempt": 2, "time": "x"}, "t1-a2")
    assert "host must be a string" in check_started({"task": 1, "attempt": 2, "time": 1, "host": 7}, "t1-a2")
    assert "not UTF-8" in check_started(json.loads('{"task": 1, "attempt": 2, "time": 1, "host": "\\udcff"}'), "t1-a2")


def _live_row(db, options: dict, command: str = "true", site_commands=()) -> int:
    return db["runs"].insert({"mode": "live", "bag": "b", "status": "running", "t0": 0.0, "run_key": "r1-abcdef",
                              "options": json.dumps(options), "sites": "[]",
                              "bag_spec": to_json({"name": "b", "command": command, "count": 1, "cores_per_task": 1,
                                                   "profile": {"instructions": 1e9},
                                                   "site_commands": list(site_commands)})}).last_pk


def test_a_run_a_str_format_resel_stored_is_resumed_with_the_same_commands(tmp_path):
    """'${{' is only ever in a command a resel that filled commands with str.format stored (today
    a bag file refuses it): the run comes back with today's equivalent, site commands too, so
    its remaining tasks run what its first ones ran (not a shell error: bash rejects '${{')."""
    db = open_store(tmp_path / "s.db")
    old = _live_row(db, {"strategy": "model"}, "echo ${{HOME}}:{index}", [("tbb", "awk '{{print}}' ${{X}}")])
    bag = load_live_run(db, old, to_run=True)[1]
    assert bag.command == "echo ${HOME}:{index}" and bag.command_for(3) == "echo ${HOME}:3"
    assert bag.site_commands == (("tbb", "awk '{print}' ${X}"),)
    today = _live_row(db, {"strategy": "model"}, "awk '{{print}}' {index}")    # no '${{': today's language
    assert load_live_run(db, today, to_run=True)[1].command == "awk '{{print}}' {index}"


def test_a_str_format_command_with_no_equivalent_is_refused_to_run_but_still_shown(tmp_path):
    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {"strategy": "model"}, "echo ${{HOME}} {{{index}}}")
    with pytest.raises(ReselError, match=f"resel cancel {run}"):
        load_live_run(db, run, to_run=True)
    assert load_live_run(db, run)[1].command == "echo ${{HOME}} {{{index}}}"     # resel status still reads it


def test_a_run_stored_before_hand_ahead_replays_without_it(tmp_path):
    """The engine must replay a run as it ran: options without "prefetch" mean none."""
    db = open_store(tmp_path / "s.db")
    old = _live_row(db, {"strategy": "model", "poll": 1.0})
    new = _live_row(db, {"strategy": "model", "poll": 1.0, "prefetch": 1})
    assert load_live_run(db, old)[3].prefetch == 0
    assert load_live_run(db, new)[3].prefetch == 1
    # one stored as 1 (before issue 29 §2) replays at a fixed 1 per slot, not the measured depth
    assert load_live_run(db, new)[3].engine_options()["prefetch"] == 1
    assert load_live_run(db, new)[3].engine_options()["prefetch_cycle"] is None
    assert LiveOptions().prefetch == "auto"


def test_the_auto_hand_ahead_is_the_cap_with_the_refill_cycle_of_the_poll_and_the_agent():
    """``--prefetch auto`` (the default): the engine gets the cap (16) and the cycle a freed slot
    waits for its refill — a coordinator poll plus the agent's 0.5-s look at its inbox; a number
    is that fixed depth, stored as given so a resumed run and ``resel status`` replay it."""
    auto = LiveOptions(poll=0.5).engine_options()
    assert (auto["prefetch"], auto["prefetch_cycle"]) == (16, 1.0)
    assert (LiveOptions(poll=2.0).engine_options()["prefetch_cycle"]) == 2.5
    fixed = LiveOptions(prefetch=4).engine_options()
    assert (fixed["prefetch"], fixed["prefetch_cycle"]) == (4, None)
    assert [parse_prefetch(v) for v in ("auto", "AUTO", "0", "4", 16)] == ["auto", "auto", 0, 4, 16]
    for bad in ("-1", "1.5", "deep", "1001"):
        with pytest.raises(ReselError, match="--prefetch"):
            parse_prefetch(bad)


def test_a_run_stored_with_auto_hand_ahead_replays_it(tmp_path):
    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {"strategy": "model", "poll": 0.5, "prefetch": "auto"})
    options = load_live_run(db, run)[3]
    assert (options.engine_options()["prefetch"], options.engine_options()["prefetch_cycle"]) == (16, 1.0)


def test_a_run_stored_before_packing_replays_with_slots_of_the_widest_task(tmp_path):
    """Options without "pack" mean none: a bag of several widths stored then is rebuilt with
    every slot as wide as its widest task, the engine it ran on."""
    db = open_store(tmp_path / "s.db")
    old = _live_row(db, {"strategy": "model", "poll": 1.0})
    new = _live_row(db, {"strategy": "model", "poll": 1.0, "pack": True})
    assert load_live_run(db, old)[3].pack is False and load_live_run(db, new)[3].pack is True
    assert LiveOptions().pack is True and LiveOptions().engine_options()["pack"] is True


def test_a_run_stored_before_the_split_counted_cores_replays_as_it_split(tmp_path):
    """Options without "split_cores": a mixed bag's queue-aware split counted each unit of the
    menu as a task then, and a resumed run must make the same first step."""
    db = open_store(tmp_path / "s.db")
    old = _live_row(db, {"strategy": "queue", "poll": 1.0, "pack": True})
    new = _live_row(db, {"strategy": "queue", "poll": 1.0, "pack": True, "split_cores": True})
    assert load_live_run(db, old)[3].split_cores is False and load_live_run(db, new)[3].split_cores is True
    assert LiveOptions().engine_options()["split_cores"] is True


def test_the_lease_is_held_released_stale_or_dead(tmp_path):
    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {})
    assert live_notes.holder(db, run, 10) is None                   # nobody ever held it
    live_notes.hold(db, run, 1.0)
    held = live_notes.holder(db, run, 10)
    assert held and held["pid"] == os.getpid()
    live_notes.hold(db, run, 2.0, state="released")
    assert live_notes.holder(db, run, 10) is None
    live_notes.hold(db, run, 3.0)
    assert live_notes.holder(db, run, stale_after=0.0) is None      # not refreshed in time
    # a coordinator killed with kill -9 on this host: its pid is gone, the lease is not honoured
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    db["live_notes"].update((run, "", "coordinator"), {"detail": json.dumps(
        {"pid": dead, "host": __import__("socket").gethostname(), "state": "running"}), "last": time.time()})
    assert live_notes.holder(db, run, 10) is None


def test_notes_per_site(tmp_path):
    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {})
    live_notes.put(db, run, "a", "unreachable", "unreachable", 5.0, "no answer: timed out")
    live_notes.put(db, run, "a", "unreachable", "unreachable", 9.0, "no answer: timed out")
    live_notes.put(db, run, "a", "bad:p0/results/README.json", "bad-record", 6.0, "bad")
    live_notes.put(db, run, "a", "state:p0", "job-state", 7.0, "pilot 0: job 1 in state SIGNALING")
    notes = live_notes.read(db, run)
    assert notes["a"].not_answering_since == 5.0 and notes["a"].bad_records == 1
    assert notes["a"].lines == ["pilot 0: job 1 in state SIGNALING"]
    live_notes.drop(db, run, "a", "unreachable")
    assert live_notes.read(db, run)["a"].not_answering_since is None


def test_a_pending_pilot_that_ran_before_starts_again_only_with_a_new_agent():
    """Back in the queue after it ran (PilotRequeued), a pilot's old agent may still finish
    attempts and write: that is no new start — only another agent is (before, every poll after
    a controller restart took it for started, the next for requeued, cancelling and handing
    out its attempts again each time). A pilot that never ran starts with anything its agent
    writes (it ran and ended between two polls)."""
    from resel.backends.pilotsite import PilotFiles
    from resel.live.findings import Findings
    from resel.live.pilot_views import PilotView
    runs = Findings.runs                           # reads only the view and the files
    fresh = PilotView(0, "tba")
    assert runs(None, fresh, PilotFiles(agent={"incarnation": "a", "started": 1.0}))
    assert runs(None, fresh, PilotFiles(results=[{"task": 1}]))
    assert not runs(None, fresh, PilotFiles())
    requeued = PilotView(0, "tba", incarnation="a", agent_started=1.0)
    old = PilotFiles(results=[{"task": 1}], heartbeat={"incarnation": "a", "started": 1.0, "time": 9.0})
    assert not runs(None, requeued, old)
    assert runs(None, requeued, PilotFiles(heartbeat={"incarnation": "b", "started": 20.0, "time": 21.0}))
    resumed = PilotView(0, "tba", agent_started=1.0)          # incarnation not seen yet by this coordinator
    assert not runs(None, resumed, PilotFiles(heartbeat={"started": 1.0, "time": 9.0}))
    assert runs(None, resumed, PilotFiles(heartbeat={"started": 20.0, "time": 21.0}))


def test_the_coordinators_pilots_speak_the_engines_states_and_store_the_old_words():
    """One pilot vocabulary (issue 27 item 2): a pilot's view holds the engine's PilotState,
    and ``live_pilots.state`` keeps the words it always held (``running`` for an active pilot,
    ``failed`` for one the site refused), read back the same way on resume."""
    from resel.live.coordinator import STORED_STATES, PilotView, stored_view
    from resel.states import PilotState
    assert set(STORED_STATES) == set(PilotState)
    row = {"pilot": 3, "site": "tba", "cores": 4, "walltime": 600.0, "job_id": "12", "agent_started": None}
    for word in ("pending", "running", "ended", "cancelled", "failed"):
        view = stored_view({**row, "state": word})
        assert isinstance(view.state, PilotState) and view.stored == word
    assert stored_view({**row, "state": "failed"}).state is PilotState.CANCELLED
    assert stored_view({**row, "state": None}).state is PilotState.PENDING
    assert PilotView(0, "tba").stored == "pending"


def test_a_job_missing_from_the_reply_is_no_phase_of_its_own():
    """What a poll's answer means for a pilot's files (Findings.changes): a job missing
    from the reply moves a running pilot on, as one back in the queue or over does."""
    from resel.backends.jobs import JobInfo, JobState
    from resel.live.findings import Findings
    from resel.live.pilot_views import PilotView
    from resel.states import PilotState

    class Run:
        class coord:
            run_key = "r1-abcdef"

    def job(state: JobState) -> dict:
        return {"9": JobInfo("9", "resel-r1-abcdef-p0", state, None, None, None, None, 1, None, None)}
    running = PilotView(0, "tba", job_id="9", state=PilotState.ACTIVE)
    pending = PilotView(0, "tba", job_id="9")
    changes = Findings.changes
    assert changes(Run(), running, {}) and changes(Run(), running, job(JobState.PENDING))
    assert changes(Run(), running, job(JobState.DONE)) and not changes(Run(), running, job(JobState.RUNNING))
    assert changes(Run(), pending, {}) and changes(Run(), pending, job(JobState.RUNNING))
    assert not changes(Run(), pending, job(JobState.HELD))


def test_a_withdrawal_is_done_only_in_the_transaction_that_records_its_event(tmp_path):
    """A WithdrawTask answered "withdrawn" (its inbox file renamed away) yields a TaskWithdrawn.
    Marked done at once, a kill before that event was recorded lost it for good: resumed, the
    engine waited for ever on an attempt no agent would run. The action is now done only in the
    transaction that records the event, so a kill in between leaves it undone — redone on
    resume, where the site answers "withdrawn" again (its marker file is there)."""
    from conftest import make_bag, make_site
    from resel import journal
    from resel.events import TaskWithdrawn, WithdrawTask
    from resel.live.coordinator import Coordinator
    from resel.live.sites import Report

    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {"strategy": "model"})
    sites = [make_site("hpc", 2.0), make_site("pool", 1.0, mode="per_task", target=True)]
    coord = Coordinator(db, run, make_bag(4), sites, LiveOptions(), "r1-abcdef", 0.0,
                        lambda site: pytest.fail("no site is opened here"), clock=lambda: 7.0)

    def done(seq: int) -> int:
        return next(r["done"] for r in journal.rows(db, run) if r["seq"] == seq)

    action = WithdrawTask(task=2, attempt=1, pilot=0, site="pool")
    seq = coord.record(5.0, action, 0)
    events = coord.acts.acted(seq, action, Report("pool", "act", (seq, action), result="withdrawn"))
    assert events == [TaskWithdrawn(time=7.0, task=2, attempt=1)]
    assert done(seq) == 0                     # killed here: undone, so resume asks the site again
    coord.engine.handle = lambda event: []     # the engine's answer is not what is tested here
    coord.feed(events)
    assert done(seq) == 1                     # done with its event, in one transaction
    kinds = [r["kind"] for r in journal.rows(db, run)]
    assert kinds == ["WithdrawTask", "TaskWithdrawn"]

    # an answer that yields no event is done with the next turn that writes anything (a turn of
    # marks alone would cost a commit of its own); one whose event is never fed (the run
    # finished) is done when the last actions are collected
    other = WithdrawTask(task=3, attempt=1, pilot=0, site="pool")
    seq2 = coord.record(6.0, other, 0)
    with coord.turn():
        assert coord.acts.acted(seq2, other, Report("pool", "act", (seq2, other), result="asked")) == []
    assert done(seq2) == 0                    # a turn that wrote nothing else (within a poll period)
    with coord.turn():
        coord.feed([TaskWithdrawn(time=7.5, task=0, attempt=1)])
    assert done(seq2) == 1
    last = WithdrawTask(task=1, attempt=1, pilot=0, site="pool")
    seq3 = coord.record(6.5, last, 0)
    coord.acts.acted(seq3, last, Report("pool", "act", (seq3, last), result="withdrawn"))
    assert done(seq3) == 0
    coord.acts.mark_left()
    assert done(seq3) == 1


@pytest.mark.parametrize("value", ["deep", "-1", "2.5", "1001"])
def test_resel_run_refuses_a_prefetch_that_is_no_depth_as_a_usage_error(tmp_path, value):
    """Checked as the command line is read: exit status 2, nothing stored or submitted."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-m", "resel.cli", "run", "bag.toml", "--sites", "sites.toml", "--db",
                             str(tmp_path / "s.db"), "--prefetch", value, "--json"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--prefetch" in json.loads(result.stdout)["error"], result
    assert not (tmp_path / "s.db").exists()


_TURN_CHILD = r"""
import os, sys
sys.path.insert(0, sys.argv[4])
from conftest import make_bag, make_site
from resel.events import DispatchTask, TaskStarted
from resel.live.coordinator import Coordinator
from resel.live.pilot_views import PilotView
from resel.live.stored import LiveOptions
from resel.store import open_store

path, run, kill = sys.argv[1], int(sys.argv[2]), sys.argv[3]
db = open_store(path)
coord = Coordinator(db, run, make_bag(4), [make_site("hpc", 2.0)], LiveOptions(), "r1-abcdef", 0.0,
                    lambda site: None, clock=lambda: 7.0)
sent = DispatchTask(task=1, attempt=1, pilot=0, site="hpc")
seq = coord.record(1.0, sent, 0)                     # recorded in a turn before: committed on its own
nxt = DispatchTask(task=2, attempt=1, pilot=0, site="hpc")

def handle(event):
    if kill == "recording":                          # the turn's rows written, its commit not yet
        os._exit(9)
    return [nxt]

def execute(seq, action):
    os._exit(9)                                      # after the commit, before the site is asked
coord.engine.handle = handle
coord.acts.execute = execute
with coord.turn():                                   # as Coordinator.step: what the sites reported, then fed
    coord.attempt_row(1, 1, PilotView(0, "hpc"), {"start": 6.5, "host": "n1"})   # the agent's started record
    coord.mark(seq)                                  # the site answered the dispatch
    coord.feed([TaskStarted(time=7.0, task=1, attempt=1)])
os._exit(0)
"""


@pytest.mark.parametrize("kill", ["recording", "acting"])
def test_a_coordinator_killed_within_a_turn_resumes_from_before_it_or_after_it_whole(tmp_path, kill):
    """A turn of the loop writes what the sites reported (the ``attempts`` row of a started
    record, the done mark of an answered dispatch) and the events fed with their actions in one
    transaction, and carries the actions out only after it commits (issue 29 §2). Killed
    (``os._exit``, no clean-up) while it records: none of the turn is in the store — the answered
    dispatch is still undone (redone on resume: idempotent), the started record not consumed (read
    again from the agent's file). Killed after the commit, before acting: all of it is, and the
    new action is undone, so resume carries it out. Never a part of a turn."""
    from resel import journal
    from resel.live.coordinator import Coordinator
    from resel.live.resume import replay
    from conftest import make_bag, make_site
    path = tmp_path / "s.db"
    db = open_store(path)
    run = _live_row(db, {"strategy": "model"})
    db.conn.close()
    child = subprocess.run([sys.executable, "-c", _TURN_CHILD, str(path), str(run), kill,
                            os.path.dirname(__file__)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 9, child.stderr

    db = open_store(path)
    rows = [(r["seq"], r["kind"], r["done"]) for r in journal.rows(db, run)]
    attempts = [(r["task"], r["attempt"], r["start"], r["host"]) for r in db.query("select * from attempts")]
    coord = Coordinator(db, run, make_bag(4), [make_site("hpc", 2.0)], LiveOptions(), "r1-abcdef", 0.0,
                        lambda site: pytest.fail("no site is opened here"), clock=lambda: 8.0)
    coord.engine.handle = lambda event: []           # the engine's answer is not what is tested here
    replay(coord)
    undone = [(seq, type(a).__name__, a.task) for seq, a, _at in coord.acts.undone]
    if kill == "recording":
        assert rows == [(0, "DispatchTask", 0)] and attempts == []
        assert undone == [(0, "DispatchTask", 1)] and coord.consumed == set()
    else:
        assert rows == [(0, "DispatchTask", 1), (1, "TaskStarted", None), (2, "DispatchTask", 0)]
        assert attempts == [(1, 1, 6.5, "n1")]
        assert undone == [(2, "DispatchTask", 2)] and coord.consumed == {("TaskStarted", 1, 1)}
    assert coord.seq == len(rows)


def test_a_turn_is_one_commit_and_its_actions_run_once_they_are_durable(tmp_path):
    """However many reports and events a turn takes, it commits once (one WAL fdatasync), and
    each action it recorded is carried out only when another connection can read its row."""
    import sqlite3
    from conftest import make_bag, make_site
    from resel import journal
    from resel.events import DispatchTask, SetTimer, TaskFinished, TaskStarted
    from resel.live.coordinator import Coordinator
    from resel.live.pilot_views import PilotView
    path = tmp_path / "s.db"
    db = open_store(path)
    run = _live_row(db, {"strategy": "model"})
    coord = Coordinator(db, run, make_bag(4), [make_site("hpc", 2.0)], LiveOptions(), "r1-abcdef", 0.0,
                        lambda site: pytest.fail("no site is opened here"), clock=lambda: 7.0)
    answered = [coord.record(1.0, DispatchTask(task=t, attempt=1, pilot=0, site="hpc"), 0) for t in range(3)]
    coord.engine.handle = lambda event: [DispatchTask(task=event.task + 1, attempt=1, pilot=0, site="hpc"),
                                         SetTimer(at=9.0, task=event.task, attempt=1, site="hpc")]
    seen = []

    def execute(seq, action):
        with sqlite3.connect(path) as other:
            seen.append((seq, other.execute("select kind from events where run_id = ? and seq = ?",
                                            (run, seq)).fetchone()))
    coord.acts.execute = execute
    commits = []
    db.conn.set_trace_callback(lambda sql: commits.append(sql) if sql.split()[0].upper() == "COMMIT" else None)
    with coord.turn():
        for t, seq in enumerate(answered):
            coord.mark(seq)
            coord.attempt_row(t, 1, PilotView(0, "hpc"), {"start": 2.0 + t})
            coord.attempt_row(t, 1, PilotView(0, "hpc"), {"end": 3.0 + t, "outcome": "done"})
        coord.feed([TaskStarted(time=7.0, task=0, attempt=1), TaskFinished(time=7.0, task=0, attempt=1)])
        coord.feed([TaskStarted(time=7.0, task=1, attempt=1)])
        assert seen == []                                # nothing acted on inside the turn
    db.conn.set_trace_callback(None)
    assert len(commits) == 1
    # rows 0-2 the answered dispatches; each event a row, then its two actions': 3 [4 5] 6 [7 8] 9 [10 11]
    assert seen == [(4, ("DispatchTask",)), (5, ("SetTimer",)), (7, ("DispatchTask",)), (8, ("SetTimer",)),
                    (10, ("DispatchTask",)), (11, ("SetTimer",))]
    assert [(r["task"], r["start"], r["end"], r["outcome"]) for r in db.query("select * from attempts order by task")] \
        == [(t, 2.0 + t, 3.0 + t, "done") for t in range(3)]
    assert [r["done"] for r in journal.rows(db, run) if r["seq"] in answered] == [1, 1, 1]


def test_answered_actions_are_marked_with_the_next_turn_that_writes_or_within_a_poll_period(tmp_path):
    """A turn that would write only done marks writes nothing (no commit that syncs the WAL):
    the marks wait for a turn that writes anyway, at most a poll period, and are written when
    the run stops. Unmarked, an action is redone on resume — which every action allows."""
    from conftest import make_bag, make_site
    from resel import journal
    from resel.events import DispatchTask
    from resel.live.coordinator import Coordinator
    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {"strategy": "model"})
    coord = Coordinator(db, run, make_bag(4), [make_site("hpc", 2.0)], LiveOptions(poll=0.3), "r1-abcdef", 0.0,
                        lambda site: pytest.fail("no site is opened here"), clock=lambda: 7.0)
    seqs = [coord.record(1.0, DispatchTask(task=t, attempt=1, pilot=0, site="hpc"), 0) for t in range(3)]

    def done() -> list:
        return [r["done"] for r in journal.rows(db, run)]
    changes = db.conn.total_changes
    with coord.turn():
        coord.mark_soon(seqs[0])
    assert db.conn.total_changes == changes and done() == [0, 0, 0]
    time.sleep(0.35)                          # the thing tested: a poll period passes
    with coord.turn():
        coord.mark_soon(seqs[1])
    assert done() == [1, 1, 0]
    with coord.turn():
        coord.mark_soon(seqs[2])
    assert done() == [1, 1, 0]
    coord.flush_marks()                       # the run stops
    assert done() == [1, 1, 1]


def test_a_start_read_in_the_same_turn_as_another_pilots_end_counts_first(tmp_path):
    """Found by the crash soak at 16 tasks per slot (issue 29): one read of a pool showed pilot 0's
    task done and pilot 1 started, running the task handed ahead to it. Fed pilot by pilot, the
    end came first: pilot 1, pending as far as the engine knew, was surplus and withdrawn, and
    its task — already running — was handed to pilot 0's free slot, so it ran twice. The rule:
    a task a read shows started is running before anything in the same turn decides about it,
    so it is neither dispatched again nor its pilot withdrawn."""
    from conftest import make_bag, make_site
    from resel import journal
    from resel.events import BagSubmitted, PilotStarted, TaskFinished, TaskStarted
    from resel.live.coordinator import Coordinator

    db = open_store(tmp_path / "s.db")
    run = _live_row(db, {"strategy": "model"})
    pool = make_site("pool", 1.0, mode="per-task", target=True, max_pilots=2)
    coord = Coordinator(db, run, make_bag(2), [pool], LiveOptions(strategy="model", prefetch=1), "r1-abcdef", 0.0,
                        lambda site: pytest.fail("no site is opened here"), clock=lambda: 5.0)
    feed = coord.feed
    coord.feed = lambda events, execute=True: feed(events, execute=False)   # no site work here
    coord.feed([BagSubmitted(time=0.0)])
    dispatched = [json.loads(r["data"]) for r in journal.rows(db, run) if r["kind"] == "DispatchTask"]
    assert [(d["task"], d["pilot"]) for d in dispatched] == [(0, 0), (1, 1)]   # one each, both pending

    # one turn's read, as the findings give it: pilot by pilot
    read = [PilotStarted(time=5.0, pilot=0), TaskStarted(time=5.0, task=0, attempt=1),
            TaskFinished(time=5.0, task=0, attempt=1),
            PilotStarted(time=5.0, pilot=1), TaskStarted(time=5.0, task=1, attempt=1)]
    coord.take_reports = lambda: [object()]
    coord.on_report = lambda report, t: list(read)
    coord.health.watch = lambda t: []
    coord.lease = lambda **kw: None
    coord.acts.retry = coord.task_data.retry = coord.polls.start = lambda t: None
    coord.step()
    rows = [(r["kind"], json.loads(r["data"])) for r in journal.rows(db, run)]
    again = [d for k, d in rows if k == "DispatchTask" and d["task"] == 1 and d["attempt"] > 1]
    assert again == [], "task 1 runs on pilot 1: handed to pilot 0 as well, it ran twice"
    assert not [d for k, d in rows if k == "CancelPilot" and d["pilot"] == 1]
    assert coord.engine.tasks[1].state.value == "running" and coord.engine.tasks[1].pilot == 1


def test_a_turns_starts_go_first_but_never_across_a_pilot_back_in_the_queue():
    """The order starts_first keeps: starts before ends, each in its own order — except that a
    pilot's requeue stays before a start read after it (the pilot started again: seen before
    its requeue, the engine would take the new start for the old run and the requeue would
    leave it pending while its agent runs)."""
    from resel.events import PilotRequeued, PilotStarted, TaskFinished, TaskStarted
    from resel.live.findings import starts_first
    a_done, b_up, b_run = (TaskFinished(time=1.0, task=0, attempt=1), PilotStarted(time=1.0, pilot=1),
                           TaskStarted(time=1.0, task=1, attempt=1))
    assert starts_first([a_done, b_up, b_run]) == [b_up, b_run, a_done]
    back, again = PilotRequeued(time=1.0, pilot=1, reason="job 7 PENDING"), PilotStarted(time=1.0, pilot=1)
    assert starts_first([a_done, back, again, b_run]) == [a_done, back, again, b_run]
    assert starts_first([a_done, b_run, back, again]) == [b_run, a_done, back, again]
