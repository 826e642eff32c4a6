"""Limits and pending reasons on the live testbed (issue 18 item 3).

Cluster tbb keeps accounting (slurmdbd + MariaDB, scripts/testbed.sh) and enforces association
and QOS limits; its QOS ``resel-limit`` (MaxSubmitJobsPerUser=2, MaxJobsPerUser=1: testbed.env's
TB_LIMIT_QOS*) is used by these tests only, every other test submits under the unlimited default
QOS ``normal``. tba keeps none. Here:

* `resel plan --explain --json` and the limit reader read MaxSubmitPU/MaxJobsPU from tbb's real
  sacctmgr for a site that submits with that QOS; `resel run` sizes its pilots within them;
* a second job of the user waits with the pending reason QOSMaxJobsPerUserLimit, shown in
  `resel status --json` and by the limit reader, and a third is refused by sbatch itself;
* a job that left the queue is found through the real `sacct` (the poll's accounting path);
* a full tbb (another user's job holds its 4 CPUs) keeps resel's pilot pending; the reason
  Slurm gives (Resources or Priority) is what `resel status --json` shows for the site, and what
  `resel plan` reports for the user's pending jobs there;
* `sacctmgr` on a cluster without accounting (tba) gives no limits and says why (unknown, not zero);
* the HTCondor access point's per-owner knobs are read over SSH from the real schedd config.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from live_helpers import (bag_toml, cancel_leftovers, fill, run_keys_under, sites_toml, slurm, start, wait_for,
                          write_inputs)
from recorded import Recorded, Reply
from trixie_helpers import trixie  # noqa: F401 - the fixture
from resel.backends.connect import open_site
from resel.config import load_sites
from resel.live.site_limits import read_site


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_pending_reason_in_status_and_plan_on_a_full_cluster(tmp_path, testbed):
    from resel.cli import cli
    filler = fill(testbed, "b", 4, 60)
    try:
        sites = "[[site]]" + sites_toml(testbed).split("[[site]]")[2]        # tbb alone
        coord = start(tmp_path, sites, bag_toml(2, "echo hi"), strategy="model")
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "pending:p0" not in coord.views["tbb"].notes:
                coord.step(wait=True)
            said = coord.views["tbb"].notes.get("pending:p0")
            assert said is not None, coord.views["tbb"].notes
            reason = said.rsplit("(", 1)[1].rstrip(")")
            assert reason in ("Resources", "Priority"), said
            # resel status, from the store (another process would see the same)
            out = CliRunner().invoke(cli, ["status", str(coord.run_id), "--db", str(tmp_path / "resel.db"), "--json"])
            assert out.exit_code == 0, out.output
            doc = json.loads(out.output)
            tbb = next(s for s in doc["sites"] if s["site"] == "tbb")
            assert any(f"pending ({reason})" in n for n in tbb["notes"]), tbb
            # resel plan's reading of the site: the user's (reseltb's) pending pilot and why it waits
            [site] = load_sites(tmp_path / "sites.toml")
            found = read_site(site, open_site)
            assert found.jobs is not None and found.jobs >= 1
            assert sum(found.pending_reasons.values()) >= 1 and set(found.pending_reasons) <= {"Resources", "Priority"}
            # tbb keeps accounting; the user's default QOS (normal) and association have no limits
            assert found.notes == [] and found.limits.empty
        finally:
            coord.close()
    finally:
        slurm(testbed, "b", "scancel", filler, check=False)


def test_condor_per_owner_limits_read_from_the_access_point(trixie):  # noqa: F811
    from resel.backends.htcondor.client import HTCondorCLI
    from resel.backends.transport import SSHTransport
    tr = SSHTransport("tb-ap", ssh_config=trixie.trixie_ssh_config)
    try:
        lim, notes = HTCondorCLI(tr).limits()
    finally:
        tr.close()
    assert notes == []
    assert (lim.max_submit, lim.max_running) == (20000, 10000)      # HTCondor 23.9's defaults, as configured


def test_run_sizes_a_pool_within_its_schedd_limits(tmp_path, trixie, capsys):  # noqa: F811
    """What `resel run` does before it starts: the pool's real MAX_JOBS_RUNNING (10000) caps a
    per-task site that asked for 100000 pilots; a Slurm site without accounting is unchanged."""
    from trixie_helpers import pool_site
    from resel.cli.live import _within_limits
    path = tmp_path / "sites.toml"
    path.write_text(pool_site(trixie, pilots=100000) + "\n" + "[[site]]" + sites_toml(trixie).split("[[site]]")[1],
                    encoding="utf-8")
    sites = load_sites(path)
    from resel.cli import common as c
    from resel.domain import Bag, Profile
    kept = _within_limits(c, Bag("b", "true", 4, 1, Profile(1e9)), sites)
    by = {s.name: s for s in kept}
    assert by["pool"].pilot.max_pilots == 10000 and by["tba"].pilot == sites[1].pilot
    said = capsys.readouterr().err
    assert ("pool: limits: max_pilots 100000 → 20000 (schedd: MAX_JOBS_PER_SUBMISSION = 20000)\n"
            "pool: limits: max_pilots 20000 → 10000 (schedd: MAX_JOBS_RUNNING = MIN({24105, 10000}))") in said
    assert "tba: limits: no association limits" in said


# ------------------------------------------------------------------ accounting and QOS limits on tbb

def _limited_tbb(tb, *, mode: str = "per-task", max_pilots: int = 8) -> str:
    """tbb alone, submitting with the limits QOS (access.qos), in a sites file."""
    if not tb.limit_qos:
        pytest.fail("the testbed's env file names no limits QOS on tbb: scripts/testbed.sh up sets up "
                    "accounting and QOS resel-limit; see its output", pytrace=False)
    text = "[[site]]" + sites_toml(tb, b={"qos": tb.limit_qos}).split("[[site]]")[2]
    policy = f'mode = "{mode}", max_pilots = {max_pilots}' if mode == "per-task" else 'mode = "single", max_cores = 4'
    return text.replace('mode = "single", max_cores = 4', policy)


def _user_cli(tb, transport, qos: str | None = None):
    from resel.backends.slurm.cli import SlurmCLI
    return SlurmCLI(transport, env={"SLURM_CONF": tb.slurm_conf_b}, qos=qos)


def _resel(*args, timeout: float = 120):
    import subprocess
    import sys
    from live_helpers import REPO
    return subprocess.run([sys.executable, "-m", "resel.cli", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def test_plan_explain_reads_the_qos_limits_from_the_real_sacctmgr(tmp_path, testbed):
    """MaxSubmitPU and MaxJobsPU of the site's QOS, as sacctmgr on tbb has them, size the pilots:
    8 wanted → 2 (MaxSubmitPU) → 1 (MaxJobsPU), said in the plan's explanation."""
    sites, bag = tmp_path / "sites.toml", tmp_path / "bag.toml"
    sites.write_text(_limited_tbb(testbed), encoding="utf-8")
    bag.write_text(bag_toml(4, "echo hi"), encoding="utf-8")
    sub, run = testbed.limit_qos_max_submit, testbed.limit_qos_max_jobs
    [site] = load_sites(sites)
    found = read_site(site, open_site)
    assert found.notes == [] and (found.limits.max_submit, found.limits.max_running) == (sub, run)
    assert found.limits.why == {"max_submit": f"QOS {testbed.limit_qos}: MaxSubmitPU={sub}",
                                "max_running": f"QOS {testbed.limit_qos}: MaxJobsPU={run}"}
    res = _resel("plan", bag, "--sites", sites, "--explain", "--json")
    assert res.returncode == 0, res.stderr
    [row] = json.loads(res.stdout)["sites"]
    assert row["limits"]["limits"]["max_submit"] == sub and row["limits"]["limits"]["max_running"] == run
    assert row["limits"]["changes"] == [f"max_pilots 8 → {sub} (QOS {testbed.limit_qos}: MaxSubmitPU={sub})",
                                        f"max_pilots {sub} → {run} (QOS {testbed.limit_qos}: MaxJobsPU={run})"]
    assert row["explain"]["verdict"] == "chosen"
    assert any(w.startswith("pilots sized within the site's limits: max_pilots 8 → 2") for w in row["explain"]["why"])


def test_run_sizes_its_pilots_within_the_qos_and_sacct_lists_them(tmp_path, testbed):
    """`resel run` on the limited site: at most MaxJobsPU pilots, said on stderr; the bag
    completes, and tbb's real sacct lists the run's pilots under the QOS, ended."""
    sites, bag = write_inputs(tmp_path, _limited_tbb(testbed), bag_toml(4, "echo $RESEL_TASK"))
    res = _resel("run", bag, "--sites", sites, "--db", tmp_path / "resel.db", "--poll", "0.3", "--json", "--no-progress")
    assert res.returncode == 0, res.stderr
    q, sub, run = testbed.limit_qos, testbed.limit_qos_max_submit, testbed.limit_qos_max_jobs
    assert (f"tbb: limits: max_pilots 8 → {sub} (QOS {q}: MaxSubmitPU={sub})\n"
            f"tbb: limits: max_pilots {sub} → {run} (QOS {q}: MaxJobsPU={run})\n") in res.stderr
    snap = json.loads(res.stdout)
    assert snap["done"] == 4 and snap["status"] == "done"
    key = next(iter(run_keys_under(tmp_path)))
    rows = wait_for_rows(testbed, key)
    assert rows and all(r["qos"] == q for r in rows), rows
    assert len(rows) <= run or _never_overlapping(rows), rows        # never more than MaxJobsPU at once


def wait_for_rows(tb, run_key: str) -> list[dict]:
    """The run's pilots as tbb's sacct lists them once ended (it records a job's end at once)."""
    from live_helpers import wait_for

    def rows():
        out = slurm(tb, "b", "sacct", "-X", "-n", "-P", "-a", "-S", "now-1hours", "-o",
                    "JobID,JobName,QOS,State,Start,End").stdout
        got = [dict(zip(("id", "name", "qos", "state", "start", "end"), ln.split("|")))
               for ln in out.splitlines() if f"|resel-{run_key}-" in ln]
        return got if got and all(r["end"] not in ("", "Unknown") for r in got) else None

    return wait_for(rows, timeout=20) or []


def _never_overlapping(rows: list[dict]) -> bool:
    spans = sorted((r["start"], r["end"]) for r in rows)
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_second_job_waits_for_the_qos_and_a_third_is_refused(tmp_path, testbed):
    """The user (reseltb) already runs one job under the QOS: resel's pilot is submitted (room
    for MaxSubmitPU=2) but waits with QOSMaxJobsPerUserLimit, shown by `resel status --json` and
    by the limit reader, which then finds no room left (blocked); a third job is refused by sbatch
    with QOSMaxSubmitJobPerUserLimit, through the real submit path."""
    from resel.backends.slurm.formats import SchedulerError
    from resel.backends.transport import SSHTransport
    from resel.cli import cli
    from resel.live.site_limits import within_limits
    text = _limited_tbb(testbed, mode="single")
    tr = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    user = _user_cli(testbed, tr, qos=testbed.limit_qos)
    holder = None
    try:
        holder = user.submit("#!/bin/sh\nsleep 90\n", name="limit-holder", cores=1, walltime=120,
                             workdir=testbed.work_b)
        assert wait_for(lambda: (j := user.jobs([holder]).get(holder)) and j.native == "RUNNING", timeout=30)
        coord = start(tmp_path, text, bag_toml(2, "echo hi"), strategy="model")
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "pending:p0" not in coord.views["tbb"].notes:
                coord.step(wait=True)
            said = coord.views["tbb"].notes.get("pending:p0")
            assert said is not None and said.endswith("(QOSMaxJobsPerUserLimit)"), coord.views["tbb"].notes
            out = CliRunner().invoke(cli, ["status", str(coord.run_id), "--db", str(tmp_path / "resel.db"), "--json"])
            assert out.exit_code == 0, out.output
            tbb = next(s for s in json.loads(out.output)["sites"] if s["site"] == "tbb")
            assert any("pending (QOSMaxJobsPerUserLimit)" in n for n in tbb["notes"]), tbb
            # what `resel plan` reads of the site now: 2 jobs (1 running), 1 waiting for the QOS, no room
            [site] = load_sites(tmp_path / "sites.toml")
            found = read_site(site, open_site)
            assert (found.jobs, found.running) == (2, 1), found
            assert found.pending_reasons == {"QOSMaxJobsPerUserLimit": 1}
            within_limits(site, found)
            assert found.blocked == (f"no pilot may be submitted: QOS {testbed.limit_qos}: "
                                     f"MaxSubmitPU={testbed.limit_qos_max_submit}, 2 job(s) already there")
            with pytest.raises(SchedulerError) as refused:
                user.submit("#!/bin/sh\ntrue\n", name="limit-third", cores=1, walltime=60, workdir=testbed.work_b)
            assert "QOSMaxSubmitJobPerUserLimit" in str(refused.value) and "max_pilots" in str(refused.value)
        finally:
            coord.close()
    finally:
        if holder:
            user.cancel([holder])
        tr.close()


def test_a_job_that_left_the_queue_is_polled_through_sacct(testbed):
    """tbb keeps accounting: the poll of a job squeue no longer lists reads its end from sacct.
    Slurm forgets an ended job after MinJobAge (60 s on the testbed); rather than wait, squeue's
    real reply for a forgotten job ("Invalid job id specified", as recorded from this Slurm) is
    played back, and sacct is the real one."""
    from resel.backends.transport import SSHTransport
    tr = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    try:
        cli = _user_cli(testbed, tr)
        jid = cli.submit("#!/bin/sh\nexit 3\n", name="sacct-probe", cores=1, walltime=60, workdir=testbed.work_b)
        assert wait_for(lambda: (j := cli.jobs([jid]).get(jid)) and j.state.final, timeout=30)
        # slurmdbd's record is whole a moment after the end (just after, 22.05's sacct --json
        # may still show a partial one: name "allocation", no partition)
        rec = wait_for(lambda: (j := cli.accounting([jid]).get(jid)) and j.name == "sacct-probe" and j, timeout=20)
        assert rec and rec.native == "FAILED" and rec.partition == "debug" and cli.accounting_enabled is True
        gone = "slurm_load_jobs error: Invalid job id specified\n"

        fake = Recorded({"squeue": Reply("", gone, 1)}, inner=tr)    # squeue has forgotten every job
        polled = _user_cli(testbed, fake).jobs([jid])
        got = polled[jid]
        assert (got.native, got.state.final, got.name, got.user, got.time_limit) == ("FAILED", True, "sacct-probe",
                                                                                    testbed.user, 60.0)
        assert got.end is not None and got.end >= got.start
        assert [c[0] for c in fake.calls] == ["squeue", "sacct"]
    finally:
        tr.close()
