"""Tasks killed at walltime, before and after walltime packing (issue 18 item 2).

    nice .venv/bin/python benchmarks/bench_walltime.py --limit-hours 2,3 --sizes 256,1024 --repeat 10

The embedded thesis sites with every site's walltime limit set to each of ``--limit-hours`` (a short
partition; the defaults' 48 h never cut a 0.7 h task), the same bag, strategies and seeds run
three times, the engine's walltime rules being ``off`` (what resel did before: pilots ask for
the limit, tasks are dispatched whatever walltime is left), ``limit`` (the dispatch guard) and
``pack`` (the guard and pilots sized from their tasks), all in this one process, side by side.

Per cell (mean over seeds): attempts killed at walltime, TTC_wkd, pilots asked for, the
core-hours those pilots requested (cores × walltime asked, started pilots), and how many pilots
ran slower than T̂x,hi (a slot outside the predicted interval: there the guard cannot promise
anything). The engine's rates are *calibrated*: what ``resel model fit`` would learn from the
sites' runs, taken here from 4,000 draws of each site's simulated truth (IPC × clock per slot):
T̂x at the median slot speed, T̂x,hi at the 5 % slowest (the top of a central 90 % interval) —
so about one slot in twenty is slower than T̂x,hi. (LIM itself over-predicts the clusters' T_x
by ~2×, docs/defaults.md: with it the guard would refuse sites that could run the tasks.)
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resel.api import default_bag_path, default_sites_path  # noqa: E402
from resel.sim.simulation import simulate  # noqa: E402
from resel.config import load_bag, load_sites  # noqa: E402
from resel.models.lim import SiteRate  # noqa: E402
from resel.models.runtime import EngineRates, quantile  # noqa: E402

MODES = ("off", "limit", "pack")


def limited(sites, hours: float):
    """The same sites with every pilot's walltime limit set to ``hours``."""
    return [dataclasses.replace(s, pilot=dataclasses.replace(s.pilot, walltime=hours * 3600.0)) for s in sites]


def calibrated(sites, draws: int = 4000) -> EngineRates:
    """Point and upper rates from each site's truth: slot speed IPC × clock (GHz), median and
    5 % quantile (the slowest twentieth), as a calibration on its measured runs would find."""
    point, upper = {}, {}
    for s in sites:
        rng = random.Random(f"calibrate:{s.name}")
        ipc, clock = s.truth.ipc.sampler(rng), s.truth.clock.sampler(rng)
        speeds = sorted(max(0.05, ipc()) * max(0.1, clock()) for _ in range(draws))
        point[s.name] = SiteRate(s.name, s.truth.kappa, quantile(speeds, 0.5))
        upper[s.name] = SiteRate(s.name, s.truth.kappa, quantile(speeds, 0.05))
    return EngineRates(point, label="calibrated from the simulated truth", upper=upper)


def one(bag, sites, strategy, seed, rates, mode) -> dict:
    res = simulate(bag, sites, strategy, seed=seed, rates=rates, walltime=mode, record=False)
    eng = res.engine
    started = [p for p in res.pilots if p.started]
    requested = sum(p.cores * min(p.walltime, 1e12) for p in started) / 3600.0
    slow = {p.id for p in started if p.tx > eng.tx_hi[p.site] * (1 + 1e-9)}
    outside = len(slow)
    inside_kills = sum(n for pid, n in res.kills_by_pilot.items() if pid not in slow)
    return {"kills": res.walltime_kills, "inside_kills": inside_kills, "ttc": res.metrics.ttc_wkd / 3600.0, "pilots": len(res.pilots),
            "core_h": requested, "outside": outside, "started": len(started),
            "done": eng.done_count, "failed": eng.failed_count}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-hours", default="2,3", help="walltime limits to try, hours, comma-separated")
    ap.add_argument("--sizes", default="256,1024")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--strategies", default="model,reselect")
    args = ap.parse_args(argv)
    bag = load_bag(default_bag_path())
    sizes = [int(x) for x in args.sizes.split(",")]
    strategies = args.strategies.split(",")
    print("| limit h | tasks | strategy | walltime | killed at walltime (mean; total) | of them on slots within "
          "T̂x,hi | TTC_wkd h | pilots asked | core-h requested | pilots slower than T̂x,hi | done / failed |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    t0 = time.perf_counter()
    for hours in [float(x) for x in args.limit_hours.split(",")]:
        sites = limited(load_sites(default_sites_path()), hours)
        rates = calibrated(sites)
        for size in sizes:
            sized = bag.resized(size)
            for strat in strategies:
                for mode in MODES:
                    runs = [one(sized, sites, strat, seed, rates, mode) for seed in range(args.repeat)]

                    def mean(k, runs=runs):
                        return statistics.fmean(r[k] for r in runs)
                    print(f"| {hours:g} | {size} | {strat} | {mode} | {mean('kills'):.1f}; "
                          f"{sum(r['kills'] for r in runs)} | {sum(r['inside_kills'] for r in runs)} | "
                          f"{mean('ttc'):.2f} | {mean('pilots'):.0f} | "
                          f"{mean('core_h'):,.0f} | {sum(r['outside'] for r in runs)} of "
                          f"{sum(r['started'] for r in runs)} | {mean('done'):.0f} / {mean('failed'):.0f} |",
                          flush=True)
        upper = rates.upper or {}
        notes = [f"{n} {r.tx(bag.profile.instructions):.0f} / {upper[n].tx(bag.profile.instructions):.0f}"
                 for n, r in rates.rates.items()]
    print()
    print(f"{', '.join(s.name for s in sites)}; {rates.label}; seeds 0..{args.repeat - 1}; "
          f"{time.perf_counter() - t0:.0f} s")
    print("T̂x / T̂x,hi per site [s]: " + ", ".join(notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
