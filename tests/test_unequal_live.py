"""A bag of unequal tasks (a task table, docs/configuration.md "Bags of unequal tasks") run by
``resel run`` on the real testbed: tba (local Slurm, 8 CPUs) and tbb (Slurm over the testbed's
sshd, 4 CPUs).

The table: 12 tasks of two classes — ``fine`` (the bag's profile, 1 core) and ``wide`` (a class
of its own, 2 cores) — of different sizes, each with its own arguments and its own input file.
Every task writes what it received (its name, size and arguments as the command filled them in,
the sha256 of the input it found, the CPUs it may use) into an output that comes home. Every
expected value is computed here from the table the test wrote; what happened is read from the
agents' own files on the sites, the store and the results folder:

- every task ran exactly once, with its own name, size, arguments and input;
- tasks of 1 and 2 cores are packed into a pilot's cores (docs/configuration.md): each agent
  was told one slot per core (agent.json), and the cores its attempts held at once, by the
  agents' own start and end stamps, never exceeded the pilot's (the most tasks at once per
  pilot is printed: docs/benchmarks.md, "Issue 26 item 3");
- each task's T̂x in its assignment decision is its site's rate times the task's own
  instructions, I = instructions + per_size · size of its class (the ratios the table says);
- ``order = "auto"`` (no per-task pool here): each site's agent started the tasks assigned
  there largest first, but for packing's backfill (a task started before a larger one is
  narrower than it: the larger one's cores were not free).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_files import records
from live_helpers import REPO, cancel_leftovers, done_results, our_jobs, sites_toml
from resel import task_data
from resel.store import open_store

RESEL = [sys.executable, "-m", "resel.cli"]


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


#: the classes' laws: instructions at size 0, and per unit of size
CLASSES = {"fine": (1e9, 5e8), "wide": (2e9, 1e9)}
#: (name, size, cores, args, class): sizes all different, so the largest-first order is one order
TABLE = [
    ("f-a", 1, 1, "--mode=a", "fine"), ("f-b", 5, 1, "--mode=b -v", "fine"), ("f-c", 3, 1, "", "fine"),
    ("f-d", 7, 1, "--mode=d", "fine"), ("f-e", 2, 1, "-x 1", "fine"), ("f-f", 6, 1, "--mode=f", "fine"),
    ("f-g", 4, 1, "--mode=g", "fine"),
    ("w-a", 1.5, 2, "--threads=2", "wide"), ("w-b", 3.5, 2, "--threads=2 -v", "wide"),
    ("w-c", 2.5, 2, "", "wide"), ("w-d", 0.5, 2, "--threads=2 -q", "wide"), ("w-e", 4.5, 2, "--threads=2", "wide"),
]
#: seconds a task runs per instruction: its own input's first line says how long it sleeps, I / 2e9 —
#: what LIM predicts on tba (clock 2.0) — so run times follow the table, as the rates learned say
SECONDS_PER_INSTRUCTION = 1 / 2e9
#: what each task writes: its fields as the command received them, its input's sha256, the CPUs
#: it may use; then it runs (sleeps) as long as its input says
COMMAND = ("printf 'task=%s\\nsize=%s\\nargs=%s\\n' {task} {size} '{args}' > got.txt; "
           "echo \"input=$(sha256sum in.dat | cut -c1-64)\" >> got.txt; "
           "echo \"cpus=$(nproc)\" >> got.txt; sleep \"$(head -n 1 in.dat)\"")


def instructions(row: tuple) -> float:
    base, per_size = CLASSES[row[4]]
    return base + per_size * row[1]


def write_bag(root: Path) -> tuple[Path, dict[str, bytes]]:
    """The bag file, its tasks.csv and one input file per task (its run time on the first line,
    then random bytes: each its own)."""
    (root / "in").mkdir(parents=True, exist_ok=True)
    own = {row[0]: f"{instructions(row) * SECONDS_PER_INSTRUCTION:.3f}\n".encode() + os.urandom(1000 + i)
           for i, row in enumerate(TABLE)}
    for name, data in own.items():
        (root / "in" / f"{name}.dat").write_bytes(data)
    lines = ["name,size,cores,args,class"]
    for name, size, cores, args, cls in TABLE:
        lines.append(f"{name},{size:g},{cores},{args},{'' if cls == 'fine' else cls}")
    (root / "tasks.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    fine, wide = CLASSES["fine"], CLASSES["wide"]
    bag = root / "bag.toml"
    bag.write_text(f'[bag]\nname = "unequal"\ncommand = {json.dumps(COMMAND)}\ntasks = "tasks.csv"\n'
                   'order = "auto"\ninputs = [{ path = "in/{task}.dat", as = "in.dat" }]\noutputs = ["got.txt"]\n\n'
                   f'[bag.profile]\ninstructions = {fine[0]:g}\nper_size = {fine[1]:g}\n\n'
                   f'[bag.classes.wide]\ninstructions = {wide[0]:g}\nper_size = {wide[1]:g}\n', encoding="utf-8")
    return bag, own


def pilot_dirs(tb, run_key: str) -> list[tuple[str, Path]]:
    return [(site, p) for site, root in (("tba", tb.work_a), ("tbb", tb.work_b))
            for p in sorted(Path(root, run_key).glob("p*")) if p.is_dir()]


def test_a_table_bag_runs_each_task_once_with_its_own_arguments_cores_and_size(tmp_path, testbed):
    bag, own = write_bag(tmp_path)
    count = len(TABLE)
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    db_path = tmp_path / "resel.db"
    res = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites_path), "--db", str(db_path), "--poll", "0.3",
                                  "--results", str(tmp_path / "results"), "--json", "--no-progress"],
                         cwd=REPO, capture_output=True, text=True, timeout=420)   # behind other sessions' pilots
    assert res.returncode == 0, res.stderr
    db = open_store(db_path)
    run = list(db.query("select * from runs order by id desc limit 1"))[0]
    run_id, run_key = run["id"], run["run_key"]
    assert (run["status"], run["done"], run["failed"]) == ("done", count, 0)

    # exactly once, by the agents' own files and by the store
    assert done_results(testbed, run_key) == {i: 1 for i in range(count)}
    attempts = list(db.query("select task, site, pilot, start, end, outcome from attempts where run_id = ?", [run_id]))
    done = [a for a in attempts if a["outcome"] == "done"]
    assert sorted(a["task"] for a in done) == list(range(count))

    # each task's own name, size, arguments and input, as it wrote them (its output came home)
    for i, (name, size, _cores, args, _cls) in enumerate(TABLE):
        got = dict(line.split("=", 1) for line in
                   (Path(run["results"]) / task_data.task_folder(i, count) / "got.txt").read_text().splitlines())
        assert got["task"] == name and float(got["size"]) == size and got["args"] == args, (i, got)
        assert got["input"] == hashlib.sha256(own[name]).hexdigest(), (i, got)
        assert int(got["cpus"]) >= 1

    # packing: a pilot is a pool of cores. Widths 1 and 2 have gcd 1, so each agent was told one
    # slot per core (agent.json's slots == the pilot's cores) and a task takes its own cores.
    # From the agents' own result stamps: the cores its attempts held at once never exceed the
    # pilot's, and the most tasks that ran at once on each pilot (printed: docs/benchmarks.md)
    widths = {i: row[2] for i, row in enumerate(TABLE)}
    dirs = {(site, pdir.name): pdir for site, pdir in pilot_dirs(testbed, run_key)}
    peaks = {}
    for site, pilot in {(a["site"], a["pilot"]) for a in done}:   # every pilot that ran a task
        pdir = dirs[(site, f"p{pilot}")]
        agent = json.loads((pdir / "agent.json").read_text())
        cores = list(db.query("select cores from live_pilots where run_id = ? and site = ? and pilot = ?",
                              [run_id, site, pilot]))[0]["cores"]
        assert str(agent["pilot"]) == str(pilot) and agent["slots"] == cores, (site, cores, agent)
        stamps = records(pdir / "results")
        spans = [(r["start"], r["end"], widths[r["task"]]) for r in stamps if r["outcome"] == "done"]
        events = sorted([(e, 0, -w, -1) for _, e, w in spans] + [(s, 1, w, 1) for s, _, w in spans])
        held = most_cores = running = most_tasks = 0
        for _t, _kind, w, n in events:   # (ends before starts at one instant)
            held, running = held + w, running + n
            most_cores, most_tasks = max(most_cores, held), max(most_tasks, running)
        assert most_cores <= cores, (site, pilot, most_cores, cores)
        peaks[(site, pilot)] = (cores, most_tasks, most_cores, len(spans))
    print("packing (site, pilot): (cores, most tasks at once, most cores at once, tasks run):", peaks,
          "first start to last end (s):", round(max(a["end"] for a in done) - min(a["start"] for a in done), 1),
          "TTC_wkd (s):", dict(run).get("ttc_wkd"))

    # per-task T̂x: each assignment's T̂x'(x) is its site's rate times the task's own instructions,
    # plus the site's data time D(x), the same for every task there (docs/data.md): on a line
    # over I. Drawn through the site's smallest and largest task, every other lies on it.
    assigned = list(db.query("select task, origin, tx_r from decisions where run_id = ? and kind = 'assign'", [run_id]))
    assert sorted(d["task"] for d in assigned) == list(range(count))
    one = {d["task"]: d for d in assigned}
    fitted = 0
    for origin in {d["origin"] for d in assigned}:
        there = sorted((instructions(TABLE[d["task"]]), d["tx_r"]) for d in assigned if d["origin"] == origin)
        if there[0][0] == there[-1][0]:
            continue   # one size there: no line to draw
        fitted += len(there)
        (i0, t0), (i1, t1) = there[0], there[-1]
        rate = (t1 - t0) / (i1 - i0)
        data = t0 - rate * i0
        assert rate > 0 and data >= -1e-9 * t1, (origin, rate, data)
        for i, t in there:
            assert t == pytest.approx(rate * i + data, rel=1e-9, abs=0), (origin, i, t, rate, data)
        if origin == one[3]["origin"] == one[0]["origin"]:   # f-d (size 7) against f-a (size 1), by the table:
            ratio = (one[3]["tx_r"] - data) / (one[0]["tx_r"] - data)   # (1e9 + 7 · 5e8) / (1e9 + 1 · 5e8) = 3
            assert ratio == pytest.approx(3.0, rel=1e-9, abs=0)
    assert fitted >= count - 1 and TABLE[3][0] == "f-d" and TABLE[0][0] == "f-a"

    # the order the coordinator handed the attempts out in is in each inbox file (agent protocol
    # 7): its DispatchTask's journal seq — mtimes cannot say it (a turn's files are written
    # together: equal to the clock tick, then ordered by name)
    dispatched = {(d["task"], d["attempt"], d["pilot"]): row["seq"] for row in db.query(
        "select seq, data from events where run_id = ? and kind = 'DispatchTask'", [run_id])
        for d in [json.loads(row["data"])]}
    claimed = 0
    for site, pdir in pilot_dirs(testbed, run_key):
        for path in (pdir / "claimed").glob("t*-a*.json"):
            doc = json.loads(path.read_text())
            pilot = int(pdir.name[1:])
            assert doc["order"] == dispatched[(doc["task"], doc["attempt"], pilot)], (site, path.name, doc)
            claimed += 1
    assert claimed >= count, claimed

    # largest first: each site's agents started the tasks assigned there in falling instructions —
    # but for packing's backfill: a task whose cores were not free lets a narrower one behind it
    # start, so a smaller task may start before a larger one only if it is narrower
    handed: dict[str, list[tuple[float, int]]] = {}
    for site, pdir in pilot_dirs(testbed, run_key):
        for rec in records(pdir / "started"):
            handed.setdefault(site, []).append((rec["time"], rec["task"]))
    checked = 0
    for site, got in handed.items():
        own_tasks = [t for _, t in sorted(got) if one[t]["origin"] == site]
        for i, early in enumerate(own_tasks):
            for late in own_tasks[i + 1:]:
                if instructions(TABLE[early]) < instructions(TABLE[late]):   # out of order: backfill
                    assert TABLE[early][2] < TABLE[late][2], (site, own_tasks, early, late)
        for width in {TABLE[t][2] for t in own_tasks}:   # one width: strictly largest first
            weights = [instructions(TABLE[t]) for t in own_tasks if TABLE[t][2] == width]
            assert weights == sorted(weights, reverse=True), (site, own_tasks, width)
        checked += len(own_tasks)
    assert checked >= count // 2, handed   # most tasks ran where they were assigned
    assert our_jobs(testbed, run_key) == []
