"""Evaluation (issue 17): resel against what users would do instead, and against the oracle.

Strategies, on the same engine, sites and seeds: resel's default (``auto``, what ``resel run``,
``simulate`` and ``plan`` use since issue 26: queue-aware with re-selection where a start is
estimated, rates learned during the run), the explicit ``queue+reselect`` and
``model+reselect`` (the default before), and the peers ``race``, ``race:2``, ``earliest``,
``failover`` (T = 120 s) and ``rebroker`` (docs/peers.md). For every site set, size and
repetition the oracle's lower bound on TTC (resel/sim/oracle.py) is computed for the same seed,
allowing each site as many pilot submissions as the most any of the compared runs made there —
so it bounds every one of them — counting a trace queue's backlog (the tightened bound of issue
26); the bound without the backlog (before) is shown beside it.

Site sets: ``thesis`` (the embedded sites, drawn waits), ``hpc2n-3q`` (three Seth queues
replaying the real HPC2N trace, examples/sites-traces-hpc.toml), ``hpc2n+pool`` (the same
with the opportunistic pool of examples/sites-traces.toml), ``wagap`` (MetaCentrum's two
clusters replaying wagap-2013, examples/sites-traces-wagap.toml), ``wagap+pool`` and ``hetero``
(issue 26's heterogeneous set, examples/sites-hetero.toml: one site of each kind, with their own
clocks, κ, schedulers and waits — HPC2N's seth-b, conservative backfilling at twice the trace's
rate; wagap's zewura under EASY; the thesis's Bridges, drawn waits growing with the pilot; and
the opportunistic pool). On the trace
sets repetition i arrives i × ``--shift-days`` later in the traces (other queue states).

Per set, size and strategy: the median over seeds of TTC / oracle (paired), the mean wasted
core-hours (thrown attempts + idle started pilots), pilot submissions and cancellations.
Per set and size: resel's default against the best peer (the peer of lowest mean TTC), as
the median over seeds of TTC(default) / TTC(that peer), split by whether the site that finishes
first in hindsight is the one that starts first (resel.sim.oracle.hindsight). Goals (issue 26):
auto ≤ 1.15 × oracle at ≥ 256 tasks; auto ≤ 0.8 × best peer where those sites differ, a tie
elsewhere.

Run:   python benchmarks/eval_peers.py                 # short: 16,256,1024 tasks, 3 seeds (minutes)
       python benchmarks/eval_peers.py --full          # 16,64,256,1024 tasks, 20 seeds
       python benchmarks/eval_peers.py --speedup       # the same sweep serial and on --workers, timed
Options: --workers N (default: every core), --dask ADDRESS, --true-rates (the engine gets the
sites' true mean rates instead of LIM's), --sets, --sizes, --repeat, --json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:                                    # an installed resel first (pip install .): the checkout's
    import resel  # noqa: F401          # resel/ lacks resel.probes/models/backends, which an
except ImportError:                     # install maps from probes/, models/, backends/
    sys.path.insert(0, str(ROOT))

DEFAULT = "auto"
OURS = [DEFAULT, "queue+reselect", "model+reselect"]
PEERS = ["race", "race:2", "earliest", "failover", "rebroker"]
SITE_SETS = ("thesis", "hpc2n-3q", "hpc2n+pool", "wagap", "wagap+pool", "hetero")
#: a strategy name's suffix (--versus-true): that strategy given the sites' true mean rates
TRUE = " (true rates)"


def site_set(name: str) -> list:
    """The sites of a named set (trace paths resolved from examples/)."""
    import resel
    ex = ROOT / "examples"
    pool = [s for s in resel.load_sites(ex / "sites-traces.toml") if s.queue is None]
    if name == "thesis":
        return resel.default_sites()
    if name == "hetero":
        return resel.load_sites(ex / "sites-hetero.toml")
    if name.startswith("hpc2n"):
        base = resel.load_sites(ex / "sites-traces-hpc.toml")
    else:
        base = resel.load_sites(ex / "sites-traces-wagap.toml")
    return base + (pool if name.endswith("+pool") else [])


def shifted(sites: list, seconds: float) -> list:
    """The sites with every trace-driven queue's bag arrival ``seconds`` later in its trace."""
    return [s if s.queue is None else dataclasses.replace(s, queue=dataclasses.replace(s.queue, offset=s.queue.offset + seconds))
            for s in sites]


def _sites(set_name: str, rep: int, shift_days: float) -> list:
    return shifted(site_set(set_name), rep * shift_days * 86400)


def user_rates(sites: list, base_seed: int, true_rates: bool = False):
    """The engine's rates as `resel simulate` gives them (--model lim, no store): LIM's T̂x, and
    a pool's slot spread from its published slot clocks — the prior spread a learning run
    starts from and the T̂x,hi walltime rules use (models/fitted.py). Measured through the same
    call as the command, so the tables are what a user's run does (until 2026-12-01 the runs
    gave the engine no rates and a pool's prior spread was the default 0.25, where the command
    gives the simulated pool 0.08). ``true_rates``: each site's true mean rate instead of
    LIM's (what a calibrated fit converges to), the spreads and T̂x,hi scaled alike."""
    import resel
    from resel.cli.rates import runtime_for
    from resel.models.lim import SiteRate
    bag = resel.default_bag()
    er = runtime_for(bag, sites, model="lim", db=None, clock="base", simulated=True,
                     seed=base_seed).engine_rates(bag.profile.instructions)
    if not true_rates:
        return er
    true = {s.name: SiteRate(s.name, s.truth.kappa, s.truth.ipc.mean() * s.truth.clock.mean())
            for s in sites if s.truth is not None}
    upper = None if er.upper is None else {
        n: SiteRate(n, true[n].kappa, true[n].clock_ghz * u.clock_ghz / er.rates[n].clock_ghz)
        for n, u in er.upper.items() if n in true}
    return dataclasses.replace(er, rates={**er.rates, **true}, upper=upper, label="true mean rates")


def one_run(job: tuple) -> dict:
    """One strategy on one (set, size, seed): what the table needs (a pure function of ``job``)."""
    import resel
    from resel.sim.simulation import simulate
    from resel.metrics import run_costs
    set_name, size, seed, rep, shift_days, strategy, true_rates = job
    sites = _sites(set_name, rep, shift_days)
    if strategy.endswith(TRUE):   # this one strategy with the true rates (--versus-true)
        strategy, true_rates = strategy[:-len(TRUE)], True
    rates = user_rates(sites, seed - rep, true_rates)
    res = simulate(resel.default_bag().resized(size), sites, strategy, seed=seed, record=False, rates=rates)
    counts: dict[str, int] = {}
    for p in res.engine.pilots.values():
        counts[sites[p.site].name] = counts.get(sites[p.site].name, 0) + 1
    return {"ttc": res.metrics.ttc_wkd, "done": res.metrics.done, "costs": run_costs(res.engine).as_dict(),
            "submissions": counts}


def one_oracle(job: tuple) -> dict:
    """The oracle's bounds (with and without the queues' backlog) for one (set, size, seed)
    allowing ``submissions`` per site, and whether the site that finishes first in hindsight is
    the one that starts first."""
    import resel
    from resel.sim.oracle import hindsight, oracle_bound
    set_name, size, seed, rep, shift_days, submissions = job
    bag, sites = resel.default_bag().resized(size), _sites(set_name, rep, shift_days)
    seen = hindsight(bag, sites, seed)
    return {"ttc": oracle_bound(bag, sites, seed, submissions).ttc,
            "loose": oracle_bound(bag, sites, seed, submissions, backlog=False).ttc,
            "differ": seen.differ, "reachable": seen.reachable, "starts_first": seen.starts_first,
            "finishes_first": seen.finishes_first}


def _map(fn, jobs: list, workers: int, executor=None) -> list:
    """``fn`` over ``jobs`` in order: serially, in local processes, or on a given executor (Dask)."""
    if executor is not None:
        return list(executor.map(fn, jobs))
    if workers <= 1:
        return [fn(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, jobs, chunksize=1))


def evaluate(sets: list[str], sizes: list[int], repeat: int, seed: int, shift_days: float, workers: int,
             executor=None, true_rates: bool = False, versus_true: bool = False) -> dict:
    """Every strategy × set × size × seed, then the oracle per set × size × seed; the rows."""
    strategies = OURS + PEERS + (["queue+reselect" + TRUE] if versus_true else [])
    # auto given the true rates (--versus-true): what a perfect fit gives the default, learning
    # included; not among the runs whose submissions size the bound, which stays as it was
    beside = [DEFAULT + TRUE] if versus_true else []
    keys = [(st, n, i) for st in sets for n in sizes for i in range(repeat)]
    jobs = [(st, n, seed + i, i, shift_days, s, true_rates) for st, n, i in keys for s in strategies + beside]
    runs = _map(one_run, jobs, workers, executor)
    by = {(j[0], j[1], j[3], j[5]): r for j, r in zip(jobs, runs)}
    oracle_jobs = []
    for st, n, i in keys:
        subs: dict[str, int] = {}
        for s in strategies:
            for site, c in by[(st, n, i, s)]["submissions"].items():
                subs[site] = max(subs.get(site, 1), c)
        oracle_jobs.append((st, n, seed + i, i, shift_days, subs))
    found = dict(zip(keys, _map(one_oracle, oracle_jobs, workers, executor)))
    bounds = {k: v["ttc"] for k, v in found.items()}
    rows, versus = [], []
    for st in sets:
        for n in sizes:
            reps = range(repeat)
            for s in strategies:
                rs = [by[(st, n, i, s)] for i in reps]
                beaten = [i for i in reps if by[(st, n, i, s)]["ttc"] < bounds[(st, n, i)]]
                rows.append({
                    "sites": st, "size": n, "strategy": s, "runs": repeat,
                    "ttc_median_h": statistics.median(r["ttc"] for r in rs) / 3600,
                    "oracle_median_h": statistics.median(bounds[(st, n, i)] for i in reps) / 3600,
                    "ratio_oracle": statistics.median(by[(st, n, i, s)]["ttc"] / bounds[(st, n, i)] for i in reps),
                    "ratio_loose": statistics.median(by[(st, n, i, s)]["ttc"] / found[(st, n, i)]["loose"] for i in reps),
                    "wasted_core_h": statistics.fmean(r["costs"]["wasted_core_h"] for r in rs),
                    "submissions": statistics.fmean(r["costs"]["submissions"] for r in rs),
                    "cancellations": statistics.fmean(r["costs"]["cancellations"] for r in rs),
                    "unfinished": sum(r["done"] < n for r in rs), "beat_oracle": len(beaten)})
            best = min(PEERS, key=lambda p: (statistics.fmean(by[(st, n, i, p)]["ttc"] for i in reps), p))
            for differ in (True, False):   # seeds where choosing well beats starting first, and the rest
                sub = [i for i in reps if found[(st, n, i)]["differ"] == differ]
                if not sub:
                    continue
                near = [i for i in sub if found[(st, n, i)]["reachable"]]
                versus.append({"sites": st, "size": n, "differ": differ, "seeds": len(sub), "best_peer": best,
                               "reachable_seeds": len(near),
                               "auto_vs_best_peer_reachable": statistics.median(
                                   by[(st, n, i, DEFAULT)]["ttc"] / by[(st, n, i, best)]["ttc"] for i in near)
                               if near else None,
                               **{f"{name}_vs_best_peer": statistics.median(by[(st, n, i, name)]["ttc"]
                                                                            / by[(st, n, i, best)]["ttc"] for i in sub)
                                  for name in OURS}})
    goals = []   # issue 26's proposed goals, per set and size: paired medians over the seeds
    if versus_true:
        for st in sets:
            for n in sizes:
                goals.append({"sites": st, "size": n, "auto_vs_true": statistics.median(
                    by[(st, n, i, DEFAULT)]["ttc"] / by[(st, n, i, "queue+reselect" + TRUE)]["ttc"]
                    for i in range(repeat)), "auto_vs_auto_true": statistics.median(
                    by[(st, n, i, DEFAULT)]["ttc"] / by[(st, n, i, DEFAULT + TRUE)]["ttc"]
                    for i in range(repeat))})
    return {"rows": rows, "versus": versus, "goals": goals, "sets": sets, "sizes": sizes, "repeat": repeat, "seed": seed,
            "shift_days": shift_days, "runs": len(jobs), "oracles": len(oracle_jobs)}


def table(doc: dict) -> str:
    out = ["| sites | tasks | strategy | TTC median h | TTC / oracle | TTC / oracle without backlog | wasted core-h "
           "| submissions | cancellations |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in doc["rows"]:
        out.append(f"| {r['sites']} | {r['size']} | {r['strategy']} | {r['ttc_median_h']:.2f} | {r['ratio_oracle']:.2f} "
                   f"| {r['ratio_loose']:.2f} | {r['wasted_core_h']:.1f} | {r['submissions']:.0f} | {r['cancellations']:.1f} |")
    out += ["", "| sites | tasks | finishes first ≠ starts first | seeds | oracle median h | best peer | "
            + " | ".join(f"{name} / best peer" for name in OURS) + " |",
            "|---|---:|---|---:|---:|---|" + "---:|" * len(OURS)]
    oracle = {(r["sites"], r["size"]): r["oracle_median_h"] for r in doc["rows"]}
    for v in doc["versus"]:
        out.append(f"| {v['sites']} | {v['size']} | {'yes' if v['differ'] else 'no'} | {v['seeds']} "
                   f"| {oracle[(v['sites'], v['size'])]:.2f} | {v['best_peer']} | "
                   + " | ".join(f"{v[name + '_vs_best_peer']:.2f}" for name in OURS) + " |")
    if doc.get("goals"):
        near = {(v["sites"], v["size"]): v for v in doc["versus"] if v["differ"]}
        out += ["", "| sites | tasks | auto / queue+reselect given the true rates | auto / auto given the true rates "
                "| seeds where the first to finish is not the first to start but is reached first "
                "| auto / best peer on those seeds |",
                "|---|---:|---:|---:|---:|---:|"]
        for g in doc["goals"]:
            v = near.get((g["sites"], g["size"]))
            seeds = f"{v['reachable_seeds']} of {v['seeds']}" if v else "0 of 0"
            there = v["auto_vs_best_peer_reachable"] if v else None
            out.append(f"| {g['sites']} | {g['size']} | {g['auto_vs_true']:.2f} | {g['auto_vs_auto_true']:.2f} | {seeds} | "
                       + ("—" if there is None else f"{there:.2f}") + " |")
    return "\n".join(out)


def local_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--sizes", default=None, help="comma-separated bag sizes (default 16,256,1024; --full 16,64,256,1024)")
    ap.add_argument("--repeat", type=int, default=None, help="seeds per cell (default 3; --full 20)")
    ap.add_argument("--full", action="store_true", help="the full sweep: 4 sizes × 20 seeds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shift-days", type=float, default=3.0, help="trace sets: repetition i arrives i × this later")
    ap.add_argument("--sets", default=",".join(SITE_SETS), help="comma-separated: " + ", ".join(SITE_SETS))
    ap.add_argument("--workers", type=int, default=local_cores(), help="local processes (default: every core)")
    ap.add_argument("--dask", metavar="ADDRESS", default=None,
                    help="run on a Dask cluster instead of local processes: local[:N] (a private one started "
                         "here), tls://HOST:PORT (Dask's TLS settings) or tcp://HOST:PORT with --dask-insecure "
                         "(its workers need resel and this checkout's examples/ and ../shared traces)")
    ap.add_argument("--dask-insecure", action="store_true",
                    help="accept a tcp:// scheduler, which anyone who reaches it can use to run code as you")
    ap.add_argument("--true-rates", action="store_true",
                    help="give the engine every site's true mean T_x rate instead of LIM's (what calibration converges to)")
    ap.add_argument("--versus-true", action="store_true",
                    help="also run queue+reselect given the true rates (what auto, learning from LIM, should reach)")
    ap.add_argument("--speedup", action="store_true",
                    help="run the sweep serially and on --workers, side by side; print both times and check the results are equal")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the tables")
    args = ap.parse_args()
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in SITE_SETS]
    if unknown:
        sys.exit(f"unknown site set(s) {unknown}; choose from {', '.join(SITE_SETS)}")
    try:
        sizes = [int(s) for s in (args.sizes or ("16,64,256,1024" if args.full else "16,256,1024")).split(",")]
    except ValueError:
        sys.exit(f"--sizes {args.sizes!r}: give whole numbers separated by commas, e.g. 16,256")
    repeat = args.repeat or (20 if args.full else 3)
    if repeat < 1 or args.workers < 1 or any(n < 1 for n in sizes):
        sys.exit("--repeat, --workers and every size must be at least 1")
    if args.speedup:
        times, docs = {}, {}
        for w in (1, args.workers):
            began = time.perf_counter()
            docs[w] = evaluate(sets, sizes, repeat, args.seed, args.shift_days, w)
            times[w] = time.perf_counter() - began
        same = docs[1]["rows"] == docs[args.workers]["rows"]
        doc = {"serial_s": times[1], "workers": args.workers, "parallel_s": times[args.workers],
               "speedup": times[1] / times[args.workers], "identical": same, "runs": docs[1]["runs"],
               "oracles": docs[1]["oracles"]}
        print(json.dumps(doc, indent=1) if args.json else
              f"| runs + oracles | serial s | {args.workers} workers s | speed-up | identical |\n|---:|---:|---:|---:|---|\n"
              f"| {doc['runs']} + {doc['oracles']} | {times[1]:.1f} | {times[args.workers]:.1f} | {doc['speedup']:.2f}x | {same} |")
        sys.exit(0 if same else 1)
    from resel.sim.experiment import dask_executor
    began = time.perf_counter()
    with dask_executor(args.dask, insecure=args.dask_insecure, default_workers=args.workers) as executor:
        doc = evaluate(sets, sizes, repeat, args.seed, args.shift_days, args.workers, executor, args.true_rates,
                       args.versus_true)
    doc["seconds"] = time.perf_counter() - began
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(table(doc))
    beaten = sum(r["beat_oracle"] for r in doc["rows"])
    unfinished = sum(r["unfinished"] for r in doc["rows"])
    print(f"\nruns below the oracle's bound: {beaten}; runs that did not finish their bag: {unfinished}")
    print(f"{doc['runs']} runs + {doc['oracles']} oracle bounds, {doc['seconds']:.0f} s on {args.workers} worker(s); "
          f"seeds {args.seed}..{args.seed + repeat - 1}; trace arrivals shifted {args.shift_days:g} d per repetition")


if __name__ == "__main__":
    main()
