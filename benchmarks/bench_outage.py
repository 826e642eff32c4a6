"""A site's controller out for 30 s in the middle of a two-site bag: does its running pilot
keep working? (issue 29, item 0)

    scripts/testbed.sh up                              # the live testbed (root)
    .venv/bin/python benchmarks/bench_outage.py        # [--tasks 200] [--seconds 3] [--repeat 3]
    .venv/bin/python benchmarks/bench_outage.py --fault kill    # kill -9, then restart-ctld

The issue's run: a bag of ``--tasks`` tasks (``sleep --seconds``) over tba (local, 8 slots) and
tbb (over SSH, 4 slots), spread in halves with re-selection (``topk:2+reselect``, as
benchmarks/bench_live.py), at the CLI's ``--poll 2``. In the outage run tba's slurmctld is
out from ``--down`` (15 s after the run started) to ``--up`` (45 s):

* ``stop`` (the default): SIGSTOP, then SIGCONT — a controller that hangs: its port still
  accepts connections, nothing answers, every ``squeue`` hangs until Slurm's message timeout;
* ``kill``: ``kill -9``, then ``scripts/testbed.sh restart-ctld A`` (its state kept) — the
  port is closed, every ``squeue`` fails after its retries.

Fault-free and outage runs alternate (``--repeat`` of each), so both see the same load of the
shared machine. Per run, from the store and the agents' own clocks: the TTC, and the attempts
tba's agent started in each 15-s span (the outage covers two of them). The table gives the
medians and the outage's TTC as a ratio of the fault-free one (goal <= 1.10: tbb has free
slots, so only tba's own slots matter, and they are fed through their files whatever squeue
does). Every run is also checked: each task done exactly once in the store and in the agents'
result files.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from live_helpers import REPO, bag_toml, done_results, sites_toml, start  # noqa: E402
from testbed import load  # noqa: E402

SPANS = ((0, 15), (15, 30), (30, 45), (45, None))


class Outage:
    """tba's slurmctld out from ``down`` to ``up`` seconds after ``t0`` (a thread of its own);
    :meth:`close` always brings it back."""

    def __init__(self, tb, fault: str, t0: float, down: float, up: float):
        self.tb, self.fault, self.t0, self.down, self.up = tb, fault, t0, down, up
        self.pid: int | None = None
        self.over = threading.Event()
        self.times: dict[str, float] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _ctld_pid(self) -> int:
        return int(Path(self.tb.root, "run", "slurmctld-tba.pid").read_text().split()[0])

    def _sleep_until(self, at: float) -> None:
        while not self.over.is_set() and time.time() < self.t0 + at:
            time.sleep(0.05)

    def _run(self) -> None:
        self._sleep_until(self.down)
        if self.over.is_set():
            return
        self.pid = self._ctld_pid()
        os.kill(self.pid, signal.SIGSTOP if self.fault == "stop" else signal.SIGKILL)
        self.times["down"] = time.time() - self.t0
        self._sleep_until(self.up)
        self._back()

    def _back(self) -> None:
        if self.pid is None or "up" in self.times:
            return
        if self.fault == "stop":
            os.kill(self.pid, signal.SIGCONT)
        else:
            subprocess.run(["bash", str(REPO / "scripts" / "testbed.sh"), "restart-ctld", "A"], check=True,
                           capture_output=True, timeout=120)
        self.times["up"] = time.time() - self.t0

    def close(self) -> None:
        self.over.set()
        self._thread.join()
        self._back()


def one_run(tb, args, outage: bool, workdir: Path) -> dict:
    """One bag on tba and tbb, with or without the outage; its measures (module docstring)."""
    coord = start(workdir, sites_toml(tb, clock_b=2.0), bag_toml(args.tasks, f"sleep {args.seconds:g}"),
                  strategy="topk:2+reselect", poll=args.poll)
    fault = Outage(tb, args.fault, coord.t0, args.down, args.up) if outage else None
    try:
        coord.run(max_time=900)
    finally:
        if fault is not None:
            fault.close()
        coord.close()
    db, t0 = coord.db, coord.t0
    run = db["runs"].get(coord.run_id)
    starts = [r["start"] - t0 for r in db.query(
        "select start from attempts where run_id = ? and site = 'tba' and start is not null", [coord.run_id])]
    out = {"ttc": run["ttc_wkd"], "done": run["done"]}
    for lo, hi in SPANS:
        out[f"tba_{lo}"] = sum(1 for s in starts if s >= lo and (hi is None or s < hi))
    done = {r["task"]: r["n"] for r in db.query(
        "select task, count(*) as n from attempts where run_id = ? and outcome = 'done' group by task",
        [coord.run_id])}
    files = done_results(tb, run["run_key"])
    want = {i: 1 for i in range(args.tasks)}
    out["exactly_once"] = done == want and files == want and run["done"] == args.tasks
    if fault is not None:
        out["fault"] = fault.times
    return out


def span_label(lo: int, hi: int | None) -> str:
    return f"tasks tba started in [{lo}, {hi}) s" if hi is not None else f"tasks tba started after {lo} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=3.0, help="each task sleeps this long")
    ap.add_argument("--poll", type=float, default=2.0, help="the coordinator's poll period (the CLI's default)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each kind (fault-free and outage alternate)")
    ap.add_argument("--fault", choices=("stop", "kill"), default="stop",
                    help="stop: SIGSTOP/SIGCONT (squeue hangs); kill: kill -9, then restart-ctld (squeue fails)")
    ap.add_argument("--down", type=float, default=15.0, help="seconds into the run the controller goes out")
    ap.add_argument("--up", type=float, default=45.0, help="seconds into the run it comes back")
    args = ap.parse_args()
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    runs: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for outage in (False, True):
                runs[outage].append(one_run(tb, args, outage, Path(tmp) / f"{'out' if outage else 'ok'}-{i}"))
                print(f"{'outage' if outage else 'fault-free'} run {i + 1}/{args.repeat}: {runs[outage][-1]}",
                      file=sys.stderr)
    med = {o: {k: statistics.median(r[k] for r in rs) for k in ("ttc",) + tuple(f"tba_{lo}" for lo, _ in SPANS)}
           for o, rs in runs.items()}
    ratio = med[True]["ttc"] / med[False]["ttc"]
    print(f"\ncontroller outage on tba ({args.fault}, {args.down:g}-{args.up:g} s): {args.tasks} x sleep "
          f"{args.seconds:g} s on tba (8 slots) + tbb (4), --poll {args.poll:g}, topk:2+reselect, "
          f"{args.repeat} run(s) each (medians)\n")
    print("| measure | fault-free | outage | goal |\n|---|---|---|---|")
    print(f"| TTC of the bag (s) | {med[False]['ttc']:.1f} | {med[True]['ttc']:.1f} | |")
    for lo, hi in SPANS:
        print(f"| {span_label(lo, hi)} | {med[False][f'tba_{lo}']:.0f} | {med[True][f'tba_{lo}']:.0f} | |")
    print(f"| outage TTC / fault-free TTC | | {ratio:.3f} | <= 1.10 |")
    once = all(r["exactly_once"] for rs in runs.values() for r in rs)
    print(f"| every task done exactly once (store and agents' files), all runs | | {'yes' if once else 'NO'} | yes |")
    if not once:
        sys.exit(1)


if __name__ == "__main__":
    main()
