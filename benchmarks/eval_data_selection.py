"""Selection that sees the data against the same engine blind to it (issue 25 item 5).

    nice .venv/bin/python benchmarks/eval_data_selection.py --sizes 64,256,1024 --repeat 10

examples/gromacs-data-bag.toml (1.5 GB of outputs, 250 MB of shared inputs and 5 MB of its
own per task) on examples/sites-data.toml (the thesis sites; 100 MB/s to the XSEDE machines,
10 MB/s into the OSG and 1 MB/s out of it). Every cell runs the same strategy on the same seeds
twice: the engine pricing the data (T̂x' = T̂x + D wherever it compares sites, docs/engine.md
"Selection sees the data") and the engine blind to it (T̂x alone) — the simulator moving the
same bytes at the same true bandwidths in both. Per cell: TTC_wkd (median over seeds, hours)
both ways, the paired median of blind / priced, how many seeds the priced engine finished
sooner / later, the tasks done on the OSG (mean per run), the data seconds per task (mean),
the oracle's lower bound (median; it counts the true data times) and the re-selection audit's
bound violations over all runs (there must be none).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

try:                                    # an installed resel first (pip install .): the checkout's
    import resel  # noqa: F401          # resel/ lacks resel.probes/models/backends, which an
except ImportError:                     # install maps from probes/, models/, backends/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resel.sim.simulation import simulate  # noqa: E402
from resel.config import load_bag, load_sites  # noqa: E402
from resel.sim.oracle import oracle_bound  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def cell(bag, sites, strategy: str, seeds: range) -> dict:
    """One strategy at one size, priced and blind on the same seeds."""
    runs = {True: [], False: []}
    bounds = []
    for seed in seeds:
        pair = {priced: simulate(bag, sites, strategy, seed=seed, price_data=priced) for priced in (True, False)}
        for priced, r in pair.items():
            runs[priced].append(r)
        submissions = {s.name: max(1, *(sum(1 for p in r.pilots if p.site == i) for r in pair.values()))
                       for i, s in enumerate(sites)}
        bounds.append(oracle_bound(bag, sites, seed, submissions).ttc)
    ttc = {k: [r.metrics.ttc_wkd for r in v] for k, v in runs.items()}
    ratios = [b / p for p, b in zip(ttc[True], ttc[False])]
    return {
        "ttc": {k: statistics.median(v) for k, v in ttc.items()},
        "ratio": statistics.median(ratios),
        "sooner": sum(p < b for p, b in zip(ttc[True], ttc[False])),
        "later": sum(p > b for p, b in zip(ttc[True], ttc[False])),
        "osg": {k: statistics.fmean(r.metrics.per_site.get("osg", 0) for r in v) for k, v in runs.items()},
        "data_s": {k: statistics.fmean(r.data.as_dict()["seconds_per_task"] for r in v) for k, v in runs.items()},
        "oracle": statistics.median(bounds),
        "below_oracle": sum(r.metrics.ttc_wkd < b for v in runs.values() for r, b in zip(v, bounds)),
        "violations": sum(r.audit.bound_violations for v in runs.values() for r in v),
        "done": all(r.metrics.done == bag.count for v in runs.values() for r in v),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--strategies", default="model,queue,model+reselect,queue+reselect,reselect")
    ap.add_argument("--bag", type=Path, default=EXAMPLES / "gromacs-data-bag.toml")
    ap.add_argument("--sites", type=Path, default=EXAMPLES / "sites-data.toml")
    ap.add_argument("--drop", default="", help="sites to leave out, comma-separated (e.g. supermic)")
    args = ap.parse_args(argv)
    bag = load_bag(args.bag)
    drop = {d for d in args.drop.split(",") if d}
    sites = [s for s in load_sites(args.sites) if s.name not in drop]
    seeds = range(args.repeat)
    started = time.perf_counter()
    print(f"{bag.name} on {', '.join(s.name for s in sites)}; seeds 0..{args.repeat - 1}")
    print()
    print("| tasks | strategy | TTC priced h | TTC blind h | blind / priced (paired median) | seeds sooner / later "
          "| on OSG priced / blind | data s/task priced / blind | oracle h | audit violations |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    bad = False
    for size in [int(x) for x in args.sizes.split(",")]:
        sized = bag.resized(size)
        for strategy in args.strategies.split(","):
            c = cell(sized, sites, strategy, seeds)
            bad |= bool(c["violations"] or c["below_oracle"] or not c["done"])
            print(f"| {size} | {strategy} | {c['ttc'][True] / 3600:.2f} | {c['ttc'][False] / 3600:.2f} "
                  f"| {c['ratio']:.2f}× | {c['sooner']} / {c['later']} | {c['osg'][True]:.0f} / {c['osg'][False]:.0f} "
                  f"| {c['data_s'][True]:.0f} / {c['data_s'][False]:.0f} | {c['oracle'] / 3600:.2f} "
                  f"| {c['violations']} |", flush=True)
    print()
    print(f"{time.perf_counter() - started:.0f} s; " + ("a run broke a bound or left tasks undone" if bad else
                                                      "every task done, no run below the oracle, no audit violation"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
