"""The PBS parsers (and PBSCLI's command building) on real replies: OpenPBS 23.06 recordings
(shared/data/formats/pbs, every file) and Torque text captured from Debian's slurm-wlm-torque
22.05.8 wrappers on the testbed (tests/data/torque, see its README).

Samples marked CONSTRUCTED are written by hand after the formats of real servers that could not
be recorded here (a real Torque's ``jobs =``/``exit_status``/``comp_time`` lines, PBS Pro's
``estimated.start_time``, ``qstat -B`` and its refusals); they are kept small and labelled.
"""

from __future__ import annotations

import json
import math
from datetime import UTC
from pathlib import Path

import pytest
from resel.backends.jobs import Pending
from resel.backends.pbs import formats as f
from resel.backends.pbs.cli import PBSCLI, check_job_ids, check_job_name, with_workdir
from recorded import Recorded, Reply  # tests/ is on sys.path (rootdir conftest)

from resel.errors import ReselError, SchedulerError, SchedulerReplyError

PRO = Path(__file__).resolve().parents[2] / "shared" / "data" / "formats" / "pbs"
TORQUE = Path(__file__).resolve().parent / "data" / "torque"


def recorded(name: str) -> dict:
    return json.loads((PRO / name).read_text())


def pro_doc(name: str) -> dict:
    rec = recorded(name)
    assert rec["exit_code"] == 0 and rec["stderr"] == ""
    return f.load_json(rec["stdout"], rec["command"])


def torque(name: str) -> str:
    return (TORQUE / name).read_text()


def test_every_recorded_file_is_used_here():
    used = {"ssh_pbsnodes_command.json", "ssh_qdel_command.json", "ssh_qstat_allusers_command.json",
            "ssh_qstat_command.json", "ssh_qstat_partitions_command.json", "ssh_qsub_command.json"}
    assert {p.name for p in PRO.glob("*.json")} == used
    captured = {p.name for p in TORQUE.iterdir()} - {"README.md"}
    assert captured == {"pbsnodes_a_full.txt", "pbsnodes_a_mixed.txt", "qstat.txt", "qstat_B_f_lists_jobs.txt",
                        "qstat_Q_f.txt", "qstat_f_cancelled.txt", "qstat_f_one.txt",
                        "qstat_f_running_pending.txt", "qstat_q.txt", "qstat_version.stderr",
                        "qsub_stdin.stderr", "qsub_unknown_queue.stdout"}


# ---------------------------------------------------------------------------- OpenPBS 23.06


def test_openpbs_all_jobs_with_history():
    jobs = f.parse_jobs_json(pro_doc("ssh_qstat_allusers_command.json"), UTC)
    assert set(jobs) == {"1004.pbs", "1005.pbs", "1006.pbs"}
    done = jobs["1004.pbs"]
    assert (done.name, done.state, done.partition, done.user, done.cpus) == ("hello_pbs", "done", "workq",
                                                                           "fireuser", 1)
    assert done.time_limit == 300.0 and done.exit_code == "0:0" and done.reason is None
    # "Thu Jun 19 10:36:47 2025" in the server's zone (UTC here); obittime matches history_timestamp
    assert done.submit == 1750329407.0 and done.start == 1750329407.0 and done.end == 1750329438.0
    run = jobs["1006.pbs"]
    assert (run.state, run.user, run.end, run.exit_code) == ("running", "firesrv", None, None)
    assert run.start is not None


def test_openpbs_one_job_and_zone():
    doc = pro_doc("ssh_qstat_command.json")
    (job,) = f.parse_jobs_json(doc, UTC).values()
    assert (job.job_id, job.state, job.cpus, job.time_limit) == ("1.pbs", "running", 1, 300.0)
    from datetime import timedelta, timezone
    plus2 = f.parse_jobs_json(doc, timezone(timedelta(hours=2)))["1.pbs"]
    assert job.start - plus2.start == 7200          # local ctime text: the zone matters
    assert f.start_estimates_json(doc, UTC) == {"1.pbs": None}


def test_openpbs_queues_nodes_qsub_qdel():
    (q,) = f.parse_queues_json(pro_doc("ssh_qstat_partitions_command.json"))
    assert (q.name, q.state, q.max_time, q.running, q.pending, q.queue_type) == ("workq", "UP", None, 0, 0, "Execution")
    (node,) = f.nodes_from_json(pro_doc("ssh_pbsnodes_command.json"))
    # resources_available.ncpus (1) counts, not pcpus (12): that is what PBS schedules
    assert (node.name, node.total, node.idle, node.queue, node.state) == ("pbs", 1, 1, None, "free")
    qsub = recorded("ssh_qsub_command.json")
    assert f.parse_qsub(qsub["stdout"]) == "1.pbs"
    qdel = recorded("ssh_qdel_command.json")
    assert qdel["exit_code"] == 0 and f.qdel_problems(qdel["stdout"], qdel["stderr"]) == []


def test_openpbs_availability_from_recordings():
    queues = f.parse_queues_json(pro_doc("ssh_qstat_partitions_command.json"))
    nodes = f.nodes_from_json(pro_doc("ssh_pbsnodes_command.json"))
    parts = f.partitions(queues, nodes, "workq")
    assert parts == [f.Partition("workq", "UP", 1, 1, 1, None, True)]
    av = f.make_availability("pbs", "23.06.06", parts, queues, nodes, None, 5.0)
    assert (av.free_cores, av.total_cores, av.running_jobs, av.pending_jobs) == (1, 1, 0, 0)


def test_openpbs_history_json_fed_to_pbscli_jobs_and_estimates():
    """PBSCLI over a replaying transport: PBS Pro commands and the recorded replies."""
    rec = recorded("ssh_qstat_allusers_command.json")
    doc = json.loads(rec["stdout"])

    def only(*ids):
        """CONSTRUCTED from the recording: what ``qstat -f -F json -x ID…`` prints for these."""
        return json.dumps({**doc, "Jobs": {k: v for k, v in doc["Jobs"].items() if k in ids}})
    by_id = ("qstat", "-f", "-F", "json", "-x")
    tr = Recorded({by_id: rec["stdout"], ("date", "+%z"): "+0000\n", ("id", "-un"): "fireuser\n",
                   by_id + ("1004.pbs", "1006", "77"): Reply(only("1004.pbs", "1006.pbs"),
                                                             "qstat: Unknown Job Id 77.pbs\n", 153),
                   by_id + ("1006",): only("1006.pbs"), by_id + ("1006.pbs",): only("1006.pbs")})
    cli = PBSCLI(tr, dialect="pro")
    assert set(cli.jobs(name_prefix="hello")) == {"1004.pbs", "1005.pbs"}    # the user's own (fireuser's)
    assert cli.jobs(name_prefix="hi_") == {}                                   # firesrv's is not theirs
    assert set(cli.jobs(["1006", "1004.pbs", "77"])) == {"1006", "1004.pbs"}     # by number, keyed as asked
    assert [c[5:] for c in tr.calls[-1:]] == [["1004.pbs", "1006", "77"]]     # our ids only, not everyone's
    assert cli.jobs(["1006"])["1006"].job_id == "1006"
    assert cli.jobs(user="firesrv").keys() == {"1006.pbs"}
    assert cli.start_estimates(["1006.pbs"]) == {"1006.pbs": None}


# ---------------------------------------------------------------------------- Torque (Slurm's wrappers)


def test_torque_qstat_f_running_pending_completed():
    jobs = f.parse_jobs_text(torque("qstat_f_running_pending.txt"), UTC)
    assert list(jobs) == ["1417", "1418", "1419", "1420", "1421", "1422", "1423"]
    long = jobs["1417"]
    assert long.name == "resel-r12-abcdef-p3-longer-name"            # 31 characters, whole
    assert (long.state, long.cpus, long.time_limit, long.user) == ("done", 2, 60.0, "root")
    assert long.end - long.start == 5 and long.exit_code is None     # no exit status from the wrapper
    r = jobs["1420"]
    assert (r.state, r.cpus, r.partition, r.end) == ("running", 3, "debug", None)
    assert r.start - r.submit == 1
    p = jobs["1422"]
    assert (p.state, p.partition, p.cpus, p.start, p.end) == ("pending", "short", 4, None, None)
    assert jobs["1423"].state == "pending"                           # held (qsub -h): the wrapper says Q
    # Slurm's expected start of the pending job is its mtime
    est = f.start_estimates_text(torque("qstat_f_running_pending.txt"), UTC)
    assert est["1422"] == jobs["1422"].submit + 121 and est["1420"] is None


def test_torque_cancelled_jobs_read_as_completed():
    jobs = f.parse_jobs_text(torque("qstat_f_cancelled.txt"), UTC)
    assert {j.state for j in jobs.values()} == {"done"}
    assert set(jobs) == {"1420", "1421", "1422", "1423"}
    (one,) = f.parse_jobs_text(torque("qstat_f_one.txt"), UTC).values()
    assert (one.job_id, one.state, one.name) == ("1420", "running", "resel-r7-0a1b2c-p0")


def test_torque_short_qstat_cuts_names():
    """Why resel reads ``qstat -f``: the short form cuts names to 16 characters."""
    short = torque("qstat.txt")
    assert "resel-r12-abcdef " in short and "resel-r12-abcdef-p3" not in short


def test_torque_nodes_queues_limits():
    (mixed,) = f.nodes_from_text(torque("pbsnodes_a_mixed.txt"))
    assert (mixed.name, mixed.total, mixed.idle, mixed.state) == ("vm", 8, None, "mixed")
    (full,) = f.nodes_from_text(torque("pbsnodes_a_full.txt"))
    assert (full.total, full.idle, full.state) == (8, 0, "job-exclusive")
    # a mixed node's idle CPUs come from the running jobs' exec_host (3 + 5 of 8 running)
    text = torque("qstat_f_running_pending.txt")
    (filled,) = f.fill_idle_from_jobs([mixed], f.parse_jobs_text(text, UTC).values(), f.exec_hosts_text(text))
    assert filled.idle == 0
    (one,) = f.fill_idle_from_jobs([mixed], f.parse_jobs_text(torque("qstat_f_one.txt"), UTC).values(),
                                   f.exec_hosts_text(torque("qstat_f_one.txt")))
    assert one.idle == 5
    queues = f.parse_queues_text(torque("qstat_Q_f.txt"))
    assert [(q.name, q.state, q.max_time, q.running) for q in queues] == [("debug", "UP", None, None),
                                                                          ("short", "UP", None, None)]
    limits = f.parse_qstat_q(torque("qstat_q.txt"))
    assert limits == [f.QueueLimits("debug", 14400.0, 2, 1), f.QueueLimits("short", 600.0, 0, 1)]
    assert f.parse_server_default_queue(torque("qstat_B_f_lists_jobs.txt")) is None


def test_torque_wrapper_detection_and_refusals():
    assert f.detect_dialect("", torque("qstat_version.stderr")) == ("slurm-torque", None)
    err = f.qsub_error(torque("qsub_unknown_queue.stdout"), "", "qsub -q nosuch", 1)
    assert isinstance(err, SchedulerError)
    assert "Invalid partition name specified" in str(err) and "invalid partition specified: nosuch" in str(err)
    assert "qstat -Q" in err.hint and "/usr/bin/sbatch" not in str(err)
    usage = f.qsub_error("", torque("qsub_stdin.stderr"), "qsub", 2)
    assert "usage" in str(usage) and "dialect" in usage.hint


# ---------------------------------------------------------------------------- CONSTRUCTED: real Torque, PBS Pro

#: CONSTRUCTED after a Torque 6 server's ``qstat -f``: 4-space attributes, tab continuations,
#: etime/start_time/comp_time and exit_status
TORQUE_REAL = """Job Id: 88.head.example.org
    Job_Name = resel-r3-00aa11-p0
    Job_Owner = alice@login1.example.org
    resources_used.walltime = 00:00:10
    job_state = C
    queue = batch
    ctime = Mon Jan 30 10:00:00 2017
    mtime = Mon Jan 30 10:00:12 2017
    qtime = Mon Jan 30 10:00:00 2017
    Resource_List.nodes = 1:ppn=4
    Resource_List.walltime = 01:00:00
    Variable_List = PBS_O_QUEUE=batch,PBS_O_HOME=/home/alice,
\tPBS_O_LOGNAME=alice,PBS_O_WORKDIR=/home/alice
    etime = Mon Jan 30 10:00:00 2017
    exit_status = 271
    start_time = Mon Jan 30 10:00:02 2017
    comp_time = Mon Jan 30 10:00:12 2017

Job Id: 89.head.example.org
    Job_Name = other
    Job_Owner = bob@login1.example.org
    job_state = H
    queue = batch
    qtime = Mon Jan 30 10:01:00 2017
    Resource_List.nodes = 2:ppn=8
    Resource_List.walltime = 2:00:00:00
    etime = Mon Jan 30 10:01:00 2017
"""


def test_constructed_real_torque_text():
    jobs = f.parse_jobs_text(TORQUE_REAL, UTC)
    a, b = jobs["88.head.example.org"], jobs["89.head.example.org"]
    assert (a.state, a.cpus, a.user, a.exit_code) == ("cancelled", 4, "alice", "0:15")
    assert a.end - a.start == 10 and a.start - a.submit == 2          # start_time/comp_time, not mtime/ctime
    assert (b.state, b.native, b.reason, b.cpus, b.time_limit) == ("held", "H", "Held", 16, 2 * 86400.0)
    nodes = f.nodes_from_text("n01\n     state = free\n     np = 8\n     jobs = 0-2/88.head, 3/89.head\n\n"
                              "n02\n     state = down,offline\n     np = 8\n\n"
                              "n03\n     state = free\n     np = 4\n")
    assert [(n.name, n.total, n.idle) for n in nodes] == [("n01", 8, 4), ("n02", 8, 0), ("n03", 4, 4)]
    queues = f.parse_queues_text("Queue: batch\n    queue_type = Execution\n    resources_max.walltime = 24:00:00\n"
                                 "    state_count = Transit:0 Queued:3 Held:1 Waiting:0 Running:2 Exiting:1 Complete:4\n"
                                 "    enabled = True\n    started = False\n")
    assert queues == [f.QueueInfo("batch", "DOWN", 86400.0, 3, 4, "Execution")]
    assert f.parse_server_default_queue("Server: head\n    server_state = Active\n    default_queue = batch\n") == "batch"
    real_q = ("\nserver: head\n\nQueue            Memory CPU Time Walltime Node  Run Que Lm  State\n"
              "---------------- ------ -------- -------- ----  --- --- --  -----\n"
              "batch              --      --       --      --    2   3 --   E R\n"
              "                                               ----- -----\n"
              "                                                   2     3\n")
    assert f.parse_qstat_q(real_q) == [f.QueueLimits("batch", None, 2, 3)]
    assert f.detect_dialect("Version: 6.1.2\n", "") == ("torque", "6.1.2")


def test_constructed_pbs_pro_replies():
    doc = {"pbs_version": "23.06.06", "Jobs": {
        "7.pbs": {"Job_Name": "p", "job_state": "Q", "queue": "workq", "Job_Owner": "u@h",
                  "Resource_List": {"ncpus": 4, "walltime": "00:10:00"}, "qtime": "Thu Jun 19 10:00:00 2025",
                  "comment": "Can Never Run: Insufficient amount of resource: ncpus (R: 100 A: 8 T: 8)",
                  "estimated": {"start_time": "Thu Jun 19 11:00:00 2025"}},
        "8.pbs": {"Job_Name": "q", "job_state": "Q", "queue": "workq",
                  "comment": "Not Running: Insufficient amount of resource: ncpus"},
        "9.pbs": {"Job_Name": "w", "job_state": "F", "queue": "workq", "Exit_status": -29},
        "10.pbs": {"Job_Name": "x", "job_state": "F", "queue": "workq", "Exit_status": 3}}}
    jobs = f.parse_jobs_json(doc, UTC)
    assert jobs["7.pbs"].pending is Pending.NEVER           # the coordinator's never-start rule applies
    assert jobs["7.pbs"].reason.startswith("Can Never Run: ")    # in PBS's words, not another scheduler's
    assert jobs["8.pbs"].reason == "Not Running: Insufficient amount of resource: ncpus"
    assert jobs["9.pbs"].state == "timeout" and jobs["10.pbs"].state == "failed"
    assert jobs["10.pbs"].exit_code == "3:0"
    assert f.start_estimates_json(doc, UTC)["7.pbs"] == jobs["7.pbs"].submit + 3600
    assert f.parse_server_default_queue(json.dumps({"Server": {"pbs": {"default_queue": "workq"}}})) == "workq"
    assert f.detect_dialect("pbs_version = 23.06.06\n", "") == ("pro", "23.06.06")
    nodes = f.nodes_from_json({"nodes": {
        "a": {"state": "free", "resources_available": {"ncpus": 8}, "resources_assigned": {"ncpus": 3}},
        "b": {"state": "job-busy", "resources_available": {"ncpus": 8}, "resources_assigned": {"ncpus": 8}},
        "c": {"state": "down,offline", "resources_available": {"ncpus": 8}},
        "d": {"state": "free", "queue": "gpu", "resources_available": {"ncpus": 4}}}})
    assert [(n.total, n.idle) for n in nodes] == [(8, 5), (8, 0), (8, 0), (4, 4)]
    queues = [f.QueueInfo("workq", "UP", 3600.0, 1, 2), f.QueueInfo("gpu", "UP", None, 0, 0)]
    parts = f.partitions(queues, nodes, "workq")
    assert [(p.name, p.total_cpus, p.idle_cpus, p.default) for p in parts] == [("workq", 24, 5, True),
                                                                             ("gpu", 4, 4, False)]
    av = f.make_availability("pbs", "x", parts, queues, nodes, None, 1.0, target="gpu")
    assert (av.free_cores, av.total_cores, [p.name for p in av.partitions]) == (4, 4, ["gpu"])


@pytest.mark.parametrize("said, words, hint", [
    ("qsub: Unknown queue\n", "Unknown queue", "qstat -Q"),
    ("qsub: Job exceeds queue resource limits\n", "Job exceeds queue resource limits", "resources_max"),
    ("qsub: submit error (Unknown queue MSG=requested queue not found)\n", "submit error", "qstat -Q"),
    ("qsub: Maximum number of jobs already in queue workq\n", "Maximum number", "max_pilots"),
    ("qsub: Unauthorized Request \n", "Unauthorized Request", "ACL"),
    ("qsub: cannot connect to server pbs (errno=15010)\n", "cannot connect", "did not answer"),
])
def test_constructed_qsub_refusals(said, words, hint):
    err = f.qsub_error("", said, "qsub", 1)
    assert words in str(err) and hint in err.hint and err.reply == said.strip()


# ---------------------------------------------------------------------------- states, scalars, malformed


@pytest.mark.parametrize("code, status, dialect, want", [
    ("Q", None, "pro", ("pending", None)), ("H", None, "pro", ("held", "Held")),
    ("W", None, "torque", ("pending", "Waiting")), ("T", None, "pro", ("pending", "Transit")),
    ("R", None, "pro", ("running", None)), ("B", None, "pro", ("running", None)),
    ("E", None, "torque", ("completing", None)), ("S", None, "pro", ("running", None)),
    ("C", None, "torque", ("done", None)), ("F", 0, "pro", ("done", None)),
    ("X", 1, "pro", ("failed", "exit status 1")), ("F", 265, "pro", ("cancelled", "killed by signal 9")),
    ("F", -29, "pro", ("timeout", "exit status -29")), ("C", -11, "torque", ("failed", "exit status -11")),
    ("M", None, "pro", ("done", "Moved")), ("U", None, "pro", ("running", "PBS state U")),
    ("U", None, "torque", ("failed", "PBS state U")),
])
def test_state_mapping(code, status, dialect, want):
    assert f.job_state(code, status, dialect) == want


def test_walltime_and_names():
    assert f.parse_walltime("01:02:03") == 3723 and f.parse_walltime("90") == 90
    assert f.parse_walltime("1:00:00:00") == 86400 and f.parse_walltime("--") is None
    assert f.parse_walltime("00:00:01.5") == 1.5
    assert f.format_walltime(3723) == "01:02:03" and f.format_walltime(0.2) == "00:00:01"
    assert f.format_walltime(100 * 3600) == "100:00:00"
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(SchedulerError):
            f.format_walltime(bad)
    assert check_job_name("resel-r12-abcdef-p3") == "resel-r12-abcdef-p3"
    for bad in ("", "a b", "a;rm", "x\ny", "$(id)"):
        with pytest.raises(SchedulerError):
            check_job_name(bad)
    assert check_job_ids(["1", "12.server", "3[].pbs"]) == ["1", "12.server", "3[].pbs"]
    with pytest.raises(SchedulerError):
        check_job_ids(["1;qdel 2"])


def test_with_workdir_keeps_directives_first():
    s = with_workdir("#!/bin/sh\n#PBS -l mem=1gb\n\n# note\nexec python3 a.py\n", "/w/my dir")
    assert s == "#!/bin/sh\n#PBS -l mem=1gb\n\n# note\ncd '/w/my dir' || exit 1\nexec python3 a.py\n"
    assert with_workdir("#!/bin/sh", "/w") == "#!/bin/sh\ncd /w || exit 1\n"


@pytest.mark.parametrize("parse, text", [
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC), "not json"),
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC), "[1, 2]"),
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC), '{"Jobs": []}'),
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC), '{"Jobs": {"1.pbs": {"Job_Name": "x"}}}'),
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC),
     '{"Jobs": {"1.pbs": {"job_state": "R", "stime": "yesterday"}}}'),
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC),
     '{"Jobs": {"1.pbs": {"job_state": "R", "Resource_List": {"walltime": "1h"}}}}'),
    (lambda t: f.parse_jobs_json(f.load_json(t, "qstat"), UTC),
     '{"Jobs": {"1.pbs": {"job_state": "F", "Exit_status": "zero"}}}'),
    (lambda t: f.nodes_from_json(f.load_json(t, "pbsnodes")), '{"nodes": {"a": {"resources_available": {"ncpus": "x"}}}}'),
    (lambda t: f.parse_queues_json(f.load_json(t, "qstat -Q")), '{"Queue": {"q": 3}}'),
    (lambda t: f.parse_jobs_text(t, UTC), "garbage first line\n\tjob_state = R\n"),
    (lambda t: f.parse_jobs_text(t, UTC), "Job Id: 1\n\tJob_Name = x\n"),
    # (a line not indented after a value continues it: Slurm's qstat prints names with newlines)
    (lambda t: f.parse_jobs_text(t, UTC), "Job Id: 1\nnot indented\n\tjob_state = R\n"),
    (lambda t: f.nodes_from_text(t), "n1\n    np = 8\n"),
    (lambda t: f.nodes_from_text(t), "n1\n    state = free\n    np = eight\n"),
    (lambda t: f.parse_qstat_q(t), "---- ---\nbatch -- --\n"),
    (lambda t: f.parse_qsub(t), "Job submitted\n"),
    (lambda t: f.detect_dialect(t, ""), "qstat: command not understood\n"),
])
def test_malformed_replies_raise_reply_errors(parse, text):
    with pytest.raises(SchedulerReplyError) as info:
        parse(text)
    assert isinstance(info.value, ReselError) and info.value.command


def test_openpbs_invalid_json_in_variable_list_is_survived():
    """OpenPBS prints environment values unescaped; resel drops Variable_List and reads on."""
    rec = recorded("ssh_qstat_command.json")
    broken = rec["stdout"].replace('"PBS_O_SYSTEM":"Linux"', '"PBS_O_SYSTEM":"Li"nux\\q"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken)
    (job,) = f.parse_jobs_json(f.load_json(broken, "qstat"), UTC).values()
    assert job.name == "hello_pbs"


def test_empty_listings():
    assert f.parse_jobs_text("", UTC) == {}
    assert f.parse_jobs_json({"timestamp": 1, "pbs_version": "23.06.06", "pbs_server": "pbs"}, UTC) == {}


# ---------------------------------------------------------------------------- PBSCLI command building


def test_pro_submit_argv_stdin_and_refusal():
    qsub = ("qsub", "-N", "resel-r1-abcdef-p0", "-l", "select=1:ncpus=4", "-l", "walltime=00:15:00",
            "-q", "workq", "-A", "proj1", "-r", "n", "-o", "/w/p0/pilot.out", "-j", "oe")
    tr = Recorded({qsub: "1.pbs\n"})
    cli = PBSCLI(tr, queue="workq", account="proj1", dialect="pro")
    jid = cli.submit("#!/bin/sh\nexec agent\n", name="resel-r1-abcdef-p0", cores=4, walltime=900,
                     workdir="/w/p0", output="pilot.out")
    assert jid == "1.pbs"
    (argv,), (stdin,) = tr.calls, tr.inputs
    assert tuple(argv) == qsub and stdin == "#!/bin/sh\ncd /w/p0 || exit 1\nexec agent\n"
    tr2 = Recorded({qsub: Reply("", "qsub: Job exceeds queue resource limits\n", 188)})
    with pytest.raises(SchedulerError) as info:
        PBSCLI(tr2, queue="workq", account="proj1", dialect="pro").submit(
            "x", name="resel-r1-abcdef-p0", cores=4, walltime=900, workdir="/w/p0", output="/w/p0/pilot.out")
    assert "Job exceeds queue resource limits" in str(info.value) and info.value.command.startswith("qsub -N")
    with pytest.raises(SchedulerError):
        cli.submit("x", name="ok", cores=1, walltime=60, workdir="relative/dir")
    with pytest.raises(SchedulerError):
        PBSCLI(tr, queue="bad queue")
    with pytest.raises(SchedulerError):
        PBSCLI(tr, dialect="lsf")
    assert cli.test_only(4, 900) is None
    with pytest.raises(SchedulerError):
        cli.test_only(0, 900)


def test_pro_availability_from_recorded_replies():
    tr = Recorded({
        ("qstat", "--version"): "pbs_version = 23.06.06\n",
        ("qstat", "-Q", "-f", "-F", "json"): recorded("ssh_qstat_partitions_command.json")["stdout"],
        ("pbsnodes", "-a", "-F", "json"): recorded("ssh_pbsnodes_command.json")["stdout"],
        ("qstat", "-B", "-f", "-F", "json"): json.dumps({"Server": {"pbs": {"default_queue": "workq"}}}),
    })
    cli = PBSCLI(tr)
    av = cli.availability()
    assert (cli.dialect, cli.scheduler, av.scheduler, av.version) == ("pro", "pbs", "pbs", "23.06.06")
    assert (av.free_cores, av.total_cores, av.running_jobs, av.pending_jobs) == (1, 1, 0, 0)
    assert av.partitions[0].default and av.partitions[0].name == "workq"
    assert sum(c[:2] == ["qstat", "--version"] for c in tr.calls) == 1       # detected once
    with pytest.raises(SchedulerError, match="queue nosuch not found; the site has: workq"):
        PBSCLI(tr, queue="nosuch", dialect="pro").availability()


def test_torque_submit_writes_a_script_file_and_cancel_tolerates_gone_jobs():
    path = "/w/p0/.resel-r1-abcdef-p0.qsub.sh"
    qsub = ("qsub", "-N", "resel-r1-abcdef-p0", "-l", "nodes=1:ppn=2,walltime=00:01:01", "-r", "n", "-o", "/w/p0/pilot.out",
            "-j", "oe", path)
    tr = Recorded({qsub: "42.head\n", ("qdel", "42.head"): Reply("", "qdel: Unknown Job Id 42.head\n", 153)})
    cli = PBSCLI(tr, dialect="torque")
    seen = {}
    tr.write_file = lambda p, data, mode=None: seen.update({p: (data, mode)})
    assert cli.submit("#!/bin/sh\ntrue\n", name="resel-r1-abcdef-p0", cores=2, walltime=61, workdir="/w/p0",
                      output="/w/p0/pilot.out") == "42.head"
    assert seen[path] == (b"#!/bin/sh\ncd /w/p0 || exit 1\ntrue\n", 0o700)
    cli.cancel(["42.head"])                                           # already gone: fine
    with pytest.raises(SchedulerError, match="may hold only"):
        cli.submit("x", name="n", cores=1, walltime=60, workdir="/w/a b")
    bad = Recorded({("qdel", "5"): Reply("qdel: Kill job error on job id 5: Access/permission denied\n", "", 1)})
    with pytest.raises(SchedulerError, match="permission denied"):
        PBSCLI(bad, dialect="torque").cancel(["5"])


def test_torque_empty_job_list_is_exit_153():
    tr = Recorded({("qstat", "-f"): Reply("", "", 153)})
    assert PBSCLI(tr, dialect="torque").jobs() == {}
    tr = Recorded({("qstat", "-f"): Reply("", "qstat: cannot connect to server head (errno=111)\n", 111)})
    with pytest.raises(SchedulerError) as info:
        PBSCLI(tr, dialect="torque").jobs()
    assert "cannot connect" in str(info.value) and "did not answer" in info.value.hint


def test_an_unknown_state_letter_is_kept_as_such_not_taken_as_final():
    """A letter not in the table (a newer PBS) must not make the reply unreadable nor look final:
    it becomes ``unknown`` with the letter kept as ``native``, which the coordinator keeps
    polling (issue 13 §2)."""
    jobs = f.parse_jobs_json(f.load_json('{"Jobs": {"1.pbs": {"job_state": "Z", "Job_Name": "x"}}}', "qstat"), UTC)
    assert (jobs["1.pbs"].state, jobs["1.pbs"].native, jobs["1.pbs"].reason) == ("unknown", "Z", "unknown PBS state 'Z'")
    assert not jobs["1.pbs"].state.final and jobs["1.pbs"].shown == "Z (unknown)"
    assert f.job_state("?") == ("unknown", "unknown PBS state '?'")
