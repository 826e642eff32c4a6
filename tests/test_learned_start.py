"""The learned start predictor (models/learned_start.py), the queue's features
(models/start_features.py) and the clairvoyant twin (resel.sim.wait_eval.clairvoyant_wait).

Expected values come from the definitions: a prediction c hits a wait w when |c − w| ≤ 600 s,
so the best point holds the most waits in [c − 600, c + 600] (checked against a brute-force
scan of every whole-second centre); a job teaches only once it has started (start strictly
before the later job's submission); the clairvoyant twin is the replay itself when no job
arrives after the probe (the simulator's own real start, computed independently).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from resel.sim import wait_eval as we
from resel.sim.policies import QJob, make_policy
from resel.models import learned_start as ls
from resel.models.start_features import FEATURES, snapshot_features
from resel.backends.jobs import QueueSnapshot, SnapJob
from resel.sim.swf import Trace


def brute_best(waits: list[float]) -> int:
    """The most waits any window [c − 600, c + 600], c ≥ 600 (whole seconds), holds."""
    top = int(max(waits)) + 1202
    return max(sum(1 for w in waits if abs(c - w) <= 600) for c in range(600, top))


def model_with(waits: list[float], **options) -> ls.LearnedStart:
    m = ls.LearnedStart(min_cases=len(waits), **options)
    for i, w in enumerate(waits):
        m.observe((1.0, float(i % 3)), at=float(i), wait=w)
    return m


@pytest.mark.parametrize("seed", range(5))
def test_the_point_is_the_centre_of_the_fullest_twenty_minute_window(seed):
    rng = random.Random(seed)
    waits = [rng.choice([0.0, rng.uniform(0, 900), rng.uniform(3000, 9000), 5000.0]) for _ in range(60)]
    m = model_with(waits, configs=(ls.Config(k=60, prior=0.0, recency=0.0),))
    p = m.predict((1.0, 1.0), at=100.0)
    held = sum(1 for w in waits if abs(p.point - w) <= ls.HALF)
    assert held == brute_best(waits)
    assert p.mass == pytest.approx(held / len(waits))
    assert p.point >= ls.HALF                      # never a window reaching below zero


def test_waits_near_zero_give_ten_minutes_not_now():
    """Every past job started within 20 minutes: 10 minutes holds them all, 'now' only half."""
    waits = [0.0] * 10 + [1100.0] * 10
    p = model_with(waits, configs=(ls.Config(20, 0.0, 0.0),)).predict((1.0, 0.0), at=50.0)
    assert p.point == pytest.approx(600.0) and p.mass == 1.0


def test_nearest_neighbours_decide_and_the_prior_pulls_towards_recent_waits():
    """Jobs with feature 0 waited 2 h, those with feature 5 started at once; a feature-0 job is
    predicted 2 h with k = the 2 h jobs, 10 min when the site's recent waits weigh in enough."""
    m = ls.LearnedStart(min_cases=30, configs=(ls.Config(10, 0.0, 0.0), ls.Config(10, 5.0, 0.0)))
    for i in range(10):
        m.observe((0.0,), at=float(i), wait=7200.0)
    for i in range(20):
        m.observe((5.0,), at=float(10 + i), wait=0.0)
    p = m.predict((0.0,), at=40.0)
    assert p.points[0] == pytest.approx(7200.0)                   # the window centred on the 2 h waits
    assert p.points[1] == pytest.approx(600.0)                    # (1·0 + 5·2/3) > (1·1 + 5·1/3)
    assert p.config == ls.Config(10, 0.0, 0.0)                    # nothing judged yet: the first


def test_recency_prefers_the_newer_of_equally_near_jobs():
    m = ls.LearnedStart(min_cases=20, configs=(ls.Config(5, 0.0, 10.0),))
    for i in range(10):                                 # old jobs waited 1 h
        m.observe((1.0,), at=float(i), wait=3600.0)
    for i in range(10):                                 # three weeks later they wait 3 h
        m.observe((1.0,), at=3 * ls.WEEK + i, wait=10800.0)
    assert m.predict((1.0,), at=3 * ls.WEEK + 20).point == pytest.approx(10800.0)


def test_the_configuration_that_hit_most_is_used():
    configs = (ls.Config(5, 0.0, 0.0), ls.Config(5, 0.0, 1.0))
    m = ls.LearnedStart(min_cases=1, configs=configs)
    m.observe((0.0,), 0.0, 0.0)
    pred = ls.StartPrediction(600.0, 1.0, configs[0], 1, (5000.0, 600.0))
    assert m.best() == 0                                 # a tie: the first
    m.judge(pred, 100.0)                                 # only the second hit
    assert m.hits == [0, 1] and m.judged == 1 and m.best() == 1
    assert m.predict((0.0,), 1.0).config == configs[1]


def test_too_little_history_predicts_ten_minutes():
    m = ls.LearnedStart(min_cases=3)
    m.observe((1.0,), 0.0, 5000.0)
    p = m.predict((1.0,), 1.0)
    assert p.point == ls.HALF and p.config is None and math.isnan(p.mass) and p.n == 1


def test_bad_features_are_refused_with_what_was_expected():
    m = ls.LearnedStart()
    m.observe((1.0, 2.0), 0.0, 1.0)
    with pytest.raises(ValueError, match="expected 2 features, got 3"):
        m.observe((1.0, 2.0, 3.0), 1.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        m.observe((1.0, math.nan), 1.0, 1.0)


def test_walk_forward_learns_only_from_jobs_that_had_started():
    """A job that starts at the very instant another is submitted is not known to it (ties:
    a start is known strictly after it happens); one submitted a second later knows it."""
    cases = [ls.Case(0.0, (1.0,), 100.0), ls.Case(100.0, (1.0,), 0.0), ls.Case(101.0, (1.0,), 0.0)]
    out = ls.walk_forward(cases, min_cases=1, configs=(ls.Config(1, 0.0, 0.0),))
    assert [p.n for _, p in out] == [0, 0, 2]       # at 100 s nothing had started; at 101 s both had
    assert out[1][1].point == ls.HALF


def test_walk_forward_never_sees_the_future():
    """Changing later jobs' waits changes no earlier prediction; it changes the predictions
    made after those jobs started, which do see them (the nearest are the newest here)."""
    cases = [ls.Case(60.0 * i, (1.0,), 0.0) for i in range(600)]
    changed = cases[:300] + [ls.Case(c.at, c.features, 7200.0) for c in cases[300:]]
    configs = (ls.Config(20, 0.0, 10.0),)
    a = ls.walk_forward(cases, min_cases=50, configs=configs)
    b = ls.walk_forward(changed, min_cases=50, configs=configs)
    assert [p.points for _, p in a[:420]] == [p.points for _, p in b[:420]]   # job 300 starts after 420's submission
    assert {p.point for _, p in a[450:]} == {600.0} and {p.point for _, p in b[450:]} == {7200.0}


def test_features_of_a_snapshot_by_definition():
    snap = QueueSnapshot("s", 86400.0 * 3 + 21600.0, 100,
                         running=(SnapJob(60, 3600.0, 600.0), SnapJob(20, 1200.0, 1500.0)),
                         pending=(SnapJob(50, 7200.0),))
    f = dict(zip(FEATURES, snapshot_features(snap, 10, 1800.0, twin=3000.0, scheduler=None)))
    assert f["twin"] == pytest.approx(math.log(3060.0)) and f["scheduler"] == f["twin"]   # None: the other
    assert f["fits_now"] == 0.0                       # 20 cores free, but a job waits
    assert f["free"] == pytest.approx(0.2)
    assert f["size"] == pytest.approx(math.log(0.1)) and f["request"] == pytest.approx(math.log(1860.0))
    assert f["pending"] == pytest.approx(math.log(2.0))
    assert f["pending_work"] == pytest.approx(math.log1p(50 * 7200.0 / 100 / 60))
    assert f["running_left"] == pytest.approx(math.log1p(60 * 3000.0 / 100 / 60))   # the other is past its limit
    assert (f["day_sin"], f["day_cos"]) == pytest.approx((1.0, 0.0), abs=1e-12)     # 06:00
    empty = dict(zip(FEATURES, snapshot_features(QueueSnapshot("s", 0.0, 8), 8, 60.0, 0.0, 0.0)))
    assert empty["fits_now"] == 1.0 and empty["free"] == 1.0


def test_clairvoyant_twin_uses_true_run_times_the_twin_uses_limits():
    policy = make_policy("easy", 4)
    job = QJob(1, 4, 1000.0, 300.0, 0.0, start=0.0)       # asks 1000 s, runs 300 s
    job.resv = 0.0
    policy.place_running(job)
    assert we.clairvoyant_wait(policy, 100.0, 1, 60.0) == pytest.approx(200.0)
    assert we.twin_wait(policy, 100.0, 1, 60.0) == pytest.approx(900.0)
    assert policy.running == {1: job} and job.start == 0.0    # the policy itself is left as it was


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
def test_clairvoyant_twin_is_the_replay_when_nothing_arrives_later(policy):
    """With every job of the trace submitted before the probe, the replay's own real start
    (the simulator, computed on a clone) and the clairvoyant twin agree to the second."""
    swf = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf" / "hpc2n.swf"
    jobs = we.load_jobs(Trace(swf), 240, first=400)
    checked = 0
    for cut in (150, 250, 350):
        at = jobs[cut].submit
        head = [j for j in jobs if j.submit <= at]
        sim = we.QueueSim(head, policy, 240)
        sim.advance(at)
        for shape in (we.Shape(1, 3600.0), we.Shape(64, 43200.0), we.Shape(240, 3600.0)):
            real = sim.real_start(shape, at) - at
            assert we.clairvoyant_wait(sim.policy, at, shape.cores, shape.walltime) == pytest.approx(real)
            checked += real > 0
    assert checked >= 3                                   # not only probes that start at once


def test_hit_rates_refuse_probes_made_without_what_they_need():
    from resel.sim import hit_eval as he
    probe = we.Probe(0.0, we.Shape(1, 60.0), 10.0, {"scheduler": 0.0, "twin": 0.0})
    with pytest.raises(ValueError, match="hits=True"):
        he.hit_rates([probe], "t")
