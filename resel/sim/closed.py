"""FCFS and EASY on a closed queue, each in one loop: the trace replay's kernels.

:meth:`resel.sim.queue.BatchQueue.run_closed` drives any policy through its methods — an
``enqueue``, a ``release``, a ``schedule`` and a :class:`~resel.sim.policies.QJob` per
job — which is most of a replay's time once the trace is read fast. For the two policies
whose speed issue 15 measures against AccaSim, these loops make the same schedule with the
policy written inline, jobs as plain tuples and no call per job:

* :func:`fcfs`: a job starts at the first instant, not before its submit time nor before
  the job ahead of it started, when the jobs that ended by then leave it room — so the
  schedule is built job by job with one heap of running ends, popped only as far as needed.
* :func:`easy`: the event loop of ``run_closed`` (at each instant every end, then every
  arrival, then one pass), with :class:`~resel.sim.policies.EASY`'s pass inline; while
  nothing waits, arrivals are taken as FCFS takes them (one step per job, not per instant).

Both report each job as it ends, in the order ``run_closed`` does (by end, then by start),
into ``wait`` and ``run`` arrays, so a replay's statistics are the same numbers in the same
order (tests/test_closed.py: every shared trace and random workloads, job by job).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from heapq import heappop, heappush
from itertools import chain
from operator import itemgetter
from typing import Callable, Iterable

INF = math.inf

#: appends one number (``array.append``)
Append = Callable[[float], None]

#: sentinels that keep the loops free of emptiness checks: an arrival that never comes and
#: an end that never happens (a heap entry after every real one: INF, then start order 0)
_NO_JOB = (INF,)
_NO_END = (INF, 0)
#: the expected end and the size of an entry of :func:`easy`'s heap of running jobs
_EXPECTED, _SIZE = itemgetter(5), itemgetter(2)


def fcfs(jobs: Iterable[tuple[float, int, float, int]], cores: int, wait: Append, run: Append,
         number: Append | None = None) -> tuple[float, float]:
    """First come, first served on ``cores`` cores: ``jobs`` are ``(submit, size, run, number)``
    in submit order, each at most ``cores``, numbered in increasing order (jobs start in that
    order, so jobs ending together go by it, as ``run_closed``'s by start order).

    Each job's wait and run are passed to ``wait`` and ``run`` when it ends (by end time, ties
    by start order), and its number to ``number`` if given (which job it was: the schedule,
    for checks). Returns the work done (sum of run × size, in that order) and the last end.

    Why the greedy schedule is FCFS's: a job starts no earlier than its submit time and the
    start of the job ahead (nobody overtakes), and then at the first instant the cores free
    after every end up to it (ends come before the pass of their instant) hold it. A job of
    run 0 ends at its start, in time for the next job's decision at that instant, as its
    second pass of that instant would see it.
    """
    heap: list[tuple[float, int, int, float, float]] = []  # (end, number = start order, size, run, wait)
    push, pop = heappush, heappop
    free = cores
    t = -INF              # the latest start: the next job starts no earlier
    area = 0.0
    last_end = -INF
    heap.append(_NO_END)            # never popped: its INF is past every start
    for submit, size, length, job in jobs:
        if submit > t:
            t = submit
        while heap[0][0] <= t:                           # every end up to t
            last_end, done, used, length_done, waited = pop(heap)
            free += used
            if number is not None:
                number(done)
            wait(waited)
            run(length_done)
            area += length_done * used
        while free < size:                               # the next ends, until it fits
            last_end, done, used, length_done, waited = pop(heap)
            free += used
            if number is not None:
                number(done)
            wait(waited)
            run(length_done)
            area += length_done * used
            t = last_end
        free -= size
        push(heap, (t + length, job, size, length, t - submit))
    while heap[0][0] != INF:
        last_end, done, used, length_done, waited = pop(heap)
        if number is not None:
            number(done)
        wait(waited)
        run(length_done)
        area += length_done * used
    return area, last_end


# One function on purpose (issue 27 item 4; tests/test_function_size.py lists it): split the
# clean way in a copy -- the arrivals while nothing waits, an instant's ends, the head's starts,
# the tracked expected ends and the backfill scan as five helpers, the same schedule job by job
# -- this loop alone took 1.08x the CPU time on hpc2n.swf and 1.05x on wagap-2013.swf, a whole
# replay (reading included) 1.05x and 1.00x (medians of 31 paired runs, interleaved, the order
# alternating; the same code against itself: 0.98-1.01x; load average 5-11 on 2 cores,
# 2026-11-29; an earlier run of 15: the loop 1.12x and 1.07x).
def easy(jobs: Iterable[tuple[float, int, float, float, int]], cores: int, wait: Append,
         run: Append, number: Append | None = None) -> tuple[float, float]:
    """EASY backfilling (FCFS order, :class:`~resel.sim.policies.EASY` with ``order="fcfs"``)
    on ``cores`` cores: ``jobs`` are ``(submit, size, estimate, run, number)`` in submit
    order, each at most ``cores``.

    Reports and returns as :func:`fcfs`. The pass is EASY's, step for step: start the head
    while it fits; then, with two or more waiting and a core free, the head's shadow time
    and extra cores from the running jobs' expected ends (start + estimate), and every later
    job in queue order that fits now and either ends by the shadow time or takes only extra
    cores starts. A pass stops looking once no core is free; it skips the backfill scan when
    no waiting job behind the head is small enough for the free cores (it could start none).
    """
    # running: (end, start order, size, run, wait, expected end, number)
    heap: list[tuple[float, int, int, float, float, float, int]] = []
    # running jobs' expected ends (start + estimate), sorted, and their sizes beside them: jobs
    # expected to end together are interchangeable for the shadow time (only which ends and
    # how many cores count), so plain floats are searched and the first of a size is removed.
    # Only a backfill pass reads them (447 passes in wagap's 17,898 jobs), and only while two
    # or more jobs wait, so they are kept only then ("tracking": built from the heap when a
    # backlog's first pass needs them — 29 times in wagap — dropped when the queue is short
    # again); keeping them for every start and end was a sixth of the kernel's time.
    ends: list[float] = []
    sizes: list[int] = []
    queue: list[tuple[float, int, float, float, int]] = []   # waiting jobs as given, in order
    push, pop = heappush, heappop
    source = iter(jobs)
    nxt = next(source, _NO_JOB)
    heap.append(_NO_END)            # the heap is never empty: its top is INF when no job runs
    free = cores
    seq = 0
    area = 0.0
    last_end = -INF
    # no waiting job behind the head is smaller than this: a lower bound, kept as jobs arrive
    # and made exact by a backfill scan that looks at every waiting job (jobs leaving cannot
    # lower the minimum, so it stays a bound when a scan stops early)
    smallest = INF
    tracking = False
    while True:
        at_arrivals = False       # the fast path below left an instant at its arrivals, ends popped
        if not queue and nxt is not _NO_JOB:
            # Nothing waits: each arrival starts at once if it fits — what the loop's instants
            # would do (each instant's ends, in heap order, then its arrivals; no pass over an
            # empty queue, no expected ends tracked) without its steps per instant: 83 % of
            # wagap's jobs arrive so. An instant's ends are those from before it: a job of run 0
            # started at it ends after its pass, so at the next instant here. The first arrival
            # that does not fit goes to the loop at its instant's arrivals, as if the loop had
            # taken the instant from its start.
            instant = -INF
            for submit, size, estimate, length, job in chain((nxt,), source):
                if submit != instant:
                    instant = submit
                    while heap[0][0] <= submit:
                        last_end, _, used, done_length, waited, _, done = pop(heap)
                        free += used
                        if number is not None:
                            number(done)
                        wait(waited)
                        run(done_length)
                        area += done_length * used
                if size > free:
                    nxt = (submit, size, estimate, length, job)
                    at_arrivals = True
                    break
                free -= size
                seq += 1
                push(heap, (submit + length, seq, size, length, submit - submit, submit + estimate, job))
            else:
                nxt = _NO_JOB
        if at_arrivals:
            t = nxt[0]
        else:
            t = heap[0][0]
            if nxt[0] < t:
                t = nxt[0]
            if t == INF:
                break
            while heap[0][0] == t:
                last_end, _, used, length, waited, expected, done = pop(heap)
                free += used
                if number is not None:
                    number(done)
                wait(waited)
                run(length)
                area += length * used
                if tracking:
                    i = bisect_left(ends, expected)
                    while sizes[i] != used:
                        i += 1
                    del ends[i], sizes[i]
        while nxt[0] == t:      # (an arrival that fits an empty queue was started above)
            if queue and nxt[1] < smallest:
                smallest = nxt[1]
            queue.append(nxt)
            nxt = next(source, _NO_JOB)
        if not queue or not free:
            continue
        # the pass: the head while it fits ...
        if queue[0][1] <= free:
            while queue and queue[0][1] <= free:
                submit, size, estimate, length, job = queue.pop(0)
                free -= size
                seq += 1
                expected = t + estimate
                push(heap, (t + length, seq, size, length, t - submit, expected, job))
                if tracking:
                    i = bisect_right(ends, expected)
                    ends.insert(i, expected)
                    sizes.insert(i, size)
        if len(queue) < 2:                # no backfill until two wait again: stop keeping ends
            tracking = False
            continue
        if free <= 0:
            continue
        if smallest > free:               # (still a lower bound: jobs only left since)
            continue
        # ... then backfill behind the head's reservation
        if not tracking:                  # a backlog began: the running jobs' expected ends, sorted
            # (by expected end alone: jobs expected to end together may be in any order, see
            # above; the sentinel is the only entry of two fields, so remove() compares no
            # number — sorting (expected, size) pairs took three times as long)
            running = heap.copy()
            running.remove(_NO_END)
            running.sort(key=_EXPECTED)
            ends = list(map(_EXPECTED, running))
            sizes = list(map(_SIZE, running))
            tracking = True
        need = queue[0][1]
        avail = free
        i, n = 0, len(ends)
        end = t
        while avail < need and i < n:
            end = ends[i]
            avail += sizes[i]
            i += 1
        shadow = end if end > t else t
        while i < n and ends[i] <= shadow:
            avail += sizes[i]
            i += 1
        extra = avail - need
        chosen = []
        low = INF             # the smallest job left waiting, if the scan goes to the end
        for candidate in queue[1:]:
            size = candidate[1]
            if size > free:
                if size < low:
                    low = size
                continue
            estimate = candidate[2]
            if t + estimate <= shadow:
                pass
            elif size <= extra:
                extra -= size
            else:
                if size < low:
                    low = size
                continue
            submit, size, estimate, length, job = candidate
            free -= size
            seq += 1
            expected = t + estimate
            push(heap, (t + length, seq, size, length, t - submit, expected, job))
            i = bisect_right(ends, expected)
            ends.insert(i, expected)
            sizes.insert(i, size)
            chosen.append(candidate)
            if free <= 0:
                break
        else:
            smallest = low    # exact: every job left waiting was looked at
        for candidate in chosen:          # (few: a search at C speed each; jobs are unique by number)
            queue.remove(candidate)
    return area, last_end


#: the kernels by policy name; other policies replay through ``BatchQueue.run_closed``
KERNELS: dict[str, Callable[..., tuple[float, float]]] = {"fcfs": fcfs, "easy": easy}
