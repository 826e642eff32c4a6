"""SiteLost: a live site that cannot be used any more (unreachable, rejects every submission).

The engine must move that site's waiting tasks to the fastest site still usable, withdraw its
pending pilots, never ask it for a pilot again, and requeue elsewhere a task lost on it.
"""

from __future__ import annotations

from conftest import make_bag, make_site
from resel.engine import Engine
from resel.events import (
    BagDone, BagSubmitted, CancelPilot, Decision, DispatchTask, PilotEnded, PilotStarted, SiteLost, SubmitPilot,
    TaskFinished,
)
from resel.states import TaskState


def of(actions, cls):
    return [a for a in actions if isinstance(a, cls)]


def test_waiting_tasks_move_to_fastest_usable_site_and_pending_pilot_is_withdrawn():
    """model puts 3 tasks on fast; fast is lost: its pilot is cancelled, tasks go to mid (not slow)."""
    fast, mid, slow = make_site("fast", 3.0), make_site("mid", 2.0), make_site("slow", 1.0)
    engine = Engine(make_bag(3), [fast, mid, slow], "model")
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=0, site="fast", cores=3, walltime=48 * 3600.0)]
    out = engine.handle(SiteLost(time=1.0, site="fast", reason="sbatch: QOSMaxSubmitJobPerUserLimit"))
    assert of(out, CancelPilot) == [CancelPilot(pilot=0, site="fast")]
    assert [d.target for d in of(out, Decision) if d.kind == "site-lost"] == ["mid"] * 3
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=1, site="mid", cores=3, walltime=48 * 3600.0)]
    assert engine.lost_sites == {"fast": "sbatch: QOSMaxSubmitJobPerUserLimit"}
    out = engine.handle(PilotStarted(time=2.0, pilot=1))
    assert [a.site for a in of(out, DispatchTask)] == ["mid"] * 3


def test_lost_site_is_never_asked_again_and_a_task_lost_there_requeues_elsewhere():
    """A task running on a site that is then lost comes back on another site when its pilot dies."""
    a, b = make_site("a", 2.0, cores=2), make_site("b", 1.0, cores=2)
    engine = Engine(make_bag(2), [a, b], "model")
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=0))
    assert len(of(out, DispatchTask)) == 2
    out = engine.handle(SiteLost(time=2.0, site="a", reason="ssh: connection refused"))
    assert of(out, SubmitPilot) == []          # nothing waits: the running tasks stay on a
    out = engine.handle(TaskFinished(time=3.0, task=0, attempt=1))
    assert of(out, SubmitPilot) == []
    out = engine.handle(PilotEnded(time=4.0, pilot=0, reason="node_fail"))
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=1, site="b", cores=1, walltime=48 * 3600.0)]
    assert engine.tasks[1].origin == 1 and engine.tasks[1].state is TaskState.WAITING
    out = engine.handle(PilotStarted(time=5.0, pilot=1))
    assert of(out, DispatchTask) == [DispatchTask(task=1, attempt=2, pilot=1, site="b")]
    out = engine.handle(TaskFinished(time=6.0, task=1, attempt=2))
    assert of(out, BagDone) == [BagDone(time=6.0, done=2, failed=0)]


def test_every_site_lost_fails_the_waiting_tasks_and_finishes():
    a = make_site("a", 2.0)
    engine = Engine(make_bag(2), [a], "model")
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(SiteLost(time=1.0, site="a", reason="unreachable"))
    assert of(out, BagDone) == [BagDone(time=1.0, done=0, failed=2)]
    assert [t.state for t in engine.tasks] == [TaskState.FAILED] * 2


def test_repeated_site_lost_is_ignored():
    a, b = make_site("a", 2.0), make_site("b", 1.0)
    engine = Engine(make_bag(1), [a, b], "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(SiteLost(time=1.0, site="a", reason="x"))
    assert engine.handle(SiteLost(time=2.0, site="a", reason="y")) == []
    assert engine.lost_sites == {"a": "x"}
