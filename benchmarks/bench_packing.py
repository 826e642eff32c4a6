"""Tasks of different widths packed into one pilot (issue 26 item 3), simulated: TTC with each
task taking its own cores in a pilot's pool against one width per slot (every slot as wide as
the widest task: what resel did before, and what the same table with every row at the widest
width runs as).

    nice .venv/bin/python benchmarks/bench_packing.py                       # 256 tasks, 5 seeds
    nice .venv/bin/python benchmarks/bench_packing.py --sizes 64,256 --repeat 10 --strategies auto

The bag: GROMACS-style MD runs (instructions I(n) = 1e9 + 2e8 · n, n steps log-uniform
10⁴–10⁶, drawn per task), each 1, 2 or 4 cores wide (half, three tenths, a fifth), largest
first; the thesis sites (``resel.default_sites()``), each supercomputer's pilot capped at
``--max-cores`` (default 64: a node or two — uncapped, a bag of hundreds of tasks fits one
pilot of thousands of cores either way, and packing changes nothing; 0: uncapped). A task's run time does not depend on its
width in the simulator (LIM prices instructions, not cores), so the two rows differ only in
how many tasks a pilot runs at once. Per strategy and size: the median over seeds of TTC_wkd
(h) packed and one-width, and of the paired ratio packed / one-width (below 1: packing is
sooner), its largest, and on how many seeds packing was more than 0.1 % sooner / later.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import resel  # noqa: E402
from resel.domain import Bag, Profile, TaskSpec  # noqa: E402
from resel.sim.simulation import simulate  # noqa: E402

SETUP, PER_STEP = 1e9, 2e8
WIDTHS = ((1, 0.5), (2, 0.3), (4, 0.2))


def mixed_bag(size: int, seed: int, widest: bool = False) -> Bag:
    """``size`` tasks drawn with ``seed``; ``widest``: every row as wide as the widest."""
    rng = random.Random(f"packing:{size}:{seed}")
    rows = []
    for i in range(size):
        n = math.exp(rng.uniform(math.log(1e4), math.log(1e6)))
        w = rng.choices([w for w, _ in WIDTHS], [p for _, p in WIDTHS])[0]
        rows.append((f"md{i:05d}", SETUP + PER_STEP * n, w))
    top = max(w for _, _, w in rows)
    specs = tuple(TaskSpec(name, instr, cores=top if widest else w) for name, instr, w in rows)
    return Bag("packing", "run {task}", size, top, Profile(sum(t.instructions for t in specs) / size),
               tasks=specs, order="largest")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256")
    ap.add_argument("--repeat", type=int, default=5, help="seeds 0 … N-1")
    ap.add_argument("--strategies", default="auto,model+reselect")
    ap.add_argument("--max-cores", type=int, default=64, help="a supercomputer's pilot at most (0: no cap)")
    args = ap.parse_args(argv)
    sites = [s if s.pilot.mode != "single" or not args.max_cores
             else dataclasses.replace(s, pilot=dataclasses.replace(s.pilot, max_cores=args.max_cores))
             for s in resel.default_sites()]
    print(f"thesis sites, supercomputer pilots at most {args.max_cores or 'their site'} cores; seeds 0-{args.repeat - 1}")
    print("strategy         tasks  TTC packed (h)  TTC one width (h)  packed/one: median  largest  sooner/later")
    for strategy in args.strategies.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            packed, one, ratio = [], [], []
            for seed in range(args.repeat):
                a = simulate(mixed_bag(size, seed), sites, strategy, seed=seed, record=False)
                b = simulate(mixed_bag(size, seed, widest=True), sites, strategy, seed=seed, record=False)
                assert a.metrics.done == b.metrics.done == size
                packed.append(a.metrics.ttc_wkd / 3600)
                one.append(b.metrics.ttc_wkd / 3600)
                ratio.append(a.metrics.ttc_wkd / b.metrics.ttc_wkd)
            sooner = sum(r < 0.999 for r in ratio)
            later = sum(r > 1.001 for r in ratio)
            print(f"{strategy:16s} {size:5d}  {statistics.median(packed):14.2f}  {statistics.median(one):17.2f}"
                  f"  {statistics.median(ratio):18.3f}  {max(ratio):7.3f}  {sooner}/{later}")


if __name__ == "__main__":
    main()
