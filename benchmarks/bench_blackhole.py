"""A black-hole site with and without quarantine (issue 18 item 1).

    nice .venv/bin/python benchmarks/bench_blackhole.py --sizes 256,1024 --repeat 10

The embedded thesis sites with one of them made a black hole (``--black``, default supermic —
the fastest, so ``model`` sends it every task; every attempt there fails after
``--fail-after`` seconds, ``truth.fail = 1``), the same bag, strategies and seeds run with the
black-hole rule on (resel/blackhole.py's defaults) and off, side by side in this one process.
Per cell (mean over seeds): tasks done and failed (given up), failed attempts, quarantines,
TTC_wkd of the tasks that finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

try:                                    # an installed resel first (pip install .): the checkout's
    import resel  # noqa: F401          # resel/ lacks resel.probes/models/backends, which an
except ImportError:                     # install maps from probes/, models/, backends/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resel.api import default_bag_path, default_sites_path  # noqa: E402
from resel.sim.simulation import simulate  # noqa: E402
from resel.blackhole import QuarantinePolicy  # noqa: E402
from resel.config import load_bag, load_sites  # noqa: E402


def with_black_hole(sites, name: str, fail_after: float):
    out = []
    for s in sites:
        if s.name == name:
            s = dataclasses.replace(s, truth=dataclasses.replace(s.truth, fail=1.0, fail_after=fail_after))
        out.append(s)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--black", default="supermic")
    ap.add_argument("--fail-after", type=float, default=60.0)
    ap.add_argument("--sizes", default="256,1024")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--strategies", default="model,reselect")
    args = ap.parse_args(argv)
    bag = load_bag(default_bag_path())
    sites = with_black_hole(load_sites(default_sites_path()), args.black, args.fail_after)
    variants = (("on", QuarantinePolicy()), ("off", QuarantinePolicy(enabled=False)))
    print("| tasks | strategy | quarantine | done | failed (given up) | failed attempts | quarantines | TTC_wkd h |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    for size in [int(x) for x in args.sizes.split(",")]:
        sized = bag.resized(size)
        for strat in args.strategies.split(","):
            for label, policy in variants:
                runs = []
                for seed in range(args.repeat):
                    res = simulate(sized, sites, strat, seed=seed, quarantine=policy, record=False)
                    eng = res.engine
                    runs.append({"done": eng.done_count, "failed": eng.failed_count,
                                 "attempts": sum(t.failures for t in eng.tasks),
                                 "q": sum(h.quarantines for h in eng.health), "ttc": res.metrics.ttc_wkd / 3600})

                def mean(k, runs=runs):
                    return statistics.fmean(r[k] for r in runs)
                print(f"| {size} | {strat} | {label} | {mean('done'):.0f} | {mean('failed'):.0f} | "
                      f"{mean('attempts'):.0f} | {mean('q'):.1f} | {mean('ttc'):.2f} |", flush=True)
    print()
    print(f"{', '.join(s.name for s in sites)}; black hole {args.black} (fails every attempt after "
          f"{args.fail_after:g} s); seeds 0..{args.repeat - 1}; {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
