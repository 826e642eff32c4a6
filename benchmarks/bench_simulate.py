"""Benchmark: simulate 100,000 tasks over 16 sites with re-selection on.

Target (issue 2): <= 10 s wall time and <= 1 GB peak memory on a 2-core machine.

Each measurement runs in a fresh child process so its peak RSS is its own. The strategies
are measured side by side, interleaved, ``--repeat`` times; the table shows medians and the
ratio to the no-re-selection baseline ("model"). Nothing is stored (``record=False``), as in a
dry run that only needs the metrics.

Run:  python benchmarks/bench_simulate.py [--tasks 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time


def sixteen_sites():
    """The four thesis sites, each in four variants (clock and wait scaled): 12 HPC + 4 pools."""
    import resel
    from resel.domain import Clock, WaitModel
    from resel.models.distributions import Dist

    sites = []
    for v, (clock_f, wait_f) in enumerate([(1.0, 1.0), (0.9, 0.6), (1.1, 1.5), (0.95, 2.0)]):
        for s in resel.default_sites():
            wait = s.wait
            median = dict(wait.dist.params)["median"] * wait_f
            sigma = dict(wait.dist.params)["sigma"]
            sites.append(dataclasses.replace(
                s, name=f"{s.name}-{v}", clock=Clock(s.clock.base * clock_f, (s.clock.avg or s.clock.base) * clock_f),
                wait=WaitModel(Dist.of("lognormal", median=median, sigma=sigma), wait.size_exponent, wait.cores_per_node)))
    return sites


def one(strategy: str, tasks: int, seed: int) -> dict:
    import resel
    from resel.backends.simulated import simulate

    bag = resel.default_bag().resized(tasks)
    sites = sixteen_sites()
    start = time.perf_counter()
    result = simulate(bag, sites, strategy, seed=seed, record=False)
    wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    m = result.metrics
    assert m.done == tasks, f"only {m.done} of {tasks} tasks finished"
    return {"strategy": strategy, "seed": seed, "wall_s": wall, "events": result.steps,
            "events_per_s": result.steps / wall, "peak_mb": peak_mb, "done": m.done,
            "pilots": len(result.pilots), "moved": m.reassigned, "ttc_wkd_h": m.ttc_wkd / 3600}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--strategies", default="reselect,model+reselect,model")
    ap.add_argument("--one", nargs=2, metavar=("STRATEGY", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the raw measurements as JSON")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.tasks, int(args.one[1]))))
        return
    strategies = args.strategies.split(",")
    rows: dict[str, list[dict]] = {s: [] for s in strategies}
    for rep in range(args.repeat):
        for strategy in strategies:   # interleaved, so drift hits every strategy alike
            proc = subprocess.run([sys.executable, __file__, "--tasks", str(args.tasks), "--one", strategy, str(rep)],
                                  capture_output=True, text=True, check=True)
            rows[strategy].append(json.loads(proc.stdout))
            print(f"  {strategy:<16} run {rep + 1}/{args.repeat}: {rows[strategy][-1]['wall_s']:.2f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    med = {s: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "events", "events_per_s", "peak_mb", "pilots", "moved", "ttc_wkd_h")}
           for s, rs in rows.items()}
    base = med[strategies[-1]]["wall_s"]
    print(f"\n{args.tasks:,} tasks over 16 simulated sites, median of {args.repeat} runs each (python {sys.version.split()[0]})")
    print(f"{'strategy':<16} {'wall s':>8} {'vs ' + strategies[-1]:>10} {'events':>9} {'events/s':>10} {'peak MB':>8} {'pilots':>7} {'moved':>7} {'TTC_wkd h':>10}")
    for s in strategies:
        m = med[s]
        print(f"{s:<16} {m['wall_s']:>8.2f} {m['wall_s'] / base:>9.2f}x {m['events']:>9,.0f} {m['events_per_s']:>10,.0f} "
              f"{m['peak_mb']:>8.0f} {m['pilots']:>7,.0f} {m['moved']:>7,.0f} {m['ttc_wkd_h']:>10.2f}")
    print("target: <= 10 s and <= 1024 MB for the re-selection runs")


if __name__ == "__main__":
    main()
