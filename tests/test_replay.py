"""Tests of trace replay on one simulated site (resel/sim/replay.py) and its metrics (resel/sim/jobstats.py).

Small cases are built by hand so every number can be checked on paper; the real traces under
../shared/data/swf (read-only) check ordering, streaming and the policies at scale. The
whole file runs in a few seconds.
"""

from __future__ import annotations

import bisect
import tracemalloc
from pathlib import Path

import pytest

from resel.errors import InputError
from resel.sim.replay import replay
from resel.sim.swf import Job, read_jobs, read_swf, write_swf

SWF = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"   # ../shared beside the checkout
HPC2N = SWF / "hpc2n.swf"
JAROS1 = SWF / "jaros1.swf"
HPC2N_CORES = 240
POLICIES = ("fcfs", "easy", "easy-sjbf", "conservative")


def job(id: int, submit: float, run: float, size: int = 1, req_time: float = -1) -> Job:
    """A trace job with only what the replay reads set; -1 (unknown) everywhere else."""
    return Job(id, submit, -1, run, size, -1, -1, size, req_time, -1, 1, -1, -1, -1, -1, -1, -1, -1)


def collect(jobs, policy: str, cores: int, **kw):
    """Replay and return (result, the records handed to on_done, in order)."""
    done: list[Job] = []
    result = replay(jobs, policy, cores, on_done=done.append, **kw)
    return result, done


@pytest.fixture(scope="module")
def hpc2n_easy():
    """hpc2n replayed once under EASY on its 240 cores: (result, on_done records)."""
    return collect(read_swf(HPC2N), "easy", HPC2N_CORES)


@pytest.fixture(scope="module")
def hpc2n_all():
    """hpc2n summaries and results under every policy, keyed by policy name."""
    return {p: replay(read_swf(HPC2N), p, HPC2N_CORES) for p in POLICIES}


# ------------------------------------------------------------------ jaros1, by hand

# jaros1: 12 jobs submitted at 20; (size, run) = (1,1200), (5,2100), (1,900) repeated four
# times. FCFS on 8 cores starts them at 20 x4, 2120 x3, 4220 x3, 6320 x2.
JAROS_STARTS = [20, 20, 20, 20, 2120, 2120, 2120, 4220, 4220, 4220, 6320, 6320]
JAROS_RUNS = [1200, 2100, 900] * 4
JAROS_SIZES = [1, 5, 1] * 4


def test_jaros1_fcfs_records_in_id_order_with_simulated_wait():
    """on_done gets jaros1's 12 jobs in id order, wait = start - 20, run unchanged."""
    _, done = collect(read_swf(JAROS1), "fcfs", 8)
    assert [j.id for j in done] == list(range(1, 13))
    assert [j.wait for j in done] == [s - 20 for s in JAROS_STARTS]
    assert [j.wait for j in done] == [0, 0, 0, 0, 2100, 2100, 2100, 4200, 4200, 4200, 6300, 6300]
    assert [j.run for j in done] == JAROS_RUNS


def test_jaros1_fcfs_summary_by_hand():
    """jaros1 FCFS on 8 cores: 12 jobs, mean wait 2625 s, utilisation 0.75."""
    summary = replay(read_swf(JAROS1), "fcfs", 8).summary()
    # waits: 3 x 2100 + 3 x 4200 + 2 x 6300 = 31500 over 12 jobs
    assert summary["jobs"] == 12
    assert summary["wait"]["mean"] == 31500 / 12 == 2625
    # work: 4 x (1200 + 5 x 2100 + 900) = 50400 core-s; last end 6320 + 2100 = 8420
    last_end = max(s + r for s, r in zip(JAROS_STARTS, JAROS_RUNS))
    assert last_end == 8420
    work = sum(r * n for r, n in zip(JAROS_RUNS, JAROS_SIZES))
    assert work == 50400
    assert summary["utilisation"] == pytest.approx(work / (8 * (last_end - 20))) == 0.75
    assert summary["makespan"] == 8400


# ------------------------------------------------------------------ metric definitions


def test_bounded_slowdown_is_response_over_max_run_tau():
    """A job with run 5 and wait 15: bsld = max(1, 20/10) = 2 at tau 10, 1 at tau 60."""
    # one core: job 1 (run 15) holds it, so job 2 (run 5) waits 15 s, response 20 s
    result = replay([job(1, 0, 15), job(2, 0, 5)], "fcfs", 1, taus=(10, 60))
    assert list(result.stats.wait) == [0, 15]
    # job 1: max(1, 15 / max(15, 10)) = 1 and max(1, 15 / 60) = 1
    assert list(result.stats.bsld[10]) == [1.0, 2.0]
    assert list(result.stats.bsld[60]) == [1.0, 1.0]


def test_summary_names_bsld_by_tau():
    """summary() reports bounded slowdown per tau as bsld_<tau>, with 4 estimators each."""
    summary = replay([job(1, 0, 15), job(2, 0, 5)], "fcfs", 1, taus=(10, 60)).summary()
    assert summary["bsld_10"]["max"] == 2.0
    assert summary["bsld_60"]["max"] == 1.0
    assert {"mean", "median", "p95", "iqr"} <= summary["bsld_10"].keys()


def test_summary_estimators_match_their_definitions_job_by_job():
    """Mean, median, P95, IQR and max of wait, response, slowdown and bounded slowdown equal
    the definitions computed per job by the statistics module — with most jobs not waiting
    (the summary places their slowdowns of exactly 1 without dividing), runs of 0, runs at
    τ, and ties."""
    import random
    import statistics
    from array import array

    from resel.sim.jobstats import JobStats

    def by_definition(values: list[float]) -> dict[str, float]:
        data = sorted(values)
        q = statistics.quantiles(data, n=100, method="inclusive")     # linear interpolation
        return {"mean": statistics.fmean(data), "median": statistics.median(data), "p95": q[94],
                "iqr": q[74] - q[24], "max": data[-1]}

    rng = random.Random(15)
    for _ in range(200):
        n = rng.randint(2, 60)
        waits = [rng.choice([0.0, 0.0, 0.0, float(rng.randint(1, 100)), rng.random() * 50]) for _ in range(n)]
        runs = [rng.choice([0.0, 10.0, 60.0, float(rng.randint(1, 200)), rng.random() * 5]) for _ in range(n)]
        stats = JobStats((10.0, 60.0))
        stats.wait, stats.run = array("d", waits), array("d", runs)
        summary = stats.summary(1)
        responses = [w + r for w, r in zip(waits, runs)]
        expected = {"wait": waits, "response": responses,
                    "slowdown": [x / r if r > 0 else 1.0 for x, r in zip(responses, runs)]}
        for tau in (10.0, 60.0):
            expected[f"bsld_{tau:g}"] = [max(1.0, x / max(r, tau)) for x, r in zip(responses, runs)]
        for metric, values in expected.items():
            want = by_definition(values)
            assert summary[metric]["n"] == n
            assert summary[metric]["max"] == want["max"]
            for estimator in ("mean", "median", "p95", "iqr"):
                assert summary[metric][estimator] == pytest.approx(want[estimator], rel=1e-12, abs=1e-12), (metric, estimator)


# ------------------------------------------------------------------ kill, speed, skips


def test_kill_truncates_overrunning_job_at_its_request():
    """kill=True: a job that ran 100 s on a 60 s request runs 60 s and is counted killed."""
    result, done = collect([job(1, 0, 100, req_time=60)], "easy", 4, kill=True)
    assert list(result.stats.response) == [60]
    assert result.stats.killed == 1
    assert result.summary()["killed"] == 1
    assert done[0].run == 60


def test_no_kill_keeps_overrunning_run():
    """kill=False: the overrunning job keeps its 100 s run and nothing is killed."""
    result, done = collect([job(1, 0, 100, req_time=60)], "easy", 4, kill=False)
    assert list(result.stats.response) == [100]
    assert result.summary()["killed"] == 0
    assert done[0].run == 100


def test_no_kill_raises_request_so_the_next_job_waits_for_the_real_end():
    """kill=False on one core: the job behind an overrunning one starts at its real end (100)."""
    result = replay([job(1, 0, 100, req_time=60), job(2, 0, 10, req_time=10)], "conservative", 1)
    assert list(result.stats.wait) == [0, 100]


def test_speed_two_halves_run_time():
    """speed=2: a lone job that ran 100 s has response 50 s."""
    result, done = collect([job(1, 0, 100, req_time=200)], "fcfs", 4, speed=2)
    assert list(result.stats.response) == [50]
    assert done[0].run == 50 and done[0].wait == 0


def test_speed_scales_request_too():
    """speed=2 with kill: run 100 on request 60 becomes run 50 killed at 30."""
    result = replay([job(1, 0, 100, req_time=60)], "fcfs", 4, speed=2, kill=True)
    assert list(result.stats.response) == [30]
    assert result.stats.killed == 1


def test_job_larger_than_site_is_skipped_and_counted():
    """A 5-core job on a 4-core site is not replayed and counts in skipped_too_large."""
    result, done = collect([job(1, 0, 10, size=2), job(2, 1, 10, size=5), job(3, 2, 10)], "easy", 4)
    assert result.skipped_too_large == 1
    assert result.summary()["skipped_too_large"] == 1
    assert result.summary()["jobs"] == 2
    assert [j.id for j in done] == [1, 3]


def test_unknown_runtime_is_skipped_and_counted():
    """A job with run -1 is not replayed and counts in skipped_unknown."""
    result, done = collect([job(1, 0, 10), job(2, 1, -1), job(3, 2, 10)], "easy", 4)
    assert result.skipped_unknown == 1
    assert result.summary()["skipped_unknown_runtime"] == 1
    assert result.summary()["jobs"] == 2
    assert [j.id for j in done] == [1, 3]


def test_unsorted_trace_raises_input_error():
    """A job submitted before the previous one raises InputError naming that job."""
    with pytest.raises(InputError, match="job 2"):
        replay([job(1, 10, 5), job(2, 5, 5)], "easy", 4)


def test_equal_times_one_pass_after_the_end_and_the_arrival():
    """At one instant the end and the arrival both happen before the single scheduling pass."""
    # 4 cores. Jobs 1 (2 cores, 0-100) and 2 (2 cores, 0-10) run; job 3 (4 cores) waits for 100;
    # job 4 (2 cores, est 50) queues at 2. At t=10 job 2 ends and job 5 (2 cores, est 20)
    # arrives; the one pass at 10 sees both 2 free cores and job 5: SJBF backfills the shorter
    # job 5 (10 + 20 <= 100), and job 4 follows at its end, 30 (30 + 50 <= 100): wait 28.
    # (Scheduling after the end alone, before the arrival, would have backfilled job 4 at 10.)
    jobs = [job(1, 0, 100, 2, 100), job(2, 0, 10, 2, 10), job(3, 1, 10, 4, 10),
            job(4, 2, 50, 2, 50), job(5, 10, 20, 2, 20)]
    _, done = collect(jobs, "easy-sjbf", 4)
    assert [(j.id, j.wait) for j in done] == [(1, 0), (2, 0), (3, 99), (4, 28), (5, 0)]


# ------------------------------------------------------------------ hpc2n: output order


def test_hpc2n_on_done_in_id_order_and_one_per_replayed_job(hpc2n_easy):
    """hpc2n under EASY: on_done yields ids in increasing order, as many as summary jobs."""
    result, done = hpc2n_easy
    ids = [j.id for j in done]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert len(done) == result.summary()["jobs"] == 3170 - 25


def test_hpc2n_written_schedule_reads_back_simulated_waits(hpc2n_easy, tmp_path):
    """The on_done records written as SWF read back with field 3 = the simulated wait."""
    result, done = hpc2n_easy
    path = tmp_path / "schedule.swf"
    assert write_swf(path, done) == len(done)
    back = read_jobs(path)
    assert [j.wait for j in back] == [j.wait for j in done]
    assert all(j.wait >= 0 for j in back)
    assert sum(j.wait for j in back) / len(back) == pytest.approx(result.summary()["wait"]["mean"])
    # field 3 was really replaced: the original trace's waits are different
    original = {j.id: j.wait for j in read_swf(HPC2N)}
    assert sum(original[j.id] != j.wait for j in back) > len(back) // 2


@pytest.mark.parametrize("policy", POLICIES)
def test_hpc2n_schedule_is_feasible(policy):
    """Every job starts no earlier than its submit and no instant uses more than 240 cores."""
    _, done = collect(read_swf(HPC2N), policy, HPC2N_CORES)
    events = []
    for j in done:
        assert j.wait >= 0
        start = j.submit + j.wait
        events.append((start + j.run, -j.size))   # ends sort before starts at equal times
        events.append((start, j.size))
    in_use = peak = 0
    for _, delta in sorted(events):
        in_use += delta
        peak = max(peak, in_use)
    assert in_use == 0
    assert 0 < peak <= HPC2N_CORES


# ------------------------------------------------------------------ hpc2n: streaming


def test_hpc2n_replay_holds_few_jobs_at_once(hpc2n_easy):
    """Jobs read but not yet handed to on_done peak near the in-order minimum, far below 3170."""
    _, schedule = hpc2n_easy
    count = {"read": 0, "skipped": 0, "out": 0, "peak": 0}

    def source():
        for j in read_swf(HPC2N):
            count["peak"] = max(count["peak"], count["read"] - count["skipped"] - count["out"])
            count["read"] += 1
            count["skipped"] += j.run < 0
            yield j

    def on_done(_):
        count["out"] += 1

    replay(source(), "easy", HPC2N_CORES, on_done=on_done)
    assert count["out"] == len(schedule)
    # The least any in-order writer must hold when a job arrives at s: the jobs submitted
    # before s that cannot be written yet because they, or an earlier job, end after s.
    emit, latest = [], float("-inf")
    for j in schedule:
        latest = max(latest, j.submit + j.wait + j.run)
        emit.append(latest)
    submits, emits = [j.submit for j in schedule], sorted(emit)
    minimum = max(bisect.bisect_left(submits, s) - bisect.bisect_right(emits, s) for s in submits)
    assert count["peak"] <= minimum + 2           # +2: the driver reads one job ahead
    assert count["peak"] < 3170 / 5


def test_hpc2n_replay_memory_peak_is_well_below_the_whole_trace():
    """tracemalloc peak of a streamed hpc2n replay is under half what the trace takes in memory."""
    replay(read_swf(HPC2N), "easy", HPC2N_CORES, on_done=lambda j: None)   # warm caches
    tracemalloc.start()
    try:
        jobs = read_jobs(HPC2N)
        whole_trace, _ = tracemalloc.get_traced_memory()
        del jobs
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        replay(read_swf(HPC2N), "easy", HPC2N_CORES, on_done=lambda j: None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert whole_trace > 500_000                   # the check below has something to beat
    assert peak - base < whole_trace / 2
    assert peak - base < 5_000_000


def test_on_progress_every_thousand_jobs_read():
    """on_progress is called with 1000, 2000, 3000 while hpc2n's 3170 jobs are read."""
    calls: list[int] = []
    replay(read_swf(HPC2N), "fcfs", HPC2N_CORES, on_progress=calls.append)
    assert calls == [1000, 2000, 3000]


# ------------------------------------------------------------------ hpc2n: policies


def test_hpc2n_all_policies_replay_the_same_work(hpc2n_all):
    """All four policies replay the same 3145 jobs and the same core-seconds of work."""
    jobs = {p: r.summary()["jobs"] for p, r in hpc2n_all.items()}
    assert set(jobs.values()) == {3145}
    areas = {p: r.stats.area for p, r in hpc2n_all.items()}
    assert len(set(areas.values())) == 1
    for p, r in hpc2n_all.items():
        s = r.summary()
        # utilisation = work / (cores x makespan): it differs only where the makespan does
        assert s["utilisation"] == pytest.approx(r.stats.area / (HPC2N_CORES * s["makespan"])), p
        assert s["killed"] == 0 and s["skipped_unknown_runtime"] == 25 and s["skipped_too_large"] == 0


def test_hpc2n_easy_mean_wait_not_above_fcfs(hpc2n_all):
    """On hpc2n EASY backfilling's mean wait is at most FCFS's."""
    easy = hpc2n_all["easy"].summary()["wait"]["mean"]
    fcfs = hpc2n_all["fcfs"].summary()["wait"]["mean"]
    assert easy <= fcfs
    assert fcfs > 0


# ------------------------------------------------------------------ the fast reader


def _outcome(result):
    s = result.stats
    return (list(s.wait), list(s.run), s.area, s.killed, s.first_submit, s.last_end,
            result.events, result.skipped_unknown, result.skipped_too_large)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kw", [{}, {"speed": 1.4, "kill": True}], ids=["plain", "speed-kill"])
def test_trace_read_fast_replays_exactly_as_its_jobs(policy, kw):
    """A Trace given as it is (read by Trace.replay_rows) replays exactly as its Job records."""
    fast = replay(read_swf(HPC2N), policy, HPC2N_CORES, **kw)
    jobs = replay(iter(read_swf(HPC2N)), policy, HPC2N_CORES, **kw)
    assert _outcome(fast) == _outcome(jobs)
    assert fast.summary() == jobs.summary()


def test_trace_read_fast_reports_unsorted_and_skips_bad_lines(tmp_path):
    """The fast reader keeps the errors: an unsorted trace names the job; skip_bad counts."""
    line = "{id} {submit} 0 10 1 -1 -1 1 10 -1 1 1 1 -1 -1 1 -1 -1"
    path = tmp_path / "t.swf"
    path.write_text("\n".join([line.format(id=1, submit=10), "1 2 3", line.format(id=2, submit=5)]) + "\n")
    with pytest.raises(InputError, match="line 2"):
        replay(read_swf(path), "fcfs", 4)
    trace = read_swf(path, skip_bad=True)
    with pytest.raises(InputError, match="job 2"):
        replay(trace, "fcfs", 4)
    assert trace.skipped == 1


MIXED = """\
; MaxProcs: 8
1 0 0 10 2 -1 -1 2 20 -1 1 1 1 1 1 1 -1 -1
2 1 0 5.5 1 -1 -1 1 20 -1 0 1 1 1 1 1 -1 -1
; a comment between jobs
3 2 0 7 4 -1 -1 4 20 -1 5 1 1 1 1 1 -1 -1
4 3 0 -1 1 -1 -1 1 20 -1 1 1 1 1 1 1 -1 -1
5 4 0 3 16 -1 -1 16 20 -1 1 1 1 1 1 1 -1 -1
6 4 0 9 2 -1 -1 2 +30 -1 1.0 1 1 1 1 1 -1 -1
7 6 0 2 1 -1 -1 1 20 -1 0 1 1 1 1 1 1&2 -1
"""


@pytest.mark.parametrize("policy", ["fcfs", "easy", "easy-sjbf", "conservative"])
@pytest.mark.parametrize("statuses", [{1}, {0, 1}, {5}, {7}])
def test_status_filter_by_the_block_reader_is_only_status(tmp_path, policy, statuses):
    """replay(trace, statuses=S) — the status column read by the block reader, or line by line
    where a block holds a comment, a float, '+30', '1.0' or a '&' list — is the replay of
    only_status(S) over the trace's Job records: same summary, same schedule by position."""
    from resel.sim.swf import only_status
    mixed = tmp_path / "mixed.swf"
    mixed.write_text(MIXED)
    for path, cores in ((mixed, 8), (HPC2N, HPC2N_CORES)):
        fast_schedule: list = []
        fast = replay(read_swf(path), policy, cores, statuses=statuses, schedule=fast_schedule)
        records: list = []
        slow = replay(only_status(iter(read_swf(path)), statuses), policy, cores,
                      on_scheduled=lambda job, wait, run: records.append((job, wait, run)))
        assert fast.summary() == slow.summary()
        assert [s for s in fast_schedule if s is not None] == [(w, r) for _, w, r in records]
        assert len(fast_schedule) == sum(1 for j in read_swf(path) if j.status in statuses)
