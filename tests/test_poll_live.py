"""Polls ask for our own jobs only, live (issue 14 §6), and speak resel's words (§5).

On the testbed's real daemons — Slurm 22.05 (``tbb``'s CLI over SSH as the unprivileged
``reseltb``, ``tba``'s slurmrestd), Debian's Torque wrappers on ``tbb``, Slurm 24.11 (``tbc``'s CLI
over SSH and its slurmrestd) and the HTCondor 23.9.6 pool (CLI over SSH as ``reselap``, and the
htcondor2 bindings on this machine):

* another job sits in the same queue — another user's where the testbed has one (root's beside
  reseltb's, reseltb's beside root's Torque client), else a job of the same user that the
  client did not submit (tbc and the pool have only ``reselap``) — and neither our poll's
  commands (argv, REST paths, schedd constraints) nor their replies name it;
* our job finishes between two polls and the second poll still reports it, with its final state
  (``done``), from what the scheduler keeps (squeue's ``MinJobAge``, Torque's completed jobs,
  condor_history).

Each test removes the jobs it submitted (by id) and nothing else: the testbed is shared (another
session's ``scancel -u reselap`` can still cancel a tbc job of ours mid-test: rerun alone).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid

import pytest
import requests
from resel.backends.jobs import JobState, Scheduler
from resel.backends.pbs.cli import PBSCLI
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.slurm.rest import SlurmREST
from resel.backends.transport import LocalTransport, SSHTransport

from live_helpers import slurm, wait_for
from trixie_helpers import ap, trixie  # noqa: F401

QUICK = "#!/bin/sh\n# a resel poll test job\nsleep 3\n"


def tag() -> str:
    return f"resel-t-{uuid.uuid4().hex[:6]}-p0"


class Recording:
    """A transport that records what it was asked and what came back (the real one under it)."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def run(self, argv, **kw):
        done = self.inner.run(argv, **kw)
        self.seen.append((list(argv), done.stdout))
        return done

    def __getattr__(self, name):
        return getattr(self.inner, name)


class RecordingSession(requests.Session):
    def __init__(self):
        super().__init__()
        self.seen = []

    def request(self, method, url, **kw):
        reply = super().request(method, url, **kw)
        self.seen.append(([method, url], reply.text))
        return reply


def _foreign(tb, cluster: str, seconds: int = 60) -> str:
    """A job of root (not the client's user) in the cluster's queue; it holds a core."""
    return slurm(tb, cluster, "sbatch", "--parsable", "-J", "not-ours", "-n", "1", "-t", "2", "-o", "/dev/null",
                 "--wrap", f"sleep {seconds}").stdout.strip().split(";")[0]


def _as_reseltb(tb, cluster_conf: str, command: str) -> str:
    done = subprocess.run(["ssh", "-F", tb.ssh_config, "tb-ssh", f"SLURM_CONF={cluster_conf} {command}"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _check_poll(sched: Scheduler, seen: list, ours: str, foreign: str, workdir: str) -> None:
    """Two polls of our job around its end: the first while it runs or waits, the second after
    it ended — reported with its final state; nothing of the other job in either."""
    assert isinstance(sched, Scheduler)
    first = sched.jobs([ours])
    assert set(first) == {ours} and first[ours].state.phase in ("pending", "running"), first
    assert wait_for(lambda: sched.jobs([ours])[ours].state.final, timeout=240, every=2.0), sched.jobs([ours])
    seen.clear()
    second = sched.jobs([ours])
    assert set(second) == {ours} and second[ours].state is JobState.DONE, second
    assert second[ours].native                  # the scheduler's own word, kept for display
    assert seen
    for asked, reply in seen:
        text = " ".join(asked)
        assert re.search(_mention(ours), text), asked
        assert not re.search(_mention(foreign), text) and not re.search(_mention(foreign), reply), (asked, reply)


def _mention(job_id: str) -> str:
    """A pattern for a job id in a command or a reply: Slurm's and PBS's number as a whole
    word, HTCondor's ``Cluster.Proc`` or its ClusterId in a JSON ad or a schedd constraint."""
    seq = re.escape(job_id.split(".")[0])
    if "." in job_id:
        return rf"(?<![\d.]){re.escape(job_id)}(?![\d])|\"?ClusterId\"?\s*(?::|==)\s*{seq}\b"
    return rf"(?<![\d.]){seq}(?![\d])"


def test_slurm_cli_over_ssh_polls_our_jobs_only(testbed):
    ssh = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    rec = Recording(ssh)
    cli = SlurmCLI(rec, env={"SLURM_CONF": testbed.slurm_conf_b})
    foreign = _foreign(testbed, "b")
    ours = None
    try:
        ours = cli.submit(QUICK, name=tag(), cores=1, walltime=60, workdir=testbed.work_b)
        _check_poll(cli, rec.seen, ours, foreign, testbed.work_b)
        # the all-users queries stay all-users: availability still counts the other job
        assert cli.availability().running_jobs + cli.availability().pending_jobs >= 1
    finally:
        slurm(testbed, "b", "scancel", foreign, *([ours] if ours else []), check=False)
        ssh.close()


def test_slurm_rest_polls_our_jobs_only(testbed):
    token = open(testbed.rest_token_file).read().strip().removeprefix("SLURM_JWT=")
    session = RecordingSession()
    rest = SlurmREST(testbed.rest_url, testbed.rest_user, token, api_version="auto", session=session)
    foreign = _foreign(testbed, "a")
    ours = None
    try:
        # reseltb cannot write root's work-a: its job runs in /tmp, as test_slurm_live's do
        ours = rest.submit(QUICK, name=tag(), cores=1, walltime=60, workdir="/tmp")
        _check_poll(rest, session.seen, ours, foreign, "/tmp")
    finally:
        slurm(testbed, "a", "scancel", foreign, *([ours] if ours else []), check=False)


def test_torque_wrappers_poll_our_jobs_only(testbed, tmp_path):
    rec = Recording(LocalTransport())
    cli = PBSCLI(rec, env={"SLURM_CONF": testbed.slurm_conf_b}, dialect="torque")
    # another user's job: reseltb's, submitted over SSH beside root's client
    foreign = _as_reseltb(testbed, testbed.slurm_conf_b,
                          "sbatch --parsable -J not-ours -n 1 -t 2 -o /dev/null --wrap 'sleep 60'").split(";")[0]
    ours = None
    try:
        ours = cli.submit(QUICK, name=tag(), cores=1, walltime=60, workdir="/tmp")
        _check_poll(cli, rec.seen, ours, foreign, "/tmp")
    finally:
        slurm(testbed, "b", "scancel", foreign, *([ours] if ours else []), check=False)


def test_htcondor_cli_polls_our_jobs_only(trixie, tmp_path):  # noqa: F811 - the fixture
    from resel.backends.htcondor.client import HTCondorCLI
    from resel.backends.pilotsite import PilotSite
    from resel.config import load_sites
    from trixie_helpers import pool_site
    path = tmp_path / "sites.toml"
    path.write_text(pool_site(trixie, workdir="~/resel-work-poll"))
    site = load_sites(path)[0]
    ssh = SSHTransport("tb-ap", ssh_config=trixie.trixie_ssh_config)
    rec = Recording(ssh)
    cli = HTCondorCLI(rec)
    ps = PilotSite(site, rec, cli)
    run_key = f"r9-{uuid.uuid4().hex[:6]}"
    # a job of the pool's only user that our client did not submit: it must not be in our poll
    foreign = ap(trixie, "printf 'executable=/bin/sleep\\narguments=60\\nqueue\\n' | condor_submit -terse -").stdout
    foreign = foreign.split("-")[0].strip()
    ours = None
    try:
        ps.ship_agent()
        pdir = ps.make_pilot_dir(run_key, 0)
        ours = cli.submit(ps.pilot_script(run_key, 0, 1, 120), name=ps.job_name(run_key, 0), cores=1,
                          walltime=120, workdir=pdir)
        ps.stop_pilot(run_key, 0, None)          # the agent stops at once: the job completes
        _check_poll(cli, rec.seen, ours, foreign, pdir)
    finally:
        ap(trixie, f"condor_rm {foreign} {ours or ''} >/dev/null 2>&1", check=False)
        ssh.close()


@pytest.mark.parametrize("cluster", ["b"])
def test_an_unknown_job_id_is_absent_not_an_error(testbed, cluster):
    """squeue answers "Invalid job id" for an id it no longer knows; the poll reads that as
    absent (the coordinator's missing-polls rule then applies), never as a failure."""
    cli = SlurmCLI(LocalTransport(), env={"SLURM_CONF": testbed.slurm_conf_b})
    assert cli.jobs(["999999"]) == {}
    started = time.monotonic()
    assert cli.jobs([str(999000 + i) for i in range(150)]) == {}
    assert time.monotonic() - started < 30


# ---------------------------------------------------------------------------- Slurm 24.11 (tbc)
def _foreign_on_tbc(tb) -> str:
    """A job of the access point's only user that our client did not submit."""
    return ap(tb, "sbatch --parsable -J not-ours -n 1 -t 2 -o /dev/null --wrap 'sleep 60'").stdout.strip().split(";")[0]


def test_slurm_2411_cli_over_ssh_polls_our_jobs_only(trixie):  # noqa: F811 - the fixture
    ssh = SSHTransport("tb-ap", ssh_config=trixie.trixie_ssh_config)
    rec = Recording(ssh)
    cli = SlurmCLI(rec)
    foreign = _foreign_on_tbc(trixie)
    ours = None
    try:
        ours = cli.submit(QUICK, name=tag(), cores=1, walltime=60, workdir=trixie.work_c)
        _check_poll(cli, rec.seen, ours, foreign, trixie.work_c)
    finally:
        ap(trixie, f"scancel {foreign} {ours or ''}", check=False)
        ssh.close()


def test_slurm_2411_rest_polls_our_jobs_only(trixie):  # noqa: F811 - the fixture
    token = open(trixie.rest_token_file_c).read().strip().removeprefix("SLURM_JWT=")
    session = RecordingSession()
    rest = SlurmREST(trixie.rest_url_c, trixie.rest_user_c, token, api_version="auto", session=session)
    foreign = _foreign_on_tbc(trixie)
    ours = None
    try:
        ours = rest.submit(QUICK, name=tag(), cores=1, walltime=60, workdir=trixie.work_c)
        _check_poll(rest, session.seen, ours, foreign, trixie.work_c)
    finally:
        ap(trixie, f"scancel {foreign} {ours or ''}", check=False)


# ---------------------------------------------------------------------------- htcondor2 bindings
class RecordingSchedd:
    """The real htcondor2 Schedd, recording each query's constraint and the ads' ids it got."""

    def __init__(self, schedd):
        self.schedd, self.seen = schedd, []

    def _record(self, what, constraint, ads):
        ids = " ".join(f'"ClusterId": {ad.get("ClusterId")}' for ad in ads)
        self.seen.append(([what, str(constraint)], ids))
        return ads

    def query(self, constraint="true", projection=None, **kw):
        return self._record("query", constraint, self.schedd.query(constraint, projection or [], **kw))

    def history(self, constraint, projection=None, **kw):
        return self._record("history", constraint, list(self.schedd.history(constraint, projection or [], **kw)))

    def __getattr__(self, name):
        return getattr(self.schedd, name)


def test_htcondor_bindings_poll_our_jobs_only(trixie, tmp_path):  # noqa: F811 - the fixture
    pytest.importorskip("htcondor2")
    from resel.backends.htcondor.client import HTCondorBindings
    from resel.backends.pilotsite import PilotSite
    from resel.config import load_sites
    from trixie_helpers import condor_client, pool_site
    path = tmp_path / "sites.toml"
    # the bindings run here: the work directory by the path valid both here and inside the root
    path.write_text(pool_site(trixie, api="bindings", workdir=trixie.work_c_host))
    site = load_sites(path)[0]
    ssh = SSHTransport("tb-ap", ssh_config=trixie.trixie_ssh_config)
    run_key = f"r9-{uuid.uuid4().hex[:6]}"
    foreign = ap(trixie, "printf 'executable=/bin/sleep\\narguments=60\\nqueue\\n' | condor_submit -terse -").stdout
    foreign = foreign.split("-")[0].strip()
    ours = None
    try:
        with condor_client(trixie):
            import htcondor2
            schedd = RecordingSchedd(htcondor2.Schedd())
            b = HTCondorBindings(ssh, schedd=schedd)
            ps = PilotSite(site, ssh, b)
            ps.ship_agent()
            pdir = ps.make_pilot_dir(run_key, 0)
            ours = b.submit(ps.pilot_script(run_key, 0, 1, 120), name=ps.job_name(run_key, 0), cores=1,
                            walltime=120, workdir=pdir)
            ps.stop_pilot(run_key, 0, None)      # the agent stops at once: the job completes
            _check_poll(b, schedd.seen, ours, foreign, pdir)
    finally:
        ap(trixie, f"condor_rm {foreign} {ours or ''} >/dev/null 2>&1", check=False)
        ssh.close()
