"""Why a pending job waits, in one neutral class (issue 27 item 2): each backend's table of its
scheduler's reasons (Slurm's Reason codes, PBS's letters and comments, HTCondor's held status)
read against its real replies — the recordings in ../shared/data/formats and tests/data, the
samples of tests/htcondor_samples.py — and the coordinator's rule, which tests the class only.

Samples marked CONSTRUCTED are written after the documented format of a reply no recording
here holds (PBS Pro's scheduler comments on a queued job)."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import pytest

from resel.backends.jobs import JobState, Pending
from resel.backends.htcondor import formats as condor
from resel.backends.pbs import formats as pbs
from resel.backends.slurm import formats as slurm

import htcondor_samples as S  # tests/ is on sys.path (rootdir conftest)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "formats"
DATA = Path(__file__).resolve().parent / "data"
W, B, N = Pending.WAITING, Pending.BLOCKED, Pending.NEVER

#: the reasons for which the coordinator has always ended a pilot (backends/pilotsite.py's
#: NEVER_REASONS before the tables): the Slurm table's ``never`` is exactly these
HISTORIC_NEVER = {"PartitionConfig", "PartitionTimeLimit", "PartitionNodeLimit", "InvalidAccount", "InvalidQOS",
                  "BadConstraints", "QOSMaxWallDurationPerJobLimit", "QOSMaxCpuPerJobLimit",
                  "AssocMaxWallDurationPerJobLimit", "AssocMaxCpuPerJobLimit", "QOSMaxNodePerJobLimit",
                  "AssocMaxNodePerJobLimit", "DependencyNeverSatisfied"}


# ---------------------------------------------------------------------------- Slurm


def test_slurms_never_is_the_set_the_coordinator_always_acted_on():
    assert {w for w, c in slurm.SLURM_REASONS.items() if c is N} == HISTORIC_NEVER
    assert all(slurm.pending_class(w) is N for w in HISTORIC_NEVER)


def test_slurm_squeue_json_real():
    """squeue --json (Slurm 21.08): a running job has no class, a pending one on a dependency is blocked."""
    rec = json.loads((SHARED / "slurm" / "squeue_out.json").read_text())
    jobs = {j.job_id: j for j in map(lambda job: slurm.job_from_json(job, "squeue"), rec["jobs"])}
    assert (jobs["26515966"].reason, jobs["26515966"].pending) == (None, None)        # "None" is no reason
    assert (jobs["58948420"].reason, jobs["58948420"].pending) == ("Dependency", B)


def test_slurmrestd_and_recorded_squeue_real():
    """slurmrestd's job (firecrest's recording) and the testbeds' squeue --json: Resources waits."""
    rest = json.loads((SHARED / "slurm" / "slurmrestd_slurm_get_job.json").read_text())
    found = [slurm.job_from_json(j, "rest") for j in rest["jobs"]]
    for name in ("sid/slurm-26.05/squeue.json", "trixie/slurm-24.11/squeue.json"):
        found += [slurm.job_from_json(j, "squeue") for j in json.loads((DATA / name).read_text())["jobs"]]
    pending = [j for j in found if j.state.phase == "pending"]
    assert pending and {(j.reason, j.pending) for j in pending} <= {("Resources", W), (None, W)}
    assert ("Resources", W) in {(j.reason, j.pending) for j in pending}
    assert all(j.pending is None for j in found if j.state.phase != "pending")


def test_slurm_exporter_lines_real():
    """The exporter's squeue lines: %R's parentheses, a reason with its nodes, squeue's sentence."""
    rows, _bad = slurm.parse_json_lines((SHARED / "slurm" / "squeue_fallback.txt").read_text(), "squeue",
                                        strict=False)
    jobs = slurm.jobs_from_json_lines(rows, UTC)
    assert (jobs["51447051"].reason, jobs["51447051"].pending) == ("Dependency", B)
    assert jobs["51447052"].reason == "(ReqNodeNotAvail, UnavailableNodes:cs[100,101,102])"
    assert jobs["51447052"].pending is B
    # the sentence squeue prints for nodes down or drained is no code of the table: waiting
    assert jobs["51447053"].pending is W
    assert (jobs["18804"].reason, jobs["18804"].pending) == ("Priority", W)
    assert jobs["26515966"].pending is None                                           # running


def test_slurm_sbatch_refusal_word_real():
    """The limit sbatch names when it refuses a job (firecrest's out-of-quota recording) is a
    per-user QOS limit: blocked, never ``never``."""
    rec = json.loads((SHARED / "slurm" / "ssh_sbatch_command_out_of_quota.json").read_text())
    word = next(w for w in rec["stderr"].split() if w.startswith("QOSMax"))
    assert slurm.pending_class(word) is B


@pytest.mark.parametrize("reason, kind", [
    (None, W), ("", W), ("Priority", W), ("Resources", W), ("BeginTime", B), ("JobHeldUser", B),
    ("AssocGrpCpuLimit", B), ("QOSGrpNodeLimit", B), ("QOSMaxJobsPerUserLimit", B), ("QOSMaxGRESPerJob", B),
    ("PartitionTimeLimit", N), ("(PartitionConfig)", W),
    ("SomeReasonOfSlurm30", W),                     # a newer Slurm's word: waits, polled on
])
def test_slurm_table(reason, kind):
    assert slurm.pending_class(reason) is kind


@pytest.mark.parametrize("placeholder", ["None", "(null)", "N/A", "", "  ", None])
def test_slurm_placeholders_are_no_reason(placeholder):
    assert slurm.reason_text(placeholder) is None
    assert slurm.reason_fields(placeholder, JobState.PENDING) == {"reason": None, "pending": W}
    assert slurm.reason_fields("Priority", JobState.RUNNING) == {"reason": "Priority", "pending": None}


# ---------------------------------------------------------------------------- PBS


def test_pbs_torque_wrappers_real():
    """Debian's Torque wrappers over Slurm (tests/data/torque): a queued job waits, no class otherwise."""
    jobs = pbs.parse_jobs_text((DATA / "torque" / "qstat_f_running_pending.txt").read_text(), UTC)
    assert jobs["1422"].pending is W and jobs["1423"].pending is W
    assert all(j.pending is None for j in jobs.values() if j.state.phase != "pending")


def test_openpbs_recording_has_no_pending_class():
    """OpenPBS 23.06 (firecrest's recording): running and finished jobs only, none classed."""
    rec = json.loads((SHARED / "pbs" / "ssh_qstat_allusers_command.json").read_text())
    jobs = pbs.parse_jobs_json(pbs.load_json(rec["stdout"], rec["command"]), UTC)
    assert jobs and all(j.pending is None for j in jobs.values())


def test_pbs_pro_scheduler_comments_constructed():
    """CONSTRUCTED after PBS Pro's comments on queued jobs: the comment is the reason shown, in
    PBS's words, and its beginning gives the class."""
    def job(state: str, comment: str | None = None) -> dict:
        rec = {"Job_Name": "p", "job_state": state, "queue": "workq", "Resource_List": {"ncpus": 4}}
        return {**rec, "comment": comment} if comment else rec
    doc = {"pbs_version": "23.06.06", "Jobs": {
        "1.pbs": job("Q", "Can Never Run: Insufficient amount of resource: ncpus (R: 100 A: 8 T: 8)"),
        "2.pbs": job("Q", "Not Running: Insufficient amount of resource: ncpus"),
        "3.pbs": job("Q", "Not Running: User has reached queue workq running job limit."),
        "4.pbs": job("Q", "Job held by alice on Thu Jun 19 10:00:00 2025"),
        "5.pbs": job("Q", "wait for the license server, said the admin"),
        "6.pbs": job("H"), "7.pbs": job("W"), "8.pbs": job("T"), "9.pbs": job("Q"),
        "10.pbs": job("R", "Job run at Thu Jun 19 at 21:27 on (pbs:ncpus=1)")}}
    jobs = pbs.parse_jobs_json(doc, UTC)
    got = {jid: (j.reason, j.pending) for jid, j in jobs.items()}
    assert got == {
        "1.pbs": ("Can Never Run: Insufficient amount of resource: ncpus (R: 100 A: 8 T: 8)", N),
        "2.pbs": ("Not Running: Insufficient amount of resource: ncpus", W),
        "3.pbs": ("Not Running: User has reached queue workq running job limit.", B),
        "4.pbs": ("Job held by alice on Thu Jun 19 10:00:00 2025", B),
        "5.pbs": ("wait for the license server, said the admin", W),          # unknown: waits
        "6.pbs": ("Held", B), "7.pbs": ("Waiting", B), "8.pbs": ("Transit", W), "9.pbs": (None, W),
        "10.pbs": (None, None)}


# ---------------------------------------------------------------------------- HTCondor


@pytest.mark.parametrize("folder", ["trixie/htcondor-23.9", "sid/htcondor-25.14"])
def test_htcondor_recorded_queue(folder):
    """The testbeds' condor_q of every user: an idle job waits, a job held at submission is blocked."""
    jobs = condor.parse_jobs((DATA / folder / "snapshot-condor_q_allusers.json").read_text())
    held = [j for j in jobs.values() if j.state is JobState.HELD]
    idle = [j for j in jobs.values() if j.state is JobState.PENDING]
    assert held and idle
    assert {(j.reason, j.pending) for j in held} == {("Held: submitted on hold at user's request", B)}
    assert {j.pending for j in idle} == {W}
    assert all(j.pending is None for j in jobs.values() if j.state.phase != "pending")


def test_htcondor_held_with_a_hold_reason_code():
    """tests/htcondor_samples.py's held pilot (HoldReasonCode 6, failed to execute): blocked —
    its submit description removes it after ten minutes, nothing ends it earlier."""
    jobs = condor.parse_jobs(S.as_json(S.CONSTRUCTED_QUEUE))
    assert (jobs["4244.0"].pending, jobs["4243.0"].pending, jobs["4242.0"].pending) == (B, W, None)


# ---------------------------------------------------------------------------- the coordinator


def test_the_coordinator_tests_the_class_not_the_word():
    """The never-start rule reads ``JobInfo.pending``, not a reason word (the layering test in
    tests/test_one_vocabulary.py holds every module outside backends/slurm to it)."""
    import inspect

    from resel.live.findings import Findings
    source = inspect.getsource(Findings.site_events)
    assert "Pending.NEVER" in source and "reason in" not in source
