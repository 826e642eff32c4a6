"""Does a plan add up? ``resel plan``'s P50 against a simulation of the same plan (issue 26 item 4).

For every example sites file of simulated sites (the bag: examples/gromacs-bag.toml, and for
sites-data.toml its own examples/gromacs-data-bag.toml), at each size: the plan ``resel plan``
makes (its default strategy, the twin's estimates) and the median TTC of the same plan simulated
on ``--repeat`` seeds — first with the T̂x a calibrated fit converges to (the check: goal within
15 % at P50), then with LIM from base clocks (what a user sees before any fit; for information:
its gap is LIM's, not the plan's). resel/sim/plan_check.py says how.

Run:   python benchmarks/eval_plan_check.py                    # 64,256,1024 tasks, 10 seeds
       python benchmarks/eval_plan_check.py --sizes 256 --repeat 5 --files sites-thesis.toml
       python benchmarks/eval_plan_check.py --bag table --sizes 1024 --repeat 5 --models calibrated
Options: --models calibrated,lim  --json  --bag table (benchmarks/bench_packing.py's table bag of
1-, 2- and 4-core tasks, drawn with seed 0: tests/test_plan_check.py's bag of several widths)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
try:                                    # an installed resel first (pip install .)
    import resel  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

EXAMPLES = ROOT / "examples"

if TYPE_CHECKING:
    from resel.domain import Bag


def simulated_files() -> list[Path]:
    """The example sites files whose sites are all simulated (the others are live)."""
    from resel.config import LIVE_KINDS, load_sites
    return [p for p in sorted(EXAMPLES.glob("sites-*.toml"))
            if all(s.kind not in LIVE_KINDS for s in load_sites(p))]


def bag_for(sites_file: Path) -> Path:
    """The example bag a sites file is meant for."""
    return EXAMPLES / ("gromacs-data-bag.toml" if sites_file.name == "sites-data.toml" else "gromacs-bag.toml")


def table_bag(n: int) -> Bag:
    """benchmarks/bench_packing.py's table bag of ``n`` tasks (1, 2 and 4 cores, sizes over
    two decades), drawn with seed 0, as tests/test_plan_check.py checks it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_packing
    return bench_packing.mixed_bag(n, 0)


def default_strategy() -> str:
    """``resel plan``'s own default strategy (whatever it is today)."""
    from resel.cli.plan import plan_cmd
    return next(p.default for p in plan_cmd.params if p.name == "strategy")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="", help="comma-separated names in examples/ (default: every simulated one)")
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--models", default="calibrated,lim")
    ap.add_argument("--strategy", default=None, help="default: resel plan's")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bag", choices=("example", "table"), default="example",
                    help="the sites file's example bag, or bench_packing.py's table bag of several widths")
    args = ap.parse_args(argv)
    from resel.config import load_bag, load_sites
    from resel.sim.plan_check import TOLERANCE, check
    files = [EXAMPLES / f for f in args.files.split(",") if f] or simulated_files()
    strategy = args.strategy or default_strategy()
    sizes = [int(x) for x in args.sizes.split(",")]
    t0 = time.perf_counter()
    rows = []
    for f in files:
        sites = load_sites(f)
        for n in sizes:
            bag = table_bag(n) if args.bag == "table" else load_bag(bag_for(f)).resized(n)
            for model in args.models.split(","):
                rows.append(check(bag, sites, strategy, label=f.name, model=model, seeds=range(args.repeat)))
                if not args.json:
                    print(f"  {f.name} {n} {model}: {rows[-1].ratio:.3f}", file=sys.stderr, flush=True)
    took = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"strategy": strategy, "repeat": args.repeat, "seconds": took,
                          "rows": [r.as_dict() for r in rows]}, indent=1))
        return 0
    print(f"strategy {strategy}; plan at seed 0, simulations at seeds 0..{args.repeat - 1}; {took:.0f} s\n")
    print("| sites | bag | tasks | T̂x model | plan point [h] | plan P50 [h] | plan P90 [h] | simulated P50 [h] "
          "| simulated min–max [h] | plan P50 / simulated | within 15 % | shares (tasks on pilots × cores) |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        h = lambda v: "—" if v is None else f"{v / 3600:.2f}"   # noqa: E731
        shares = "; ".join(f"{k} {v['tasks']} on {v['pilots']:,} × {v['pilot_cores']}" for k, v in r.shares.items()
                           if v["tasks"])
        print(f"| {r.sites} | {'table' if args.bag == 'table' else bag_for(EXAMPLES / r.sites).stem} | {r.tasks} | {r.model} | {h(r.plan_ttc_s)} "
              f"| {h(r.plan_p50_s)} | {h(r.plan_p90_s)} | {h(r.sim_p50_s)} | {h(min(r.sim_ttc_s))}–{h(max(r.sim_ttc_s))} "
              f"| {r.ratio:.3f} | {'yes' if r.agrees else 'no'} | {shares} |")
    cal = [r for r in rows if r.model == "calibrated"]
    if cal:
        worst = max(cal, key=lambda r: abs(r.ratio - 1))
        ok = all(r.agrees for r in cal)
        print(f"\ngoal (calibrated T̂x: plan P50 within {TOLERANCE:.0%} of the simulated median on every file and "
              f"size): {'MET' if ok else 'MISSED'}; worst {worst.sites} at {worst.tasks} tasks: {worst.ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
