"""Overdue attempts (resel/engine_overdue.py): a task that hangs is cancelled once its site has
a limit, runs once more with none, and is given up as hung only when that rerun too runs past
the limit into a loss — never for being merely long. Expected times are worked from the rule's
definition: limit = max(floor, factor × the longest task that ended well on the site)."""

from __future__ import annotations

import math

import pytest

from conftest import make_bag, make_site
from resel.domain import Bag, Profile, TaskSpec
from resel.engine import Engine
from resel.engine_overdue import OverduePolicy
from resel.events import (BagSubmitted, CancelTask, DispatchTask, PilotEnded, PilotStarted, SetTimer, TaskFinished,
                          TaskOverdue, TaskStarted, TimerFired)
from resel.states import AttemptOutcome, TaskState


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


def _engine(count: int = 6, policy: OverduePolicy | None = None) -> tuple[Engine, list]:
    """One site of 4 cores, every task dispatched on the pilot's start at t=10."""
    engine = Engine(make_bag(count), [make_site("a", 2.0, cores=4)], "model", overdue=policy)
    out = engine.handle(BagSubmitted(time=0.0))
    out += engine.handle(PilotStarted(time=10.0, pilot=0))
    return engine, out


def _sweeps(out):
    return [a for a in of(out, SetTimer) if a.task == -1 and a.attempt < 0]


def test_no_limit_before_three_tasks_ended_well_then_ten_times_the_longest_at_least_the_floor():
    engine, out = _engine()
    assert [a.task for a in of(out, DispatchTask)] == [0, 1, 2, 3]
    assert math.isinf(engine.overdue_limit(0, 3)) and not _sweeps(out)
    out = engine.handle(TaskFinished(time=30.0, task=0, attempt=1))      # ran 20 s
    out += engine.handle(TaskFinished(time=90.0, task=1, attempt=1))     # ran 80 s: the longest
    assert math.isinf(engine.overdue_limit(0, 3)) and not _sweeps(out)
    out = engine.handle(TaskFinished(time=100.0, task=2, attempt=1))     # ran 90 s: the longest
    # the third: limit max(600, 10 × 90) = 900 s; one sweep armed, a quarter of it on
    assert engine.overdue_limit(0, 3) == 900.0
    assert _sweeps(out) == [SetTimer(at=325.0, task=-1, attempt=-1)]
    # a limit of 10 × 20 s would be under the floor: 600
    short, _ = _engine()
    for task, end in ((0, 11.0), (1, 12.0), (2, 30.0)):
        short.handle(TaskFinished(time=end, task=task, attempt=1))
    assert short.overdue_limit(0, 3) == 600.0


def _cancel_task_3(engine: Engine) -> None:
    """The sweeps of the test above, to task 3's cancel at 1000."""
    for k, at in enumerate((325.0, 550.0, 775.0, 1000.0), start=1):
        engine.handle(TimerFired(time=at, task=-1, attempt=-k))


def _hang_task_3(engine: Engine) -> None:
    """Tasks 0-2 end well at 100 (90 s each: limit 900 s); 4 and 5 take their slots and end."""
    for task in range(3):
        engine.handle(TaskFinished(time=100.0, task=task, attempt=1))
    for task in (4, 5):
        engine.handle(TaskFinished(time=150.0, task=task, attempt=1))


def test_a_hung_attempt_is_cancelled_at_the_first_sweep_past_its_limit_and_rerun_without_one():
    engine, _ = _engine()
    _hang_task_3(engine)
    # task 3 started at 10: overdue from 910. Sweeps every 225 s from 325 (armed at 100): under
    # the limit at 325, 550 and 775
    for k, at in enumerate((325.0, 550.0, 775.0), start=1):
        out = engine.handle(TimerFired(time=at, task=-1, attempt=-k))
        assert not of(out, CancelTask)
        assert _sweeps(out) == [SetTimer(at=at + 225.0, task=-1, attempt=-k - 1)]
    out = engine.handle(TimerFired(time=1000.0, task=-1, attempt=-4))
    assert of(out, CancelTask) == [CancelTask(task=3, attempt=1, pilot=0, site="a")]
    assert of(out, TaskOverdue) == [TaskOverdue(time=1000.0, task=3, attempt=1, site="a", ran=990.0, limit=900.0)]
    # rerun at once in the slot it freed, with no limit of this rule
    assert of(out, DispatchTask) == [DispatchTask(task=3, attempt=2, pilot=0, site="a")]
    task = engine.tasks[3]
    assert task.attempts[0].outcome is AttemptOutcome.CANCELLED and engine._reruns == {3: 900.0}
    out = engine.handle(TimerFired(time=1225.0, task=-1, attempt=-5))
    out += engine.handle(TimerFired(time=2200.0, task=-1, attempt=-6))   # sweeps go on; its rerun is left alone
    assert not of(out, CancelTask)
    # merely long: it ends well after 2,500 s, and the bag is done, nothing given up
    engine.handle(TaskFinished(time=3500.0, task=3, attempt=2))
    assert engine.finished and engine.done_count == 6 and engine.failed_count == 0


def test_a_stale_or_replaced_sweep_does_nothing():
    engine, _ = _engine()
    _hang_task_3(engine)
    assert engine.handle(TimerFired(time=5000.0, task=-1, attempt=-7)) == []   # never armed
    assert engine.tasks[3].state is TaskState.RUNNING


def test_its_rerun_lost_past_the_limit_is_given_up_as_hung_but_lost_before_it_is_rerun():
    engine, _ = _engine()
    _hang_task_3(engine)
    _cancel_task_3(engine)                                                 # attempt 1 cancelled
    engine.handle(TaskStarted(time=1001.0, task=3, attempt=2))
    # the pilot dies 500 s into the rerun (< 900): a plain loss, run again
    out = engine.handle(PilotEnded(time=1501.0, pilot=0, reason="node failure"))
    assert not of(out, TaskOverdue) and engine.tasks[3].state is TaskState.WAITING
    assert engine.tasks[3].losses == 1

    engine, _ = _engine()
    _hang_task_3(engine)
    _cancel_task_3(engine)
    engine.handle(TaskStarted(time=1001.0, task=3, attempt=2))
    # the rerun runs into the pilot's walltime 2,000 s later (> 900): hung, given up now, not
    # after max_losses (5) walltimes
    out = engine.handle(PilotEnded(time=3001.0, pilot=0, reason="walltime"))
    assert of(out, TaskOverdue) == [TaskOverdue(time=3001.0, task=3, attempt=2, site="a", ran=2000.0, limit=900.0,
                                                gave_up=True)]
    assert engine.tasks[3].state is TaskState.FAILED
    assert engine.finished and engine.failed_count == 1 and engine.done_count == 5


def test_off_means_no_sweep_and_no_limit():
    engine, _ = _engine(policy=OverduePolicy(enabled=False))
    out = []
    for task in range(3):
        out += engine.handle(TaskFinished(time=100.0, task=task, attempt=1))
    assert math.isinf(engine.overdue_limit(0, 3)) and not _sweeps(out)


def test_a_bag_of_unequal_tasks_scales_the_limit_by_each_tasks_size():
    specs = tuple(TaskSpec(f"t{i}", ins) for i, ins in enumerate((1e9, 1e9, 1e9, 4e9)))
    bag = Bag("u", "run", 4, 1, Profile(1.75e9), tasks=specs, order="given")
    engine = Engine(bag, [make_site("a", 2.0, cores=4)], "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=10.0, pilot=0))
    for task, ran in ((0, 100.0), (1, 50.0), (2, 80.0)):
        engine.handle(TaskFinished(time=10.0 + ran, task=task, attempt=1))
    # a task 4 times the others' size: 4 × 10 × 100 s (weights are relative to the mean, 1.75e9)
    assert engine.overdue_limit(0, 3) == 4000.0
    assert engine.overdue_limit(0, 2) == 1000.0


@pytest.mark.parametrize("strategy", ["auto", "model+reselect+learn", "reselect", "race:2", "rebroker"])
def test_where_nothing_hangs_the_rule_changes_no_outcome_beside_every_other_rule(strategy):
    """The rule's state lives beside the learning, hand-ahead and peer rules' (a field of the
    same name once overwrote the learning's measured times: ``auto`` crashed at its first
    finished task, which a run of the thesis sites never showed — its bag ended before the
    first sweep). 200 tasks of 2 s on a 4-core site and a pool, the rule made eager (floor 1 s,
    2× the longest: a sweep every second) so that it sweeps all along: every task's attempts,
    every pilot and the metrics are those of the rule turned off, and nothing was cancelled."""
    from resel.sim.simulation import simulate
    sites = [make_site("a", 2.0, cores=4), make_site("b", 3.0, cores=4, mode="per-task", target=True, max_pilots=4)]
    on = simulate(make_bag(200), sites, strategy, seed=2, overdue=OverduePolicy(factor=2.0, floor=1.0))
    off = simulate(make_bag(200), sites, strategy, seed=2, overdue=OverduePolicy(enabled=False))
    swept = [e for e in on.events if isinstance(e[2], TimerFired) and e[2].task == -1 and e[2].attempt < 0]
    assert len(swept) >= 50 and not any(isinstance(e[2], TaskOverdue) for e in on.events)
    assert on.metrics.done == 200
    assert [t.attempts for t in on.engine.tasks] == [t.attempts for t in off.engine.tasks]
    assert on.pilots == off.pilots and on.metrics == off.metrics


def test_the_live_table_shows_an_attempt_nearing_its_limit():
    """`resel run`'s table and `resel status` note a site's longest-running attempt once it has
    run half its limit: task 3 started at 10 s, its limit 900 s (10 × the 90 s the others took)."""
    from resel.live.view import site_notes, snapshot
    engine, _ = _engine()
    _hang_task_3(engine)

    def row(elapsed):
        (a,) = snapshot(engine, 1, "running", elapsed).sites
        return a
    assert row(300.0).longest_running == {"task": 3, "ran": 290.0, "limit": 900.0}
    assert site_notes(row(300.0)) == []                       # 290 s: under half its limit
    assert site_notes(row(600.0)) == ["task 3 has run 590 s (overdue at 15 min: then cancelled and run again)"]
    assert site_notes(row(950.0)) == ["task 3 has run 15.7 min (overdue: cancelled and run again at the next sweep)"]
    _cancel_task_3(engine)                                    # its rerun has no limit: nothing said
    assert row(5000.0).longest_running["limit"] is None and site_notes(row(5000.0)) == []
