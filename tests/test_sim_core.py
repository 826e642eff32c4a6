"""The event core (resel/sim/core.py) and the batch queue on it (resel/sim/queue.py)."""

from __future__ import annotations

import math

import pytest

import resel
from resel.sim.simulation import Simulation, simulate
from resel.sim.core import ARRIVE, JOB_END, SCHEDULE, STARTED, Environment
from resel.sim.policies import QJob
from resel.sim.queue import BatchQueue


def test_events_run_by_time_then_priority_then_scheduling_order():
    env, seen = Environment(), []
    for time, priority, name in [(2, SCHEDULE, "c"), (1, ARRIVE, "b"), (1, JOB_END, "a"), (2, SCHEDULE, "d"),
                                 (2, STARTED, "e")]:
        env.schedule(time, priority, lambda now, x: seen.append((now, x)), name)
    env.run()
    assert seen == [(1, "a"), (1, "b"), (2, "c"), (2, "d"), (2, "e")]


def test_run_until_is_resumable_and_the_past_is_refused():
    env, seen = Environment(), []
    for t in (1, 5, 9):
        env.schedule(t, ARRIVE, lambda now, _: seen.append(now))
    env.run(5)
    assert seen == [1, 5] and env.now == 5
    env.run(7)
    assert seen == [1, 5] and env.now == 7 and env.peek() == 9
    with pytest.raises(ValueError):
        env.schedule(6, ARRIVE, lambda now, _: None)
    env.run()
    assert seen == [1, 5, 9] and not len(env)


def test_a_callback_may_stop_the_run_and_it_goes_on_later():
    env, seen = Environment(), []

    def record(now, x):
        seen.append(x)
        if x == "stop":
            env.stop()
    for t, x in ((1, "a"), (2, "stop"), (3, "b")):
        env.schedule(t, ARRIVE, record, x)
    env.run()
    assert seen == ["a", "stop"]
    env.run()
    assert seen == ["a", "stop", "b"]


def test_a_queue_schedules_once_per_instant_after_every_end_and_arrival():
    """Two jobs end at 10 and one arrives at 10: one pass sees all of it (FCFS: the 4-core
    head starts at 10 at once); a pass per event would have been called three times."""
    queue = BatchQueue("fcfs", 4)
    passes = []
    schedule = queue.policy.schedule
    queue.policy.schedule = lambda now: passes.append(now) or schedule(now)
    a, b = QJob(1, 2, 10, 10, 0.0), QJob(2, 2, 10, 10, 0.0)
    head = QJob(3, 4, 5, 5, 10.0)
    queue.feed([a, b, head])
    queue.advance()
    assert (a.start, b.start, head.start) == (0.0, 0.0, 10.0)
    assert passes == [0.0, 10.0, 15.0]


def test_a_clone_goes_on_independently():
    jobs = [QJob(i, 2, 10, 10, float(i)) for i in range(1, 6)]
    queue = BatchQueue("easy", 4)
    for j in jobs:
        queue.submit(j, j.submit)
    queue.advance(3)
    twin = queue.clone()
    twin.advance()
    assert all(j.start < 0 or j.start <= 3 for j in jobs)          # the original stopped at 3
    queue.advance()
    assert [j.start for j in jobs] == [1.0, 2.0, 11.0, 12.0, 21.0]


def test_a_simulation_stepped_in_pieces_ends_as_one_run():
    bag, sites = resel.default_bag().resized(64), resel.default_sites()
    whole = simulate(bag, sites, "reselect", seed=4)
    sim = Simulation(bag, sites, "reselect", seed=4)
    for _ in range(50):
        sim.step()
    sim.run(3600.0)
    assert sim.now <= 3600.0 and not sim.engine.finished
    sim.run()
    piece = sim.result()
    assert sim.finished and piece.metrics == whole.metrics and piece.steps == whole.steps
    assert [(d.time, d.kind, d.task) for d in piece.decisions] == [(d.time, d.kind, d.task) for d in whole.decisions]
    assert math.isfinite(piece.metrics.ttc_wkd)
