"""The closed-queue kernels (resel/sim/closed.py) against BatchQueue and the reference.

A Trace replayed under fcfs or easy runs through a kernel; the same jobs given as Job records
run through BatchQueue.run_closed with the policy objects of resel/sim/policies.py. The two must
make the same schedule job by job and report the same statistics in the same order, on every
shared trace and on random workloads full of equal timestamps, zero runs, runs past their
request, jobs too large or of unknown run time; and the schedules equal the independent slow
reference of tests/batch_reference.py, written from the policies' definitions.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_reference import RJob, simulate as reference
from resel.errors import InputError
from resel.sim import closed
from resel.sim.replay import kernel_schedule, replay
from resel.sim.swf import Job, read_swf, write_swf

SWF = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"
TRACES = {"hpc2n.swf": 240, "wagap-2013.swf": 2176, "jaros1.swf": 16, "jaros2.swf": 16, "jaros3.swf": 16}
VARIANTS = [{}, {"kill": True}, {"speed": 1.4, "kill": True}, {"speed": 0.7}]


def job(id: int, submit: float, run: float, size: int = 1, req_time: float = -1) -> Job:
    return Job(id, submit, -1, run, size, -1, -1, size, req_time, -1, 1, -1, -1, -1, -1, -1, -1, -1)


def queue_starts(jobs, policy: str, cores: int, **kw) -> dict:
    """Start times by job id through BatchQueue (Job records: no kernel)."""
    out: dict = {}
    replay(iter(jobs), policy, cores, on_scheduled=lambda rec, wait, run: out.__setitem__(rec.id, rec.submit + wait),
           **kw)
    return out


def outcome(result) -> tuple:
    s = result.stats
    return (list(s.wait), list(s.run), s.area, s.killed, s.first_submit, s.last_end, result.events,
            result.skipped_unknown, result.skipped_too_large, result.summary())


@pytest.mark.parametrize("kw", VARIANTS, ids=["plain", "kill", "speed-kill", "slow"])
@pytest.mark.parametrize("policy", sorted(closed.KERNELS))
@pytest.mark.parametrize("name", sorted(TRACES))
def test_kernels_replay_every_shared_trace_as_batchqueue(name, policy, kw):
    """Every shared trace: the kernel's schedule is BatchQueue's job by job, and the replay's
    statistics (each end's wait and run in order, work, first submit, last end, skips,
    summary) are the same numbers."""
    path, cores = SWF / name, TRACES[name]
    assert kernel_schedule(read_swf(path), policy, cores, **kw) == queue_starts(read_swf(path), policy, cores, **kw)
    assert outcome(replay(read_swf(path), policy, cores, **kw)) == outcome(replay(iter(read_swf(path)), policy, cores, **kw))


@st.composite
def workloads(draw):
    """Few cores, few distinct submit times (many equal), runs of 0, equal to, below and past
    the request, no request, unknown runs, sizes up to more than the site."""
    cores = draw(st.integers(1, 8))
    n = draw(st.integers(1, 40))
    submits = sorted(draw(st.lists(st.sampled_from([0, 0, 1, 2, 5, 10, 10, 20, 21]), min_size=n, max_size=n)))
    jobs = []
    for i, submit in enumerate(submits, 1):
        request = draw(st.sampled_from([-1, 1, 2, 5, 10, 20]))
        run = draw(st.sampled_from([0, 1, 3, 10, 20, 25, -1] + ([request, request] if request > 0 else [])))
        size = draw(st.integers(1, cores + (1 if draw(st.integers(0, 9)) == 0 else 0)))
        jobs.append(job(i, submit, run, size, request))
    return cores, jobs


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workloads(), policy=st.sampled_from(sorted(closed.KERNELS)),
       kw=st.sampled_from(VARIANTS))
def test_kernels_equal_batchqueue_and_the_reference_on_random_workloads(workload, policy, kw):
    """Random workloads: kernel == BatchQueue job by job (and the statistics); without speed
    or kill, both == the reference simulator (which sees what the replay schedules: usable
    jobs that fit, the request raised to the run)."""
    cores, jobs = workload
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.swf"
        write_swf(path, jobs)
        mine = kernel_schedule(read_swf(path), policy, cores, **kw)
        assert mine == queue_starts(jobs, policy, cores, **kw)
        assert outcome(replay(read_swf(path), policy, cores, **kw)) == outcome(replay(iter(jobs), policy, cores, **kw))
    if not kw:
        usable = [RJob(j.id, j.submit, j.size, max(j.req_time if j.req_time > 0 else j.run, j.run), j.run)
                  for j in jobs if j.run >= 0 and 0 < j.size <= cores]
        assert mine == reference(usable, policy, cores)


@pytest.mark.parametrize("policy", sorted(closed.KERNELS))
def test_a_job_of_no_run_time_frees_its_cores_at_the_same_instant(tmp_path, policy):
    """2 cores. A (2 cores, run 0) starts and ends at 5; B (2 cores) arrives at 5 too and starts
    at 5, in the instant's second pass, after A's end."""
    path = tmp_path / "t.swf"
    write_swf(path, [job(1, 5, 0, 2, 10), job(2, 5, 10, 2, 10)])
    assert kernel_schedule(read_swf(path), policy, 2) == {1: 5, 2: 5}


def test_a_job_of_no_run_time_started_in_an_instant_ends_after_its_pass(tmp_path):
    """2 cores, three jobs arriving at 0 to an empty queue: A (1 core, run 0), B (2 cores, run
    1), C (1 core, run 0). EASY's first pass at 0 starts A; B does not fit behind it (A's end
    at 0 comes after the pass), so C backfills (expected to end by B's shadow time 0); the
    instant's second pass, after A's and C's ends, starts B. All three start at 0. FCFS starts
    A, then B in the second pass; C waits for B (its end at 1). (The EASY kernel's path for
    arrivals to an empty queue once popped A's end before B arrived: B started first, C at 1.)"""
    path = tmp_path / "t.swf"
    write_swf(path, [job(1, 0, 0, 1), job(2, 0, 1, 2), job(3, 0, 0, 1)])
    assert kernel_schedule(read_swf(path), "easy", 2) == {1: 0, 2: 0, 3: 0}
    assert kernel_schedule(read_swf(path), "fcfs", 2) == {1: 0, 2: 0, 3: 1}


@pytest.mark.parametrize("policy", sorted(closed.KERNELS))
def test_the_kernel_path_keeps_first_progress_and_errors(tmp_path, policy):
    """``first``, ``on_progress`` and an unsorted trace behave on the kernel path as on the
    BatchQueue path: the same jobs, the same progress calls, the same error."""
    jobs = [job(i, i // 3, 7 + i % 5, 1 + i % 3, 10) for i in range(1, 2600)]
    path = tmp_path / "t.swf"
    write_swf(path, jobs)
    seen: list[list[int]] = [[], []]
    fast = replay(read_swf(path), policy, 4, first=2100, on_progress=seen[0].append)
    slow = replay(iter(read_swf(path)), policy, 4, first=2100, on_progress=seen[1].append)
    assert outcome(fast) == outcome(slow) and seen[0] == seen[1] == [1000, 2000]
    jobs[1500] = job(1501, 0, 5)
    write_swf(path, jobs)
    errors = []
    for given_jobs in (read_swf(path), iter(read_swf(path))):
        with pytest.raises(InputError) as info:
            replay(given_jobs, policy, 4)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "job 1501" in errors[0]


@pytest.mark.parametrize("policy", sorted(closed.KERNELS))
@pytest.mark.parametrize("kw", VARIANTS, ids=["plain", "kill", "speed-kill", "slow"])
def test_huge_times_replay_as_batchqueue(tmp_path, policy, kw):
    """The kernel path keeps whole numbers as read while every time it can reach is below
    2**52 (exact either way), and goes on in floats, as BatchQueue computes, past it: submit
    times and runs near 2**60, a request near the limit, from a later block of the trace on,
    give the same schedule and statistics."""
    import resel.sim.swf as swf

    jobs = [job(i, 10 * i, 5 + i % 7, 1 + i % 3, 8) for i in range(1, 60)]
    jobs += [job(i, 2**60 + 3 * i, 2**55 + i, 1 + i % 3, (2**62 if i % 2 else 2**56)) for i in range(60, 90)]
    path = tmp_path / "huge.swf"
    write_swf(path, jobs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(swf, "_BLOCK", 512)
        mine = kernel_schedule(read_swf(path), policy, 4, **kw)
        fast = replay(read_swf(path), policy, 4, **kw)
    assert mine == queue_starts(jobs, policy, 4, **kw)
    assert outcome(fast) == outcome(replay(iter(jobs), policy, 4, **kw))
