"""What the crash soak (benchmarks/soak_crash.py) checks after every bag, from the agents' own
files on each site's disk and from the store — never from what the coordinator believes alone.

* **0 tasks lost**: the run is done with every task done and none failed, and every task has a
  ``done`` result in some agent's ``results/``.
* **0 results lost**: every ``done`` or ``failed`` result an agent wrote is in the store's
  ``attempts`` with the same outcome and the same start and end stamps.
* **0 tasks running twice at the same time**: the stand-in task writes its own start and end
  stamps (``soak-start``/``soak-end``, epoch seconds) to ``stamp`` in its directory and to its
  stdout; each attempt that started is the interval from its start to its end — the task's own
  end stamp, else the end its agent wrote (killed or cancelled), else the end of its pilot as the
  store saw it (an agent killed outright), else open. No two intervals of one task may overlap.
  A task killed by Slurm together with its agent leaves no end stamp; one that outlived its
  agent writes its own, so an orphan still running while the task ran again is caught.
* **every duplicate completion counted once**: a task with two ``done`` results in the agents'
  files (an attempt finished, then ran again because its result was never seen) is one done
  task in the run's ``done`` count and one row of its ``tasks`` table.

All sites run on this machine, so every stamp is read on one clock.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from resel.shipped.agent import folder_records


@dataclass
class Interval:
    task: int
    attempt: int
    site: str
    pilot: int
    start: float
    end: float
    how: str               # where the end came from: stamp, result, pilot, open


@dataclass
class Audit:
    """One bag's findings; ``problems`` empty means every check held."""

    run_id: int
    tasks: int
    attempts_started: int = 0
    duplicates: int = 0            # tasks with more than one done result in the agents' files
    orphans: int = 0               # attempts whose task outlived its agent (own end stamp, no result)
    results_read: int = 0
    lost: int = 0                  # tasks no agent finished
    results_lost: int = 0          # done/failed results the store does not have as the agent wrote them
    concurrent: int = 0            # tasks two of whose attempts overlapped
    after_cancel: int = 0          # of those, overlaps whose earlier attempt the coordinator had cancelled
    problems: list[str] = field(default_factory=list)


def _stamps(text: str) -> tuple[float | None, float | None]:
    start = end = None
    for line in (text or "").splitlines():
        word, _, value = line.strip().partition(" ")
        try:
            if word == "soak-start":
                start = float(value)
            elif word == "soak-end":
                end = float(value)
        except ValueError:
            continue
    return start, end


def agent_records(site_dirs: dict[str, Path], run_key: str) -> dict[tuple[int, int], dict]:
    """Every attempt the agents saw, by (task, attempt): site, pilot, started record, result,
    the task's own stamps."""
    out: dict[tuple[int, int], dict] = {}
    for site, root in site_dirs.items():
        for pdir in sorted(root.joinpath(run_key).glob("p*")):
            pilot = int(pdir.name[1:])
            for sub in ("started", "results"):
                # per-key files (agent protocol 5 and earlier) and waves (6) alike; a key two
                # agents alive at once both wrote (protocol 6 allows it: the coordinator takes
                # the first it reads) keeps all its results, the audit takes the stored one
                for _name, rec in folder_records(str(pdir / sub), own_only=False):
                    if not isinstance(rec, dict) or not isinstance(rec.get("task"), int) \
                            or not isinstance(rec.get("attempt"), int):
                        continue
                    entry = out.setdefault((rec["task"], rec["attempt"]), {"site": site, "pilot": pilot})
                    entry.setdefault(sub, rec)
                    entry.setdefault(f"all_{sub}", []).append(rec)
            for stamp in pdir.joinpath("tasks").glob("t*-a*/stamp"):
                task, attempt = (int(x[1:]) for x in stamp.parent.name.split("-"))
                try:
                    text = stamp.read_text()
                except OSError:
                    continue
                out.setdefault((task, attempt), {"site": site, "pilot": pilot})["stamp"] = _stamps(text)
    return out


def audit_run(db_path: Path, run_id: int, site_dirs: dict[str, Path]) -> Audit:
    """Check one finished bag (module docstring)."""
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=60) as con:
        con.row_factory = sqlite3.Row
        run = dict(con.execute("select * from runs where id = ?", [run_id]).fetchone())
        stored = {(r["task"], r["attempt"]): dict(r) for r in con.execute(
            "select task, attempt, outcome, start, end from attempts where run_id = ?", [run_id])}
        task_rows = [dict(r) for r in con.execute("select task, state from tasks where run_id = ?", [run_id])]
        pilot_end = {r["pilot"]: (run["t0"] + r["ended"]) if r["ended"] is not None else None
                     for r in con.execute("select pilot, ended from live_pilots where run_id = ?", [run_id])}
        cancelled = {(r["task"], r["attempt"]) for r in con.execute(
            "select json_extract(data, '$.task') as task, json_extract(data, '$.attempt') as attempt from events "
            "where run_id = ? and kind = 'CancelTask'", [run_id])}
    count = run["size"]
    audit = Audit(run_id, count)
    say = audit.problems.append
    if (run["status"], run["done"], run["failed"]) != ("done", count, 0):
        say(f"run {run_id}: status {run['status']}, {run['done']} done and {run['failed']} failed of {count}")
    records = agent_records(site_dirs, run["run_key"])
    done_by_task: dict[int, int] = {}
    intervals: dict[int, list[Interval]] = {}
    for (task, attempt), rec in sorted(records.items()):
        result, started = rec.get("results"), rec.get("started")
        row = stored.get((task, attempt))
        if row is not None:     # of two results of one key, the one the coordinator stored
            result = next((r for r in rec.get("all_results", []) if r.get("outcome") == row["outcome"]), result)
        stamp_start, stamp_end = rec.get("stamp", (None, None))
        if result is not None:
            audit.results_read += 1
            if stamp_start is None:
                stamp_start, stamp_end = _stamps(result.get("stdout_tail") or "")
            if any(r.get("outcome") == "done" for r in rec.get("all_results", [result])):   # once per key
                done_by_task[task] = done_by_task.get(task, 0) + 1
            if result.get("outcome") in ("done", "failed"):
                row = stored.get((task, attempt))
                if row is None or row["outcome"] != result["outcome"] or not _same(row["start"], result.get("start")) \
                        or not _same(row["end"], result.get("end")):
                    audit.results_lost += 1
                    say(f"result lost: task {task} attempt {attempt} on {rec['site']} (pilot {rec['pilot']}) is "
                        f"{result['outcome']} in the agent's file, {row and row['outcome'] or 'absent'} in the store")
        start = stamp_start if stamp_start is not None else (started or {}).get("time")
        if start is None and result is not None and result.get("exit_code") is not None:
            start = result.get("start")
        if start is None:
            continue                    # never started (cancelled in the inbox, or a handed-ahead task)
        audit.attempts_started += 1
        if stamp_end is not None:
            end, how = stamp_end, "stamp"
            if result is None:
                audit.orphans += 1
        elif result is not None and result.get("end") is not None:
            end, how = float(result["end"]), "result"
        elif pilot_end.get(rec["pilot"]) is not None:
            end, how = pilot_end[rec["pilot"]], "pilot"
        else:
            end, how = math.inf, "open"
        intervals.setdefault(task, []).append(Interval(task, attempt, rec["site"], rec["pilot"], float(start), end, how))
    for task in range(count):
        if done_by_task.get(task, 0) == 0:
            audit.lost += 1
            say(f"task {task} lost: no agent wrote a done result for it")
    audit.duplicates = sum(1 for n in done_by_task.values() if n > 1)
    for task, spans in intervals.items():
        spans.sort(key=lambda s: s.start)
        latest: Interval | None = None     # of the attempts started so far, the one that ends last
        overlaps = []
        for span in spans:
            if latest is not None and span.start < latest.end:
                overlaps.append((latest, span))
            if latest is None or span.end > latest.end:
                latest = span
        audit.concurrent += bool(overlaps)
        audit.after_cancel += any((e.task, e.attempt) in cancelled for e, _later in overlaps)
        for earlier, later in overlaps:
            why = " (the coordinator had cancelled the first)" if (task, earlier.attempt) in cancelled else ""
            say(f"task {task} ran twice at once: attempt {earlier.attempt} on {earlier.site} (pilot "
                f"{earlier.pilot}) from {earlier.start:.3f} to {earlier.end:.3f} ({earlier.how}), attempt "
                f"{later.attempt} on {later.site} (pilot {later.pilot}) from {later.start:.3f}{why}")
    done_rows = [r for r in task_rows if r["state"] == "done"]
    if len(task_rows) != count or len(done_rows) != count:
        say(f"the store's tasks table has {len(task_rows)} rows, {len(done_rows)} done, for {count} tasks")
    return audit


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) < 1e-6
