"""The Slurm backends against the newer Slurms Debian packages, each test once per Debian root of
the testbed (the fixture ``root``; tests/trixie_helpers.py): Slurm 24.11 (Debian 13's 24.11.5,
cluster ``tbc``, scripts/testbed-trixie.sh) and Slurm 26.05 (Debian sid's 26.05.5, cluster
``tbd``, scripts/testbed-sid.sh); 4 CPUs, partition debug, each.

* the CLI backend over SSH to the root's access point (``tb-ap``, user reselap), where
  ``sinfo --json`` and ``squeue --json`` answer in the release's default data_parser layout
  (``meta.plugin.data_parser``: v0.0.42 in 24.11, v0.0.45 in 26.05), and in each older one it
  still serves (``--json=v0.0.44``);
* the slurmrestd backend (127.0.0.1:6821 for tbc, 6822 for tbd) with a JWT, through each API
  version that slurmrestd serves (v0.0.40-v0.0.42 in 24.11, v0.0.42-v0.0.45 in 26.05; v0.0.38 is
  gone from both), and with "auto";
* ``resel sites check``/``status`` and a whole ``resel run`` through each.

Every job is cancelled in a ``finally``; reselap's jobs on tbc and tbd belong to these tests alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from resel.backends.slurm import formats as fmt
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.slurm.rest import SlurmREST
from resel.backends.transport import SSHTransport
from resel.errors import SchedulerError

from live_helpers import bag_toml, start, write_inputs
from trixie_helpers import RELEASES, ap, done_once, release, remove_leftovers, reselap_jobs, results, root, tbc_site, wait_for  # noqa: F401

SLEEP = "#!/bin/sh\nsleep {s}\n"


def tag() -> str:
    return f"resel-t-{uuid.uuid4().hex[:6]}"


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


def token(tb) -> str:
    return Path(tb.rest_token_file_c).read_text().strip()


def rest(tb, version: str = "auto") -> SlurmREST:
    return SlurmREST(tb.rest_url_c, tb.rest_user_c, token(tb), api_version=version)


def idle(cli, cores: int) -> None:
    assert wait_for(lambda: cli.availability().free_cores >= cores, timeout=60), \
        f"tbc did not get {cores} free cores: {cli.jobs()}"


def state_of(cli, jid: str, want: str):
    return wait_for(lambda: (j := cli.jobs([jid]).get(jid)) and j.native == want and j, timeout=30)


def test_cli_over_ssh_reads_the_default_data_parser(root, ssh):
    rel = release(root)
    raw = json.loads(ap(root, "sinfo --json").stdout)
    assert fmt.json_layout(raw) == rel.data_parser               # meta.plugin (singular) since 24.11
    assert fmt.slurm_release(raw) == root.slurm_version_c and root.slurm_version_c.startswith(rel.slurm + ".")
    # the partitions' flags (DEFAULT) are back in v0.0.45 (26.05's default); without them, the
    # default comes from scontrol's text
    assert {n: m.default for n, m in fmt.parse_sinfo_json(raw)[0].items()} == {
        "debug": rel.data_parser.removeprefix("data_parser/") in rel.flagged}
    for parser in rel.cli_older:                # each older layout sinfo still takes (--json=v0.0.44)
        doc = json.loads(ap(root, f"sinfo --json={parser}").stdout)
        metas, nodes = fmt.parse_sinfo_json(doc)
        assert fmt.json_layout(doc) == f"data_parser/{parser}" and [(n.name, n.total) for n in nodes] == [(root.host, 4)]
        assert {n: (m.default, m.max_time) for n, m in metas.items()} == {"debug": (parser in rel.flagged, 4 * 3600.0)}
    cli = SlurmCLI(ssh)
    assert cli.version() == root.slurm_version_c
    av = cli.availability()
    assert (av.scheduler, av.version, av.total_cores) == ("slurm", root.slurm_version_c, 4)
    assert [(p.name, p.default, p.max_time, p.total_cpus) for p in av.partitions] == [("debug", True, 4 * 3600.0, 4)]
    assert cli.json == {"sinfo": True, "squeue": True, "sacct": True}    # no text fallback was needed
    assert cli.scheduler_policy() == "conservative"
    cpu = cli.cpu_info()
    assert cpu["cpus"] and cpu["model"]
    assert cli.accounting(["1"]) == {} and cli.accounting_enabled is False   # AccountingStorageType=none


def test_cli_and_rest_see_the_same_queue_of_a_full_cluster(root, ssh):
    """A 4-core job fills the cluster, a 2-core job waits behind it: states, the backfill estimate
    (the big job's end: start + its 2-minute limit), --test-only, and the twin's snapshot, through
    the CLI and through slurmrestd (its newest API version), job by job."""
    cli = SlurmCLI(ssh)
    idle(cli, 4)
    big = small = None
    try:
        big = cli.submit(SLEEP.format(s=120), name=tag(), cores=4, walltime=120, workdir=root.work_c)
        job = state_of(cli, big, "RUNNING")
        assert job and (job.cpus, job.time_limit, job.user, job.partition) == (4, 120.0, root.trixie_user, "debug")
        small = cli.submit(SLEEP.format(s=5), name=tag(), cores=2, walltime=60, workdir=root.work_c)
        # the reason is "None" until the scheduler has looked at the job
        waiting = wait_for(lambda: (j := cli.jobs([small]).get(small)) and j.native == "PENDING" and j.reason and j)
        assert waiting and waiting.reason in ("Resources", "Priority"), cli.jobs([small])
        est = wait_for(lambda: cli.start_estimates([small])[small], timeout=20)
        assert est is not None and abs(est - (job.start + 120)) <= 10, (est, job.start)
        assert cli.test_only(2, 60) >= job.start + 120 - 10
        av = cli.availability()
        assert (av.free_cores, av.running_jobs, av.pending_jobs) == (0, 1, 1)
        snap = cli.queue_snapshot()
        assert [(j.job_id, j.cores, j.time_limit) for j in snap.running] == [(big, 4, 120.0)]
        assert [(j.job_id, j.cores) for j in snap.pending] == [(small, 2)]
        rel = release(root)
        r = rest(root, rel.rest[-1])
        rsnap = r.queue_snapshot()
        assert [(j.job_id, j.cores, j.time_limit) for j in rsnap.running] == [(big, 4, 120.0)]
        assert [(j.job_id, j.cores) for j in rsnap.pending] == [(small, 2)]
        # the default is assumed (and the note says so) only where /partitions has no flags
        assumed = any("only partition, debug, taken as the default" in n for n in rsnap.notes)
        assert assumed == (rel.rest[-1] not in rel.flagged) and rsnap.site == "debug", rsnap.notes
        assert r.start_estimates([small])[small] == pytest.approx(est, abs=10)
        cli.cancel([big, small])
        assert state_of(cli, big, "CANCELLED") and state_of(cli, small, "CANCELLED")
        cli.cancel([big, small])                                  # already gone: fine
    finally:
        ids = [j for j in (big, small) if j]
        if ids:
            cli.cancel(ids)


@pytest.mark.parametrize("root, version", [(s, v) for s, rel in RELEASES.items() for v in rel.rest],
                         indirect=["root"])
def test_rest_each_api_version_submits_lists_cancels(root, ssh, version):
    r = rest(root, version)
    assert r.version() == root.slurm_version_c
    av = r.availability()
    assert (av.scheduler, av.total_cores) == ("slurmrest", 4)
    assert [(p.name, p.default) for p in av.partitions] == [("debug", True)]
    idle(r, 1)
    name = tag()
    out = f"{root.work_c}/{name}.out"
    jid = r.submit("#!/bin/sh\necho \"$SLURM_JOB_NAME on $(hostname)\"\nsleep 30\n", name=name, cores=1,
                   walltime=60, workdir=root.work_c, output=out)
    try:
        job = state_of(r, jid, "RUNNING")
        assert job and (job.name, job.cpus, job.user, job.time_limit) == (name, 1, root.trixie_user, 60.0)
        assert int(jid) >= release(root).first_job                   # the cluster's job ids
        assert wait_for(lambda: ap(root, f"cat {out}", check=False).stdout.strip() == f"{name} on {root.host}")
        r.cancel([jid])
        assert state_of(r, jid, "CANCELLED")
        r.cancel([jid])
    finally:
        r.cancel([jid])


def test_rest_auto_picks_the_newest_served_version_and_old_ones_say_why(root):
    newest = release(root).rest[-1]
    r = rest(root)
    assert r.version() == root.slurm_version_c and r.api_version == newest
    with pytest.raises(SchedulerError) as err:
        rest(root, "v0.0.38").version()                         # served by 22.05, gone since 24.11
    assert "not found" in str(err.value) and "v0.0.38" in (err.value.hint or "")
    # a wrong token still gets /ping answered (24.11 and 26.05 ping without asking slurmctld as
    # the user), so "auto" settles on the newest version; the first real query is refused (HTTP
    # 511, error 1007 "Protocol authentication error") and the message says to renew the token
    bad = SlurmREST(root.rest_url_c, root.rest_user_c, "not-a-token", api_version="auto")
    with pytest.raises(SchedulerError) as err:
        bad.availability()
    assert bad.api_version == newest
    assert "authentication" in str(err.value) and "token" in (err.value.hint or ""), err.value


def _sites(tb) -> str:
    return tbc_site(tb, "tbc-cli") + "\n" + tbc_site(tb, "tbc-rest", api="rest")


def test_sites_check_and_status_on_tbc(tmp_path, root):
    sites = tmp_path / "sites.toml"
    sites.write_text(_sites(root))
    for cmd in ("check", "status"):
        done = subprocess.run([sys.executable, "-m", "resel.cli", "sites", cmd, "--sites", str(sites), "--json"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        rows = {r["site"]: r for r in json.loads(done.stdout)["sites"]}
        assert set(rows) == {"tbc-cli", "tbc-rest"}
        for name, row in rows.items():
            assert row["error"] is None, (cmd, row)
            assert (row["version"], row["total_cores"]) == (root.slurm_version_c, 4), row
        assert rows["tbc-rest"]["scheduler"] == "slurmrest" and rows["tbc-cli"]["scheduler"] == "slurm"
        if cmd == "check":
            assert rows["tbc-cli"]["reachable"] and rows["tbc-cli"]["start_estimate_s"] is not None
            assert rows["tbc-rest"]["start_estimate_s"] is None              # slurmrestd has no --test-only
            assert [p["default"] for p in rows["tbc-rest"]["partitions"]] == [True]


@pytest.mark.parametrize("api", ["cli", "rest"])
def test_a_bag_runs_on_tbc(tmp_path, root, api):
    """A whole `resel run` of 8 tasks on the root's Slurm: pilots through the CLI over SSH or
    through slurmrestd, task files over SFTP; every task once, in the agents' own result files."""
    workdir = f"{root.work_c}/run-{api}"
    coord = start(tmp_path, tbc_site(root, api=api, workdir=workdir),
                  bag_toml(8, "echo task $RESEL_TASK on $(hostname)"), strategy="model")
    coord.run(max_time=150)
    coord.close()
    run = coord.db["runs"].get(coord.run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", 8, 0)
    recs = results(root, workdir, coord.run_key)
    assert done_once(recs) == {i: 1 for i in range(8)}
    assert {r["stdout_tail"].strip() for r in recs} == {f"task {i} on {root.host}" for i in range(8)}
    jobs = {r["job_id"] for r in coord.db.query("select job_id from live_pilots where run_id = ?", [coord.run_id])}
    assert jobs and all(int(j) >= release(root).first_job for j in jobs)
    if api == "rest":
        assert coord.psites["tbc"].scheduler.api_version == release(root).rest[-1]     # negotiated


def test_pyslurm_from_pypi_fits_neither_root(root):
    """PyPI's pyslurm is built for Slurm 25.11 (25.11.0, 25.11.2) and no Debian suite packages
    25.11, so it fits neither root's Slurm: the guard refuses it against the real version and
    names the one that would work (the adapter itself never runs here)."""
    from resel.backends.slurm.pyslurm import PySlurmUnavailable, SlurmPySlurm

    class FromPyPI:
        __version__ = "25.11.2"

    series = release(root).slurm.split(".")
    wanted = f"{series[0]}.{int(series[1])}"                      # "24.11" -> pyslurm 24.11.x, "26.05" -> 26.5.x
    with pytest.raises(PySlurmUnavailable, match=rf"built for Slurm 25\.11, but the cluster runs Slurm "
                                                 rf"{root.slurm_version_c}; only pyslurm {wanted}\.x works"):
        SlurmPySlurm(slurm_version=root.slurm_version_c, module=FromPyPI())
