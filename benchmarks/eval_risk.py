"""Re-selection with an upper quantile of Ŵ (``--risk Q``) against the point rule (issue 16 item 4).

    nice .venv/bin/python benchmarks/eval_risk.py --sizes 64,256,1024 --repeat 10

The thesis sites (the embedded defaults) under ``reselect`` (random + re-selection, the thesis's
experiment 3) and ``model+reselect``: the same bag, the same seeds, the engine given its windows
either by the point rule Ŵ = T̂x(r') − T̂x(r) or at the Q-quantile of T_x(r') − T_x(r) from the
runtime intervals (here: the OSG pool's published slot clocks; the clusters publish none, so
their T̂x stays a point). Prints TTC_wkd per cell (mean over seeds), the paired median ratio
to the point rule, how many seeds finished sooner, and the oracle's verdict on the decisions
(P_RESEL wrong / judged).
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

from resel.api import default_bag_path, default_sites_path  # noqa: E402
from resel.config import load_bag, load_sites  # noqa: E402
from resel.models.fitted import runtime_model  # noqa: E402
from resel.sim.experiment import run_experiment  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--risks", default="0.75,0.9")
    ap.add_argument("--strategies", default="reselect,model+reselect")
    ap.add_argument("--sites", type=Path, default=None)
    args = ap.parse_args(argv)
    bag = load_bag(default_bag_path())
    sites = load_sites(args.sites or default_sites_path())
    sizes = [int(x) for x in args.sizes.split(",")]
    strategies = args.strategies.split(",")
    rm = runtime_model(bag, sites, model="lim", simulated_ads=True)
    variants = [("point", None)] + [(f"risk {q}", float(q)) for q in args.risks.split(",")]
    started = time.perf_counter()
    results = {}
    for label, risk in variants:
        rates = rm.engine_rates(bag.profile.instructions, risk=risk)
        results[label] = run_experiment(bag, sites, strategies, sizes, repeat=args.repeat, seed=0, rates=rates)
    elapsed = time.perf_counter() - started
    print(f"{len(sites)} sites ({', '.join(s.name for s in sites)}); {rm.summary()}; seeds 0..{args.repeat - 1}; "
          f"{elapsed:.0f} s")
    for s in rm.sites.values():
        if s.ratios:
            print(f"  {s.site}: runtime ratios from {s.spread}: P5 {s.ratio(0.05):.3f}, P95 {s.ratio(0.95):.3f}")
    print()
    print("| tasks | strategy | windows | TTC_wkd mean h | TTC / point (paired median) | seeds sooner / later "
          "| moved | P_RESEL wrong / judged |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        for strat in strategies:
            base = [r.metrics.ttc_wkd for r in results["point"].cells[(strat, size)].runs]
            for label, _ in variants:
                runs = results[label].cells[(strat, size)].runs
                ttc = [r.metrics.ttc_wkd for r in runs]
                ratio = statistics.median(t / b for t, b in zip(ttc, base))
                sooner = sum(t < b - 1e-6 for t, b in zip(ttc, base))
                later = sum(t > b + 1e-6 for t, b in zip(ttc, base))
                moved = statistics.fmean(r.metrics.reassigned for r in runs)
                wrong = sum(r.audit.incorrect for r in runs)
                judged = sum(r.audit.judged for r in runs)
                print(f"| {size} | {strat} | {label} | {statistics.fmean(ttc) / 3600:.2f} | {ratio:.3f} | "
                      f"{sooner} / {later} of {len(runs)} | {moved:.0f} | {wrong}/{judged} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
