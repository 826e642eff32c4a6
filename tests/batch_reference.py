"""An independent, slow reference for the batch policies, written from their definitions
(docs/batch.md; Mu'alem & Feitelson for EASY, Feitelson & Weil / Srinivasan et al. for
conservative backfilling) — not from resel's code, so the tests can compare the two job by job.

Nothing here is shared with :mod:`resel.sim.policies`: no availability-profile class, no
incremental bookkeeping. State is plain lists, recomputed at every step. The simulation runs
instant by instant: at each instant every job that ends is removed, then every job that
arrives joins the queue, then the policy makes one scheduling pass.

A job is ``(id, submit, size, estimate, run)``; the scheduler reads only the estimate, and
``run <= estimate`` (the replay raises a request to the run, so this is what it simulates).
"""

from __future__ import annotations

import math
from typing import NamedTuple

INF = math.inf


class RJob(NamedTuple):
    id: int
    submit: float
    size: int
    estimate: float
    run: float


def _earliest(intervals: list[tuple[float, float, int]], cores: int, size: int, duration: float,
              t0: float, until: float = INF) -> float:
    """The earliest s >= t0 with ``size`` cores free on all of [s, s + duration), given the
    intervals [start, end) of cores in use; ``until`` if none before it.

    The cores in use form a step function: sum every interval's +size at its start and
    -size at its end, in time order. A start can only be t0 or a time the function steps
    down; from each candidate, walk the steps until ``duration`` has passed."""
    delta: dict[float, int] = {}
    for start, end, n in intervals:
        if end > t0:
            start = max(start, t0)
            delta[start] = delta.get(start, 0) + n
            delta[end] = delta.get(end, 0) - n
    delta.setdefault(t0, 0)
    times = sorted(delta)
    used, in_use = 0, []
    for t in times:
        used += delta[t]
        in_use.append(used)            # cores in use on [t, next time)
    for k, s in enumerate(times):
        if s >= until:
            return until
        if cores - in_use[k] < size:
            continue
        j = k
        while j < len(times) and times[j] < s + duration and cores - in_use[j] >= size:
            j += 1
        if j == len(times) or times[j] >= s + duration:
            return s
    return until


def simulate(jobs: list[RJob], policy: str, cores: int) -> dict[int, float]:
    """Start time of every job (by id) under ``policy``: fcfs, easy, easy-sjbf, conservative."""
    jobs = sorted(jobs, key=lambda j: j.submit)          # stable: ties keep arrival order
    i = 0
    running: list[tuple[RJob, float]] = []                # (job, start)
    queue: list[RJob] = []                                # priority = arrival order
    resv: dict[int, float] = {}                           # conservative reservations
    starts: dict[int, float] = {}
    t = -INF
    while i < len(jobs) or running or queue:
        times = [s + j.run for j, s in running]
        if i < len(jobs):
            times.append(jobs[i].submit)
        times += [resv[j.id] for j in queue if j.id in resv]
        t = min(times)
        # 1. every job ending now
        freed_early = False
        still = []
        for j, s in running:
            if s + j.run == t:
                freed_early |= s + j.estimate > t
            else:
                still.append((j, s))
        running = still
        # 2. every job arriving now
        new = []
        while i < len(jobs) and jobs[i].submit == t:
            queue.append(jobs[i])
            new.append(jobs[i])
            i += 1
        # 3. one pass
        started = _pass(policy, cores, t, running, queue, new, resv, freed_early)
        for j in started:
            starts[j.id] = t
            running.append((j, t))
            queue.remove(j)
    return starts


def _pass(policy: str, cores: int, t: float, running, queue, new, resv, freed_early) -> list[RJob]:
    free = cores - sum(j.size for j, _ in running)
    started: list[RJob] = []
    if policy == "conservative":
        def used(skip: RJob | None = None):
            out = [(s, s + j.estimate, j.size) for j, s in running]
            out += [(resv[q.id], resv[q.id] + q.estimate, q.size) for q in queue
                    if q.id in resv and q is not skip]
            return out
        if freed_early:         # compression: each queued job, by priority, as early as it can
            for q in queue:
                if q.id in resv:
                    resv[q.id] = _earliest(used(q), cores, q.size, q.estimate, t, until=resv[q.id])
        for q in new:           # new jobs: the earliest slot that delays nobody
            resv[q.id] = _earliest(used(q), cores, q.size, q.estimate, t)
        for q in queue:
            if resv[q.id] <= t:
                started.append(q)
        for q in started:
            del resv[q.id]
        return started
    # FCFS, and EASY's first step: the head starts while it fits
    waiting = list(queue)
    while waiting and waiting[0].size <= free:
        head = waiting.pop(0)
        started.append(head)
        free -= head.size
    if policy == "fcfs" or len(waiting) < 2:
        return started
    head = waiting[0]
    # shadow time: when enough cores would be free for the head, by expected ends
    ends = sorted((max(t, s + j.estimate), j.size) for j, s in running)
    ends += sorted((t + j.estimate, j.size) for j in started)
    ends.sort()
    avail, shadow = free, None
    for end, size in ends:
        avail += size
        if avail >= head.size:
            shadow = end
            break
    # extra: every core free at the shadow time beyond what the head needs
    extra = free + sum(size for end, size in ends if end <= shadow) - head.size
    candidates = waiting[1:]
    if policy == "easy-sjbf":
        candidates = sorted(candidates, key=lambda j: j.estimate)    # stable: ties by arrival
    for j in candidates:
        if j.size > free:
            continue
        ends_by_shadow = t + j.estimate <= shadow
        if ends_by_shadow or j.size <= extra:
            started.append(j)
            free -= j.size
            if not ends_by_shadow:
                extra -= j.size
    return started
