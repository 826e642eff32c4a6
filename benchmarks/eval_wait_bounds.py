"""Evaluation: coverage and tightness of pilot wait estimates on a replayed trace (issue 8, part 5).

One command, e.g.::

    .venv/bin/python benchmarks/eval_wait_bounds.py --trace hpc2n --policy easy --points 200

replays the trace on one site (cores from the SWF header's MaxProcs, else the trace's
``.machines`` file, else ``--cores``), injects probe pilots of several shapes at ``--points``
times after a warm-up, and prints two markdown tables (see resel/sim/wait_eval.py and the
"Evaluation" section of docs/queue-aware.md for what the columns mean). ``--json`` prints the
scores and the run's parameters instead, for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

try:                                    # an installed resel first (pip install .): the checkout's
    import resel  # noqa: F401          # resel/ lacks resel.probes/models/backends, which an
except ImportError:                     # install maps from probes/, models/, backends/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resel.sim import wait_eval as we  # noqa: E402
from resel.sim.swf import Trace, read_machines  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"
KNOWN = {"hpc2n": DATA / "hpc2n.swf", "wagap": DATA / "wagap-2013.swf"}


def site_cores(trace: Trace) -> int | None:
    """The machine's cores: the header's MaxProcs, else the sum over the ``.machines`` file."""
    if trace.header.max_procs:
        return trace.header.max_procs
    machines = Path(trace.path + ".machines")
    if machines.exists():
        return sum(m.cores for m in read_machines(machines))
    return None


def parse_shape(text: str) -> we.Shape:
    """``CORESxHOURS``, e.g. ``8x12`` for 8 cores for 12 hours."""
    cores, hours = text.lower().split("x")
    return we.Shape(int(cores), float(hours) * 3600)


def parse_bound(text: str) -> tuple[float, float]:
    """``QUANTILE/CONFIDENCE``, e.g. ``0.9/0.9``."""
    q, c = text.split("/")
    return float(q), float(c)


def twin_estimator():
    """The twin's estimate as a wait-eval function, or None while models/twin.py is absent."""
    try:
        from resel.sim.wait_eval import twin_wait
    except ImportError:
        return None
    return twin_wait


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="hpc2n", help="hpc2n, wagap, or a path to an SWF file")
    ap.add_argument("--cores", type=int, help="site cores (default: from the header or .machines)")
    ap.add_argument("--policy", default="easy", help="fcfs, easy, easy-sjbf or conservative")
    ap.add_argument("--bound", action="append", type=parse_bound,
                    help="QBETS QUANTILE/CONFIDENCE, repeatable (default: 0.9/0.9 and 0.95/0.95)")
    ap.add_argument("--points", type=int, default=200, help="number of injection times")
    ap.add_argument("--seed", type=int, help="random injection times with this seed (default: evenly spaced)")
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of the submit span before the first probe")
    ap.add_argument("--shape", action="append", type=parse_shape,
                    help="probe shape CORESxHOURS, repeatable (default: 1,8,32,64 cores x 1 h, 12 h)")
    ap.add_argument("--load", type=float, default=1.0, help="compress arrivals: submit times / LOAD")
    ap.add_argument("--first", type=int, help="use only the first N trace lines")
    ap.add_argument("--no-twin", action="store_true", help="leave the twin out even if available")
    ap.add_argument("--reality", choices=("simulated", "recorded"), default="simulated",
                    help="simulated: probe pilots in the replay (default); recorded: the trace's own "
                         "jobs as probes, judged against their recorded waits")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = ap.parse_args(argv)

    path = Path(KNOWN.get(args.trace, args.trace))
    trace = Trace(path)
    cores = args.cores or site_cores(trace)
    if cores is None:
        ap.error(f"{path.name} names no machine size; give --cores")
    started = time.perf_counter()
    recorded = args.reality == "recorded"
    if recorded:
        jobs = we.load_recorded(trace if args.first is None else list(trace)[:args.first], cores)
    else:
        jobs = we.load_jobs(trace, cores, first=args.first, load=args.load)
        times = we.injection_times(jobs, args.points, warmup=args.warmup, seed=args.seed)
    bounds = args.bound or [(0.9, 0.9), (0.95, 0.95)]
    estimators: list = [we.HistoryBound(q, c) for q, c in bounds] + [we.SchedulerEstimate()]
    twin = None if args.no_twin else twin_estimator()
    if twin is not None:
        estimators.append(we.FunctionEstimate("twin", twin))
    shapes = args.shape or list(we.DEFAULT_SHAPES)
    if recorded:
        probes = we.evaluate_recorded(jobs, args.policy, cores, args.points, warmup=args.warmup,
                                      seed=args.seed, estimators=estimators)
        shapes, npoints = [], len(probes)
    else:
        probes = we.evaluate(jobs, args.policy, cores, times, shapes, estimators)
        npoints = len(times)
    scores = we.summarize(probes)
    elapsed = time.perf_counter() - started
    params = {"trace": path.name, "cores": cores, "policy": args.policy, "load": args.load, "jobs": len(jobs),
              "reality": args.reality, "points": npoints, "seed": args.seed, "warmup": args.warmup,
              "shapes": [s.label for s in shapes], "bounds": [f"{q:g}/{c:g}" for q, c in bounds],
              "twin": twin is not None, "seconds": round(elapsed, 2),
              "history_levels": {e.name: e.levels for e in estimators if isinstance(e, we.HistoryBound)}}
    if args.json:
        print(json.dumps({"params": params, "scores": [s.as_dict() for s in scores]}, indent=1, default=str))
        return 0
    if recorded:
        print(f"{path.name}: {cores} cores, {args.policy} model, recorded reality, {len(jobs)} jobs, "
              f"{len(probes)} of them as probes, {elapsed:.1f} s")
    else:
        print(f"{path.name}: {cores} cores, {args.policy}, load ×{args.load:g}, {len(jobs)} jobs, "
              f"{npoints} injection times × {len(shapes)} shapes = {len(probes)} probes, {elapsed:.1f} s")
    levels = "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in lv.items())
                       for name, lv in params["history_levels"].items())
    print(f"history bound from (shape class / core class / site / none): {levels}")
    print()
    print(we.markdown(scores))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
