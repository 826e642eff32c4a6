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
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from resel.sim.policies import QJob, run_and_estimate
from resel.sim.jobstats import JobStats
from resel.sim.queue import BatchQueue
from resel.sim.swf import Job, Trace, unsorted_error


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
           on_scheduled: Callable[[Job, float, float], None] | None = None,
           on_progress: Callable[[int], None] | None = None, trace_name: str = "trace",
           first: int | None = None) -> ReplayResult:
    """Simulate ``jobs`` (in submit order) on ``cores`` cores under ``policy``.

    Args:
        on_done: receives each finished job as a copy of its trace record with the simulated
            wait and run, in submit order (for writing SWF).
        on_scheduled: ``on_scheduled(record, wait, run)`` in submit order, the trace record
            as it was read: what ``on_done`` gives without building a copy per job.
        on_progress: called with the number of jobs read so far, every 1,000 jobs.
        trace_name: the trace's file name, for error messages.
        first: replay only the first that many jobs read.

    The site is a :class:`~resel.sim.queue.BatchQueue`: at every instant the jobs ending
    free their cores, then the jobs arriving join the queue, then the policy makes one pass.
    A :class:`~resel.sim.swf.Trace` given as it is (not filtered) and no record wanted back is
    read by :meth:`~resel.sim.swf.Trace.replay_rows`, which parses only what the replay needs:
    the same jobs and results, without building a :class:`Job` per line.

    Raises:
        InputError: the trace is not sorted by submit time (:func:`resel.sim.swf.unsorted_error`).
        ReselError: unknown policy.
    """
    stats = JobStats(taus)
    result = ReplayResult(policy, cores, stats)
    wait_append, run_append = stats.wait.append, stats.run.append
    outbox: list[tuple[int, Job, float, float]] = []           # finished, not yet handed on (submit order)
    inflight: list[int] = []                                   # seqs submitted and not finished
    finished_seqs: set[int] = set()
    if on_done is not None:
        user_done = on_done
        on_scheduled = lambda record, wait, run: user_done(   # noqa: E731
            dataclasses.replace(record, wait=_num(wait), run=_num(run)))
    in_order = on_scheduled is not None

    def flush() -> None:
        while inflight and inflight[0] in finished_seqs:
            finished_seqs.discard(heapq.heappop(inflight))
        while outbox and (not inflight or outbox[0][0] < inflight[0]):
            _, record, wait, run = heapq.heappop(outbox)
            on_scheduled(record, wait, run)

    killed_n, area, first_submit, last_end = 0, 0.0, stats.first_submit, stats.last_end

    def ended(q: QJob, now: float) -> None:
        # JobStats.add, inline (``now`` is start + run)
        nonlocal killed_n, area, first_submit, last_end
        submitted, run = q.submit, q.run
        wait_append(q.start - submitted)
        run_append(run)
        killed_n += q.killed
        area += run * q.size
        if submitted < first_submit:
            first_submit = submitted
        if now > last_end:
            last_end = now
        if in_order:
            heapq.heappush(outbox, (q.id, q.ref, q.start - submitted, run))
            finished_seqs.add(q.id)
            flush()

    counts = [0, 0, 0]           # jobs read, unknown run or size, larger than the site

    def arrivals(rows) -> Iterator[QJob]:
        """The trace's usable jobs as the scheduler sees them, checked for order."""
        last_submit = float("-inf")
        seq = 0
        for submit, run, size, req_time, job_id, ref in rows:
            if submit < last_submit:
                raise unsorted_error(trace_name, job_id, submit, last_submit)
            last_submit = submit
            seq += 1
            if on_progress is not None and seq % 1000 == 0:
                on_progress(seq)
            if run is None or run < 0 or size <= 0:      # as to_qjob
                counts[1] += 1
                continue
            if size > cores:
                counts[2] += 1
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
            if in_order:
                heapq.heappush(inflight, seq)
            yield QJob(seq, size, estimate, run, float(submit), -1.0, -1.0, killed, ref)
        counts[0] = seq

    # rows: (submit, run, size, req_time, id, trace record or None)
    if not in_order and type(jobs) is Trace:
        rows = jobs.replay_rows()
    else:
        rows = _rows(jobs)
    if first is not None:
        rows = itertools.islice(rows, first)
    queue = BatchQueue(policy, cores, on_end=ended)
    queue.run_closed(arrivals(rows))
    if in_order:
        flush()
    replayed = len(stats.wait)
    result.events = 2 * replayed          # an arrival and an end per job
    result.skipped_unknown, result.skipped_too_large = counts[1], counts[2]
    stats.killed, stats.area, stats.first_submit, stats.last_end = killed_n, area, first_submit, last_end
    return result


def _rows(jobs: Iterable[Job]):
    """Trace records as the replay loop reads them (see :meth:`Trace.replay_rows`)."""
    for job in jobs:
        yield job.submit, job.run, job.size, job.req_time, job.id, job


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)
