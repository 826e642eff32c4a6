"""Faults on the real HTCondor pool, mid-run (issue 14 §3): ``kill -9`` of ``resel run`` and
``--resume`` with pilots in the pool, the pool's ``condor_schedd`` restarted, a pilot evicted
(``condor_vacate_job``) and one removed (``condor_rm``) while it runs a task.

The pool is the testbed's HTCondor 23.9.6 (scripts/testbed-trixie.sh), reached over SSH as
reselap like an OSG access point; the pilots run as ``nobody`` in execute slots that share no
filesystem with it, and tasks and results travel through the real ``condor_chirp``. Every check
reads what really happened, as tests/test_live_faults.py does for Slurm: the store, the agents'
own result files (pushed back through chirp into the pilot directories on the access point's
disk), and ``condor_q``. Each test removes only the jobs of the runs it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from resel.backends.htcondor.client import HTCondorCLI
from resel.backends.transport import SSHTransport
from resel.states import PilotState
from resel.store import open_store

from live_helpers import REPO, bag_toml, start, write_inputs
from trixie_helpers import ap, done_once, pool_site, results, trixie, wait_for  # noqa: F401

RESEL = [sys.executable, "-m", "resel.cli"]

#: run keys this module started: the only pool jobs its clean-up removes (the pool is shared)
KEYS: set[str] = set()


def workdir(tb, name: str) -> str:
    """A work directory of its own on the access point (absolute, as a login there sees it)."""
    return f"{tb.work_c}/faults-{name}"


def pool_jobs(tb, run_key: str) -> dict:
    """The run's jobs still in the pool's queue (pending, running), read through the real CLI."""
    t = SSHTransport("tb-ap", ssh_config=tb.trixie_ssh_config)
    try:
        return {j: info for j, info in HTCondorCLI(t).jobs(name_prefix=f"resel-{run_key}-").items()
                if info.state.phase in ("pending", "running")}
    finally:
        t.close()


@pytest.fixture(autouse=True)
def _only_our_jobs_removed(trixie):
    yield
    for key in list(KEYS):
        ap(trixie, f"condor_rm -constraint 'regexp(\"^resel-{key}-\", JobBatchName)' >/dev/null 2>&1", check=False)
        KEYS.discard(key)


def exactly_once(tb, db, run_id: int, count: int, wd: str) -> list[dict]:
    """Every task done exactly once in the store and in the agents' own result files on the
    access point; no pilot of the run left in the pool. Returns the agents' records."""
    run = db["runs"].get(run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", count, 0), run
    rows = list(db.query("select task, count(*) as n from attempts where run_id = ? and outcome = 'done' "
                         "group by task", [run_id]))
    assert {r["task"]: r["n"] for r in rows} == {i: 1 for i in range(count)}
    recs = results(tb, wd, run["run_key"])
    assert done_once(recs) == {i: 1 for i in range(count)}, sorted((r["task"], r["outcome"]) for r in recs)
    assert wait_for(lambda: pool_jobs(tb, run["run_key"]) == {}, timeout=30), pool_jobs(tb, run["run_key"])
    return recs


def _started(co) -> list[tuple[int, int, int]]:
    """(task, attempt, pilot) of the attempts the agents have reported started and not ended."""
    return [(t.id, t.attempt, t.pilot) for t in co.engine.tasks
            if t.state.value == "running" and ("TaskStarted", t.id, t.attempt) in co.consumed]


def test_kill_9_of_resel_run_and_resume_with_pilots_in_the_pool(tmp_path, trixie):
    """`resel run` is killed (SIGKILL) while its pilots run tasks in the pool: they stay there,
    `resel run --resume` finds them by name, reads what their agents pushed back through chirp
    in the meantime, and finishes the bag — each task once."""
    wd = workdir(trixie, "kill")
    sites, bag = write_inputs(tmp_path, pool_site(trixie, workdir=wd), bag_toml(10, "sleep 3; echo $RESEL_TASK"))
    db_path = tmp_path / "resel.db"
    proc = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db_path), "--poll", "0.3",
                                     "--strategy", "model", "--no-progress"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        db = open_store(db_path)
        assert wait_for(lambda: list(db.query("select run_key from runs")), timeout=60)
        KEYS.add(list(db.query("select run_key from runs"))[0]["run_key"])
        finished = lambda: list(db.query("select count(*) as n from events where kind = 'TaskFinished'"))[0]["n"]
        assert wait_for(lambda: finished() >= 2, timeout=180, every=0.2), proc.poll()
        assert proc.poll() is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    run = list(db.query("select id, run_key, status from runs"))[0]
    assert run["status"] == "running"
    left = pool_jobs(trixie, run["run_key"])
    assert left and all(j.state in ("running", "pending") for j in left.values()), left   # pilots still there
    res = subprocess.run(RESEL + ["run", "--resume", str(run["id"]), "--db", str(db_path), "--poll", "0.3",
                                  "--json", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["done"] == 10
    exactly_once(trixie, db, run["id"], 10, wd)
    # the resumed run kept the pilots it found: at least one of them ran a task after the kill
    kept = set(left)
    after = {r["job_id"] for r in db.query(
        "select p.job_id from attempts a join live_pilots p on p.run_id = a.run_id and p.pilot = a.pilot "
        "where a.run_id = ? and a.outcome = 'done'", [run["id"]])}
    assert kept & after, (kept, after)


def test_the_pools_schedd_restarted_mid_run(tmp_path, trixie):
    """`condor_restart -daemon schedd` (scripts/testbed-trixie.sh restart-schedd) while pilots run
    tasks: for ~15 s condor_q does not answer and the shadows are gone (chirp fails in the slots);
    whatever the schedd then does with the running pilots (23.9.6 leaves them running and its new
    shadows reconnect to their starters: "Reconnect SUCCESS" in the ShadowLog; or restarts them,
    and periodic_remove removes them), every task completes exactly once."""
    wd = workdir(trixie, "schedd")
    coord = start(tmp_path, pool_site(trixie, workdir=wd), bag_toml(12, "sleep 4; echo $RESEL_TASK"),
                  strategy="model")
    KEYS.add(coord.run_key)
    state: dict = {}

    def restart():
        began = time.monotonic()
        done = subprocess.run(["bash", str(REPO / "scripts" / "testbed-trixie.sh"), "restart-schedd"],
                              capture_output=True, text=True, timeout=180,
                              env={**os.environ, "RESEL_TB": os.path.dirname(trixie.trixie_dir)})
        state["restart"] = (done.returncode, done.stdout + done.stderr, time.monotonic() - began)
        state["back"] = coord.now()

    worker = threading.Thread(target=restart)

    def on_cycle(co):
        if "at" not in state and co.engine.done_count >= 2 and _started(co):
            state["at"], state["running"] = co.now(), _started(co)
            worker.start()
    try:
        coord.run(on_cycle=on_cycle, max_time=420)
    finally:
        if worker.is_alive() or "at" in state:
            worker.join()
        coord.close()
    assert "at" in state and state["restart"][0] == 0, state.get("restart")
    exactly_once(trixie, coord.db, coord.run_id, 12, wd)
    # the restart fell in the middle of the run: tasks ran across it and finished after it
    finished = [r["time"] for r in coord.db.query("select time from events where run_id = ? and kind = 'TaskFinished'",
                                                  [coord.run_id])]
    assert min(finished) < state["back"] < max(finished), (state, finished)


@pytest.mark.parametrize("command", ["condor_vacate_job", "condor_rm"])
def test_a_pilot_evicted_or_removed_mid_task(tmp_path, trixie, command):
    """A pilot running a task is evicted (condor_vacate_job: SIGTERM, the job back to Idle, then
    periodic_remove — or a rerun whose wrapper reports the lost attempt) or removed (condor_rm):
    its attempt is lost, not done, and the task runs again — on another pilot, or after an
    eviction in the same job's new incarnation; every task completes exactly once."""
    wd = workdir(trixie, command)
    coord = start(tmp_path, pool_site(trixie, workdir=wd), bag_toml(8, "sleep 20; echo $RESEL_TASK"),
                  strategy="model")
    KEYS.add(coord.run_key)
    hit: dict = {}

    def on_cycle(co):
        if "job" not in hit:
            for task, attempt, pilot in _started(co):
                view = co.pilots.get(pilot)
                began = co.db["attempts"].get((co.run_id, task, attempt))["start"]
                # a task that started less than 5 s ago (of 20): still running when the command
                # lands (SSH to the AP, the schedd, the starter's signal: seconds under load)
                if view and view.state is PilotState.ACTIVE and view.job_id and began and time.time() - began < 5.0:
                    ap(trixie, f"{command} {view.job_id}")
                    hit.update(job=view.job_id, pilot=pilot, task=task, attempt=attempt, at=co.now())
                    return
    coord.run(on_cycle=on_cycle, max_time=420)
    coord.close()
    assert "job" in hit, "no pilot was seen running a task"
    db = coord.db
    recs = exactly_once(trixie, db, coord.run_id, 8, wd)
    hit_attempt = db["attempts"].get((coord.run_id, hit["task"], hit["attempt"]))
    assert hit_attempt["outcome"] == "lost", hit_attempt          # the attempt in the hit pilot never counted
    redone = list(db.query("select attempt, pilot from attempts where run_id = ? and task = ? and outcome = 'done'",
                           [coord.run_id, hit["task"]]))
    assert len(redone) == 1 and redone[0]["attempt"] > hit["attempt"], redone
    assert all(not (r["task"] == hit["task"] and r.get("attempt") == hit["attempt"] and r["outcome"] == "done")
               for r in recs)
    if redone[0]["pilot"] == hit["pilot"]:
        # an evicted job goes back to Idle and may run again before the schedd's periodic_remove
        # (every 60 s) removes it: then a new agent (a new incarnation) in the same pilot ran it
        assert command == "condor_vacate_job", redone
        by = {(r["task"], r["attempt"]): r.get("incarnation") for r in recs}
        lost = [r for r in recs if r["task"] == hit["task"] and r["attempt"] == hit["attempt"]]
        assert lost and lost[0]["outcome"] == "lost" and by[hit["task"], redone[0]["attempt"]] != lost[0]["incarnation"]
    pilot = db["live_pilots"].get((coord.run_id, hit["pilot"])) if "live_pilots" in db.table_names() else None
    assert pilot is None or pilot["job_id"] == hit["job"]
