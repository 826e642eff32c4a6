"""``resel plan`` against the real testbed queues (issue 8): three start estimates per site,
the engine's plan, nothing submitted; an unreadable or unreachable site is said to be so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from live_helpers import REPO, bag_toml, cancel_leftovers, fill, sites_toml, slurm, write_inputs

RESEL = [sys.executable, "-m", "resel.cli"]


@pytest.fixture(autouse=True)
def _clean(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)
    slurm(testbed, "a", "scancel", "-n", "filler", check=False)


def resel(*args, timeout=120):
    return subprocess.run(RESEL + [str(a) for a in args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _jobs(tb) -> set[str]:
    return {ln.strip() for c in ("a", "b") for ln in slurm(tb, c, "squeue", "-h", "-o", "%i").stdout.split("\n")
            if ln.strip()}


def test_plan_shows_three_estimates_and_submits_nothing(tmp_path, testbed):
    """tba is full for 5 minutes (another user's job): its twin and scheduler both say the
    pilot waits; tbb is idle, so the queue-aware plan sends the bag there and holds an extra
    pilot on tba."""
    fill(testbed, "a", 8, 300)
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(4, "echo hi"))
    before = _jobs(testbed)
    res = resel("plan", bag, "--sites", sites, "--json", "--db", tmp_path / "db")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = {r["site"]: r for r in doc["sites"]}
    assert doc["submitted"] is False and doc["strategy"] == "auto"          # the default: it says what it ran as
    assert doc["auto"]["ran_as"] == "queue+reselect+learn" and "start estimates for tba, tbb" in doc["auto"]["why"]
    a, b = rows["tba"], rows["tbb"]
    assert a["twin_s"] > 200 and a["scheduler_s"] > 200          # behind the 5-minute filler
    assert b["twin_s"] < 30 and b["scheduler_s"] < 30
    assert a["history_s"] is None and "waits" in a["history_note"]   # no history yet: said, not guessed
    assert a["used"] == b["used"] == "twin"
    assert b["role"] == "origin" and b["tasks"] == 4
    assert a["role"] == "extra pilot" and a["pilots"] == [4]
    assert not (_jobs(testbed) - before)          # plan submitted nothing (jobs ending meanwhile are fine)
    table = resel("plan", bag, "--sites", sites, "--db", tmp_path / "db")
    assert table.returncode == 0 and "tba" in table.stdout and "extra pilot" in table.stdout


def test_plan_says_when_a_site_cannot_be_read(tmp_path, testbed):
    """A dead SSH site is unreachable; a wrong partition cannot be read either. Both rows say
    why, neither gets a number, the bag goes to the site that answered."""
    text = sites_toml(testbed, b={"host": "127.0.0.1", "port": 1}, a={"partition": "nosuch"})
    ok = sites_toml(testbed).split("[[site]]")[1].replace('name = "tba"', 'name = "good"')
    sites, bag = write_inputs(tmp_path, text + "[[site]]" + ok, bag_toml(2, "echo hi"))
    res = resel("plan", bag, "--sites", sites, "--json", "--db", tmp_path / "db")
    assert res.returncode == 0, res.stderr
    rows = {r["site"]: r for r in json.loads(res.stdout)["sites"]}
    assert "127.0.0.1:1" in rows["tbb"]["error"] and rows["tbb"]["used"] is None
    assert rows["tba"]["error"] and "nosuch" in rows["tba"]["error"] and rows["tba"]["used"] is None
    assert rows["good"]["tasks"] == 2 and rows["good"]["used"] is not None
    table = resel("plan", bag, "--sites", sites, "--db", tmp_path / "db")
    assert "unreachable" in table.stdout and "Traceback" not in table.stderr


def test_plan_fails_when_no_site_can_be_reached(tmp_path, testbed):
    """Both sites dead: no plan to show. Before, the table gave every task to an unreachable
    site and the command exited 0; now it fails (exit 1) naming each site and why, the JSON's
    error says the same, and each failure is said once (not again as "limits unknown")."""
    text = sites_toml(testbed, a={"partition": "nosuch"}, b={"host": "127.0.0.1", "port": 1})
    sites, bag = write_inputs(tmp_path, text, bag_toml(2, "echo hi"))
    res = resel("plan", bag, "--sites", sites, "--json", "--db", tmp_path / "db")
    assert res.returncode == 1, res.stdout
    doc = json.loads(res.stdout)
    assert doc["error"].startswith("no site can run the bag: ") and "127.0.0.1:1" in doc["error"]
    assert "tba: " in doc["error"] and "tbb: " in doc["error"]
    table = resel("plan", bag, "--sites", sites, "--db", tmp_path / "db")
    assert table.returncode == 1 and "no site can run the bag" in table.stderr and "Traceback" not in table.stderr
    lines = [ln for ln in table.stdout.splitlines() if "127.0.0.1:1" in ln]
    assert len(lines) == 1 and "unreachable" in lines[0], table.stdout


def test_queue_aware_live_run_goes_where_the_pilot_starts(tmp_path, testbed):
    """`resel run --strategy queue+reselect`: tba is full, so the twin ranks tbb first and the
    bag runs there; the estimates the engine used are stored with the run's first event."""
    from live_helpers import done_results
    from resel.store import open_store
    fill(testbed, "a", 8, 300)
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(3, "echo hi"))
    db = tmp_path / "resel.db"
    res = resel("run", bag, "--sites", sites, "--strategy", "queue+reselect", "--estimate", "twin",
                "--poll", "0.3", "--no-progress", "--json", "--db", db, timeout=180)
    assert res.returncode == 0, res.stderr
    store = open_store(db)
    first = next(iter(store.query("select data from events where kind = 'BagSubmitted'")))
    est = json.loads(first["data"])["wait_estimates"]
    assert est["tba"] > 200 and est["tbb"] < 30
    ran = {r["site"] for r in store.query("select site from attempts where outcome = 'done'")}
    assert ran == {"tbb"}
    run_key = next(iter(store.query("select run_key from runs")))["run_key"]
    assert sorted(done_results(testbed, run_key)) == [0, 1, 2]


def test_history_fetch_says_when_a_site_keeps_no_accounting(tmp_path, testbed):
    """tba runs without slurmdbd: `history fetch` reads nothing there and says why; tbb keeps
    accounting (slurmdbd), so its jobs' waits are read (the testbed's own check job at least);
    a simulated site in the file is refused with its own reason. A site that imported nothing
    makes the command fail (exit 1, the JSON's error naming it), as `resel sites check` does."""
    text = (sites_toml(testbed) + '[[site]]\nname = "sim"\nkind = "simulated"\ncores = 4\nclock = { base = 1.0 }\n'
            'wait = { dist = "fixed", value = 0 }\n')
    sites = tmp_path / "sites.toml"
    sites.write_text(text)
    res = resel("history", "fetch", "--sites", sites, "--days", "1", "--json", "--db", tmp_path / "db")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert "tba" in doc["error"] and "sim" in doc["error"] and doc["hint"]
    rows = {r["site"]: r for r in doc["sites"]}
    assert "no accounting" in rows["tba"]["problem"]
    if testbed.accounting_b:
        assert rows["tbb"]["problem"] is None, rows["tbb"]
    else:
        assert "no accounting" in rows["tbb"]["problem"]
    assert "only live Slurm sites" in rows["sim"]["problem"] and rows["tba"]["new"] == 0
