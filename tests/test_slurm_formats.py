"""The Slurm parsers on real recorded replies (shared/data/formats/slurm), on text captured
from the testbed's Slurm 22.05, and on data_parser-layout samples constructed by hand.

The constructed samples (marked CONSTRUCTED) follow the field paths of Slurm's data_parser
v0.0.40–v0.0.42 parsers (src/plugins/data_parser/v0.0.4x/parsers.c: ``sinfo[].partition``,
``cpus.total``, ``maximums.time`` as number objects, ``job_state`` lists); no real reply of
those generations for sinfo/sacct was available.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, timedelta, timezone
from pathlib import Path

import pytest
from resel.backends.slurm import formats as f
from resel.backends.slurm.formats import SchedulerError, SchedulerReplyError

from resel.errors import ReselError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "formats" / "slurm"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def num(n: float, *, set_: bool = True, infinite: bool = False) -> dict:
    """A data_parser number object."""
    return {"set": set_, "infinite": infinite, "number": n}


def test_every_recorded_file_is_used_here():
    used = {"sinfo_fallback.txt", "sinfo_out.json", "slurmrestd_slurm_cancel_job.json",
            "slurmrestd_slurm_get_job.json", "slurmrestd_slurm_get_job_not_found.json",
            "slurmrestd_slurm_get_nodes.json", "slurmrestd_slurm_get_partitions.json",
            "slurmrestd_slurm_submit_job.json", "squeue_fallback.txt", "squeue_out.json",
            "ssh_sacct_command.json", "ssh_sbatch_command.json",
            "ssh_sbatch_command_out_of_quota.json", "ssh_scancel_command.json",
            "ssh_scontrol_partitions.json", "ssh_sinfo_command.json",
            "ssh_squeue_allusers_command.json", "ssh_squeue_command.json"}
    assert {p.name for p in DATA.iterdir()} == used


# ---------------------------------------------------------------------------- scalars


@pytest.mark.parametrize("value, expected", [
    (5, 5), (None, None), (num(7), 7), (num(0, set_=False), None), (num(0, infinite=True), math.inf),
    (f.NO_VAL, None), (f.INFINITE, math.inf), ("12", 12), (num(1.5), 1.5),
])
def test_number_normalises_both_generations(value, expected):
    assert f.number(value) == expected


@pytest.mark.parametrize("value", ["abc", {"foo": 1}, [1]])
def test_number_rejects_garbage_with_a_reply_error(value):
    with pytest.raises(SchedulerReplyError, match="squeue: unexpected reply: cpus"):
        f.number(value, "cpus", "squeue")


def test_reply_errors_are_resel_errors():
    assert issubclass(SchedulerReplyError, SchedulerError)
    assert issubclass(SchedulerError, ReselError)


@pytest.mark.parametrize("text, seconds", [
    ("4:00:00", 14400), ("10:00", 600), ("5-00:00:00", 432000), ("30", 1800), ("1-2", 93600),
    ("1-02:03", 93780), ("UNLIMITED", None), ("Partition_Limit", None), ("00:00:01.5", 1.5),
])
def test_durations(text, seconds):
    assert f.parse_duration(text) == seconds


def test_bad_duration_names_the_field():
    with pytest.raises(SchedulerReplyError, match="MaxTime: not a Slurm duration"):
        f.parse_duration("soon", "MaxTime", "scontrol")


def test_times_epoch_iso_in_the_site_zone_and_unknown():
    assert f.parse_time("1795650870") == 1795650870.0
    plus1 = timezone(timedelta(hours=1))
    assert f.parse_time("2026-11-25T10:00:00", plus1) == 1795600800.0 - 3600
    assert f.parse_time("2026-11-25T10:00:00", UTC) == 1795600800.0
    assert f.parse_time("N/A") is None and f.parse_time("Unknown") is None
    assert f.parse_utc_offset("+0100\n") == plus1
    assert f.parse_utc_offset("-0530").utcoffset(None) == -timedelta(hours=5, minutes=30)


@pytest.mark.parametrize("value, state", [
    ("RUNNING", "RUNNING"), (["RUNNING"], "RUNNING"), (["COMPLETED", "COMPLETING"], "COMPLETING"),
    ("CANCELLED by 1000", "CANCELLED"), ("PD", "PENDING"), ("r", "RUNNING"), ("TO", "TIMEOUT"),
    (["PENDING", "REQUEUED"], "REQUEUED"), ("NODE_FAIL", "NODE_FAIL"),
])
def test_states(value, state):
    assert f.normalise_state(value) == state


# ---------------------------------------------------------------------------- sinfo / partitions


def test_sinfo_json_v0037_nodes():
    """Real 21.08 reply: nodes only. A down node and an ALLOCATED one offer no idle CPUs even
    though they report idle_cpus = 64."""
    doc = load("sinfo_out.json")
    assert f.json_layout(doc) == "openapi/v0.0.37" and f.slurm_release(doc) == "21.08.5"
    metas, nodes = f.parse_sinfo_json(doc)
    assert metas == {}
    by = {n.name.split(".")[0]: n for n in nodes}
    assert {k: (n.total, n.idle) for k, n in by.items()} == {
        "cs2": (64, 60), "cs3": (64, 64), "cs4": (64, 0), "cs5": (64, 0)}
    parts = f.combine_partitions({}, nodes)
    assert parts == [f.Partition("hw", "UNKNOWN", 256, 124, 4, None, False)]


def test_scontrol_partitions_real():
    metas = f.parse_scontrol_partitions(load("ssh_scontrol_partitions.json")["stdout"])
    assert list(metas) == ["part01", "part02", "xfer", "jupyterhub"]
    assert metas["part01"] == f.PartitionMeta("part01", "UP", 432000.0, True, 2, 1)
    assert metas["jupyterhub"].max_time == 8 * 3600 and metas["jupyterhub"].total_cpus == 393984


def test_rest_nodes_and_partitions_v0038_real():
    nodes = f.parse_nodes_json(load("slurmrestd_slurm_get_nodes.json"), "GET /nodes")
    assert nodes == [f.NodeCpus("localhost", ("part01", "part02", "xfer"), 2, 2)]
    metas = f.parse_partitions_json(load("slurmrestd_slurm_get_partitions.json"), "GET /partitions")
    assert [m.default for m in metas.values()] == [True, False, False]
    assert metas["part01"].max_time == 7200 * 60            # max_time_limit is in minutes
    av = f.make_availability("slurmrest", "22.05.5", f.combine_partitions(metas, nodes), [], 0.0)
    assert (av.free_cores, av.total_cores) == (2, 2)       # the default partition, not 3 x 2


def test_sinfo_text_from_the_testbed():
    """Captured from the testbed (Slurm 22.05): sinfo -h -o '%P %a %l %D %C'."""
    parts = f.parse_sinfo_text("debug* up 4:00:00 1 0/8/0/8\nshort up 10:00 1 2/6/0/8\n")
    assert parts == [f.Partition("debug", "UP", 8, 8, 1, 14400.0, True),
                     f.Partition("short", "UP", 8, 6, 1, 600.0, False)]
    assert f.parse_sinfo_text("old inact infinite 2 0/0/16/16\n")[0].state == "INACTIVE"
    with pytest.raises(SchedulerReplyError, match="line 1: expected 5 fields"):
        f.parse_sinfo_text("debug* up\n")
    with pytest.raises(SchedulerReplyError, match="A/I/O/T"):
        f.parse_sinfo_text("debug* up 4:00:00 1 0/x/0/8\n")


def test_sinfo_per_node_text_real():
    """FirecREST's per-node sinfo line (recorded): one node in three partitions counts once."""
    fields = ["SocketCoreThread", "CPUs", "CPUsLoad", "FreeMem", "Features", "NodeList", "NodeHost",
              "NodeAddr", "StateLong", "Partition", "Weight", "Version", "Memory", "CPUsState"]
    nodes = f.parse_sinfo_nodes_text(load("ssh_sinfo_command.json")["stdout"], fields)
    assert nodes == [f.NodeCpus("localhost", ("part01", "part02", "xfer"), 2, 2)]


def test_exporter_json_lines_sinfo_real():
    rows, bad = f.parse_json_lines((DATA / "sinfo_fallback.txt").read_text(), "sinfo")
    assert bad == []
    nodes = {n.name: n for n in f.nodes_from_json_lines(rows)}
    assert nodes["cs25"].partitions == ("hw", "hw-l", "hw-m", "hw-h", "cdn")
    assert (nodes["cs156"].idle, nodes["cs25"].idle, nodes["cs31"].idle) == (8, 0, 64)


def test_exporter_json_lines_squeue_real_with_its_faulty_lines():
    text = (DATA / "squeue_fallback.txt").read_text()
    with pytest.raises(SchedulerReplyError, match="squeue: unexpected reply: line 8"):
        f.parse_json_lines(text, "squeue")
    rows, bad = f.parse_json_lines(text, "squeue", strict=False)
    assert [n for n, _ in bad] == [8, 9]
    jobs = f.jobs_from_json_lines(rows, UTC)
    assert len(jobs) == 6
    assert jobs["26515966"].native == "RUNNING" and jobs["26515966"].partition == "hw-h"
    assert jobs["26515966"].end == f.parse_time("2023-09-21T00:21:42", UTC)
    assert jobs["51447051"].reason == "Dependency" and jobs["18804"].cpus == 24


def test_sinfo_json_data_parser_constructed():
    """CONSTRUCTED (data_parser v0.0.40 layout): two partitions sharing node n1; n2 only in
    debug, drained. Totals de-duplicate n1; v0.0.40 does not carry the partition flags."""
    def rec(part, names, total, idle, state):
        return {"node": {"state": [state]},
                "nodes": {"allocated": 0, "idle": len(names), "other": 0, "total": len(names),
                          "nodes": names},
                "cpus": {"allocated": total - idle, "idle": idle, "other": 0, "total": total},
                "partition": {"name": part, "cpus": {"task_binding": 0, "total": 8},
                              "nodes": {"configured": "n[1-2]", "total": 2},
                              "maximums": {"time": num(240) if part == "debug" else num(0, infinite=True)},
                              "partition": {"state": ["UP"]}}}
    doc = {"meta": {"plugin": {"type": "", "data_parser": "data_parser/v0.0.40"},
                    "slurm": {"version": {"major": "23", "minor": "11", "micro": "4"}, "release": "23.11.4"}},
           "errors": [], "warnings": [],
           "sinfo": [rec("debug", ["n1"], 4, 1, "MIXED"), rec("debug", ["n2"], 4, 0, "DRAINED"),
                     rec("short", ["n1"], 4, 1, "MIXED")]}
    assert f.json_layout(doc) == "data_parser/v0.0.40" and f.slurm_release(doc) == "23.11.4"
    metas, nodes = f.parse_sinfo_json(doc)
    assert metas["debug"].max_time == 240 * 60 and metas["short"].max_time is None
    assert metas["debug"].total_cpus == 8 and not metas["debug"].default
    parts = {p.name: p for p in f.combine_partitions(metas, nodes)}
    assert (parts["debug"].total_cpus, parts["debug"].idle_cpus, parts["debug"].nodes) == (8, 1, 2)
    assert (parts["short"].total_cpus, parts["short"].idle_cpus) == (4, 1)
    av = f.make_availability("slurm", "23.11.4", list(parts.values()), [], 0.0, nodes=nodes)
    assert (av.free_cores, av.total_cores) == (1, 8)          # n1 counted once


def test_partitions_json_v0042_default_flag_constructed():
    """CONSTRUCTED (newest /partitions layout, flags parsed as in data_parser v0.0.46):
    flags ["DEFAULT"], maximums.time number object."""
    doc = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "errors": [],
           "partitions": [{"name": "batch", "flags": ["DEFAULT"], "cpus": {"total": 64},
                           "nodes": {"total": 2}, "maximums": {"time": num(2880)},
                           "partition": {"state": ["UP"]}}]}
    assert f.parse_partitions_json(doc, "GET") == {
        "batch": f.PartitionMeta("batch", "UP", 172800.0, True, 64, 2)}


def test_missing_pieces_are_reply_errors_not_key_errors():
    with pytest.raises(SchedulerReplyError, match="no 'nodes' list"):
        f.parse_nodes_json({"meta": {}}, "GET /nodes")
    with pytest.raises(SchedulerReplyError, match="no partition.name"):
        f.parse_sinfo_json({"sinfo": [{"cpus": {}}]})
    with pytest.raises(SchedulerReplyError, match="not JSON"):
        f.load_json("sinfo: error: oops", "sinfo --json")
    with pytest.raises(SchedulerReplyError, match="no job_state"):
        f.parse_jobs_json({"jobs": [{"job_id": 3}]})


def test_availability_scope_and_counts():
    parts = [f.Partition("debug", "UP", 8, 2, 1, 3600.0, True), f.Partition("short", "UP", 8, 2, 1, 600.0, False)]
    R, P, D = f.JobState.RUNNING, f.JobState.PENDING, f.JobState.DONE
    jobs = [f.JobInfo("1", "a", R, None, None, None, None, 6, None, "u", "debug"),
            f.JobInfo("2", "b", P, None, None, None, None, 6, None, "u", "debug,short"),
            f.JobInfo("3", "c", P, None, None, None, None, 6, None, "u", "short"),
            f.JobInfo("4", "d", D, None, None, None, None, 6, None, "u", "debug")]
    av = f.make_availability("slurm", "22.05.8", parts, jobs, 1.0)
    assert (av.free_cores, av.total_cores, av.running_jobs, av.pending_jobs) == (2, 8, 1, 1)
    av = f.make_availability("slurm", "22.05.8", parts, jobs, 1.0, target="short")
    assert [p.name for p in av.partitions] == ["short"] and av.pending_jobs == 2


# ---------------------------------------------------------------------------- jobs


def test_squeue_json_real_mixed_generations():
    """Real file: meta says v0.0.37, but its second job carries data_parser number objects."""
    jobs = f.parse_jobs_json(load("squeue_out.json"))
    a, b = jobs["26515966"], jobs["58948420"]
    assert (a.native, a.cpus, a.time_limit, a.user, a.reason) == ("RUNNING", 1, 30240 * 60, "bkd", None)
    assert a.start == 1684114921 and a.end == 1686633833
    assert (b.native, b.cpus, b.time_limit, b.reason, b.start) == ("PENDING", 1, 1439 * 60, "Dependency", None)


def test_rest_job_v0040_real():
    doc = load("slurmrestd_slurm_get_job.json")
    assert f.json_layout(doc) == "data_parser/v0.0.40"
    jobs = f.parse_jobs_json(doc, "GET /job/16")
    j = jobs["16"]
    assert (j.native, j.name, j.cpus, j.time_limit, j.start, j.user) == (
        "RUNNING", "Count to 100", 1, 7200 * 60, 1773058656.0, "fireuser")


def test_rest_errors_become_scheduler_errors():
    with pytest.raises(SchedulerError, match="Unable to query JobId=134: Protocol authentication error"):
        f.load_json((DATA / "slurmrestd_slurm_get_job_not_found.json").read_text(), "GET /job/134")
    doc = f.load_json((DATA / "slurmrestd_slurm_cancel_job.json").read_text(), "DELETE /job/1")
    assert f.slurm_release(doc) == "22.05.5"


def test_squeue_text_and_start():
    """Text captured on the testbed with SLURM_TIME_FORMAT=%s; a name holding '|'."""
    text = ("1005|resel-probe|RUNNING|2|1795650925|1795650926|1795650986|1:00|None|root|debug\n"
            "1006|a|b|PENDING|8|1795650925|N/A|N/A|10:00|Resources|reseltb|debug,short\n")
    jobs = f.parse_squeue_text(text)
    assert jobs["1005"].time_limit == 60 and jobs["1005"].end == 1795650986
    assert jobs["1006"].name == "a|b" and jobs["1006"].start is None and jobs["1006"].reason == "Resources"
    assert f.parse_squeue_start("1006|1795651000\n1007|N/A\n") == {"1006": 1795651000.0, "1007": None}
    with pytest.raises(SchedulerReplyError, match="line 1: expected 11"):
        f.parse_squeue_text("1|x|RUNNING\n")


def test_squeue_format_real_and_the_inconsistent_one():
    fields = ["JobID", "NumNodes", "Cluster", "", "GroupName", "Account", "Name", "NodeList",
              "Partition", "PriorityLong", "State", "Reason", "TimeUsed", "SubmitTime", "StartTime",
              "EndTime", "", "TimeLimit", "UserName", "WorkDir"]
    jobs = f.parse_job_table(load("ssh_squeue_command.json")["stdout"], fields)
    j = jobs["1"]
    assert (j.name, j.native, j.start, j.end, j.time_limit, j.user) == (
        "SbatchTestXYZ", "RUNNING", 1787124673.0, 1787556673.0, 432000.0, "fireuser")
    # the recorded all-users reply lost one separator after "(null)": 19 fields for 20 columns
    with pytest.raises(SchedulerReplyError, match="expected 20 '\\|'-separated fields, got 19"):
        f.parse_job_table(load("ssh_squeue_allusers_command.json")["stdout"], fields, command="squeue")


def test_sacct_text_real():
    rec = load("ssh_sacct_command.json")
    fields = rec["command"].split("--format='")[1].rstrip("'").split(",")
    jobs = f.parse_sacct_text(rec["stdout"], fields)
    j = jobs["1"]
    assert (j.native, j.name, j.time_limit, j.exit_code, j.partition, j.submit) == (
        "COMPLETED", "SbatchTest", 7200 * 60, "0:0", "part01", 1750232859.0)


def test_sacct_text_skips_steps():
    text = ("7|job|CANCELLED by 0|1|2|3|00:00:01|2|0:15|00:10:00|u|debug|None\n"
            "7.batch|batch|CANCELLED|1|2|3|00:00:01|2|0:15|||debug|\n")
    jobs = f.parse_sacct_text(text)
    assert list(jobs) == ["7"] and jobs["7"].native == "CANCELLED" and jobs["7"].time_limit == 600


def test_sacct_json_both_generations_constructed():
    """CONSTRUCTED: slurmdbd job records as sacct --json prints them, v0.0.38 then v0.0.40."""
    old = {"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [
        {"job_id": 9, "name": "p", "user": "u", "partition": "debug",
         "state": {"current": "COMPLETED", "reason": "None"}, "required": {"CPUs": 4},
         "time": {"submission": 100, "start": 110, "end": 170, "limit": 5}, "exit_code": {"status": "SUCCESS", "return_code": 0}}]}
    new = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.40"}}, "errors": [], "jobs": [
        {"job_id": 9, "name": "p", "user": "u", "partition": "debug",
         "state": {"current": ["TIMEOUT"], "reason": "None"}, "required": {"CPUs": 4},
         "tres": {"allocated": [{"type": "cpu", "count": 4}]},
         "time": {"submission": 100, "start": 110, "end": 170, "limit": num(5)},
         "exit_code": {"status": ["SUCCESS"], "return_code": num(0), "signal": {"id": num(0, set_=False)}}}]}
    a, b = f.parse_sacct_json(old)["9"], f.parse_sacct_json(new)["9"]
    assert (a.native, a.cpus, a.time_limit, a.start, a.exit_code) == ("COMPLETED", 4, 300.0, 110.0, "0:0")
    assert (b.native, b.cpus, b.time_limit, b.end, b.exit_code) == ("TIMEOUT", 4, 300.0, 170.0, "0:0")


def test_squeue_json_data_parser_constructed():
    """CONSTRUCTED (v0.0.41 squeue --json): state lists, number objects, unset start."""
    doc = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.41"}}, "errors": [], "jobs": [
        {"job_id": 12, "name": "resel-x-p0", "job_state": ["PENDING"], "cpus": num(4),
         "submit_time": num(100), "start_time": num(0), "end_time": num(0, set_=False),
         "time_limit": num(0, infinite=True), "state_reason": "Priority", "user_name": "u",
         "partition": "debug"}]}
    j = f.parse_jobs_json(doc)["12"]
    assert (j.native, j.cpus, j.start, j.end, j.time_limit, j.reason) == ("PENDING", 4, None, None, None, "Priority")


def test_accounting_disabled_is_recognised():
    assert f.accounting_disabled("Slurm accounting storage is disabled\n")
    assert not f.accounting_disabled("sacct: error: Problem talking to the database")


# ---------------------------------------------------------------------------- sbatch, scancel


def test_sbatch_replies():
    assert f.parse_sbatch("123\n") == "123"
    assert f.parse_sbatch("124;tba\n") == "124"
    assert f.parse_sbatch(load("ssh_sbatch_command.json")["stdout"]) == "1"
    with pytest.raises(SchedulerReplyError, match="no job id"):
        f.parse_sbatch("sbatch: warning: something\n")


def test_out_of_quota_reply_says_what_and_what_to_do():
    rec = load("ssh_sbatch_command_out_of_quota.json")
    err = f.sbatch_error(rec["stderr"], rec["command"], rec["exit_code"])
    text = str(err)
    assert text.startswith("sbatch refused the job: Job violates accounting/QOS policy "
                           "(job submit limit, user's size and/or time limits) [QOSMaxSubmitJobPerUserLimit]")
    assert "wait for some to finish" in text and "max_pilots" in text
    assert err.reply == rec["stderr"].strip() and err.command == rec["command"]


@pytest.mark.parametrize("stderr, words", [
    (("sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: "
      "Invalid partition name specified\n"), "`partition`"),
    ("allocation failure: Requested node configuration is not available\n", "no node in the partition"),
    (("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds "
      "some limit)\n"), "walltime"),
    ("allocation failure: Required partition not available (inactive or drain)\n", "not taking jobs now"),
    ("sbatch: error: weird\n", "documentation"),
])
def test_other_sbatch_refusals(stderr, words):
    assert words in str(f.sbatch_error(stderr))


def test_test_only_lines():
    line = "sbatch: Job 5 to start at 2026-11-25T10:00:00 using 2 processors on nodes n1 in partition debug"
    r = f.parse_test_only(line, UTC)
    assert (r.start, r.processors, r.nodes, r.partition) == (1795600800.0, 2, "n1", "debug")
    # the testbed with SLURM_TIME_FORMAT=%s, and the newer wording with a cluster
    assert f.parse_test_only("sbatch: Job 1002 to start at 1795650870 using 2 processors on nodes vm "
                             "in partition debug").start == 1795650870.0
    assert f.parse_test_only("sbatch: Job 7 to start at 1795650870 on cluster tba a using 4 processors "
                             "on nodes vm in partition short").partition == "short"
    with pytest.raises(SchedulerReplyError, match="no 'Job N to start at' line"):
        f.parse_test_only("sbatch: something else")


def test_scancel():
    assert f.parse_scancel(load("ssh_scancel_command.json")["stdout"]) == ["10"]
    assert f.scancel_problems("scancel: error: Kill job error on job id 5: Job/step already "
                              "completing or completed\nscancel: error: Invalid job id 6\n") == []
    assert f.scancel_problems("scancel: error: Kill job error on job id 5: Access/permission denied\n") == [
        "Kill job error on job id 5: Access/permission denied"]


def test_json_refusals():
    assert f.json_unsupported("sinfo: unrecognized option '--json'\nTry \"sinfo --help\"")
    assert f.json_unsupported("squeue: error: Unable to load data_parser plugin")
    assert not f.json_unsupported("sinfo: error: Unable to contact slurm controller")


def test_version():
    assert f.parse_version("slurm-wlm 22.05.8\n") == "22.05.8"
    assert f.parse_version("slurm 24.11.3\n") == "24.11.3"


# ---------------------------------------------------------------------------- login node CPU


def test_lscpu_json_flat_and_nested():
    flat = json.dumps({"lscpu": [{"field": "CPU(s):", "data": "8"},
                                 {"field": "Model name:", "data": "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"},
                                 {"field": "Socket(s):", "data": "2"}, {"field": "Core(s) per socket:", "data": "2"},
                                 {"field": "Thread(s) per core:", "data": "2"},
                                 {"field": "CPU max MHz:", "data": "3700.0000"}]})
    info = f.parse_lscpu_json(flat)
    assert (info["base_mhz"], info["max_mhz"], info["sockets"], info["cpus"]) == (2400.0, 3700.0, 2, 8)
    nested = json.dumps({"lscpu": [{"field": "Architecture:", "data": "x86_64", "children": [
        {"field": "CPU(s):", "data": "2"},
        {"field": "Vendor ID:", "data": "AuthenticAMD", "children": [
            {"field": "Model name:", "data": "AMD EPYC", "children": [
                {"field": "Socket(s):", "data": "1"}, {"field": "Core(s) per socket:", "data": "2"}]}]}]}]})
    info = f.parse_lscpu_json(nested)
    assert (info["model"], info["cpus"], info["cores_per_socket"], info["base_mhz"]) == ("AMD EPYC", 2, 2, None)


def test_cpuinfo():
    block = ("processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz\n"
             "cpu MHz\t\t: 2494.224\nphysical id\t: {s}\ncpu cores\t: 2\n")
    text = "\n".join(block.format(i=i, s=i // 2) for i in range(4))
    info = f.parse_cpuinfo(text)
    assert (info["cpus"], info["sockets"], info["cores_per_socket"], info["base_mhz"]) == (4, 2, 2, 2500.0)
    assert info["threads_per_core"] == 1


# ---------------------------------------------------------------- sacct --json of 22.05, recorded on tbb

SACCT_22 = Path(__file__).parent / "data" / "sacct"


def test_sacct_json_nothing_found_is_empty_only_where_allowed():
    """Real 22.05 reply for an id accounting never saw: "Nothing found" (9003) with no jobs."""
    text = (SACCT_22 / "nothing_found_22.05.json").read_text()
    assert f.parse_sacct_json(f.load_json(text, "sacct --json", empty_ok=True)) == {}
    with pytest.raises(SchedulerError, match=r"Nothing found with query \(error 9003\)"):
        f.load_json(text, "sacct --json")                    # elsewhere it stays an error


def test_sacct_json_other_errors_stay_errors_with_empty_ok():
    """Real 22.05 reply under SLURM_TIME_FORMAT=%s: error 9000 is never taken for "no jobs"."""
    text = (SACCT_22 / "time_format_epoch_22.05.json").read_text()
    with pytest.raises(SchedulerError, match=r"Unable to parse time format.*\(error 9000\)"):
        f.load_json(text, "sacct --json", empty_ok=True)


def test_sacct_json_of_a_failed_job_recorded():
    doc = f.load_json((SACCT_22 / "failed_exit3_22.05.json").read_text(), "sacct --json", empty_ok=True)
    [job] = f.parse_sacct_json(doc).values()
    text = (SACCT_22 / "failed_exit3_22.05.txt").read_text().strip().split("|")
    assert (job.job_id, job.name, job.native) == (text[0], text[1], text[2]) == ("500311", "sacct-probe", "FAILED")
    assert job.state.final and job.partition == "debug" and job.user == "reseltb"
