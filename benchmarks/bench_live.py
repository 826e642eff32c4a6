"""Live coordinator on the real testbed: poll-cycle time, SSH connections per run, dispatch latency.

    scripts/testbed.sh up                       # two Slurm clusters, slurmrestd, sshd (root)
    .venv/bin/python benchmarks/bench_live.py   # [--tasks 32] [--repeat 3]

Runs a bag of short real tasks across tba (local) and tbb (over SSH), ``--repeat`` times, and
prints a table with medians:

* poll cycle: wall time of one :meth:`Coordinator.step` while both sites have a running pilot
  (squeue over SSH + listing the pilots' result directories over SFTP); goal <= 0.3 s;
* SSH connections opened per run to tbb (goal: one per site);
* dispatch latency: from the moment the engine dispatched a task to an acquired pilot (the
  DispatchTask action, stamped by the coordinator's clock) to the agent's own start stamp of
  that attempt; goal <= 1 s median;
* slot turnaround: from a task's end to the next task's start on the same pilot (agents'
  stamps), i.e. dispatch latency plus the wait for the next poll to notice the free slot.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from live_helpers import bag_toml, sites_toml, start  # noqa: E402
from testbed import load  # noqa: E402


def one_run(tb, tasks: int, workdir: Path) -> dict:
    coord = start(workdir, sites_toml(tb, clock_b=2.0), bag_toml(tasks, "sleep 1"), strategy="topk:2", poll=0.25)
    cycles: list[float] = []
    original = coord.step

    def timed_step():
        began = time.perf_counter()
        events = original()
        both_running = {v.site for v in coord.pilots.values() if v.state == "running"} == {"tba", "tbb"}
        if both_running:
            cycles.append(time.perf_counter() - began)
        return events
    coord.step = timed_step
    coord.run(max_time=600)
    coord.close()
    db = coord.db
    dispatched = {(r["task"], r["attempt"]): r["time"] for r in db.query(
        "select json_extract(data, '$.task') as task, json_extract(data, '$.attempt') as attempt, time "
        "from events where run_id = ? and kind = 'DispatchTask'", [coord.run_id])}
    latency = [r["start"] - coord.t0 - dispatched[(r["task"], r["attempt"])]
               for r in db.query("select task, attempt, start from attempts where run_id = ? and start is not null",
                                 [coord.run_id]) if (r["task"], r["attempt"]) in dispatched]
    # a freed slot's turnaround: a task ends on a pilot -> the next task starts on that pilot
    turnaround = []
    by_pilot: dict[int, list] = {}
    for r in db.query("select pilot, start, end from attempts where run_id = ? and start is not null "
                      "and end is not null", [coord.run_id]):
        by_pilot.setdefault(r["pilot"], []).append((r["start"], r["end"]))
    for spans in by_pilot.values():
        starts = sorted(s for s, _ in spans)
        for _, end in spans:
            later = [s for s in starts if s >= end]
            if later:
                turnaround.append(later[0] - end)
    return {"turnaround": statistics.median(turnaround) if turnaround else float("nan"),
            "cycle": statistics.median(cycles) if cycles else float("nan"), "cycles": len(cycles),
            "connections": coord.psites["tbb"].transport.connections_opened,
            "latency": statistics.median(latency), "latency_p95": sorted(latency)[int(0.95 * (len(latency) - 1))],
            "ttc": db["runs"].get(coord.run_id)["ttc_wkd"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            runs.append(one_run(tb, args.tasks, Path(tmp) / f"run{i}"))
            print(f"run {i + 1}/{args.repeat}: {runs[-1]}", file=sys.stderr)
    med = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    print(f"\nlive coordinator on the testbed, {args.tasks} tasks x {args.repeat} runs (medians)\n")
    print(f"| measure | median | goal |\n|---|---|---|")
    print(f"| poll cycle, both sites running (s) | {med('cycle'):.3f} | <= 0.3 |")
    print(f"| SSH connections opened per run (tbb) | {med('connections'):.0f} | 1 |")
    print(f"| dispatch latency, acquired pilot -> task running (s) | {med('latency'):.3f} | <= 1 |")
    print(f"| dispatch latency P95 (s) | {med('latency_p95'):.3f} | |")
    print(f"| slot turnaround, task ends -> next task starts on that pilot (s) | {med('turnaround'):.3f} | |")
    print(f"| TTC of the bag (s) | {med('ttc'):.1f} | |")


if __name__ == "__main__":
    main()
