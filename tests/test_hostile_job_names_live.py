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
import pwd
import subprocess
import time

import pytest

from live_helpers import held_job_of, slurm
from waiting import wait_until
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


#: a line of sacct's text form (``sacct -P -n -o`` resel's fields) for a job that does not exist
FORGED_SACCT = "999998|resel-forged|COMPLETED|0|1|2|00:00:01|1|0:0|1|root|debug|None"


def test_another_users_job_name_with_newlines_does_not_steer_the_accounting_history(testbed):
    """``resel history fetch`` reads every user's jobs from accounting (``sacct -a -X``), and a
    site without ``--json`` answers in text: the name of another real user's finished job on tbb
    (which keeps accounting) must neither break that reply nor add a job of its own making.
    Before, ``sacct -P`` printed the name as it is: its lines were read as a job 999998 of
    root's, or the reply failed ("expected 13 '|'-separated fields").

    The other user is the testbed's own (``reseltb``): tbb enforces associations, and its
    slurmctld takes no association added while it runs ("Update Association request from
    non-super user"), so a user made for the test could not submit there.
    """
    other = pwd.getpwnam(testbed.user)
    done = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--init-groups",
                           "sbatch", "--parsable", "-o", "/dev/null", f"--job-name=evil\n{FORGED_SACCT}\nend",
                           "--wrap", "true"], capture_output=True, text=True, cwd="/tmp", timeout=60,
                          env={"PATH": "/usr/bin:/bin", "SLURM_CONF": testbed.slurm_conf_b})
    assert done.returncode == 0, done.stderr
    jid = done.stdout.strip().split(";")[0]
    try:
        cli = SlurmCLI(LocalTransport(), env={"SLURM_CONF": testbed.slurm_conf_b}, use_json=False)
        jobs: dict = {}

        def recorded() -> bool:      # sacct -E now leaves out a job that ended this very second
            jobs.update(cli.history(time.time() - 3600))
            return jid in jobs
        wait_until(recorded, 30, f"job {jid} in tbb's accounting history", every=1)
        assert jid in jobs and jobs[jid].user == other.pw_name and jobs[jid].start is not None
        assert "999998" not in jobs
    finally:
        slurm(testbed, "b", "scancel", jid, check=False)
