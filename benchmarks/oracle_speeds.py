"""How much of the oracle's looseness is its speeds (issue 26 goals; docs/peers.md, "The oracle's
speeds on pools").

The bound (resel/sim/oracle.py) counts per site the smaller of a per-pilot count — each drawn
pilot with its own wait and its own speed — and a per-slot count in which every slot runs at
t_min, the fastest of the site's first M speed draws. This runs benchmarks/eval_peers.py's
sweep (the same runs, so the same M per site: the most any compared run submitted there) and,
per set, size and seed, reports

* the bound, and each site's share of the bag at it with the count that binds there
  (``pilot``: its own waits and speeds; ``slot``: t_min for every slot);
* the bound recomputed with every batch site's t_min replaced by its *median* draw — more than
  any pairing of slots with their own speeds could take away (it gives every slot a typical
  speed, where a valid pairing must still let the fastest pilot hold its slots), so it is
  **not** a valid bound: it is how far such a tightening could move the bound at most. A pool
  (one-task pilots) is left as it is: its per-pilot count, each pilot's own wait and speed, is
  what a clairvoyant strategy submitting its M pilots at once reaches, so it cannot be tightened
  without bounding what that strategy knows.

Run:  python benchmarks/oracle_speeds.py [--sets hetero,hpc2n+pool] [--sizes 16,256,1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_peers  # noqa: E402  (this folder's sweep: its runs and its M per site)


def _smallest(caps: list, n: int) -> float:
    """The smallest horizon at which the sites' counts reach n (the oracle's bisection)."""
    def enough(T: float) -> bool:
        return sum(c.completions(T) for c in caps) >= n
    lo, hi = 0.0, 1.0
    while not enough(hi):
        lo, hi = hi, hi * 2
    for _ in range(200):
        if hi - lo <= 1e-9 * hi:
            break
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return lo


def speeds(job: tuple) -> dict:
    """One (set, size, seed) with the sweep's M: the bound, each site's share and binding count,
    and the bound with median speeds in the per-slot count."""
    import resel
    from resel.sim.oracle import EPS, oracle_bound
    from resel.sim.simulation import SiteTruth
    set_name, size, seed, rep, shift_days, submissions = job
    bag, sites = resel.default_bag().resized(size), eval_peers._sites(set_name, rep, shift_days)
    bound = oracle_bound(bag, sites, seed, submissions)
    T, parts, typical = bound.ttc, {}, []
    at = T * (1 + 1e-8)                  # just past the bound: where the counts first reach n
    for cap in bound.sites:
        per_slot = sum(k * math.floor((at - max(a, cap.ready)) / cap.tx_min + EPS)
                       for a, k in cap.slot_times if max(a, cap.ready) < at)
        done = cap.completions(at)
        parts[cap.name] = (done, "slot" if done == per_slot else "pilot")
        site = next(s for s in sites if s.name == cap.name)
        if site.pilot.mode == "per-task":  # a pool: its per-pilot count is exact for a clairvoyant
            typical.append(cap)
            continue
        truth = SiteTruth(site, seed)
        draws = [bag.profile.instructions * truth.kappa / truth.draw_speed()
                 for _ in range(max(1, submissions.get(cap.name, 1)))]
        typical.append(dataclasses.replace(cap, tx_min=statistics.median(draws)))
    return {"ttc": T, "typical": _smallest(typical, size), "parts": parts, "submissions": submissions,
            "loose": T, "differ": False, "reachable": False, "starts_first": "", "finishes_first": ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="thesis,hpc2n-3q,hpc2n+pool,wagap,wagap+pool,hetero")
    ap.add_argument("--sizes", default="16,256,1024")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=eval_peers.local_cores())
    args = ap.parse_args()
    found: list = []
    plain = eval_peers._map

    def swapped(fn, jobs, workers, executor=None):   # the sweep's oracle jobs, with ours in their place
        if fn is not eval_peers.one_oracle:
            return plain(fn, jobs, workers, executor)
        out = plain(speeds, jobs, workers, executor)
        found.extend(zip(jobs, out))
        return out

    eval_peers._map = swapped
    eval_peers.evaluate(args.sets.split(","), [int(x) for x in args.sizes.split(",")], args.repeat, 0, 3.0,
                        args.workers)
    print("| sites | tasks | seed | bound h | each site's share at the bound (count that binds) "
          "| with median speeds, h (not a bound) | moved |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for job, r in found:
        shares = ", ".join(f"{k} {n} ({how})" for k, (n, how) in r["parts"].items() if n)
        print(f"| {job[0]} | {job[1]:,} | {job[2]} | {r['ttc'] / 3600:.3f} | {shares or '—'} "
              f"| {r['typical'] / 3600:.3f} | {100 * (r['typical'] / r['ttc'] - 1):+.1f} % |")


if __name__ == "__main__":
    main()
