"""Benchmark: simulate 100,000 tasks over 16 sites with re-selection on; the default
``resel simulate`` as a whole process; memory against --repeat; optionally 1,000,000 tasks.

Targets: issue 2, <= 10 s wall time and <= 1 GB peak memory for 100,000 tasks on a 2-core
machine; issue 15, the default ``resel simulate`` (stored) <= 4 s as a whole process, memory
flat in ``--repeat``, and 1,000,000 tasks over 16 sites with re-selection <= 30 s and
<= 600 MB (``--million``).

Each measurement runs in a fresh child process so its peak RSS is its own. The strategies
are measured side by side, interleaved, ``--repeat`` times; the table shows medians and the
ratio to the no-re-selection baseline ("model"). Nothing is stored (``record=False``), as in a
dry run that only needs the metrics. Whole processes are timed from outside (start to exit).

``--baseline PYTHON`` measures a second installation of resel (e.g. a virtual environment of
the previous version) in the same run, interleaved: a before/after table from one run.

Run:  python benchmarks/bench_simulate.py [--tasks 100000] [--repeat 3] [--baseline PYTHON] [--million]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sixteen_sites():
    """The four thesis sites, each in four variants (clock and wait scaled): 12 HPC + 4 pools."""
    import resel
    from resel.domain import Clock, WaitModel
    from resel.models.distributions import Dist

    sites = []
    for v, (clock_f, wait_f) in enumerate([(1.0, 1.0), (0.9, 0.6), (1.1, 1.5), (0.95, 2.0)]):
        for s in resel.default_sites():
            wait = s.wait
            median = dict(wait.dist.params)["median"] * wait_f
            sigma = dict(wait.dist.params)["sigma"]
            sites.append(dataclasses.replace(
                s, name=f"{s.name}-{v}", clock=Clock(s.clock.base * clock_f, (s.clock.avg or s.clock.base) * clock_f),
                wait=WaitModel(Dist.of("lognormal", median=median, sigma=sigma), wait.size_exponent, wait.cores_per_node)))
    return sites


def one(strategy: str, tasks: int, seed: int) -> dict:
    import resel
    from resel.sim.simulation import simulate

    bag = resel.default_bag().resized(tasks)
    sites = sixteen_sites()
    start, cpu0 = time.perf_counter(), time.process_time()
    result = simulate(bag, sites, strategy, seed=seed, record=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    m = result.metrics
    assert m.done == tasks, f"only {m.done} of {tasks} tasks finished"
    return {"strategy": strategy, "seed": seed, "wall_s": wall, "cpu_s": cpu, "events": result.steps,
            "events_per_s": result.steps / wall, "peak_mb": peak_mb, "done": m.done,
            "pilots": len(result.pilots), "moved": m.reassigned, "ttc_wkd_h": m.ttc_wkd / 3600}


def child(argv: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None
          ) -> tuple[str, float, float, float]:
    """Run a child to completion (in ``cwd``, with ``env``: this process's by default): its
    stdout, wall seconds (from outside), CPU seconds (user + system, the kernel's account) and
    peak RSS in MB. Output goes to files, so a chatty child cannot fill a pipe and stall."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"child failed: {' '.join(argv)}\n{err.read()}")
        return out.read(), wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


#: the thesis's four sites (the embedded sites file `resel sites defaults` prints)
THESIS_SITES = str(Path(__file__).resolve().parent.parent / "resel" / "data" / "default-sites.toml")


def resel_cli(python: str) -> str:
    return str(Path(python).parent / "resel")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--strategies", default="auto,reselect,model+reselect,model")
    ap.add_argument("--baseline", metavar="PYTHON", default=None,
                    help="also measure the resel installed for this interpreter, interleaved")
    ap.add_argument("--million", action="store_true", help="also 1,000,000 tasks with reselect (about a minute a run)")
    ap.add_argument("--one", nargs=2, metavar=("STRATEGY", "SEED"), help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the raw measurements as JSON")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.tasks, int(args.one[1]))))
        return
    strategies = args.strategies.split(",")
    versions = {"": sys.executable}
    if args.baseline:
        versions["before"] = args.baseline
    rows: dict[tuple[str, str], list[dict]] = {}
    whole: dict[tuple[str, str], list[dict]] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_simulate_") as tmp:
        for rep in range(args.repeat):
            for version, python in versions.items():    # interleaved, so drift hits every case alike
                for strategy in strategies:
                    out, _, _, _ = child([python, __file__, "--tasks", str(args.tasks), "--one", strategy, str(rep)])
                    rows.setdefault((version, strategy), []).append(json.loads(out))
                    print(f"  {version or 'resel'} {strategy:<16} run {rep + 1}/{args.repeat}: "
                          f"{rows[(version, strategy)][-1]['wall_s']:.2f} s", file=sys.stderr)
                if args.million:
                    out, wall, cpu, peak = child([python, __file__, "--tasks", "1000000", "--one", "reselect", str(rep)])
                    whole.setdefault((version, "million"), []).append({**json.loads(out), "whole_s": wall,
                                                                       "whole_cpu_s": cpu, "whole_peak_mb": peak})
                    print(f"  {version or 'resel'} 1,000,000 reselect run {rep + 1}: {wall:.1f} s", file=sys.stderr)
                # the default resel simulate, stored, as a user runs it
                db = os.path.join(tmp, f"r{rep}{version}.db")
                _, wall, cpu, peak = child([resel_cli(python), "simulate", "--db", db])
                whole.setdefault((version, "simulate"), []).append({"whole_s": wall, "whole_cpu_s": cpu,
                                                                    "peak_mb": peak})
                # memory against --repeat (nothing stored)
                for n in (5, 25):
                    # (the thesis sites and strategies, as measured before issue 26 made the main job
                    # the HPC2N queues: memory per repetition is what this measures)
                    _, wall, _, peak = child([resel_cli(python), "simulate", "--no-store", "--sizes", "256",
                                              "--repeat", str(n), "--sites", THESIS_SITES,
                                              "--strategies", "random,model,reselect"])
                    whole.setdefault((version, f"repeat{n}"), []).append({"whole_s": wall, "peak_mb": peak})
                print(f"  {version or 'resel'} resel simulate run {rep + 1}: "
                      f"{whole[(version, 'simulate')][-1]['whole_s']:.2f} s", file=sys.stderr)
    load_after = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"in_process": {f"{v}:{s}": r for (v, s), r in rows.items()},
                          "whole": {f"{v}:{s}": r for (v, s), r in whole.items()}}, indent=2))
        return
    keys = ("wall_s", "cpu_s", "events", "events_per_s", "peak_mb", "pilots", "moved", "ttc_wkd_h")
    med = {k: {m: statistics.median(r[m] for r in rs) for m in keys} for k, rs in rows.items()}
    print(f"\n{args.tasks:,} tasks over 16 simulated sites, median of {args.repeat} runs each (python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load average {load_before:.1f} before, "
          f"{load_after:.1f} after)")
    print(f"{'version':<8} {'strategy':<16} {'wall s':>8} {'CPU s':>7} {'vs ' + strategies[-1]:>10} {'events':>9} "
          f"{'events/s':>10} {'peak MB':>8} {'pilots':>7} {'moved':>7} {'TTC_wkd h':>10}")
    for version in versions:
        base = med[(version, strategies[-1])]["wall_s"]
        for s in strategies:
            m = med[(version, s)]
            print(f"{version or 'now':<8} {s:<16} {m['wall_s']:>8.2f} {m['cpu_s']:>7.2f} {m['wall_s'] / base:>9.2f}x {m['events']:>9,.0f} "
                  f"{m['events_per_s']:>10,.0f} {m['peak_mb']:>8.0f} {m['pilots']:>7,.0f} {m['moved']:>7,.0f} "
                  f"{m['ttc_wkd_h']:>10.2f}")
    print("target: <= 10 s and <= 1024 MB for the re-selection runs")

    def wmed(version: str, what: str, key: str) -> float:
        return statistics.median(r[key] for r in whole[(version, what)])

    print("\nwhole processes (timed from outside, start to exit), medians:")
    for version in versions:
        label = version or "now"
        sim = wmed(version, "simulate", "whole_s")
        r5, r25 = wmed(version, "repeat5", "peak_mb"), wmed(version, "repeat25", "peak_mb")
        print(f"  {label:<7} resel simulate (default, stored): {sim:.2f} s ({wmed(version, 'simulate', 'whole_cpu_s'):.2f} s CPU), "
              f"peak {wmed(version, 'simulate', 'peak_mb'):.0f} MB; "
              f"--no-store --sizes 256: peak {r5:.1f} MB at --repeat 5, {r25:.1f} MB at --repeat 25 "
              f"({(r25 - r5) / 20:+.2f} MB per repetition)")
        if args.million:
            print(f"  {label:<7} 1,000,000 tasks, reselect: {wmed(version, 'million', 'wall_s'):.1f} s simulating "
                  f"({wmed(version, 'million', 'cpu_s'):.1f} s CPU), {wmed(version, 'million', 'whole_s'):.1f} s whole "
                  f"process ({wmed(version, 'million', 'whole_cpu_s'):.1f} s CPU), peak "
                  f"{wmed(version, 'million', 'whole_peak_mb'):.0f} MB")
    print("targets: resel simulate <= 10 s (issue 26's main job; issue 15's thesis-sites default: <= 4 s); memory flat "
          "in --repeat; 1,000,000 tasks <= 30 s and <= 600 MB")


if __name__ == "__main__":
    main()
