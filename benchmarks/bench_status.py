"""`resel status` on a stored 100,000-task live run: from the coordinator's summary, and by
replaying the journal (issue 29 §2, "What limits it" item 4).

    .venv/bin/python benchmarks/bench_status.py                     # 100,000 tasks, 5 timings each
    .venv/bin/python benchmarks/bench_status.py --tasks 2000 --at 0.5 --before /tmp/resel-main

The run is stored by the real coordinator (:class:`resel.live.coordinator.Coordinator`: its
``feed`` records each event, its actions and the summary in one transaction) with its sites
answered on paper (:class:`PaperRun`: pilots start after a drawn wait, each slot runs its
tasks, handed-ahead ones from its inbox, for a drawn time; timers fire; no cluster, no
thread). Storing it is not what is measured: the store is written with ``synchronous = off``
and a transaction per 2,000 events around the coordinator's own (SQLite savepoints), which
changes neither the rows nor their order. Then, at each fraction of the bag done (``--at``),
``resel status --db STORE`` is run as a user types it (its own process, whole, its bytecode
cached: one untimed run first) on that store (the summary) and on a copy without the summary row
(the replay: what every resel before the summary did), and, with ``--before DIR``, by the resel
at DIR (``PYTHONPATH``) on the store itself; the median and range of ``--repeat`` runs of each.
The tables each prints must be the same, or the script fails.

tests/test_status_summary.py stores its runs with :class:`PaperRun` too.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from resel.domain import Bag, Clock, PilotPolicy, Profile, Site
from resel.events import (
    BagCancelled, BagDone, CancelPilot, CancelTask, DispatchTask, Event, PilotEnded, PilotStarted, SetTimer,
    SiteLost, SubmitPilot, TaskFailed, TaskFinished, TaskStarted, TaskWithdrawn, TimerFired, WithdrawTask,
)
from resel.live.coordinator import Coordinator
from resel.live.stored import LiveOptions
from resel.store import to_json

REPO = Path(__file__).resolve().parents[1]
#: t0 of a stored paper run: far ahead, so `status` of a running one shows its last record's
#: time, not the wall clock (two invocations then print the same)
T0 = 4e9


def paper_site(name: str, cores: int, clock_ghz: float = 2.0, *, mode: str = "single", max_pilots: int = 1,
               target: bool = True) -> Site:
    """A site of a paper run: no access table (nothing is ever opened)."""
    return Site(name=name, kind="simulated", cores=cores, clock=Clock(clock_ghz),
                pilot=PilotPolicy(mode=mode, max_pilots=max_pilots), reselect_target=target)


class _Pilot:
    __slots__ = ("id", "site", "slots", "started", "inbox", "running")

    def __init__(self, pid: int, site: str, slots: int) -> None:
        self.id, self.site, self.slots, self.started = pid, site, slots, False
        self.inbox: deque[tuple[int, int]] = deque()      # (task, attempt) handed to it, not started
        self.running: set[tuple[int, int]] = set()


class PaperRun:
    """A live run stored by the real coordinator, its sites' answers drawn on paper.

    ``waits`` per site: the (low, high) of a pilot's queue wait; ``run_time`` a task's; with
    probability ``fail`` an attempt fails, ``lose`` a pilot is lost (ended under its tasks) at
    a drawn time after it started. ``step`` feeds the next instant's events; ``run`` feeds
    until the bag is done or ``until`` events were fed.
    """

    def __init__(self, db: Any, tasks: int, sites: list[Site], *, strategy: str = "topk:2+reselect",
                 waits: dict[str, tuple[float, float]] | None = None, run_time: tuple[float, float] = (5.0, 15.0),
                 fail: float = 0.0, lose: float = 0.0, seed: int = 1, prefetch: int = 1) -> None:
        self.db, self.sites = db, sites
        self.rng = random.Random(seed)
        self.waits = waits or {}
        self.run_time, self.fail, self.lose = run_time, fail, lose
        bag = Bag("paper", "true", tasks, 1, Profile(1e10))
        options = LiveOptions(strategy=strategy, seed=seed, poll=0.5, prefetch=prefetch, quarantine=True)
        self.run_id = db["runs"].insert({
            "created": "2026-11-29T00:00:00Z", "mode": "live", "bag": bag.name, "strategy": strategy, "size": tasks,
            "seed": seed, "clock": "base", "status": "running", "t0": T0, "options": to_json(options),
            "sites": to_json(sites), "bag_spec": to_json(bag), "run_key": "r1-paper"}).last_pk
        self.t = 0.0
        self.coord = Coordinator(db, self.run_id, bag, sites, options, "r1-paper", T0, self._no_site,
                                 clock=lambda: T0 + self.t)
        self.coord.acts.execute = self._act          # the sites: answered here, at once
        self._queue: list[tuple[float, int, str, tuple]] = []
        self._n = 0
        self.pilots: dict[int, _Pilot] = {}
        self.events = 0
        self.done = False

    @staticmethod
    def _no_site(site: Site) -> Any:
        raise AssertionError(f"a paper run opens no site ({site.name})")

    def start(self) -> None:
        from resel.events import BagSubmitted
        self.feed([BagSubmitted(time=0.0)])

    def feed(self, events: list[Event], execute: bool = True) -> None:
        self.events += len(events)
        self.coord.feed(events, execute=execute)

    def _at(self, t: float, what: str, *args: Any) -> None:
        self._n += 1
        heapq.heappush(self._queue, (t, self._n, what, args))

    # -------------------------------------------------------------- the sites' side of the actions
    def _act(self, seq: int, action: Any) -> None:
        t = self.t
        if isinstance(action, SubmitPilot):
            lo, hi = self.waits.get(action.site, (1.0, 5.0))
            self.pilots[action.pilot] = _Pilot(action.pilot, action.site, action.cores)
            self._at(t + self.rng.uniform(lo, hi), "pilot-start", action.pilot)
        elif isinstance(action, DispatchTask):
            pilot = self.pilots.get(action.pilot)
            if pilot is not None:
                pilot.inbox.append((action.task, action.attempt))
                self._at(t, "fill", pilot.id)
        elif isinstance(action, SetTimer):
            self._at(action.at, "timer", action.task, action.attempt, action.site)
        elif isinstance(action, CancelPilot):
            self.pilots.pop(action.pilot, None)
        elif isinstance(action, CancelTask):
            pilot = self.pilots.get(action.pilot)
            if pilot is not None:
                key = (action.task, action.attempt)
                pilot.running.discard(key)
                if key in pilot.inbox:
                    pilot.inbox.remove(key)
                self._at(t, "fill", pilot.id)
        elif isinstance(action, WithdrawTask):
            pilot = self.pilots.get(action.pilot)
            key = (action.task, action.attempt)
            if pilot is not None and key in pilot.inbox:
                pilot.inbox.remove(key)
                self._at(t, "withdrawn", action.task, action.attempt)
        elif isinstance(action, BagDone):
            self.done = True
        self.coord.mark(seq)

    def _fill(self, pilot: _Pilot) -> list[Event]:
        """The agent: a free slot starts the next task of its inbox."""
        out: list[Event] = []
        while pilot.started and pilot.inbox and len(pilot.running) < pilot.slots:
            task, attempt = pilot.inbox.popleft()
            pilot.running.add((task, attempt))
            out.append(TaskStarted(time=self.t, task=task, attempt=attempt))
            self._at(self.t + self.rng.uniform(*self.run_time), "end", pilot.id, task, attempt,
                     self.rng.random() < self.fail)
        return out

    def _events(self, what: str, args: tuple) -> list[Event]:
        t = self.t
        if what == "pilot-start":
            pilot = self.pilots.get(args[0])
            if pilot is None:
                return []
            pilot.started = True
            if self.rng.random() < self.lose:
                self._at(t + self.rng.uniform(*self.run_time) * 2, "pilot-lost", pilot.id)
            return [PilotStarted(time=t, pilot=pilot.id), *self._fill(pilot)]
        if what == "fill":
            pilot = self.pilots.get(args[0])
            return self._fill(pilot) if pilot is not None else []
        if what == "timer":
            return [TimerFired(time=t, task=args[0], attempt=args[1], site=args[2])]
        if what == "withdrawn":
            return [TaskWithdrawn(time=t, task=args[0], attempt=args[1])]
        if what == "pilot-lost":
            pilot = self.pilots.pop(args[0], None)
            return [PilotEnded(time=t, pilot=args[0], reason="lost")] if pilot is not None else []
        if what == "end":
            pid, task, attempt, failed = args
            pilot = self.pilots.get(pid)
            if pilot is None or (task, attempt) not in pilot.running:
                return []                   # cancelled, or its pilot gone: no result comes
            pilot.running.discard((task, attempt))
            ended: Event = (TaskFailed(time=t, task=task, attempt=attempt, reason="exit 1") if failed
                            else TaskFinished(time=t, task=task, attempt=attempt))
            return [ended, *self._fill(pilot)]
        raise ValueError(what)

    def step(self) -> bool:
        """Feed every event of the next instant (False: nothing left to happen)."""
        if not self._queue:
            return False
        self.t = self._queue[0][0]
        events: list[Event] = []
        while self._queue and self._queue[0][0] == self.t:
            _t, _n, what, args = heapq.heappop(self._queue)
            events += self._events(what, args)
        if events:
            self.feed(events)
        return True

    def run(self, until: int | None = None) -> None:
        """Feed until the bag is done, nothing is left to happen, or ``until`` events were fed."""
        while not self.done and (until is None or self.events < until) and self.step():
            pass

    def lose_site(self, site: str) -> None:
        """The site is given up (SiteLost), as the coordinator does when it stops answering."""
        self.feed([SiteLost(time=self.t, site=site, reason="not answering for 600 s")])
        for pid in [p.id for p in self.pilots.values() if p.site == site]:
            del self.pilots[pid]

    def cancel(self) -> None:
        """`resel cancel`: the bag cancelled (its actions recorded, not carried out), the run's results."""
        self.feed([BagCancelled(time=self.t)], execute=False)
        self.coord.ending.write_results("cancelled")

    def finish(self) -> None:
        """The bag done: the run's results written as the coordinator writes them."""
        self.coord.ending.write_results("done")


def status(db: Path, *args: str, pythonpath: str | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """`resel status` as a user types it: its own process, timed whole."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)      # an installed resel's bytecode is cached
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "resel.cli", "status", "--db", str(db), *args], env=env,
                          capture_output=True, text=True, cwd=pythonpath or REPO)
    return time.perf_counter() - t, done


def without_summary(db: Path, copy: Path) -> Path:
    """A copy of the store as a resel before the summary left it: the summary row removed."""
    import sqlite3
    conn = sqlite3.connect(copy)
    with sqlite3.connect(db) as source:     # the store with its write-ahead log
        source.backup(conn)
    conn.execute("delete from live_notes where site = '' and key = 'summary'")
    conn.commit()
    conn.close()
    return copy


def build(path: Path, tasks: int, at: tuple[float, ...] = (0.5, 1.0), seed: int = 1):
    """Store a paper run of ``tasks`` tasks over four sites laid out as bench_scale.py's (8 + 4 +
    4 slots and a pool of four one-core pilots, ``topk:4+reselect``), yielding (run, what storing
    it measured) each time the fraction ``at`` of the bag is done (1.0: the run done), with
    everything so far committed."""
    from resel.store import open_store
    db = open_store(path)
    db.conn.execute("pragma synchronous = off")
    sites = [paper_site("tba", 8), paper_site("tbb", 4), paper_site("tbc", 4),
             paper_site("pool", 4, 1.0, mode="per-task", max_pilots=4)]
    run = PaperRun(db, tasks, sites, strategy="topk:4+reselect", run_time=(0.5, 2.0),
                   waits={"tba": (1, 2), "tbb": (1, 2), "tbc": (1, 3), "pool": (2, 8)}, seed=seed)
    t = time.perf_counter()
    with run.coord.turn():    # one coordinator turn: its commit, then its actions
        run.start()
    for fraction in at:
        while not run.done and run.coord.engine.done_count < fraction * tasks:
            with run.coord.turn():
                target = run.events + 2000
                while not run.done and run.events < target and run.coord.engine.done_count < fraction * tasks:
                    if not run.step():
                        break
        if run.done and run.coord.db["runs"].get(run.run_id)["status"] != "done":
            run.finish()
        db.conn.execute("pragma wal_checkpoint(truncate)")
        rows = next(iter(db.query("select count(*) as n from events where run_id = ?", [run.run_id])))["n"]
        yield run.run_id, {"events": run.events, "rows": rows, "seconds": time.perf_counter() - t,
                           "done": run.coord.engine.done_count, "fraction": fraction}
    db.close()


def timings(db: Path, repeat: int, pythonpath: str | None = None) -> tuple[list[float], str]:
    out, text = [], ""
    status(db, pythonpath=pythonpath)       # once untimed: the bytecode cached, the store's pages read
    for _ in range(repeat):
        seconds, done = status(db, pythonpath=pythonpath)
        if done.returncode != 0:
            raise SystemExit(f"resel status failed ({done.returncode}): {done.stderr}")
        out.append(seconds)
        text = done.stdout
    return out, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--at", default="0.5,1.0", help="fractions of the bag done at which status is timed")
    ap.add_argument("--before", default=None, help="a checkout of an older resel, timed on the same store")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="resel-status-"))
    store = folder / "run.db"
    results = []
    for run_id, built in build(store, args.tasks, tuple(float(x) for x in args.at.split(","))):
        replay_copy = without_summary(store, folder / "replay.db")
        rows = {}
        rows["summary"], shown = timings(store, args.repeat)
        rows["replay (summary row removed)"], shown_replay = timings(replay_copy, args.repeat)
        if shown != shown_replay:
            raise SystemExit("the summary and the replay print different tables:\n" + shown + "\n" + shown_replay)
        if args.before:
            rows["before (older resel, same store)"], shown_before = timings(store, args.repeat, args.before)
            if shown_before != shown:
                raise SystemExit("the older resel prints another table:\n" + shown_before)
        replay_copy.unlink()
        results.append({**built, "run": run_id, "store_mb": round(store.stat().st_size / 1e6, 1),
                        "load": [round(x, 2) for x in os.getloadavg()], "shown": shown,
                        "timings": {k: [round(s, 3) for s in v] for k, v in rows.items()}})
    shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps({"tasks": args.tasks, "repeat": args.repeat, "results": results}, indent=1))
        return
    for r in results:
        print(f"{r['done']:,} of {args.tasks:,} tasks done: {r['rows']:,} journal rows, {r['store_mb']} MB "
              f"(stored in {r['seconds']:.0f} s so far); load average {r['load'][0]:.2f}")
        print(r["shown"])
    names = list(results[0]["timings"])
    print(f"| `resel status`, whole process: median (min–max) of {args.repeat}, s | "
          + " | ".join(f"{r['done']:,} done, {r['rows']:,} rows" for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for name in names:
        cells = [r["timings"][name] for r in results]
        print(f"| {name} | " + " | ".join(f"{statistics.median(c):.3f} ({min(c):.3f}–{max(c):.3f})" for c in cells)
              + " |")


if __name__ == "__main__":
    main()
