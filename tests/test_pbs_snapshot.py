"""PBS queue snapshots for the twin (:func:`resel.backends.pbs.formats.snapshot_of`,
:meth:`PBSCLI.queue_snapshot`) on real replies: the OpenPBS 23.06 recordings in
shared/data/formats/pbs and the Torque text Debian's slurm-wlm-torque wrappers printed on the
testbed (tests/data/torque). Samples marked CONSTRUCTED are written by hand after the formats
of real PBS Pro and Torque servers, to cover what the recordings do not (queued, held and
waiting jobs, priorities, jobs without a walltime).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from resel.backends.pbs import formats as f
from resel.backends.pbs.cli import PBSCLI
from resel.backends.jobs import QueueSnapshot
from resel.models.twin import twin_start
from recorded import Recorded, Reply  # tests/ is on sys.path (rootdir conftest)
from test_pbs_formats import pro_doc, recorded, torque

from resel.errors import ModelError, SchedulerError, SchedulerReplyError

#: "timestamp" of the recorded all-users reply, and the running job 1006.pbs's stime (UTC)
STAMP = 1750369865.0
STIME_1006 = datetime(2025, 6, 19, 21, 50, 44, tzinfo=UTC).timestamp()


def workq() -> f.Partition:
    queues = f.parse_queues_json(pro_doc("ssh_qstat_partitions_command.json"))
    nodes = f.nodes_from_json(pro_doc("ssh_pbsnodes_command.json"))
    (part,) = f.partitions(queues, nodes, "workq")
    return part


def part(name="batch", total=16, idle=0, max_time=None) -> f.Partition:
    return f.Partition(name, "UP", total, idle, 2, max_time, True)


# ---------------------------------------------------------------------------- OpenPBS recordings


def test_recorded_openpbs_snapshot_and_twin():
    doc = pro_doc("ssh_qstat_allusers_command.json")
    policy, note = f.assumed_policy("pro")
    now = STAMP + 4.0
    snap = f.snapshot_of(workq(), f.job_records_json(doc), policy, now, tz=UTC,
                         server_time=doc["timestamp"], notes=[note])
    assert isinstance(snap, QueueSnapshot)
    assert (snap.site, snap.taken_at, snap.total_cores, snap.policy, snap.default_limit) == (
        "workq", now, 1, "easy", None)
    # the finished history jobs 1004 and 1005 are skipped; 1006 runs: 1 CPU, 5 minutes, started
    # 21 s before the reply's own timestamp (the server's clock, not resel's)
    (run,) = snap.running
    assert (run.job_id, run.cores, run.time_limit, run.elapsed, run.user) == ("1006.pbs", 1, 300.0, 21.0,
                                                                            "firesrv")
    assert snap.pending == ()
    assert snap.notes == (note,) and "policy assumed" in note and "backfill_depth" in note
    # the twin: a 1-core pilot waits for 1006 to reach its limit on the queue's only CPU
    est = twin_start(snap, 1, 600)
    assert est.start == pytest.approx(STIME_1006 + 300 + (now - STAMP))
    assert est.wait == pytest.approx(300 - 21) and est.released_by == "1006.pbs"
    assert est.policy == "easy" and note in est.notes
    with pytest.raises(ModelError, match="can never start"):
        twin_start(snap, 2, 60)


def test_pbscli_queue_snapshot_from_recorded_replies(monkeypatch):
    tr = Recorded({
        ("qstat", "-Q", "-f", "-F", "json"): recorded("ssh_qstat_partitions_command.json")["stdout"],
        ("pbsnodes", "-a", "-F", "json"): recorded("ssh_pbsnodes_command.json")["stdout"],
        ("qstat", "-B", "-f", "-F", "json"): json.dumps({"Server": {"pbs": {"default_queue": "workq"}}}),
        ("qstat", "-f", "-F", "json"): recorded("ssh_qstat_allusers_command.json")["stdout"],
        ("date", "+%z"): "+0000\n",
    })
    monkeypatch.setattr("resel.backends.pbs.cli.time.time", lambda: STAMP + 10)
    cli = PBSCLI(tr, dialect="pro")
    assert cli.scheduler_policy() == "easy"
    snap = cli.queue_snapshot()
    assert (snap.site, snap.policy, snap.total_cores, snap.taken_at) == ("workq", "easy", 1, STAMP + 10)
    assert [(j.job_id, j.cores, j.time_limit, j.elapsed) for j in snap.running] == [("1006.pbs", 1, 300.0, 21.0)]
    assert any("policy assumed" in n for n in snap.notes)
    asked = [tuple(c) for c in tr.calls]
    assert ("qstat", "-f", "-F", "json") in asked and ("qstat", "-f", "-F", "json", "-x") not in asked
    # a configured queue the server does not have is an error, not an empty queue
    with pytest.raises(SchedulerError, match="queue nosuch not found; the site has: workq"):
        PBSCLI(tr, queue="nosuch", dialect="pro").queue_snapshot()


# ---------------------------------------------------------------------------- CONSTRUCTED: PBS Pro queue

def _job(state, ncpus=None, walltime="01:00:00", prio=0, qtime="Thu Jun 19 10:00:00 2025", **more):
    rl = {"walltime": walltime} if walltime else {}
    if ncpus is not None:
        rl["ncpus"] = ncpus
    rec = {"Job_Name": "j", "Job_Owner": "u@h", "job_state": state, "queue": more.pop("queue", "batch"),
           "Priority": prio, "qtime": qtime, "Resource_List": rl}
    rec.update(more)
    return rec


#: CONSTRUCTED after PBS Pro 2021's ``qstat -f -F json``: a busy queue of 16 CPUs
PRO_QUEUE = {"timestamp": 1750400000, "pbs_version": "2021.1.0", "Jobs": {
    "10.pbs": _job("R", 8, "02:00:00", stime="Fri Jun 20 05:13:20 2025"),          # 1750396400: 1 h ago
    "11.pbs": _job("R", 6, None, stime="Fri Jun 20 06:03:20 2025"),                 # no walltime
    "12.pbs": _job("Q", 8, "01:00:00", prio=0, qtime="Fri Jun 20 06:00:00 2025"),
    "13.pbs": _job("Q", 4, "00:30:00", prio=100, qtime="Fri Jun 20 06:10:00 2025"),
    "14.pbs": _job("Q", 2, "00:20:00", prio=0, qtime="Fri Jun 20 05:00:00 2025"),
    "15.pbs": _job("H", 1, "00:10:00"),
    "16.pbs": _job("W", 1, "00:10:00"),
    "17.pbs": _job("Q", 64, "00:10:00", comment="Can Never Run: Insufficient amount of resource: ncpus"),
    "18.pbs": _job("F", 1, "00:10:00", Exit_status=0, stime="Fri Jun 20 05:00:00 2025",
                   obittime="Fri Jun 20 05:01:00 2025"),
    "19.pbs": _job("Q", 2, "00:10:00", queue="other"),
    "20.pbs": _job("E", 2, "00:10:00"),
    "21.pbs": _job("Q", None, "00:10:00", Resource_List={"nodes": "2:ppn=2", "walltime": "00:15:00"}),
}}


def test_constructed_pro_queue_order_left_out_and_limits():
    policy, note = f.assumed_policy("pro")
    snap = f.snapshot_of(part(max_time=4 * 3600.0), f.job_records_json(PRO_QUEUE), policy, 1750400000.0,
                         tz=UTC, server_time=PRO_QUEUE["timestamp"], notes=[note])
    assert [(j.job_id, j.cores, j.time_limit, j.elapsed) for j in snap.running] == [
        ("10.pbs", 8, 7200.0, 3600.0), ("11.pbs", 6, None, 600.0)]
    # Priority 100 first; then by qtime: 21 (Jun 19; 2 nodes × 2 ppn), 14 (Jun 20 05:00), 12 (06:00)
    assert [(j.job_id, j.cores) for j in snap.pending] == [("13.pbs", 4), ("21.pbs", 4), ("14.pbs", 2),
                                                           ("12.pbs", 8)]
    assert snap.default_limit == 4 * 3600.0
    notes = "\n".join(snap.notes)
    for said in ("1 job(s) left out: held", "1 job(s) left out: waiting for their start time",
                 "1 job(s) left out: the scheduler says they can never run",
                 "1 job(s) left out: exiting", "1 job(s) without a walltime given the queue's maximum (14400 s)",
                 "sort formula"):
        assert said in notes, notes
    assert "19.pbs" not in {j.job_id for j in (*snap.running, *snap.pending)}        # another queue
    # the twin: 2 cores are free now and 14 (2 cores, 20 min) is backfilled into them at once,
    # ahead of 13 (the head, reserved at 10's end in 1 h); the pilot (2 cores, 10 min) then
    # takes 14's cores when it ends, still before 13's reservation (FCFS: after 10, 11's 1 h…)
    est = twin_start(snap, 2, 600)
    assert (est.policy, est.wait, est.ahead, est.released_by) == ("easy", 1200.0, ("14.pbs",), "14.pbs")
    assert est.overtook == ("13.pbs", "21.pbs", "12.pbs") and note in est.notes


def test_jobs_without_walltime_and_no_queue_maximum_are_said():
    doc = {"pbs_version": "23.06.06", "Jobs": {"1.pbs": _job("R", 2, None, stime="Fri Jun 20 06:00:00 2025")}}
    snap = f.snapshot_of(part(total=4, idle=2), f.job_records_json(doc), "easy", 1750400000.0, tz=UTC)
    assert snap.default_limit is None and snap.running[0].time_limit is None
    assert any("which it does not have" in n and "cannot be simulated" in n for n in snap.notes)
    with pytest.raises(ModelError, match="no time limit"):
        twin_start(snap, 1, 60)


def test_running_job_without_start_uses_used_walltime():
    doc = {"pbs_version": "23.06.06", "Jobs": {
        "1.pbs": _job("R", 2, "01:00:00", resources_used={"walltime": "00:10:00"}),
        "2.pbs": _job("R", 2, "01:00:00")}}
    snap = f.snapshot_of(part(total=4), f.job_records_json(doc), "easy", 1750400000.0, tz=UTC)
    assert [j.elapsed for j in snap.running] == [600.0, 0.0]
    assert any("taken as just started" in n for n in snap.notes)


# ---------------------------------------------------------------------------- Torque text

#: CONSTRUCTED after a Torque 6 server's ``qstat -f`` (4-space attributes, start_time, etime)
TORQUE_QUEUE = """Job Id: 100.head.example.org
    Job_Name = big
    Job_Owner = alice@login1
    resources_used.walltime = 00:20:00
    job_state = R
    queue = batch
    qtime = Mon Jan 30 09:00:00 2017
    Resource_List.nodes = 2:ppn=4
    Resource_List.walltime = 01:00:00
    etime = Mon Jan 30 09:00:00 2017
    start_time = Mon Jan 30 09:40:00 2017

Job Id: 101.head.example.org
    Job_Name = next
    Job_Owner = bob@login1
    job_state = Q
    queue = batch
    qtime = Mon Jan 30 09:50:00 2017
    Priority = 10
    Resource_List.nodes = 1:ppn=8
    Resource_List.walltime = 00:30:00
    etime = Mon Jan 30 09:50:00 2017

Job Id: 102.head.example.org
    Job_Name = first
    Job_Owner = carol@login1
    job_state = Q
    queue = batch
    qtime = Mon Jan 30 09:45:00 2017
    Resource_List.procs = 2
    Resource_List.walltime = 00:10:00
    etime = Mon Jan 30 09:45:00 2017

Job Id: 103.head.example.org
    Job_Name = held
    Job_Owner = bob@login1
    job_state = H
    queue = batch
    qtime = Mon Jan 30 09:00:00 2017
    Resource_List.nodes = 1:ppn=1
    Resource_List.walltime = 00:10:00
    etime = Mon Jan 30 09:00:00 2017
"""


def test_constructed_torque_snapshot_is_fcfs():
    now = datetime(2017, 1, 30, 10, 0, 0, tzinfo=UTC).timestamp()
    policy, note = f.assumed_policy("torque")
    assert policy == "fcfs" and "pbs_sched" in note and "Maui" in note
    snap = f.snapshot_of(part(total=8, idle=0, max_time=86400.0), f.job_records_text(TORQUE_QUEUE), policy, now,
                         flavour="torque", tz=UTC, notes=[note])
    assert [(j.job_id, j.cores, j.time_limit, j.elapsed, j.user) for j in snap.running] == [
        ("100.head.example.org", 8, 3600.0, 1200.0, "alice")]
    assert [(j.job_id, j.cores) for j in snap.pending] == [("101.head.example.org", 8), ("102.head.example.org", 2)]
    assert any("1 job(s) left out: held" in n for n in snap.notes)
    assert not any("sort formula" in n for n in snap.notes)
    # FCFS: the pilot waits for 100 (40 min left), then 101 (30 min), then 102 may start with it
    est = twin_start(snap, 2, 600)
    assert est.wait == pytest.approx(2400 + 1800) and est.ahead[:2] == ("101.head.example.org",
                                                                         "102.head.example.org")


def test_recorded_slurm_wrapper_text():
    """Debian's wrappers over Slurm (testbed capture): a Q job of priority 0 is Slurm's held job."""
    text = torque("qstat_f_running_pending.txt")
    limits = {q.name: q for q in f.parse_qstat_q(torque("qstat_q.txt"))}
    (mixed,) = f.nodes_from_text(torque("pbsnodes_a_mixed.txt"))
    (node,) = f.fill_idle_from_jobs([mixed], f.parse_jobs_text(text, UTC).values(), f.exec_hosts_text(text))
    queues = [f.QueueInfo(n, "UP", limits[n].max_time) for n in ("debug", "short")]
    debug, short = f.partitions(queues, [node], "debug")
    policy, note = f.assumed_policy("slurm-torque", "sched/backfill")
    assert policy == "conservative" and "sched/backfill" in note
    now = datetime(2026, 11, 26, 1, 2, 28, tzinfo=UTC).timestamp()
    snap = f.snapshot_of(debug, f.job_records_text(text), policy, now, flavour="slurm-torque", tz=UTC,
                         notes=[note])
    # running: 1420 (3 CPUs) and 1421 (5), 2-minute limits, started at their mtime
    assert [(j.job_id, j.cores, j.time_limit, j.elapsed) for j in snap.running] == [
        ("1420", 3, 120.0, 60.0), ("1421", 5, 120.0, 58.0)]
    assert snap.pending == () and snap.total_cores == 8 and snap.default_limit == 4 * 3600.0
    assert any("held (priority 0 under Slurm's wrappers)" in n for n in snap.notes)
    other = f.snapshot_of(short, f.job_records_text(text), policy, now, flavour="slurm-torque", tz=UTC)
    assert [(j.job_id, j.cores, j.time_limit) for j in other.pending] == [("1422", 4, 120.0)]
    assert twin_start(snap, 8, 60).wait == pytest.approx(62.0)


def test_assumed_policies():
    assert f.assumed_policy("pro")[0] == "easy"
    assert f.assumed_policy("torque")[0] == "fcfs"
    assert f.assumed_policy("slurm-torque", "sched/builtin")[0] == "fcfs"
    assert f.assumed_policy("slurm-torque", None) == ("fcfs", f.assumed_policy("slurm-torque", None)[1])
    assert "not known" in f.assumed_policy("slurm-torque", None)[1]
    assert f.assumed_policy("slurm-torque", "sched/wiki2")[0] == "fcfs"
    with pytest.raises(SchedulerError):
        f.assumed_policy("lsf")


def test_pbscli_wrapper_snapshot_asks_slurm_for_the_policy(monkeypatch):
    text = torque("qstat_f_running_pending.txt")
    tr = Recorded({
        ("qstat", "--version"): Reply("", torque("qstat_version.stderr"), 1),
        ("sinfo", "--version"): "slurm 22.05.8\n",
        ("scontrol", "show", "config"): "SchedulerType           = sched/backfill\n",
        ("qstat", "-Q", "-f"): torque("qstat_Q_f.txt"),
        ("qstat", "-q"): torque("qstat_q.txt"),
        ("pbsnodes", "-a"): torque("pbsnodes_a_mixed.txt"),
        ("qstat", "-f"): text,
        ("date", "+%z"): "+0000\n",
    })
    monkeypatch.setattr("resel.backends.pbs.cli.time.time",
                        lambda: datetime(2026, 11, 26, 1, 2, 28, tzinfo=UTC).timestamp())
    cli = PBSCLI(tr, queue="debug", dialect="torque")            # told torque: the wrapper is found
    snap = cli.queue_snapshot()
    assert cli.flavour == "slurm-torque" and snap.policy == "conservative"
    assert [j.job_id for j in snap.running] == ["1420", "1421"] and snap.total_cores == 8
    assert sum(c == ["qstat", "-f"] for c in tr.calls) == 1     # the mixed node's use from the same reply
    assert sum(c == ["scontrol", "show", "config"] for c in tr.calls) == 1
    cli.queue_snapshot()
    assert sum(c == ["scontrol", "show", "config"] for c in tr.calls) == 1     # asked once
    # no queue configured, none named default (the wrappers have no qstat -B): the whole cluster
    whole = PBSCLI(tr, dialect="auto").queue_snapshot()
    assert whole.site == "(all queues)" and [j.job_id for j in whole.pending] == ["1422"]
    assert whole.default_limit == 4 * 3600.0 and any("every queue" in n for n in whole.notes)


def test_torque_empty_queue_is_an_empty_snapshot():
    tr = Recorded({("qstat", "-Q", "-f"): "Queue: batch\n    resources_max.walltime = 01:00:00\n"
                                        "    state_count = Queued:0 Running:0\n    enabled = True\n    started = True\n",
                 ("qstat", "-f"): Reply("", "", 153), ("pbsnodes", "-a"): "n1\n    state = free\n    np = 4\n"})
    cli = PBSCLI(tr, queue="batch", dialect="torque")
    cli.flavour, cli._version = "torque", "6.1.2"                 # a real Torque: no detection
    snap = cli.queue_snapshot()
    assert (snap.running, snap.pending, snap.total_cores, snap.policy) == ((), (), 4, "fcfs")
    assert twin_start(snap, 4, 60).wait == 0


# ---------------------------------------------------------------------------- malformed replies


@pytest.mark.parametrize("records, match", [
    ([("1.pbs", {"Job_Name": "x", "queue": "batch"})], "no job_state"),
    ([("1.pbs", _job("Q", 1, prio="high"))], "Priority: expected a whole number"),
    ([("1.pbs", _job("R", 1, walltime="an hour"))], "not a PBS duration"),
    ([("1.pbs", _job("R", 1, stime="yesterday"))], "not a time"),
    ([("1.pbs", _job("Q", "four"))], "ncpus: expected a whole number"),
    ([("1.pbs", "not a record")], "not a record of attributes"),
])
def test_malformed_records_raise_reply_errors(records, match):
    with pytest.raises(SchedulerReplyError, match=match) as info:
        f.snapshot_of(part(), records, "easy", 1.0, tz=UTC, command="qstat -f -F json")
    assert info.value.command == "qstat -f -F json"


def test_malformed_replies_raise_reply_errors():
    with pytest.raises(SchedulerReplyError, match="expected 'Job Id:' blocks"):
        f.job_records_text("qstat: Unknown queue\n")
    with pytest.raises(SchedulerReplyError, match="not 'key = value'"):
        f.job_records_text("Job Id: 1.h\nno equals sign here\n")
    with pytest.raises(SchedulerReplyError, match="no 'Jobs' object"):
        f.job_records_json({"Jobs": []})
    with pytest.raises(SchedulerReplyError, match="not an object"):
        f.job_records_json({"pbs_version": "23.06.06", "Jobs": {"1.pbs": 5}})
    assert f.job_records_json({"timestamp": 1, "pbs_version": "23.06.06"}) == []       # nothing queued
    tr = Recorded({("qstat", "-Q", "-f", "-F", "json"): recorded("ssh_qstat_partitions_command.json")["stdout"],
                 ("qstat", "-f", "-F", "json"): "{not json"})
    with pytest.raises(SchedulerReplyError, match="qstat -f -F json: unexpected reply: not JSON"):
        PBSCLI(tr, dialect="pro").queue_snapshot()


def test_queue_without_cpus_and_bad_flavour_are_refused():
    with pytest.raises(SchedulerError, match="queue batch has no CPUs"):
        f.snapshot_of(part(total=0), [], "easy", 1.0)
    with pytest.raises(SchedulerError, match="flavour"):
        f.snapshot_of(part(), [], "easy", 1.0, flavour="lsf")
