"""Evaluation (issue 8): workload TTC of queue-aware selection + re-selection against the
thesis's re-selection alone, side by side on paired seeds.

Three site sets: the embedded thesis-like sites (drawn waits, long for big bags on XSEDE),
``examples/sites-traces.toml`` (two Seth queues replaying the real HPC2N trace + an
opportunistic pool) and ``examples/sites-traces-hpc.toml`` (three Seth queues, no pool).
Strategies: ``reselect`` (random + re-selection: the thesis's experiment 3), ``model+reselect``,
and ``queue+reselect`` fed by each start estimate (scheduler, twin, history bound).

Repetition i uses seed S+i for every strategy (paired) and, on the trace-driven sets, moves
the bag's arrival ``i × --shift-days`` later into the trace on every site, so the repetitions
meet different queue states instead of the same one with other speed draws.

The table shows the median and mean TTC_wkd over the repetitions, and per strategy the
median over seeds of TTC / TTC(reselect) of the same seed — the paired ratio. The goal:
≤ 0.8 (≥ 20 % lower) where waits are long.

Run:  python benchmarks/eval_queue_aware.py [--repeat 5] [--sizes 16,64,256] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_SETS = {
    "thesis": None,                                          # drawn waits
    "traces+pool": ROOT / "examples" / "sites-traces.toml",
    "traces-3q": ROOT / "examples" / "sites-traces-hpc.toml",  # three queues, no pool
}
STRATEGIES = ["reselect", "model+reselect", "queue+reselect@scheduler", "queue+reselect@twin",
              "queue+reselect@history"]


def shifted(sites: list, seconds: float) -> list:
    """The sites with every trace-driven queue's bag arrival ``seconds`` later in its trace."""
    import dataclasses
    return [s if s.queue is None else dataclasses.replace(s, queue=dataclasses.replace(s.queue, offset=s.queue.offset + seconds))
            for s in sites]


def run(sizes: list[int], repeat: int, seed: int, sets: list[str], quantile: float, shift_days: float) -> list[dict]:
    import resel
    from resel.sim.simulation import simulate
    from resel.sim.experiment import split_spec

    rows = []
    for set_name in sets:
        path = SITE_SETS[set_name]
        base_sites = resel.default_sites() if path is None else resel.load_sites(path)
        for size in sizes:
            bag = resel.default_bag().resized(size)
            ttc: dict[str, list[float]] = {s: [] for s in STRATEGIES}
            wall: dict[str, float] = {s: 0.0 for s in STRATEGIES}
            for i in range(repeat):          # interleaved: every strategy sees seed i in turn
                sites = shifted(base_sites, i * shift_days * 86400)
                for spec in STRATEGIES:
                    strat, source, _ = split_spec(spec)
                    began = time.perf_counter()
                    res = simulate(bag, sites, strat, seed=seed + i, record=False, estimate=source,
                                   quantile=quantile, confidence=quantile)
                    wall[spec] += time.perf_counter() - began
                    ttc[spec].append(res.metrics.ttc_wkd)
            base = ttc["reselect"]
            for spec in STRATEGIES:
                ratios = [a / b for a, b in zip(ttc[spec], base) if b > 0]
                rows.append({"sites": set_name, "size": size, "strategy": spec, "runs": repeat,
                             "ttc_median_h": statistics.median(ttc[spec]) / 3600,
                             "ttc_mean_h": statistics.fmean(ttc[spec]) / 3600,
                             "ratio_median": statistics.median(ratios) if ratios else float("nan"),
                             "wins": sum(r < 1 for r in ratios), "sim_s": wall[spec] / repeat})
    return rows


def table(rows: list[dict]) -> str:
    out = ["| sites | tasks | strategy | TTC_wkd median h | mean h | TTC / reselect (paired median) | runs faster | sim s/run |",
           "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['sites']} | {r['size']} | {r['strategy']} | {r['ttc_median_h']:.2f} | {r['ttc_mean_h']:.2f} "
                   f"| {r['ratio_median']:.2f} | {r['wins']}/{r['runs']} | {r['sim_s']:.2f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,64,256")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quantile", type=float, default=0.9, help="history bound quantile (= confidence)")
    ap.add_argument("--shift-days", type=float, default=3.0, help="trace sets: repetition i arrives i × this later")
    ap.add_argument("--sets", default=",".join(SITE_SETS), help="comma-separated site sets: " + ", ".join(SITE_SETS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in SITE_SETS]
    if unknown:
        sys.exit(f"unknown site set(s) {unknown}; choose from {list(SITE_SETS)}")
    began = time.perf_counter()
    rows = run([int(s) for s in args.sizes.split(",")], args.repeat, args.seed, sets, args.quantile, args.shift_days)
    if args.json:
        print(json.dumps({"rows": rows, "seconds": time.perf_counter() - began}, indent=1))
        return
    print(table(rows))
    print(f"\n{len(rows)} cells, {time.perf_counter() - began:.0f} s; seeds {args.seed}..{args.seed + args.repeat - 1}; "
          f"history bound q = confidence = {args.quantile}; trace arrivals shifted {args.shift_days:g} d per repetition")


if __name__ == "__main__":
    main()
