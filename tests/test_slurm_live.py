"""The Slurm backends against the real testbed (scripts/testbed.sh): Slurm 22.05, cluster
``tba`` (8 CPUs, partitions debug* and short) reached locally, cluster ``tbb`` (4 CPUs) over
SSH as ``reseltb``, and tba's slurmrestd with a JWT.

Every job submitted here is cancelled in a ``finally``. The test_only/backfill test fills
cluster A for a minute of *walltime*, but cancels the filler as soon as it has looked.
"""

from __future__ import annotations

import getpass
import time
import uuid

import pytest
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.slurm.formats import SchedulerError
from resel.backends.slurm.pyslurm import PySlurmUnavailable, SlurmPySlurm
from resel.backends.slurm.rest import SlurmREST
from resel.backends.transport import LocalTransport, SSHTransport

from live_helpers import wait_for
from recorded import Recorded, Reply
from resel.errors import TransportError

SLEEP = "#!/bin/bash\nsleep {s}\n"


def tag() -> str:
    return f"resel-t-{uuid.uuid4().hex[:6]}"


def cli_a(tb, **kw) -> SlurmCLI:
    return SlurmCLI(LocalTransport(), env={"SLURM_CONF": tb.slurm_conf_a}, **kw)


def idle(cli: SlurmCLI, cores: int) -> None:
    """Wait until ``cores`` are free: jobs of an earlier live test may still be draining."""
    assert wait_for(lambda: cli.availability().free_cores >= cores, timeout=90, every=1.0), \
        f"cluster A did not get {cores} free cores: {cli.jobs()}"


def running(cli: SlurmCLI, jid: str):
    return wait_for(lambda: (j := cli.jobs([jid]).get(jid)) and j.native == "RUNNING" and j)


class Rewritten:
    """The real transport, with some words of every argv replaced (an option Slurm refuses)."""

    def __init__(self, inner, words: dict[str, str]):
        self.inner, self.words = inner, words

    def run(self, argv, **kw):
        return self.inner.run([self.words.get(w, w) for w in argv], **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_availability_on_both_clusters(testbed):
    a = cli_a(testbed).availability()
    assert a.scheduler == "slurm" and a.version.startswith("22.05")
    assert a.total_cores == 8
    assert {p.name: p.default for p in a.partitions} == {"debug": True, "short": False}
    assert {p.name: p.max_time for p in a.partitions} == {"debug": 4 * 3600, "short": 600}
    ssh = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    try:
        b = SlurmCLI(ssh, env={"SLURM_CONF": testbed.slurm_conf_b})
        av = b.availability()
        assert av.total_cores == 4 and [p.name for p in av.partitions] == ["debug"]
        cpu = b.cpu_info()
        assert cpu["cpus"] and cpu["model"]
    finally:
        ssh.close()
    short = cli_a(testbed, partition="short").availability()
    assert [p.name for p in short.partitions] == ["short"] and short.total_cores == 8


def test_submit_list_cancel_and_no_accounting(testbed):
    cli = cli_a(testbed)
    name = tag()
    jid = None
    try:
        idle(cli, 2)
        jid = cli.submit(SLEEP.format(s=30), name=name, cores=2, walltime=90, workdir=testbed.work_a)
        job = running(cli, jid)
        assert job, cli.jobs([jid])
        assert (job.name, job.cpus, job.time_limit, job.partition) == (name, 2, 120.0, "debug")
        assert job.submit and job.user == getpass.getuser()
        assert job.start and job.end == job.start + 120
        assert set(cli.jobs(name_prefix=name[:-2])) >= {jid}
        assert cli.jobs(name_prefix="no-such-") == {}
        assert cli.start_estimates([jid]) == {jid: None}           # running: nothing to estimate
        av = cli.availability()
        assert av.free_cores <= 6 and av.running_jobs >= 1
        # the testbed keeps no accounting: {} and remembered, sacct is not asked again
        rec = Recorded({}, inner=LocalTransport())
        quiet = SlurmCLI(rec, env={"SLURM_CONF": testbed.slurm_conf_a})
        assert quiet.accounting([jid]) == {} and quiet.accounting_enabled is False
        assert quiet.accounting([jid]) == {}
        assert sum(c[0] == "sacct" for c in rec.calls) == 1
        cli.cancel([jid])
        gone = wait_for(lambda: cli.jobs([jid]).get(jid, None) is None
                        or cli.jobs([jid])[jid].native == "CANCELLED")
        assert gone
        cli.cancel([jid])                                          # already gone: fine
    finally:
        if jid:
            cli.cancel([jid])


def test_test_only_now_when_idle_later_when_full(testbed):
    cli = cli_a(testbed)
    idle(cli, 8)
    now = time.time()
    assert abs(cli.test_only(2, 60) - now) < 30
    filler = waiting = None
    try:
        filler = cli.submit(SLEEP.format(s=60), name=tag(), cores=8, walltime=120, workdir=testbed.work_a)
        job = running(cli, filler)
        assert job and job.end
        later = cli.test_only(2, 60)
        assert later >= job.end - 5, (later, job.end)
        waiting = cli.submit(SLEEP.format(s=1), name=tag(), cores=2, walltime=60, workdir=testbed.work_a)
        est = wait_for(lambda: cli.start_estimates([waiting])[waiting], timeout=10)
        assert est is not None and est >= job.end - 5
        av = cli.availability()
        assert av.free_cores == 0 and av.pending_jobs >= 1
    finally:
        cli.cancel([j for j in (filler, waiting) if j])


def test_unknown_partition_and_refused_jobs(testbed):
    with pytest.raises(SchedulerError, match="partition nope not found; the site has: debug, short"):
        cli_a(testbed, partition="nope").availability()
    with pytest.raises(SchedulerError, match="not a valid Slurm partition"):
        cli_a(testbed, partition="a b")
    cli = cli_a(testbed)
    with pytest.raises(SchedulerError, match="no node in the partition has that many cores"):
        cli.test_only(100, 60)
    # sbatch itself refuses an unknown partition (availability() is not asked first here)
    with pytest.raises(SchedulerError, match="Invalid partition name specified.*`partition`"):
        cli_a(testbed, partition="nope").submit(SLEEP.format(s=1), name=tag(), cores=1, walltime=60,
                                                workdir=testbed.work_a)
    with pytest.raises(SchedulerError, match="one line"):
        cli.submit("x", name="a\nb", cores=1, walltime=60, workdir=testbed.work_a)
    with pytest.raises(SchedulerError, match="positive whole number"):
        cli.test_only(0, 60)


def test_out_of_quota_reply_through_submit(testbed):
    """tba has no QOS limits (no slurmdbd), so the real recorded refusal is played back by the
    transport; everything else — argv, parsing, the message — is the real path. (tbb refuses for
    real: tests/test_limits_live.py.)"""
    said = ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: "
            "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)\n")
    rec = Recorded({"sbatch": Reply("", said, 1)}, inner=LocalTransport())
    cli = SlurmCLI(rec, env={"SLURM_CONF": testbed.slurm_conf_a}, partition="debug", account="acct", qos="normal")
    with pytest.raises(SchedulerError) as err:
        cli.submit(SLEEP.format(s=1), name="resel-x", cores=3, walltime=61, workdir=testbed.work_a)
    assert "Job violates accounting/QOS policy" in str(err.value) and "max_pilots" in str(err.value)
    assert rec.calls[-1] == ["sbatch", "--parsable", "--job-name=resel-x", "--ntasks=1", "--cpus-per-task=3",
                             "--time=2", "--partition=debug", "--account=acct", "--qos=normal", "--no-requeue",
                             f"--chdir={testbed.work_a}"]


def test_text_fallback_when_json_is_refused(testbed):
    """Real refusals: '--json' is rewritten to an option Slurm does not know, so sinfo and
    squeue answer "unrecognized option" and the backend switches to text, once."""
    rec = Recorded({}, inner=Rewritten(LocalTransport(), {"--json": "--jsonx"}))
    cli = SlurmCLI(rec, env={"SLURM_CONF": testbed.slurm_conf_a})
    jid = None
    try:
        jid = cli.submit(SLEEP.format(s=20), name=tag(), cores=1, walltime=60, workdir=testbed.work_a)
        av = cli.availability()
        assert cli.json["sinfo"] is False and cli.json["squeue"] is False
        assert av.total_cores == 8 and av.version.startswith("22.05")
        assert {p.name: (p.default, p.max_time) for p in av.partitions} == {
            "debug": (True, 14400.0), "short": (False, 600.0)}
        job = wait_for(lambda: cli.jobs([jid]).get(jid))
        assert job.cpus == 1 and job.time_limit == 60 and job.submit
        refusals = sum("--json" in c for c in rec.calls)          # each sent as --jsonx
        cli.availability()
        assert sum("--json" in c for c in rec.calls) == refusals     # remembered
        # and a site forced to text from the start gives the same picture as JSON
        forced = cli_a(testbed, use_json=False).availability()
        js = cli_a(testbed).availability()
        def shape(av):
            return [(p.name, p.state, p.default, p.max_time, p.total_cpus, p.nodes) for p in av.partitions]
        assert shape(forced) == shape(js) and forced.total_cores == js.total_cores == 8
    finally:
        if jid:
            cli.cancel([jid])


def test_ssh_cluster_submit_and_cancel(testbed):
    ssh = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    cli = SlurmCLI(ssh, env={"SLURM_CONF": testbed.slurm_conf_b})
    jid = None
    try:
        jid = cli.submit(SLEEP.format(s=30), name=tag(), cores=2, walltime=60, workdir=testbed.work_b,
                         output=f"{testbed.work_b}/slurm-live-%j.out")
        job = running(cli, jid)
        assert job and job.user == testbed.user and job.cpus == 2
        cli.cancel([jid])
        assert wait_for(lambda: cli.jobs([jid]).get(jid) is None or cli.jobs([jid])[jid].native == "CANCELLED")
    finally:
        if jid:
            cli.cancel([jid])
        ssh.close()


def rest(tb, **kw) -> SlurmREST:
    with open(tb.rest_token_file) as f:
        token = f.read().strip().removeprefix("SLURM_JWT=")
    return SlurmREST(tb.rest_url, tb.rest_user, token, **kw)


def test_rest_availability_submit_jobs_cancel(testbed):
    r = rest(testbed)
    assert r.version().startswith("22.05")
    av = r.availability()
    assert av.scheduler == "slurmrest" and av.total_cores == 8
    assert {p.name for p in av.partitions} == {"debug", "short"}
    quick = long = None
    try:
        quick = r.submit("#!/bin/bash\nsleep 1\n", name=tag(), cores=1, walltime=60, workdir="/tmp")
        long = r.submit(SLEEP.format(s=30), name=tag(), cores=2, walltime=60, workdir="/tmp")
        seen = r.jobs([quick, long])
        assert set(seen) == {quick, long} and seen[long].cpus == 2 and seen[long].user == testbed.rest_user
        r.cancel([long])
        assert wait_for(lambda: r.jobs([long])[long].native == "CANCELLED")
        r.cancel([long])                                               # already ended: fine
        assert r.test_only(1, 60) is None
    finally:
        r.cancel([j for j in (quick, long) if j])
    with pytest.raises(SchedulerError, match="partition nope not found"):
        rest(testbed, partition="nope").availability()
    # Slurm 22.05 queues a job above the partition's MaxTime but says it cannot run (2015):
    # resel cancels it rather than leave a pilot that never starts
    short = rest(testbed, partition="short")
    name = tag()
    with pytest.raises(SchedulerError, match="queued it as job (\\d+) anyway; it was cancelled") as err:
        short.submit(SLEEP.format(s=1), name=name, cores=1, walltime=3600, workdir="/tmp")
    leftover = [j for j in r.jobs(name_prefix=name).values() if j.native not in ("CANCELLED",)]
    assert leftover == [], (str(err.value), leftover)


def test_rest_errors_are_clear(testbed):
    with pytest.raises(SchedulerError, match="token"):
        SlurmREST(testbed.rest_url, testbed.rest_user, "not-a-token").availability()
    with pytest.raises(SchedulerError, match="may not serve API v0.0.99"):
        rest(testbed, api_version="v0.0.99").version()
    with pytest.raises(TransportError, match="cannot reach slurmrestd"):
        SlurmREST("http://127.0.0.1:1", "u", "t").version()


def test_pyslurm_guard_names_the_versions_that_work(testbed):
    version = cli_a(testbed).version()
    with pytest.raises(PySlurmUnavailable, match=r"pyslurm 22\.5\.x|pyslurm==22\.5"):
        SlurmPySlurm(slurm_version=version)

    class Newest:                       # what PyPI has: built for another Slurm
        __version__ = "25.11.0"

    with pytest.raises(PySlurmUnavailable, match=r"built for Slurm 25\.11, but the cluster runs Slurm "
                                                 r"22\.05\.\d+; only pyslurm 22\.5\.x works"):
        SlurmPySlurm(slurm_version=version, module=Newest())
