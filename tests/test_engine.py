"""Engine tests in h11's test_state style: feed events, assert the returned actions and states.

No fakes and no driver: every test builds an Engine over the conftest sites and hands it
stamped events. Sites: hpc (index 0, T̂x = 5 s, one pilot, not a target) and pool (index 1,
T̂x = 10 s, per-task pilots, a target), so Ŵ(pool, hpc) = 5 s.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_bag, make_site
from resel.engine import Attempt, Engine
from resel.errors import IllegalTransition
from resel.events import (
    BagDone, BagSubmitted, CancelPilot, CancelTask, Decision, DispatchTask, PilotEnded, PilotRequeued,
    PilotStarted, SetTimer, SubmitPilot, TaskFailed, TaskFinished, TaskStarted, TimerFired,
)
from resel.states import (
    PILOT_TRANSITIONS, TASK_TRANSITIONS, PilotState, TaskState, next_pilot_state, next_task_state,
)

W, R, P, D, F = (TaskState.WAITING, TaskState.RUNNING, TaskState.PROVISIONAL, TaskState.DONE,
                 TaskState.FAILED)


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


def decisions(actions, kind=None):
    return [a for a in actions if type(a) is Decision and (kind is None or a.kind == kind)]


def snapshot(engine: Engine):
    """Everything observable about an engine's state, deep-copied for before/after checks."""
    return copy.deepcopy((
        [(t.state, t.origin, t.site, t.pilot, t.attempt, t.deadline, t.failures, t.losses, t.attempts)
         for t in engine.tasks],
        {pid: (p.state, p.free, p.started, p.ended, list(p.tasks)) for pid, p in engine.pilots.items()},
        [engine.acquired_at(s.name) for s in engine.sites],
        engine.remaining, engine.done_count, engine.failed_count, engine.started, engine.finished,
    ))


def reselect_one(sites):
    """model+reselect, one task: it goes to hpc; pilots 0 (hpc) and 1 (pool) are submitted."""
    engine = Engine(make_bag(1), sites, "model+reselect")
    out = engine.handle(BagSubmitted(time=0.0))
    assert [(a.pilot, a.site) for a in of(out, SubmitPilot)] == [(0, "hpc"), (1, "pool")]
    return engine


# ------------------------------------------------------------------ initial selection
def test_model_assigns_every_task_to_lowest_tx_site(sites):
    """strategy "model": every task is assigned to hpc (5 s < 10 s), one Decision per task."""
    engine = Engine(make_bag(3, cores_per_task=2), sites, "model")
    out = engine.handle(BagSubmitted(time=0.0))
    assert decisions(out) == [
        Decision(time=0.0, kind="assign", task=i, origin="hpc", target="hpc", tx_r=5.0) for i in range(3)
    ]
    assert [t.origin for t in engine.tasks] == [0, 0, 0]
    assert all(t.state is W for t in engine.tasks)


def test_model_submits_one_pilot_sized_for_all_tasks(sites):
    """strategy "model": one SubmitPilot on hpc with cores = count × cores_per_task = 6."""
    engine = Engine(make_bag(3, cores_per_task=2), sites, "model")
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=0, site="hpc", cores=6, walltime=48 * 3600.0)]
    assert of(out, DispatchTask) == []


# ------------------------------------------------------------------ late binding
def test_no_dispatch_before_pilot_started(sites):
    """Late binding: nothing is dispatched while the only pilot is still pending."""
    engine = Engine(make_bag(3), sites, "model")
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, DispatchTask) == []
    assert engine.acquired_at("hpc") is None


def test_pilot_started_dispatches_one_task_per_slot():
    """A 2-core pilot (site cap) running 3 tasks dispatches 2 now and the 3rd when a slot frees."""
    hpc = make_site("hpc", 2.0, cores=2)
    pool = make_site("pool", 1.0, mode="per-task", target=True)
    engine = Engine(make_bag(3), [hpc, pool], "model")
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=0, site="hpc", cores=2, walltime=48 * 3600.0)]
    out = engine.handle(PilotStarted(time=2.0, pilot=0))
    assert out == [DispatchTask(task=0, attempt=1, pilot=0, site="hpc"),
                   DispatchTask(task=1, attempt=1, pilot=0, site="hpc")]
    assert engine.acquired_at("hpc") == 2.0
    assert [t.state for t in engine.tasks] == [R, R, W]
    out = engine.handle(TaskFinished(time=7.0, task=0, attempt=1))
    assert out == [DispatchTask(task=2, attempt=1, pilot=0, site="hpc")]
    assert [t.state for t in engine.tasks] == [D, R, R]


def test_task_started_records_start_time(sites):
    """TaskStarted moves the running attempt's start to the reported time."""
    engine = Engine(make_bag(1), sites, "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=2.0, pilot=0))
    assert engine.handle(TaskStarted(time=2.5, task=0, attempt=1)) == []
    assert engine.tasks[0].attempts == [Attempt(0, 0, 2.5)]


# ------------------------------------------------------------------ re-selection, W > 0
def test_window_provisional_dispatch_on_target(sites):
    """Ŵ = 5 > 0: the pool pilot starting at t=1 runs the hpc task provisionally, timer at 1+5."""
    engine = reselect_one(sites)
    out = engine.handle(PilotStarted(time=1.0, pilot=1))
    assert out == [
        DispatchTask(task=0, attempt=1, pilot=1, site="pool"),
        SetTimer(at=6.0, task=0, attempt=1),
        Decision(time=1.0, kind="reselect-provisional", task=0, origin="hpc", target="pool",
                 a_r=None, a_r2=1.0, tx_r=5.0, tx_r2=10.0, window=5.0),
    ]
    assert engine.tasks[0].state is P
    assert engine.tasks[0].origin == 0


def test_origin_acquired_inside_window_moves_task_back(sites):
    """hpc acquired at t=3 < 1+5: cancel on pool, restart on hpc, Decision "move-back"."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    out = engine.handle(PilotStarted(time=3.0, pilot=0))
    assert out == [
        CancelTask(task=0, attempt=1, pilot=1, site="pool"),
        DispatchTask(task=0, attempt=2, pilot=0, site="hpc"),
        Decision(time=3.0, kind="move-back", task=0, origin="hpc", target="hpc",
                 a_r=3.0, a_r2=1.0, tx_r=5.0, tx_r2=10.0, window=5.0),
        CancelPilot(pilot=1, site="pool"),   # the pool slot is idle and nobody needs it
    ]
    task = engine.tasks[0]
    assert task.state is R
    assert task.attempts == [Attempt(1, 1, 1.0, 3.0, "cancelled"), Attempt(0, 0, 3.0)]


def test_window_closes_before_origin_acquired_commits_to_target(sites):
    """TimerFired at 6 with hpc still pending: Decision "window-commit", hpc pilot withdrawn."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    out = engine.handle(TimerFired(time=6.0, task=0, attempt=1))
    assert out == [
        Decision(time=6.0, kind="window-commit", task=0, origin="hpc", target="pool",
                 a_r=None, a_r2=1.0, tx_r=5.0, tx_r2=10.0, window=5.0),
        CancelPilot(pilot=0, site="hpc"),
    ]
    assert engine.tasks[0].state is R
    assert engine.tasks[0].origin == 1


def test_a_dispatch_after_the_acquisition_logs_the_a_r2_it_uses(sites):
    """The pool pilot is acquired at 1; task 1 only gets its slot at 11, when task 0 finishes
    there. Its window runs from the dispatch: timer at 11 + 5, and the Decision says
    a_r' = 11 (not the pilot's start, 1). hpc acquired at 14: a_r − a_r' = 3 < Ŵ = 5, so the
    move-back the log shows is the one the rule gives for the logged values."""
    engine = Engine(make_bag(2), sites, "model+reselect")
    engine.handle(BagSubmitted(time=0.0))
    pool = [p.id for p in engine.pilots.values() if engine.sites[p.site].name == "pool"]
    out = engine.handle(PilotStarted(time=1.0, pilot=pool[0]))
    assert [d.a_r2 for d in decisions(out, "reselect-provisional")] == [1.0]
    assert of(out, SetTimer) == [SetTimer(at=6.0, task=0, attempt=1)]
    out = engine.handle(TaskFinished(time=11.0, task=0, attempt=1))
    assert of(out, DispatchTask) == [DispatchTask(task=1, attempt=1, pilot=pool[0], site="pool")]
    assert of(out, SetTimer) == [SetTimer(at=16.0, task=1, attempt=1)]
    [d] = decisions(out, "reselect-provisional")
    assert (d.time, d.a_r, d.a_r2, d.window) == (11.0, None, 11.0, 5.0)
    hpc = next(p.id for p in engine.pilots.values() if engine.sites[p.site].name == "hpc")
    out = engine.handle(PilotStarted(time=14.0, pilot=hpc))
    [back] = decisions(out, "move-back")
    assert (back.a_r, back.a_r2, back.window) == (14.0, 11.0, 5.0)
    assert back.a_r - back.a_r2 < back.window


def test_a_window_commit_logs_the_a_r2_of_its_window(sites):
    """The same dispatch at 11, no hpc: the window closes at 16 and the commit logs a_r' = 11."""
    engine = Engine(make_bag(2), sites, "model+reselect")
    engine.handle(BagSubmitted(time=0.0))
    pool = [p.id for p in engine.pilots.values() if engine.sites[p.site].name == "pool"]
    engine.handle(PilotStarted(time=1.0, pilot=pool[0]))
    engine.handle(TaskFinished(time=11.0, task=0, attempt=1))
    out = engine.handle(TimerFired(time=16.0, task=1, attempt=1))
    [d] = decisions(out, "window-commit")
    assert (d.a_r2, d.time) == (11.0, 16.0) and d.time == d.a_r2 + d.window


def test_origin_acquired_after_commit_moves_nothing(sites):
    """hpc starting at t=7 (> window) after the commit moves nothing; its pilot is cancelled."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    engine.handle(TimerFired(time=6.0, task=0, attempt=1))
    out = engine.handle(PilotStarted(time=7.0, pilot=0))
    assert out == [CancelPilot(pilot=0, site="hpc")]
    assert engine.tasks[0].state is R
    assert engine.tasks[0].attempts == [Attempt(1, 1, 1.0)]
    assert engine.pilots[0].state is PilotState.CANCELLED


def test_origin_acquired_exactly_at_deadline_keeps_target(sites):
    """a_r − a_r' = Ŵ exactly is not < Ŵ: the task stays on r' (commit, no move-back)."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    out = engine.handle(PilotStarted(time=6.0, pilot=0))
    assert of(out, CancelTask) == [] and of(out, DispatchTask) == []
    assert [d.kind for d in decisions(out)] == ["window-commit"]
    assert engine.tasks[0].site == 1 and engine.tasks[0].origin == 1


def test_timer_for_moved_back_attempt_is_ignored(sites):
    """The window timer of attempt 1 fires after the move-back: nothing happens."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    engine.handle(PilotStarted(time=3.0, pilot=0))
    before = snapshot(engine)
    assert engine.handle(TimerFired(time=6.0, task=0, attempt=1)) == []
    assert snapshot(engine) == before


# ------------------------------------------------------------------ re-selection, W <= 0
def test_faster_target_moves_task_for_good():
    """Ŵ = 5 − 10 ≤ 0: the task moves to the faster target for good, no SetTimer."""
    hpc = make_site("hpc", 1.0)                                   # T̂x 10 s
    pool = make_site("pool", 2.0, mode="per-task", target=True)  # T̂x 5 s
    engine = Engine(make_bag(1), [hpc, pool], "reselect", seed=1)
    out = engine.handle(BagSubmitted(time=0.0))
    assert decisions(out, "assign")[0].origin == "hpc"          # seed 1 draws hpc
    out = engine.handle(PilotStarted(time=2.0, pilot=1))
    assert out == [
        DispatchTask(task=0, attempt=1, pilot=1, site="pool"),
        Decision(time=2.0, kind="reselect-commit", task=0, origin="hpc", target="pool",
                 a_r=None, a_r2=2.0, tx_r=10.0, tx_r2=5.0, window=-5.0),
        CancelPilot(pilot=0, site="hpc"),
    ]
    assert of(out, SetTimer) == []
    assert engine.tasks[0].state is R and engine.tasks[0].origin == 1


def test_non_target_site_never_takes_other_tasks(sites):
    """hpc is not a target: under random+reselect it runs only its own tasks."""
    engine = Engine(make_bag(20), sites, "reselect", seed=3)
    out = engine.handle(BagSubmitted(time=0.0))
    on_pool = {d.task for d in decisions(out, "assign") if d.origin == "pool"}
    assert on_pool                                               # the seed puts some on pool
    hpc_pilot = next(a.pilot for a in of(out, SubmitPilot) if a.site == "hpc")
    out = engine.handle(PilotStarted(time=1.0, pilot=hpc_pilot))
    assert {a.task for a in of(out, DispatchTask)}.isdisjoint(on_pool)
    assert decisions(out) == []


# ------------------------------------------------------------------ stale and illegal events
def test_stale_finish_of_cancelled_attempt_is_ignored(sites):
    """TaskFinished for the attempt cancelled by a move-back returns [] and changes nothing."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    engine.handle(PilotStarted(time=3.0, pilot=0))
    before = snapshot(engine)
    assert engine.handle(TaskFinished(time=4.0, task=0, attempt=1)) == []
    assert snapshot(engine) == before
    assert engine.tasks[0].state is R and engine.remaining == 1


def test_stale_failure_of_cancelled_attempt_is_ignored(sites):
    """TaskFailed for a cancelled attempt returns [] and changes nothing."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    engine.handle(PilotStarted(time=3.0, pilot=0))
    before = snapshot(engine)
    assert engine.handle(TaskFailed(time=4.0, task=0, attempt=1)) == []
    assert snapshot(engine) == before


def test_repeated_pilot_started_is_ignored(sites):
    """A second PilotStarted for an active pilot changes nothing (never moves backwards)."""
    engine = Engine(make_bag(1), sites, "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=2.0, pilot=0))
    before = snapshot(engine)
    assert engine.handle(PilotStarted(time=3.0, pilot=0)) == []
    assert snapshot(engine) == before


@pytest.mark.parametrize("event", [
    PilotStarted(time=1.0, pilot=99),
    PilotEnded(time=1.0, pilot=99),
    TaskFinished(time=1.0, task=99, attempt=1),
    TaskFailed(time=1.0, task=-1, attempt=1),
    TaskStarted(time=1.0, task=5, attempt=1),
    TimerFired(time=1.0, task=7, attempt=1),
], ids=lambda e: type(e).__name__)
def test_unknown_id_raises_and_leaves_state_unchanged(sites, event):
    """An event naming an unknown pilot or task raises IllegalTransition; state is unchanged."""
    engine = Engine(make_bag(2), sites, "model+reselect")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    before = snapshot(engine)
    with pytest.raises(IllegalTransition):
        engine.handle(event)
    assert snapshot(engine) == before


@pytest.mark.parametrize("event", [
    PilotStarted(time=1.0, pilot=0),
    TaskFinished(time=1.0, task=0, attempt=1),
    TimerFired(time=1.0, task=0, attempt=1),
], ids=lambda e: type(e).__name__)
def test_event_before_bag_submitted_raises(sites, event):
    """Any event before BagSubmitted raises IllegalTransition and the engine stays unstarted."""
    engine = Engine(make_bag(1), sites, "model")
    before = snapshot(engine)
    with pytest.raises(IllegalTransition):
        engine.handle(event)
    assert snapshot(engine) == before
    assert engine.handle(BagSubmitted(time=0.0))   # still usable afterwards


def test_bag_submitted_twice_raises(sites):
    """A second BagSubmitted raises IllegalTransition and changes nothing."""
    engine = Engine(make_bag(2), sites, "model")
    engine.handle(BagSubmitted(time=0.0))
    before = snapshot(engine)
    with pytest.raises(IllegalTransition):
        engine.handle(BagSubmitted(time=1.0))
    assert snapshot(engine) == before


# ------------------------------------------------------------------ losses and failures
def test_pilot_lost_with_running_tasks_requeues_and_reruns(sites):
    """PilotEnded under 2 running tasks: both go back to WAITING, a new pilot re-runs them."""
    engine = Engine(make_bag(2), sites, "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    out = engine.handle(PilotEnded(time=3.0, pilot=0, reason="walltime"))
    assert out == [SubmitPilot(pilot=1, site="hpc", cores=2, walltime=48 * 3600.0)]
    assert [t.state for t in engine.tasks] == [W, W]
    assert [(t.attempts[-1].end, t.attempts[-1].outcome) for t in engine.tasks] == [(3.0, "lost"), (3.0, "lost")]
    assert engine.remaining == 2
    out = engine.handle(PilotStarted(time=4.0, pilot=1))
    assert sorted(of(out, DispatchTask), key=lambda a: a.task) == [
        DispatchTask(task=0, attempt=2, pilot=1, site="hpc"),
        DispatchTask(task=1, attempt=2, pilot=1, site="hpc"),
    ]


def test_task_lost_on_every_pilot_eventually_fails(sites):
    """A task whose pilots keep dying is given up as FAILED (not lost) and reported in BagDone."""
    engine = Engine(make_bag(1), sites, "model", max_losses=2)
    out = engine.handle(BagSubmitted(time=0.0))
    t, losses = 0.0, 0
    while not engine.finished:
        pid = of(out, SubmitPilot)[-1].pilot
        t += 1
        engine.handle(PilotStarted(time=t, pilot=pid))
        t += 1
        out = engine.handle(PilotEnded(time=t, pilot=pid))
        losses += 1
        assert losses <= 3
    assert engine.tasks[0].state is F
    assert of(out, BagDone) == [BagDone(time=t, done=0, failed=1)]
    assert [a.outcome for a in engine.tasks[0].attempts] == ["lost"] * losses


def test_task_given_up_after_exactly_max_losses(sites):
    """With max_losses=2, the task is FAILED right after its 2nd pilot loss — once its losses
    were not all on one site: two on hpc move it to the pool for one more try (issue 18: never
    given up on one site's word while another could run it), and its loss there is final."""
    engine = Engine(make_bag(1), sites, "model", max_losses=2)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(PilotEnded(time=2.0, pilot=0))
    engine.handle(PilotStarted(time=3.0, pilot=1))
    out = engine.handle(PilotEnded(time=4.0, pilot=1))
    assert engine.tasks[0].state is W and engine.tasks[0].origin == 1
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=2, site="pool", cores=1, walltime=48 * 3600.0)]
    engine.handle(PilotStarted(time=5.0, pilot=2))
    out = engine.handle(PilotEnded(time=6.0, pilot=2))
    assert engine.tasks[0].state is F
    assert of(out, BagDone) == [BagDone(time=6.0, done=0, failed=1)]


def test_failed_task_is_retried_until_max_attempts(sites):
    """TaskFailed re-dispatches the task; after max_attempts=3 failures it is FAILED — once they
    were not all on one site: three on hpc move it to the pool for one more try (issue 18: a
    task is never given up on one site's word while another site could run it)."""
    engine = Engine(make_bag(1), sites, "model", max_attempts=3)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    assert engine.handle(TaskFailed(time=2.0, task=0, attempt=1)) == [
        DispatchTask(task=0, attempt=2, pilot=0, site="hpc")]
    assert engine.handle(TaskFailed(time=3.0, task=0, attempt=2)) == [
        DispatchTask(task=0, attempt=3, pilot=0, site="hpc")]
    out = engine.handle(TaskFailed(time=4.0, task=0, attempt=3))
    assert out == [CancelPilot(pilot=0, site="hpc"), SubmitPilot(pilot=1, site="pool", cores=1, walltime=48 * 3600.0)]
    assert engine.handle(PilotStarted(time=5.0, pilot=1)) == [DispatchTask(task=0, attempt=4, pilot=1, site="pool")]
    out = engine.handle(TaskFailed(time=6.0, task=0, attempt=4))
    assert out == [CancelPilot(pilot=1, site="pool"), BagDone(time=6.0, done=0, failed=1)]
    task = engine.tasks[0]
    assert task.state is F and task.failures == 4
    assert [a.outcome for a in task.attempts] == ["failed"] * 4


def test_failure_then_success_counts_done(sites):
    """One failure then a finish: the task is DONE, with one failed and one done attempt."""
    engine = Engine(make_bag(1), sites, "model", max_attempts=3)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskFailed(time=2.0, task=0, attempt=1))
    out = engine.handle(TaskFinished(time=7.0, task=0, attempt=2))
    assert of(out, BagDone) == [BagDone(time=7.0, done=1, failed=0)]
    assert [a.outcome for a in engine.tasks[0].attempts] == ["failed", "done"]


def test_provisional_task_lost_goes_back_to_origin(sites):
    """The pool pilot under a provisional task ends: the task waits for hpc again."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    engine.handle(PilotEnded(time=2.0, pilot=1))
    task = engine.tasks[0]
    assert task.state is W and task.origin == 0
    assert task.attempts == [Attempt(1, 1, 1.0, 2.0, "lost")]
    out = engine.handle(PilotStarted(time=3.0, pilot=0))
    assert of(out, DispatchTask)[0] == DispatchTask(task=0, attempt=2, pilot=0, site="hpc")


# ------------------------------------------------------------------ completion
def test_all_done_cancels_every_live_pilot_and_emits_bag_done(sites):
    """Last task finishes: CancelPilot for the pending hpc and the active pool pilot, then BagDone."""
    engine = reselect_one(sites)
    engine.handle(PilotStarted(time=1.0, pilot=1))
    out = engine.handle(TaskFinished(time=4.0, task=0, attempt=1))
    assert out == [CancelPilot(pilot=0, site="hpc"), CancelPilot(pilot=1, site="pool"),
                   BagDone(time=4.0, done=1, failed=0)]
    assert engine.finished and engine.remaining == 0
    assert {p.state for p in engine.pilots.values()} == {PilotState.CANCELLED, PilotState.ENDED}


def test_first_of_two_done_keeps_pilot(sites):
    """One of two tasks done: the shared pilot still runs the other, so no CancelPilot yet."""
    engine = Engine(make_bag(2), sites, "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    assert engine.handle(TaskFinished(time=6.0, task=0, attempt=1)) == []
    out = engine.handle(TaskFinished(time=6.5, task=1, attempt=1))
    assert out == [CancelPilot(pilot=0, site="hpc"), BagDone(time=6.5, done=2, failed=0)]


# ------------------------------------------------------------------ transition tables
ALL_TASK_WHATS = sorted({w for table in TASK_TRANSITIONS.values() for w in table} | {"start", "end"})
ALL_PILOT_WHATS = sorted({w for table in PILOT_TRANSITIONS.values() for w in table} | {"finish"})


@pytest.mark.parametrize("state", list(TaskState), ids=lambda s: s.value)
def test_unlisted_task_transitions_raise(state):
    """Every (state, what) pair not in TASK_TRANSITIONS raises IllegalTransition."""
    for what in ALL_TASK_WHATS:
        if what in TASK_TRANSITIONS[state]:
            assert next_task_state(state, what) is TASK_TRANSITIONS[state][what]
        else:
            with pytest.raises(IllegalTransition):
                next_task_state(state, what)


@pytest.mark.parametrize("state", list(PilotState), ids=lambda s: s.value)
def test_unlisted_pilot_transitions_raise(state):
    """Every (state, what) pair not in PILOT_TRANSITIONS raises IllegalTransition."""
    for what in ALL_PILOT_WHATS:
        if what in PILOT_TRANSITIONS[state]:
            assert next_pilot_state(state, what) is PILOT_TRANSITIONS[state][what]
        else:
            with pytest.raises(IllegalTransition):
                next_pilot_state(state, what)


def test_final_states_have_no_transitions():
    """DONE, FAILED, ENDED and CANCELLED are final and their tables are empty."""
    assert {s for s in TaskState if s.final} == {D, F}
    assert all(TASK_TRANSITIONS[s] == {} for s in (D, F))
    assert {s for s in PilotState if s.final} == {PilotState.ENDED, PilotState.CANCELLED}
    assert all(PILOT_TRANSITIONS[s] == {} for s in (PilotState.ENDED, PilotState.CANCELLED))
    assert all(TASK_TRANSITIONS[s] for s in TaskState if not s.final)


def test_every_state_has_a_table():
    """The tables cover every task and pilot state."""
    assert set(TASK_TRANSITIONS) == set(TaskState)
    assert set(PILOT_TRANSITIONS) == set(PilotState)


# ------------------------------------------------------------------ a random driver
class Driver:
    """The driver's side of the protocol: what it was told to run, checked as it is told."""

    def __init__(self, cores_per_task: int):
        self.cpt = cores_per_task
        self.pending: dict[int, int] = {}      # pilot -> slots
        self.active: dict[int, int] = {}
        self.running: dict[int, tuple[int, int]] = {}   # task -> (attempt, pilot)
        self.timers: list[tuple[float, int, int]] = []
        self.bag_done: list[BagDone] = []

    def busy(self, pid):
        return [t for t, (_, p) in self.running.items() if p == pid]

    def apply(self, now, actions):
        for a in actions:
            if type(a) is SubmitPilot:
                assert a.cores % self.cpt == 0
                self.pending[a.pilot] = a.cores // self.cpt
            elif type(a) is CancelPilot:
                assert not self.busy(a.pilot), f"{a} would kill running tasks"
                self.pending.pop(a.pilot, None)
                self.active.pop(a.pilot, None)
            elif type(a) is DispatchTask:
                assert a.pilot in self.active, f"{a}: pilot not acquired"
                assert a.task not in self.running, f"{a}: task already running"
                assert len(self.busy(a.pilot)) < self.active[a.pilot], f"{a}: pilot full"
                self.running[a.task] = (a.attempt, a.pilot)
            elif type(a) is CancelTask:
                assert self.running.pop(a.task) == (a.attempt, a.pilot)
            elif type(a) is SetTimer:
                assert a.at > now
                self.timers.append((a.at, a.task, a.attempt, a.site or ""))
            elif type(a) is BagDone:
                self.bag_done.append(a)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), seed=st.integers(0, 1000), count=st.integers(1, 8),
       cpt=st.sampled_from([1, 2]), strategy=st.sampled_from(["random", "model", "reselect", "model+reselect",
                                                             "topk:2+reselect"]),
       hpc_cores=st.sampled_from([2, 4, 64]), fast_pool=st.booleans())
def test_random_event_orders_keep_the_protocol(data, seed, count, cpt, strategy, hpc_cores, fast_pool):
    """Any order of pilot starts/ends, finishes, failures and timers: the protocol holds and the bag ends."""
    hpc = make_site("hpc", 2.0, cores=hpc_cores)
    pool = make_site("pool", 4.0 if fast_pool else 1.0, mode="per-task", target=True, max_pilots=3)
    bag = make_bag(count, cpt)
    engine = Engine(bag, [hpc, pool], strategy, seed=seed, max_attempts=2, max_losses=2)
    drv = Driver(cpt)
    now = 0.0
    drv.apply(now, engine.handle(BagSubmitted(time=now)))
    for _ in range(300):
        if engine.finished:
            break
        moves = (["start"] * bool(drv.pending) + ["reject"] * bool(drv.pending) + ["end"] * bool(drv.active)
                 + ["finish", "fail"] * bool(drv.running) + ["timer"] * bool(drv.timers))
        assert moves, "stalled: nothing pending, running or timed, yet the bag is not done"
        move = data.draw(st.sampled_from(moves))
        now += data.draw(st.sampled_from([0.0, 0.5, 2.0, 7.0]))
        drv.timers.sort()
        if move == "timer" or (drv.timers and drv.timers[0][0] <= now):
            at, task, attempt, site = drv.timers.pop(0)
            now = max(now, at)
            event = TimerFired(time=now, task=task, attempt=attempt, site=site or None)
        elif move in ("start", "reject"):
            pid = data.draw(st.sampled_from(sorted(drv.pending)))
            slots = drv.pending.pop(pid)
            if move == "start":
                drv.active[pid] = slots
                event = PilotStarted(time=now, pilot=pid)
            else:
                event = PilotEnded(time=now, pilot=pid, reason="rejected")
        elif move == "end":
            pid = data.draw(st.sampled_from(sorted(drv.active)))
            del drv.active[pid]
            for task in drv.busy(pid):
                del drv.running[task]
            event = PilotEnded(time=now, pilot=pid, reason="walltime")
        else:
            task = data.draw(st.sampled_from(sorted(drv.running)))
            attempt, _ = drv.running.pop(task)
            cls = TaskFinished if move == "finish" else TaskFailed
            event = cls(time=now, task=task, attempt=attempt)
        drv.apply(now, engine.handle(event))
    assert engine.finished
    assert len(drv.bag_done) == 1
    done = drv.bag_done[0]
    assert done.done + done.failed == count
    assert not drv.pending and not drv.active and not drv.running
    for task in engine.tasks:
        assert task.state.final
        outcomes = [a.outcome for a in task.attempts]
        assert outcomes.count("done") == (task.state is D)
        assert "" not in outcomes


def test_a_task_given_back_by_a_withdrawn_pilot_takes_a_free_slot_at_once():
    """Found by the live crash soak (a 300-task bag stalled on its last task): a pool's two
    per-task pilots each got a task handed ahead; the first runs and finishes hers, so the
    second, still pending, is surplus and withdrawn — giving its handed-ahead task back. That
    task must take the free slot in the same decision: no later event may ever come to fill it
    (before: it waited forever beside the idle pilot)."""
    pool = make_site("pool", 1.0, mode="per-task", target=True, max_pilots=2)
    engine = Engine(make_bag(2), [pool], "model", prefetch=1)
    first = engine.handle(BagSubmitted(time=0.0))
    assert [(a.task, a.pilot) for a in first if isinstance(a, DispatchTask)] == [(0, 0), (1, 1)]
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskStarted(time=1.1, task=0, attempt=1))
    acts = engine.handle(TaskFinished(time=5.0, task=0, attempt=1))
    assert [type(a).__name__ for a in acts if not isinstance(a, Decision)] == ["CancelPilot", "DispatchTask"]
    dispatch = next(a for a in acts if isinstance(a, DispatchTask))
    assert (dispatch.task, dispatch.attempt, dispatch.pilot) == (1, 2, 0)
    assert engine.tasks[1].state.value == "running"


def test_a_withdrawn_pilot_names_the_handed_ahead_attempts_it_gave_back():
    """The give-back stays at once (above); the withdrawn pilot keeps which attempts it gave
    back, so a live driver can take their inbox files back before it sends those tasks
    elsewhere — its agent may have claimed one unseen (resel/live/takeback.py). A pilot that
    held nothing handed ahead names none."""
    pool = make_site("pool", 1.0, mode="per-task", target=True, max_pilots=2)
    engine = Engine(make_bag(2), [pool], "model", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskStarted(time=1.1, task=0, attempt=1))
    engine.handle(TaskFinished(time=5.0, task=0, attempt=1))
    assert engine.pilots[1].state.final and engine.pilots[1].given_back == ((1, 1),)
    last = engine.handle(TaskFinished(time=6.0, task=1, attempt=2))
    assert [a.pilot for a in last if isinstance(a, CancelPilot)] == [0] and engine.pilots[0].given_back == ()


def test_a_pilot_back_in_the_queue_whose_old_agent_still_runs_tasks_is_not_withdrawn():
    """A restarted controller lists a running pilot as pending (PilotRequeued): its attempts
    are lost and handed to it again, and its old agent, still alive, starts them. With nothing
    left queued, the pending pilot looked like surplus and was withdrawn — its stop killed the
    attempts as "cancelled", which the engine had not asked for and waited on forever (the
    crash soak's bag stalled). A pending pilot with tasks running is not surplus."""
    hpc = make_site("hpc", 2.0, max_cores=2, cores=2)
    engine = Engine(make_bag(2), [hpc], "model", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    for task in (0, 1):
        engine.handle(TaskStarted(time=1.1, task=task, attempt=1))
    again = engine.handle(PilotRequeued(time=2.0, pilot=0, reason="job 7 PENDING"))
    assert [(a.task, a.attempt, a.pilot) for a in again if isinstance(a, DispatchTask)] == [(0, 2, 0), (1, 2, 0)]
    started = [a for task in (0, 1) for a in engine.handle(TaskStarted(time=2.5, task=task, attempt=2))]
    assert not [a for a in started if isinstance(a, CancelPilot)], started
    engine.handle(TaskFinished(time=3.5, task=0, attempt=2))
    last = engine.handle(TaskFinished(time=3.5, task=1, attempt=2))
    assert [type(a).__name__ for a in last if not isinstance(a, Decision)] == ["CancelPilot", "BagDone"]
