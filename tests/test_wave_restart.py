"""A pool's running wave moved whole onto a batch site's idle slots (issue 26 goals: `auto`
against `auto` given the true rates; docs/engine.md, "A pool's running wave").

The censored posterior of resel/learning.py (:class:`~resel.learning.Survivors`) is checked
against conditioning by definition — draw the site's rate and every task's time from the model,
keep the draws in which every running task outlasts its elapsed time — not against a second
copy of the grid; the engine's use of it on the real HPC2N trace with the opportunistic pool.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from resel.learning import RateBeliefs

REPO = Path(__file__).resolve().parents[1]


def _beliefs() -> RateBeliefs:
    """Two LIM sites; site 0 measured twice at about half its prior, which pulls site 1's belief
    (the shared offset) with it: site 1 believed ~110 s, its σ the prior's 0.25."""
    beliefs = RateBeliefs.of([100.0, 200.0], [("lim", 0.25), ("lim", 0.25)])
    beliefs.observe(0, 50.0)
    beliefs.observe(0, 56.0)
    return beliefs


def _by_rejection(beliefs: RateBeliefs, x: int, elapsed: list[float], n: int = 400_000, seed: int = 7):
    """Draws of (site x's typical time, every task's time) from the model, kept where every task
    outlasted its elapsed time: μ ~ N(E[μ_x], Var[μ_x]), ln T_j = ln T̂x₀ + μ + σ Z_j."""
    rng = np.random.default_rng(seed)
    site = beliefs.sites[x]
    mu = math.log(site.prior_tx) + beliefs._mu[x] + math.sqrt(beliefs._var[x]) * rng.standard_normal(n)
    sigma = math.sqrt(site.noise)
    times = np.exp(mu[:, None] + sigma * rng.standard_normal((n, len(elapsed))))
    kept = np.all(times > np.asarray(elapsed)[None, :], axis=1)
    return mu[kept], times[kept], sigma, rng


def test_the_censored_posterior_is_conditioning_on_every_task_outlasting_its_time():
    """Three tasks still running at 150–170 s on a site believed ~110 s: the site's typical
    time, the chance one of them still runs 100 s from now, and one task's mean time left, as
    the kept draws give them."""
    beliefs = _beliefs()
    elapsed = [150.0, 160.0, 170.0]
    seen = beliefs.survivors(1, elapsed)
    mu, times, sigma, _ = _by_rejection(beliefs, 1, elapsed)
    assert len(mu) > 20_000
    assert seen.mean_rate() == pytest.approx(float(np.mean(np.exp(mu))), rel=0.01)
    assert seen.mean_rate() > 1.3 * beliefs.tx(1)   # still running says slower than believed
    later = np.any(times > np.asarray(elapsed)[None, :] + 100.0, axis=1)
    assert seen.any_outlasts(100.0) == pytest.approx(float(np.mean(later)), abs=0.01)
    assert seen.left(150.0) == pytest.approx(float(np.mean(times[:, 0] - 150.0)), rel=0.02)


def test_a_rate_measured_by_many_tasks_is_still_integrated_right():
    """Three thousand tasks measured on the site (its offset's sd ~0.003, far narrower than the
    range the running tasks' evidence spans, so the grid's step is 1.6 times it): the
    posterior still matches conditioning — the mass falls on a few points, symmetric about
    the prior's mean."""
    beliefs = RateBeliefs.of([100.0, 200.0], [("lim", 0.25), ("lim", 0.25)])
    for k in range(3000):
        beliefs.observe(1, 200.0 * math.exp(0.25 * math.sin(k)))
    assert math.sqrt(beliefs._var[1]) < 0.005
    elapsed = [210.0, 220.0, 230.0]
    seen = beliefs.survivors(1, elapsed)
    mu, times, _, _ = _by_rejection(beliefs, 1, elapsed)
    assert len(mu) > 5_000
    assert seen.mean_rate() == pytest.approx(float(np.mean(np.exp(mu))), rel=0.0005)
    later = np.any(times > np.asarray(elapsed)[None, :] + 60.0, axis=1)
    assert seen.any_outlasts(60.0) == pytest.approx(float(np.mean(later)), abs=0.015)
    assert seen.left(210.0) == pytest.approx(float(np.mean(times[:, 0] - 210.0)), rel=0.03)


def test_tasks_that_have_not_started_tell_nothing_of_the_rate():
    """Elapsed 0: the survivors' view is the beliefs' own (the log-normal mean), and a task
    outlasts ``more`` as the site's predictive law says."""
    beliefs = _beliefs()
    seen = beliefs.survivors(1, [0.0, 0.0])
    m, v = math.log(beliefs.sites[1].prior_tx) + beliefs._mu[1], beliefs._var[1]
    assert seen.mean_rate() == pytest.approx(math.exp(m + v / 2), rel=1e-3)
    mu, times, _, _ = _by_rejection(beliefs, 1, [0.0, 0.0])
    assert seen.any_outlasts(120.0) == pytest.approx(float(np.mean(np.any(times > 120.0, axis=1))), abs=0.01)
    assert beliefs.survivors(1, []).any_outlasts(120.0) == 0.0


def test_far_past_every_plausible_end_the_grid_follows_the_evidence():
    """Tasks running 20× the believed time (far in the prior's tail): finite, and the site's
    typical time is at least what they have run."""
    beliefs = _beliefs()
    seen = beliefs.survivors(1, [2200.0] * 50)
    assert math.isfinite(seen.mean_rate()) and seen.mean_rate() > 2200.0
    assert 0.0 <= seen.any_outlasts(10.0) <= 1.0 and seen.left(2200.0) > 0



@pytest.fixture
def hpc2n_pool():
    """benchmarks/eval_peers.py's hpc2n+pool: examples/sites-traces-hpc.toml (three Seth queues
    replaying the HPC2N trace) and the opportunistic pool of examples/sites-traces.toml, the
    trace's arrival shifted 3 days per seed."""
    import dataclasses
    import resel
    from resel.sim.simulation import simulate

    def run(seed: int, strategy: str = "auto"):
        pool = [s for s in resel.load_sites(REPO / "examples" / "sites-traces.toml") if s.queue is None]
        sites = resel.load_sites(REPO / "examples" / "sites-traces-hpc.toml") + pool
        sites = [s if s.queue is None else dataclasses.replace(
            s, queue=dataclasses.replace(s.queue, offset=s.queue.offset + seed * 3 * 86400)) for s in sites]
        return sites, simulate(resel.default_bag().resized(256), sites, strategy, seed=seed)
    return run


def test_the_pools_wave_moves_whole_to_seths_idle_slots(hpc2n_pool):
    """Seed 0: LIM sends 13 tasks to the pool (rated as fast as Seth, truly 1.9× slower); when
    seth-a's 240 end at ~4,180 s its slots are idle and the pool's 13, all still running past
    what the pool was believed to take, move there together: the bag ends at ~8,360 s (2.32 h,
    what `auto` given the true rates reaches), not with the pool's slowest slot (9,691 s)."""
    sites, res = hpc2n_pool(0)
    moved = [d for d in res.decisions if d.kind.value == "restart"]
    assert len(moved) == 13 and {(d.origin, d.target) for d in moved} == {("osg", "seth-a")}
    assert len({d.time for d in moved}) == 1 and 4150 < moved[0].time < 4200
    assert all(d.tx_r > d.tx_r2 for d in moved)   # what was expected left on the pool, against seth-a
    assert res.metrics.ttc_wkd / 3600 == pytest.approx(2.32, abs=0.01)
    assert all(sites[t.attempts[-1].site].name == "seth-a" for t in res.engine.tasks if t.id in {d.task for d in moved})


def test_a_run_that_does_not_learn_never_restarts(hpc2n_pool):
    """queue+reselect (named, no learning): its decisions stay as pinned, the pool keeps its tasks."""
    _, res = hpc2n_pool(0, "queue+reselect")
    assert not [d for d in res.decisions if d.kind.value == "restart"]
