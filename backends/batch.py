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
    """Common state: free cores, the wait queue (priority order), running jobs."""

    name = "?"

    def __init__(self, cores: int):
        if cores <= 0:
            raise ReselError(f"a site needs at least one core, got {cores}")
        self.cores = cores
        self.free = cores
        self.queue: list[QJob] = []
        self.running: dict[int, QJob] = {}

    # ---- the driver's interface
    def submit(self, job: QJob, now: float) -> list[QJob]:
        if job.size > self.cores:
            raise ReselError(f"job {job.id} asks for {job.size} cores; the site has {self.cores}")
        self.queue.append(job)
        return self.schedule(now)

    def finish(self, job: QJob, now: float) -> list[QJob]:
        del self.running[job.id]
        self.free += job.size
        job.end = now
        self._released(job, now)
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

    def cancel(self, job: QJob, now: float) -> list[QJob]:
        """Withdraw a waiting job (reallocation); the others may start earlier."""
        self.queue.remove(job)
        self._withdrawn(job, now)
        return self.schedule(now)

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
        """Start what the policy allows at ``now``; return the started jobs."""

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

    A later job may start now if it fits now and either ends before the head's reservation
    (the *shadow* time) or uses only cores the head will not need then (the *extra* cores).
    ``order="sjbf"`` tries backfill candidates shortest estimate first instead of by arrival.
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
        """When the head can start (shadow) and the cores left over for it then (extra)."""
        avail = self.free
        shadow = now
        for end, _, size in self._ends:
            if avail >= head.size:
                break
            avail += size
            shadow = max(now, end)
        return shadow, avail - head.size

    def schedule(self, now: float) -> list[QJob]:
        queue = self.queue
        started = self._start_heads(now) if queue and queue[0].size <= self.free else []
        if len(queue) < 2 or self.free == 0:
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
            if free == 0:
                break
        if chosen:
            ids = {id(j) for j in chosen}
            self.queue = [j for j in queue if id(j) not in ids]
            started.extend(chosen)
        return started



class Conservative(Policy):
    """Conservative backfilling: every queued job holds a reservation, none is ever delayed.

    A new job is reserved at the earliest time the availability profile allows without
    moving any existing reservation. When a job ends before its estimate, each queued job in
    priority order is moved to the earliest slot not later than its current one.
    """

    name = "conservative"

    def __init__(self, cores: int):
        super().__init__(cores)
        self.profile = _Profile(cores)

    def submit(self, job: QJob, now: float) -> list[QJob]:
        if job.size > self.cores:
            raise ReselError(f"job {job.id} asks for {job.size} cores; the site has {self.cores}")
        self.profile.prune(now)
        job.resv = self.profile.earliest(job.size, job.estimate, now)
        self.profile.reserve(job.resv, job.resv + job.estimate, job.size)
        self.queue.append(job)
        return self.schedule(now)

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
        if job.size > self.cores:
            raise ReselError(f"job {job.id} asks for {job.size} cores; the site has {self.cores}")
        self.profile.prune(now)
        if at < now or self.profile.earliest(job.size, job.estimate, at) != at:
            raise ReselError(f"job {job.id}: no room for {job.size} cores at its reservation {at}")
        job.resv = at
        self.profile.reserve(at, at + job.estimate, job.size)
        self.queue.append(job)
        return self.schedule(now)

    def _released(self, job: QJob, now: float) -> None:
        planned_end = job.resv + job.estimate     # what the profile holds for it
        if now < planned_end:
            self.profile.release(now, planned_end, job.size)
            self._compress(now)

    def _withdrawn(self, job: QJob, now: float) -> None:
        self.profile.release(job.resv, job.resv + job.estimate, job.size)
        self._compress(now)

    def _cleared(self, now: float) -> None:
        """Only the running jobs' planned ends remain in the profile."""
        profile = _Profile(self.cores, now)
        for job in self.running.values():
            profile.reserve(now, max(now, job.resv + job.estimate), job.size)
        self.profile = profile

    def _compress(self, now: float) -> None:
        profile = self.profile
        profile.prune(now)
        for job in self.queue:
            # A cheap necessary condition first, on the profile as it is (see could_move).
            if job.resv <= now or not profile.could_move(job.size, job.estimate, now, job.resv):
                continue
            profile.release(job.resv, job.resv + job.estimate, job.size)
            start = profile.earliest(job.size, job.estimate, now, until=job.resv)
            job.resv = start
            profile.reserve(start, start + job.estimate, job.size)

    def schedule(self, now: float) -> list[QJob]:
        started = [job for job in self.queue if job.resv <= now]
        if started:
            for job in started:
                self._start(job, now)
            self.queue = [job for job in self.queue if job.resv > now]
        return started

    def wakeup(self) -> float | None:
        return min((j.resv for j in self.queue), default=None)

    def planned_start(self, job: QJob, now: float) -> float:
        return job.resv

    def estimate_start(self, size: int, estimate: float, now: float) -> float:
        self.profile.prune(now)
        return self.profile.earliest(size, estimate, now)


class _Profile:
    """Free cores over time as a step function: ``free[i]`` holds on ``[ts[i], ts[i+1])``.

    The last step runs to infinity. Reservations subtract cores over an interval; releases
    add them back. Every operation is a bisect plus a scan over the steps it touches.
    """

    __slots__ = ("ts", "fr", "cores")

    def __init__(self, cores: int, start: float = -INF):   # simulated time may start below 0 (warm-up)
        self.cores = cores
        self.ts: list[float] = [start]
        self.fr: list[int] = [cores]

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

    def _split(self, t: float) -> int:
        """Index of the step starting exactly at t, inserting a breakpoint if needed."""
        ts = self.ts
        i = bisect.bisect_right(ts, t) - 1
        if i < 0:
            ts.insert(0, t)
            self.fr.insert(0, self.cores)
            return 0
        if ts[i] == t:
            return i
        ts.insert(i + 1, t)
        self.fr.insert(i + 1, self.fr[i])
        return i + 1

    def reserve(self, start: float, end: float, size: int) -> None:
        self._add(start, end, -size)

    def release(self, start: float, end: float, size: int) -> None:
        self._add(start, end, size)

    def _add(self, start: float, end: float, delta: int) -> None:
        if end <= start:
            return
        i, j = self._split(start), self._split(end)
        fr = self.fr
        for k in range(i, j):
            fr[k] += delta
        # steps inside [i, j) moved together, so only the two edges can now equal a neighbour
        ts = self.ts
        if j < len(ts) and fr[j] == fr[j - 1]:
            del ts[j], fr[j]
        if i > 0 and fr[i] == fr[i - 1]:
            del ts[i], fr[i]

    def could_move(self, size: int, duration: float, now: float, resv: float) -> bool:
        """Whether a job reserved at ``resv`` might start earlier (a necessary condition).

        Before ``resv`` the job holds no cores, so an earlier start s needs ``size`` free
        cores on all of [s, min(resv, s + duration)): either a whole window of ``duration``
        before resv, or a run of free steps reaching up to resv (the window then continues
        on the job's own cores). Neither: the job cannot move, and the profile is untouched.
        """
        ts, fr = self.ts, self.fr
        n = len(ts)
        k = max(0, bisect.bisect_right(ts, now) - 1)
        run_start = None
        while k < n and ts[k] < resv:
            if fr[k] >= size:
                if run_start is None:
                    run_start = max(now, ts[k])
                end = ts[k + 1] if k + 1 < n else INF
                if min(end, resv) - run_start >= duration or end >= resv:
                    return True
            else:
                run_start = None
            k += 1
        return False

    def prune(self, now: float) -> None:
        """Forget steps that ended before ``now``."""
        ts = self.ts
        i = bisect.bisect_right(ts, now) - 1
        if i > 0:
            del ts[:i], self.fr[:i]

    def earliest(self, size: int, duration: float, t0: float, until: float = INF) -> float:
        """The earliest start >= t0 at which ``size`` cores are free for ``duration``.

        ``until`` bounds the search (the caller knows a slot there is feasible).
        """
        ts, fr = self.ts, self.fr
        n = len(ts)
        i = max(0, bisect.bisect_right(ts, t0) - 1)
        start = max(t0, ts[i])
        k = i
        while True:
            if fr[k] < size:
                k += 1
                if k >= n:             # cannot happen: the last step has every core back
                    raise ReselError(f"no slot for {size} cores in the profile")
                start = ts[k]
                if start >= until:
                    return until
                continue
            nxt = ts[k + 1] if k + 1 < n else INF
            if nxt >= start + duration:
                return start
            k += 1


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
