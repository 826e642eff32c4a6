"""A black-hole site on the live testbed (issue 18 item 1): tbb runs the bag's command like tba,
but the command fails there — it exits 1 where the agent says the site is tbb (``RESEL_SITE``,
which the coordinator sets for every attempt). The engine quarantines tbb after five failures,
its tasks move to tba, and the whole bag completes; ``resel status`` (another process, from
the store) shows the quarantine with its counts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from live_helpers import REPO, bag_toml, cancel_leftovers, sites_toml, start

COMMAND = 'test "$RESEL_SITE" != tbb && echo "$RESEL_TASK"'


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(request, tmp_path):
    yield
    if "testbed" in request.fixturenames:
        cancel_leftovers(request.getfixturevalue("testbed"), tmp_path)


def test_a_site_failing_every_task_is_quarantined_and_the_bag_completes(tmp_path, testbed):
    """topk:2 spreads 12 tasks over tba (8 cores) and tbb (4): every attempt on tbb exits 1.
    After 5 failures of 5 (nothing failed on tba: rate 1.0 ≥ 0.5 and ≥ 2 × 0) tbb is quarantined
    for 1800 s; every task ends done on tba, none failed, none done on tbb."""
    coord = start(tmp_path, sites_toml(testbed, clock_b=2.0), bag_toml(12, COMMAND), strategy="topk:2")
    coord.run(max_time=240)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 12 and run["failed"] == 0, run
    done = {r["task"]: (r["site"], r["n"]) for r in db.query(
        "select task, site, count(*) as n from attempts where run_id = ? and outcome = 'done' group by task",
        [coord.run_id])}
    assert done == {t: ("tba", 1) for t in range(12)}
    failed = list(db.query("select task, site, reason from attempts where run_id = ? and outcome = 'failed'",
                           [coord.run_id]))
    assert len(failed) >= 5 and {r["site"] for r in failed} == {"tbb"}
    assert all(r["reason"] == "exit code 1" for r in failed), failed
    q = [(r["time"], json.loads(r["data"])) for r in db.query(
        "select time, data from events where run_id = ? and kind = 'SiteQuarantined'", [coord.run_id])]
    assert len(q) == 1 and q[0][1]["site"] == "tbb"
    assert q[0][1]["until"] == pytest.approx(q[0][0] + 1800.0)
    assert q[0][1]["reason"].startswith("5 of 5 attempts/pilots failed")
    # resel status, another process reading the store: tbb noted as quarantined (the run ended
    # inside its back-off)
    out = subprocess.run([sys.executable, "-m", "resel.cli", "status", str(coord.run_id), "--db",
                          str(tmp_path / "resel.db"), "--json"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {r["site"]: r for r in json.loads(out.stdout)["sites"]}
    assert rows["tbb"]["quarantined"].startswith("5 of 5") and rows["tba"]["quarantined"] is None
    assert rows["tbb"]["quarantined_until"] == pytest.approx(q[0][1]["until"])


def test_packed_pilot_walltime_reaches_slurm_and_the_bag_completes(tmp_path, testbed):
    """--walltime pack on the testbed: 12 tasks of T̂x = 4e9 / 2 GHz = 2 s on tba (8 cores,
    `model`): one pilot of 8 slots for ⌈12/8⌉ = 2 waves asks for 2 · 2 · 1.1 + 120 = 124.4 s, which
    Slurm gets as --time=3 (minutes, rounded up); the bag completes, nothing lost."""
    from live_helpers import slurm
    coord = start(tmp_path, sites_toml(testbed), bag_toml(12, 'sleep 1; echo "$RESEL_TASK"'), strategy="model",
                  walltime="pack")
    coord.run(max_time=240)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 12 and run["failed"] == 0, run
    asked = [json.loads(r["data"]) for r in db.query(
        "select data from events where run_id = ? and kind = 'SubmitPilot'", [coord.run_id])]
    assert [(a["site"], a["cores"], a["walltime"]) for a in asked][:1] == [("tba", 8, pytest.approx(124.4))]
    lost = list(db.query("select 1 from attempts where run_id = ? and outcome = 'lost'", [coord.run_id]))
    assert lost == []
    job = list(db.query("select job_id from live_pilots where run_id = ? and pilot = 0", [coord.run_id]))[0]["job_id"]
    # slurmctld keeps a finished job for MinJobAge (300 s by default): its limit as Slurm got it
    shown = slurm(testbed, "a", "scontrol", "show", "job", str(job), check=False).stdout
    assert "TimeLimit=00:03:00" in shown, shown


def test_a_quarantine_survives_a_coordinator_killed_and_resumed(tmp_path, testbed):
    """`resel run` is killed (SIGKILL) right after it quarantined tbb; the resumed coordinator
    rebuilds the engine from the journal — tbb still quarantined, its release timer back in the
    timer queue at the recorded time — and finishes the bag on tba without a second quarantine."""
    import os
    import signal

    from live_helpers import write_inputs
    from resel.backends.connect import open_site
    from resel.live.coordinator import Coordinator
    from resel.store import open_store
    from waiting import wait_until

    sites, bag = write_inputs(tmp_path, sites_toml(testbed, clock_b=2.0), bag_toml(16, "sleep 1; " + COMMAND))
    db_path = tmp_path / "resel.db"
    proc = subprocess.Popen([sys.executable, "-m", "resel.cli", "run", str(bag), "--sites", str(sites), "--db",
                             str(db_path), "--poll", "0.3", "--strategy", "topk:2", "--no-progress"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = open_store(db_path)
    wait_until(lambda: db["events"].exists() and list(db.query("select 1 from events where kind = 'SiteQuarantined'")),
               120, "a SiteQuarantined event")
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run_id = list(db.query("select id from runs order by id desc limit 1"))[0]["id"]
    until = json.loads(list(db.query("select data from events where run_id = ? and kind = 'SiteQuarantined'",
                                     [run_id]))[0]["data"])["until"]
    coord = Coordinator.resume(db, run_id, open_site)
    assert set(coord.engine.quarantined) == {"tbb"}
    assert [(t[1], t[2], t[3]) for t in coord.timers if t[3]] == [(-1, 1, "tbb")]
    assert [t[0] for t in coord.timers if t[3]] == [pytest.approx(until)]
    coord.run(max_time=240)
    coord.close()
    run = db["runs"].get(run_id)
    assert run["status"] == "done" and run["done"] == 16 and run["failed"] == 0, run
    assert len(list(db.query("select 1 from events where run_id = ? and kind = 'SiteQuarantined'", [run_id]))) == 1
    done = {r["task"]: r["n"] for r in db.query(
        "select task, count(*) as n from attempts where run_id = ? and outcome = 'done' group by task", [run_id])}
    assert done == {t: 1 for t in range(16)}


def test_a_site_whose_pilots_die_at_start_is_quarantined(tmp_path, testbed):
    """tbb's pilots cannot start their agent (its `python` does not exist there): each Slurm job
    ends at once having done nothing — a pilot dying at start. After five of them (five bad
    outcomes of five) tbb is quarantined, no sixth pilot is asked for, and the bag completes on
    tba, each task once."""
    coord = start(tmp_path, sites_toml(testbed, clock_b=2.0, b={"python": "/nonexistent/python3"}),
                  bag_toml(8, 'echo "$RESEL_TASK"'), strategy="topk:2")
    coord.run(max_time=240)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 8 and run["failed"] == 0, run
    done = {r["task"]: (r["site"], r["n"]) for r in db.query(
        "select task, site, count(*) as n from attempts where run_id = ? and outcome = 'done' group by task",
        [coord.run_id])}
    assert done == {t: ("tba", 1) for t in range(8)}
    q = [json.loads(r["data"]) for r in db.query(
        "select data from events where run_id = ? and kind = 'SiteQuarantined'", [coord.run_id])]
    assert [x["site"] for x in q] == ["tbb"] and q[0]["reason"].startswith("5 of 5")
    tbb_pilots = [json.loads(r["data"]) for r in db.query(
        "select data from events where run_id = ? and kind = 'SubmitPilot'", [coord.run_id])]
    assert sum(1 for p in tbb_pilots if p["site"] == "tbb") == 5


def test_a_broken_task_is_given_up_without_condemning_the_site_that_ran_it(tmp_path, testbed):
    """One task of four has a bad input: it fails wherever it runs. tba (faster) takes the bag;
    tbb's pilot waits behind another user's job. The broken task fails three times on tba, goes
    to tbb for one more try and stays there — a free tba slot no longer takes it back — fails
    once on tbb and is given up; tba, which ran every other task, is not quarantined (before:
    five failures on tba, tba quarantined for 30 minutes). `resel report` says why the task
    failed: its attempts and the last line it wrote on stderr, shown literally (an escape
    sequence and rich markup in it are not obeyed)."""
    from click.testing import CliRunner

    from live_helpers import fill, slurm
    from resel.cli import cli
    command = ('if [ "$RESEL_TASK" = 1 ]; then printf "\\033[2J[bold]Fatal error: atom 42 has no mass\\n" >&2; '
               'exit 3; fi; sleep 1')
    filler = fill(testbed, "b", 4, 25)
    try:
        coord = start(tmp_path, sites_toml(testbed), bag_toml(4, command), strategy="auto")
        coord.run(max_time=240)
        coord.close()
    finally:
        slurm(testbed, "b", "scancel", filler, check=False)
    run = coord.db["runs"].get(coord.run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", 3, 1)
    tried = [(r["site"], r["outcome"]) for r in coord.db.query(
        "select site, outcome from attempts where run_id = ? and task = 1 order by attempt", [coord.run_id])]
    assert tried == [("tba", "failed")] * 3 + [("tbb", "failed")]
    assert not coord.engine.quarantined
    report = CliRunner().invoke(cli, ["report", str(coord.run_id), "--db", str(tmp_path / "resel.db")])
    assert report.exit_code == 0, report.output
    assert "task 1: tba exit code 3 ×3, tbb exit code 3; stderr: \\x1b[2J[bold]Fatal error: atom 42 has no mass" \
        in " ".join(report.output.split()), report.output
    doc = json.loads(CliRunner().invoke(cli, ["report", str(coord.run_id), "--db", str(tmp_path / "resel.db"),
                                              "--json"]).output)
    assert [(f["task"], len(f["attempts"])) for f in doc["failed"]] == [(1, 4)]
