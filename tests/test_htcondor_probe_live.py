"""``resel sites probe`` and ``perf_every`` through the HTCondor pool, live (issue 14 §2).

The probe's pilot and a bag's sampled tasks run in the pool's execute slots as ``nobody``, their
records coming back through condor_chirp. The slots have no ``perf`` (the testbed's Debian 13
root does not install it — like most OSG slots, where hardware counters are not available
either): the probe falls back to the node's /proc/cpuinfo clock, and a sampled task's perf record
says ``perf not found``, which is what resel must store rather than guess.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from live_helpers import REPO, bag_toml, start, write_inputs
from trixie_helpers import ap, pool_site, trixie  # noqa: F401

KEYS: set[str] = set()


@pytest.fixture(autouse=True)
def _only_our_jobs_removed(trixie):
    yield
    for key in KEYS:
        ap(trixie, f"condor_rm -constraint 'regexp(\"^resel-{key}-\", JobBatchName)' >/dev/null 2>&1", check=False)
    KEYS.clear()


def resel(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "resel.cli", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_sites_probe_through_the_pool_feeds_lim(tmp_path, trixie):
    sites, bag = write_inputs(tmp_path, pool_site(trixie, workdir=f"{trixie.work_c}/probe"),
                              bag_toml(2, "true", instructions=4e9))
    db = tmp_path / "db"
    res = resel("sites", "probe", "--sites", sites, "--db", db, "--json", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (row,) = json.loads(res.stdout)["probes"]
    assert row["error"] is None and (row["site"], row["kind"], row["host"]) == ("pool", "htcondor", trixie.host), row
    assert row["job_id"].endswith(".0") and row["cpu_model"]
    # no perf in the slot: the clock is the node's cpuinfo, and no counter is invented
    assert (row["clock_method"], row["cycles"], row["instructions"]) == ("cpuinfo:cpu MHz", None, None), row
    assert row["clock_ghz"] == pytest.approx(row["cpu_mhz"] / 1000) and row["clock_ghz"] > 0.3
    plan = resel("run", bag, "--sites", sites, "--clock", "probed", "--dry-run", "--json", "--db", db)
    assert plan.returncode == 0, plan.stderr
    (site,) = json.loads(plan.stdout)["sites"]
    assert site["tx"] == pytest.approx(4e9 / (row["clock_ghz"] * 1e9))


def test_perf_every_through_the_pool(tmp_path, trixie):
    """perf_every = 2: tasks 0 and 2 run under the agent's perf wrapper in the slot; with no perf
    there, their attempts store perf's absence; tasks 1 and 3 store nothing."""
    bag = bag_toml(4, "echo $RESEL_TASK").replace("count = 4", "count = 4\nperf_every = 2")
    coord = start(tmp_path, pool_site(trixie, workdir=f"{trixie.work_c}/perfevery"), bag, strategy="model")
    KEYS.add(coord.run_key)
    coord.run(max_time=240)
    coord.close()
    rows = {r["task"]: r for r in coord.db.query("select task, perf, stdout_tail from attempts where run_id = ? "
                                                 "and outcome = 'done'", [coord.run_id])}
    assert sorted(rows) == [0, 1, 2, 3]
    for task, r in rows.items():
        assert r["stdout_tail"].strip() == str(task)
        if task % 2 == 0:
            assert json.loads(r["perf"]) == {"error": "perf not found"}, r
        else:
            assert r["perf"] is None, r
