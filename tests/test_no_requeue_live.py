"""Pilots are submitted so that the scheduler never requeues or reruns them (issue 13 §0b):
a requeued pilot starts a new agent on its predecessor's half-done attempts. The site option
``requeue = true`` asks for the scheduler's default back.

Checked on the testbed with the scheduler's own view (``scontrol show job``: ``Requeue=0``,
and ``scontrol requeue`` refused) for sbatch, slurmrestd and Slurm's qsub wrapper (the PBS
client's ``-r n``); HTCondor's equivalent is a periodic_remove clause, checked in the submit
description.
"""

from __future__ import annotations

import re
import uuid

import pytest

from live_helpers import slurm, wait_for
from resel.backends.htcondor.client import periodic_remove, pilot_description
from resel.backends.pbs.cli import PBSCLI
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.slurm.rest import SlurmREST
from resel.backends.transport import LocalTransport

SLEEP = "#!/bin/sh\nsleep 30\n"


def _requeue_flag(tb, job: str) -> str:
    out = slurm(tb, "a", "scontrol", "show", "job", job).stdout
    return re.search(r"\bRequeue=(\d)", out).group(1)


def _name() -> str:
    return f"resel-t-{uuid.uuid4().hex[:6]}-p0"


def _rest(tb, **kw) -> SlurmREST:
    with open(tb.rest_token_file) as f:
        token = f.read().strip().removeprefix("SLURM_JWT=")
    return SlurmREST(tb.rest_url, tb.rest_user, token, **kw)


@pytest.mark.parametrize("requeue, flag", [(False, "0"), (True, "1")])
def test_sbatch_pilot_is_not_requeueable_unless_the_site_asks(testbed, requeue, flag):
    cli = SlurmCLI(LocalTransport(), env={"SLURM_CONF": testbed.slurm_conf_a}, requeue=requeue)
    job = cli.submit(SLEEP, name=_name(), cores=1, walltime=60, workdir=testbed.work_a, output="/dev/null")
    try:
        assert _requeue_flag(testbed, job) == flag
        if not requeue:
            assert wait_for(lambda: cli.jobs([job])[job].native == "RUNNING", timeout=30)
            refused = slurm(testbed, "a", "scontrol", "requeue", job, check=False)
            assert refused.returncode != 0 and "disabled" in (refused.stderr + refused.stdout)
    finally:
        cli.cancel([job])


@pytest.mark.parametrize("requeue, flag", [(False, "0"), (True, "1")])
def test_slurmrestd_pilot_is_not_requeueable_unless_the_site_asks(testbed, requeue, flag):
    rest = _rest(testbed, requeue=requeue)
    job = rest.submit(SLEEP, name=_name(), cores=1, walltime=60, workdir="/tmp")
    try:
        assert _requeue_flag(testbed, job) == flag
    finally:
        rest.cancel([job])


@pytest.mark.parametrize("rerun, flag", [(False, "0"), (True, "1")])
def test_qsub_pilot_is_not_rerunnable_unless_the_site_asks(testbed, rerun, flag, tmp_path):
    """PBSCLI passes ``-r n`` (``-r y`` with requeue = true); Slurm's qsub wrapper turns it into
    sbatch's --no-requeue, which the controller shows."""
    import os
    wd = os.path.join(testbed.work_a, "pbs-live", uuid.uuid4().hex[:8])
    os.makedirs(wd, exist_ok=True)
    cli = PBSCLI(LocalTransport(), env={"SLURM_CONF": testbed.slurm_conf_a}, dialect="torque", rerunnable=rerun)
    job = cli.submit(SLEEP, name=_name(), cores=1, walltime=60, workdir=wd)
    try:
        assert _requeue_flag(testbed, job.split(".")[0]) == flag
    finally:
        cli.cancel([job])


def test_htcondor_pilot_is_removed_instead_of_rerun_unless_the_site_asks():
    """HTCondor has no "no requeue" switch: an evicted job goes back to idle with NumJobStarts
    > 0, and the pilot's periodic_remove ends it there (the coordinator asks for a new pilot)."""
    rerun_clause = "(JobStatus == 1 && NumJobStarts > 0)"
    assert periodic_remove(600).endswith(" || " + rerun_clause)
    assert rerun_clause not in periodic_remove(600, requeue=True)
    desc = pilot_description(name="resel-r1-abcdef-p0", pilot_dir="/ap/p0", agent="/ap/resel-agent.py",
                             wrapper="/ap/sync.py", python="python3", agent_args=[], walltime=600, requeue=True,
                             agent_sha256="0" * 64)
    assert rerun_clause not in desc["periodic_remove"]
