"""The HTCondor backends against real pools, each test once per Debian root of the testbed (the
fixture ``root``; tests/trixie_helpers.py): Debian 13's HTCondor 23.9.6 (scripts/testbed-trixie.sh)
and Debian sid's HTCondor 25.14.1 (scripts/testbed-sid.sh, the release of the htcondor2 bindings on
PyPI) — each a personal pool: collector, negotiator, schedd, and a startd with one partitionable
slot of 4 CPUs — reached the way OSG users reach an access point:

* the CLI backend over SSH (``tb-ap``, user reselap): ``condor_status -json``, ``condor_q -json``,
  ``condor_history -json``, ``condor_submit -terse``, ``condor_rm``, ``condor_version``;
* the htcondor2 bindings (PyPI's 25.x) on this machine, as remote clients of the collector and
  the schedd with reselap's IDTOKEN; files still go over SSH;
* whole ``resel run``s whose single-core pilots run in execute slots as ``nobody``, in a scratch
  directory, sharing no filesystem with the access point: tasks and results travel through the
  real condor_chirp and condor_starter (``+WantIOProxy``).

A job waits for the negotiator (every 5 s here) before it starts: each pilot takes 10–20 s to
run. reselap's jobs belong to these tests alone; whatever a test leaves is removed after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from resel.backends.htcondor.client import HTCondorBindings, HTCondorCLI
from resel.backends.pilotsite import PilotSite
from resel.backends.transport import SSHTransport
from resel.config import load_sites

from live_helpers import bag_toml, start
from trixie_helpers import (ap, condor_client, done_once, host_path, idle_pool, pool_site, remove_leftovers, reselap_jobs, results,  # noqa: F401
                            release, root, wait_for)

#: a run key of this session's own: a pilot directory of an earlier session (the roots persist
#: between sessions on one machine) holds that session's agent.json, which a test would read
RUN_KEY = f"r7-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def ssh(root):
    t = SSHTransport("tb-ap", ssh_config=root.trixie_ssh_config)
    yield t
    t.close()


@pytest.fixture(autouse=True)
def _no_job_left_behind(root):
    before = reselap_jobs(root)
    yield
    remove_leftovers(root, before)


def site_of(tmp_path, text: str):
    path = tmp_path / "sites.toml"
    path.write_text(text)
    return load_sites(path)[0]


def state(sched, jid: str, want: str, timeout: float = 60):
    return wait_for(lambda: (j := sched.jobs([jid]).get(jid)) and j.state == want and j, timeout=timeout)


def test_cli_over_ssh_reads_the_pool(root, ssh):
    cli = HTCondorCLI(ssh)
    assert cli.version() == root.condor_version and root.condor_version.startswith(release(root).condor + ".")
    slots = cli.slots()
    part = [s for s in slots if s.slot_type == "Partitionable"]
    assert len(part) == 1 and (part[0].total_cpus, part[0].machine) == (4, root.host)
    # an earlier test's removed pilot stays in condor_q (JobStatus 3, completing) until its shadow
    # exits, after its slot is free: wait until the pool is idle on both counts
    av = idle_pool(root, cli)
    assert av and (av.scheduler, av.total_cores, av.running_jobs) == ("htcondor", 4, 0)
    assert [(p.name, p.total_cpus, p.max_time) for p in av.partitions] == [("pool", 4, None)]
    assert cli.jobs() == {}                                       # an empty queue: condor_q prints nothing
    assert cli.cpu_info()["cpus"] == 4
    assert cli.test_only(1, 600) is None                          # matchmaking gives no estimate


def test_cli_pilot_runs_in_a_slot_and_condor_rm_ends_it(tmp_path, root, ssh):
    """A real pilot (the agent under its chirp wrapper, no task yet): Idle → Running, a dynamic
    slot carved out of the partitionable one, agent.json pushed back through condor_chirp; then
    condor_rm: the job leaves the queue and condor_history says CANCELLED, with its reason."""
    cli = HTCondorCLI(ssh)
    ps = PilotSite(site_of(tmp_path, pool_site(root)), ssh, cli)
    jid = ps.submit_pilot(RUN_KEY, 1, 1, 300)
    try:
        assert jid.endswith(".0")
        job = state(cli, jid, "running")
        assert job and (job.name, job.user, job.cpus) == (f"resel-{RUN_KEY}-p1", root.trixie_user, 1)
        assert set(cli.jobs(name_prefix=f"resel-{RUN_KEY}-")) == {jid}
        assert set(cli.jobs(user=root.trixie_user)) == {jid}
        av = wait_for(lambda: (a := cli.availability()).free_cores == 3 and a.running_jobs == 1 and a, timeout=30)
        assert av, cli.availability()                              # one core claimed by the dynamic slot
        agent = host_path(root, ps.pilot_dir(RUN_KEY, 1)) / "agent.json"
        assert wait_for(lambda: agent.exists(), timeout=30), "agent.json never came back through chirp"
        info = json.loads(agent.read_text())
        assert (info["pilot"], info["slots"], info["job_id"]) == ("1", 1, jid)
        cli.cancel([jid])
        gone = state(cli, jid, "cancelled", timeout=30)             # from condor_history: it left the queue
        assert gone and "condor_rm" in (gone.reason or ""), gone
        cli.cancel([jid])                                          # already gone: no error
    finally:
        cli.cancel([jid])


def test_a_pilot_whose_wrapper_is_refused_frees_its_slot_at_once(tmp_path, root, ssh):
    """The chirp wrapper on the access point changed after it was shipped: the job's launcher
    refuses it before the wrapper writes its log. That log is the job's one output file; when it
    was missing, the starter's output transfer failed and it held the slot "Preempting/Vacating"
    for the 40-minute job lease with no job in the queue (CI: a pilot removed in its first
    milliseconds). The log now travels in empty with the wrapper: the slot is free at once."""
    from resel.backends.htcondor.client import WRAPPER_NAME

    cli = HTCondorCLI(ssh)
    idle_pool(root, cli)
    workdir = f"{root.work_c}/wrapper-refused-{uuid.uuid4().hex[:8]}"
    ps = PilotSite(site_of(tmp_path, pool_site(root, workdir=workdir)), ssh, cli)
    first = ps.submit_pilot(RUN_KEY, 3, 1, 300)            # ships the wrapper (once per folder)
    cli.cancel([first])
    assert state(cli, first, "cancelled", timeout=60)
    [wrapper] = host_path(root, workdir).rglob(WRAPPER_NAME)
    original = wrapper.read_bytes()
    second = None
    try:
        wrapper.write_bytes(original + b"\n# changed behind resel's back\n")
        second = ps.submit_pilot(RUN_KEY, 4, 1, 300)          # not shipped again: the changed one goes
        ended = wait_for(lambda: (j := cli.jobs([second]).get(second)) and j.state not in ("pending", "running") and j,
                         timeout=60, every=1.0)
        assert ended and ended.state != "held", ended
        assert idle_pool(root, cli, timeout=60).free_cores == 4    # (the bug held it 40 min)
    finally:
        wrapper.write_bytes(original)
        if second:
            cli.cancel([second])


def test_bindings_on_this_machine_against_the_real_daemons(tmp_path, root, ssh):
    """htcondor2 (PyPI) as a remote client with an IDTOKEN: the pool's version (the schedd's, not
    the bindings'), the same availability as the CLI, and a pilot submitted with Schedd.submit,
    found by name, removed with Schedd.act and found again in the history."""
    with condor_client(root):
        b = HTCondorBindings(ssh)
        assert b.version() == root.condor_version
        av = b.availability()
        assert (av.total_cores, av.partitions[0].name) == (4, "pool")
        assert av.free_cores == HTCondorCLI(ssh).availability().free_cores
        site = site_of(tmp_path, pool_site(root, api="bindings", workdir=root.work_c_host))
        ps = PilotSite(site, ssh, b)
        jid = ps.submit_pilot(RUN_KEY, 2, 1, 300)
        try:
            job = state(b, jid, "running")
            assert job and (job.name, job.user) == (f"resel-{RUN_KEY}-p2", root.trixie_user)
            assert set(b.jobs(name_prefix=f"resel-{RUN_KEY}-p2")) == {jid}
            b.cancel([jid])
            gone = state(b, jid, "cancelled", timeout=30)
            assert gone and gone.reason, gone
            b.cancel([jid])
        finally:
            b.cancel([jid])


def test_sites_check_and_status_on_the_pool(tmp_path, root):
    sites = tmp_path / "sites.toml"
    sites.write_text(pool_site(root))
    for cmd in ("check", "status"):
        done = subprocess.run([sys.executable, "-m", "resel.cli", "sites", cmd, "--sites", str(sites), "--json"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        row = json.loads(done.stdout)["sites"][0]
        assert row["error"] is None, row
        assert (row["scheduler"], row["version"], row["total_cores"]) == ("htcondor", root.condor_version, 4)


CMD = 'echo "task $RESEL_TASK as $(id -un) in $PWD"'


@pytest.mark.parametrize("api", ["cli", "bindings"])
def test_a_bag_runs_through_the_pool(tmp_path, root, api):
    """A whole `resel run` of 6 tasks with single-core per-task pilots: every task once, run as
    nobody in the slot's scratch directory (no filesystem shared with the access point), its
    result back on the access point through condor_chirp."""
    workdir = root.work_c_host if api == "bindings" else f"{root.work_c}/run-{api}"
    with condor_client(root):
        coord = start(tmp_path, pool_site(root, api=api, workdir=workdir), bag_toml(6, CMD), strategy="model")
        coord.run(max_time=240)
        coord.close()
    run = coord.db["runs"].get(coord.run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", 6, 0), run
    recs = results(root, workdir.removeprefix(root.trixie_root), coord.run_key)
    assert done_once(recs) == {i: 1 for i in range(6)}
    for rec in recs:
        out = rec["stdout_tail"].strip()
        assert out.startswith(f"task {rec['task']} as nobody in /var/lib/condor/execute/dir_"), out
    pilots = list(coord.db.query("select pilot, job_id, host from live_pilots where run_id = ? and started is not null",
                                 [coord.run_id]))
    assert pilots and all(p["job_id"].endswith(".0") for p in pilots), pilots
    # a pilot's host is what its agent registered; a started pilot cancelled at the bag's end
    # before its wrapper pushed the registration to the access point has none (the full suite,
    # 2026-11-29: the 4th of 4 pilots, which ran no task, cancelled 4 s after its start)
    ran = {r["pilot"] for r in coord.db.query("select distinct pilot from attempts where run_id = ?", [coord.run_id])}
    assert ran and all(p["host"] == root.host for p in pilots if p["pilot"] in ran), (pilots, ran)
    assert all(p["host"] in (root.host, None) for p in pilots), pilots
