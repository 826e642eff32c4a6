"""How far the oracle's bound on the pool sets is from what a strategy that does not know which
pool slots are fast could reach (issue 26, docs/peers.md "The pool sets: the bound's pick of the
pool's fast slots").

The oracle counts, on a per-task pool, the pilots whose own wait plus own task time end by T:
of the pool's M submissions it keeps the fast ones and gives the rest of the bag to the batch
sites. No strategy knows a pool slot's speed before a task has ended on it (the fastest ends
after about 1.5 h on these sites), and the pool's tasks all start within a minute or two. This
script computes, per seed, a *reference* for strategies that fill the pool's pilots in the
order they start and let a task finish where it starts (every strategy compared does the
first; `auto`'s restarts are the exception to the second): the pool's k tasks end with the
slowest of its first k pilots to start, the other n − k on the batch sites as the oracle counts
them (their backlog, holes and speeds as the bound has them), k chosen with hindsight:

    blind = min over k of max(F(k), T_batch(n − k))

F(k) the latest end (own wait + own task time) among the pool's first k pilots by start, and
T_batch(m) the smallest T at which the batch sites' counts reach m. It is not a bound for every
strategy (a strategy can restart a task away from a slow slot, or be lucky in which pilots it
uses; one run of 540 — every strategy of eval_peers.py --versus-true on the three pool sets,
seeds 0-9 — finished below it, by 0.7 %, and so does ``auto`` given the true rates on wagap+pool
at 1,024 tasks, seed 0, by 0.1 %: in both 205 provisional pool tasks moved back to zegox when its
pilot started); it says how much of a run's distance to the bound is
the pool's slot speeds.

Beside ``auto``: ``auto`` given every site's true mean rate as its prior (what a perfect fit
gives it; a learning run, so the pool's wave is priced at its slowest slot, which
``queue+reselect`` given the true rates — eval_peers' ``--versus-true`` — does not do).

Run: python benchmarks/oracle_blind_pool.py [--sets hpc2n+pool,wagap+pool,hetero] [--sizes 256,1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_peers as ep  # noqa: E402


def t_for(caps: list, m: int) -> float:
    """The smallest T at which the sites ``caps`` together count m completions (inf if never),
    found as the bound finds its own (``resel.sim.oracle.earliest``)."""
    from resel.sim.oracle import earliest
    return 0.0 if m <= 0 else earliest(lambda T: sum(c.completions(T) for c in caps) >= m)


def blind(bound, n: int) -> tuple[float, int, float]:
    """(the reference, the pool's k there, the batch sites' time for the rest)."""
    pools = [c for c in bound.sites if c.draws and c.slots_per_pilot == 1 and c.max_pilots > 1]
    batch = [c for c in bound.sites if c not in pools]
    if len(pools) != 1:
        return bound.ttc, 0, bound.ttc
    pool = pools[0]
    ends, worst = [], 0.0
    for w, tx in sorted(pool.draws):               # the first k pilots to start take the k tasks
        worst = max(worst, w + tx)
        ends.append(worst)
    most = min(n, len(ends))

    def cost(k: int) -> tuple[float, float]:
        tb = t_for(batch, n - k)
        return max(ends[k - 1] if k else 0.0, tb), tb

    lo, hi = 0, most                              # F grows with k, T_batch(n − k) shrinks: bisect the crossing
    while lo < hi:
        mid = (lo + hi) // 2
        if (ends[mid - 1] if mid else 0.0) >= t_for(batch, n - mid):
            hi = mid
        else:
            lo = mid + 1
    best = min((cost(k) + (k,) for k in {max(0, lo - 1), lo, min(most, lo + 1)}), key=lambda x: x[0])
    return best[0], best[2], best[1]


def main() -> None:
    import resel
    from resel.sim.oracle import oracle_bound
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="hpc2n+pool,wagap+pool,hetero")
    ap.add_argument("--sizes", default="256,1024")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print("| sites | tasks | seed | auto h | auto given the true rates h | bound h | auto / bound "
          "| pool-blind reference h (pool's k) | auto / reference | auto given the true rates / reference |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    below = 0
    for set_name in args.sets.split(","):
        for n in [int(s) for s in args.sizes.split(",")]:
            rb, rr, rt = [], [], []
            for i in range(args.repeat):
                seed = args.seed + i
                run = ep.one_run((set_name, n, seed, i, 3.0, ep.DEFAULT, False))
                true = ep.one_run((set_name, n, seed, i, 3.0, ep.DEFAULT, True))   # auto, priors = true rates
                subs = {k: max(1, run["submissions"].get(k, 1), true["submissions"].get(k, 1))
                        for k in {*run["submissions"], *true["submissions"]}}
                bag, sites = resel.default_bag().resized(n), ep._sites(set_name, i, 3.0)
                bound = oracle_bound(bag, sites, seed, subs)
                ref, k, _ = blind(bound, n)
                rb.append(run["ttc"] / bound.ttc)
                rr.append(run["ttc"] / ref)
                rt.append(true["ttc"] / ref)
                below += (run["ttc"] < ref * (1 - 1e-9)) + (true["ttc"] < ref * (1 - 1e-9))
                print(f"| {set_name} | {n} | {seed} | {run['ttc'] / 3600:.2f} | {true['ttc'] / 3600:.2f} "
                      f"| {bound.ttc / 3600:.2f} | {rb[-1]:.2f} | {ref / 3600:.2f} ({k}) | {rr[-1]:.2f} | {rt[-1]:.2f} |",
                      flush=True)
            print(f"| {set_name} | {n} | median | | | | {statistics.median(rb):.2f} | | {statistics.median(rr):.2f} "
                  f"| {statistics.median(rt):.2f} |", flush=True)
    print(f"\nruns below the pool-blind reference: {below}")


if __name__ == "__main__":
    main()
