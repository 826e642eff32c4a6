"""PBSCLI (Torque dialect) against real commands: Debian's slurm-wlm-torque wrappers (qsub,
qstat, qdel, pbsnodes over Slurm 22.05) on the testbed's cluster ``tba`` (one node, 8 CPUs,
queues debug and short).

Every job submitted here is cancelled in a ``finally``; the jobs sleep a few seconds at most.
"""

from __future__ import annotations

import os
import shutil
import uuid

import pytest
from resel.backends.pbs.cli import PBSCLI
from resel.backends.transport import LocalTransport

from live_helpers import wait_for
from resel.errors import SchedulerError

SLEEP = "#!/bin/sh\n# a resel live test job\npwd\nsleep {s}\n"


def tag() -> str:
    return f"resel-t-{uuid.uuid4().hex[:6]}-p0"


def cli_a(tb, **kw) -> PBSCLI:
    return PBSCLI(LocalTransport(), env={"SLURM_CONF": tb.slurm_conf_a}, **kw)


@pytest.fixture
def wd(testbed):
    """A fresh work directory on cluster A's shared filesystem, removed afterwards."""
    path = os.path.join(testbed.work_a, "pbs-live", uuid.uuid4().hex[:8])
    os.makedirs(path, exist_ok=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def idle(cli: PBSCLI, cores: int) -> None:
    """Wait until ``cores`` are free: jobs of an earlier live test may still be draining."""
    assert wait_for(lambda: cli.availability().free_cores >= cores, timeout=90, every=1.0), \
        f"cluster A did not get {cores} free cores: {cli.jobs()}"


def test_dialect_version_and_availability(testbed):
    cli = cli_a(testbed)                                   # dialect="auto"
    assert cli.dialect == "torque" and cli.flavour == "slurm-torque"
    assert cli.version().startswith("slurm-torque-wrapper 22.05")
    av = cli.availability()
    assert (av.scheduler, av.total_cores) == ("torque", 8)
    assert 0 <= av.free_cores <= 8
    byname = {p.name: p for p in av.partitions}
    assert set(byname) == {"debug", "short"}
    assert (byname["debug"].max_time, byname["short"].max_time) == (4 * 3600.0, 600.0)
    assert byname["debug"].state == "UP" and byname["debug"].total_cpus == 8
    short = cli_a(testbed, queue="short", dialect="torque").availability()
    assert [p.name for p in short.partitions] == ["short"] and short.total_cores == 8
    with pytest.raises(SchedulerError, match="queue nosuch not found"):
        cli_a(testbed, queue="nosuch", dialect="torque").availability()
    assert cli.test_only(2, 60) is None
    assert cli.cpu_info()["cpus"]


def test_submit_list_finish_and_cancel(testbed, wd):
    cli = cli_a(testbed, dialect="torque")
    name = tag()
    quick = long = None
    try:
        idle(cli, 3)
        quick = cli.submit(SLEEP.format(s=1), name=name, cores=2, walltime=60, workdir=wd, output="pilot.out")
        assert quick.isdigit()
        seen = cli.jobs([quick])[quick]
        assert (seen.name, seen.cpus, seen.time_limit, seen.partition) == (name, 2, 60.0, "debug")
        assert seen.state in ("pending", "running", "done")
        assert set(cli.jobs(name_prefix=name[:-3])) >= {quick}       # resel's pilot-name lookup
        assert cli.jobs(name_prefix="no-such-") == {}
        done = wait_for(lambda: (j := cli.jobs([quick]).get(quick)) and j.state == "done" and j, timeout=20)
        assert done and done.start and done.end and done.end >= done.start
        # the script ran in the work directory (the `cd` submit put in), its output where asked
        with open(os.path.join(wd, "pilot.out")) as out:
            assert out.read().splitlines()[0] == wd
        assert not [f for f in os.listdir(wd) if f.endswith(".qsub.sh")]   # the script file is removed
        long = cli.submit(SLEEP.format(s=30), name=tag(), cores=1, walltime=60, workdir=wd)
        running = wait_for(lambda: (j := cli.jobs([long]).get(long)) and j.state == "running" and j)
        assert running, cli.jobs([long])
        cli.cancel([long])
        ended = wait_for(lambda: cli.jobs([long]).get(long) is None or cli.jobs([long])[long].state == "done")
        assert ended
        cli.cancel([long])                                           # already gone: fine
        cli.cancel([quick])
    finally:
        for jid in (quick, long):
            if jid:
                cli.cancel([jid])


def test_refusals_carry_the_sites_words(testbed, wd):
    with pytest.raises(SchedulerError) as info:
        cli_a(testbed, queue="nosuch", dialect="torque").submit(SLEEP.format(s=1), name=tag(), cores=1,
                                                                walltime=60, workdir=wd)
    err = info.value
    assert "Invalid partition name specified" in str(err) and "qstat -Q" in err.hint
    assert err.command.startswith("qsub -N ")
    cli = cli_a(testbed, dialect="torque")
    with pytest.raises(SchedulerError):
        cli.submit("x", name="a b", cores=1, walltime=60, workdir=wd)
    with pytest.raises(SchedulerError):
        cli.submit("x", name="ok", cores=0, walltime=60, workdir=wd)
    assert cli.jobs(["999999999"]) == {}
    cli.cancel(["999999999"])                                        # unknown job: nothing to do
