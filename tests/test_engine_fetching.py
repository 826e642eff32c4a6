"""The engine's *fetching* state (docs/data.md, docs/engine.md): a task whose attempt ended
well is done only once its outputs are home. Fed events in h11's test_state style over the
conftest sites: hpc (index 0, T̂x = 5 s, not a target), pool (index 1, T̂x = 10 s, a target)."""

from __future__ import annotations

from conftest import make_bag, make_site
from resel.engine import Attempt, Engine
from resel.events import (
    BagDone, BagSubmitted, CancelTask, DispatchTask, PilotStarted, SubmitPilot, TaskDelivered, TaskFetching, TaskFinished,
    TaskStarted, TaskUndelivered, TimerFired,
)
from resel.metrics import task_times, workload_metrics
from resel.states import TaskState

W, R, P, FE, D, F = (TaskState.WAITING, TaskState.RUNNING, TaskState.PROVISIONAL, TaskState.FETCHING,
                     TaskState.DONE, TaskState.FAILED)


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


def running_on_hpc(sites, count=1, strategy="model"):
    engine = Engine(make_bag(count), sites, strategy)
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=0))
    assert [a.task for a in of(out, DispatchTask)] == list(range(count))
    return engine


def test_fetching_frees_the_slot_but_the_task_is_not_done(sites):
    """TaskFetching: the attempt is done, its slot takes the next task, the bag is not done."""
    engine = Engine(make_bag(2), sites, "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))   # hpc's pilot has 2 slots: both tasks run
    out = engine.handle(TaskFetching(time=6.0, task=0, attempt=1))
    task = engine.tasks[0]
    assert task.state is FE
    assert task.attempts == [Attempt(0, 0, 1.0, 6.0, "done")]
    assert engine.remaining == 2 and engine.done_count == 0
    assert of(out, BagDone) == []
    assert engine.pilots[0].free == 1


def test_delivered_makes_the_task_done_and_ends_the_bag(sites):
    engine = running_on_hpc(sites)
    engine.handle(TaskFetching(time=6.0, task=0, attempt=1))
    out = engine.handle(TaskDelivered(time=9.0, task=0, attempt=1))
    assert engine.tasks[0].state is D
    assert engine.tasks[0].attempts[-1].delivered == 9.0
    assert engine.remaining == 0 and engine.done_count == 1
    assert [(b.time, b.done, b.failed) for b in of(out, BagDone)] == [(9.0, 1, 0)]


def test_delivery_time_counts_in_tx_and_ttc_not_in_tq(sites):
    """Per task: T_x runs from the start to the delivery; the bag's TTC is the last delivery."""
    engine = running_on_hpc(sites)
    engine.handle(TaskFetching(time=6.0, task=0, attempt=1))
    engine.handle(TaskDelivered(time=9.0, task=0, attempt=1))
    [times] = task_times(engine.tasks, ["hpc", "pool"])
    assert (times.tq, times.tx, times.ttc) == (1.0, 8.0, 9.0)
    m = workload_metrics(engine.tasks, ["hpc", "pool"])
    assert (m.ttc_wkd, m.tx_wkd, m.tq_wkd) == (9.0, 8.0, 1.0)


def test_undelivered_is_a_failed_attempt_and_the_task_runs_again(sites):
    """Two tasks on hpc's two slots; task 0's outputs never come home: it runs again in the
    slot its attempt freed."""
    engine = running_on_hpc(sites, count=2)
    engine.handle(TaskFetching(time=6.0, task=0, attempt=1))
    out = engine.handle(TaskUndelivered(time=7.0, task=0, attempt=1, reason="md.log: sha256 mismatch"))
    task = engine.tasks[0]
    assert task.failures == 1
    assert task.attempts[0].outcome == "failed"
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=2, pilot=0, site="hpc")]
    assert task.state is R
    assert engine.health[0].n == 1 and engine.health[0].bad == 1   # one attempt, and a bad one


def test_undelivered_max_attempts_times_gives_up():
    """On a site alone (elsewhere, a task failed only on one site gets one more try there).
    The idle pilot is released while the outputs travel; the retry gets a new one."""
    engine = Engine(make_bag(2), [make_site("hpc", 2.0)], "model", max_attempts=2)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskFinished(time=2.0, task=1, attempt=1))
    engine.handle(TaskFetching(time=5.0, task=0, attempt=1))
    out = engine.handle(TaskUndelivered(time=6.0, task=0, attempt=1))
    assert [a.site for a in of(out, SubmitPilot)] == ["hpc"] and engine.tasks[0].state is W
    out = engine.handle(PilotStarted(time=7.0, pilot=1))
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=2, pilot=1, site="hpc")]
    engine.handle(TaskFetching(time=10.0, task=0, attempt=2))
    out = engine.handle(TaskUndelivered(time=11.0, task=0, attempt=2))
    assert engine.tasks[0].state is F
    assert [(b.time, b.done, b.failed) for b in of(out, BagDone)] == [(11.0, 1, 1)]


def test_a_provisional_task_that_ended_leaves_its_window(sites):
    """The pool runs hpc's task provisionally from 1 (window to 6); it ends at 4 and fetches.
    hpc's pilot starting at 5 does not move it back, and the timer at 6 changes nothing."""
    engine = Engine(make_bag(1), sites, "model+reselect")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=1))
    assert engine.tasks[0].state is P
    engine.handle(TaskFetching(time=4.0, task=0, attempt=1))
    assert engine.tasks[0].state is FE
    out = engine.handle(PilotStarted(time=5.0, pilot=0))
    assert of(out, CancelTask) == [] and of(out, DispatchTask) == []
    assert engine.handle(TimerFired(time=6.0, task=0, attempt=1)) == [] or engine.tasks[0].state is FE
    engine.handle(TaskDelivered(time=6.5, task=0, attempt=1))
    assert engine.tasks[0].state is D
    assert engine.tasks[0].attempts[-1].site == 1


def test_stale_reports_change_nothing(sites):
    """A delivery for another attempt, or before fetching, and a second fetching, are ignored."""
    engine = running_on_hpc(sites)
    engine.handle(TaskDelivered(time=2.0, task=0, attempt=1))       # not fetching yet
    assert engine.tasks[0].state is R
    engine.handle(TaskFetching(time=6.0, task=0, attempt=1))
    engine.handle(TaskFetching(time=6.5, task=0, attempt=1))       # repeated
    engine.handle(TaskDelivered(time=7.0, task=0, attempt=2))       # another attempt
    engine.handle(TaskFinished(time=7.0, task=0, attempt=1))        # an old-style end: not running
    assert engine.tasks[0].state is FE and engine.remaining == 1
    engine.handle(TaskDelivered(time=8.0, task=0, attempt=1))
    engine.handle(TaskUndelivered(time=9.0, task=0, attempt=1))     # after delivery: nothing
    assert engine.tasks[0].state is D and engine.done_count == 1


def test_fetching_of_a_queued_attempt_starts_it_first():
    """A one-slot pilot runs task 0 and holds task 1 in its inbox; the agent starts task 1 in
    the freed slot and finishes it before the coordinator hears of either: both settle."""
    engine = Engine(make_bag(2), [make_site("hpc", 2.0, max_cores=1)], "model", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskStarted(time=1.2, task=0, attempt=1))
    assert [t.state for t in engine.tasks] == [R, TaskState.QUEUED]
    engine.handle(TaskFetching(time=6.0, task=1, attempt=1))     # its result before task 0's
    assert engine.tasks[1].state is FE
    engine.handle(TaskFetching(time=6.0, task=0, attempt=1))
    assert engine.tasks[0].state is FE
    assert engine.pilots[0].free + engine.pilots[0].debt >= 0
    for tid in (0, 1):
        engine.handle(TaskDelivered(time=7.0, task=tid, attempt=1))
    assert engine.done_count == 2 and engine.finished
