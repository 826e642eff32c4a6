"""Helpers for the tests on the Debian parts of the testbed (scripts/testbed-trixie.sh): in the
Debian 13 root, Slurm 24.11 cluster ``tbc`` and an HTCondor 23.9 pool; in the Debian sid root
(scripts/testbed-sid.sh), Slurm 26.05 cluster ``tbd`` and an HTCondor 25 pool; each behind its
access point's sshd (alias ``tb-ap`` in the root's own ssh config, user ``reselap``, who exists
only inside the roots).

The fixture ``trixie`` is the Debian 13 root; ``root`` runs a test once on each root (a module's
tests on trixie first, then on sid), as a view of the testbed whose trixie fields hold that root's
values (tests/testbed.py), with what Debian packages there in :data:`RELEASES`.

Paths: ``tb.work_c`` is reselap's work directory as a login on the access point sees it;
``tb.work_c_host`` is the same directory from this machine (the root's cache folder + work_c),
which is also a valid path inside the root (the root links its own cache path to its top), so
the htcondor2 bindings can run here as if on the access point.
"""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_files import run_records
from live_helpers import _inline
from waiting import poll


@dataclass(frozen=True)
class Release:
    """What a Debian root runs, as Debian packages it (checked live by the tests that use it)."""

    debian: str
    skip: str               # the variable that leaves the root out of the testbed when 0
    script: str             # the script that builds it
    slurm: str              # the Slurm series (sinfo --version: "slurm 24.11.5")
    data_parser: str        # the CLI's --json layout by default (meta.plugin.data_parser)
    cli_older: tuple[str, ...]  # the older layouts its sinfo/squeue take (--json=v0.0.44), oldest first
    rest: tuple[str, ...]   # the API versions slurmrestd serves, oldest first
    flagged: tuple[str, ...]  # the data_parser versions whose partitions carry their flags (DEFAULT)
    condor: str             # the HTCondor series (condor_version: "23.9.6" is in "23.9")
    first_job: int          # the cluster's FirstJobId


RELEASES = {
    "trixie": Release("Debian 13", "RESEL_TB_TRIXIE", "scripts/testbed-trixie.sh", "24.11", "data_parser/v0.0.42",
                      ("v0.0.40", "v0.0.41"), ("v0.0.40", "v0.0.41", "v0.0.42"), (), "23.9", 900000),
    "sid": Release("Debian sid", "RESEL_TB_SID", "scripts/testbed-sid.sh", "26.05", "data_parser/v0.0.45",
                   ("v0.0.42", "v0.0.43", "v0.0.44"), ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), ("v0.0.45",),
                   "25", 2000000),
}
SUITES = tuple(RELEASES)


def root_of(testbed, suite: str):
    """The testbed seen through one Debian root; fails, never skips, unless its variable is 0."""
    view = testbed.debian_root(suite)
    if view is None:
        rel = RELEASES[suite]
        if os.environ.get(rel.skip) == "0":
            pytest.skip(f"{rel.skip}=0: the {rel.debian} part of the testbed (Slurm {rel.slurm}, HTCondor "
                        f"{rel.condor}) is left out")
        pytest.fail(f"the testbed's env file has no {rel.debian} part: {rel.script} did not run; "
                    "`scripts/testbed.sh up` runs it", pytrace=False)
    return view


@pytest.fixture(scope="session")
def trixie(testbed):
    """The testbed, with its Debian 13 part up (fails, never skips, unless RESEL_TB_TRIXIE=0)."""
    return root_of(testbed, "trixie")


@pytest.fixture(scope="module", params=SUITES)
def root(request, testbed):
    """Each Debian root in turn (fails, never skips, unless its RESEL_TB_* variable is 0)."""
    return root_of(testbed, request.param)


def release(tb) -> Release:
    """What the root a view describes runs."""
    return RELEASES[tb.debian_suite]


@pytest.fixture
def ap_ssh(root):
    """resel's own SSH transport to the access point of the ``root`` in use (closed after)."""
    from resel.backends.transport import SSHTransport
    t = SSHTransport("tb-ap", ssh_config=root.trixie_ssh_config)
    yield t
    t.close()


@pytest.fixture
def no_job_left_behind(root):
    """Use it (``pytestmark = pytest.mark.usefixtures(...)``) to remove every reselap job that
    appeared in the ``root``'s pool or cluster while the test ran (remove_leftovers)."""
    before = reselap_jobs(root)
    yield
    remove_leftovers(root, before)


def ap(tb, command: str, *, check: bool = True, input: str | None = None, timeout: float = 60
       ) -> subprocess.CompletedProcess:
    """One shell command on the access point as reselap, over the testbed's ssh config."""
    done = subprocess.run(["ssh", "-F", tb.trixie_ssh_config, "tb-ap", command], input=input,
                          stdin=None if input is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"on the access point: {command!r} exited {done.returncode}: {done.stderr or done.stdout}")
    return done


def condor_env(tb) -> dict[str, str]:
    """What an htcondor2 client on this machine needs to reach the pool: no local config, the
    collector's address, and reselap's IDTOKEN."""
    return {"CONDOR_CONFIG": "/dev/null", "_CONDOR_COLLECTOR_HOST": tb.condor_collector,
            "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS": "IDTOKENS",
            "_CONDOR_SEC_TOKEN_DIRECTORY": tb.condor_token_dir}


@contextmanager
def condor_client(tb):
    """os.environ set for htcondor2 and its configuration reloaded (it is read once, when the
    module is first imported); both restored after."""
    import htcondor2
    saved = {k: os.environ.get(k) for k in condor_env(tb)}
    os.environ.update(condor_env(tb))
    htcondor2.reload_config()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        htcondor2.reload_config()


def pool_site(tb, name: str = "pool", *, api: str = "cli", workdir: str | None = None, pilots: int = 4,
              walltime: float = 300, clock: float = 2.0) -> str:
    """An HTCondor site on the access point: single-core per-task pilots (the OSG way)."""
    acc = {"transport": "ssh", "host": "tb-ap", "ssh_config": tb.trixie_ssh_config,
           "workdir": workdir or "~/resel-work", "api": api}
    return (f'[[site]]\nname = "{name}"\nkind = "htcondor"\ncores = 4\nclock = {{ base = {clock} }}\n'
            f'pilot = {{ mode = "per-task", max_cores = 1, max_pilots = {pilots}, walltime = {walltime} }}\n'
            f"access = {_inline(acc)}\n")


def tbc_site(tb, name: str = "tbc", *, api: str = "cli", workdir: str = "~/resel-work", walltime: float = 300,
             clock: float = 2.0) -> str:
    """Cluster tbc (Slurm 24.11, 4 CPUs): the CLI over SSH, or slurmrestd with files over SSH."""
    acc = {"transport": "ssh", "host": "tb-ap", "ssh_config": tb.trixie_ssh_config, "workdir": workdir}
    if api == "rest":
        acc.update(api="rest", rest_url=tb.rest_url_c, rest_user=tb.rest_user_c, rest_token_file=tb.rest_token_file_c)
    return (f'[[site]]\nname = "{name}"\nkind = "slurm"\ncores = 4\nclock = {{ base = {clock} }}\n'
            f'pilot = {{ mode = "single", max_cores = 4, walltime = {walltime} }}\n'
            f"access = {_inline(acc)}\n")


def host_path(tb, path: str) -> Path:
    """A path on the access point (absolute, inside the root) as seen from this machine."""
    return Path(tb.trixie_root + path)


def results(tb, workdir: str, run_key: str) -> list[dict]:
    """The agents' result records of a run, read from the access point's disk."""
    return run_records(host_path(tb, workdir).joinpath(run_key))     # waves and per-key files alike


def done_once(records: list[dict]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for rec in records:
        if rec["outcome"] == "done":
            counts[rec["task"]] = counts.get(rec["task"], 0) + 1
    return counts


def reselap_jobs(tb) -> set[str]:
    """The ids of every job reselap has in the pool (``c.p``) and on tbc (``tbc:N``)."""
    done = ap(tb, "condor_q -af:, ClusterId ProcId 2>/dev/null; echo --; squeue -h -o %i 2>/dev/null",
              check=False)
    pool, _, tbc = done.stdout.partition("--")
    ids = {".".join(p.strip() for p in ln.split(",")) for ln in pool.splitlines() if ln.strip()}
    return ids | {f"tbc:{ln.strip()}" for ln in tbc.splitlines() if ln.strip()}


def remove_leftovers(tb, before: set[str]) -> None:
    """Remove reselap's jobs that appeared while the test ran (``before``: those there when it
    started), so a failed test leaves nothing to slow down the next one — and a job another
    session had queued before this test began is never touched (the testbed is shared)."""
    new = sorted(reselap_jobs(tb) - before)
    pool = [j for j in new if not j.startswith("tbc:")]
    tbc = [j.removeprefix("tbc:") for j in new if j.startswith("tbc:")]
    if pool:
        ap(tb, "condor_rm " + " ".join(pool) + " >/dev/null 2>&1", check=False)
    if tbc:
        ap(tb, "scancel " + " ".join(tbc) + " >/dev/null 2>&1", check=False)


def wait_for(check, timeout: float = 30.0, every: float = 0.5):
    """``check()``'s first truthy value, or its last one (the caller asserts on it)."""
    return poll(check, timeout, every)


def idle_pool(tb, cli, timeout: float = 180.0):
    """Wait until the pool has all its cores free and no job running; the availability then.
    A failure names every slot's state and every job in the queue (removed ones included): a
    core taken with no job in the queue (a claim held or a slot still vacating) shows there."""
    av = wait_for(lambda: (a := cli.availability()).free_cores == a.total_cores and a.running_jobs == 0 and a,
                  timeout=timeout, every=1.0)
    if not av:
        slots = ap(tb, "condor_status -af Name State Activity Cpus RemoteOwner JobId EnteredCurrentState",
                   check=False).stdout
        queue = ap(tb, "condor_q -allusers -af ClusterId ProcId JobStatus JobBatchName EnteredCurrentStatus",
                   check=False).stdout
        pytest.fail(f"the pool was not idle within {timeout:g} s: {cli.availability()}\n"
                    f"slots (Name State Activity Cpus RemoteOwner JobId EnteredCurrentState):\n{slots}"
                    f"queue (ClusterId ProcId JobStatus JobBatchName EnteredCurrentStatus):\n{queue}"
                    f"at {time.time():.0f}")
    return av
