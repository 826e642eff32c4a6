"""Batch policies: hand-computed schedules and the textbook invariants (hypothesis)."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings, strategies as st

from resel.errors import ReselError
from resel.sim.policies import EASY, FCFS, Conservative, QJob, make_policy


def run_schedule(policy, jobs):
    """Drive a policy with (size, estimate, run, submit) tuples; return {id: start}."""
    heap = []
    seq = 0
    for i, (size, est, run, submit) in enumerate(jobs):
        heapq.heappush(heap, (submit, 1, seq := seq + 1, ("arrive", QJob(i, size, est, run, submit))))
    starts, ends = {}, {}
    wakes = set()

    def started(now, js):
        nonlocal seq
        for j in js:
            assert j.id not in starts, "a job started twice"
            starts[j.id] = now
            heapq.heappush(heap, (now + j.run, 0, seq := seq + 1, ("end", j)))
        w = policy.wakeup()
        if w is not None and w > now and w not in wakes:
            wakes.add(w)
            heapq.heappush(heap, (w, 2, seq := seq + 1, ("wake", None)))

    while heap:
        now, _, _, (kind, job) = heapq.heappop(heap)
        if kind == "arrive":
            started(now, policy.submit(job, now))
        elif kind == "end":
            assert job.id not in ends, "a job ended twice"
            ends[job.id] = now
            started(now, policy.finish(job, now))
        else:
            wakes.discard(now)
            started(now, policy.schedule(now))
    return starts, ends


# jaros1.swf (../shared/data/swf) on 8 cores: 12 jobs submitted at 20, requests exact.
JAROS1 = [(1, 1200), (5, 2100), (1, 900)] * 4


def jaros1_jobs():
    return [(size, run, run, 20) for size, run in JAROS1]


def test_fcfs_jaros1_by_hand():
    """FCFS on jaros1 with 8 cores matches the hand-computed start times."""
    starts, _ = run_schedule(FCFS(8), jaros1_jobs())
    assert [starts[i] for i in range(12)] == [20, 20, 20, 20, 2120, 2120, 2120, 4220, 4220, 4220, 6320, 6320]


def test_easy_jaros1_by_hand():
    """EASY on jaros1 with 8 cores backfills the 1-core jobs exactly as the shadow/extra rule says."""
    starts, _ = run_schedule(EASY(8), jaros1_jobs())
    assert [starts[i] for i in range(12)] == [20, 20, 20, 20, 2120, 920, 1220, 4220, 1220, 1820, 6320, 2120]


def test_conservative_jaros1_by_hand():
    """Conservative on jaros1 with 8 cores: every job at its first reservation."""
    starts, _ = run_schedule(Conservative(8), jaros1_jobs())
    assert [starts[i] for i in range(12)] == [20, 20, 20, 20, 2120, 920, 1220, 4220, 1220, 1820, 6320, 2120]


# Where EASY and conservative part: A(4) runs; B(5) is the head; C(6) second; D(1, long).
PART = [(4, 10, 10, 0), (5, 10, 10, 0), (6, 10, 10, 0), (1, 100, 100, 0)]


def test_easy_may_delay_the_second_job():
    """EASY protects only the head: D backfills into the extra core and delays C to 100."""
    starts, _ = run_schedule(EASY(6), PART)
    assert starts == {0: 0, 1: 10, 2: 100, 3: 0}


def test_conservative_delays_nobody():
    """Conservative reserves C at 20 and puts D after it, at 30."""
    starts, _ = run_schedule(Conservative(6), PART)
    assert starts == {0: 0, 1: 10, 2: 20, 3: 30}


def test_fcfs_lets_nobody_overtake():
    """FCFS starts D only after C."""
    starts, _ = run_schedule(FCFS(6), PART)
    assert starts == {0: 0, 1: 10, 2: 20, 3: 30}


def test_sjbf_tries_the_shortest_candidate_first():
    """EASY-SJBF backfills the shorter of two queued candidates when only one fits."""
    # A and E fill 4 cores; B (4 cores) is the head; C (7 s) and D (5 s) wait behind it.
    jobs = [(2, 10, 10, 0), (2, 3, 3, 0), (4, 10, 10, 0), (2, 7, 7, 0), (2, 5, 5, 0)]
    easy, _ = run_schedule(EASY(4, "fcfs"), jobs)
    sjbf, _ = run_schedule(EASY(4, "sjbf"), jobs)
    assert (easy[3], easy[4]) == (3, 20)   # at 3, C (by arrival) ends at 10 = shadow; D waits for B
    assert (sjbf[3], sjbf[4]) == (20, 3)   # D (shortest) is tried first; C then ends past the shadow


def test_conservative_moves_reservations_forward_when_a_job_ends_early():
    """A job ending before its estimate lets the queued job start at once."""
    jobs = [(4, 100, 10, 0), (4, 10, 10, 1)]
    starts, _ = run_schedule(Conservative(4), jobs)
    assert starts[1] == 10


def test_estimate_start_matches_the_reservation():
    """estimate_start answers the start a job of that shape would get (sbatch --test-only)."""
    policy = Conservative(4)
    policy.submit(QJob(0, 3, 50, 50, 0), 0)
    assert policy.estimate_start(2, 10, 0) == 50
    assert policy.estimate_start(1, 10, 0) == 0
    fcfs = FCFS(4)
    fcfs.submit(QJob(0, 3, 50, 50, 0), 0)
    fcfs.submit(QJob(1, 4, 20, 20, 0), 0)
    assert fcfs.estimate_start(1, 10, 0) == 70


def test_unknown_policy_and_oversized_job_are_errors():
    """A policy name not known, or a job larger than the site, is a ReselError."""
    with pytest.raises(ReselError):
        make_policy("lottery", 4)
    with pytest.raises(ReselError):
        FCFS(4).submit(QJob(0, 5, 1, 1, 0), 0)


# ------------------------------------------------------------------ properties
jobs_strategy = st.lists(
    st.tuples(st.integers(1, 8), st.integers(1, 50), st.integers(0, 50), st.integers(0, 100)).map(
        lambda t: (t[0], t[1], min(t[1], t[2]), t[3])),   # run <= estimate, as real schedulers assume
    min_size=1, max_size=40).map(lambda js: sorted(js, key=lambda j: j[3]))


def overcommitted(jobs, starts, ends, cores):
    events = sorted([(ends[i], -jobs[i][0]) for i in starts] + [(starts[i], jobs[i][0]) for i in starts])
    used = 0
    for _, delta in events:   # ends sort before starts at equal times (negative delta first)
        used += delta
        if used > cores:
            return True
    return False


@settings(max_examples=150, deadline=None)
@given(jobs_strategy, st.sampled_from(["fcfs", "easy", "easy-sjbf", "conservative"]))
def test_every_job_starts_and_ends_once_never_overcommitting(jobs, name):
    """No policy starts a job on more cores than are free; each job starts and ends once."""
    starts, ends = run_schedule(make_policy(name, 8), jobs)
    assert set(starts) == set(ends) == set(range(len(jobs)))
    assert all(ends[i] - starts[i] == jobs[i][2] for i in starts)
    assert all(starts[i] >= jobs[i][3] for i in starts)
    assert not overcommitted(jobs, starts, ends, 8)


class _RecordingEASY(EASY):
    """EASY that remembers the first reservation (shadow time) each head job was given."""

    def __init__(self, cores):
        super().__init__(cores)
        self.first_shadow = {}

    def _shadow(self, head, now):
        shadow, extra = super()._shadow(head, now)
        self.first_shadow.setdefault(head.id, shadow)
        return shadow, extra


@settings(max_examples=150, deadline=None)
@given(jobs_strategy)
def test_easy_never_delays_the_head_reservation(jobs):
    """A head job starts no later than the shadow time it was first promised."""
    policy = _RecordingEASY(8)
    starts, _ = run_schedule(policy, jobs)
    for job_id, shadow in policy.first_shadow.items():
        assert starts[job_id] <= shadow


class _RecordingConservative(Conservative):
    """Conservative that checks, on every compression, that no reservation moved later."""

    def __init__(self, cores):
        super().__init__(cores)
        self.first_resv = {}

    def submit(self, job, now):
        out = super().submit(job, now)
        self.first_resv[job.id] = job.resv
        return out

    def _compress(self, now):
        before = {j.id: j.resv for j in self.queue}
        super()._compress(now)
        for j in self.queue:
            assert j.resv <= before[j.id], "a conservative reservation was delayed"


@settings(max_examples=150, deadline=None)
@given(jobs_strategy)
def test_conservative_never_delays_a_reservation(jobs):
    """Every job starts no later than the reservation it got at submission."""
    policy = _RecordingConservative(8)
    starts, _ = run_schedule(policy, jobs)
    for job_id, resv in policy.first_resv.items():
        assert starts[job_id] <= resv


@settings(max_examples=100, deadline=None)
@given(jobs_strategy)
def test_fcfs_starts_in_submission_order(jobs):
    """Under FCFS nobody overtakes: start times follow the queue order."""
    starts, _ = run_schedule(FCFS(8), jobs)
    order = [starts[i] for i in range(len(jobs))]
    assert order == sorted(order)
