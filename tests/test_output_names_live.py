"""Outputs whose names are legal but unusual come home from both clusters (docs/data.md):
glob characters in a file's name (``run[0].dat``, matched by ``*.dat``) and names near the
file system's limit of 255 bytes, in ASCII and in UTF-8. Before, on a site with a shared
filesystem the first was refused as "glob characters in a name" and the second failed to
make its temporary file at home (``.NAME.part-XXXXXXXX`` is 15 bytes longer than NAME:
ENAMETOOLONG): either way the task ran three times and failed, its outputs never home.

Expected bytes are computed here; what happened is read from the store and the results folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from live_helpers import cancel_leftovers, run_with_data, sites_toml
from resel import task_data


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


LONG_ASCII = "L" * 246 + ".dat"            # 250 bytes
LONG_UTF8 = "\u00e9" * 125 + ".dat"        # 254 bytes
NAMES = {0: "run[0].dat", 1: "a*b?.dat", 2: LONG_ASCII, 3: LONG_UTF8}


def test_outputs_with_glob_characters_or_long_names_come_home_from_both_clusters(tmp_path, testbed):
    count = len(NAMES)
    lines = "\n".join(f"{i}) printf 'task {i}' > {json.dumps(n, ensure_ascii=False)};;" for i, n in NAMES.items())
    command = f"echo ok > md.log; case $RESEL_TASK in\n{lines}\nesac; sleep 1"
    (tmp_path / "in.txt").write_text("in")
    coord, run = run_with_data(tmp_path, f'[bag]\nname = "names"\ncommand = {json.dumps(command)}\n'
                                         f'count = {count}\ninputs = ["in.txt"]\noutputs = ["md.log", "*.dat"]\n'
                                         '[bag.profile]\ninstructions = 4e9\n', sites_toml(testbed), 240)
    db = coord.db
    why = [dict(r) for r in db.query("select task, attempt, site, outcome, reason from attempts where run_id = ?",
                                     [coord.run_id])]
    assert (run["status"], run["done"], run["failed"]) == ("done", count, 0), [w["reason"] for w in why]
    for i, name in NAMES.items():
        home = Path(run["results"]) / task_data.task_folder(i, count)
        assert (home / name).read_bytes() == f"task {i}".encode()
        assert (home / "md.log").read_text() == "ok\n"
    rows = list(db.query("select task, name, sha256 from task_outputs where run_id = ? and name != 'md.log'",
                         [coord.run_id]))
    assert {r["task"]: r["name"] for r in rows} == NAMES
    assert all(r["sha256"] == hashlib.sha256(f"task {r['task']}".encode()).hexdigest() for r in rows)
    attempts = list(db.query("select task, count(*) as n from attempts where run_id = ? group by task", [coord.run_id]))
    assert {a["task"]: a["n"] for a in attempts} == {i: 1 for i in range(count)}
    assert {r["site"] for r in db.query("select distinct site from task_outputs where run_id = ?", [coord.run_id])} \
        == {"tba", "tbb"}
    assert [p for p in Path(run["results"]).rglob("*") if ".part-" in p.name] == []


def test_names_that_cannot_go_home_are_refused_and_the_run_goes_on(tmp_path, testbed):
    """A task's files named with a byte that is not UTF-8, a newline, a C1 character or a
    backslash, matched by an optional output glob: before, the non-UTF-8 name stopped the
    coordinator (SQLite refused it; again at every --resume) and the others had the whole
    result skipped (the task stayed running until its pilot ended). Now each such file is
    refused by the agent, and the task's other outputs come home."""
    bad = ["'bad\\377.dat'", "'nl\\nx.dat'", "'nel\\302\\205.dat'", "'back\\\\slash.dat'"]
    command = "echo ok > md.log; echo fine > fine.dat; " + "; ".join(f'echo 1 > "$(printf {b})"' for b in bad)
    (tmp_path / "in.txt").write_text("in")
    _coord, run = run_with_data(tmp_path, f'[bag]\nname = "bad-names"\ncommand = {json.dumps(command)}\ncount = 2\n'
                                          'inputs = ["in.txt"]\noutputs = ["md.log", { glob = "*.dat", optional = true }]\n'
                                          '[bag.profile]\ninstructions = 4e9\n', sites_toml(testbed), 120)
    assert (run["status"], run["done"], run["failed"]) == ("done", 2, 0)
    for i in range(2):
        home = Path(run["results"]) / task_data.task_folder(i, 2)
        assert sorted(p.name for p in home.iterdir()) == ["fine.dat", "md.log"]
