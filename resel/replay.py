"""Replay a workload trace on one simulated site under a batch policy.

The trace is streamed: jobs are read one at a time in submit order, and the simulated
schedule is written back out (field 3 = simulated wait, field 4 = run on this site) as soon as
every earlier-submitted job has finished, so memory grows with the number of jobs *in the
system*, not with the trace (exact percentiles keep each job's wait and run: 16 bytes a job).

Estimates: a job's estimate is its requested time (field 9), its actual run (field 4) where no
request is given. A job that ran longer than it asked for is either killed at its request
(``kill=True``: run truncated, counted as killed) or, by default, has its request raised to
its run — the usual convention of trace-driven simulators, since the original site evidently
let it run. ``speed`` scales run and request (a site 1.4× faster runs a job in run/1.4).
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field
from typing import Callable, Iterable

from resel.backends.batch import Policy, QJob, make_policy, run_and_estimate
from resel.jobstats import JobStats
from resel.swf import Job, Trace, unsorted_error

END, ARRIVE, WAKE = 0, 1, 2


@dataclass
class ReplayResult:
    policy: str
    cores: int
    stats: JobStats
    skipped_too_large: int = 0
    skipped_unknown: int = 0
    events: int = 0
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        out = {"policy": self.policy, "cores": self.cores, **self.stats.summary(self.cores),
               "skipped_too_large": self.skipped_too_large, "skipped_unknown_runtime": self.skipped_unknown,
               "events": self.events}
        return out


def to_qjob(job: Job, seq: int, speed: float, kill: bool) -> QJob | None:
    """The scheduler's view of a trace job on a site of the given speed (None: unusable)."""
    if job.run is None or job.run < 0 or job.size <= 0:
        return None
    run, estimate, killed = run_and_estimate(job, speed, kill=kill)
    q = QJob(seq, job.size, estimate, run, float(job.submit), ref=job)
    q.killed = killed
    return q


def replay(jobs: Iterable[Job], policy: str, cores: int, *, speed: float = 1.0, kill: bool = False,
           taus: tuple[float, ...] = (10.0, 60.0), on_done: Callable[[Job], None] | None = None,
           on_progress: Callable[[int], None] | None = None, trace_name: str = "trace") -> ReplayResult:
    """Simulate ``jobs`` (in submit order) on ``cores`` cores under ``policy``.

    Args:
        on_done: receives each finished job as a copy of its trace record with the simulated
            wait and run, in submit order (for writing SWF).
        on_progress: called with the number of jobs read so far, every 1,000 jobs.

        trace_name: the trace's file name, for error messages.

    A :class:`~resel.swf.Trace` given as it is (not filtered) and no ``on_done`` is read by
    :meth:`~resel.swf.Trace.replay_rows`, which parses only what the replay needs: the same
    jobs and results, without building a :class:`Job` per line.

    Raises:
        InputError: the trace is not sorted by submit time (:func:`resel.swf.unsorted_error`).
        ReselError: unknown policy.
    """
    sched = make_policy(policy, cores)
    wakes_up = type(sched).wakeup is not Policy.wakeup   # FCFS and EASY never ask to be woken
    stats = JobStats(taus)
    result = ReplayResult(policy, cores, stats)
    heap: list[tuple] = []
    push, pop = heapq.heappush, heapq.heappop
    submit_job, finish_job, schedule = sched.submit, sched.finish, sched.schedule
    wait_append, run_append = stats.wait.append, stats.run.append
    killed_count, area, first_submit, last_end = stats.killed, stats.area, stats.first_submit, stats.last_end
    counter = 0
    events = skipped_unknown = skipped_too_large = 0
    inflight: list[int] = []          # seqs of jobs submitted and not finished (lazy heap)
    finished_seqs: set[int] = set()
    outbox: list[tuple[int, Job]] = []
    wakes: set[float] = set()
    last_submit = float("-inf")
    seq = 0

    def flush() -> None:
        while inflight and inflight[0] in finished_seqs:
            finished_seqs.discard(heapq.heappop(inflight))
        while outbox and (not inflight or outbox[0][0] < inflight[0]):
            on_done(heapq.heappop(outbox)[1])

    def wake_at(now: float) -> None:
        nonlocal counter
        wake = sched.wakeup()
        if wake is not None and wake > now and wake not in wakes:
            wakes.add(wake)
            counter += 1
            push(heap, (wake, WAKE, counter, None))

    # rows: (submit, run, size, req_time, id, trace record or None)
    if on_done is None and type(jobs) is Trace:
        rows = jobs.replay_rows()
    else:
        rows = _rows(jobs)
    nxt = next(rows, None)
    while nxt is not None or heap:
        # at equal times: job ends free their cores, then arrivals, then wake-ups
        if heap and (nxt is None or heap[0][0] < nxt[0] or (heap[0][0] == nxt[0] and heap[0][1] == END)):
            now, kind, _, q = pop(heap)
            events += 1
            if kind == END:
                # JobStats.add, inline
                submitted, start, run = q.submit, q.start, q.run
                wait_append(start - submitted)
                run_append(run)
                killed_count += q.killed
                area += run * q.size
                if submitted < first_submit:
                    first_submit = submitted
                if start + run > last_end:
                    last_end = start + run
                if on_done is not None:
                    record = dataclasses.replace(q.ref, wait=_num(q.start - q.submit), run=_num(q.run))
                    heapq.heappush(outbox, (q.id, record))
                    finished_seqs.add(q.id)
                    flush()
                started = finish_job(q, now)
            else:
                wakes.discard(now)
                started = schedule(now)
        else:
            (submit, run, size, req_time, job_id, ref), nxt = nxt, next(rows, None)
            if submit < last_submit:
                raise unsorted_error(trace_name, job_id, submit, last_submit)
            last_submit = submit
            seq += 1
            if on_progress is not None and seq % 1000 == 0:
                on_progress(seq)
            if run is None or run < 0 or size <= 0:      # as to_qjob
                skipped_unknown += 1
                continue
            if size > cores:
                skipped_too_large += 1
                continue
            # run_and_estimate, inline
            estimate = (req_time if req_time > 0 else run) / speed
            run = run / speed
            killed = False
            if run > estimate:
                if kill:
                    run, killed = estimate, True
                else:
                    estimate = run
            now = float(submit)
            q = QJob(seq, size, estimate, run, now, -1.0, -1.0, killed, ref)
            events += 1
            if on_done is not None:
                heapq.heappush(inflight, seq)
            started = submit_job(q, now)
        for s in started:
            counter += 1
            push(heap, (now + s.run, END, counter, s))
        if wakes_up:
            wake_at(now)
    if on_done is not None:
        flush()
    result.events, result.skipped_unknown, result.skipped_too_large = events, skipped_unknown, skipped_too_large
    stats.killed, stats.area, stats.first_submit, stats.last_end = killed_count, area, first_submit, last_end
    return result


def _rows(jobs: Iterable[Job]):
    """Trace records as the replay loop reads them (see :meth:`Trace.replay_rows`)."""
    for job in jobs:
        yield job.submit, job.run, job.size, job.req_time, job.id, job


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)
