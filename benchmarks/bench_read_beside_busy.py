"""A site's read on its worker thread while the coordinator's main thread computes: the read's
time at Python's default thread switch interval (5 ms) against the coordinator's (1 ms,
resel.live.main_thread.py), side by side in one run.

    .venv/bin/python benchmarks/bench_read_beside_busy.py              # 4 pilots, 40 reads each way
    .venv/bin/python benchmarks/bench_read_beside_busy.py --pilots 16 --reads 60 --json

Why: the coordinator's main thread runs the engine and the store, pure Python most of the
time, while each site's reads run on threads of their own (resel/live/sites.py). A read over
SSH is a few SFTP round trips, and each answer wakes a thread (paramiko's, then the reader)
that must take the GIL back from the busy main thread, which gives it up only when its switch
interval runs out. At 100,000 tasks the poll cycle's slowest reads were 0.38–0.49 s
(docs/benchmarks.md). Here the same read (``PilotSite.collect_many`` of tbb's pilots over the
testbed's real sshd, real agents' files, a new wave each time) runs on a thread while the main
thread spins a Python loop for a poll period (0.5 s), the two intervals taking turns read by
read; the loop's rounds in the period show what the shorter interval costs the main thread.

Needs the testbed (``scripts/testbed.sh up``) and root (the files are chowned to its SSH user).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]

#: Python's default switch interval and the coordinator's
INTERVALS = {"5 ms (default)": 0.005, "1 ms (coordinator)": 0.001}
#: the main thread's busy period around each read: the coordinator's default poll
PERIOD = 0.5


def spin_for(seconds: float) -> int:
    """Pure-Python work on this thread for ``seconds`` (a poll period); the rounds done."""
    rounds, table = 0, {}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for i in range(200):
            table[i % 61] = i * i
        rounds += 1
    return rounds


def one_read(ps: Any, run_key: str, state: list, made: list, task: int, owner: tuple[int, int]) -> tuple[float, int]:
    """Every agent writes a new wave; then the site reads its pilots on another thread while
    this one spins for a poll period (:data:`PERIOD`). The read's seconds and the main
    thread's rounds in the period: what the read cost it, switches included."""
    from bench_site_read import own
    for a in made:
        a.result(task, 1, "done", None, start=time.time() - 0.01, exit_code=0)
        a.write_waves()
        a.heartbeat()
    own(Path(ps.pilot_dir(run_key, 0)).parent, *owner)
    took: list[float] = []
    found: list[Any] = []

    def read() -> None:
        t = time.perf_counter()
        found.append(ps.collect_many(run_key, state, heartbeat=True))
        took.append(time.perf_counter() - t)
    reader = threading.Thread(target=read)
    reader.start()
    rounds = spin_for(PERIOD)
    reader.join()
    if not took or any(len(f.results) != 1 for f in found[0].values()):
        raise SystemExit(f"read {task}: a pilot's new wave was not found")
    return took[0], rounds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pilots", type=int, default=4, help="pilots of the site (default 4)")
    ap.add_argument("--reads", type=int, default=40, help="reads at each interval (default 40)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    from bench_site_read import Tbb, agents, own

    from resel.backends.waves import WaveCursor
    tbb = Tbb("read-busy")
    ps, user = tbb.site, tbb.user
    run_key = f"r9-{os.getpid():06x}"
    was = sys.getswitchinterval()
    seconds: dict[str, list[float]] = {k: [] for k in INTERVALS}
    spins: dict[str, list[int]] = {k: [] for k in INTERVALS}
    doc: dict[str, Any] = {"site": "tbb", "transport": "ssh", "pilots": args.pilots, "reads": args.reads,
                           "load_start": os.getloadavg()[0]}
    try:
        pdirs = [Path(ps.pilot_dir(run_key, p)) for p in range(args.pilots)]
        for pdir in pdirs:
            pdir.mkdir(parents=True, exist_ok=True)
            os.chmod(pdir, 0o700)
        made = agents(pdirs)
        owner = (user.pw_uid, user.pw_gid)
        own(Path(ps.pilot_dir(run_key, 0)).parent, *owner)
        state = [(p, set(), WaveCursor()) for p in range(args.pilots)]
        ps.collect_many(run_key, state, heartbeat=True)        # the first read lists each pilot once
        task = 0
        for r in range(args.reads):
            for name in (list(INTERVALS) if r % 2 == 0 else list(reversed(INTERVALS))):
                sys.setswitchinterval(INTERVALS[name])
                took, rate = one_read(ps, run_key, state, made, task, owner)
                sys.setswitchinterval(was)
                seconds[name].append(took)
                spins[name].append(rate)
                task += 1
    finally:
        sys.setswitchinterval(was)
        shutil.rmtree(Path(ps.pilot_dir(run_key, 0)).parent, ignore_errors=True)
        tbb.close()
    doc["load_end"] = os.getloadavg()[0]
    doc["by_interval"] = {
        name: {"read_median_s": statistics.median(v), "read_p90_s": sorted(v)[int(0.9 * (len(v) - 1))],
               "read_max_s": max(v), "main_rounds_per_period_median": statistics.median(spins[name])}
        for name, v in seconds.items()}
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"a read of {args.pilots} pilots over SSH (tbb) on a thread, the main thread busy; "
          f"{args.reads} reads at each interval, taking turns")
    print(f"{'switch interval':<20} {'read median s':>14} {'p90 s':>8} {'max s':>8} {'main thread rounds/period':>26}")
    for name, r in doc["by_interval"].items():
        print(f"{name:<20} {r['read_median_s']:>14.4f} {r['read_p90_s']:>8.4f} {r['read_max_s']:>8.4f} "
              f"{r['main_rounds_per_period_median']:>26,}")
    a, b = (doc["by_interval"][k] for k in INTERVALS)
    print(f"ratio (1 ms / 5 ms): read median {b['read_median_s'] / a['read_median_s']:.2f}, "
          f"main thread's work {b['main_rounds_per_period_median'] / a['main_rounds_per_period_median']:.3f}")
    print(f"load average {doc['load_start']:.2f} -> {doc['load_end']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
