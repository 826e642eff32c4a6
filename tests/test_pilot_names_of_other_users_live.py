"""Another user's job named as one of our pilots is not taken for it.

Pilot names are public (every user's ``squeue``/``qstat`` lists them) and predictable
(``resel-RUNKEY-pN``, N counting up). Before each submission resel looks its pilot up by name
(a pilot submitted before a crash is not submitted again); through slurmrestd (``GET /jobs``)
and PBS (``qstat -f``) that lookup saw every user's jobs, so another user's held job named
``resel-RUNKEY-p1`` was taken for our pilot 1: resel submitted none and waited on theirs, and
at the run's end tried to cancel their jobs as ours. Through Slurm's CLI (``--me``) and
HTCondor's (``condor_q``: the user's own) only the user's own jobs were seen; pyslurm and
the HTCondor bindings (``Schedd.query`` with no owner) saw everyone's too, and now keep the
user's own (``DefaultMyJobsOnly`` for the bindings: checked live by test_htcondor_live.py's
name lookup of our own pilot; no second submitter on the pool's access point here).

A real held job of a second real user on the testbed's cluster A, cancelled after.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from live_helpers import held_job_of, slurm
from resel.backends.connect import open_site
from resel.config import load_sites
from test_other_users import Users, users  # noqa: F401 - the module's fixture, reused

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to submit as a second real user")


def site_file(tmp_path: Path, testbed, kind: str) -> Path:
    access = (f'api = "rest", rest_url = "{testbed.rest_url}", rest_user = "{testbed.rest_user}", '
              f'rest_token_file = "{testbed.rest_token_file}", ' if kind == "rest" else "")
    path = tmp_path / f"sites-{kind}.toml"
    path.write_text('[[site]]\nname = "a"\nkind = "' + ("slurm" if kind == "rest" else "pbs") + '"\ncores = 2\n'
                    'clock = { base = 2.0 }\npilot = { mode = "single", max_cores = 2, walltime = 300 }\n'
                    f'access = {{ transport = "local", workdir = "{tmp_path / "work"}", {access}'
                    f'env = {{ SLURM_CONF = "{testbed.slurm_conf_a}" }} }}\n')
    path.chmod(0o600)
    return path


@needs_root
@pytest.mark.parametrize("kind", ["rest", "pbs"])
def test_another_users_job_named_as_our_next_pilot_is_not_taken_for_it(testbed, users: Users, tmp_path, kind):
    run_key = f"r7-{uuid.uuid4().hex[:6]}"
    theirs = held_job_of(testbed, users.other, f"resel-{run_key}-p1")
    try:
        ps = open_site(load_sites(site_file(tmp_path, testbed, kind))[0])
        assert ps.find_pilot_job(run_key, 1) is None
        assert theirs not in ps.run_jobs(run_key)
    finally:
        slurm(testbed, "a", "scancel", theirs, check=False)


def test_pyslurm_s_name_lookup_keeps_the_user_s_own_jobs():
    """libslurm (pyslurm) lists every user's jobs, as GET /jobs does: a name lookup keeps this
    user's own. pyslurm cannot be installed here (PyPI has no build for these clusters' Slurm),
    so its ``Jobs.load()`` is stood in by the two attributes the lookup reads, the names as
    pyslurm 22.5 gives them."""
    import pwd

    from resel.backends.slurm.pyslurm import SlurmPySlurm
    me = pwd.getpwuid(os.geteuid()).pw_name

    class Job:
        def __init__(self, user: str) -> None:
            self.name, self.user_name, self.state = "resel-r7-abcdef-p1", user, "PENDING"

    class PySlurm:
        __version__ = "22.5.0"

        class Jobs:
            @staticmethod
            def load():
                return {41: Job("mallory"), 42: Job(me)}
    slurm = SlurmPySlurm(slurm_version="22.05.8", module=PySlurm())
    assert set(slurm.jobs(name_prefix="resel-r7-abcdef-p1")) == {"42"}
    assert set(slurm.jobs()) == {"41", "42"}            # the queue snapshot still sees everyone's
