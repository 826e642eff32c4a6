"""Live coordinator on the real testbed: slot turnaround, a pilot's first task, dispatch latency,
poll time per site, SSH connections per run, and the bag's TTC.

    scripts/testbed.sh up                       # two Slurm clusters, slurmrestd, sshd (root)
    .venv/bin/python benchmarks/bench_live.py   # [--tasks 64] [--seconds 3] [--poll 2] [--repeat 3]
    .venv/bin/python benchmarks/bench_live.py --compare          # hand-ahead off, then on
    .venv/bin/python benchmarks/bench_live.py --tasks 200 --repeat 2 --compare   # the issue's bag
    .venv/bin/python benchmarks/bench_live.py --polls --repeat 15   # a poll: all users' jobs vs ours

Runs a bag of ``--tasks`` real tasks (``sleep --seconds``) across tba (local, 8 slots) and tbb
(over SSH, 4 slots), ``--repeat`` times, at the CLI's default ``--poll 2``, and prints a table
of medians (every figure from the agents' own clocks, read back from the store):

* slot turnaround: a task ends on a pilot -> the next task starts in the slot it freed (each
  end paired with the first later start on that pilot not yet paired); goal <= 0.1 s: with
  tasks handed ahead the agent refills a slot itself, the poll period no longer sets it;
* first task: the pilot's agent started -> its first task started;
* dispatch latency: the coordinator dispatched an attempt to an acquired pilot -> the agent
  started it; hand-ahead off only (a task handed ahead waits for its slot by design);
* poll time per site: one poll of one site — its scheduler (squeue over SSH for tbb) and its
  pilots' files are asked at once, on the site's two threads, so a poll takes the longer of the
  two (medians of each); each site is polled on its own threads, so one site's poll never
  waits for the other's;
* SSH connections opened per run to tbb (goal: one);
* TTC of the bag; the span from the first agent's start to the last task's end (the pilots'
  queue waits — other users' jobs on the shared testbed — left out), and the slot-seconds
  idle within it: 12 x span - the time tasks ran.

Both sites are equally fast and both are re-selection targets, the bag is split in halves
(``topk:2+reselect``): a site with a free slot takes the other's next waiting task, so
neither idles while the other has work.

``--four-sites`` measures instead the four live backend families of issue 14 in one bag (the
sites of tests/test_mixed_live.py: tbb, Slurm 22.05 over SSH; tbc, Slurm 24.11 through slurmrestd
with files over SSH; torque, the Torque wrappers over tba; pool, the HTCondor 23.9.6 pool over
SSH with tasks through condor_chirp), the bag split over all four (``topk:4``), hand-ahead off so
that every task is dispatched to an acquired pilot and the agent's start measures the path:

* dispatch latency per backend: the coordinator dispatched the attempt to an acquired pilot ->
  the agent started it (goal <= 1 s Slurm/PBS: a file over SFTP or a local write, read by the
  agent's inbox scan; <= 2 s HTCondor: the chirp wrapper's next pull, every 2 s, plus one fetch);
* SSH connections opened per site per run (goal 1);
* poll time per site, and the poll cycle over the four sites: each site is polled on its own
  threads, so a cycle takes as long as its slowest site (goal <= 0.3 s).

    .venv/bin/python benchmarks/bench_live.py --four-sites --tasks 32 --seconds 2 --repeat 3

``--compare`` runs with hand-ahead off (``prefetch = 0``: a freed slot waits for the next
poll, as before issue 13) and on (``prefetch = 1``) and prints both columns. Run against an
older resel (one without ``LiveOptions.prefetch``), the script measures that resel as it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from live_helpers import bag_toml, sites_toml, start  # noqa: E402
from testbed import load  # noqa: E402

from resel.live.coordinator import LiveOptions  # noqa: E402

HAS_PREFETCH = "prefetch" in {f.name for f in dataclasses.fields(LiveOptions)}


def pair_turnarounds(spans: list[tuple[float, float]]) -> list[float]:
    """Per pilot: each end paired with the first start at or after it not yet paired (a freed
    slot and the task that took it); the gaps."""
    starts = sorted(s for s, _ in spans)
    used = [False] * len(starts)
    gaps = []
    for end in sorted(e for _, e in spans):
        for i, s in enumerate(starts):
            if not used[i] and s >= end:
                used[i] = True
                gaps.append(s - end)
                break
    return gaps


def one_run(tb, tasks: int, seconds: float, poll: float, prefetch: int | None, workdir: Path,
            strategy: str = "topk:2+reselect") -> dict:
    """One bag on both sites; the measures of the module docstring for it."""
    options = {"strategy": strategy, "poll": poll}
    if HAS_PREFETCH and prefetch is not None:
        options["prefetch"] = prefetch
    handed_ahead = (prefetch if prefetch is not None else LiveOptions().prefetch) if HAS_PREFETCH else 0
    # both sites equally fast (and re-selection targets, the default): with topk:2+reselect
    # whichever has a free slot takes the other's next waiting task (Ŵ = 0: moved for good)
    coord = start(workdir, sites_toml(tb, clock_b=2.0), bag_toml(tasks, f"sleep {seconds:g}"), **options)
    polls: dict[str, list[float]] = {"tba": [], "tbb": []}
    if hasattr(coord, "on_report"):                 # the per-site workers: time each poll
        time_polls(coord, polls)
    else:                                            # one poll of every site per step
        original_step = coord.step

        def timed_step(*a, **kw):
            began = time.perf_counter()
            out = original_step(*a, **kw)
            polls["tba"].append(time.perf_counter() - began)
            return out
        coord.step = timed_step
    coord.run(max_time=1200)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    t0 = coord.t0
    dispatched = {(r["task"], r["attempt"]): r["time"] for r in db.query(
        "select json_extract(data, '$.task') as task, json_extract(data, '$.attempt') as attempt, time "
        "from events where run_id = ? and kind = 'DispatchTask'", [coord.run_id])}
    pilots = {r["pilot"]: r for r in db.query("select pilot, started, agent_started from live_pilots where run_id = ?",
                                              [coord.run_id])}
    by_pilot: dict[int, list[tuple[float, float]]] = {}
    latency, first = [], {}
    for r in db.query("select task, attempt, pilot, start, end from attempts where run_id = ? and start is not null "
                      "and end is not null and outcome = 'done'", [coord.run_id]):
        by_pilot.setdefault(r["pilot"], []).append((r["start"], r["end"]))
        first[r["pilot"]] = min(first.get(r["pilot"], r["start"]), r["start"])
        sent = dispatched.get((r["task"], r["attempt"]))
        acquired = pilots.get(r["pilot"], {}).get("started")
        if not handed_ahead and sent is not None and acquired is not None and sent >= acquired:
            latency.append(r["start"] - t0 - sent)
    turnaround = [g for spans in by_pilot.values() for g in pair_turnarounds(spans)]
    first_task = [first[p] - pilots[p]["agent_started"] for p in first
                  if pilots.get(p) and pilots[p]["agent_started"]]
    ttc = run["ttc_wkd"]
    busy = sum(e - s for spans in by_pilot.values() for s, e in spans)
    # from the first agent's start to the last task's end: the queue waits of the pilots (other
    # users' jobs on the shared testbed) left out
    agents = [p["agent_started"] for p in pilots.values() if p["agent_started"]]
    ends = [e for spans in by_pilot.values() for _, e in spans]
    span = max(ends) - min(agents) if agents and ends else float("nan")
    slots = 12
    return {"turnaround": _median(turnaround), "turnaround_p90": _quantile(turnaround, 0.9),
            "first_task": _median(first_task), "latency": _median(latency),
            "poll_tba": site_poll(polls, "tba"), "poll_tbb": site_poll(polls, "tbb"),
            "connections": coord.psites["tbb"].transport.connections_opened, "ttc": ttc, "span": span,
            "idle": slots * span - busy, "done": run["done"]}


FOUR = ("tbb", "tbc", "torque", "pool")


def time_polls(coord, polls: dict[str, list[float]]) -> None:
    """Record the seconds of every successful poll each site's workers report, per site: the
    scheduler's half under the site's name, the pilots' files (a resel with a file worker per
    site) under ``SITE/files``."""
    original = coord.on_report

    def timed(report, t):
        if report.kind in ("poll", "read") and report.error is None:
            key = report.site if report.kind == "poll" else f"{report.site}/files"
            polls.setdefault(key, []).append(report.seconds)
        return original(report, t)
    coord.on_report = timed


def site_poll(polls: dict[str, list[float]], site: str) -> float:
    """One poll of a site: the longer of its two halves, which run at once (medians)."""
    files = polls.get(f"{site}/files")
    return max(_median(polls.get(site, [])), _median(files) if files else 0.0)


def four_sites_run(tb, tasks: int, seconds: float, poll: float, workdir: Path, tag: str) -> dict:
    """One bag over the four backend families (module docstring, ``--four-sites``)."""
    from test_mixed_live import mixed_sites
    sites, _dirs = mixed_sites(tb, tag=tag)
    options: dict = {"strategy": "topk:4", "poll": poll}
    if HAS_PREFETCH:
        options["prefetch"] = 0
    coord = start(workdir, sites, bag_toml(tasks, f"sleep {seconds:g}"), **options)
    polls: dict[str, list[float]] = {s: [] for s in FOUR}
    time_polls(coord, polls)
    try:
        coord.run(max_time=900)
    finally:
        coord.close()
    db, t0 = coord.db, coord.t0
    dispatched = {(r["task"], r["attempt"]): r["time"] for r in db.query(
        "select json_extract(data, '$.task') as task, json_extract(data, '$.attempt') as attempt, time "
        "from events where run_id = ? and kind = 'DispatchTask'", [coord.run_id])}
    acquired = {r["pilot"]: r["started"] for r in db.query(
        "select pilot, started from live_pilots where run_id = ?", [coord.run_id])}
    latency: dict[str, list[float]] = {s: [] for s in FOUR}
    for r in db.query("select task, attempt, pilot, site, start from attempts where run_id = ? and start is not null "
                      "and outcome = 'done'", [coord.run_id]):
        sent, got = dispatched.get((r["task"], r["attempt"])), acquired.get(r["pilot"])
        if sent is not None and got is not None and sent >= got:
            latency[r["site"]].append(r["start"] - t0 - sent)
    out: dict = {"ttc": db["runs"].get(coord.run_id)["ttc_wkd"], "done": db["runs"].get(coord.run_id)["done"]}
    for s in FOUR:
        out[f"latency_{s}"] = _median(latency[s])
        out[f"poll_{s}"] = site_poll(polls, s)
        transport = coord.psites[s].transport
        out[f"connections_{s}"] = getattr(transport, "connections_opened", float("nan"))
    out["cycle"] = max(out[f"poll_{s}"] for s in FOUR)
    return out


FOUR_ROWS = ([(f"latency_{s}", f"dispatch latency, acquired pilot -> task running, {s} (s)", "{:.3f}",
               "<= 2" if s == "pool" else "<= 1") for s in FOUR]
             + [(f"poll_{s}", f"one poll of {s} (s)", "{:.3f}", "") for s in FOUR]
             + [("cycle", "poll cycle over the four sites (slowest site's poll, s)", "{:.3f}", "<= 0.3")]
             + [(f"connections_{s}", f"SSH connections opened per run, {s}", "{:.0f}", "1")
                for s in ("tbb", "tbc", "pool")]
             + [("ttc", "TTC of the bag (s)", "{:.1f}", "")])


def main_four_sites(tb, args) -> None:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            runs.append(four_sites_run(tb, args.tasks, args.seconds, args.poll, Path(tmp) / f"four-{i}",
                                       f"bench{i}-{int(time.time())}"))
            print(f"four sites, run {i + 1}/{args.repeat}: {runs[-1]}", file=sys.stderr)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"\nfour live backends in one bag: {args.tasks} x sleep {args.seconds:g} s, --poll {args.poll:g}, "
          f"--strategy topk:4, hand-ahead off, {args.repeat} run(s) (medians)\n")
    print("| measure | median | goal |\n|---|---|---|")
    for key, label, fmt, goal in FOUR_ROWS:
        print(f"| {label} | {fmt.format(med[key])} | {goal} |")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))] if values else float("nan")


ROWS = [("turnaround", "slot turnaround, task ends -> next starts in that slot (s)", "{:.3f}", "<= 0.1"),
        ("turnaround_p90", "slot turnaround P90 (s)", "{:.3f}", ""),
        ("first_task", "pilot's agent started -> its first task started (s)", "{:.3f}", ""),
        ("latency", "dispatch latency, acquired pilot -> task running, hand-ahead off (s)", "{:.3f}", "<= 1"),
        ("poll_tba", "one poll of tba, local (s)", "{:.3f}", "<= 0.3"),
        ("poll_tbb", "one poll of tbb, over SSH (s)", "{:.3f}", "<= 0.3"),
        ("connections", "SSH connections opened per run (tbb)", "{:.0f}", "1"),
        ("ttc", "TTC of the bag (s)", "{:.1f}", ""),
        ("span", "first agent started -> last task ended (s)", "{:.1f}", ""),
        ("idle", "slot-seconds idle in that span (12 slots)", "{:.0f}", "")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0, help="each task sleeps this long")
    ap.add_argument("--poll", type=float, default=2.0, help="the coordinator's poll period (the CLI's default)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--prefetch", type=int, default=None, help="tasks handed ahead per slot (default: resel's)")
    ap.add_argument("--compare", action="store_true", help="run with hand-ahead off, then on")
    ap.add_argument("--strategy", default="topk:2+reselect",
                    help="how the bag is spread (default: in halves, a free site takes the other's waiting tasks)")
    ap.add_argument("--four-sites", action="store_true",
                    help="Slurm 22.05 (SSH), Slurm 24.11 (REST), Torque and the HTCondor pool in one bag: "
                         "dispatch latency per backend, SSH connections per site, the poll cycle")
    ap.add_argument("--polls", action="store_true",
                    help="measure only the scheduler half of a poll on every live site, asking every user's jobs "
                         "(before) and only ours (after), side by side (benchmarks/poll_cycle.py)")
    ap.add_argument("--json", action="store_true", help="with --polls: the medians as JSON")
    args = ap.parse_args()
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    if args.four_sites:
        if not tb.has_trixie:
            sys.exit("--four-sites needs the testbed's Debian 13 part (Slurm 24.11, HTCondor): scripts/testbed.sh up")
        main_four_sites(tb, args)
        return
    if args.polls:
        from poll_cycle import run as run_polls
        run_polls(tb, args.repeat, args.json)
        return
    if args.compare and not HAS_PREFETCH:
        sys.exit("this resel has no hand-ahead (LiveOptions.prefetch): run without --compare")
    settings = [0, 1] if args.compare else [args.prefetch]
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for prefetch in settings:
            runs = []
            for i in range(args.repeat):
                runs.append(one_run(tb, args.tasks, args.seconds, args.poll, prefetch,
                                    Path(tmp) / f"p{prefetch}-run{i}", args.strategy))
                print(f"prefetch {prefetch}, run {i + 1}/{args.repeat}: {runs[-1]}", file=sys.stderr)
            results[prefetch] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    heads = [("hand-ahead off" if p == 0 else "hand-ahead on" if p else "median") for p in settings]
    print(f"\nlive coordinator on the testbed: {args.tasks} x sleep {args.seconds:g} s, --poll {args.poll:g}, "
          f"--strategy {args.strategy}, {args.repeat} run(s) each (medians)\n")
    print("| measure | " + " | ".join(heads) + " | goal |")
    print("|---|" + "---|" * len(heads) + "---|")
    for key, label, fmt, goal in ROWS:
        print(f"| {label} | " + " | ".join(fmt.format(results[p][key]) for p in settings) + f" | {goal} |")


if __name__ == "__main__":
    main()
