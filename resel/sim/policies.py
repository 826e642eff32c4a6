"""Batch queue policies of a simulated site: FCFS, EASY (FCFS or SJBF backfill order) and
conservative backfilling — the schedulers real sites run (notes/seed-000-002 §4).

A policy owns one site's queue and cores. The driver tells it what happened —
:meth:`Policy.submit`, :meth:`Policy.finish`, :meth:`Policy.cancel` — and it answers with the
jobs that start *now*; the driver schedules their ends. Policies never look at a job's actual
run time, only at its estimate (the requested walltime), exactly as a real scheduler.
:meth:`Policy.estimate_start` answers "when would a job of this shape start?" from the same
state — the simulated twin of Slurm's ``sbatch --test-only``.

Rigid jobs, space sharing, run to completion; cores are one pool (no node topology).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from bisect import bisect_left as _bisect_left, bisect_right as _bisect_right
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from resel.errors import ReselError

INF = math.inf


@dataclass(slots=True, eq=False)
class QJob:
    """A job as a site's scheduler sees it (plus what the simulator knows: ``run``)."""

    id: int
    size: int            # cores
    estimate: float      # requested walltime, scaled by the site's speed
    run: float           # actual run time on this site (the scheduler never reads it)
    submit: float
    start: float = -1.0
    end: float = -1.0
    killed: bool = False
    ref: Any = None      # the trace Job, or a pilot
    resv: float = -1.0   # conservative: reserved start


def run_and_estimate(job: Any, speed: float = 1.0, *, kill: bool = False,
                     exact: bool = False) -> tuple[float, float, bool]:
    """A trace job's (run, estimate, killed) on a site ``speed`` times faster.

    The estimate is the requested time (SWF field 9), or the run where none was requested.
    A job that ran longer than it asked for is killed at its request (``kill``) or, by
    default, gets a request equal to its run — its original site let it run. ``exact``
    gives the scheduler the true run time instead.
    """
    run = job.run / speed
    if exact:
        return run, run, False
    estimate = (job.req_time if job.req_time > 0 else job.run) / speed
    if run <= estimate:
        return run, estimate, False
    return (estimate, estimate, True) if kill else (run, run, False)


class Policy(ABC):
    """Common state: free cores, the wait queue (priority order), running jobs.

    **One instant, one pass.** The driver first tells the policy everything that happened at
    an instant — :meth:`release` (a job ended), :meth:`withdraw` (a queued job left),
    :meth:`enqueue` (a job arrived), in that order — and then calls :meth:`schedule` once:
    the pass sees every core freed at that instant, as the textbook policies assume
    (:class:`resel.sim.queue.BatchQueue` drives it so). :meth:`submit`, :meth:`finish` and
    :meth:`cancel` are a change and its pass at once, for a change alone at its instant.
    """

    name = "?"

    def __init__(self, cores: int):
        if cores <= 0:
            raise ReselError(f"a site needs at least one core, got {cores}")
        self.cores = cores
        self.free = cores
        self.queue: list[QJob] = []
        self.running: dict[int, QJob] = {}

    # ---- the changes of one instant (no scheduling)
    def enqueue(self, job: QJob, now: float) -> None:
        """A job arrives; it is considered at the next :meth:`schedule`."""
        if job.size > self.cores:
            raise ReselError(f"job {job.id} asks for {job.size} cores; the site has {self.cores}")
        self.queue.append(job)

    def release(self, job: QJob, now: float) -> None:
        """A running job ended (or was stopped): its cores are free."""
        del self.running[job.id]
        self.free += job.size
        job.end = now
        self._released(job, now)

    def withdraw(self, job: QJob, now: float) -> None:
        """A waiting job leaves the queue (reallocation, a cancelled pilot)."""
        self.queue.remove(job)
        self._withdrawn(job, now)

    # ---- a change and its pass at once
    def submit(self, job: QJob, now: float) -> list[QJob]:
        self.enqueue(job, now)
        return self.schedule(now)

    def finish(self, job: QJob, now: float) -> list[QJob]:
        self.release(job, now)
        return self.schedule(now)

    def cancel(self, job: QJob, now: float) -> list[QJob]:
        """Withdraw a waiting job (reallocation); the others may start earlier."""
        self.withdraw(job, now)
        return self.schedule(now)

    def place_running(self, job: QJob) -> None:
        """Take over a job that has run since ``job.start`` (before this policy existed).

        A twin rebuilds a site's scheduler from a snapshot of its queue: the running jobs are
        placed first, then the pending ones submitted in priority order. Nothing is scheduled
        here — the caller submits next, which schedules.
        """
        if job.size > self.cores:
            raise ReselError(f"job {job.id} asks for {job.size} cores; the site has {self.cores}")
        self._start(job, job.start)

    def cancel_all(self, now: float) -> list[QJob]:
        """Withdraw every waiting job at once (all-cancellation); returns them in queue order."""
        withdrawn, self.queue = self.queue, []
        self._cleared(now)
        return withdrawn

    def _cleared(self, now: float) -> None:
        pass

    def wakeup(self) -> float | None:
        """A future time at which this policy wants :meth:`schedule` called (None: none)."""
        return None

    #: whether :meth:`wakeup` can ever answer (FCFS and EASY never ask to be woken)
    wakes = False

    def estimate_start(self, size: int, estimate: float, now: float) -> float:
        """When a job of this shape submitted now would start, given the current state.

        The queue is laid on the availability profile in order, then the new job at its tail:
        exact for FCFS; for EASY an upper bound (EASY may backfill the job earlier).
        """
        profile, t = self._lay_queue(now)
        return profile.earliest(size, estimate, t)

    def planned_start(self, job: QJob, now: float) -> float:
        """When a *queued* job is expected to start: the queue ahead of it placed in order
        on the availability profile (conservative policies answer from their reservation)."""
        start = self._lay_queue(now, until=job)[1]
        if start is None:
            raise ReselError(f"job {job.id} is not queued here")
        return start

    def _lay_queue(self, now: float, until: QJob | None = None) -> tuple["_Profile", float | None]:
        """The running jobs and the queue reserved in order on a fresh profile.

        Returns the profile and the earliest time the next job may start (FCFS: not before the
        last queued one; otherwise now). With ``until``, stops at that job and returns its
        start instead (None if it is not queued).
        """
        profile = _Profile.of_running(self.cores, self.running.values(), now)
        t = now
        for other in self.queue:
            start = profile.earliest(other.size, other.estimate, t)
            if other is until:
                return profile, start
            profile.reserve(start, start + other.estimate, other.size)
            if self._ordered:
                t = start
        return profile, (None if until is not None else t)

    #: True where nobody overtakes (FCFS): a queued job starts no earlier than the one before
    _ordered = False

    # ---- hooks
    @abstractmethod
    def schedule(self, now: float) -> list[QJob]:
        """One scheduling pass: start what the policy allows at ``now``; return the started jobs."""

    def _released(self, job: QJob, now: float) -> None:
        pass

    def _withdrawn(self, job: QJob, now: float) -> None:
        pass

    def _start(self, job: QJob, now: float) -> None:
        job.start = now
        self.free -= job.size
        self.running[job.id] = job

    def _start_heads(self, now: float) -> list[QJob]:
        """Start the head of the queue while it fits (FCFS, and EASY's first step)."""
        started: list[QJob] = []
        queue = self.queue
        if not queue or queue[0].size > self.free:      # the common case: nothing starts
            return started
        start = self._start
        while queue and queue[0].size <= self.free:
            job = queue.pop(0)
            start(job, now)
            started.append(job)
        return started


class FCFS(Policy):
    """First come, first served: start the head while it fits; nobody overtakes."""

    name = "fcfs"
    _ordered = True

    #: FCFS only starts heads (the same function, one call less per event)
    schedule = Policy._start_heads


class EASY(Policy):
    """EASY backfilling (Mu'alem & Feitelson): only the head job holds a reservation.

    A later job may start now if it fits now and either ends by the head's reservation (the
    *shadow* time) or uses only cores the head will not need then (the *extra* cores: every
    core free at the shadow time — the free ones and those of every running job expected to
    end by then — beyond the head's). ``order="sjbf"`` tries backfill candidates shortest
    estimate first instead of by arrival.
    """

    def __init__(self, cores: int, order: str = "fcfs"):
        super().__init__(cores)
        if order not in ("fcfs", "sjbf"):
            raise ReselError(f"EASY backfill order must be fcfs or sjbf, not {order!r}")
        self.order = order
        self.name = "easy" if order == "fcfs" else "easy-sjbf"
        self._ends: list[tuple[float, int, int]] = []   # (start + estimate, id, size), sorted

    def _start(self, job: QJob, now: float) -> None:
        job.start = now                     # Policy._start, inline
        self.free -= job.size
        self.running[job.id] = job
        bisect.insort(self._ends, (now + job.estimate, job.id, job.size))

    def _released(self, job: QJob, now: float) -> None:
        key = (job.start + job.estimate, job.id, job.size)
        i = bisect.bisect_left(self._ends, key)
        del self._ends[i]

    def _shadow(self, head: QJob, now: float) -> tuple[float, int]:
        """When the head can start (shadow) and the cores left over for it then (extra).

        Running jobs are walked by expected end until enough cores would be free; the shadow
        time is that end (now, for jobs past their estimate). *Every* job expected to end by
        the shadow time frees its cores for it, not only those walked: jobs ending together
        all count (docs/batch.md).
        """
        ends = self._ends
        avail = self.free
        need = head.size
        i, n = 0, len(ends)
        end = now
        while avail < need and i < n:
            end, _, size = ends[i]
            avail += size
            i += 1
        shadow = end if end > now else now
        while i < n and ends[i][0] <= shadow:
            avail += ends[i][2]
            i += 1
        return shadow, avail - need

    def schedule(self, now: float) -> list[QJob]:
        queue = self.queue
        started = self._start_heads(now) if queue and queue[0].size <= self.free else []
        queue = self.queue
        if len(queue) < 2 or self.free <= 0:
            return started
        head = queue[0]
        shadow, extra = self._shadow(head, now)
        if self.order == "sjbf":
            candidates = sorted(queue[1:], key=lambda j: (j.estimate, j.submit, j.id))
        else:
            candidates = itertools.islice(queue, 1, None)   # queue is not changed in the loop
        chosen = []
        start = self._start
        free = self.free
        for job in candidates:
            size = job.size
            if size > free:
                continue
            if now + job.estimate <= shadow:
                pass
            elif size <= extra:
                extra -= size
            else:
                continue
            start(job, now)
            free = self.free
            chosen.append(job)
            if free <= 0:
                break
        if chosen:
            ids = {id(j) for j in chosen}
            self.queue = [j for j in queue if id(j) not in ids]
            started.extend(chosen)
        return started


#: a conservative job's reservation before its first pass
UNPLANNED = INF

_resv = operator.attrgetter("resv")


class Conservative(Policy):
    """Conservative backfilling: every queued job holds a reservation, none is ever delayed.

    A new job is reserved at the earliest time the availability profile allows without
    moving any existing reservation. When jobs end before their estimates (or queued jobs
    leave), the queue is compressed once at that instant: each queued job in priority order
    is moved to the earliest slot not later than its current one. Jobs arriving at the same
    instant are reserved after that compression, in arrival order (they come last in
    priority).
    """

    name = "conservative"
    wakes = True

    def __init__(self, cores: int):
        super().__init__(cores)
        self.profile = _Profile(cores)
        self._new: list[QJob] = []     # arrived this instant, not reserved yet
        self._freed = False            # cores came back before their planned end this instant
        # the earliest reservation in the queue (INF: none; None: unknown, to be scanned for),
        # kept as reservations move earlier and jobs join, so that a pass where nothing is
        # due and wakeup need no scan of the queue
        self._first: float | None = INF

    def enqueue(self, job: QJob, now: float) -> None:
        super().enqueue(job, now)
        job.resv = UNPLANNED                      # (cannot lower the earliest reservation)
        self._new.append(job)

    def place_running(self, job: QJob) -> None:
        super().place_running(job)
        job.resv = job.start                      # a running job's reservation is its run
        self.profile.reserve(job.start, job.start + job.estimate, job.size)

    def submit_reserved(self, job: QJob, at: float, now: float) -> list[QJob]:
        """Queue a job at the reservation the scheduler already gave it.

        Conservative reservations depend on history (a job keeps a slot found when the queue
        was different, and compression moves jobs only in priority order), so re-laying the
        queue from scratch may not reproduce them; a twin that knows them uses them. Raises if
        the slot is not free in the profile as it stands.
        """
        self.enqueue_reserved(job, at, now)
        return self.schedule(now)

    def enqueue_reserved(self, job: QJob, at: float, now: float) -> None:
        """:meth:`submit_reserved` without the pass (a change of the instant)."""
        if job.size > self.cores:
            raise ReselError(f"job {job.id} asks for {job.size} cores; the site has {self.cores}")
        self.plan(now)
        if at < now or self.profile.earliest(job.size, job.estimate, at) != at:
            raise ReselError(f"job {job.id}: no room for {job.size} cores at its reservation {at}")
        job.resv = at
        self.profile.reserve(at, at + job.estimate, job.size)
        self.queue.append(job)
        if self._first is not None and at < self._first:
            self._first = at

    def _released(self, job: QJob, now: float) -> None:
        planned_end = job.resv + job.estimate     # what the profile holds for it
        if now < planned_end:
            self.profile.release(now, planned_end, job.size)
            self._freed = True

    def _withdrawn(self, job: QJob, now: float) -> None:
        if job.resv == self._first:
            self._first = None
        if job.resv == UNPLANNED:
            self._new.remove(job)
            return
        self.profile.release(job.resv, job.resv + job.estimate, job.size)
        self._freed = True

    def _cleared(self, now: float) -> None:
        """Only the running jobs' planned ends remain in the profile."""
        profile = _Profile(self.cores, now)
        for job in self.running.values():
            profile.reserve(now, max(now, job.resv + job.estimate), job.size)
        self.profile = profile
        self._new.clear()
        self._freed = False
        self._first = INF

    def plan(self, now: float) -> None:
        """Bring this instant's changes into the reservations: one compression if cores came
        back early (or a queued job left), then the new jobs reserved in arrival order.
        Idempotent at one instant; :meth:`schedule` and the estimates call it first."""
        profile = self.profile
        ts = profile.ts
        if len(ts) > 1 and ts[1] <= now:         # profile.prune(now), the common case first
            profile.prune(now)
        if self._freed:
            self._freed = False
            self._compress(now)
        if self._new:
            take = profile.take_earliest
            first = self._first
            for job in self._new:
                job.resv = start = take(job.size, job.estimate, now)
                if first is not None and start < first:
                    first = start
            self._first = first
            self._new.clear()

    # Longer than 80 lines (tests/test_function_size.py lists it): conservative backfilling's
    # inner loop, its cases written inline as the replay kernels are. With the walk past step 1
    # a helper of its own (in a copy; the same waits), a whole conservative replay took 1.01x the
    # CPU time on hpc2n.swf and 1.05x on wagap-2013.swf, where the same code against itself took
    # 1.01x and 1.01x (medians of 41 paired runs, interleaved, the order alternating, load average
    # 4-8 on 2 cores, 2026-11-29; a run of 21: 1.03x and 1.12x against 1.00x and 1.07x): on wagap
    # a cost within this load's noise but in both runs, so it stays inline.
    def _compress(self, now: float) -> None:
        """Move each queued job, in priority order, to the earliest slot no later than its own.

        Most queued jobs wait for the profile's next breakpoint (their reservation is at or
        before ``ts[1]``; the profile is pruned, so step 0 holds ``now``): such a job can move
        exactly when step 0 has room for it, and then moves to ``now`` — one comparison, no
        scan. A job reserved within the second step has three cases, decided on the two
        steps' free cores; the others walk the profile as :meth:`_Profile.earlier` does,
        which finds the new start on the profile as it is (no release first). A move then
        changes only the parts of the old and new intervals that do not overlap. The free
        cores and times of the first steps are read again after each move.
        """
        profile = self.profile
        add = profile._add
        ts, dl = profile.ts, profile.dl          # changed in place by the profile's methods
        first = self._first                      # reservations only move earlier here
        # the profile's first steps: [now, t1) with free0 cores, [t1, t2) with free1
        n = len(ts)
        free0, t1 = dl[0], (ts[1] if n > 1 else INF)
        free1, t2 = (free0 + dl[1], ts[2] if n > 2 else INF) if n > 1 else (free0, INF)
        for job in self.queue:
            resv = job.resv
            if resv <= t1:                       # only step 0 lies before resv
                # (resv <= now: due to start in this pass, nowhere earlier to go; t1 is
                # infinite when the profile is one step, and new jobs wait for the pass)
                if resv <= now or free0 < job.size or resv == UNPLANNED:
                    continue
                start = now
            elif resv == UNPLANNED:              # new jobs are reserved after the compression
                continue
            elif resv <= t2:                     # steps 0 and 1 lie before resv
                size = job.size
                if free1 < size:                 # only a window inside step 0
                    if free0 < size or now + job.estimate > t1:
                        continue
                    start = now
                elif free0 >= size:              # a run from now reaching resv
                    start = now
                else:
                    start = t1
            else:
                # profile.earlier(size, job.estimate, now, resv), written out: steps 0 and 1
                # from what is known of them, then a walk from step 2 (resv > t2: it exists)
                size = job.size
                duration = job.estimate
                if free0 >= size and now + duration <= t1:
                    start = now                  # the window fits in step 0
                else:
                    if free1 >= size:            # a run through step 1 ...
                        start = now if free0 >= size else t1
                        walk = start + duration > t2    # ... that must go on
                    else:
                        start = None
                        walk = True
                    if walk:
                        k, free = 2, free1
                        while k < n and ts[k] < resv:
                            free += dl[k]
                            if free >= size:
                                if start is None:
                                    start = ts[k]
                                end = ts[k + 1] if k + 1 < n else INF
                                if end >= resv or start + duration <= end:
                                    break
                            else:
                                start = None
                            k += 1
                        else:
                            continue
            job.resv = start
            if first is not None and start < first:
                first = start
            # the move: [start, start + duration) taken, [resv, resv + duration) given back
            duration = job.estimate
            size = job.size
            if start + duration <= resv:
                add(start, start + duration, -size)
                add(resv, resv + duration, size)
            else:
                add(start, resv, -size)
                add(start + duration, resv + duration, size)
            n = len(ts)
            free0, t1 = dl[0], (ts[1] if n > 1 else INF)
            free1, t2 = (free0 + dl[1], ts[2] if n > 2 else INF) if n > 1 else (free0, INF)
        self._first = first

    def schedule(self, now: float) -> list[QJob]:
        self.plan(now)
        first = self._first
        if first is None:
            first = self._first = min(map(_resv, self.queue), default=INF)
        if first > now:                       # the common case: nothing starts
            return []
        queue = self.queue
        started = [job for job in queue if job.resv <= now]
        for job in started:
            queue.remove(job)                 # (a search at C speed; few start at once)
            self._start(job, now)
        self._first = min(map(_resv, queue), default=INF)
        return started

    def wakeup(self) -> float | None:
        if not self.queue:
            return None
        first = self._first
        if first is None:
            first = self._first = min(map(_resv, self.queue), default=INF)
        return first

    def planned_start(self, job: QJob, now: float) -> float:
        self.plan(now)
        return job.resv

    def estimate_start(self, size: int, estimate: float, now: float) -> float:
        self.plan(now)
        return self.profile.earliest(size, estimate, now)


class _Profile:
    """Free cores over time as a step function, stored as its changes: at ``ts[i]`` the free
    cores change by ``dl[i]``; ``dl[0]`` is the free cores of the first step, so step k
    (``[ts[k], ts[k+1])``, the last one to infinity) has ``sum(dl[:k+1])``.

    Why changes and not values: a reservation or a release is then two entries whatever its
    length (a bisect and an insert at each end), where a list of values had every step in
    between rewritten — and new jobs' windows and early ends' released intervals span tens
    of steps. Searches walk forward from a known step adding changes as they go (the ones
    that look at a whole window sum it at C speed with ``itertools.accumulate``). No entry
    is zero after the first (a breakpoint where nothing changes is removed), so the
    representation of a profile is unique.
    """

    __slots__ = ("ts", "dl", "cores")

    def __init__(self, cores: int, start: float = -INF):   # simulated time may start below 0 (warm-up)
        self.cores = cores
        self.ts: list[float] = [start]
        self.dl: list[int] = [cores]

    @classmethod
    def of_running(cls, cores: int, running, now: float) -> "_Profile":
        profile = cls(cores, now)
        for job in running:
            end = max(now, job.start + job.estimate)
            if end > now:
                profile.reserve(now, end, job.size)
            else:                      # past its estimate: assume it ends any moment
                profile.reserve(now, now + 1e-9, job.size)
        return profile

    def free(self) -> list[tuple[float, int]]:
        """The steps as (start, free cores) — for tests and debugging."""
        return list(zip(self.ts, itertools.accumulate(self.dl)))

    def reserve(self, start: float, end: float, size: int) -> None:
        self._add(start, end, -size)

    def release(self, start: float, end: float, size: int) -> None:
        self._add(start, end, size)

    def _add(self, start: float, end: float, delta: int) -> None:
        """Add ``delta`` cores on [start, end): ``+delta`` at start, ``-delta`` at end, each
        by a bisect and an insert (or an update of an existing breakpoint, removed if its
        change becomes zero). The hottest code of conservative backfilling."""
        if end <= start:
            return
        ts, dl = self.ts, self.dl
        i = _bisect_right(ts, start) - 1
        if i < 0:                         # before the profile's first step: every core free
            ts.insert(0, start)
            dl.insert(0, self.cores + delta)
            dl[1] -= self.cores           # the old first step keeps its free cores
            if dl[1] == 0:
                del ts[1], dl[1]
            i = -1                        # (nothing to check at start)
        elif ts[i] == start:
            dl[i] += delta
        else:
            i += 1
            ts.insert(i, start)
            dl.insert(i, delta)
            i = -1                        # a new nonzero change
        j = _bisect_right(ts, end, i if i > 0 else 0) - 1
        if ts[j] == end:
            dl[j] -= delta
            if dl[j] == 0:
                del ts[j], dl[j]
        else:
            ts.insert(j + 1, end)
            dl.insert(j + 1, -delta)
        if i > 0 and dl[i] == 0:          # (j > i: removing j first left i in place)
            del ts[i], dl[i]

    def earlier(self, size: int, duration: float, now: float, resv: float) -> float | None:
        """The earliest start in [now, resv) for a job of ``size`` cores reserved at ``resv``,
        or None if it cannot start before its reservation.

        Before ``resv`` the job holds no cores, so a start s needs ``size`` free cores on
        [s, min(resv, s + duration)) of the profile as it is: the window continues on the
        job's own cores from resv on. So a run of steps with room either holds the whole
        window or reaches resv; the first run that does gives the start (its first instant).
        This is what :meth:`earliest` would find on the profile without the job — the
        arithmetic is the same (``start + duration`` against the breakpoints) — without
        releasing the job first. (:meth:`Conservative._compress` has it written out.)
        """
        if resv <= now:
            return None
        ts, dl = self.ts, self.dl
        n = len(ts)
        k = max(0, _bisect_right(ts, now) - 1)
        free = sum(dl[:k])
        run_start = None
        while k < n and ts[k] < resv:
            free += dl[k]
            if free >= size:
                if run_start is None:
                    run_start = max(now, ts[k])
                end = ts[k + 1] if k + 1 < n else INF
                if end >= resv or run_start + duration <= end:
                    return run_start
            else:
                run_start = None
            k += 1
        return None

    def prune(self, now: float) -> None:
        """Forget steps that ended before ``now`` (their changes fold into the first)."""
        ts = self.ts
        i = _bisect_right(ts, now) - 1
        if i > 0:
            dl = self.dl
            first = sum(dl[:i + 1])
            del ts[:i], dl[:i]
            dl[0] = first

    def take_earliest(self, size: int, duration: float, t0: float) -> float:
        """Reserve ``size`` cores for ``duration`` at the earliest start >= t0 (as
        :meth:`earliest` then :meth:`reserve`, with the two breakpoints the search found)."""
        start, k, j = self._search(size, duration, t0, INF)
        if duration <= 0:
            return start
        ts, dl = self.ts, self.dl
        # the end first (j > k: removing or inserting there leaves index k in place)
        end = start + duration
        if j < len(ts) and ts[j] == end:
            dl[j] += size
            if dl[j] == 0:
                del ts[j], dl[j]
        else:
            ts.insert(j, end)
            dl.insert(j, size)
        if ts[k] == start:
            dl[k] -= size
            if k and dl[k] == 0:
                del ts[k], dl[k]
        else:                             # a start inside step k (t0 itself)
            ts.insert(k + 1, start)
            dl.insert(k + 1, -size)
        return start

    def earliest(self, size: int, duration: float, t0: float, until: float = INF) -> float:
        """The earliest start >= t0 at which ``size`` cores are free for ``duration``.

        ``until`` bounds the search (the caller knows a slot there is feasible). A candidate
        start's window is checked at once (its free cores summed and ``min``-ed at C speed);
        when it fails, the search resumes after the window's last step without room (any
        start before it would hold that step too).
        """
        return self._search(size, duration, t0, until)[0]

    def _search(self, size: int, duration: float, t0: float, until: float) -> tuple[float, int, int]:
        """:meth:`earliest`'s answer with the step k it starts in and the first step j at or
        after its end (``ts[j - 1] < start + duration <= ts[j]``; j = len(ts) if none)."""
        ts, dl = self.ts, self.dl
        n = len(ts)
        if ts[0] <= t0 and (n == 1 or t0 < ts[1]):    # t0 in the first step (a pruned profile)
            k, free = 0, dl[0]
        else:
            k = max(0, _bisect_right(ts, t0) - 1)
            free = sum(dl[:k + 1])        # step k's free cores
        start = max(t0, ts[k])
        while True:
            if free < size:
                k += 1
                while k < n:
                    free += dl[k]
                    if free >= size:
                        break
                    k += 1
                else:                  # cannot happen: the last step has every core back
                    raise ReselError(f"no slot for {size} cores in the profile")
                start = ts[k]
                if start >= until:
                    return until, k, k
            j = _bisect_left(ts, start + duration, k + 1)   # steps k..j-1 meet the window
            if j == k + 1:
                return start, k, j
            if min(itertools.accumulate(dl[k + 1:j], initial=free)) >= size:   # free at k..j-1
                return start, k, j
            window = list(itertools.accumulate(dl[k + 1:j], initial=free))
            m = j - 1 - k
            while window[m] >= size:
                m -= 1
            k += m
            free = window[m]


POLICIES = {
    "fcfs": lambda cores: FCFS(cores),
    "easy": lambda cores: EASY(cores, "fcfs"),
    "easy-sjbf": lambda cores: EASY(cores, "sjbf"),
    "conservative": lambda cores: Conservative(cores),
}


def make_policy(name: str, cores: int) -> Policy:
    """A fresh policy by name: fcfs, easy, easy-sjbf or conservative."""
    try:
        return POLICIES[name](cores)
    except KeyError:
        raise ReselError(f"unknown policy {name!r}; one of {', '.join(POLICIES)}") from None
