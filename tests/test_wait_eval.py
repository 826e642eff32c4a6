"""The wait-estimate evaluation harness (resel/sim/wait_eval.py): real starts, no peeking, metrics."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from resel.sim import wait_eval as we
from resel.sim.replay import replay
from resel.sim.swf import read_swf

SWF = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"


def tiny() -> list[we.BgJob]:
    """4 cores. A (4 cores, runs 0-50, asked 100), B (2 cores, submitted 10, runs 100),
    C (4 cores, submitted 20, runs 10). FCFS: A 0-50, B 50-150, C 150-160."""
    return [we.BgJob(0, 4, 100, 50), we.BgJob(10, 2, 100, 100), we.BgJob(20, 4, 10, 10)]


def test_real_start_on_a_hand_checked_fcfs_queue():
    sim = we.QueueSim(tiny(), "fcfs", 4)
    sim.advance(15)
    # at 15 only B is queued: when A ends at 50, B and the 2-core pilot both fit
    assert sim.real_start(we.Shape(2, 30), 15) == 50
    # the scheduler plans with A's request (ends at 100), so it answers 100, not 50
    assert we.SchedulerEstimate().predict(sim, we.Shape(2, 30), 15) == 85
    sim.advance(25)
    # at 25 C (4 cores) is queued before the pilot: FCFS lets nobody pass, C runs 150-160
    assert sim.real_start(we.Shape(2, 30), 25) == 160
    # the probes ran on clones: the main replay goes on as if they had never been there
    starts = {}
    sim.on_start = lambda job, now: starts.setdefault(job.id, now)
    sim.advance(math.inf)
    assert starts == {2: 50, 3: 150}


def test_a_probe_that_fits_starts_at_once():
    sim = we.QueueSim(tiny(), "easy", 4)
    sim.advance(5)
    assert sim.real_start(we.Shape(1, 10), 5) == 50      # A holds all 4 cores until 50
    sim.advance(60)
    assert sim.real_start(we.Shape(2, 10), 60) == 60     # B holds 2 of 4


def hpc2n(first: int = 600) -> list[we.BgJob]:
    return we.load_jobs(read_swf(SWF / "hpc2n.swf"), 240, first=first)


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_the_main_replay_matches_resel_replay(policy):
    """Same schedule as resel.sim.replay.replay: the harness replays the trace, not a variant of it."""
    jobs = hpc2n()
    waits: list[float] = []
    sim = we.QueueSim(jobs, policy, 240, on_start=lambda job, now: waits.append(now - job.submit))
    sim.advance(math.inf)
    reference = replay(list(read_swf(SWF / "hpc2n.swf"))[:600], policy, 240).stats.wait
    assert sorted(waits) == sorted(reference)
    assert sum(w > 0 for w in waits) > 50           # the slice does queue


@pytest.mark.parametrize("policy", ["easy", "conservative"])
def test_cloning_gives_the_start_a_full_rerun_with_the_pilot_gives(policy):
    """The clone-and-continue shortcut against the slow way: the trace re-run from the start
    with the pilot as one more arrival."""
    jobs = hpc2n()
    shape = we.Shape(32, 43200)
    for at in we.injection_times(jobs, 4, warmup=0.3):
        at = math.floor(at) + 0.25                   # no tie with an integer trace time
        sim = we.QueueSim(jobs, policy, 240)
        sim.advance(at)
        fast = sim.real_start(shape, at)
        with_pilot = sorted(jobs + [we.BgJob(at, shape.cores, shape.walltime, shape.walltime)],
                            key=lambda j: j.submit)
        index = next(i for i, j in enumerate(with_pilot) if j.submit == at) + 1   # its QJob id
        starts = {}
        rerun = we.QueueSim(with_pilot, policy, 240,
                            on_start=lambda job, now: starts.setdefault(job.id, now))
        while index not in starts:
            rerun.step()
        assert fast == starts[index]


class Spy:
    """An estimator that remembers what it was shown and when."""

    name = "spy"

    def __init__(self):
        self.seen: list[tuple[float, float]] = []     # (start, submit) of observed jobs
        self.asked: list[tuple[float, float]] = []    # (probe time, latest start seen)

    def observe(self, job, now):
        assert job.start == now and job.id > 0       # only background jobs, at their start
        self.seen.append((now, job.submit))

    def predict(self, sim, shape, now):
        self.asked.append((now, max((s for s, _ in self.seen), default=-math.inf)))
        return 0.0


def test_no_estimate_peeks_at_the_future():
    jobs = hpc2n()
    spy = Spy()
    history = we.HistoryBound(0.9, 0.9)
    times = we.injection_times(jobs, 10, seed=1)
    seen_at: list[tuple[float, float]] = []

    class Watch(we.HistoryBound):
        def predict(self, sim, shape, now):
            seen_at.append((now, self.last_start))
            return super().predict(sim, shape, now)

    watch = Watch(0.9, 0.9)
    probes = we.evaluate(jobs, "easy", 240, times, [we.Shape(8, 3600)], [spy, history, watch])
    assert len(probes) == 10 and len(spy.asked) == 10
    for at, latest in spy.asked:
        assert latest <= at
        # and every job that started by then was shown: the history is complete, not just clean
        assert latest == max(s for s, _ in spy.seen if s <= at)
    assert all(last <= at for at, last in seen_at)


def test_history_holds_only_started_jobs_at_each_probe():
    """Count check: at a probe, the site tracker was fed exactly the jobs started by then."""
    jobs = hpc2n()
    fed: list[int] = []

    class Count(we.HistoryBound):
        observed = 0

        def observe(self, job, now):
            self.observed += 1
            super().observe(job, now)

        def predict(self, sim, shape, now):
            fed.append(self.observed)
            return super().predict(sim, shape, now)

    times = we.injection_times(jobs, 5)
    we.evaluate(jobs, "conservative", 240, times, [we.Shape(1, 3600)], [Count()])
    starts: list[float] = []
    sim = we.QueueSim(jobs, "conservative", 240, on_start=lambda job, now: starts.append(now))
    sim.advance(math.inf)
    assert fed == [sum(s <= at for s in starts) for at in times]


def test_scores_are_fractions_and_the_table_renders():
    jobs = hpc2n(800)
    times = we.injection_times(jobs, 12, seed=3)
    probes = we.evaluate(jobs, "easy", 240, times, [we.Shape(1, 3600), we.Shape(64, 43200)])
    scores = we.summarize(probes)
    names = {"qbets-0.9/0.9", "qbets-0.95/0.95", "scheduler"}
    assert {s.estimator for s in scores} == names
    for s in scores:
        assert s.probes > 0 and 0 <= s.judged <= s.probes
        if s.judged:
            assert 0.0 <= s.coverage <= 1.0
        assert math.isnan(s.coverage_waited) or 0.0 <= s.coverage_waited <= 1.0
        assert s.ratio_n <= s.judged
    assert all(p.real >= 0 for p in probes)
    text = we.markdown(scores)
    assert "| scheduler |" in text and "64c×12h" in text


def test_score_by_hand():
    probes = [we.Probe(0, we.Shape(1, 60), 0.0, {"b": 10.0}),
              we.Probe(1, we.Shape(1, 60), 100.0, {"b": 200.0}),
              we.Probe(2, we.Shape(1, 60), 400.0, {"b": 100.0}),
              we.Probe(3, we.Shape(1, 60), 50.0, {"b": None})]
    s = we.score(probes, "b")
    assert (s.probes, s.judged, s.waited) == (4, 3, 3)
    assert s.coverage == pytest.approx(2 / 3)
    assert s.coverage_waited == pytest.approx(1 / 2)
    assert s.ratio_n == 2 and s.median_ratio == pytest.approx((2.0 + 0.25) / 2)
    assert s.median_abs_error == 100.0


def test_injection_times_stay_inside_the_trace_after_the_warm_up():
    jobs = hpc2n()
    t0, t1 = jobs[0].submit, jobs[-1].submit
    for seed in (None, 5):
        times = we.injection_times(jobs, 20, warmup=0.2, seed=seed)
        assert len(times) == 20 and times == sorted(times)
        assert all(t0 + 0.2 * (t1 - t0) <= t <= t1 for t in times)


def test_recorded_reality_rebuilds_the_queue_from_the_trace():
    """4 cores. A runs 0-100 (asked 100); B (4 cores, asked 20) submitted 10, really started at
    100; C (2 cores, asked 50) submitted 20, really started at 115."""
    jobs = [we.Recorded(0, 0, 100, 4, 100), we.Recorded(10, 100, 110, 4, 20),
            we.Recorded(20, 115, 165, 2, 50)]
    spy = Spy()
    probes = we.evaluate_recorded(jobs, "fcfs", 4, 3, warmup=0.0,
                                  estimators=[spy, we.SchedulerEstimate()])
    assert [p.real for p in probes] == [0, 90, 95]
    # C at 20: A runs until its request (100), B is queued 100-120, so C is planned at 120
    assert [p.estimates["scheduler"] for p in probes] == [0, 90, 100]
    # the history holds the recorded waits of jobs started strictly before each probe: only A
    assert [s for s, _ in spy.seen] == [0]
    assert [latest for _, latest in spy.asked] == [-math.inf, 0, 0]


def test_recorded_reality_on_hpc2n_gives_fractions():
    jobs = we.load_recorded(list(read_swf(SWF / "hpc2n.swf"))[:800], 240)
    probes = we.evaluate_recorded(jobs, "easy", 240, 30, seed=2)
    assert len(probes) == 30
    for s in we.summarize(probes):
        assert math.isnan(s.coverage) or 0 <= s.coverage <= 1
