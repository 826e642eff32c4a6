"""One site's batch queue on the event core: a policy, its jobs' ends and its passes.

:class:`BatchQueue` is the one place where a batch policy (:mod:`resel.sim.policies`) meets
the clock. Everything that happens to the queue at an instant — jobs ending
(:data:`~resel.sim.core.JOB_END`), pilots stopped by their owner, jobs arriving
(:data:`~resel.sim.core.ARRIVE`), queued jobs withdrawn — only changes the policy's state; the
queue then asks the environment for *one* scheduling pass at that instant
(:data:`~resel.sim.core.SCHEDULE`, after every end and arrival of the instant). The jobs a pass
starts get their end scheduled at ``start + run`` (unless ``run`` is infinite: a pilot, which
its owner ends), and a policy that keeps reservations (conservative) gets a pass at its next
reservation.

The trace replay, the wait-bound evaluation, the twin, the grid and the bag simulator's
trace-driven sites are all a :class:`BatchQueue` (or several on one environment).
"""

from __future__ import annotations

import copy
import heapq
import math
from typing import Any, Callable, Iterable, Iterator

from resel.sim.policies import Policy, QJob, make_policy
from resel.sim.core import ARRIVE, JOB_END, SCHEDULE, Environment

INF = math.inf

JobHook = Callable[[QJob, float], None]


class ListFeed:
    """Arrivals from a list, made into jobs one at a time (``make(item, number)``, numbers
    from 1). Unlike a generator it can be copied, so a :meth:`BatchQueue.clone` goes on from
    the same arrival while sharing the list (give it in ``shared``)."""

    __slots__ = ("items", "make", "next")

    def __init__(self, items: list, make: Callable[[Any, int], QJob]):
        self.items, self.make, self.next = items, make, 0

    def __iter__(self) -> "ListFeed":
        return self

    def __next__(self) -> QJob:
        if self.next >= len(self.items):
            raise StopIteration
        self.next += 1
        return self.make(self.items[self.next - 1], self.next)


class BatchQueue:
    """A batch policy on an :class:`Environment` (its own, unless one is given to share).

    Args:
        policy: a policy name (:data:`resel.sim.policies.POLICIES`) or a policy object.
        cores: the site's cores (with a policy name).
        env: the environment to run on; several queues (the grid, the bag simulator's sites)
            share one.
        on_start: ``on_start(job, now)`` for every job a pass starts, after the pass.
        on_end: ``on_end(job, now)`` for every job whose end the queue scheduled, when it ends
            (before the policy sees the end).
        shared: objects a :meth:`clone` shares instead of copying (read-only inputs).
    """

    def __init__(self, policy: str | Policy, cores: int | None = None, env: Environment | None = None, *,
                 on_start: JobHook | None = None, on_end: JobHook | None = None, shared: Iterable[Any] = ()):
        if isinstance(policy, str):
            if cores is None:
                raise TypeError("a policy given by name needs the site's cores")
            policy = make_policy(policy, cores)
        self.policy: Policy = policy
        self.env = env if env is not None else Environment()
        self.on_start = on_start
        self.on_end = on_end
        self.shared = tuple(shared)
        self._passes: set[float] = set()      # instants with a pass already scheduled
        self._source: Iterator[QJob] | None = None
        self._closed = False

    # ------------------------------------------------------------------ state
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def cores(self) -> int:
        return self.policy.cores

    @property
    def queue(self) -> list[QJob]:
        """Waiting jobs in priority order."""
        return self.policy.queue

    @property
    def running(self) -> dict[int, QJob]:
        return self.policy.running

    # ------------------------------------------------------------------ what happens
    def submit(self, job: QJob, at: float | None = None) -> None:
        """``job`` arrives at ``at`` (default: now); it is scheduled by that instant's pass."""
        now = self.env.now
        if at is None or at <= now:
            self._arrive(now, job)
        else:
            self.env.schedule(at, ARRIVE, self._arrived, job)

    def feed(self, jobs: Iterable[QJob]) -> None:
        """Jobs arriving at their ``submit`` times, in submit order, pulled one at a time (a
        trace of any length costs one pending arrival)."""
        self._source = iter(jobs)
        self._next_arrival()

    def adopt(self, job: QJob) -> None:
        """Take over a job running since ``job.start`` (a twin built from a snapshot); its end
        is scheduled at ``start + run`` (now, if that has passed)."""
        self.policy.place_running(job)
        if job.run != INF:
            self.env.schedule(max(self.env.now, job.start + job.run), JOB_END, self._end, job)

    def submit_reserved(self, job: QJob, at: float) -> None:
        """Queue ``job`` now at the reservation its scheduler gave it (conservative only; see
        :meth:`Conservative.submit_reserved`). Raises ReselError if the slot is not free."""
        self.policy.enqueue_reserved(job, at, self.env.now)   # type: ignore[attr-defined]
        self._pass_at(self.env.now)

    def close_feed(self) -> None:
        """No more arrivals from :meth:`feed` (the one already scheduled is dropped): what
        happens to the queue as it stands, e.g. a twin's "no new arrivals"."""
        self._source = None
        self._closed = True

    def cancel(self, job: QJob) -> None:
        """Withdraw a waiting job now."""
        self.policy.withdraw(job, self.env.now)
        self._pass_at(self.env.now)

    def stop(self, job: QJob) -> None:
        """End a running job now (a pilot its owner ended or cancelled)."""
        self.policy.release(job, self.env.now)
        self._pass_at(self.env.now)

    def withdraw_all(self) -> list[QJob]:
        """Withdraw every waiting job at once (the grid's all-cancellation); queue order."""
        jobs = self.policy.cancel_all(self.env.now)
        self._pass_at(self.env.now)
        return jobs

    def advance(self, until: float = INF) -> None:
        """Run the environment up to ``until`` (resumable; see :meth:`Environment.run`)."""
        self.env.run(until)

    def run_closed(self, jobs: Iterable[QJob]) -> int:
        """Run a *closed* queue to the end: ``jobs`` (in submit order) are its only arrivals and
        nothing else is scheduled on its environment. Returns the number of instants.

        The same schedule as :meth:`feed` then :meth:`advance` — at each instant every end,
        then every arrival, then one pass — in one loop iteration per instant instead of one
        heap event per arrival, end and pass: the trace replay's fast path (tests check the
        two agree job by job). Hooks are called as by the environment.
        """
        env = self.env
        if len(env) or self._source is not None:
            raise RuntimeError("run_closed needs a queue with nothing scheduled")
        heap: list[tuple[float, int, QJob]] = []      # (end, seq, job)
        push, pop = heapq.heappush, heapq.heappop
        policy = self.policy
        enqueue, release, schedule = policy.enqueue, policy.release, policy.schedule
        wakes, wakeup = policy.wakes, policy.wakeup
        on_start, on_end = self.on_start, self.on_end
        source = iter(jobs)
        nxt = next(source, None)
        wake = INF
        seq = instants = 0
        while True:
            t = heap[0][0] if heap else INF
            if nxt is not None and nxt.submit < t:
                t = nxt.submit
            if wake < t:
                t = wake
            if t == INF:
                break
            env.now = t
            instants += 1
            while heap and heap[0][0] == t:
                job = pop(heap)[2]
                if on_end is not None:
                    on_end(job, t)
                release(job, t)
            while nxt is not None and nxt.submit == t:
                enqueue(nxt, t)
                nxt = next(source, None)
            started = schedule(t)
            for job in started:
                if job.run != INF:
                    seq += 1
                    push(heap, (t + job.run, seq, job))
            if on_start is not None:
                for job in started:
                    on_start(job, t)
            if wakes:
                w = wakeup()
                wake = w if w is not None and w > t else INF
        return instants

    # ------------------------------------------------------------------ estimates
    def estimate_start(self, cores: int, walltime: float) -> float:
        """When a job of that shape submitted now would start (the twin of ``sbatch --test-only``)."""
        return self.policy.estimate_start(cores, walltime, self.env.now)

    def planned_start(self, job: QJob) -> float:
        """When a queued job is expected to start (:meth:`Policy.planned_start`)."""
        return self.policy.planned_start(job, self.env.now)

    def clone(self) -> "BatchQueue":
        """An independent copy: policy, environment, pending events (``shared`` objects and the
        hooks are not copied; a clone that must not report to the hooks clears them)."""
        memo: dict[int, Any] = {id(x): x for x in self.shared}
        for hook in (self.on_start, self.on_end):
            if hook is not None:
                memo[id(hook)] = hook
        return copy.deepcopy(self, memo)   # a feed must be copyable (ListFeed is)

    # ------------------------------------------------------------------ plumbing
    def _next_arrival(self) -> None:
        job = next(self._source, None)  # type: ignore[arg-type]
        if job is None:
            self._source = None
        else:
            self.env.schedule(job.submit, ARRIVE, self._fed, job)

    def _fed(self, now: float, job: QJob) -> None:
        if self._closed:
            return
        self.policy.enqueue(job, now)
        nxt = next(self._source, None)  # type: ignore[arg-type]
        if nxt is None:
            self._source = None
        else:
            self.env.schedule(nxt.submit, ARRIVE, self._fed, nxt)
        self._pass_soon(now)

    def _arrive(self, now: float, job: QJob) -> None:
        self.policy.enqueue(job, now)
        self._pass_at(now)

    def _arrived(self, now: float, job: QJob) -> None:
        self.policy.enqueue(job, now)
        self._pass_soon(now)

    def _end(self, now: float, job: QJob) -> None:
        if self.on_end is not None:
            self.on_end(job, now)
        self.policy.release(job, now)
        self._pass_soon(now)

    def _pass_at(self, at: float) -> None:
        """One pass at ``at``, after every end and arrival of that instant."""
        if at not in self._passes:
            self._passes.add(at)
            self.env.schedule(at, SCHEDULE, self._pass)

    def _pass_soon(self, now: float) -> None:
        """:meth:`_pass_at` now, from the last step of an event's callback: the pass runs at
        once when nothing else is due before it (the same order, one heap event less)."""
        if now in self._passes:
            return
        if self.env.idle_after(now, SCHEDULE):
            self._pass(now)
        else:
            self._passes.add(now)
            self.env.schedule(now, SCHEDULE, self._pass)

    def _pass(self, now: float, _: Any = None) -> None:
        self._passes.discard(now)
        policy = self.policy
        started = policy.schedule(now)
        if started:
            env = self.env
            end = self._end
            for job in started:
                if job.run != INF:
                    env.schedule(now + job.run, JOB_END, end, job)
            if self.on_start is not None:
                for job in started:
                    self.on_start(job, now)
        if policy.wakes:
            wake = policy.wakeup()
            if wake is not None and wake > now and wake not in self._passes:
                self._passes.add(wake)
                self.env.schedule(wake, SCHEDULE, self._pass)
