"""QBETS-style wait bounds (models/qbets.py): exact order statistics, change points, real waits."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from resel.models.qbets import WaitBounds, binomial_cdf_below, bound_index, coverage, min_history, upper_bound
from resel.swf import read_swf

SWF = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"


def brute_cdf_below(k, n, q):
    return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k))


@pytest.mark.parametrize("n,q", [(10, 0.5), (100, 0.5), (60, 0.95), (300, 0.9)])
def test_binomial_cdf_matches_the_exact_sum(n, q):
    for k in (0, 1, n // 2, n - 1, n, n + 1):
        assert binomial_cdf_below(k, n, q) == pytest.approx(min(1.0, brute_cdf_below(min(k, n + 1), n, q)), abs=1e-12)


def test_bound_rank_is_the_smallest_that_reaches_the_confidence():
    # n = 100, median, 95 %: P(X < 58) = 0.933 < 0.95 <= P(X < 59) = 0.956, so the 59th smallest
    assert bound_index(100, 0.5, 0.95) == 59
    assert brute_cdf_below(58, 100, 0.5) < 0.95 <= brute_cdf_below(59, 100, 0.5)
    assert min_history(0.95, 0.95) == 59
    assert bound_index(58, 0.95, 0.95) is None and bound_index(59, 0.95, 0.95) == 59
    assert upper_bound(list(range(100, 0, -1)), 0.5, 0.95) == 59


def test_coverage_of_independent_waits_reaches_the_quantile():
    rng = random.Random(7)
    waits = [rng.lognormvariate(6, 1.5) for _ in range(3000)]
    got = coverage(waits, 0.9, 0.95)
    assert got["coverage"] >= 0.9 and got["median_bound_over_wait"] > 1


def test_a_change_in_the_queue_is_detected_and_the_bound_follows_it():
    rng = random.Random(3)
    before = [rng.uniform(0, 100) for _ in range(400)]
    after = [rng.uniform(1000, 2000) for _ in range(400)]
    tracker = WaitBounds(0.95, 0.95)
    for w in before + after:
        tracker.observe(w)
    assert tracker.changes >= 1
    assert tracker.bound is not None and tracker.bound > 1000   # not stuck on the old queue
    assert coverage(before + after, 0.95, 0.95)["coverage"] > 0.9


def test_coverage_on_the_real_waits_of_hpc2n():
    """The waits recorded in the HPC2N trace (field 3), in submission order, walk-forward."""
    waits = [j.wait for j in read_swf(SWF / "hpc2n.swf") if j.wait is not None and j.wait >= 0]
    assert len(waits) > 3000
    got = coverage(waits, 0.9, 0.95)
    assert got["judged"] > 2000             # after a change point the bound waits for enough history
    assert got["coverage"] >= 0.9, got       # measured: 0.975 (goal of issue 8: >= 0.9 for a 90 % bound)
