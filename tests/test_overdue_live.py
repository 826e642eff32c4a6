"""Overdue attempts on the live testbed (resel/engine_overdue.py): a task that hangs on real
Slurm is cancelled by its agent once its site has a limit, and rerun; one that hangs every
time is given up as hung when its rerun runs into the pilot's walltime — the bag ends instead
of waiting out ``max_losses`` walltimes. The rule's floor is lowered to 20 s (``overdue_floor``;
600 s by default) so that a run takes a minute, not an hour."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from live_helpers import REPO, bag_toml, cancel_leftovers, sites_toml, start


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(request, tmp_path):
    yield
    if "testbed" in request.fixturenames:
        cancel_leftovers(request.getfixturevalue("testbed"), tmp_path)


def _overdue(db, run_id: int) -> list[dict]:
    return [json.loads(r["data"]) for r in db.query(
        "select data from events where run_id = ? and kind = 'TaskOverdue' order by seq", [run_id])]


def test_a_task_hanging_once_is_cancelled_and_rerun_to_its_end(tmp_path, testbed):
    """8 tasks of 1 s on tba (tbb's clock makes it 4× slower: `model` uses tba alone); task 5's
    first attempt hangs (sleep 300). After 3 tasks ended well tba's limit is max(20, 10 × ~1 s)
    = 20 s: the first sweep past it cancels attempt 1 (the agent kills its process group), and
    attempt 2 ends well. Every task done, in well under the 300 s the hang would have taken."""
    command = 'sleep 1; if [ "$RESEL_TASK" = 5 ] && [ "$RESEL_ATTEMPT" = 1 ]; then sleep 300; fi; echo "$RESEL_TASK"'
    coord = start(tmp_path, sites_toml(testbed), bag_toml(8, command), strategy="model", overdue_floor=20.0)
    coord.run(max_time=200)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 8 and run["failed"] == 0, run
    (od,) = _overdue(db, coord.run_id)
    assert (od["task"], od["attempt"], od["site"], od["limit"], od["gave_up"]) == (5, 1, "tba", 20.0, False)
    assert 20.0 <= od["ran"] <= 35.0          # found by the first sweep past the limit (every 10 s)
    rows = [(r["attempt"], r["outcome"]) for r in db.query(
        "select attempt, outcome from attempts where run_id = ? and task = 5 order by attempt", [coord.run_id])]
    assert rows == [(1, "cancelled"), (2, "done")]
    # the bag ends well under a minute after its pilot started (its queue wait depends on who
    # else uses the testbed), where the hang alone would have taken 300 s
    started = db.execute("select min(time) from events where run_id = ? and kind = 'PilotStarted'",
                         [coord.run_id]).fetchone()[0]
    assert run["ttc_wkd"] - started < 60, (started, run["ttc_wkd"])
    assert run["wasted_core_s"] >= 20.0, run      # the cancelled attempt's time is waste


def test_a_task_hanging_every_time_is_given_up_when_its_rerun_meets_the_walltime(tmp_path, testbed):
    """The same, but task 5 hangs on every attempt and tba's pilot asks for 60 s (Slurm: one
    minute): attempt 1 is cancelled at the first sweep past 20 s; attempt 2 runs until Slurm
    ends the pilot at its time limit, past the limit again — task 5 is given up as hung, the
    bag ends with 7 done and 1 failed, not after 5 more walltimes."""
    command = 'sleep 1; if [ "$RESEL_TASK" = 5 ]; then sleep 300; fi; echo "$RESEL_TASK"'
    coord = start(tmp_path, sites_toml(testbed, walltime_a=60), bag_toml(8, command), strategy="model",
                  overdue_floor=20.0)
    coord.run(max_time=300)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 7 and run["failed"] == 1, run
    first, hung = _overdue(db, coord.run_id)
    assert (first["task"], first["attempt"], first["gave_up"]) == (5, 1, False)
    assert (hung["task"], hung["attempt"], hung["gave_up"]) == (5, 2, True) and hung["ran"] >= 20.0
    outcomes = [r["outcome"] for r in db.query(
        "select outcome from attempts where run_id = ? and task = 5 order by attempt", [coord.run_id])]
    assert outcomes == ["cancelled", "lost"]
    # resel report says so, in its text and its --json
    report = [sys.executable, "-m", "resel.cli", "report", str(coord.run_id), "--db", str(tmp_path / "resel.db")]
    text = subprocess.run(report, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "overdue: task 5 attempt 1 on tba cancelled after" in text.stdout
    assert "task 5 given up as hung: its attempt 2 on tba ran" in text.stdout
    doc = json.loads(subprocess.run(report + ["--json"], cwd=REPO, capture_output=True, text=True,
                                    timeout=120).stdout)
    assert [(o["task"], o["attempt"], o["gave_up"]) for o in doc["overdue"]] == [(5, 1, False), (5, 2, True)]
    assert [f["task"] for f in doc["failed"]] == [5]


def test_a_coordinator_killed_with_a_sweep_pending_resumes_the_sweep(tmp_path, testbed):
    """The coordinator is killed (its threads stopped, nothing more written) once tba has a
    limit and the first sweep is pending; the resumed coordinator rebuilds the engine from the
    journal with the same sweep pending (the same time and number, task -1), and that sweep
    cancels task 5's hung attempt as the first coordinator's would have: every task done, one
    overdue cancel."""
    import time

    from resel.backends.connect import open_site
    from resel.live.coordinator import Coordinator
    from resel.store import open_store
    command = 'sleep 1; if [ "$RESEL_TASK" = 5 ] && [ "$RESEL_ATTEMPT" = 1 ]; then sleep 300; fi; echo "$RESEL_TASK"'
    coord = start(tmp_path, sites_toml(testbed), bag_toml(8, command), strategy="model", overdue_floor=20.0)

    def sweeps(c) -> list[tuple]:
        return sorted(t for t in c.timers if t[1] == -1 and t[2] < 0)
    try:
        deadline = time.monotonic() + 200
        while not sweeps(coord) and time.monotonic() < deadline:
            coord.step(wait=True)
        pending = sweeps(coord)
        assert pending, "no sweep was armed"
    finally:
        coord._stop_workers()               # killed: no clean-up, nothing more written
    assert not _overdue(coord.db, coord.run_id)
    again = Coordinator.resume(open_store(tmp_path / "resel.db"), coord.run_id, open_site)
    try:
        assert sweeps(again) == pending
        again.run(max_time=300)
    finally:
        again.close()
    db = again.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 8 and run["failed"] == 0, run
    assert [(o["task"], o["attempt"], o["gave_up"]) for o in _overdue(db, coord.run_id)] == [(5, 1, False)]
    rows = [(r["attempt"], r["outcome"]) for r in db.query(
        "select attempt, outcome from attempts where run_id = ? and task = 5 order by attempt", [coord.run_id])]
    assert rows == [(1, "cancelled"), (2, "done")]
