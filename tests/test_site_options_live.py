"""Site options, setup and per-site commands on the live testbed (issue 18 item 4).

A bag of real tasks on tba (local) and tbb (over SSH): tba's pilots carry an extra sbatch option
(``--comment``) that Slurm itself must show in ``scontrol show job``, both sites run a setup line
whose exported variable the tasks print, and the bag runs its own command on tba and the default
one on tbb. Every check reads what really happened: Slurm's view of the job and the agents'
result files.
"""

from __future__ import annotations

import uuid

import pytest

from live_helpers import agents_results, bag_toml, cancel_leftovers, our_jobs, sites_toml, slurm, start
from trixie_helpers import trixie  # noqa: F401 - the fixture


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_sbatch_option_setup_and_site_command_reach_slurm_and_the_tasks(tmp_path, testbed):
    mark = uuid.uuid4().hex[:8]
    sites = sites_toml(testbed,
                       a={"sbatch_options": [f"--comment=resel-siteopts-{mark}"],
                          "setup": [f"export RESEL_T_MARK=a-{mark}", "RESEL_T_UNSEEN=1"]},
                       b={"setup": [f"export RESEL_T_MARK=b-{mark}"]})
    bag = bag_toml(8, 'echo "default site=$RESEL_SITE mark=$RESEL_T_MARK unseen=${RESEL_T_UNSEEN:-}"')
    bag = bag.replace("\n\n[bag.profile]", '\n\n[bag.site_commands]\ntba = "echo \\"tba-command site=$RESEL_SITE '
                                          'mark=$RESEL_T_MARK\\""\n\n[bag.profile]')
    coord = start(tmp_path, sites, bag, strategy="topk:2")
    coord.run(max_time=180)
    coord.close()
    assert coord.db["runs"].get(coord.run_id)["done"] == 8
    outs = [r["stdout_tail"].strip() for r in agents_results(testbed, coord.run_key) if r.get("outcome") == "done"]
    assert len(outs) == 8 and set(outs) <= {f"tba-command site=tba mark=a-{mark}",
                                            f"default site=tbb mark=b-{mark} unseen="}, outs
    assert {o.split()[1] for o in outs} == {"site=tba", "site=tbb"}, outs     # both sites ran tasks
    # tba's pilot: Slurm shows the extra option (scontrol keeps a finished job for MinJobAge, 300 s)
    jobs = [p["job_id"] for p in coord.db.query("select job_id from live_pilots where run_id = ? and site = 'tba'",
                                                 [coord.run_id])]
    assert jobs
    shown = slurm(testbed, "a", "scontrol", "show", "job", jobs[0]).stdout
    assert f"Comment=resel-siteopts-{mark}" in shown, shown
    assert our_jobs(testbed, coord.run_key) == []


def test_htcondor_submit_line_and_setup_reach_the_pool(tmp_path, trixie):  # noqa: F811
    """The testbed's HTCondor pool: a submit line (request_memory) the schedd keeps in the job
    ad, and a setup line the chirp wrapper runs before the agent, whose export the task prints
    in its slot (a nobody-owned scratch directory: nothing shared with the access point)."""
    from trixie_helpers import ap, done_once, pool_site, results
    mark = uuid.uuid4().hex[:8]
    workdir = f"{trixie.work_c}/siteopts-{mark}"
    site = pool_site(trixie, workdir=workdir, pilots=2).replace(
        "access = { ", f'access = {{ submit_lines = {{ request_memory = "300MB" }}, '
                      f'setup = ["export RESEL_T_MARK=pool-{mark}"], ', 1)
    coord = start(tmp_path, site, bag_toml(2, 'echo "mark=$RESEL_T_MARK"'), strategy="model")
    try:
        coord.run(max_time=240)
        coord.close()
        run = coord.db["runs"].get(coord.run_id)
        assert (run["status"], run["done"]) == ("done", 2), run
        recs = results(trixie, workdir, coord.run_key)
        assert done_once(recs) == {0: 1, 1: 1}
        assert {r["stdout_tail"].strip() for r in recs} == {f"mark=pool-{mark}"}
        job = next(iter(coord.db.query("select job_id from live_pilots where run_id = ?", [coord.run_id])))["job_id"]
        said = ap(trixie, f"condor_history {job} -limit 1 -af RequestMemory; condor_q {job} -af RequestMemory",
                  check=False).stdout
        assert "300" in said, said
    finally:     # only this run's pilots: the pool's user is shared by every test session
        jobs = [r["job_id"] for r in coord.db.query("select job_id from live_pilots where run_id = ? and job_id "
                                                     "is not null", [coord.run_id])]
        if jobs:
            ap(trixie, "condor_rm " + " ".join(jobs) + " >/dev/null 2>&1", check=False)


def test_qsub_options_and_setup_on_the_torque_wrappers(tmp_path, testbed):
    """tbb as a PBS site (Torque dialect: Debian's slurm-wlm-torque qsub over SSH): an extra qsub
    option (-m n) is accepted by the real qsub, and the setup's export reaches the tasks."""
    mark = uuid.uuid4().hex[:8]
    sites = sites_toml(testbed, kind_b="pbs",
                       b={"workdir": "~/resel-work-pbs", "dialect": "torque", "qsub_options": ["-m", "n"],
                          "setup": [f"export RESEL_T_MARK=pbs-{mark}"]})
    sites = "[[site]]" + sites.split("[[site]]")[2]            # tbb alone
    coord = start(tmp_path, sites, bag_toml(3, 'echo "mark=$RESEL_T_MARK"'), strategy="model")
    coord.run(max_time=180)
    coord.close()
    assert coord.db["runs"].get(coord.run_id)["done"] == 3
    outs = [r["stdout_tail"].strip() for r in agents_results(testbed, coord.run_key, "/home/reseltb/resel-work-pbs")
            if r.get("outcome") == "done"]
    assert outs == [f"mark=pbs-{mark}"] * 3, outs
