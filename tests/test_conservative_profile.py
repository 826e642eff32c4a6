"""Conservative backfilling's availability profile and compression, against brute force.

The profile (``resel/sim/policies.py`` ``_Profile``) stores the *changes* of free cores at its
breakpoints, and the compression places most jobs by comparisons on its first steps. Both
are checked here against definitions that share nothing with them: the free cores at a time
are the cores minus every interval in use that covers it, and the earliest slot is the
reference's ``_earliest`` (tests/batch_reference.py, a candidate-by-candidate walk). The
schedule as a whole is compared with the reference on traces with long queues and many
distinct breakpoints (the hand-made cases and short traces are in test_batch_reference.py),
and the policy's state — profile, earliest reservation, wakeup — is rebuilt from scratch
after every pass of runs with withdrawals and all-cancellations.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batch_reference import _earliest, simulate as reference
from resel.sim.core import Environment
from resel.sim.policies import INF, Conservative, QJob, _Profile, run_and_estimate
from resel.sim.queue import BatchQueue
from resel.sim.replay import replay
from resel.sim.swf import Job

TIMES = [0, 0, 1, 2, 3, 5, 5, 8, 10, 13, 20]


def brute_free(intervals: list[tuple[float, float, int]], cores: int, t: float) -> int:
    """Free cores at t by definition: the cores minus every interval [a, b) covering t."""
    return cores - sum(n for a, b, n in intervals if a <= t < b)


def check_profile(profile: _Profile, intervals, cores: int, since: float = -INF) -> None:
    """The profile's steps are the brute-force function from ``since`` on, and canonical."""
    steps = profile.free()
    ts = [t for t, _ in steps]
    assert ts == sorted(set(ts)), "breakpoints must be strictly increasing"
    assert all(d != 0 for d in profile.dl[1:]), "a breakpoint where nothing changes"
    probes = sorted({t for t in ts if t >= since} | {a for a, _, _ in intervals if a >= since}
                    | {b for _, b, _ in intervals if b >= since} | ({since} if since > -INF else set()))
    for t in probes:
        k = max(i for i, s in enumerate(ts) if s <= t)
        assert steps[k][1] == brute_free(intervals, cores, t), f"free cores at {t}"


@st.composite
def interval_sets(draw):
    """Up to 12 reservations on up to 8 cores over a few distinct times (touching, nested,
    equal), each where it fits (as a scheduler reserves: never more cores than are free),
    then some of them released, each whole or from some instant to its end."""
    cores = draw(st.integers(1, 8))
    intervals: list[tuple[float, float, int]] = []
    for _ in range(draw(st.integers(0, 12))):
        a = draw(st.sampled_from(TIMES))
        b = a + draw(st.sampled_from([1, 2, 3, 5, 8, 20]))
        n = draw(st.integers(1, cores))
        points = {a} | {x for x, _, _ in intervals if a < x < b}
        if all(brute_free(intervals, cores, t) >= n for t in points):
            intervals.append((float(a), float(b), n))
    releases = []
    for a, b, n in intervals:
        choice = draw(st.sampled_from(["keep", "keep", "whole", "tail"]))
        if choice == "whole":
            releases.append((a, b, n))
        elif choice == "tail":
            x = draw(st.sampled_from([t for t in TIMES if a <= t < b] or [a]))
            releases.append((float(x), b, n))
    return cores, intervals, releases


@settings(max_examples=300, deadline=None)
@given(interval_sets(), st.integers(1, 8), st.sampled_from([0, 1, 2, 5, 8, 30]), st.sampled_from(TIMES),
       st.sampled_from([-INF, 0.0, 3.0, 10.0]))
def test_profile_is_its_intervals_and_finds_the_earliest_slot(case, size, duration, t0, origin):
    """Free cores, canonical form and earliest slots by definition, before and after pruning.
    A profile may begin later than a reservation (after an all-cancellation it begins at
    that instant, and a twin then places jobs that started before): all cores were free."""
    cores, intervals, releases = case
    size = min(size, cores)
    t0 = max(t0, origin)              # (nobody asks about the time before a profile began)
    profile = _Profile(cores, origin)
    for a, b, n in intervals:
        profile.reserve(a, b, n)
    for a, b, n in releases:
        profile.release(a, b, n)
    held = intervals + [(a, b, -n) for a, b, n in releases]
    check_profile(profile, held, cores)
    assert profile.earliest(size, duration, t0) == _earliest(held, cores, size, duration, t0)
    profile.prune(t0)                 # forgetting the past changes nothing from t0 on
    check_profile(profile, held, cores, since=t0)
    expected = _earliest(held, cores, size, duration, t0)
    assert profile.earliest(size, duration, t0) == expected
    assert profile.take_earliest(size, duration, t0) == expected     # and reserve it there
    check_profile(profile, held + [(expected, expected + duration, size)], cores, since=t0)


@settings(max_examples=300, deadline=None)
@given(interval_sets(), st.data())
def test_earlier_is_the_earliest_slot_without_the_job(case, data):
    """``earlier`` (the compression's search, on the profile *with* the job) answers what
    the reference finds on the intervals *without* it, bounded by its reservation."""
    cores, intervals, _ = case
    if not intervals:
        return
    profile = _Profile(cores)
    for a, b, n in intervals:
        profile.reserve(a, b, n)
    k = data.draw(st.integers(0, len(intervals) - 1))
    resv, end, size = intervals[k]
    now = float(data.draw(st.sampled_from([t for t in TIMES if t <= resv])))
    others = intervals[:k] + intervals[k + 1:]
    expected = _earliest(others, cores, size, end - resv, now, until=resv)
    assert profile.earlier(size, end - resv, now, resv) == (None if expected == resv else expected)


def job(id: int, submit: float, run: float, size: int, req_time: float) -> Job:
    return Job(id, submit, -1, run, size, -1, -1, size, req_time, -1, 1, -1, -1, -1, -1, -1, -1, -1)


@st.composite
def long_queues(draw):
    """Up to 60 jobs on up to 16 cores, mostly arriving before the first ends, with many
    distinct estimates and runs ending early: long queues over profiles of many steps, so
    that compressions move reservations by one step, by several, and into windows."""
    cores = draw(st.integers(2, 16))
    n = draw(st.integers(10, 60))
    submits = sorted(draw(st.lists(st.sampled_from(TIMES), min_size=n, max_size=n)))
    jobs = []
    for i, submit in enumerate(submits, 1):
        estimate = draw(st.sampled_from([1, 2, 3, 5, 7, 10, 15, 20, 30, 50]))
        run = draw(st.sampled_from([0, 1, estimate, estimate, estimate - 1, estimate // 2, estimate // 3]))
        jobs.append(job(i, float(submit), float(run), draw(st.integers(1, cores)), float(estimate)))
    return jobs, cores


def rjobs(jobs, cores):
    from batch_reference import RJob
    out = []
    for j in jobs:
        run, estimate, _ = run_and_estimate(j)
        out.append(RJob(j.id, float(j.submit), j.size, estimate, run))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_queues())
def test_conservative_matches_the_reference_on_long_queues(trace):
    jobs, cores = trace
    ours: dict[int, float] = {}
    replay(jobs, "conservative", cores, on_scheduled=lambda rec, wait, run: ours.__setitem__(rec.id, rec.submit + wait))
    assert ours == reference(rjobs(jobs, cores), "conservative", cores)


def check_state(policy: Conservative, now: float) -> None:
    """After a pass: the profile from now on is the running jobs' planned ends plus every
    queued reservation, the earliest reservation kept is the queue's, and wakeup says it."""
    policy.plan(now)
    held = [(j.resv, j.resv + j.estimate, j.size) for j in policy.running.values()]
    held += [(j.resv, j.resv + j.estimate, j.size) for j in policy.queue]
    check_profile(policy.profile, held, policy.cores, since=now)
    first = min((j.resv for j in policy.queue), default=None)
    assert policy.wakeup() == first
    if policy._first is not None:
        assert policy._first == (INF if first is None else first)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_queues(), st.lists(st.tuples(st.sampled_from(TIMES + [25, 30, 40]), st.integers(0, 59),
                                         st.sampled_from(["withdraw", "withdraw", "withdraw", "all"])),
                               max_size=6))
def test_conservative_state_is_consistent_after_every_pass(trace, cancels):
    """Runs interrupted by withdrawals of queued jobs and by all-cancellations (the grid's and
    the bag simulator's sites do both) keep a profile equal to its parts."""
    jobs, cores = trace
    policy = Conservative(cores)
    queue = BatchQueue(policy, env=Environment())
    queue.feed([QJob(j.id, j.size, *run_and_estimate(j)[1::-1], j.submit) for j in jobs])
    for at, pick, kind in sorted(cancels):
        queue.advance(at)
        check_state(policy, queue.now)
        if kind == "all":
            queue.withdraw_all()
        elif policy.queue:
            queue.cancel(policy.queue[pick % len(policy.queue)])
        queue.advance(at)             # the pass at that instant
        check_state(policy, queue.now)
    queue.advance()
    check_state(policy, queue.now)
    assert not policy.queue and not policy.running
