"""The twin (models/twin.py): hand-made snapshots whose answers are worked out by hand, and the
simulator's own future on a slice of a real trace, which the twin must reproduce exactly.

The trace test is the strongest check there is: a QueueSite replays HPC2N under each policy,
with exact estimates (each job's request set to its run, so every job runs exactly its limit,
as the twin assumes); at several instants a snapshot is taken, a pilot submitted, and the real
simulation continued with no further arrivals. The twin, given only the snapshot, must name the
very second the simulator starts the pilot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from resel.sim.queuesite import QueueSite
from resel.backends.slurm import formats as f
from resel.domain import Clock, QueueModel, Site
from resel.backends.jobs import BATCH_POLICIES, QueueSnapshot, SnapJob
from resel.models.twin import twin_start
from resel.sim.core import Environment
from resel.sim.policies import EASY, POLICIES, QJob

from resel.errors import ModelError

from recorded import Recorded  # tests/ is on sys.path (rootdir conftest)

TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf" / "hpc2n.swf"
FORMATS = Path(__file__).resolve().parents[2] / "shared" / "data" / "formats" / "slurm"


def snap(total: int, running=(), pending=(), policy: str = "easy", **kw) -> QueueSnapshot:
    """A snapshot at t=1000; running as (cores, limit, elapsed), pending as (cores, limit)."""
    run = tuple(SnapJob(c, lim, el, f"r{i}") for i, (c, lim, el) in enumerate(running))
    pend = tuple(SnapJob(c, lim, 0.0, f"p{i}") for i, (c, lim) in enumerate(pending))
    return QueueSnapshot("site", 1000.0, total, run, pend, policy, **kw)


# ---------------------------------------------------------------- hand-made snapshots


def test_a_snapshot_names_the_policies_the_twin_runs():
    """The snapshot (beside JobInfo, for the parsers) checks its policy against the names the
    batch policies are made by."""
    assert BATCH_POLICIES == tuple(POLICIES)


def test_free_cores_start_at_once():
    est = twin_start(snap(8, running=[(4, 100, 10)]), 4, 50)
    assert (est.start, est.wait, est.ahead, est.overtook) == (1000, 0, (), ())
    assert "starts at once: 4 cores free" in est.explanation


def test_easy_backfills_the_pilot_before_the_heads_shadow():
    """8 cores; r0 holds 6 until t+100; the head p0 needs 8, so it waits for t+100 (its shadow).
    A 2-core pilot of 50 s ends before the shadow: EASY starts it now, ahead of p0."""
    s = snap(8, running=[(6, 150, 50)], pending=[(8, 200)])
    est = twin_start(s, 2, 50)
    assert est.start == 1000 and est.overtook == ("p0",) and est.ahead == ()
    assert "backfilled ahead of 1 queued job(s)" in est.explanation
    # 150 s would outlive the shadow and take cores the head needs: after p0
    late = twin_start(s, 2, 150)
    assert late.start == 1000 + 100 + 200 and late.ahead == ("p0",) and late.released_by == "p0"


def test_fcfs_never_backfills():
    s = snap(8, running=[(6, 150, 50)], pending=[(8, 200)], policy="fcfs")
    assert twin_start(s, 2, 50).start == 1300


def test_conservative_backfills_only_without_delaying_anyone():
    """r0: 4 cores until t+100; p0: 8 cores (reserved t+100..t+300); p1: 2 cores × 400
    (cannot finish before t+100, so reserved after p0: t+300). A 4-core pilot of 100 s fits
    the hole now..t+100 exactly; one of 101 s does not and goes after p0, beside p1 (queued
    first, so counted ahead)."""
    s = snap(8, running=[(4, 200, 100)], pending=[(8, 200), (2, 400)], policy="conservative")
    fits = twin_start(s, 4, 100)
    assert fits.start == 1000 and set(fits.overtook) == {"p0", "p1"}
    after = twin_start(s, 4, 101)
    assert after.start == 1300 and after.ahead == ("p0", "p1")      # p1 starts beside it


def test_conservative_keeps_reservations_it_was_given():
    """A simulated conservative site reports its reservations; they are history (made when the
    queue was different) and the twin keeps them rather than re-planning. Here p0 (2 cores)
    holds t+500 although it would fit now: the pilot (4 × 100) then fits now beside it."""
    held = (SnapJob(2, 100.0, 0.0, "p0", reserved=1500.0),)
    s = QueueSnapshot("site", 1000.0, 4, (SnapJob(2, 1000.0, 0.0, "r0"),), held, "conservative")
    est = twin_start(s, 2, 100)
    assert est.start == 1000 and est.overtook == ("p0",)
    # a reservation that no longer fits is re-planned, and said so
    bad = QueueSnapshot("site", 1000.0, 4, (SnapJob(4, 1000.0, 0.0, "r0"),),
                        (SnapJob(2, 100.0, 0.0, "p0", reserved=1500.0),), "conservative")
    est = twin_start(bad, 4, 100)
    assert est.start == 2100 and any("re-planned" in n for n in est.notes)


def test_easy_twin_is_earlier_than_the_estimate_start_upper_bound():
    """r0 holds 6 of 8 cores until t+100; p0 and p1 want 4 cores for 1000 s each. The queue
    laid in order (Policy.estimate_start) puts both at t+100, leaving the pilot nothing until
    t+1100. Real EASY protects only the head: a 2-core pilot fits now and in the head's extra
    cores at the shadow, so it starts now — and p1, which EASY does not protect, is delayed."""
    est = twin_start(snap(8, running=[(6, 100, 0)], pending=[(4, 1000), (4, 1000)]), 2, 5000)
    assert est.start == 1000 and est.overtook == ("p0", "p1")
    easy = EASY(8)
    easy.place_running(QJob(1, 6, 100, 100, 1000, start=1000))
    for i in (2, 3):
        easy.submit(QJob(i, 4, 1000, 1000, 1000), 1000)
    assert easy.estimate_start(2, 5000, 1000) == 1100 + 1000


def test_jobs_without_limits_use_the_default_or_refuse():
    s = snap(4, running=[(4, None, 10)], default_limit=3600)
    assert twin_start(s, 1, 60).start == 1000 + 3590
    with pytest.raises(ModelError, match="no time limit and the snapshot has no default limit"):
        twin_start(snap(4, running=[(4, None, 10)]), 1, 60)


def test_running_past_their_limit_end_now_and_ratio_shortens_runs():
    s = snap(4, running=[(4, 100, 130)])
    est = twin_start(s, 4, 60)
    assert est.start == 1000 and any("past their time limit" in n for n in est.notes)
    s = snap(4, running=[(4, 100, 0)], pending=[(4, 100)])
    assert twin_start(s, 4, 60).start == 1200
    assert twin_start(s, 4, 60, runtime_ratio=0.5).start == 1100


def test_oversized_jobs_are_reported_and_the_pilot_refused():
    s = snap(8, running=[(4, 100, 0)], pending=[(16, 100), (8, 100)], notes=("1 held job left out",))
    est = twin_start(s, 8, 10)
    assert est.start == 1200
    assert est.notes[0] == "1 held job left out"
    assert any("p0 (16)" in n and "left out" in n for n in est.notes)
    with pytest.raises(ModelError, match="a pilot of 9 cores can never start on site: its queue has 8"):
        twin_start(s, 9, 10)


@pytest.mark.parametrize("build, message", [
    (lambda: QueueSnapshot("s", 0.0, 0), "at least one core"),
    (lambda: QueueSnapshot("s", 0.0, 4, policy="sjf"), "unknown policy 'sjf'"),
    (lambda: QueueSnapshot("s", float("nan"), 4), "snapshot time must be a finite number"),
    (lambda: SnapJob(2, -5.0), "time limit must be positive"),
    (lambda: SnapJob(2, 60.0, -1.0), "elapsed must not be negative"),
    (lambda: SnapJob(2.5, 60.0), "cores must be a whole number"),
    (lambda: QueueSnapshot("s", 0.0, 4, running=((2, 60),)), "must be SnapJob"),
])
def test_malformed_snapshots_are_refused_when_built(build, message):
    with pytest.raises(ModelError, match=message):
        build()


@pytest.mark.parametrize("cores, walltime, ratio", [(0, 60, 1.0), (1, 0, 1.0), (1, float("inf"), 1.0),
                                                    (1, 60, 0.0)])
def test_bad_pilots_are_refused(cores, walltime, ratio):
    with pytest.raises(ModelError):
        twin_start(snap(4), cores, walltime, runtime_ratio=ratio)


# ---------------------------------------------------------------- the simulator's own future


@pytest.fixture(scope="module")
def exact_trace(tmp_path_factory) -> Path:
    """The first 1500 jobs of HPC2N with each request set to the run: exact estimates."""
    out, n = [], 0
    for line in TRACE.read_text().splitlines():
        if line.startswith(";") or not line.strip():
            out.append(line)
            continue
        fields = line.split()
        fields[8] = fields[3]
        out.append(" ".join(fields))
        n += 1
        if n == 1500:
            break
    path = tmp_path_factory.mktemp("twin") / "hpc2n-exact.swf"
    path.write_text("\n".join(out) + "\n")
    return path


def simulate(trace: Path, policy: str, at: float, cores: int, walltime: float, site_cores: int = 64):
    """Replay up to ``at``; snapshot; submit a pilot; continue with no arrivals until it starts.

    The site is the simulator's own QueueSite on an event core, as resel/sim/simulation.py runs it.
    """
    env = Environment()
    started: list[float] = []
    site = Site(name="hpc2n", kind="simulated", cores=site_cores, clock=Clock(1.0),
                queue=QueueModel(policy, str(trace), offset=0.0))
    queue = QueueSite(0, site, env, on_pilot_start=lambda pilot, now: started.append(now))
    queue.prime()
    env.run(at)
    snapshot = queue.snapshot(at)
    bound = at + queue.estimate_wait(cores, walltime, at)
    queue.batch.close_feed()                       # nothing new arrives
    queue.submit_pilot(0, cores, walltime)
    while not started:
        env.step()
    return snapshot, started[0], bound


INSTANTS = range(200_000, 3_000_000, 311_000)
PILOTS = [(1, 600), (8, 3600), (32, 7200), (64, 600)]


@pytest.mark.parametrize("policy", ["fcfs", "easy", "easy-sjbf", "conservative"])
def test_twin_reproduces_the_simulators_future_exactly(exact_trace, policy):
    waited = backfilled = beat_bound = 0
    for at in INSTANTS:
        for cores, walltime in PILOTS:
            snapshot, real, bound = simulate(exact_trace, policy, at, cores, walltime)
            est = twin_start(snapshot, cores, walltime)
            assert est.start == real, (policy, at, cores, walltime, est)
            waited += est.wait > 0
            backfilled += bool(est.overtook)
            beat_bound += est.start < bound
            if policy in ("fcfs", "conservative"):
                assert est.start == bound          # their estimate_start is exact
    # the instants are not trivial: pilots wait, and (but for FCFS) some are backfilled
    assert waited >= 10
    assert (backfilled > 0) == (policy != "fcfs")
    if policy == "easy":
        assert beat_bound > 0                      # EASY's estimate_start is only an upper bound


@pytest.mark.parametrize("policy", ["easy", "conservative"])
def test_a_simulated_snapshot_is_what_a_live_one_would_show(exact_trace, policy):
    """Running jobs with their elapsed time, pending ones in queue order; a reservation only
    where the policy keeps one between events (conservative)."""
    snapshot, _, _ = simulate(exact_trace, policy, 1_131_000, 1, 600)
    assert snapshot.running and snapshot.pending and snapshot.policy == policy
    assert snapshot.busy_cores <= snapshot.total_cores == 64
    assert all(0 <= j.elapsed < j.time_limit for j in snapshot.running)
    assert [int(j.job_id) for j in snapshot.pending] == sorted(int(j.job_id) for j in snapshot.pending)
    reserved = [j.reserved for j in snapshot.pending]
    if policy == "conservative":
        assert all(r is not None and r > snapshot.taken_at for r in reserved)
    else:
        assert reserved == [None] * len(reserved)


# ---------------------------------------------------------------- Slurm's replies


def load(name: str) -> dict:
    return json.loads((FORMATS / name).read_text())


def test_priority_from_both_json_generations():
    jobs = f.parse_jobs_json(load("squeue_out.json"))
    assert jobs["26515966"].priority == 1013 and jobs["58948420"].priority == 1368
    rest = f.parse_jobs_json(load("slurmrestd_slurm_get_job.json"))
    assert {j.priority for j in rest.values()} == {1}


def test_priority_from_text():
    fields = ["JobID", "NumNodes", "Cluster", "", "GroupName", "Account", "Name", "NodeList",
              "Partition", "PriorityLong", "State", "Reason", "TimeUsed", "SubmitTime", "StartTime",
              "EndTime", "", "TimeLimit", "UserName", "WorkDir"]
    assert f.parse_job_table(load("ssh_squeue_command.json")["stdout"], fields)["1"].priority == 1
    # the all-users reply prints the priority as a fraction; it lost EndTime's extra separator,
    # so it is read with the columns it actually has
    line = load("ssh_squeue_allusers_command.json")["stdout"]
    job = f.parse_job_table(line, [x for i, x in enumerate(fields) if i != 16])["1"]
    assert job.priority == pytest.approx(2.3283e-10) and (job.native, job.reason) == ("PENDING", "Resources")
    text = ("1959|RUNNING|8|1795660384|1795660385|1795660445|1:00|None|root|debug|4294901758\n"
            "1960|PENDING|2|1795660384|N/A|N/A|2:00|JobHeldUser|root|debug|0\n"
            "1961|PENDING|2|1795660384|N/A|N/A|2:00|Priority|root|debug|N/A\n")
    q = f.parse_queue_text(text)
    assert (q["1959"].priority, q["1960"].priority, q["1961"].priority) == (4294901758, 0, None)
    assert q["1960"].reason == "JobHeldUser" and q["1960"].time_limit == 120


def test_scheduler_type():
    text = "Configuration data as of 2026-11-26T02:40:00\nSchedulerTimeSlice      = 30 sec\n" \
           "SchedulerType           = sched/backfill\nSelectType              = select/cons_tres\n"
    assert f.parse_scheduler_type(text) == "sched/backfill"
    with pytest.raises(f.SchedulerReplyError, match="no SchedulerType line"):
        f.parse_scheduler_type("nothing here")


def test_pending_jobs_that_fit_now_start_at_once_and_negative_times_work():
    """Slurm lists jobs pending between two scheduling passes although they fit: the twin
    starts them at once (ahead of the pilot). Simulated warm-up times are negative."""
    s = QueueSnapshot("site", -500.0, 8, (SnapJob(4, 100.0, 0.0, "r0"),), (SnapJob(4, 100.0, 0.0, "p0"),))
    est = twin_start(s, 4, 10)
    assert est.start == -400 and est.ahead == ("p0",) and est.released_by == "r0"


# ---------------------------------------------------------------- a Slurm queue read


def test_queue_snapshot_reads_orders_and_leaves_out(monkeypatch):
    from resel.backends.slurm import cli as slurm_mod
    from resel.backends.slurm.cli import SlurmCLI
    monkeypatch.setattr(slurm_mod.time, "time", lambda: 1000.0)
    squeue = "\n".join([
        "1|RUNNING|6|900|950|1010|1:00|None|u1|debug|10",
        "2|PENDING|8|901|N/A|N/A|1:00|Priority|u2|debug|5",
        "3|PENDING|2|902|N/A|N/A|UNLIMITED|Resources|u3|debug,short|9",
        "4|PENDING|2|903|N/A|N/A|1:00|JobHeldUser|u1|debug|0",
        "5|PENDING|2|904|N/A|N/A|1:00|Dependency|u1|debug|7",
        "6|RUNNING|2|900|950|1010|1:00|None|u4|short|10",
        "7|COMPLETING|1|900|950|990|1:00|None|u4|debug|10",
    ]) + "\n"
    cli = SlurmCLI(Recorded({
        "sinfo": "debug* up 4:00:00 1 8/0/0/8\nshort up 10:00 1 8/0/0/8\n",
        "squeue": squeue,
        "scontrol": "SchedulerType           = sched/backfill\n",
    }), use_json=False)
    s = cli.queue_snapshot()
    assert (s.site, s.taken_at, s.total_cores, s.policy, s.default_limit) == ("debug", 1000.0, 8, "conservative", 14400)
    assert [(j.job_id, j.cores, j.elapsed, j.time_limit) for j in s.running] == [("1", 6, 50.0, 60.0)]
    assert [j.job_id for j in s.pending] == ["3", "2"]                 # priority 9 before 5
    assert s.pending[0].time_limit is None
    assert "1 job(s) left out: pending for JobHeldUser" in s.notes
    assert "1 job(s) left out: pending for Dependency" in s.notes
    assert "1 job(s) left out: completing (ending now)" in s.notes
    assert any("without a time limit given the partition's maximum" in n for n in s.notes)
    # job 6 (partition short) holds 2 of the shared node's cores: sinfo says 8 allocated
    assert any("2 busy core(s) of partition debug belong to no job listed" in n for n in s.notes)
    est = twin_start(s, 2, 60)
    # 3 (2 cores, 4 h) starts now in the 2 free cores; 2 (8 cores) is planned after it, at
    # t+4 h; the pilot fits when 1 ends (t+10 s) and is done long before: backfilled
    assert (est.start, est.ahead, est.overtook, est.released_by) == (1010, ("3",), ("2",), "1")
    cli = SlurmCLI(Recorded({"sinfo": "debug* up 4:00:00 1 8/0/0/8\n", "squeue": squeue,
                           "scontrol": "SchedulerType = sched/gang\n"}), use_json=False)
    with pytest.raises(f.SchedulerError, match="SchedulerType is sched/gang"):
        cli.queue_snapshot()


# ---------------------------------------------------------------- a pool's negotiation cycle
@pytest.mark.parametrize("running,cycle_end,period,expected", [
    (0, 995.0, 7.0, 1002.0),      # free now: the next cycle after the snapshot (995 + 7)
    (4, 995.0, 7.0, 1030.0),      # cores free at 1000 - 10 + 40 = 1030 = 995 + 5 x 7: that very cycle
    (4, 996.0, 7.0, 1031.0),      # free at 1030, cycles at 996 + 7k: the first after, 1031
    (4, None, None, 1030.0),      # no cycle known: as soon as the cores are free
    (0, 1000.0, 2.0, 1000.0),     # a cycle ending at the snapshot itself: it counts (a tie)
])
def test_a_pools_pilot_starts_at_the_first_negotiation_cycle_after_its_core_is_free(running, cycle_end, period,
                                                                                       expected):
    """By the definition: cycles end at cycle_end + k * period; the pilot starts at the first
    at or after the time the twin frees its core."""
    busy = tuple(SnapJob(cores=1, time_limit=40.0, elapsed=10.0, job_id=f"r{i}") for i in range(running))
    snap = QueueSnapshot(site="pool", taken_at=1000.0, total_cores=4, running=busy, policy="easy",
                         cycle_end=cycle_end, cycle_period=period)
    est = twin_start(snap, 1, 30.0)
    assert est.start == pytest.approx(expected) and est.wait == pytest.approx(expected - 1000.0)
    assert ("negotiation cycle" in est.explanation) == (cycle_end is not None)
