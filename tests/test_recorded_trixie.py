"""Slurm 24.11 and HTCondor 23.9 replies RECORDED from the real daemons of the testbed's Debian 13
part (tests/data/trixie/record.py, which says how and in which state; STATE.json names the jobs).
No daemon is needed here: these pin what the live tests found, so a change of the parsers is
checked against real output of the versions users run, on any machine.

Recorded state: tbc (4 CPUs) runs job A (4 CPUs, 2-minute limit) and holds job B (2 CPUs,
1 minute) pending for Resources; the pool's partitionable slot (4 CPUs) lends 1 CPU to a
dynamic slot running job 1, job 2 is idle (its requirements match nothing), job 3 was removed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from resel.backends.htcondor import formats as hf
from resel.backends.slurm import formats as fmt
from resel.backends.slurm.rest import SlurmREST, default_when_unflagged
from resel.errors import SchedulerError

DATA = Path(__file__).parent / "data" / "trixie"
SLURM = DATA / "slurm-24.11"
CONDOR = DATA / "htcondor-23.9"
STATE = json.loads((DATA / "STATE.json").read_text())
A, B = STATE["slurm_running"], STATE["slurm_pending"]
VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42")


def doc(name: str) -> dict:
    return json.loads((SLURM / name).read_text())


# ---------------------------------------------------------------- Slurm 24.11, the CLI's JSON


def test_sinfo_json_is_data_parser_v0042_without_partition_flags():
    sinfo = doc("sinfo.json")
    assert fmt.json_layout(sinfo) == "data_parser/v0.0.42" and fmt.slurm_release(sinfo) == "24.11.5"
    metas, nodes = fmt.parse_sinfo_json(sinfo)
    # no DEFAULT flag anywhere: why SlurmCLI reads the configuration from scontrol's text
    assert {n: m.default for n, m in metas.items()} == {"debug": False}
    conf = fmt.parse_scontrol_partitions((SLURM / "scontrol_show_partition.txt").read_text())
    parts = fmt.combine_partitions(conf, nodes)
    assert [(p.name, p.default, p.max_time, p.total_cpus, p.idle_cpus) for p in parts] == [
        ("debug", True, 4 * 3600.0, 4, 0)]                          # job A holds all 4 CPUs
    assert fmt.parse_version((SLURM / "sinfo_version.txt").read_text()) == "24.11.5"


def test_squeue_json_running_and_pending_jobs():
    jobs = fmt.parse_jobs_json(doc("squeue.json"))
    a, b = jobs[A], jobs[B]
    assert (a.native, a.cpus, a.time_limit, a.reason, a.partition, a.user) == ("RUNNING", 4, 120.0, None, "debug", "reselap")
    assert a.end == a.start + 120
    assert (b.native, b.cpus, b.time_limit, b.reason) == ("PENDING", 2, 60.0, "Resources")
    # a pending job's start is the backfill scheduler's plan: when A's limit frees the CPUs
    assert (b.start, b.end) == (a.end, a.end + 60)
    av = fmt.make_availability("slurm", "24.11.5", fmt.combine_partitions(
        fmt.parse_scontrol_partitions((SLURM / "scontrol_show_partition.txt").read_text()),
        fmt.parse_sinfo_json(doc("sinfo.json"))[1]), jobs.values(), 0.0)
    assert (av.free_cores, av.total_cores, av.running_jobs, av.pending_jobs) == (0, 4, 1, 1)


# ---------------------------------------------------------------- Slurm 24.11, slurmrestd


@pytest.mark.parametrize("version", VERSIONS)
def test_rest_partitions_lack_flags_and_the_lone_one_is_the_default(version):
    reply = doc(f"rest_{version}_partitions.json")
    metas = fmt.parse_partitions_json(reply, "GET /partitions")
    assert {n: m.default for n, m in metas.items()} == {"debug": False}
    fixed, note = default_when_unflagged(metas, reply)
    assert fixed["debug"].default and "only partition, debug, taken as the default" in note
    assert (fixed["debug"].max_time, fixed["debug"].total_cpus) == (4 * 3600.0, 4)
    jobs = fmt.parse_jobs_json(doc(f"rest_{version}_jobs.json"), "GET /jobs")
    assert (jobs[A].native, jobs[A].cpus, jobs[B].native, jobs[B].reason) == ("RUNNING", 4, "PENDING", "Resources")


def test_default_partition_rule_corners():
    meta = fmt.PartitionMeta("debug", "UP", 60.0, False, 4, 1)
    other = fmt.PartitionMeta("long", "UP", 600.0, False, 4, 1)
    flagged = fmt.PartitionMeta("debug", "UP", 60.0, True, 4, 1)
    # flags reported (the ≤ v0.0.38 layout always has them): no default means none, nothing assumed
    assert default_when_unflagged({"debug": meta}, {"partitions": [{"name": "debug", "flags": []}]}) == (
        {"debug": meta}, None)
    # a default already flagged: kept as it is
    assert default_when_unflagged({"debug": flagged}, {"partitions": [{"name": "debug"}]}) == ({"debug": flagged}, None)
    # several unflagged partitions: the default stays unknown, and the note says so
    metas, note = default_when_unflagged({"debug": meta, "long": other}, {"partitions": [{}, {}]})
    assert not any(m.default for m in metas.values()) and "does not say which partition" in note
    assert default_when_unflagged({}, {"partitions": []}) == ({}, None)


class _Reply:
    def __init__(self, text: str, status: int):
        self.text, self.status_code, self.headers = text, status, {}

    def close(self):
        pass

    def json(self):
        return json.loads(self.text)


class _Replay:
    """slurmrestd as recorded: path → (file, status); what is not recorded is a 404 text."""

    def __init__(self, served: dict[str, tuple[str, int]]):
        self.served, self.headers, self.asked = served, {}, []
        self.missing = (SLURM / "rest_v0.0.38_ping_404.txt").read_text()

    def _answer(self, url: str) -> _Reply:
        path = url.split("/slurm/", 1)[1]
        self.asked.append(path)
        if path in self.served:
            name, status = self.served[path]
            return _Reply((SLURM / name).read_text(), status)
        return _Reply(self.missing, 404)

    def get(self, url, timeout=None):
        return self._answer(url)

    def request(self, method, url, json=None, timeout=None, headers=None, allow_redirects=True):
        return self._answer(url)


def _served(versions=VERSIONS, **override) -> dict[str, tuple[str, int]]:
    out = {f"{v}/{p}": (f"rest_{v}_{p}.json", 200) for v in versions for p in ("ping", "partitions", "nodes", "jobs")}
    out.update(override)
    return out


def test_rest_auto_takes_the_newest_version_served():
    session = _Replay(_served())
    r = SlurmREST("http://tbc:6821", "reselap", "t", api_version="auto", session=session)
    assert r.version() == "24.11.5" and r.api_version == "v0.0.42"
    assert session.asked == ["v0.0.42/ping", "v0.0.42/ping"]        # one probe, then the real call
    session = _Replay(_served(("v0.0.40",)))
    r = SlurmREST("http://tbc:6821", "reselap", "t", api_version="auto", session=session)
    av = r.availability()
    assert r.api_version == "v0.0.40" and session.asked[:3] == ["v0.0.42/ping", "v0.0.41/ping", "v0.0.40/ping"]
    assert (av.total_cores, av.free_cores, av.running_jobs, av.pending_jobs) == (4, 0, 1, 1)
    assert [(p.name, p.default) for p in av.partitions] == [("debug", True)]
    nothing = SlurmREST("http://tbc:6821", "reselap", "t", api_version="auto", session=_Replay({}))
    with pytest.raises(SchedulerError, match="serves none of the API versions resel reads"):
        nothing.version()


def test_rest_wrong_token_reply_511_says_to_renew_the_token():
    """24.11 answers a JWT slurmctld refuses with HTTP 511 and an empty errors list."""
    assert STATE["wrong_token_status"] == 511
    session = _Replay(_served(**{"v0.0.42/partitions": ("rest_v0.0.42_partitions_wrong_token.json", 511)}))
    r = SlurmREST("http://tbc:6821", "reselap", "wrong", api_version="v0.0.42", session=session)
    with pytest.raises(SchedulerError) as err:
        r.availability()
    assert "HTTP 511 (authentication refused)" in str(err.value)
    assert err.value.hint and "token" in err.value.hint


def test_rest_v0038_is_not_served_by_2411():
    assert STATE["v0.0.38_status"] == 404
    r = SlurmREST("http://tbc:6821", "reselap", "t", api_version="v0.0.38", session=_Replay(_served()))
    with pytest.raises(SchedulerError, match="not found") as err:
        r.version()
    assert "may not serve API v0.0.38" in err.value.hint


# ---------------------------------------------------------------- HTCondor 23.9.6


def test_condor_status_json_partitionable_slot_lends_one_core():
    slots = hf.parse_slots((CONDOR / "condor_status.json").read_text())
    kinds = sorted((s.slot_type, s.state, s.cpus, s.slot_cpus) for s in slots)
    assert kinds == [("Dynamic", "Claimed", 1, 1), ("Partitionable", "Unclaimed", 3, 4)]
    pool = hf.summarize_pool(slots)
    # total: the partitionable slot's configured 4 (the dynamic one is carved out of it);
    # free: its 3 unlent CPUs; claimed: the dynamic slot's 1
    assert (pool.total_cores, pool.free_cores, pool.claimed_cores, pool.machines) == (4, 3, 1, 1)
    assert not pool.estimated_free and pool.clock_ghz is None       # no slot advertises a clock
    schedds = hf.parse_json_ads((CONDOR / "condor_status_schedd.json").read_text(), "condor_status -schedd -json")
    assert hf.schedd_totals(schedds) == (1, 1)                     # job 1 running, job 2 idle


def test_condor_q_and_history_json_job_states():
    queue = hf.parse_jobs((CONDOR / "condor_q.json").read_text())
    run, idle = queue[STATE["condor_running"]], queue[STATE["condor_idle"]]
    assert (run.state, run.name, run.user, run.cpus) == ("running", "rec-running", "reselap", 1)
    assert run.start is not None and run.submit is not None and run.start >= run.submit
    assert (idle.state, idle.name, idle.start) == ("pending", "rec-idle", None)
    assert STATE["condor_removed"] not in queue                    # removed jobs leave the queue at once
    gone = hf.parse_jobs((CONDOR / "condor_history.json").read_text(), "condor_history -json")
    removed = gone[STATE["condor_removed"]]
    assert removed.state == "cancelled" and removed.reason == "via condor_rm (by user reselap)"


def test_condor_version_submit_and_rm_texts():
    assert hf.parse_version((CONDOR / "condor_version.txt").read_text()) == "23.9.6"
    assert hf.parse_submit_terse((CONDOR / "condor_submit_terse.txt").read_text()) == [STATE["condor_running"]]
    rm = (CONDOR / "condor_rm.txt").read_text()
    assert rm.strip() == f"Job {STATE['condor_removed']} marked for removal"
    assert hf.parse_rm(rm, "", 0, [STATE["condor_removed"]]) == []


def test_condor_q_of_a_removed_job_still_ending_is_completing():
    """A running job just removed (condor_rm) stays in condor_q with JobStatus 3 while it ends:
    recorded live (``condor_q -json`` 0.1 s after ``condor_rm`` of a job that takes 4 s over its
    SIGTERM; it was listed so for 4 s). It is completing — not final: a pilot's wrapper is still
    pushing its last results through chirp — and cancelled only from the history."""
    queue = hf.parse_jobs((CONDOR / "condor_q_removing.json").read_text())
    (job,) = queue.values()
    assert (job.name, job.state, job.native, job.user) == ("rec-removing", "completing", "Removed", "reselap")
    assert job.reason == "removed, still ending (via condor_rm (by user reselap))"
    assert job.state.phase == "running" and not job.state.final
    gone = hf.parse_jobs((CONDOR / "condor_q_removing.json").read_text(), "condor_history -json")
    assert gone[job.job_id].state == "cancelled" and gone[job.job_id].state.final


def test_the_pools_queue_snapshot_from_recorded_replies():
    """HTCondorCLI.queue_snapshot's three replies, recorded on the pool (tests/data/trixie/
    htcondor-23.9/snapshot-*, by hand: four jobs of 90 s running, one idle behind them, one
    submitted with ``hold = true``; snapshot-STATE.json says which), through the real parsers
    into :func:`pool_snapshot`; the twin's start by the definition: the 4 cores free when the
    fillers end (their start + 90 s), the idle job takes the first, our pilot the second, at the
    first negotiation cycle at or after that."""
    from resel.backends.htcondor.client import pool_snapshot
    from resel.models.twin import twin_start
    state = json.loads((CONDOR / "snapshot-STATE.json").read_text())
    taken = state["taken_at"]
    jobs = hf.parse_jobs((CONDOR / "snapshot-condor_q_allusers.json").read_text(), "condor_q -allusers -json")
    slots = hf.parse_slots((CONDOR / "snapshot-condor_status.json").read_text())
    negotiators = hf.parse_json_ads((CONDOR / "snapshot-condor_status_negotiator.json").read_text())
    snap = pool_snapshot(slots, jobs.values(), negotiators, taken)
    assert snap.total_cores == 4 and [j.job_id for j in snap.running] == state["running"]
    for j in snap.running:
        assert j.time_limit == 90 and j.elapsed == pytest.approx(taken - jobs[j.job_id].start) and j.cores == 1
    assert [j.job_id for j in snap.pending] == [state["idle"]]
    assert jobs[state["held"]].reason.startswith("Held: ")
    assert any("1 held job(s) left out" in n for n in snap.notes), snap.notes
    neg = json.loads((CONDOR / "snapshot-condor_status_negotiator.json").read_text())[0]
    assert (snap.cycle_end, snap.cycle_period) == (neg["LastNegotiationCycleEnd0"], neg["LastNegotiationCyclePeriod0"])
    est = twin_start(snap, 1, 60)
    free = sorted(jobs[j].start + 90 for j in state["running"])[1]
    k = max(0, -(-(free - snap.cycle_end) // snap.cycle_period))
    assert est.start == pytest.approx(snap.cycle_end + k * snap.cycle_period)
    assert est.ahead == (state["idle"],) and "negotiation cycle" in est.explanation
