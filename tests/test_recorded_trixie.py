"""Replies RECORDED from the real daemons of the testbed's Debian roots (tests/data/trixie/record.py,
which says how and in which state; each folder's STATE.json names the jobs): Slurm 24.11.5 and
HTCondor 23.9.6 of the Debian 13 root in tests/data/trixie, Slurm 26.05.5 and HTCondor 25.14.1 of
the Debian sid root in tests/data/sid. No daemon is needed here: these pin what the live tests
found, so a change of the parsers is checked against real output of the versions users run, on
any machine. Most tests run once per recording (``rec``), and the Slurm ones once per layout
recorded (the CLI's default and older data_parser layouts; each slurmrestd API version).

Recorded state: the cluster (tbc, tbd: 4 CPUs) runs job A (4 CPUs, 2-minute limit) and holds
job B (2 CPUs, 1 minute) pending for Resources; the pool's partitionable slot (4 CPUs) lends 1 CPU
to a dynamic slot running job 1, job 2 is idle (its requirements match nothing), job 3 was removed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from resel.backends.htcondor import formats as hf
from resel.backends.slurm import formats as fmt
from resel.backends.slurm.rest import API_VERSIONS, SlurmREST, default_when_unflagged
from resel.errors import SchedulerError
from resel.shipped import chirp_sync

from recorded import RecordedSession, Response
from trixie_helpers import RELEASES

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Recording:
    """One root's recordings, and what its Debian packages (trixie_helpers.RELEASES)."""

    suite: str
    slurm: Path                      # tests/data/SUITE/slurm-SERIES
    condor: Path                     # tests/data/SUITE/htcondor-SERIES
    state: dict

    @property
    def release(self):
        return RELEASES[self.suite]

    @property
    def a(self) -> str:
        return self.state["slurm_running"]

    @property
    def b(self) -> str:
        return self.state["slurm_pending"]

    def doc(self, name: str) -> dict:
        return json.loads((self.slurm / name).read_text())

    def text(self, name: str) -> str:
        return (self.condor / name).read_text()


def _recording(suite: str) -> Recording:
    state = json.loads((DATA / suite / "STATE.json").read_text())
    series = ".".join(state["htcondor"].split(".")[:2])
    return Recording(suite, DATA / suite / f"slurm-{RELEASES[suite].slurm}", DATA / suite / f"htcondor-{series}", state)


RECORDINGS = {suite: _recording(suite) for suite in RELEASES}
TRIXIE = RECORDINGS["trixie"]
#: every CLI layout recorded: (suite, file suffix, data_parser version)
CLI_LAYOUTS = [(s, "", r.release.data_parser.removeprefix("data_parser/")) for s, r in RECORDINGS.items()] + [
    (s, f"_{v}", v) for s, r in RECORDINGS.items() for v in r.release.cli_older if (r.slurm / f"sinfo_{v}.json").exists()]
#: every slurmrestd API version recorded: (suite, version)
REST = [(s, v) for s, r in RECORDINGS.items() for v in r.release.rest]


@pytest.fixture(params=list(RECORDINGS))
def rec(request) -> Recording:
    return RECORDINGS[request.param]


# ---------------------------------------------------------------- Slurm, the CLI's JSON


@pytest.mark.parametrize("suite, suffix, parser", CLI_LAYOUTS)
def test_sinfo_json_and_the_partition_flags(suite, suffix, parser):
    r = RECORDINGS[suite]
    sinfo = r.doc(f"sinfo{suffix}.json")
    assert fmt.json_layout(sinfo) == f"data_parser/{parser}" and fmt.slurm_release(sinfo) == r.state["slurm"]
    metas, nodes = fmt.parse_sinfo_json(sinfo)
    # no DEFAULT flag before v0.0.45 (24.11's v0.0.40-v0.0.42, 26.05's v0.0.42-v0.0.44): why
    # SlurmCLI then reads the configuration from scontrol's text; v0.0.45 (26.05) flags it again
    assert {n: m.default for n, m in metas.items()} == {"debug": parser in r.release.flagged}
    conf = fmt.parse_scontrol_partitions((r.slurm / "scontrol_show_partition.txt").read_text())
    parts = fmt.combine_partitions(metas if parser in r.release.flagged else conf, nodes)
    assert [(p.name, p.default, p.max_time, p.total_cpus, p.idle_cpus) for p in parts] == [
        ("debug", True, 4 * 3600.0, 4, 0)]                          # job A holds all 4 CPUs
    assert fmt.parse_version((r.slurm / "sinfo_version.txt").read_text()) == r.state["slurm"]


@pytest.mark.parametrize("suite, suffix, parser", CLI_LAYOUTS)
def test_squeue_json_running_and_pending_jobs(suite, suffix, parser):
    r = RECORDINGS[suite]
    doc = r.doc(f"squeue{suffix}.json")
    assert fmt.json_layout(doc) == f"data_parser/{parser}"
    jobs = fmt.parse_jobs_json(doc)
    a, b = jobs[r.a], jobs[r.b]
    assert (a.native, a.cpus, a.time_limit, a.reason, a.partition, a.user) == ("RUNNING", 4, 120.0, None, "debug", "reselap")
    assert a.end == a.start + 120
    assert (b.native, b.cpus, b.time_limit, b.reason) == ("PENDING", 2, 60.0, "Resources")
    # a pending job's start is the backfill scheduler's plan: when A's limit frees the CPUs
    assert (b.start, b.end) == (a.end, a.end + 60)
    av = fmt.make_availability("slurm", r.state["slurm"], fmt.combine_partitions(
        fmt.parse_scontrol_partitions((r.slurm / "scontrol_show_partition.txt").read_text()),
        fmt.parse_sinfo_json(r.doc(f"sinfo{suffix}.json"))[1]), jobs.values(), 0.0)
    assert (av.free_cores, av.total_cores, av.running_jobs, av.pending_jobs) == (0, 4, 1, 1)


def test_the_layouts_of_one_release_read_alike():
    """26.05's squeue in each data_parser it has (v0.0.42 to the default v0.0.45) and slurmrestd's
    /jobs in each API version: the same jobs, field by field."""
    r = RECORDINGS["sid"]
    seen = [fmt.parse_jobs_json(r.doc(f"squeue{suffix}.json")) for s, suffix, _ in CLI_LAYOUTS if s == "sid"]
    seen += [fmt.parse_jobs_json(r.doc(f"rest_{v}_jobs.json"), "GET /jobs") for v in r.release.rest]
    assert len(seen) == 8 and all(jobs == seen[0] for jobs in seen), seen


# ---------------------------------------------------------------- Slurm, slurmrestd


@pytest.mark.parametrize("suite, version", REST)
def test_rest_partitions_and_the_default(suite, version):
    r = RECORDINGS[suite]
    reply = r.doc(f"rest_{version}_partitions.json")
    metas = fmt.parse_partitions_json(reply, "GET /partitions")
    flagged = version in r.release.flagged
    assert {n: m.default for n, m in metas.items()} == {"debug": flagged}
    fixed, note = default_when_unflagged(metas, reply)
    # without flags the lone partition is taken as the default, and the note says so
    assert fixed["debug"].default and (note is None) == flagged
    assert flagged or "only partition, debug, taken as the default" in note
    assert (fixed["debug"].max_time, fixed["debug"].total_cpus) == (4 * 3600.0, 4)
    jobs = fmt.parse_jobs_json(r.doc(f"rest_{version}_jobs.json"), "GET /jobs")
    assert (jobs[r.a].native, jobs[r.a].cpus, jobs[r.b].native, jobs[r.b].reason) == ("RUNNING", 4, "PENDING", "Resources")
    assert fmt.slurm_release(r.doc(f"rest_{version}_ping.json")) == r.state["slurm"]
    assert [n.total for n in fmt.parse_nodes_json(r.doc(f"rest_{version}_nodes.json"), "GET /nodes")] == [4]


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


def _slurmrestd(rec: Recording, served: dict[str, tuple[str, int]]) -> RecordedSession:
    """slurmrestd as recorded: path → (file, status); what is not recorded is its real 404 text."""
    return RecordedSession({path: Response((rec.slurm / name).read_text(), status)
                            for path, (name, status) in served.items()},
                           default=Response((rec.slurm / "rest_v0.0.38_ping_404.txt").read_text(), 404))


def _served(versions, **override) -> dict[str, tuple[str, int]]:
    out = {f"{v}/{p}": (f"rest_{v}_{p}.json", 200) for v in versions for p in ("ping", "partitions", "nodes", "jobs")}
    out.update(override)
    return out


def test_rest_auto_takes_the_newest_version_served(rec):
    """"auto" probes /ping from the newest API version resel reads down to the first served."""
    served = rec.release.rest
    newest, oldest = served[-1], served[0]
    session = _slurmrestd(rec, _served(served))
    r = SlurmREST("http://127.0.0.1:6821", "reselap", "t", api_version="auto", session=session)
    assert r.version() == rec.state["slurm"] and r.api_version == newest
    probes = [f"{v}/ping" for v in API_VERSIONS[:API_VERSIONS.index(newest) + 1]]
    assert session.asked == probes + [f"{newest}/ping"]             # the probes, then the real call
    session = _slurmrestd(rec, _served((oldest,)))
    r = SlurmREST("http://127.0.0.1:6821", "reselap", "t", api_version="auto", session=session)
    av = r.availability()
    probes = [f"{v}/ping" for v in API_VERSIONS[:API_VERSIONS.index(oldest) + 1]]
    assert r.api_version == oldest and session.asked[:len(probes)] == probes
    assert (av.total_cores, av.free_cores, av.running_jobs, av.pending_jobs) == (4, 0, 1, 1)
    assert [(p.name, p.default) for p in av.partitions] == [("debug", True)]
    nothing = SlurmREST("http://127.0.0.1:6821", "reselap", "t", api_version="auto", session=_slurmrestd(rec, {}))
    with pytest.raises(SchedulerError, match="serves none of the API versions resel reads"):
        nothing.version()


def test_rest_wrong_token_reply_511_says_to_renew_the_token(rec):
    """24.11 and 26.05 answer a JWT slurmctld refuses with HTTP 511 and an empty errors list."""
    assert rec.state["wrong_token_status"] == 511
    newest = rec.release.rest[-1]
    session = _slurmrestd(rec, _served(rec.release.rest, **{
        f"{newest}/partitions": (f"rest_{newest}_partitions_wrong_token.json", 511)}))
    r = SlurmREST("http://127.0.0.1:6821", "reselap", "wrong", api_version=newest, session=session)
    with pytest.raises(SchedulerError) as err:
        r.availability()
    assert "HTTP 511 (authentication refused)" in str(err.value)
    assert err.value.hint and "token" in err.value.hint


def test_rest_v0038_is_served_by_neither(rec):
    assert rec.state["v0.0.38_status"] == 404
    r = SlurmREST("http://127.0.0.1:6821", "reselap", "t", api_version="v0.0.38",
                  session=_slurmrestd(rec, _served(rec.release.rest)))
    with pytest.raises(SchedulerError, match="not found") as err:
        r.version()
    assert "may not serve API v0.0.38" in err.value.hint


# ---------------------------------------------------------------- HTCondor 23.9.6 and 25.14.1


def test_condor_status_json_partitionable_slot_lends_one_core(rec):
    slots = hf.parse_slots(rec.text("condor_status.json"))
    kinds = sorted((s.slot_type, s.state, s.cpus, s.slot_cpus) for s in slots)
    assert kinds == [("Dynamic", "Claimed", 1, 1), ("Partitionable", "Unclaimed", 3, 4)]
    pool = hf.summarize_pool(slots)
    # total: the partitionable slot's configured 4 (the dynamic one is carved out of it);
    # free: its 3 unlent CPUs; claimed: the dynamic slot's 1
    assert (pool.total_cores, pool.free_cores, pool.claimed_cores, pool.machines) == (4, 3, 1, 1)
    assert not pool.estimated_free and pool.clock_ghz is None       # no slot advertises a clock
    schedds = hf.parse_json_ads(rec.text("condor_status_schedd.json"), "condor_status -schedd -json")
    assert hf.schedd_totals(schedds) == (1, 1)                     # job 1 running, job 2 idle


def test_condor_q_and_history_json_job_states(rec):
    queue = hf.parse_jobs(rec.text("condor_q.json"))
    run, idle = queue[rec.state["condor_running"]], queue[rec.state["condor_idle"]]
    assert (run.state, run.name, run.user, run.cpus) == ("running", "rec-running", "reselap", 1)
    assert run.start is not None and run.submit is not None and run.start >= run.submit
    assert (idle.state, idle.name, idle.start) == ("pending", "rec-idle", None)
    assert rec.state["condor_removed"] not in queue                # removed jobs leave the queue at once
    gone = hf.parse_jobs(rec.text("condor_history.json"), "condor_history -json")
    removed = gone[rec.state["condor_removed"]]
    assert removed.state == "cancelled" and removed.reason == "via condor_rm (by user reselap)"


def test_condor_version_submit_and_rm_texts(rec):
    assert hf.parse_version(rec.text("condor_version.txt")) == rec.state["htcondor"]
    assert hf.parse_submit_terse(rec.text("condor_submit_terse.txt")) == [rec.state["condor_running"]]
    rm = rec.text("condor_rm.txt")
    assert rm.strip() == f"Job {rec.state['condor_removed']} marked for removal"
    assert hf.parse_rm(rm, "", 0, [rec.state["condor_removed"]]) == []


def test_the_attributes_resel_reads_are_in_both_releases_ads():
    """HTCondor 25 renamed or dropped some attributes of 23.9's ads (the slots' CPUsUsage is
    CpusUsage, OpSysVer and OpSysMajorVer are gone from them); none that resel asks for: each
    attribute of JOB_ATTRS and SLOT_ATTRS a recorded 23.9 ad has, the same ad of 25 has too."""
    old, new = RECORDINGS["trixie"], RECORDINGS["sid"]
    for name, attrs in (("condor_q.json", hf.JOB_ATTRS), ("condor_history.json", hf.JOB_ATTRS),
                        ("condor_status.json", hf.SLOT_ATTRS)):
        had = set().union(*(ad.keys() for ad in json.loads(old.text(name)))) & set(attrs)
        has = set().union(*(ad.keys() for ad in json.loads(new.text(name))))
        assert had and had <= has, (name, sorted(had - has))
    slots = set().union(*(ad.keys() for ad in json.loads(new.text("condor_status.json"))))
    assert "CpusUsage" in slots and not {"CPUsUsage", "OpSysVer"} & slots      # what did change


def test_condor_q_of_a_removed_job_still_ending_is_completing():
    """A running job just removed (condor_rm) stays in condor_q with JobStatus 3 while it ends:
    recorded live (``condor_q -json`` 0.1 s after ``condor_rm`` of a job that takes 4 s over its
    SIGTERM; it was listed so for 4 s). It is completing — not final: a pilot's wrapper is still
    pushing its last results through chirp — and cancelled only from the history."""
    queue = hf.parse_jobs(TRIXIE.text("condor_q_removing.json"))
    (job,) = queue.values()
    assert (job.name, job.state, job.native, job.user) == ("rec-removing", "completing", "Removed", "reselap")
    assert job.reason == "removed, still ending (via condor_rm (by user reselap))"
    assert job.state.phase == "running" and not job.state.final
    gone = hf.parse_jobs(TRIXIE.text("condor_q_removing.json"), "condor_history -json")
    assert gone[job.job_id].state == "cancelled" and gone[job.job_id].state.final


def test_the_pools_queue_snapshot_from_recorded_replies(rec):
    """HTCondorCLI.queue_snapshot's three replies, recorded on each pool (htcondor-*/snapshot-*:
    23.9.6's by hand, 25.14.1's by record.py, both four jobs of 90 s running, one idle behind them,
    one submitted with ``hold = true``; snapshot-STATE.json says which), through the real parsers
    into :func:`pool_snapshot`; the twin's start by the definition: the 4 cores free when the
    fillers end (their start + 90 s), the idle job takes the first, our pilot the second, at the
    first negotiation cycle at or after that."""
    from resel.backends.htcondor.client import pool_snapshot
    from resel.models.twin import twin_start
    state = json.loads(rec.text("snapshot-STATE.json"))
    taken = state["taken_at"]
    jobs = hf.parse_jobs(rec.text("snapshot-condor_q_allusers.json"), "condor_q -allusers -json")
    slots = hf.parse_slots(rec.text("snapshot-condor_status.json"))
    negotiators = hf.parse_json_ads(rec.text("snapshot-condor_status_negotiator.json"))
    snap = pool_snapshot(slots, jobs.values(), negotiators, taken)
    assert snap.total_cores == 4 and [j.job_id for j in snap.running] == state["running"]
    for j in snap.running:
        assert j.time_limit == 90 and j.elapsed == pytest.approx(taken - jobs[j.job_id].start) and j.cores == 1
    assert [j.job_id for j in snap.pending] == [state["idle"]]
    assert jobs[state["held"]].reason.startswith("Held: ")
    assert any("1 held job(s) left out" in n for n in snap.notes), snap.notes
    neg = json.loads(rec.text("snapshot-condor_status_negotiator.json"))[0]
    assert (snap.cycle_end, snap.cycle_period) == (neg["LastNegotiationCycleEnd0"], neg["LastNegotiationCyclePeriod0"])
    est = twin_start(snap, 1, 60)
    free = sorted(jobs[j].start + 90 for j in state["running"])[1]
    k = max(0, -(-(free - snap.cycle_end) // snap.cycle_period))
    assert est.start == pytest.approx(snap.cycle_end + k * snap.cycle_period)
    assert est.ahead == (state["idle"],) and "negotiation cycle" in est.explanation


# ---------------------------------------------------------------- condor_chirp of HTCondor 25.14.1


def _chirp_transcript(text: str) -> list[tuple[tuple[str, ...], int, str, str]]:
    """condor_chirp.txt (record.py's job: each command's status, stdout and stderr), in order."""
    calls = []
    for block in text.split("== ")[1:]:
        head, rest = block.split("\nstatus ", 1)
        status, rest = rest.split("\n-- stdout (", 1)
        size, rest = rest.split(" bytes)\n", 1)
        out, err = rest.split("-- stderr\n", 1)
        assert len(out.encode()) == int(size), (head, size, out)     # the transcript is whole
        calls.append((tuple(head.split()), int(status), out, err))
    return calls


def test_condor_chirp_getdir_of_25_exits_with_the_listings_length(tmp_path):
    """The wrapper's Chirp against condor_chirp's own answers in the sid pool, replayed: getdir's
    status is the listing's length modulo 256, and only stderr says it failed."""
    calls = _chirp_transcript(RECORDINGS["sid"].text("condor_chirp.txt"))
    listings = {args[1]: (status, out) for args, status, out, err in calls if args[0] == "getdir" and not err}
    assert set(listings) == {".", "inbox", "empty"}
    assert all(status == len(out.encode()) % 256 for status, out in listings.values()), listings
    assert {listings[d][0] for d in (".", "inbox")} - {0, 1}        # neither 0 nor 1: why it mattered
    answers = {" ".join(args): (status, out, err) for args, status, out, err in calls}   # the last of each
    replay = tmp_path / "condor_chirp"
    replay.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"answers = {json.dumps(answers)}\n"
                      "status, out, err = answers[' '.join(sys.argv[1:])]\n"
                      "sys.stdout.write(out); sys.stderr.write(err); sys.exit(status)\n")
    replay.chmod(0o755)
    chirp = chirp_sync.Chirp(str(replay), log=lambda msg: None)
    assert chirp.getdir("inbox") == ["a.json"] and chirp.getdir("empty") == []
    assert sorted(chirp.getdir(".")) == ["empty", "inbox", "log", "t.sh"]
    with pytest.raises(chirp_sync.ChirpError, match="couldn't getdir: No such file or directory"):
        chirp.getdir("nosuchdir")
    with pytest.raises(chirp_sync.ChirpError, match=r"exit 255: Error: 2 \(No such file or directory\)"):
        chirp.remove("z.json")               # the second remove recorded: the file was gone
