"""Bags of unequal tasks (issue 26 item 3): largest-first against the table's order, and both
against the oracle.

    nice .venv/bin/python benchmarks/bench_unequal.py                      # 256 tasks, 5 seeds
    nice .venv/bin/python benchmarks/bench_unequal.py --sizes 64,256 --repeat 10 --sets thesis,hpc2n-3q

A GROMACS-style sweep is written as a bag file with a task table (``tasks = "tasks.csv"``) and
read back through ``resel.load_bag``: MD runs whose instructions follow the affine law
I(n) = setup + per_size · n of docs/experiment1.md, n (MD steps) drawn per task from a seeded
mix — ``--mix``: ``tail`` (85 % short runs of 10⁴–5·10⁴ steps, 15 % long ones of 2·10⁵–10⁶,
log-uniform within each), ``uniform`` (log-uniform 10⁴–10⁶) or ``equal`` (every task 10⁵ steps,
the control: both orders are the same bag). The table lists the tasks in the order drawn
(a user's table is in no particular order of size). Each row is run twice, the bag's ``order``
being ``given`` (the table's) and ``largest`` (most instructions first), same sites and seeds.
(A bag's default, ``auto``, is ``largest`` where no site is a per-task pool and ``given``
where one is: what this measurement supports, docs/peers.md.)

Per set, size, strategy and order: the median over seeds of TTC_wkd (h) and of TTC / oracle
(the oracle's bound for the same bag and seed, each site allowed as many pilot submissions as
the most any compared run made there — resel/sim/oracle.py, which bounds a bag of unequal
tasks by work and by its largest task), and over seeds of the paired ratio
TTC(largest) / TTC(given) its median and its largest (below 1, largest-first finishes sooner),
and on how many seeds largest-first was more than 0.1 % sooner / later. Last, how many runs
finished sooner than the oracle's bound (a bound: none should).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SETUP, PER_STEP = 1e9, 2e8      # I(n) instructions: a 10^5-step run is the default bag's 2e13
ORDERS = ("given", "largest")


def steps(mix: str, rng: random.Random) -> int:
    """One task's MD steps under ``mix``."""
    def logu(lo: float, hi: float) -> int:
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    if mix == "equal":
        return 100_000
    if mix == "uniform":
        return logu(1e4, 1e6)
    return logu(2e5, 1e6) if rng.random() < 0.15 else logu(1e4, 5e4)


def write_bag(folder: Path, size: int, mix: str, seed: int, order: str) -> Path:
    """A bag file and its tasks.csv in ``folder``: ``size`` tasks drawn with ``seed``."""
    rng = random.Random(f"bag:{mix}:{size}:{seed}")
    rows = ["name,size,cores"] + [f"md{i:05d},{steps(mix, rng)},1" for i in range(size)]
    (folder / "tasks.csv").write_text("\n".join(rows) + "\n")
    bag = folder / f"bag-{order}.toml"
    bag.write_text(f'''[bag]
name = "md-sweep"
command = "gmx mdrun -s {{task}}.tpr -nsteps {{size}} -ntomp 1"
tasks = "tasks.csv"
order = "{order}"

[bag.profile]
instructions = {SETUP:g}
per_size = {PER_STEP:g}
''')
    return bag


def one(job: tuple) -> dict:
    """One (set, size, seed): every strategy in both orders, and the oracle."""
    from eval_peers import _sites
    from resel.sim.simulation import simulate
    from resel.config import load_bag
    from resel.sim.oracle import oracle_bound
    set_name, size, seed, rep, shift_days, strategies, mix = job
    sites = _sites(set_name, rep, shift_days)
    out: dict = {"ttc": {}}
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bags = {o: load_bag(write_bag(Path(tmp), size, mix, seed, o)) for o in ORDERS}
    for strategy in strategies:
        for order in ORDERS:
            res = simulate(bags[order], sites, strategy, seed=seed, record=False)
            out["ttc"][(strategy, order)] = res.metrics.ttc_wkd if res.metrics.done == size else math.inf
            for p in res.engine.pilots.values():
                name = sites[p.site].name
                counts[name] = counts.get(name, 0) + 1
    # each site allowed the most submissions any run made there (the sum bounds every run)
    out["oracle"] = oracle_bound(bags["given"], sites, seed, counts or 1).ttc
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="thesis,hpc2n-3q")
    ap.add_argument("--sizes", default="256")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shift-days", type=float, default=3.0)
    ap.add_argument("--strategies", default="auto,model+reselect")
    ap.add_argument("--mix", default="tail", choices=("tail", "uniform", "equal"))
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    sets, sizes = a.sets.split(","), [int(x) for x in a.sizes.split(",")]
    strategies = a.strategies.split(",")
    jobs = [(s, n, a.seed + r, r, a.shift_days, strategies, a.mix) for s in sets for n in sizes
            for r in range(a.repeat)]
    if a.workers > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(a.workers) as ex:
            results = list(ex.map(one, jobs))
    else:
        results = [one(j) for j in jobs]
    print(f"mix {a.mix}; I(n) = {SETUP:g} + {PER_STEP:g}·n; seeds {a.seed}–{a.seed + a.repeat - 1}; "
          f"medians over seeds")
    print(f"{'set':<10} {'size':>5}  {'strategy':<15} {'order':<8} {'TTC [h]':>8} {'TTC/oracle':>10} "
          f"{'largest/given':>13} {'worst':>6} {'sooner/later':>12}")
    for s in sets:
        for n in sizes:
            rows = [r for j, r in zip(jobs, results) if j[0] == s and j[1] == n]
            oracle = statistics.median(r["oracle"] for r in rows)
            for strategy in strategies:
                ratios = [r["ttc"][(strategy, "largest")] / r["ttc"][(strategy, "given")] for r in rows]
                paired, worst = statistics.median(ratios), max(ratios)
                sooner, later = sum(x < 0.999 for x in ratios), sum(x > 1.001 for x in ratios)
                for order in ORDERS:
                    ttc = statistics.median(r["ttc"][(strategy, order)] for r in rows) / 3600
                    ratio = statistics.median(r["ttc"][(strategy, order)] / r["oracle"] for r in rows)
                    last = f"{paired:13.3f} {worst:6.3f} {f'{sooner}/{later}':>12}" if order == "largest" else ""
                    print(f"{s:<10} {n:>5}  {strategy:<15} {order:<8} {ttc:8.2f} {ratio:10.3f} {last}")
            print(f"{s:<10} {n:>5}  {'oracle':<15} {'':<8} {oracle / 3600:8.2f}")
    below = sum(ttc < r["oracle"] * (1 - 1e-9) for r in results for ttc in r["ttc"].values())
    print(f"runs that finished sooner than the oracle's bound: {below} of "
          f"{sum(len(r['ttc']) for r in results)}")


if __name__ == "__main__":
    main()
