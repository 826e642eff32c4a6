"""Another user's job name is theirs to choose, newlines included, and squeue's text form prints
it as it is. Before, on a site read in text form (a Slurm without ``--json``), another user's
job named ``x<newline>…`` made the queue snapshot ``resel plan`` reads (every user's queued
jobs) fail ("expected 12 '|'-separated fields, got 2"); with the rest of the name a whole job
line, it could try to pass off a job of its own making. The snapshot needs no names: it asks for none.
Slurm's ``qstat -f`` wrapper (a PBS site) printed it too, and every pilot lookup by name (made
before each submission) failed on "not 'key = value'": a line that is no attribute continues the
value before it.

A real job of a second real user on the testbed's cluster A (``sbatch --hold``, cancelled after).
"""

from __future__ import annotations

import os

import pytest

from live_helpers import held_job_of, slurm
from resel.backends.pbs.cli import PBSCLI
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.transport import LocalTransport
from test_other_users import Users, users  # noqa: F401 - the module's fixture, reused

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to submit as a second real user")

#: a job line of resel's text format, for a job that does not exist
FORGED = "999999|resel-forged|COMPLETED|1|0|0|0|1|None|root|debug|1"


def test_another_users_job_name_with_newlines_is_read_as_their_jobs_name(testbed, users: Users):
    jid = held_job_of(testbed, users.other, f"evil\n{FORGED}\nend")
    try:
        cli = SlurmCLI(LocalTransport(), env={"SLURM_CONF": testbed.slurm_conf_a}, use_json=False)
        jobs = cli._queue_jobs()                   # every user's queued jobs, squeue's text form
        assert jobs[jid].user == users.other.name and "999999" not in jobs
        assert cli.queue_snapshot() is not None                  # what resel plan reads
        # a PBS site through Slurm's qstat wrapper (as the testbed's): qstat -f prints the name
        # as it is too, and the pilot lookup before each submission read every user's jobs
        pbs = PBSCLI(LocalTransport(), env={"SLURM_CONF": testbed.slurm_conf_a}, dialect="torque")
        assert pbs.jobs(name_prefix="resel-r0-000000-p") == {}
        assert jid in pbs._all_jobs() and "999999" not in pbs._all_jobs()
    finally:
        slurm(testbed, "a", "scancel", jid, check=False)
