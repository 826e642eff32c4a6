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
