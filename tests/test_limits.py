"""The user's limits per site (issue 18 item 3): readers on real scheduler output
(tests/data/limits/README.md says where each file comes from), and pilots sized within them.

Expected values are read off the captures by hand (the column each number sits in), not from
the parser; the sizing rule is checked against its definition in resel/live/site_limits.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from resel.backends import limit_formats as lf
from resel.domain import Clock, PilotPolicy, Site
from resel.errors import SchedulerReplyError
from resel.live.site_limits import SiteLimits, within_limits

DATA = Path(__file__).parent / "data" / "limits"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "formats"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- Slurm


def test_qos_capture_limits_by_hand():
    rows = lf.parse_sacctmgr(text("sacctmgr_qos_thaisc.txt"))
    assert [r["Name"] for r in rows] == ["normal", "proj0104", "thaisc", "proj0102", "tutorial", "proj0120", "devel"]
    # proj0104: MaxTRESPA=cpu=1000 (column 13), MaxJobsPA=100 (17), MaxJobsAccruePA=10 (18, not a job limit)
    lim = lf.slurm_qos_limits(rows, "proj0104")
    assert (lim.max_submit, lim.max_running, lim.max_cores, lim.max_cores_per_job, lim.max_walltime) == \
        (None, 100, 1000, None, None)
    assert lim.why["max_running"] == "QOS proj0104: MaxJobsPA=100"
    assert lim.why["max_cores"] == "QOS proj0104: MaxTRESPA=cpu=1000"
    # proj0102 adds MaxSubmitPU=0 (column 22): nobody may submit under it
    assert lf.slurm_qos_limits(rows, "proj0102").max_submit == 0
    # normal sets nothing; an unknown QOS gives no limits either
    assert lf.slurm_qos_limits(rows, "normal").empty and lf.slurm_qos_limits(rows, "nosuch").empty
    assert lf.slurm_qos_limits(rows, "devel").max_cores == 2000


def test_assoc_capture_rows_of_the_user_and_their_qos():
    rows = lf.parse_sacctmgr(text("sacctmgr_assoc_thaisc.txt"))
    lim, qos = lf.slurm_assoc_limits(rows, "ichatnun")
    assert lim.empty and qos == ["pre0001"]                 # Def QOS first, then the QOS list
    lim, qos = lf.slurm_assoc_limits(rows, "nobody-here")
    assert lim.empty and qos == []


def test_assoc_limits_in_the_real_column_layout():
    """The capture's header with values set in its MaxJobs/MaxSubmit/MaxWall/MaxTRES/GrpTRES
    columns (no public capture has an association with limits: CONSTRUCTED values)."""
    header = text("sacctmgr_assoc_thaisc.txt").splitlines()[0]
    cols = header.split("|")
    row = dict.fromkeys(cols, "")
    row.update({"ID": "9", "User": "me", "Account": "proj", "Cluster": "tara", "Share": "1", "MaxJobs": "4",
                "MaxSubmit": "6", "MaxWall": "2-00:00:00", "MaxTRES": "cpu=64,mem=128G", "GrpTRES": "cpu=128",
                "QOS": "normal,long", "Def QOS": "long"})
    other = dict(row, Account="other", MaxSubmit="3", MaxWall="12:00:00", QOS="normal", **{"Def QOS": ""})
    out = header + "\n" + "\n".join("|".join(r[c] for c in cols) for r in (row, other)) + "\n"
    rows = lf.parse_sacctmgr(out)
    lim, qos = lf.slurm_assoc_limits(rows, "me")          # both accounts: the tighter of each
    assert (lim.max_running, lim.max_submit, lim.max_walltime, lim.max_cores_per_job, lim.max_cores) == \
        (4, 3, 12 * 3600.0, 64, 128)
    assert lim.why["max_submit"] == "association other/me: MaxSubmit=3" and qos == ["long", "normal"]
    lim, _ = lf.slurm_assoc_limits(rows, "me", account="proj")
    assert (lim.max_submit, lim.max_walltime) == (6, 2 * 86400.0)


def test_sacctmgr_p_with_trailing_pipe_and_errors():
    out = "Cluster|Account|User|Partition|MaxJobs|\nbrc|fc_x|me|savio3|5|\n"
    assert lf.parse_sacctmgr(out) == [{"Cluster": "brc", "Account": "fc_x", "User": "me", "Partition": "savio3",
                                       "MaxJobs": "5"}]
    with pytest.raises(SchedulerReplyError, match="header"):
        lf.parse_sacctmgr(text("sacctmgr_assoc_no_dbd_tba.stderr"))
    with pytest.raises(SchedulerReplyError, match="line 2: 2 fields"):
        lf.parse_sacctmgr("User|Account|MaxJobs\nme|x\n")
    assert lf.tres_cpus("billing=22222") is None and lf.tres_cpus("mem=1G,cpu=8") == 8


# ---------------------------------------------------------------------------- PBS


def test_pbs_pro_queue_text_metacentrum():
    queues = lf.pbs_queues_text(text("qstat_Q_f_metacentrum.txt"))
    attrs = queues["gpu_long"]
    assert attrs["state_count"].endswith("Begun:0")          # the wrapped line joined
    lim = lf.pbs_queue_limits(attrs, "gpu_long", "user123")
    assert (lim.max_submit, lim.max_running, lim.max_cores, lim.max_walltime, lim.max_cores_per_job) == \
        (2000, None, 200, 336 * 3600.0, None)
    assert lim.why["max_submit"] == "queue gpu_long: max_queued = [u:PBS_GENERIC=2000]"


@pytest.mark.parametrize("value, user, want", [
    ("[u:PBS_GENERIC=100]", "alice", 100),
    ("[u:PBS_GENERIC=4],[u:alice=99]", "alice", 99),        # the named entry is alice's, in any order
    ("[u:alice=64],[u:PBS_GENERIC=8]", "alice", 64),
    ("[u:alice=64],[u:PBS_GENERIC=8]", "bob", 8),
    ("[o:PBS_ALL=50],[u:PBS_GENERIC=80]", "bob", 50),       # everybody's cap bounds bob too
    ('[u:"user with spaces"=15]', "user with spaces", 15),
    ("[g:GROUP=10]", "bob", None),                          # a group's: not known to be bob's
    ("12", "bob", 12),                                      # old style
    ("[u:banned=0],[u:PBS_GENERIC=5]", "banned", 0),
])
def test_pbs_limit_entries(value, user, want):
    assert lf.pbs_limit_value(value, user) == want


def test_pbs_pro_json_queue_recorded_and_constructed():
    rec = json.loads((SHARED / "pbs" / "ssh_qstat_partitions_command.json").read_text())
    workq = json.loads(rec["stdout"])["Queue"]["workq"]
    assert lf.pbs_queue_limits(workq, "workq", "firesrv").empty          # the recorded queue sets none
    # CONSTRUCTED: metacentrum's attributes in OpenPBS's -F json shape (nested resources_max)
    constructed = dict(workq, max_queued="[u:PBS_GENERIC=2000]", max_run="[u:PBS_GENERIC=60]",
                       resources_max={"walltime": "24:00:00", "ncpus": 4}, max_run_res={"ncpus": "[u:PBS_GENERIC=200]"})
    lim = lf.pbs_queue_limits(constructed, "workq", "me")
    assert (lim.max_submit, lim.max_running, lim.max_walltime, lim.max_cores_per_job, lim.max_cores) == \
        (2000, 60, 86400.0, 4, 200)


# ---------------------------------------------------------------------------- HTCondor


def test_condor_config_val_recorded_on_the_testbed_pool():
    blocks = {}
    for chunk in text("condor_config_val_trixie.txt").split("== condor_config_val ")[1:]:
        knob, *lines = chunk.strip().splitlines()
        blocks[knob] = (lines[:-1], lines[-1])
    assert blocks["NOSUCH_KNOB"] == (["Not defined: NOSUCH_KNOB"], "exit 1")
    values = {k: out[0] for k, (out, status) in blocks.items() if status == "exit 0"}
    lim = lf.condor_limits(values)
    # MAX_JOBS_PER_SUBMISSION 20000 < MAX_JOBS_PER_OWNER 100000; MAX_JOBS_RUNNING = MIN({24105, 10000})
    assert (lim.max_submit, lim.max_running) == (20000, 10000)
    assert lim.why["max_running"] == "schedd: MAX_JOBS_RUNNING = MIN({24105, 10000})"
    assert lf.condor_value("ifThenElse(x, 1, 2)") is None


# ---------------------------------------------------------------------------- sizing within limits


def site(mode: str = "single", max_pilots: int = 1, max_cores: int | None = 64, walltime: float = 86400) -> Site:
    return Site("s", "slurm", 128, Clock(2.0), pilot=PilotPolicy(mode, max_cores, walltime, max_pilots))


def test_single_pilot_shrunk_to_cores_and_walltime():
    found = SiteLimits("s", lf.Limits(max_cores_per_job=32, max_walltime=7200.0,
                                      why={"max_cores_per_job": "QOS q: MaxTRES=cpu=32",
                                           "max_walltime": "QOS q: MaxWall=02:00:00"}))
    out = within_limits(site(), found)
    assert (out.pilot.max_cores, out.pilot.walltime, out.pilot.max_pilots) == (32, 7200.0, 1)
    assert found.changes == ["max_cores 64 → 32 (QOS q: MaxTRES=cpu=32)",
                             "walltime 86400 s → 7200 s (QOS q: MaxWall=02:00:00)"]
    assert found.blocked is None


def test_per_task_pilots_counted_within_submit_running_and_cores_minus_jobs_there():
    lim = lf.Limits(max_submit=10, max_running=6, max_cores=8,
                    why={"max_submit": "QOS n: MaxSubmitPU=10", "max_running": "QOS n: MaxJobsPU=6",
                         "max_cores": "QOS n: MaxTRESPU=cpu=8"})
    # by definition: min(100000, 10 - 7 queued, 6 - 2 running, 8 cores // 2 per pilot) = 3
    found = SiteLimits("s", lim, jobs=7, running=2)
    out = within_limits(site("per-task", 100000, None), found, cores_per_task=2)
    assert out.pilot.max_pilots == min(100000, 10 - 7, 6 - 2, 8 // 2) == 3
    assert found.changes[0] == "max_pilots 100000 → 3 (QOS n: MaxSubmitPU=10, 7 job(s) already there)"


def test_no_room_blocks_the_site_and_says_why():
    found = SiteLimits("s", lf.Limits(max_submit=0, why={"max_submit": "QOS proj0102: MaxSubmitPU=0"}))
    out = within_limits(site(), found)
    assert out == site() and found.blocked == "no pilot may be submitted: QOS proj0102: MaxSubmitPU=0"
    full = SiteLimits("s", lf.Limits(max_submit=4, why={"max_submit": "association a/me: MaxSubmit=4"}), jobs=4)
    within_limits(site(), full)
    assert full.blocked == "no pilot may be submitted: association a/me: MaxSubmit=4, 4 job(s) already there"


def test_unknown_limits_change_nothing():
    found = SiteLimits("s", notes=["no association limits: ..."])
    assert within_limits(site(), found) is not None and found.changes == [] and found.blocked is None
    assert within_limits(replace(site(), pilot=PilotPolicy("single", None, 100.0, 1)), found).pilot.max_cores is None


# ---------------------------------------------------------------------------- the backends' readers


def test_slurm_cli_reads_association_then_its_default_qos():
    """SlurmCLI.limits over a transport replaying the captures: the association of user
    ichatnun names QOS pre0001 (its Def QOS), which is asked next; here the QOS capture's
    proj0102 row is what `show qos where name=pre0001` answers (its columns, renamed)."""
    from recorded import Recorded
    from resel.backends.slurm.cli import SlurmCLI
    qos_rows = text("sacctmgr_qos_thaisc.txt").splitlines()
    qos_reply = qos_rows[0] + "\n" + next(r for r in qos_rows if "|proj0102|" in r).replace("|proj0102|", "|pre0001|") + "\n"
    tr = Recorded({("id", "-un"): "ichatnun\n",
                 ("sacctmgr", "-P", "show", "assoc", "where", "user=ichatnun"): text("sacctmgr_assoc_thaisc.txt"),
                 ("sacctmgr", "-P", "show", "qos", "where", "name=pre0001"): qos_reply})
    lim, notes = SlurmCLI(tr).limits()
    assert notes == [] and (lim.max_submit, lim.max_running, lim.max_cores) == (0, 100, 1000)
    assert lim.why["max_submit"] == "QOS pre0001: MaxSubmitPU=0"


def test_slurm_cli_without_slurmdbd_gives_unknown_limits_with_the_reason():
    from recorded import Recorded, Reply
    from resel.backends.slurm.cli import SlurmCLI
    said = text("sacctmgr_assoc_no_dbd_tba.stderr")
    tr = Recorded({("id", "-un"): "root\n", ("sacctmgr", "-P", "show", "assoc", "where", "user=root"): Reply("", said, 1)})
    lim, notes = SlurmCLI(tr).limits()
    assert lim.empty and notes == ["no association limits: `sacctmgr -P show assoc where user=root` said: "
                                   "You are not running a supported accounting_storage plugin"]


def test_pbs_cli_reads_its_queue_text_torque_and_json_pro():
    from recorded import Recorded
    from resel.backends.pbs.cli import PBSCLI
    tr = Recorded({("id", "-un"): "user123\n", ("qstat", "-Q", "-f"): text("qstat_Q_f_metacentrum.txt")})
    lim, notes = PBSCLI(tr, queue="gpu_long", dialect="torque").limits()
    assert notes == [] and (lim.max_submit, lim.max_cores, lim.max_walltime) == (2000, 200, 336 * 3600.0)
    lim, notes = PBSCLI(tr, queue="nosuch", dialect="torque").limits()
    assert lim.empty and "nosuch" in notes[0]
    rec = json.loads((SHARED / "pbs" / "ssh_qstat_partitions_command.json").read_text())
    tr = Recorded({("id", "-un"): "firesrv\n", ("qstat", "-Q", "-f", "-F", "json"): rec["stdout"]})
    lim, notes = PBSCLI(tr, queue="workq", dialect="pro").limits()
    assert lim.empty and notes == []
