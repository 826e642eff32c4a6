"""HTCondor reply parsers (backends/htcondor/formats.py) through the real ClassAd library.

The slot tests read the REAL ``condor_status -long`` recording with ``classad2``; the ``-json``,
``condor_q``/``condor_history``, ``-terse`` and ``condor_rm`` samples are CONSTRUCTED from it or
in the tools' formats (tests/htcondor_samples.py says how). No pool runs here.
"""

from __future__ import annotations

import json

import classad2
import pytest

from resel.backends.htcondor import formats as fmt
from resel.errors import SchedulerError, SchedulerReplyError
import htcondor_samples as S  # tests/ is on sys.path (rootdir conftest)


# ---------------------------------------------------------------------------- the real recording


def test_real_long_output_parses_into_ten_slots():
    slots = fmt.parse_slots(S.real_long_text(), "condor_status -long")
    assert len(slots) == 10
    kinds = [s.slot_type for s in slots]
    assert kinds.count("Partitionable") == 2 and kinds.count("Dynamic") == 6 and kinds.count("Static") == 2
    first = slots[0]
    assert first.name == "slot1@cpu2.htc.inm7.de" and first.machine == "cpu2.htc.inm7.de"
    assert first.state == "Unclaimed" and first.total_cpus == 12 and first.slot_cpus == 12
    # the capture has no Activity/Cpus/Memory/CPU model: recorded as unknown, cpus from TotalSlotCpus
    assert first.activity is None and not first.cpus_known and first.memory == 66560
    assert all(s.cpu_model is None and s.clock_mhz is None for s in slots)
    assert {s.machine for s in slots} == {"cpu2.htc.inm7.de", "cpu4.htc.inm7.de", "cpu11.htc.inm7.de",
                                          "gpu1.htc.inm7.de"}


def test_real_long_output_pool_summary_has_no_clock():
    summary = fmt.summarize_pool(fmt.parse_slots(S.real_long_text(), "condor_status -long"))
    # p-slots 12 (cpu2) + 10 (gpu1) + two 1-cpu static slots (cpu11); dynamic slots are inside
    assert summary.total_cores == 24
    # cpu2: 12 - 1 dynamic listed; gpu1: 10 - 3 dynamic listed (no Cpus attribute: derived)
    assert summary.free_cores == 11 + 7 and summary.estimated_free
    assert summary.machines == 4 and summary.slots == 10
    assert summary.models == {"unknown": 24}
    # no GHz anywhere in the pool's ads: None, and LIM keeps the site file's clock (2.50 for OSG)
    assert summary.clock_ghz is None and summary.clock_coverage == 0.0
    info = fmt.cpu_summary(summary)
    assert info["base_mhz"] is None and "site file" in info["clock_source"]


def test_expressions_of_the_real_ads_evaluate_in_their_ad():
    ad = fmt.parse_long(S.real_long_text())[0]
    assert str(ad.lookup("SlotWeight")) == "Cpus"
    assert fmt.value(ad, "SlotWeight") is None      # Cpus is undefined in the capture: not a crash
    assert fmt.value(ad, "TotalSlotCpus") == 12


# ---------------------------------------------------------------------------- constructed -json


def test_constructed_status_json_is_htcondors_encoding():
    text = S.constructed_status_json()
    assert '"\\/Expr(' in text                       # expressions as HTCondor's JSON writes them
    ads = fmt.parse_json_ads(text, "condor_status -json")
    assert len(ads) == 10
    assert isinstance(ads[0].lookup("Start"), classad2.ExprTree)
    assert fmt.value(ads[0], "SlotWeight") == 11     # SlotWeight = Cpus, evaluated in the ad


def test_constructed_status_json_weighted_clock_and_models():
    slots = fmt.parse_slots(S.constructed_status_json())
    assert all(s.cpus_known for s in slots)
    summary = fmt.summarize_pool(slots)
    assert summary.total_cores == 24 and summary.free_cores == 18 and not summary.estimated_free
    assert summary.models == {"Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz": 12,
                              "AMD EPYC 7742 64-Core Processor": 2,
                              "Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz": 10}
    # weighted by cpus over the slots that have a clock: (12 * 2.4 + 10 * 2.2) / 22
    assert summary.clock_ghz == pytest.approx((12 * 2.4 + 10 * 2.2) / 22, abs=1e-4)
    assert summary.clock_coverage == pytest.approx(22 / 24, abs=1e-4)
    info = fmt.cpu_summary(summary)
    assert info["model"] == "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz"
    assert info["base_mhz"] == pytest.approx(2309.1, abs=0.1)


def test_clock_from_model_names():
    assert fmt.clock_from_model("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz") == pytest.approx(2400.0)
    assert fmt.clock_from_model("AMD EPYC 7742 64-Core Processor") is None
    assert fmt.clock_from_model(None) is None
    assert fmt.clock_from_model("weird @ fastGHz") is None


def test_admin_clock_attribute_wins_over_the_model_string():
    ad = classad2.ClassAd({"Name": "slot1@x", "State": "Unclaimed", "Activity": "Idle", "Cpus": 4,
                           "SlotType": "Static", "CPUModel": "Intel Foo @ 2.00GHz", "CPUClockMHz": 2600})
    slot = fmt.slot_from_ad(ad)
    assert slot.clock_mhz == 2600.0 and slot.idle
    assert fmt.summarize_pool([slot]).clock_ghz == 2.6


def test_availability_is_one_pool_partition():
    summary = fmt.summarize_pool(fmt.parse_slots(S.constructed_status_json()))
    running, idle = fmt.schedd_totals(fmt.parse_json_ads(S.as_json(S.CONSTRUCTED_SCHEDDS)))
    av = fmt.make_availability("23.0.3", summary, running, idle, 1.0)
    assert av.scheduler == "htcondor" and av.free_cores == 18 and av.total_cores == 24
    assert (av.running_jobs, av.pending_jobs) == (10000, 15400)
    assert [p.name for p in av.partitions] == ["pool"] and av.partitions[0].max_time is None


# ---------------------------------------------------------------------------- jobs


def test_queue_json_states_and_fields():
    jobs = fmt.parse_jobs(S.as_json(S.CONSTRUCTED_QUEUE))
    run, idle, held = jobs["4242.0"], jobs["4243.0"], jobs["4244.0"]
    assert run.state == "running" and run.start == 1764100060 and run.name == "resel-r1-abcdef-p0"
    assert run.time_limit == 900 and run.cpus == 1 and run.user == "alice"
    assert idle.state == "pending" and idle.start is None and idle.cpus == 1   # \/Expr(1 * 1)\/
    assert held.state == "held" and held.native == "Held" and held.reason.startswith("Held: Error from slot1_4@cpu4")


def test_history_json_completed_failed_removed():
    jobs = fmt.parse_jobs(S.as_json(S.CONSTRUCTED_HISTORY), "condor_history -json")
    assert jobs["4240.0"].state == "done" and jobs["4240.0"].end == 1764099950
    assert jobs["4240.0"].exit_code == "0"
    assert jobs["4241.0"].state == "failed" and jobs["4241.0"].reason == "exit code 1"
    assert jobs["4239.0"].state == "cancelled" and jobs["4239.0"].end == 1764099500
    assert "condor_rm" in jobs["4239.0"].reason


@pytest.mark.parametrize("status,exit_code,signal,state", [
    (1, None, False, "pending"), (2, None, False, "running"), (3, None, False, "cancelled"),
    (4, 0, False, "done"), (4, 2, False, "failed"), (4, None, True, "failed"),
    (5, None, False, "held"), (6, None, False, "completing"), (7, None, False, "running"),
    (8, None, False, "unknown"), (0, None, False, "unknown"),
])
def test_job_status_mapping(status, exit_code, signal, state):
    assert fmt.job_state(status, exit_code, signal) == state


def test_job_states_are_the_neutral_vocabulary():
    """HTCondor's codes translate into resel's JobState (not Slurm's words), and only a code
    outside the manual's table is unknown: the seven documented ones each have a phase."""
    from resel.backends.jobs import JobState
    assert set(fmt.JOB_STATES) == set(range(1, 8))
    for code, state in fmt.JOB_STATES.items():
        assert isinstance(state, JobState) and state.phase != "unknown", code


def test_empty_queue_is_no_jobs():
    assert fmt.parse_jobs("") == {} and fmt.parse_jobs("[]\n") == {}


# ---------------------------------------------------------------------------- commands


def test_submit_terse_and_version():
    assert fmt.parse_submit_terse(S.CONSTRUCTED_TERSE) == ["4245.0"]
    assert fmt.parse_submit_terse("77.0 - 77.2\n") == ["77.0", "77.1", "77.2"]
    assert fmt.parse_version(S.CONSTRUCTED_VERSION) == "23.0.3"
    for bad in ("", "Submitting job(s).\n1 job(s) submitted to cluster 12.\n", "12.0 - 13.0"):
        with pytest.raises(SchedulerReplyError):
            fmt.parse_submit_terse(bad)
    with pytest.raises(SchedulerReplyError):
        fmt.parse_version("condor 23")


def test_condor_rm_outputs():
    assert fmt.parse_rm(S.CONSTRUCTED_RM_OK, "", 0, ["4242.0"]) == []
    assert fmt.parse_rm("", S.CONSTRUCTED_RM_GONE, 1, ["4239.0"]) == []     # already gone: fine
    problems = fmt.parse_rm("", S.CONSTRUCTED_RM_DENIED, 1, ["5000.0"])
    assert problems and "Permission denied" in problems[0]


def test_job_ids_are_checked():
    assert fmt.check_ids(["12.0", " 3.14 "]) == ["12.0", "3.14"]
    for bad in ("12", "12.x", "-1.0", "1.0; rm -rf /"):
        with pytest.raises(SchedulerError):
            fmt.check_ids([bad])


# ---------------------------------------------------------------------------- malformed


@pytest.mark.parametrize("text", [
    'Name = "slot1@x"\nState = \n',                     # a line the library would drop silently
    'Name = "slot1@x"\nCpus = ((\n',
    "this is not a ClassAd at all\n",
    'Name = "slot1@x"\n\nState = "Unclaimed"\n',       # an ad without Name
    'Name = 42\n',                                     # Name not a string
    'Name = "slot1@x"\nCpus = "four"\n',               # Cpus not a number
])
def test_malformed_long_ads(text):
    with pytest.raises(SchedulerReplyError):
        fmt.parse_slots(text, "condor_status -long")


@pytest.mark.parametrize("text", [
    '[{"Name": "slot1@x"',                              # truncated
    '{"Name": "slot1@x"}',                              # not an array
    '[42]',                                             # not an ad
    '[{"Name": "slot1@x", "Start": "\\/Expr(Cpus >)\\/"}]',   # a bad expression
])
def test_malformed_json_ads(text):
    with pytest.raises(SchedulerReplyError):
        fmt.parse_slots(text)


def test_malformed_job_ads():
    with pytest.raises(SchedulerReplyError):
        fmt.parse_jobs(json.dumps([{"ClusterId": 1, "JobStatus": 2}]))          # no ProcId
    # a JobStatus not in the table is unknown (its number kept as native), never taken as final (issue 13 §2)
    assert fmt.parse_jobs(json.dumps([{"ClusterId": 1, "ProcId": 0, "JobStatus": 9}]))["1.0"].state == "unknown"
