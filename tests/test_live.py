"""`resel run` end to end on the real testbed: two Slurm clusters, one reached over SSH.

Cluster tba (8 CPUs, local) is filled by another user's job, so its pilot waits; tbb (4 CPUs,
over SSH to reseltb@127.0.0.1:2222) starts at once and re-selection moves tba's waiting tasks
there. Every check reads what really happened: the store, the agents' result files on the
sites' filesystems, and squeue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from live_helpers import cancel_leftovers, REPO, bag_toml, done_results, fill, our_jobs, placements_follow_decisions, sites_toml, slurm, start, write_inputs
from waiting import wait_until
from resel.store import open_store

@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    """Whatever a test does, no pilot of it stays on the testbed to slow down the next one."""
    yield
    cancel_leftovers(testbed, tmp_path)


CMD = "sleep 1; echo task $RESEL_TASK attempt $RESEL_ATTEMPT on $RESEL_SITE"


def _check_exactly_once(tb, coord, count: int, work_b: str | None = None) -> None:
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == count and run["failed"] == 0
    rows = list(db.query("select task, count(*) as n from attempts where run_id = ? and outcome = 'done' "
                         "group by task", [coord.run_id]))
    assert {r["task"]: r["n"] for r in rows} == {i: 1 for i in range(count)}
    assert done_results(tb, coord.run_key, work_b) == {i: 1 for i in range(count)}
    tasks = list(db.query("select * from tasks where run_id = ? order by task", [coord.run_id]))
    assert len(tasks) == count
    for t in tasks:
        assert t["state"] == "done" and t["tx"] > 0.5 and t["tq"] >= 0 and t["ttc"] >= t["tx"]
        assert abs(t["ttc"] - t["tq"] - t["tx"]) < 1e-6
    assert our_jobs(tb, coord.run_key) == []


def test_bag_across_both_clusters_with_reselection(tmp_path, testbed):
    """40 real tasks; tba is full, so tbb (over SSH) takes tba's tasks through re-selection windows."""
    # 60 s, cancelled when the run ends: with 20 s the coordinator's start-up and tbb's first
    # pilot used most of it on a loaded machine, and tba took its half back
    filler = fill(testbed, "a", 8, 60)
    tables: list[int] = []

    def the_live_table_counts_what_a_full_count_does(co):
        # `resel run`'s live table comes from the coordinator's tally; at every turn (moves
        # and re-selection windows included) it must say what counting every task says
        from resel.cli.live import _snap
        from resel.live.view import snapshot
        from resel.live.view import COLUMNS
        shown, full = _snap(co), snapshot(co.engine, co.run_id, "running", 0.0)

        def counts(snap):     # what the tally counts (a site's error or notes may change between the two calls)
            return (snap.total, snap.done, snap.failed,
                    [(row.site, [getattr(row, c) for c in COLUMNS], row.lost, row.quarantined) for row in snap.sites])
        assert counts(shown) == counts(full)
        if co.summary.tally is not None and co.summary.tally.engine is co.engine:    # the tally's, not a count
            tables.append(co.engine.done_count)
    try:
        coord = start(tmp_path, sites_toml(testbed), bag_toml(40, CMD))
        coord.run(on_cycle=the_live_table_counts_what_a_full_count_does, max_time=240)
        assert len(tables) > 10 and tables[-1] == 40
        coord.close()
    finally:
        slurm(testbed, "a", "scancel", filler, check=False)
    _check_exactly_once(testbed, coord, 40)
    db = coord.db
    decisions = list(db.query("select * from decisions where run_id = ? and kind != 'assign'", [coord.run_id]))
    kinds = {d["kind"] for d in decisions}
    assert "reselect-provisional" in kinds, kinds          # tbb ran tba's tasks while tba waited
    for d in decisions:                                     # the window rule, decision by decision
        if d["kind"] == "move-back":
            assert d["a_r"] - d["a_r2"] < d["window"]
        elif d["kind"] == "window-commit":
            assert d["a_r"] is None or d["a_r"] - d["a_r2"] >= d["window"] - 1e-9
    placements_follow_decisions(db, coord.run_id)
    per_site = json.loads(db["runs"].get(coord.run_id)["per_site"])
    assert per_site.get("tbb", 0) > 20                      # more than its own half
    assert coord.psites["tbb"].transport.connections_opened == 1
    pilots = list(db.query("select site, host, cpu_model, agent_started from live_pilots where run_id = ? "
                           "and started is not null", [coord.run_id]))
    assert "tbb" in {p["site"] for p in pilots}           # tba's may never start: its tasks moved
    assert all(p["host"] and p["cpu_model"] and p["agent_started"] for p in pilots), pilots


def test_kill_coordinator_and_resume(tmp_path, testbed):
    """kill -9 the `resel run` process mid-run; `resel run --resume` finishes every task once."""
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(16, "sleep 2; echo $RESEL_TASK"))
    db_path = tmp_path / "resel.db"
    resel = [sys.executable, "-m", "resel.cli"]
    proc = subprocess.Popen(resel + ["run", str(bag), "--sites", str(sites), "--db", str(db_path), "--poll", "0.3",
                                     "--strategy", "topk:2+reselect", "--no-progress"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = open_store(db_path)
    wait_until(lambda: list(db.query("select count(*) as n from events where kind = 'TaskFinished'"))[0]["n"] >= 4,
               90, "4 TaskFinished events", every=0.2)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run_id = list(db.query("select id from runs order by id desc limit 1"))[0]["id"]
    assert db["runs"].get(run_id)["status"] == "running"
    res = subprocess.run(resel + ["run", "--resume", str(run_id), "--db", str(db_path), "--poll", "0.3",
                                  "--json", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["done"] == 16 and snap["failed"] == 0

    class C:   # what _check_exactly_once reads
        pass
    c = C()
    c.db, c.run_id, c.run_key = db, run_id, db["runs"].get(run_id)["run_key"]
    _check_exactly_once(testbed, c, 16)


def test_slurmctld_restart_mid_run(tmp_path, testbed):
    """Restart tba's slurmctld while tasks run there: the run still completes, each task once."""
    coord = start(tmp_path, sites_toml(testbed), bag_toml(12, "sleep 2; echo $RESEL_TASK"), strategy="model")
    restarted = threading.Event()

    def on_cycle(co):
        if not restarted.is_set() and co.engine.done_count >= 2:
            restarted.set()
            subprocess.run(["bash", str(REPO / "scripts" / "testbed.sh"), "restart-ctld", "A"], check=True,
                           capture_output=True, timeout=120)
    coord.run(on_cycle=on_cycle, max_time=240)
    coord.close()
    assert restarted.is_set()
    _check_exactly_once(testbed, coord, 12)


def test_ssh_connection_dropped_mid_run(tmp_path, testbed):
    """Drop the SSH link to tbb while it runs tasks: the transport reconnects, the run completes."""
    coord = start(tmp_path, sites_toml(testbed, clock_b=4.0), bag_toml(8, "sleep 2; echo $RESEL_TASK"),
                  strategy="model")
    dropped = threading.Event()

    def on_cycle(co):
        if not dropped.is_set() and co.engine.done_count >= 1:
            dropped.set()
            co.psites["tbb"].transport.drop()
    coord.run(on_cycle=on_cycle, max_time=180)
    coord.close()
    assert dropped.is_set()
    _check_exactly_once(testbed, coord, 8)
    assert coord.psites["tbb"].transport.connections_opened == 2


def test_pilot_hitting_its_walltime_requeues_its_task(tmp_path, testbed):
    """A pilot with a 30 s walltime running a 300 s attempt: the attempt is lost, the task rerun."""
    cmd = 'if [ "$RESEL_ATTEMPT" = 1 ]; then sleep 300; fi; echo ok'
    coord = start(tmp_path, sites_toml(testbed, walltime_a=30), bag_toml(1, cmd), strategy="model")
    coord.run(max_time=150)
    coord.close()
    rows = list(coord.db.query("select attempt, outcome, reason from attempts where run_id = ? order by attempt",
                               [coord.run_id]))
    assert [r["outcome"] for r in rows] == ["lost", "done"], rows
    assert coord.db["runs"].get(coord.run_id)["done"] == 1
    assert our_jobs(testbed, coord.run_key) == []


@pytest.mark.parametrize("override, cores_a, expect", [
    ({"partition": "nosuch"}, 8, "nosuch"),        # a partition the cluster does not have
    ({}, 12, "PartitionConfig"),                    # 12 cores on an 8-CPU cluster: pending forever
    ({"submit_args": ["--mem=100000"]}, 8, "Memory specification can not be satisfied"),   # sbatch refuses
])
def test_bad_site_gives_a_clear_error_and_the_other_site_goes_on(tmp_path, testbed, override, cores_a, expect):
    """One broken site: the run reports it, gives it up, and finishes the bag on the other."""
    coord = start(tmp_path, sites_toml(testbed, a=override, cores_a=cores_a), bag_toml(12, "echo $RESEL_TASK"),
                  strategy="model")
    coord.run(max_time=120)
    coord.close()
    assert coord.db["runs"].get(coord.run_id)["done"] == 12
    assert "tba" in coord.engine.lost_sites
    assert expect.lower() in coord.engine.lost_sites["tba"].lower(), coord.engine.lost_sites


def test_unreachable_and_refused_ssh_sites(tmp_path, testbed):
    """tbb over a closed port, then with a key the server refuses: tba alone runs the bag."""
    empty = tmp_path / "empty_ssh_config"
    empty.write_text("")
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    base = {"host": "127.0.0.1", "user": testbed.user, "ssh_config": str(empty), "known_hosts": testbed.known_hosts}
    for n, (override, expect) in enumerate([({"port": 1}, "127.0.0.1:1"),
                                            ({"port": testbed.ssh_port, "key": str(wrong)}, "wrong_key")]):
        coord = start(tmp_path / f"case{n}", sites_toml(testbed, b={**base, **override}), bag_toml(2, "echo hi"),
                      strategy="topk:2")
        coord.run(max_time=120)
        coord.close()
        assert coord.db["runs"].get(coord.run_id)["done"] == 2
        assert expect in coord.engine.lost_sites["tbb"], coord.engine.lost_sites


def test_run_through_slurmrestd(tmp_path, testbed):
    """api = "rest": pilots submitted and watched through slurmrestd (JWT), files over SSH."""
    rest = {"transport": "ssh", "host": "tb-ssh", "ssh_config": testbed.ssh_config, "workdir": "~/resel-work-rest",
            "api": "rest", "rest_url": testbed.rest_url, "rest_user": testbed.rest_user,
            "rest_token_file": testbed.rest_token_file}
    sites = sites_toml(testbed, a=rest).split("[[site]]")[1]   # tba only, reached through slurmrestd
    sites = "[[site]]" + sites.replace('env = { SLURM_CONF = "' + testbed.slurm_conf_a + '" }, ', "")
    coord = start(tmp_path, sites, bag_toml(6, "echo $RESEL_TASK"), strategy="model")
    coord.run(max_time=120)
    coord.close()
    run = coord.db["runs"].get(coord.run_id)
    assert run["done"] == 6 and run["status"] == "done"
    job_ids = {r["job_id"] for r in coord.db.query("select job_id from live_pilots where run_id = ?", [coord.run_id])}
    assert job_ids and all(int(j) < 500000 for j in job_ids)      # tba's job ids: the REST cluster
    assert our_jobs(testbed, coord.run_key) == []


def test_mixed_run_slurm_and_pbs_torque_dialect(tmp_path, testbed):
    """tba (Slurm) is full; tbb is driven as a PBS site through the real Torque-dialect
    qsub/qstat/qdel wrappers over SSH: re-selection moves tba's tasks there; each runs once."""
    filler = fill(testbed, "a", 8, 15)
    try:
        sites = sites_toml(testbed, kind_b="pbs", b={"dialect": "torque", "workdir": "~/resel-work-pbs"})
        coord = start(tmp_path, sites, bag_toml(16, CMD))
        coord.run(max_time=180)
        coord.close()
    finally:
        slurm(testbed, "a", "scancel", filler, check=False)
    _check_exactly_once(testbed, coord, 16, work_b=testbed.work_b.replace("resel-work", "resel-work-pbs"))
    kinds = {(d["kind"], d["origin"], d["target"]) for d in coord.db.query(
        "select kind, origin, target from decisions where run_id = ?", [coord.run_id])}
    assert ("reselect-provisional", "tba", "tbb") in kinds, kinds
    assert coord.psites["tbb"].scheduler.dialect == "torque"
