"""Rates learned during the run (issue 26 item 2) and the default strategy ``auto`` (item 1).

The posterior of resel/learning.py is checked against a second implementation — the same
linear-Gaussian model conditioned with matrices (numpy) — and Student's t against numerical
integration of its density; the engine's use of it is checked on simulated sites whose sites
file claims the wrong clock.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from conftest import make_bag, make_site
from resel.sim.simulation import simulate
from resel.domain import Truth, WaitModel
from resel.engine import Engine
from resel.events import (
    BagSubmitted, DispatchTask, PilotStarted, RateLearned, StrategyChosen, TaskFinished, TaskMeasured,
)
from resel.learning import DEFAULT_SPREAD, PRIOR_SHAPE, TAU_COMMON, TAU_FIT, TAU_SITE, RateBeliefs, t_quantile
from resel.models.distributions import Dist
from resel.selection import Strategy, resolve_auto


def t_cdf(x: float, dof: float, steps: int = 20000) -> float:
    """Student's t CDF by Simpson's rule on its density (a second implementation)."""
    c = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2))
    f = lambda u: c * (1 + u * u / dof) ** (-(dof + 1) / 2)   # noqa: E731
    h = x / steps
    total = f(0) + f(x) + sum((4 if k % 2 else 2) * f(k * h) for k in range(1, steps))
    return 0.5 + total * h / 3


@pytest.mark.parametrize("p,dof", [(0.95, 4), (0.95, 5), (0.95, 10), (0.975, 6), (0.9, 30)])
def test_t_quantile_matches_the_density(p, dof):
    assert t_cdf(t_quantile(p, dof), dof) == pytest.approx(p, abs=1e-3)


def noise(n: int, m2: float, spread: float = DEFAULT_SPREAD) -> float:
    """E[σ²] of a site's inverse-gamma posterior, from its definition."""
    return (spread ** 2 * (PRIOR_SHAPE - 1) + m2 / 2) / (PRIOR_SHAPE + n / 2 - 1)


def gaussian_posterior(sources, ybar, var_obs):
    """E and Var of every μ_s by conditioning the joint Gaussian of (g, δ_1..δ_k) on the site
    means that were measured: ȳ_s = μ_s + e_s, e_s ~ N(0, var_obs[s])."""
    k = len(sources)
    lim = [s == "lim" for s in sources]
    # μ = A z, z = (g, δ_1..δ_k) ~ N(0, D)
    a = np.zeros((k, k + 1))
    for s in range(k):
        a[s, 0] = 1.0 if lim[s] else 0.0
        a[s, s + 1] = 1.0
    d = np.diag([TAU_COMMON ** 2] + [TAU_SITE ** 2 if lim[s] else TAU_FIT ** 2 for s in range(k)])
    cov_mu = a @ d @ a.T
    seen = [s for s in range(k) if ybar[s] is not None]
    if not seen:
        return np.zeros(k), np.diag(cov_mu)
    h = np.zeros((len(seen), k))
    for row, s in enumerate(seen):
        h[row, s] = 1.0
    r = np.diag([var_obs[s] for s in seen])
    y = np.array([ybar[s] for s in seen])
    gain = cov_mu @ h.T @ np.linalg.inv(h @ cov_mu @ h.T + r)
    return gain @ y, np.diag(cov_mu - gain @ h @ cov_mu)


def test_the_posterior_is_the_gaussian_conditioning_of_the_model():
    """Three LIM sites and a fitted one; tasks on two of them: every site's offset and its
    variance as the matrix conditioning gives them."""
    beliefs = RateBeliefs.of([100.0, 200.0, 300.0, 400.0], [("lim", 0.25), ("lim", 0.25), ("lim", 0.1), ("fit", 0.2)])
    times = {0: [50.0, 55.0, 47.0], 3: [500.0, 460.0]}
    for x, ts in times.items():
        for t in ts:
            assert beliefs.observe(x, t)
    ybar, var_obs = [None] * 4, [None] * 4
    for x, ts in times.items():
        ys = [math.log(t / beliefs.sites[x].prior_tx) for t in ts]
        ybar[x] = sum(ys) / len(ys)
        m2 = sum((y - ybar[x]) ** 2 for y in ys)
        var_obs[x] = noise(len(ys), m2, beliefs.sites[x].spread) / len(ys)
    mean, var = gaussian_posterior(["lim", "lim", "lim", "fit"], ybar, var_obs)
    for x in range(4):
        assert math.log(beliefs.factor(x)) == pytest.approx(mean[x], abs=1e-12)
        assert beliefs._var[x] == pytest.approx(var[x], abs=1e-12)


def test_one_task_moves_its_site_97_percent_and_the_other_lim_sites_77():
    """The module docstring's figures: a first task on a LIM site (no spread measured yet);
    then four more of the same time (five: 99 %)."""
    beliefs = RateBeliefs.of([10.0, 10.0, 10.0], [("lim", DEFAULT_SPREAD)] * 3)
    beliefs.observe(0, 20.0)
    y = math.log(2.0)
    assert math.log(beliefs.factor(0)) / y == pytest.approx(0.968, abs=0.001)
    assert math.log(beliefs.factor(1)) / y == pytest.approx(0.774, abs=0.001)
    for _ in range(4):
        beliefs.observe(0, 20.0)
    assert math.log(beliefs.factor(0)) / y > 0.99


def test_the_interval_narrows_with_evidence_and_covers_what_was_measured():
    beliefs = RateBeliefs.of([10.0], [("lim", DEFAULT_SPREAD)])
    widths = []
    for k in range(12):
        lo, hi = beliefs.interval(0, 0.9)
        widths.append(hi / lo)
        beliefs.observe(0, 25.0 * (1.02 if k % 2 else 0.98))
    assert all(b < a for a, b in zip(widths, widths[1:]))
    lo, hi = beliefs.interval(0, 0.9)
    assert lo < 25.0 < hi and math.log(hi / lo) < math.log(widths[0]) / 10


def test_bad_times_are_not_counted():
    beliefs = RateBeliefs.of([10.0], [("lim", DEFAULT_SPREAD)])
    for bad in (0.0, -1.0, math.inf, math.nan):
        assert not beliefs.observe(0, bad)
    assert beliefs.tasks(0) == 0 and beliefs.factor(0) == 1.0


def test_auto_resolves_from_the_estimates_it_was_given():
    sites = [make_site("a", 2.0), make_site("b", 1.0)]
    auto = Strategy.parse("auto")
    assert auto.name == "auto" and auto.reselect and auto.learn
    ran, why = resolve_auto(auto, sites, [0, 1], {"a": [60.0], "b": [None]}, None)
    assert ran.name == "queue+reselect+learn" and "start estimates for a" in why and "none for b" in why
    ran, why = resolve_auto(auto, sites, [0, 1], None, None)
    assert ran.name == "model+reselect+learn" and "no site has a start estimate" in why
    ran, why = resolve_auto(auto, sites, [0, 1], {"a": [None], "b": [math.inf]}, {"b": math.nan})
    assert ran.name == "model+reselect+learn"
    assert Strategy.parse("queue+reselect+learn").learn and Strategy.parse("reselect+learn").name == "reselect+learn"
    with pytest.raises(Exception, match="auto already"):
        Strategy.parse("auto+reselect")


def test_the_engine_says_what_auto_ran_as():
    engine = Engine(make_bag(4), [make_site("a", 2.0), make_site("b", 1.0)], "auto")
    out = engine.handle(BagSubmitted(time=0.0))
    chosen = [a for a in out if isinstance(a, StrategyChosen)]
    assert [c.strategy for c in chosen] == ["model+reselect+learn"] and engine.auto_choice[0] == chosen[0].strategy
    engine = Engine(make_bag(4), [make_site("a", 2.0), make_site("b", 1.0)], "auto")
    engine.handle(BagSubmitted(time=0.0, wait_menu={"a": [10.0], "b": [0.0]}))
    assert engine.auto_choice[0] == "queue+reselect+learn" and engine.strategy.base == "queue"


def test_the_agents_own_time_is_what_is_learned():
    """TaskMeasured (the agent's end − start) counts, not the coordinator's gap between events."""
    engine = Engine(make_bag(2), [make_site("a", 2.0)], "model+learn")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskMeasured(time=20.0, task=0, attempt=1, seconds=9.0))
    out = engine.handle(TaskFinished(time=20.0, task=0, attempt=1))
    learned = [a for a in out if isinstance(a, RateLearned)]
    assert learned and learned[0].tasks == 1 and learned[0].prior == 5.0
    assert engine.beliefs.sites[0].mean == pytest.approx(math.log(9.0 / 5.0))
    with pytest.raises(Exception):
        engine.handle(TaskMeasured(time=21.0, task=1, attempt=1, seconds=-1.0))


def wrong_clock_sites(claimed: float = 3.2) -> list:
    """Two sites with the same queue (none): tba runs a task in 5 s as claimed; tbb claims
    ``claimed`` GHz (T̂x 3.1 s) but truly runs at 1.0 GHz (10 s) — a sites file off by 3.2×."""
    def site(name, claim, true, cores):
        s = make_site(name, claim, cores=cores, target=True)
        return dataclasses.replace(s, wait=WaitModel(Dist.fixed(1.0)),
                                   truth=Truth(1.0, Dist.fixed(1.0), Dist.fixed(true)))
    return [site("tba", 2.0, 2.0, 8), site("tbb", claimed, 1.0, 4)]


@pytest.mark.parametrize("strategy,claimed", [("auto", 3.2), ("auto", 2.0), ("queue:0+reselect+learn", 3.2)])
def test_a_wrong_clock_is_corrected_within_five_tasks_and_the_work_moves(strategy, claimed):
    """The simulated twin of the live goal: tbb's T̂x is within 10 % of its true 10 s once at
    most five of its tasks finished, and after that the truly faster tba does most of the work;
    never later than without learning."""
    bag = make_bag(120)
    res = simulate(bag, wrong_clock_sites(claimed), strategy, seed=1)
    learned = [a for _, kind, a in res.events if kind == "RateLearned" and a.site == "tbb"]
    right = next(a for a in learned if abs(a.tx / 10.0 - 1) < 0.1)
    assert right.tasks <= 5
    late = [t for t in res.engine.tasks if t.attempts[-1].start > right.time]
    on_a = sum(res.engine.sites[t.attempts[-1].site].name == "tba" for t in late)
    assert on_a >= 0.75 * len(late), (on_a, len(late))
    blind = simulate(bag, wrong_clock_sites(claimed), "queue+reselect" if strategy == "auto"
                     else strategy.replace("+learn", ""), seed=1)
    assert res.metrics.ttc_wkd <= blind.metrics.ttc_wkd


def test_no_learning_strategy_changes_nothing_named():
    """Named strategies never learn (their decisions are pinned): no RateLearned, no beliefs."""
    res = simulate(make_bag(40), wrong_clock_sites(), "queue+reselect", seed=1)
    assert res.engine.beliefs is None and not any(kind == "RateLearned" for _, kind, _ in res.events)
    assert not any(isinstance(a, DispatchTask) and False for _, _, a in res.events)
