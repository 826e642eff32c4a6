"""Runtime models (models/runtime.py, models/fitted.py) and the engine's rates input (issue 15
item 6, issue 16 items 1–2).

Expected values are derived from the definitions: type-6 quantiles by rank p·(n + 1), LIM's
T̂x = κ · I / clock, a fit's rate = κ / (clock_eff · 1e9), Ŵ(r', r) = T̂x(r') − T̂x(r).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from conftest import make_bag
from resel.backends.htcondor.formats import parse_slots
from resel.sim.simulation import simulate
from resel.engine import Engine
from resel.errors import ModelError
from resel.events import BagSubmitted, Decision, PilotStarted
from resel.models.calibration import SiteFit, application_of
from resel.models.fitted import runtime_model, slot_speeds_from_ads, stored_fits
from resel.models.lim import SiteRate, site_rates
from resel.models.runtime import (
    EngineRates, RuntimeModel, SiteRuntime, quantile, rate_from_seconds_per_instruction, slot_ratios,
    window_quantile,
)
from resel.store import open_store

CONDOR = Path(__file__).resolve().parents[2] / "shared" / "data" / "formats" / "htcondor" / "condor_status_long.txt"


# ------------------------------------------------------------------ quantiles and intervals
def test_type6_quantile_by_hand():
    v = [1.0, 2.0, 3.0, 4.0]
    assert quantile(v, 0.5) == 2.5          # rank 0.5·5 = 2.5: halfway between 2 and 3
    assert quantile(v, 0.4) == 2.0          # rank 2: the second value
    assert quantile(v, 0.1) == 1.0          # rank 0.5 < 1: clamped to the smallest
    assert quantile(v, 0.9) == 4.0          # rank 4.5 > n: clamped to the largest
    assert quantile([7.0], 0.3) == 7.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_interval_covers_its_level_on_exchangeable_draws():
    """n = 39 ratios: the 90 % interval is [X_(2), X_(38)], whose expected coverage of a new
    draw is (38 − 2) / 40 = 0.9 exactly; 3,000 seeded trials land within 1.5 points."""
    rng = random.Random(1)
    hits = 0
    trials = 3000
    for _ in range(trials):
        ratios = tuple(sorted(math.exp(rng.gauss(0, 0.1)) for _ in range(39)))
        site = SiteRuntime("s", SiteRate("s", 1.0, 1.0), ratios=ratios)
        lo, hi = site.interval(1e9, 0.9)
        hits += lo <= math.exp(rng.gauss(0, 0.1)) <= hi
    assert abs(hits / trials - 0.9) < 0.015
    assert site.enough(0.9)
    assert not SiteRuntime("s", SiteRate("s", 1.0, 1.0), ratios=(1.0,) * 10).enough(0.9)


def test_no_ratios_no_interval_and_the_point_stays():
    site = SiteRuntime("s", SiteRate("s", 2.0, 4.0))
    assert site.tx(8e9) == pytest.approx(4.0)          # κ · I / clock = 2 · 8e9 / 4e9
    assert site.interval(8e9) is None and site.ratio(0.9) is None
    assert site.tx_quantile(8e9, 0.9) == pytest.approx(4.0)


def test_slot_ratios_from_clocks_and_weights():
    # clocks 2, 2, 4, 4 GHz: median 3, a task on a 2 GHz slot takes 1.5× the median slot's time
    assert slot_ratios([2.0, 2.0, 4.0, 4.0]) == (0.75, 0.75, 1.5, 1.5)
    # weights: one 1-core 2 GHz slot and one 3-core 4 GHz slot → 4 cores, median 4
    assert slot_ratios([2.0, 4.0], [1, 3]) == (1.0, 1.0, 1.0, 2.0)
    assert slot_ratios([]) == () and slot_ratios([0.0, -1.0]) == ()


def test_rate_from_a_fit_reproduces_its_seconds_per_instruction():
    r = rate_from_seconds_per_instruction("s", 2.5e-10, kappa=1.2)
    assert r.seconds_per_instruction == pytest.approx(2.5e-10) and r.kappa == 1.2
    assert rate_from_seconds_per_instruction("s", 2.5e-10).kappa == 1.0


def test_window_quantile_by_hand():
    """T̂x(r') = 10, ratios {1, 2}; T̂x(r) = 5, no ratios: W ∈ {5, 15} equally likely."""
    target = SiteRuntime("a", SiteRate("a", 1.0, 1.0), ratios=(1.0, 2.0))
    origin = SiteRuntime("b", SiteRate("b", 1.0, 2.0))
    assert window_quantile(target, origin, 1e10, 0.9) == 15.0
    assert window_quantile(target, origin, 1e10, 0.5) == 10.0   # rank 1.5: halfway
    # no ratios anywhere: the point rule
    plain = SiteRuntime("a", SiteRate("a", 1.0, 1.0))
    assert window_quantile(plain, origin, 1e10, 0.9) == pytest.approx(5.0)


def test_engine_rates_json_round_trip():
    er = EngineRates({"a": SiteRate("a", 1.2, 2.5)}, {("a", "b"): 7.5}, {"a": SiteRate("a", 1.2, 2.0)}, "x")
    back = EngineRates.from_json(json.loads(json.dumps(er.to_json())))
    assert back == er


def test_runtime_model_engine_rates_risk_and_objective():
    a = SiteRuntime("a", SiteRate("a", 1.0, 1.0), "fit", ratios=(0.8, 1.0, 1.5))
    b = SiteRuntime("b", SiteRate("b", 1.0, 2.0))
    rm = RuntimeModel({"a": a, "b": b}, "auto", "gmx")
    assert rm.used == "mixed" and "fitted on a" in rm.summary() and "LIM on b" in rm.summary()
    er = rm.engine_rates(1e10, risk=0.9, objective="p90")
    assert er.windows[("a", "b")] == pytest.approx(window_quantile(a, b, 1e10, 0.9))
    # the split's rate is the 90 % runtime quantile's: T̂x × ρ_0.9
    assert er.split["a"].tx(1e10) == pytest.approx(a.tx_quantile(1e10, 0.9))
    assert er.split["b"].tx(1e10) == pytest.approx(5.0)
    assert rm.engine_rates(1e10).windows is None and rm.engine_rates(1e10).split is None


# ------------------------------------------------------------------ the engine takes its rates
def test_engine_default_equals_lim_rates_given(sites):
    bag = make_bag(3)
    a = Engine(bag, sites, "model+reselect")
    b = Engine(bag, sites, "model+reselect", rates=site_rates(sites))
    assert a.tx == b.tx == [5.0, 10.0]
    assert a.handle(BagSubmitted(time=0.0)) == b.handle(BagSubmitted(time=0.0))


def test_engine_predicts_with_the_rates_it_is_given(sites):
    """A fit making the pool the faster site (3 s vs 5 s) sends the model strategy's tasks there;
    a site missing from the rates falls back to LIM."""
    rates = {"pool": rate_from_seconds_per_instruction("pool", 3e-10)}
    engine = Engine(make_bag(2), sites, "model", rates=rates)
    assert engine.tx == [5.0, pytest.approx(3.0)]
    out = engine.handle(BagSubmitted(time=0.0))
    assert {d.origin for d in out if type(d) is Decision} == {"pool"}


def test_engine_uses_given_windows(sites):
    """Risk windows: Ŵ(pool, hpc) = 12 s instead of 10 − 5 = 5 s; the decision logs the window
    used and the timer is set at dispatch + 12."""
    engine = Engine(make_bag(1), sites, "model+reselect",
                    rates=EngineRates(site_rates(sites), {("pool", "hpc"): 12.0}))
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=1))
    d = next(a for a in out if type(a) is Decision)
    assert d.kind == "reselect-provisional" and d.window == 12.0
    assert engine.tasks[0].deadline == 13.0
    # a window ≤ 0 at the risk quantile moves the task for good
    engine = Engine(make_bag(1), sites, "model+reselect",
                    rates=EngineRates(site_rates(sites), {("pool", "hpc"): -1.0}))
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=1))
    assert [a.kind for a in out if type(a) is Decision] == ["reselect-commit"]


def test_simulator_and_engine_share_rates(default_sites, gromacs_bag):
    """simulate(rates=...) hands them to its engine: with every site's rate halved but one,
    the model strategy picks that one."""
    bag = gromacs_bag.resized(8)
    lim = site_rates(default_sites)
    rates = {n: SiteRate(n, r.kappa, r.clock_ghz * (4.0 if n == "comet" else 1.0)) for n, r in lim.items()}
    res = simulate(bag, default_sites, "model", seed=1, rates=rates)
    assert {t.first_origin for t in res.engine.tasks} == {[s.name for s in default_sites].index("comet")}
    assert res.engine.tx[1] == pytest.approx(lim["comet"].tx(bag.profile.instructions) / 4)


# ------------------------------------------------------------------ which model: the store
def _store_with_fit(tmp_path, app="gmx", residuals=(0.9, 1.0, 1.1)):
    db = open_store(tmp_path / "r.db")
    fit = SiteFit("hpc", 2.5e-10, 4.0, n=3, application=app, runs=[1, 2], first="2026-01-01T00:00:00+00:00",
                  last="2026-01-02T00:00:00+00:00", residuals=list(residuals))
    db["model_fits"].insert({"created": "2026-01-02T00:00:00+00:00", "runs": "[1, 2]", "n_evidence": 3,
                             "fit": json.dumps({"hpc": fit.as_dict()}), "application": app}, alter=True)
    return db


def test_auto_uses_the_fit_of_the_bags_application_else_lim(tmp_path, sites):
    db = _store_with_fit(tmp_path)
    bag = make_bag(1)
    gmx = type(bag)("b", "gmx mdrun -nsteps 10", 1, 1, bag.profile)
    rm = runtime_model(gmx, sites, db=db)
    assert rm.sites["hpc"].source == "fit" and rm.sites["hpc"].tx(1e10) == pytest.approx(2.5)
    assert "fit 1 of gmx" in rm.sites["hpc"].detail and "run(s) 1, 2" in rm.sites["hpc"].detail
    assert rm.sites["hpc"].ratios == (0.9, 1.0, 1.1)
    assert rm.sites["pool"].source == "lim" and rm.sites["pool"].tx(1e10) == pytest.approx(10.0)
    # another program: LIM everywhere; --model fitted refuses, --model lim ignores the fit
    assert runtime_model(bag, sites, db=db).used == "lim"
    with pytest.raises(ModelError, match="no stored fit for application 'run'"):
        runtime_model(bag, sites, model="fitted", db=db)
    assert runtime_model(gmx, sites, model="lim", db=db).used == "lim"
    fitted = runtime_model(gmx, sites, model="fitted", db=db)
    assert fitted.notes == ["pool: no fit of gmx; LIM"]


def test_fits_made_before_applications_are_not_used(tmp_path):
    db = open_store(tmp_path / "old.db")
    db["model_fits"].insert({"created": "x", "fit": json.dumps({"hpc": SiteFit("hpc", 1e-9, 1.0).as_dict()})})
    assert stored_fits(db, "gmx") == {}


def test_application_of_commands():
    assert application_of("gmx mdrun -s topol.tpr") == "gmx"
    assert application_of("OMP_NUM_THREADS=1 /opt/gromacs/bin/gmx_d mdrun") == "gmx_d"
    assert application_of("nice -n 10 env A=1 python3 run.py") == "python3"
    assert application_of("sleep 2; echo task $RESEL_TASK") == "sleep"
    assert application_of("") == ""


def test_recorded_pool_publishes_no_slot_speeds_and_constructed_mips_ads_do():
    """The real recorded condor_status -long has neither Mips nor a clock: no interval from
    ads (nothing guessed). Constructed ads with Mips (what HTCondor's startd benchmarks publish)
    give one ratio per core."""
    slots = parse_slots(CONDOR.read_text(), "condor_status -long")
    assert slots and slot_speeds_from_ads(slots) is None
    ads = "\n\n".join(f'Name = "slot{i}@n{i}"\nCpus = {c}\nMips = {m}\nSlotType = "Static"'
                      for i, (c, m) in enumerate([(1, 10000), (1, 20000), (2, 20000)]))
    speeds, weights, what = slot_speeds_from_ads(parse_slots(ads, "condor_status -long"))
    assert speeds == [10000.0, 20000.0, 20000.0] and weights == [1.0, 1.0, 2.0] and what == "collector Mips"
    assert slot_ratios(speeds, weights) == (1.0, 1.0, 1.0, 2.0)


def test_simulated_pool_publishes_its_truth_clocks(default_sites, gromacs_bag):
    rm = runtime_model(gromacs_bag, default_sites, model="lim", simulated_ads=True)
    osg = rm.sites["osg"]
    assert osg.ratios and "published slot clocks" in osg.spread
    assert not rm.sites["bridges"].ratios        # a cluster publishes nothing of the kind here
    lo, hi = osg.interval(gromacs_bag.profile.instructions)
    assert lo < osg.tx(gromacs_bag.profile.instructions) < hi


def test_a_pools_clocks_widen_a_lim_prior_never_narrow_it(default_sites, gromacs_bag):
    """The simulated pool's slot clocks span 5–95 % of ±0.08 in ln, but LIM does not see the
    slots' IPC: a learning run's prior spread stays the default (0.25) for it; clocks spread
    wider than that widen it; a fit's measured spread is its own, however narrow."""
    from resel.learning import DEFAULT_SPREAD
    rm = runtime_model(gromacs_bag, default_sites, model="lim", simulated_ads=True)
    osg = rm.sites["osg"]
    clocks = math.log(osg.ratio(0.95) / osg.ratio(0.05)) / (2 * 1.645)
    assert 0.05 < clocks < 0.1 and rm.priors()["osg"] == ("lim", DEFAULT_SPREAD)
    wide = tuple(math.exp(0.6 * (k / 20 - 0.5) * 2) for k in range(21))   # ±0.6 in ln: 0.3 at ±1.645 σ
    rm.sites["osg"] = SiteRuntime("osg", osg.rate, "lim", "", wide, "clocks")
    assert rm.priors()["osg"][1] == pytest.approx(math.log(quantile(wide, 0.95) / quantile(wide, 0.05)) / (2 * 1.645))
    assert rm.priors()["osg"][1] > DEFAULT_SPREAD
    narrow = tuple(1.0 + 0.01 * (k - 10) for k in range(21))
    rm.sites["osg"] = SiteRuntime("osg", osg.rate, "fit", "", narrow, "measured")
    kept = math.log(quantile(narrow, 0.95) / quantile(narrow, 0.05)) / (2 * 1.645)
    assert kept < DEFAULT_SPREAD / 4 and rm.priors()["osg"] == ("fit", pytest.approx(kept))


def test_measured_clocks_give_a_spread_only_when_they_differ(tmp_path, sites):
    db = open_store(tmp_path / "c.db")
    db["live_pilots"].insert_all([{"run_id": 1, "pilot": i, "site": "hpc", "cpu_mhz": 2400.0} for i in range(3)],
                                 alter=True)
    assert runtime_model(make_bag(1), sites, db=db).sites["hpc"].ratios == ()   # identical: no spread known
    db["live_pilots"].insert({"run_id": 1, "pilot": 9, "site": "hpc", "cpu_mhz": 3600.0}, alter=True)
    assert runtime_model(make_bag(1), sites, db=db).sites["hpc"].ratios == pytest.approx((2 / 3, 1.0, 1.0, 1.0))


# ------------------------------------------------------------------ a pool's ads in resel plan
from test_htcondor_submit import replay  # noqa: E402,F401 - the real HTCondorCLI over replayed outputs


def test_plan_gives_a_pool_the_spread_of_its_slot_clocks(replay):
    """`resel plan` on an HTCondor site: the real HTCondorCLI reads `condor_status -json`
    (the recorded ads plus constructed CPU models: 2.4 GHz and 2.2 GHz Xeons, an AMD model
    without a clock) and the row's T̂x interval is the spread of those clocks, saying how many
    cpus they cover."""
    from resel.backends.pilotsite import PilotSite
    from resel.backends.transport import LocalTransport
    from resel.domain import Clock, PilotPolicy, Site
    from resel.live.plan import plan

    cli, _, _, _ = replay
    from resel.domain import Access
    site = Site("pool", "htcondor", 24, Clock(2.3), pilot=PilotPolicy(mode="per-task", max_pilots=8),
                access=Access(workdir=str(replay[3] / "work")))
    doc = plan(make_bag(4), [site], strategy="model", opener=lambda s: PilotSite(s, LocalTransport(), cli))
    row = doc["sites"][0]
    assert row["error"] is None, row
    spread = row["slot_spread"]
    assert spread == {"what": "collector clocks of 24 of 26 cpus", "slots": 8, "speed_min": 2200.0, "speed_max": 2400.0}
    speeds, weights, _ = slot_speeds_from_ads(cli.slots())
    ratios = sorted(slot_ratios(speeds, weights))
    tx = 1e10 / 2.3e9
    assert row["tx"] == pytest.approx(tx)
    assert row["tx_interval"] == pytest.approx([tx * quantile(ratios, 0.05), tx * quantile(ratios, 0.95)])
    assert "collector clocks" in row["tx_detail"]
