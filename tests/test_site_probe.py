"""`resel sites probe` and profiling inside pilots, on the real testbed."""

from __future__ import annotations

import json

import pytest

from live_helpers import bag_toml, cancel_leftovers, sites_toml, start, write_inputs
from test_cli_live import resel
from resel.store import open_store


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_probe_measures_each_site_through_its_queue_and_feeds_lim(tmp_path, testbed):
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(4, "true", instructions=4e9))
    db = tmp_path / "db"
    res = resel("sites", "probe", "--sites", sites, "--db", db, "--json", timeout=200)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["site"]: r for r in json.loads(res.stdout)["probes"]}
    for name in ("tba", "tbb"):
        r = rows[name]
        assert r["error"] is None and r["cpu_model"] and r["host"]
        assert r["task_clock_s"] > 0.05                      # the reference task ran under perf
        assert r["clock_ghz"] > 0.3 and r["clock_method"] in ("perf:cycles/task-clock", "cpuinfo:cpu MHz")
    stored = list(open_store(db).query("select site, clock_ghz from site_probes"))
    assert {r["site"] for r in stored} == {"tba", "tbb"}
    plan = resel("run", bag, "--sites", sites, "--clock", "probed", "--dry-run", "--json", "--db", db)
    assert plan.returncode == 0, plan.stderr
    tx = {r["site"]: r["tx"] for r in json.loads(plan.stdout)["sites"]}
    assert tx["tba"] == pytest.approx(4e9 / (rows["tba"]["clock_ghz"] * 1e9))
    assert tx["tbb"] == pytest.approx(4e9 / (rows["tbb"]["clock_ghz"] * 1e9))


def test_bag_perf_every_profiles_a_sample_of_tasks(tmp_path, testbed):
    """perf_every = 2: tasks 0, 2, 4 run under perf stat; their counters land in attempts."""
    bag = bag_toml(6, "python3 -c 'sum(range(10**5))'").replace("count = 6", "count = 6\nperf_every = 2")
    coord = start(tmp_path, sites_toml(testbed), bag, strategy="model")
    coord.run(max_time=120)
    coord.close()
    rows = {r["task"]: r for r in coord.db.query("select task, perf from attempts where run_id = ? and "
                                                 "outcome = 'done'", [coord.run_id])}
    assert sorted(rows) == list(range(6))
    for task, r in rows.items():
        if task % 2 == 0:
            perf = json.loads(r["perf"])
            assert perf["task-clock-ms"] > 0                  # cycles may be None on a VM
        else:
            assert r["perf"] is None


def test_model_fit_on_a_real_live_run(tmp_path, testbed):
    """Calibration on what a real run stored: a fit per site that ran tasks, held-out scores."""
    bag = bag_toml(16, "python3 -c 'sum(range(3*10**5))'").replace("count = 16", "count = 16\nperf_every = 1")
    coord = start(tmp_path, sites_toml(testbed, clock_b=2.0), bag, strategy="topk:2")
    coord.run(max_time=120)
    coord.close()
    db = tmp_path / "resel.db"
    res = resel("model", "fit", "--db", db, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    text = json.dumps(doc)
    assert "tba" in text and "tbb" in text
    shown = resel("model", "show", "--db", db)
    assert shown.returncode == 0 and "tba" in shown.stdout
