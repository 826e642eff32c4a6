"""The live coordinator's recording path without a cluster: store commits and main-thread time
per task (issue 29 §2).

    .venv/bin/python benchmarks/bench_turns.py --tasks 2000 --slots 4      # [--repeat 3] [--json]
    PYTHONPATH=/path/to/an/older/resel .venv/bin/python benchmarks/bench_turns.py   # "before"

A real :class:`~resel.live.coordinator.Coordinator` on a real store file (WAL, SQLite's default
``synchronous=FULL``: each commit an ``fdatasync``), the real engine (``model``, one site of
``--slots`` slots, one pilot, the CLI's hand-ahead of 1) and the real journal; only the sites
are played here. Each turn does what :meth:`Coordinator.step` does with what a site's threads
report: the actions carried out in the turn before are answered (their done marks; a pilot's
submission → its start), and the pilot's agent has finished every task that ran and started
the next ones in their slots (an ``attempts`` row per started record and per result, then
``TaskFinished``/``TaskStarted`` fed). ``--slots`` is thus about the tasks per turn: the N =
2,000 testbed runs saw ~3 (25 tasks/s over ~8 turns/s). Measured in this process: the COMMITs
(the connection's trace callback), the wall and CPU time of the turns (``perf_counter``,
``thread_time``). A resel without ``Coordinator.turn`` (before issue 29 §2) runs the same turns
with each row in its own transaction, as its ``step`` did.

It measures the store and the engine, not the sites: the testbed runs (bench_scale.py) add
the polls, the reads and the inbox writes, which run on other threads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def one_run(tasks: int, slots: int, folder: Path, rows_to: str | None = None) -> dict:
    from resel.domain import Bag, Clock, PilotPolicy, Profile, Site
    from resel.events import BagSubmitted, DispatchTask, PilotStarted, SubmitPilot, TaskFinished, TaskStarted
    from resel.live.coordinator import Coordinator
    from resel.live.pilot_views import PilotView
    from resel.live.stored import LiveOptions
    from resel.states import PilotState
    from resel.store import open_store, to_json

    db = open_store(folder / "turns.db")
    bag = Bag("b", "true", tasks, 1, Profile(1e10))
    site = Site(name="tb", kind="simulated", cores=slots, clock=Clock(2.0), kappa=1.0,
                pilot=PilotPolicy(mode="single", max_cores=slots, max_pilots=1))
    options = LiveOptions(strategy="model")
    run_id = db["runs"].insert({"mode": "live", "bag": "b", "status": "running", "t0": 0.0, "run_key": "r1-bench",
                                "options": to_json(options), "sites": to_json([site]),
                                "bag_spec": to_json(bag)}).last_pk
    now = [0.0]
    coord = Coordinator(db, run_id, bag, [site], options, "r1-bench", 0.0,
                        lambda s: (_ for _ in ()).throw(AssertionError("no site is opened")), clock=lambda: now[0])
    carried: list[tuple[int, object]] = []
    site_actions = (SubmitPilot, DispatchTask)
    original = coord.acts.execute

    def execute(seq, action):            # a site's action goes to "the site"; the rest as resel does it
        if isinstance(action, site_actions):
            carried.append((seq, action))
        else:
            original(seq, action)
    coord.acts.execute = execute
    turn = getattr(coord, "turn", None) or contextlib.nullcontext
    mark = getattr(coord, "mark_soon", None) or coord.mark        # as Actions.acted marks an answer
    commits = [0]
    db.conn.set_trace_callback(lambda sql: commits.__setitem__(0, commits[0] + (sql[:6].upper() == "COMMIT")))

    coord.feed([BagSubmitted(time=0.0)])
    view = None
    queued: list[tuple[int, int]] = []       # handed to the agent, not started
    running: list[tuple[int, int]] = []
    turns, wall, cpu = 0, 0.0, 0.0
    while not coord.finished and turns < 20 * tasks:
        now[0] += 0.125
        answered, carried[:] = list(carried), []
        began, began_cpu = time.perf_counter(), time.thread_time()
        with turn():
            events = []
            for seq, action in answered:     # Actions.acted: its done mark, and what it means
                mark(seq)
                if isinstance(action, SubmitPilot):
                    view = coord.pilots.setdefault(action.pilot, PilotView(action.pilot, action.site, action.cores,
                                                                           action.walltime))
                    view.job_id, view.state = "1", PilotState.ACTIVE
                    coord.pilot_row(view, submitted=now[0])
                    coord.pilot_row(view, started=now[0])
                    events.append(PilotStarted(time=now[0], pilot=action.pilot))
                else:
                    queued.append((action.task, action.attempt))
            for task, attempt in running:    # the agent's results, then the starts in the freed slots
                coord.attempt_row(task, attempt, view, {
                    "start": now[0] - 0.1, "end": now[0] - 0.05, "host": "n1", "exit_code": 0, "outcome": "done",
                    "reason": None, "perf": None, "stdout_tail": "", "stderr_tail": "", "outputs": None})
                events.append(TaskFinished(time=now[0], task=task, attempt=attempt))
            running, queued = queued[:slots], queued[slots:]
            for task, attempt in running:
                coord.attempt_row(task, attempt, view, {"start": now[0] - 0.04, "host": "n1"})
                events.append(TaskStarted(time=now[0], task=task, attempt=attempt))
            coord.feed(events)
        wall += time.perf_counter() - began
        cpu += time.thread_time() - began_cpu
        turns += 1
    db.conn.set_trace_callback(None)
    done = sum(1 for t in coord.engine.tasks if t.state.name == "DONE")
    rows = next(iter(db.query("select count(*) as n from events where run_id = ?", [run_id])))["n"]
    if rows_to:       # what the run stored, to compare two versions' (the store's content must not change)
        Path(rows_to).write_text(json.dumps({t: [list(r) for r in db.execute(f"select * from {t} order by rowid")]
                                             for t in ("events", "attempts", "decisions", "live_pilots")}))
    db.conn.close()
    return {"tasks": tasks, "done": done, "turns": turns, "commits": commits[0], "journal_rows": rows,
            "wall_s": wall, "cpu_s": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--slots", type=int, default=4, help="the pilot's slots: about the tasks per turn (default 4)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", default=None, help="write the first run's stored rows here (JSON), to compare versions")
    args = ap.parse_args()
    import resel
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-turns-") as folder:
            runs.append(one_run(args.tasks, args.slots, Path(folder), args.rows if not runs else None))
    n = args.tasks
    doc = {"resel": str(Path(resel.__file__).parent), "load": os.getloadavg(), "runs": runs,
           "commits_per_task": statistics.median(r["commits"] / n for r in runs),
           "commits_per_turn": statistics.median(r["commits"] / r["turns"] for r in runs),
           "tasks_per_turn": statistics.median(n / r["turns"] for r in runs),
           "wall_ms_per_task": statistics.median(1000 * r["wall_s"] / n for r in runs),
           "cpu_ms_per_task": statistics.median(1000 * r["cpu_s"] / n for r in runs)}
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    print(f"resel from {doc['resel']}; load average {' / '.join(f'{x:.2f}' for x in doc['load'])}")
    print("| tasks | done | turns | commits | journal rows | turns' wall s | turns' CPU s |\n|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['tasks']} | {r['done']} | {r['turns']} | {r['commits']} | {r['journal_rows']} | "
              f"{r['wall_s']:.2f} | {r['cpu_s']:.2f} |")
    print(f"\nmedians: {doc['tasks_per_turn']:.2f} tasks per turn; {doc['commits_per_task']:.2f} commits per task, "
          f"{doc['commits_per_turn']:.2f} per turn; main thread {doc['wall_ms_per_task']:.2f} ms wall "
          f"({doc['cpu_ms_per_task']:.2f} ms CPU) per task")


if __name__ == "__main__":
    main()
