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
import math
import operator
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Iterator

from resel.sim import closed
from resel.sim.core import collector_paused
from resel.sim.jobstats import JobStats
from resel.sim.policies import QJob, run_and_estimate
from resel.sim.swf import Columns, Job, Trace, unsorted_error


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


# Split (issue 27 item 4): the arrivals generator, the row source, the kernel path and the
# in-order hand-on moved out of replay; ``ended`` stays a closure (per job, it updates the
# replay's counters as cells). Measured 2026-11-29, CPU time of read+replay, 15 interleaved
# rounds, load average about 1, against the one-function version: hpc2n.swf conservative
# 0.99-1.02x, in submit order 0.98-1.01x; wagap-2013.swf conservative 0.92-1.02x, easy-sjbf in
# submit order 0.93-1.08x, fcfs (kernel) 1.01-1.08x — where the same code against itself gave
# 0.97-1.10x: no cost above the noise.
def replay(jobs: Iterable[Job], policy: str, cores: int, *, speed: float = 1.0, kill: bool = False,
           taus: tuple[float, ...] = (10.0, 60.0), on_done: Callable[[Job], None] | None = None,
           on_scheduled: Callable[[Job, float, float], None] | None = None,
           on_progress: Callable[[int], None] | None = None, trace_name: str = "trace",
           first: int | None = None, statuses: Collection[int] | None = None,
           schedule: list | None = None) -> ReplayResult:
    """Simulate ``jobs`` (in submit order) on ``cores`` cores under ``policy``.

    Args:
        on_done: receives each finished job as a copy of its trace record with the simulated
            wait and run, in submit order (for writing SWF).
        on_scheduled: ``on_scheduled(record, wait, run)`` in submit order, the trace record
            as it was read: what ``on_done`` gives without building a copy per job.
        on_progress: called with the number of jobs read so far, every 1,000 jobs.
        trace_name: the trace's file name, for error messages.
        first: replay only the first that many jobs read.
        statuses: replay only the jobs whose status (field 11) is one of these, as
            :func:`~resel.sim.swf.only_status` keeps them (``first`` counts the jobs kept).
        schedule: a list that receives, for each job read (after ``statuses``), its simulated
            ``(wait, run)`` (None: not replayed) in the order read — what ``resel replay
            --output`` writes (:func:`~resel.sim.swf.write_schedule`), with no record per job.

    The site is a :class:`~resel.sim.queue.BatchQueue`: at every instant the jobs ending
    free their cores, then the jobs arriving join the queue, then the policy makes one pass.
    How the trace is read (records, rows, columns into a kernel): :func:`_rows_of`, :func:`_replay_by_kernel`.

    Raises:
        InputError: the trace is not sorted by submit time (:func:`resel.sim.swf.unsorted_error`).
        ReselError: unknown policy.
    """
    jobs, statuses, on_scheduled = _callbacks(jobs, statuses, schedule, on_done, on_scheduled)
    stats = JobStats(taus)
    result = ReplayResult(policy, cores, stats)
    in_order = on_scheduled is not None
    if not in_order and type(jobs) is Trace and policy in closed.KERNELS:
        return _replay_by_kernel(jobs, statuses, policy, cores, speed, kill, result, trace_name, on_progress,
                                 first, schedule)
    wait_append, run_append = stats.wait.append, stats.run.append
    outbox: list[tuple[int, Job, float, float]] = []           # finished, not yet handed on (submit order)
    inflight: list[int] | None = [] if in_order else None     # seqs submitted and not finished
    finished_seqs: set[int] = set()

    killed_n, area, first_submit, last_end = 0, 0.0, stats.first_submit, stats.last_end
    by_position: dict[int, tuple[float, float]] | None = {} if schedule is not None else None

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
            _flush(inflight, finished_seqs, outbox, on_scheduled)
        elif by_position is not None:
            by_position[q.id - 1] = (q.start - submitted, run)

    counts = [0, 0, 0]           # jobs read, unknown run or size, larger than the site
    from resel.sim.queue import BatchQueue     # (here: the kernels' path needs no batch queue)
    queue = BatchQueue(policy, cores, on_end=ended)
    with collector_paused():
        queue.run_closed(_arrivals(_rows_of(jobs, statuses, in_order, first), cores, speed, kill, trace_name,
                                   on_progress, counts, inflight))
    if in_order:
        _flush(inflight, finished_seqs, outbox, on_scheduled)
    if by_position is not None:
        schedule[:] = [by_position.get(i) for i in range(counts[0])]
    stats.killed, stats.area, stats.first_submit, stats.last_end = killed_n, area, first_submit, last_end
    return _counted(result, counts[1], counts[2])


def _flush(inflight: list[int], finished_seqs: set[int], outbox: list, on_scheduled: Callable) -> None:
    """Hand on, in submit order, every finished job no earlier-submitted job still holds back."""
    while inflight and inflight[0] in finished_seqs:
        finished_seqs.discard(heapq.heappop(inflight))
    while outbox and (not inflight or outbox[0][0] < inflight[0]):
        _, record, wait, run = heapq.heappop(outbox)
        on_scheduled(record, wait, run)


def _counted(result: ReplayResult, unknown: int, too_large: int) -> ReplayResult:
    """The replay's result with its event count (an arrival and an end per job) and skips."""
    result.events = 2 * len(result.stats.wait)
    result.skipped_unknown, result.skipped_too_large = unknown, too_large
    return result


def _callbacks(jobs, statuses, schedule, on_done, on_scheduled):
    """The jobs, the statuses still to filter by, and the per-job callback :func:`replay` uses."""
    if statuses is not None and type(jobs) is not Trace:
        from resel.sim.swf import only_status
        jobs, statuses = only_status(jobs, statuses), None
    if schedule is not None and (on_scheduled is not None or on_done is not None or type(jobs) is not Trace):
        raise ValueError("schedule= reads a Trace given as it is, without on_scheduled or on_done")
    if on_done is not None:
        user_done = on_done
        on_scheduled = lambda record, wait, run: user_done(   # noqa: E731
            dataclasses.replace(record, wait=_num(wait), run=_num(run)))
    return jobs, statuses, on_scheduled


def _replay_by_kernel(jobs: Trace, statuses, policy: str, cores: int, speed: float, kill: bool,
                      result: ReplayResult, trace_name: str, on_progress, first, schedule) -> ReplayResult:
    """FCFS and EASY with no record wanted back: the trace's columns
    (:meth:`~resel.sim.swf.Trace.replay_columns`) go straight to the policy's kernel
    (:mod:`resel.sim.closed`) — the same schedule without a :class:`QJob` per job."""
    stats = result.stats
    read, unknown, too_large, killed_n, first_submit = _run_kernel(
        jobs.replay_columns(statuses), policy, cores, speed, kill, stats, trace_name, on_progress, first,
        schedule=schedule)
    stats.killed, stats.first_submit = killed_n, first_submit
    return _counted(result, unknown, too_large)


def _rows_of(jobs, statuses, in_order: bool, first: int | None):
    """``(submit, run, size, req_time, id, trace record or None)`` per job read: a
    :class:`~resel.sim.swf.Trace` given as it is, with no record wanted back, is read by
    :meth:`~resel.sim.swf.Trace.replay_rows`, which parses only what the replay needs (the same
    jobs and results, without building a :class:`Job` per line)."""
    if not in_order and type(jobs) is Trace:
        rows = jobs.replay_rows() if statuses is None else jobs.replay_rows_with_status(statuses)
    else:
        rows = _rows(jobs if statuses is None else _only_status(jobs, statuses))
    return rows if first is None else itertools.islice(rows, first)


def _arrivals(rows, cores: int, speed: float, kill: bool, trace_name: str, on_progress, counts: list[int],
              inflight: list[int] | None) -> Iterator[QJob]:
    """The trace's usable jobs as the scheduler sees them, checked for order; ``counts`` gets
    the jobs read, those of unknown run or size, and those larger than the site; ``inflight``
    (when results go back in submit order) each job's seq as it is submitted."""
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
        if inflight is not None:
            heapq.heappush(inflight, seq)
        yield QJob(seq, size, estimate, run, float(submit), -1.0, -1.0, killed, ref)
    counts[0] = seq


def _only_status(jobs: Iterable[Job], statuses: Collection[int]) -> Iterator[Job]:
    from resel.sim.swf import only_status
    return only_status(jobs, statuses)


# Split into _prepared, _until_first and _kernel_rows (issue 27 item 4) at no measured cost: a
# whole replay of wagap-2013.swf and hpc2n.swf under fcfs and easy took 0.99-1.01x the time of
# the one-function version (median of 31 paired runs, interleaved, CPU time, load average 4-5
# on 2 cores, 2026-11-29), where the same code against itself gave 1.00-1.03x.
def _run_kernel(blocks: Iterable[Columns], policy: str, cores: int, speed: float, kill: bool, stats: JobStats,
                trace_name: str, on_progress: Callable[[int], None] | None,
                first: int | None, starts: dict | None = None,
                schedule: list | None = None) -> tuple[int, int, int, int, float]:
    """:func:`replay` of a trace's columns (:meth:`Trace.replay_columns`) by the policy's kernel
    (:data:`resel.sim.closed.KERNELS`): the jobs a block at a time made into the kernel's
    tuples (:func:`_prepared`), then one loop over all of them.

    Fills ``stats.wait``, ``run``, ``area`` and ``last_end``; returns the jobs read, the
    unknown and too-large ones skipped, the jobs killed at their request and the first
    submit time replayed. ``starts``, if given, receives each replayed job's start by job id
    (the schedule, for :func:`kernel_schedule`; it keeps every job's id and submit time);
    ``schedule``, each job read's ``(wait, run)`` by its position (None: not replayed).
    """
    kept: tuple[list, list[float]] | None = ([], []) if starts is not None else None   # ids, submit times
    positions: list[int] | None = [] if schedule is not None else None   # each replayed job's among those read
    counts = [0, 0, 0, 0, 0]              # read, unknown run or size, larger than the site, killed, replayed
    low = [math.inf]                      # the first submit replayed
    # the kernel reports each job's wait and run into lists, moved into the statistics' arrays
    # a block at a time (so they hold at most a block's jobs and the jobs running then):
    # array('d').append converts each number through a parsed format, ~100 ns, against ~25 ns
    # for list.append plus fromlist
    waits: list = []
    ran: list = []

    def moved() -> None:
        stats.wait.fromlist(waits)
        stats.run.fromlist(ran)
        waits.clear()
        ran.clear()

    kernel = closed.KERNELS[policy]
    order: list[int] | None = [] if starts is not None or schedule is not None else None
    rows = _prepared(blocks, cores, speed, kill, policy == "fcfs", first, trace_name, on_progress, counts, low,
                     moved, positions, kept)
    try:
        with collector_paused():
            area, last_end = kernel(itertools.chain.from_iterable(rows), cores, waits.append,
                                    ran.append, None if order is None else order.append)
    finally:
        moved()
    stats.area, stats.last_end = float(area), float(last_end)      # (as the float path gives them)
    if kept is not None and order is not None:
        kept_ids, kept_submits = kept
        for number, waited in zip(order, stats.wait):
            starts[kept_ids[number]] = kept_submits[number] + waited
    if positions is not None and order is not None:
        schedule[:] = [None] * counts[0]
        for number, waited, ran_for in zip(order, stats.wait, stats.run):
            schedule[positions[number]] = (waited, ran_for)
    return counts[0], counts[1], counts[2], counts[3], float(low[0])


def _prepared(blocks: Iterable[Columns], cores: int, speed: float, kill: bool, fcfs: bool, first: int | None,
              trace_name: str, on_progress: Callable[[int], None] | None, counts: list[int], low: list[float],
              moved: Callable[[], None], positions: list[int] | None,
              kept: tuple[list, list[float]] | None) -> Iterator[Iterable[tuple]]:
    """The kernel's tuples, a block of the trace's columns at a time: checked for order (the
    first ``first`` jobs only), unusable ones counted and dropped, run and estimate scaled and
    capped as ``arrivals`` does, by list operations. Counts into ``counts`` (read, unknown,
    too large, killed, replayed) and the first submit into ``low``; ``moved`` is called before
    each block; ``positions`` and ``kept`` (ids, submits), if given, receive each replayed job's."""
    last = -math.inf
    reach = [0, 0]                        # the largest submit time seen, the sum of the runs
    for submits, runs, sizes, req_times, ids in _until_first(blocks, first, counts):
        moved()
        if first is not None and counts[0] + len(submits) > first:
            keep = max(0, first - counts[0])
            submits, runs, sizes, req_times, ids = (c[:keep] for c in (submits, runs, sizes, req_times, ids))
        if not submits:
            return
        if submits[0] < last or submits != sorted(submits):
            for submit, job_id in zip(submits, ids):
                if submit < last:
                    raise unsorted_error(trace_name, job_id, submit, last)
                last = submit
        last = submits[-1]
        before = counts[0]
        counts[0] += len(submits)
        if on_progress is not None:
            for done in range(before // 1000 + 1, counts[0] // 1000 + 1):
                on_progress(done * 1000)
        read: Iterable[int] = range(before, counts[0])
        if not (min(runs) >= 0 and min(sizes) > 0 and max(sizes) <= cores):    # as to_qjob
            usable = [run is not None and run >= 0 and size > 0 for run, size in zip(runs, sizes)]
            counts[1] += usable.count(False)
            fits = [ok and size <= cores for ok, size in zip(usable, sizes)]
            counts[2] += fits.count(False) - usable.count(False)
            submits, runs, sizes, req_times, ids = (list(itertools.compress(c, fits))
                                                    for c in (submits, runs, sizes, req_times, ids))
            read = itertools.compress(read, fits)
            if not submits:
                continue
        if positions is not None:
            positions.extend(read)
        low[0] = min(low[0], submits[0])
        numbers = range(counts[4], counts[4] + len(submits))
        counts[4] += len(submits)
        if kept is not None:
            kept[0].extend(ids)
            kept[1].extend(map(float, submits))
        yield _kernel_rows(submits, runs, sizes, req_times, numbers, speed, kill, fcfs, reach, counts)


def _until_first(blocks: Iterable[Columns], first: int | None, counts: list[int]) -> Iterator[Columns]:
    """The blocks, none read once the first ``first`` jobs are in (so that --first bounds what is
    read of the file, whatever follows them)."""
    for block in blocks:
        yield block
        if first is not None and counts[0] >= first:
            return


def _kernel_rows(submits: list, runs: list, sizes: list, req_times: list, numbers: range, speed: float,
                 kill: bool, fcfs: bool, reach: list, counts: list[int]) -> Iterable[tuple]:
    """One block's jobs as the kernel's tuples: ``(submit, size, run, number)`` for FCFS,
    ``(submit, size, estimate, run, number)`` for EASY (``reach``: the largest submit and the sum
    of the runs so far, updated; ``counts[3]``: the jobs killed at their request)."""
    # Numbers as they were read, not floats, while every time the schedule can reach
    # (the latest submit, plus every run so far, plus the longest request) is below
    # 2**52: each sum and difference of the kernel is then exact either way, so the
    # schedule and the statistics are the same numbers (the int-to-float conversion of
    # up to two values a job is ~5 % of an FCFS replay). Beyond, floats as before.
    reach[0] = max(reach[0], abs(submits[0]), abs(submits[-1]))
    reach[1] += sum(runs)
    exact = speed == 1 and reach[0] + reach[1] < _EXACT
    # run_and_estimate, column by column: the request (else the run), both / speed; a
    # run past its request is cut to it (kill) or raises it (FCFS reads no estimate)
    if fcfs and not kill:
        if exact:
            return zip(submits, sizes, runs, numbers)
        return zip(map(float, submits), sizes, map(float, runs) if speed == 1 else
                   [run / speed for run in runs], numbers)
    if exact:
        if kill:
            estimates = [req if req > 0 else run for req, run in zip(req_times, runs)]
        else:       # the request raised to the run at once: max(request or run, run), which
            # is max(request, run) as runs are >= 0 (checked above), written out (the
            # request on a tie, as max keeps the first): map(max, ...) calls max with a
            # tuple of arguments per job, three times as long
            estimates = [req if req >= run else run for req, run in zip(req_times, runs)]
        exact = reach[0] + reach[1] + max(estimates) < _EXACT
    if exact:
        starts_at, lengths = submits, runs
    else:
        starts_at = list(map(float, submits))
        lengths = list(map(float, runs)) if speed == 1 else [run / speed for run in runs]
        estimates = [(req if req > 0 else run) / speed for req, run in zip(req_times, runs)]
        if not kill:
            estimates = [length if length > e else e for e, length in zip(estimates, lengths)]
    if kill:        # a run past its request is cut to it (min(run, estimate), written out)
        over = list(map(operator.gt, lengths, estimates))
        if any(over):
            counts[3] += over.count(True)
            lengths = [e if e < length else length for length, e in zip(lengths, estimates)]
    return zip(starts_at, sizes, lengths, numbers) if fcfs else zip(starts_at, sizes, estimates, lengths, numbers)


#: below this, sums and differences of whole numbers are as exact in floats as in ints
_EXACT = 2**52


def kernel_schedule(trace: Trace, policy: str, cores: int, *, speed: float = 1.0,
                    kill: bool = False) -> dict:
    """Each job's start time by job id, as :func:`replay` of ``trace`` computes it with the
    policy's kernel (fcfs, easy): the schedule that is timed, for checking it job by job
    against another simulator's (benchmarks/bench_replay.py, AccaSim) or BatchQueue's."""
    if policy not in closed.KERNELS:
        raise ValueError(f"no kernel for {policy!r}; one of {', '.join(closed.KERNELS)}")
    starts: dict = {}
    _run_kernel(trace.replay_columns(), policy, cores, speed, kill, JobStats(), trace.path, None, None, starts)
    return starts


def _rows(jobs: Iterable[Job]):
    """Trace records as the replay loop reads them (see :meth:`Trace.replay_rows`)."""
    for job in jobs:
        yield job.submit, job.run, job.size, job.req_time, job.id, job


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 3)
