"""A plan adds up: ``resel plan``'s P50 against a simulation of the same plan on the same sites,
within 15 %, on every example sites file of simulated sites (issue 26 item 4).

The plan and the simulated runs' engine get the T̂x a fit calibrated on each site converges to
(resel/sim/plan_check.py says why: LIM from base clocks is off by 2.2–2.6× on the thesis and
trace sites by design, and no plan can agree with a run it mis-predicts the tasks of; that gap
is measured beside this in benchmarks/eval_plan_check.py). What is checked is the plan's own
arithmetic — the pilot sizes, the slots they give (a pool's one-task pilots side by side), the
waves, the waits and their spread, the data, each wave's slowest task — at 256 tasks, the plan
at seed 0 against the median of 5 seeds' runs; and a table bag of 1-, 2- and 4-core tasks
(benchmarks/bench_packing.py's), packed. The full table (64–1,024 tasks, 10 seeds, LIM
beside): benchmarks/eval_plan_check.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import eval_plan_check as bench  # noqa: E402

from resel.config import load_bag, load_sites  # noqa: E402
from resel.sim.plan_check import TOLERANCE, calibrated_runtime, check  # noqa: E402

FILES = [p.name for p in bench.simulated_files()]


def test_every_simulated_example_is_checked():
    """The live files are the only ones left out (nothing to simulate them with)."""
    every = {p.name for p in (REPO / "examples").glob("sites-*.toml")}
    assert set(FILES) == every - {"sites-testbed.toml", "sites-mixed.toml"} and len(FILES) >= 5


@pytest.mark.parametrize("name", FILES)
def test_the_plan_agrees_with_its_simulation(name):
    path = REPO / "examples" / name
    sites = load_sites(path)
    bag = load_bag(bench.bag_for(path)).resized(256)
    got = check(bag, sites, bench.default_strategy(), label=name, seeds=range(5))
    assert got.plan_p50_s is not None
    assert abs(got.ratio - 1.0) <= TOLERANCE, got.as_dict()


@pytest.mark.parametrize("name", FILES)
def test_the_plan_of_a_bag_of_several_widths_agrees_with_its_simulation(name):
    """benchmarks/bench_packing.py's table bag (GROMACS-style runs 1, 2 or 4 cores wide, sizes
    over two decades, largest first; there is no table bag among the examples): the plan packs
    each share into its pilots' cores as the engine does (resel/planning.py ``packed_share``),
    a pool's share task by task, one pilot each, as many at a time as its cap (``pooled_share``),
    and the queue-aware split counts each task's cores. At 1,024 tasks sites-traces-wagap.toml is
    21 % over, by the twin's wait of zegox's pilot, not the plan's arithmetic (docs/queue-aware.md,
    "A bag of several widths"): this holds 256. Before, the plan's waves were those of
    one width per slot: on sites-traces-wagap.toml it said 1.83× the simulated median, on
    sites-traces-hpc.toml 1.15×."""
    import bench_packing
    sites = load_sites(REPO / "examples" / name)
    bag = bench_packing.mixed_bag(256, 0)
    got = check(bag, sites, bench.default_strategy(), label=name, seeds=range(5))
    assert got.plan_p50_s is not None
    assert abs(got.ratio - 1.0) <= TOLERANCE, got.as_dict()


def test_calibrated_rates_are_the_truths_median_slot():
    """A site whose slots all run alike gets exactly its truth's speed and no spread; a pool
    the median of its drawn slots, with the spread of median / speed around 1."""
    from resel.domain import Clock, Dist, PilotPolicy, Site, Truth
    from resel.domain import Bag, Profile
    flat = Site("flat", "simulated", 8, Clock(2.0), pilot=PilotPolicy("single"),
                truth=Truth(kappa=1.1, ipc=Dist.fixed(2.0), clock=Dist.fixed(3.0)))
    pool = Site("pool", "simulated", 100, Clock(2.5), pilot=PilotPolicy("per-task", max_pilots=100),
                truth=Truth(kappa=1.0, ipc=Dist.fixed(1.0), clock=Dist.of("normal", mean=2.5, std=0.25)))
    rt = calibrated_runtime(Bag("b", "true", 1, 1, Profile(6e9)), [flat, pool])
    assert rt.sites["flat"].rate.tx(6e9) == pytest.approx(1.1 * 6e9 / (2.0 * 3.0e9))
    assert rt.sites["flat"].ratios == ()
    ratios = rt.sites["pool"].ratios
    assert min(ratios) < 1.0 < max(ratios) and sorted(ratios)[len(ratios) // 2] == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("name", ["sites-traces.toml", "sites-traces-hpc.toml"])
def test_the_plan_of_1024_tasks_of_several_widths_agrees_with_its_simulation(name):
    """The same at 1,024 tasks, where a pool's share of 892 tasks spanning two decades (traces)
    and packed shares drawn under their wait (hpc) were 0.795 and 1.243 before the pool was
    priced task by task. sites-traces-wagap.toml is left out: 1.209, the twin's wait of
    zegox's pilot (38,640 s; it started at 4,665 s) — the wait predictor's, measured in
    docs/queue-aware.md — and thesis, hetero and data hold at 256 above."""
    import bench_packing
    sites = load_sites(REPO / "examples" / name)
    got = check(bench_packing.mixed_bag(1024, 0), sites, bench.default_strategy(), label=name, seeds=range(5))
    assert got.plan_p50_s is not None
    assert abs(got.ratio - 1.0) <= TOLERANCE, got.as_dict()
