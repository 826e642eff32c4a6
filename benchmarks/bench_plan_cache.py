"""Benchmark: ``resel plan`` on trace sites as a user types it, with the probe cache off and
warm (resel.sim.probe_cache), side by side.

Learning a trace site's wait errors replays the trace once per probe, most of such a plan; the
cache keeps a site's probes under the sha256 of what they depend on, so a second plan of the
same sites reads them back. This times the whole process (fork to exit, start-up included)
and its CPU (user + system of the child, from ``wait4``: bench_simulate.py's ``child``), each
sites file planned with the cache off and warm in turn, ``--repeat`` rounds interleaved (a busy minute of the shared
machine hits both alike), and prints medians and the ratio off / warm. Before timing, each
file is planned once with a cold cache (that run fills it, and is shown as ``cold``) and the
three outputs are compared: the cache must not change a byte of the plan.

Run:  python benchmarks/bench_plan_cache.py [--repeat 5] [--sites FILE ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_simulate import child  # noqa: E402 - a sibling script: whole-process wall, CPU and output
EXAMPLES = REPO / "examples"
SITES = ["sites-traces.toml", "sites-traces-hpc.toml", "sites-traces-wagap.toml", "sites-hetero.toml"]


def plan(sites: str, cache: str, db: Path) -> tuple[float, float, str]:
    """One ``resel plan --json`` as a fresh process: (wall s, CPU s, stdout)."""
    env = {**os.environ, "RESEL_CACHE_DIR": cache}
    argv = [sys.executable, "-m", "resel.cli", "plan", str(EXAMPLES / "sleep-bag.toml"), "--sites",
            str(EXAMPLES / sites), "--db", str(db), "--json"]
    try:
        out, wall, cpu, _rss = child(argv, cwd=REPO, env=env)
    except RuntimeError as e:
        raise SystemExit(f"resel plan --sites {sites} failed: {str(e)[-2000:]}") from None
    return wall, cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--sites", nargs="*", default=SITES, help="example sites files (default: the trace ones)")
    ap.add_argument("--json", action="store_true", help="the measurements as JSON")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="resel-bench-plan-") as tmp:
        cache, db = str(Path(tmp) / "cache"), Path(tmp) / "db"
        for sites in args.sites:
            off = plan(sites, "off", db)
            cold = plan(sites, cache, db)
            warm = plan(sites, cache, db)
            same = off[2] == cold[2] == warm[2]
            times: dict[str, list[tuple[float, float]]] = {"off": [], "warm": []}
            for _ in range(args.repeat):
                for mode, where in (("off", "off"), ("warm", cache)):
                    wall, cpu, _out = plan(sites, where, db)
                    times[mode].append((wall, cpu))
            med = {m: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for m, v in times.items()}
            rows.append({"sites": sites, "same_output": same, "cold_wall_s": cold[0], "off_wall_s": med["off"][0],
                         "off_cpu_s": med["off"][1], "warm_wall_s": med["warm"][0], "warm_cpu_s": med["warm"][1],
                         "ratio_wall": med["off"][0] / med["warm"][0], "repeat": args.repeat})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"resel plan --json, whole process, medians of {args.repeat} interleaved rounds (s)")
    print(f"{'sites file':<26}{'same':>6}{'cold':>8}{'off wall':>10}{'off cpu':>9}{'warm wall':>11}{'warm cpu':>10}"
          f"{'off/warm':>10}")
    for r in rows:
        print(f"{r['sites']:<26}{'yes' if r['same_output'] else 'NO':>6}{r['cold_wall_s']:>8.2f}{r['off_wall_s']:>10.2f}"
              f"{r['off_cpu_s']:>9.2f}{r['warm_wall_s']:>11.2f}{r['warm_cpu_s']:>10.2f}{r['ratio_wall']:>9.1f}x")
    if not all(r["same_output"] for r in rows):
        raise SystemExit("the cache changed a plan")


if __name__ == "__main__":
    main()
