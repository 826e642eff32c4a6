"""The conditioned wait predictor (models/conditioned.py) and finish-time draws (models/finish.py).

Expected values come from the definitions: errors e = g(real) − g(ê) with g(x) = ln(x + 60),
predictions W_p = (ê + 60) · exp(e_p) − 60; Kaplan–Meier by hand; a wave lasts as long as
its slowest task, the plan as long as its slowest share.
"""

from __future__ import annotations

import math
import random

import pytest

from resel.models import conditioned as cw
from resel.models import finish as fin
from resel.store import open_store


def test_g_is_a_ratio_for_long_waits_and_a_difference_near_zero():
    assert cw.g_inv(cw.g(0.0)) == 0.0 and cw.g_inv(cw.g(3600.0)) == pytest.approx(3600.0)
    # an estimate twice too small at 10 h is e = ln 2 − a little
    assert cw.g(2 * 36000) - cw.g(36000) == pytest.approx(math.log(2), abs=0.002)
    assert cw.g_inv(-5.0) == 0.0                       # never a negative wait


def test_predict_applies_the_errors_quantiles_to_the_estimate():
    """Every past 1-core job of ≤1 h waited (ê + 60) · 2 − 60: the prediction for ê = 3500 s
    (the same estimate bucket, 1 min–1 h) is exactly that, at every quantile; a 64-core job of
    the same estimate size falls back to the estimate bucket's errors (no shape or core group
    of its own); an estimate of another size to the site's."""
    m = cw.ConditionedWait(min_errors=5, adapt=False)
    for k in range(10):
        est = 3000.0 + k
        m.observe("s", 1, 3600.0, est, (est + 60) * 2 - 60)
    q = m.predict("s", 1, 3600.0, 3500.0)
    assert q.level == "shape" and q.n == 10
    assert all(w == pytest.approx(3560 * 2 - 60) for _, w in q.quantiles)
    assert m.predict("s", 64, 3600.0, 3500.0).level == "estimate"
    assert m.predict("s", 1, 3600.0, 0.0).level == "site"            # another estimate bucket
    assert m.predict("other", 1, 3600.0, 3500.0) is None              # no history at all
    assert m.levels == {"shape": 1, "cores": 0, "estimate": 1, "site": 1, "none": 1}


def test_too_few_errors_means_no_prediction():
    m = cw.ConditionedWait(min_errors=3)
    m.observe("s", 1, 60.0, 0.0, 10.0)
    m.observe("s", 1, 60.0, 0.0, 20.0)
    assert m.predict("s", 1, 60.0, 0.0) is None
    m.observe("s", 1, 60.0, 0.0, 30.0)
    assert m.predict("s", 1, 60.0, 0.0).at(0.5) == pytest.approx(20.0)   # type-6 median of 10, 20, 30


def test_window_keeps_only_the_latest_errors():
    m = cw.ConditionedWait(min_errors=2, window=3, adapt=False)
    for real in (1000.0, 1000.0, 1000.0, 0.0, 0.0, 0.0):
        m.observe("s", 1, 60.0, 0.0, real)
    assert m.predict("s", 1, 60.0, 0.0).at(0.95) == 0.0   # the three 1000 s waits have left


def test_kaplan_meier_by_hand():
    # no censoring: type-6
    assert cw.km_quantiles([1.0, 2.0, 3.0], [], [0.5]) == [2.0]
    # complete 1, 3; censored at 2: S(1) = 2/3, at 3 one at risk: S = 0 → F(1) = 1/3, F(3) = 1
    assert cw.km_quantiles([1.0, 3.0], [2.0], [0.3, 0.34, 0.9]) == [1.0, 3.0, 3.0]
    # the top held up by censored values: the largest value seen (a lower bound)
    assert cw.km_quantiles([1.0], [5.0, 6.0], [0.9]) == [6.0]


def test_walk_forward_never_uses_a_wait_before_it_happened():
    """Case B is submitted at 100 while case A (submitted at 0) is still waiting (it starts at
    500): B must not learn from A. Case C, submitted at 600, learns from both (B started at
    107): its median is the type-6 median of the two errors, g⁻¹((g(500) + g(7)) / 2)."""
    cases = [cw.Case(0.0, 1, 60.0, 0.0, 500.0), cw.Case(100.0, 1, 60.0, 0.0, 7.0),
             cw.Case(600.0, 1, 60.0, 0.0, 9.0)]
    out = cw.walk_forward(cases, min_errors=1, adapt=False)
    assert [q is None for _, q in out] == [True, True, False]
    assert out[2][1].n == 2
    assert out[2][1].at(0.5) == pytest.approx(math.sqrt(560 * 67) - 60)


def test_walk_forward_censoring_counts_waiting_jobs():
    """With censor on, A (waiting since 0) is a censored error at 1000: the top quantile of the
    prediction for C rises to at least A's wait so far."""
    cases = [cw.Case(0.0, 1, 60.0, 0.0, 5000.0), cw.Case(10.0, 1, 60.0, 0.0, 1.0),
             cw.Case(1000.0, 1, 60.0, 0.0, 1.0)]
    plain = cw.walk_forward(cases, min_errors=1, adapt=False)[2][1]
    cens = cw.walk_forward(cases, min_errors=1, adapt=False, censor=True)[2][1]
    assert plain.at(0.95) == pytest.approx(1.0)
    assert cens.at(0.95) == pytest.approx(1000.0)


def test_online_recalibration_reaches_the_nominal_coverage_under_drift():
    """Waits whose scale doubles every 1,000 jobs: the plain quantiles of a 1,000-error window lag
    behind and under-cover (85 %);
    the recalibrated ones cover the 90 % interval within 2 points of nominal."""
    rng = random.Random(3)
    cases, t = [], 0.0
    for i in range(4000):
        t += 600.0
        scale = 3600.0 * 2 ** (i / 1000)
        cases.append(cw.Case(t, 1, 3600.0, 3600.0, scale * math.exp(rng.gauss(0, 0.6))))

    def coverage(adapt: bool) -> float:
        out = [(c, q) for c, q in cw.walk_forward(cases, adapt=adapt, window=1000) if q is not None]
        return sum(q.at(0.05) <= c.real <= q.at(0.95) for c, q in out) / len(out)

    assert coverage(False) < 0.86
    assert abs(coverage(True) - 0.90) <= 0.02


def test_stored_errors_round_trip(tmp_path):
    db = open_store(tmp_path / "w.db")
    rows = [{"site": "s", "source": "twin", "cores": 1, "walltime": 60.0, "estimate": 0.0, "real": float(r),
             "submit": 5.0, "origin": "swf:x", "job": i} for i, r in enumerate(range(30))]   # one submit time
    assert cw.save_errors(db, rows) == 30
    cw.save_errors(db, rows)                      # learning twice adds nothing
    assert db[cw.TABLE].count == 30
    models = cw.load_wait_errors(db)
    assert set(models) == {"twin"}
    # type-6 median of errors g(0..29) − g(0): halfway (in g) between 14 and 15 s
    assert models["twin"].predict("s", 1, 60.0, 0.0).at(0.5) == pytest.approx(math.sqrt(74 * 75) - 60)
    assert cw.load_wait_errors(None) == {}


# ------------------------------------------------------------------ finish times
def test_share_without_spread_is_the_point_rule():
    """No ratios, a constant wait: every draw is W + waves · T̂x (10 tasks on 4 slots: 3 waves)."""
    draws = fin.share_samples(fin.constant(100.0), 50.0, [], 10, 4, random.Random(0), samples=50)
    assert set(draws) == {250.0}


def test_a_wave_lasts_as_long_as_its_slowest_task():
    """Ratios uniform on many points: one wave of m tasks has median ratio ≈ 0.5^(1/m) of the
    way up (the max of m uniforms), drawn as the quantile at U^(1/m)."""
    ratios = [1.0 + i / 999 for i in range(1000)]          # uniform on [1, 2]
    draws = fin.share_samples(fin.constant(0.0), 10.0, ratios, 8, 8, random.Random(1), samples=4000)
    med = sorted(draws)[2000]
    assert med == pytest.approx(10.0 * (1.0 + 0.5 ** (1 / 8)), rel=0.01)


def test_a_pools_one_task_pilots_each_wait_on_their_own():
    """A pool's wave of m one-task pilots ends with the latest of m draws of W + ρ·T̂x: with
    waits uniform on [0, 1000] s and no run-time spread, its median is T̂x + 1000 · 0.5^(1/m)
    (the max of m uniforms); one pilot's wait before all its waves would give T̂x + 500."""
    law = lambda u: 1000.0 * u    # noqa: E731 - uniform waits on [0, 1000]
    m = 64
    pool = fin.share_samples(law, 10.0, [], m, m, random.Random(2), samples=4000, own_waits=True)
    one = fin.share_samples(law, 10.0, [], m, m, random.Random(2), samples=4000)
    assert sorted(pool)[2000] == pytest.approx(10.0 + 1000.0 * 0.5 ** (1 / m), rel=0.01)
    assert sorted(one)[2000] == pytest.approx(10.0 + 500.0, rel=0.05)
    # a constant wait and no spread: the point rule, pool or not
    assert set(fin.share_samples(fin.constant(60.0), 10.0, [], 8, 8, random.Random(0), samples=20,
                                 own_waits=True)) == {70.0}


def test_a_share_pays_its_data_as_the_point_rule_does():
    """Shared inputs before the first wave, own inputs in each wave, the outputs after the last
    (resel.selection.predicted_ttc): 10 tasks on 4 slots, W 100, T̂x 50, own 2, shared 30, out 5."""
    from resel.selection import predicted_ttc
    from resel.transfer import DataTimes
    d = DataTimes(own_in=2.0, shared_in=30.0, out=5.0)
    draws = fin.share_samples(fin.constant(100.0), 50.0, [], 10, 4, random.Random(0), samples=10, data=d)
    assert set(draws) == {predicted_ttc(100.0, 50.0, 10, 4, d)} == {100 + 30 + 3 * (50 + 2) + 5}


def test_plan_finish_is_the_latest_share_per_draw():
    q = fin.plan_finish({"a": [1.0, 5.0, 3.0], "b": [4.0, 2.0, 6.0]})
    assert (q.p05, q.p95) == (4.0, 6.0) and q.p50 == 5.0


def test_sum_quantiles_by_hand():
    # A ∈ {0, 10}, B ∈ {1, 2}: sums {1, 2, 11, 12}, median (type 6) 6.5
    assert fin.sum_quantiles([0.0, 10.0], [1.0, 2.0], [0.5]) == [6.5]


def test_wait_law_from_quantiles_interpolates_and_holds_the_ends():
    law = fin.wait_law_from_quantiles([(0.1, 10.0), (0.9, 90.0)])
    assert law(0.5) == pytest.approx(50.0) and law(0.0) == 10.0 and law(1.0) == 90.0


def test_likeliest_window_beats_the_median_for_a_spike_at_zero():
    """45 % of waits are 0, the rest spread over 2–21 h: the median lies in the tail's foot, where
    a ±10 min window catches almost nothing; the likeliest window is at "now"."""
    qs = tuple((p / 100, 0.0 if p <= 45 else 7200.0 + (p - 45) * 1200.0) for p in range(1, 100))
    law = cw.WaitQuantiles(0.0, qs, "site", 100)
    assert law.at(0.5) > 3600                         # the median is in the tail
    assert law.likeliest(600.0) <= 600.0              # the window holding 45 % is at "now"
    assert law.cdf(-1.0) == 0.0 and law.cdf(1e9) == 1.0
    assert law.cdf(7200.0 + 5 * 1200.0) == pytest.approx(0.50)


def test_history_learn_stores_the_estimates_errors_from_a_trace(tmp_path):
    """`resel history learn` on the real HPC2N trace: one twin and one scheduler error per job
    with a recorded wait; learning twice adds nothing; the plan's loader then predicts."""
    import json as _json
    from pathlib import Path

    from click.testing import CliRunner

    from resel.cli import cli
    swf = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf" / "hpc2n.swf"
    db = tmp_path / "l.db"
    args = ["history", "learn", "--site", "seth", "--swf", str(swf), "--db", str(db), "--json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    doc = _json.loads(r.output)
    assert doc["cores"] == 240 and doc["errors"] == 2 * doc["jobs"] and doc["jobs"] > 3000
    CliRunner().invoke(cli, args)
    store = open_store(db)
    assert store[cw.TABLE].count == doc["errors"]
    models = cw.load_wait_errors(store)
    q = models["twin"].predict("seth", 8, 3600.0, 600.0)
    assert q is not None and q.at(0.05) <= q.at(0.5) <= q.at(0.95)
    bad = CliRunner().invoke(cli, ["history", "learn", "--site", "x", "--swf", str(tmp_path / "none.swf")])
    assert bad.exit_code == 2 and "does not exist" in bad.output


def test_a_pool_starts_each_task_as_a_slot_frees():
    """Durations 4, 3, 2, 1 s on 2 slots: the first two at 0, the third when the 3-s one ends,
    the fourth when the 4-s one does."""
    assert fin.pool_starts([4.0, 3.0, 2.0, 1.0], 2) == [0.0, 0.0, 3.0, 4.0]
    assert fin.pool_starts([5.0, 5.0], 8) == [0.0, 0.0]


def test_a_pool_of_several_sizes_ends_with_its_latest_task():
    """Each task its own T̂x, one slot each, 2 at a time, a 60-s wait and no spread: waits and
    T̂x 100, 50, 40, 10 give ends 160, 110, 110 + 100 = 210, 160 + 70 = 230: every draw 230.
    With ratios uniform on [0.5, 1.5] and four equal tasks side by side, the latest ends at the
    max of four uniforms: median T̂x · (0.5 + 0.5^(1/4))."""
    draws = fin.pool_share_samples(fin.constant(60.0), [100.0, 50.0, 40.0, 10.0], [], 2, random.Random(0),
                                   samples=50)
    assert draws == pytest.approx([230.0] * 50)
    ratios = [0.5 + i / 999 for i in range(1000)]
    draws = fin.pool_share_samples(fin.constant(0.0), [100.0] * 4, ratios, 4, random.Random(1), samples=4000)
    assert sorted(draws)[2000] == pytest.approx(100.0 * (0.5 + 0.5 ** 0.25), rel=0.01)
