"""A simulated site that is a real batch queue: other users' jobs from an SWF trace, scheduled
by a batch policy, with resel's pilots in the same queue.

The simulator owns the clock and the event heap; a :class:`QueueSite` only pushes its own
events (background arrivals and ends, scheduler wake-ups) through the ``push`` function it
is given, and reports which of resel's pilots the scheduler started. Background jobs are
streamed from the trace one at a time, so a long trace costs no memory.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

from resel.backends.batch import Conservative, Policy, QJob, make_policy, run_and_estimate
from resel.domain import Site
from resel.models.twin import QueueSnapshot, SnapJob
from resel.swf import Job, in_submit_order, read_swf

#: event kinds the simulator routes to a QueueSite (values shared with backends/simulated.py)
BG_END, BG_ARRIVE, QWAKE = 1, 4, 5


def policy_snapshot(policy: Policy, now: float, site: str) -> QueueSnapshot:
    """A batch policy's state as a live site would show it, for the twin (:mod:`resel.models.twin`).

    Running jobs carry their estimate as time limit and the time since they started; pending
    ones come in the policy's queue order. A conservative policy's reservations are history
    (see :meth:`Conservative.submit_reserved`), so they go along as ``reserved``.
    """
    planned = isinstance(policy, Conservative)

    def user(job: QJob) -> str:
        return "resel" if job.id < 0 else "background"

    running = tuple(SnapJob(j.size, j.estimate, now - j.start, str(j.id), user(j))
                    for j in policy.running.values())
    pending = tuple(SnapJob(j.size, j.estimate, 0.0, str(j.id), user(j), reserved=j.resv if planned else None)
                    for j in policy.queue)
    return QueueSnapshot(site, now, policy.cores, running, pending, policy.name)


class QueueSite:
    """One site's batch queue in a simulation."""

    def __init__(self, index: int, site: Site, push: Callable[[float, int, int, object], None]):
        queue = site.queue
        self.index = index
        self.site = site
        self.policy = make_policy(queue.policy, site.cores)
        self.push = push
        self.offset, self.load, self.speed = queue.offset, queue.load, queue.speed
        self._jobs: Iterator[Job] = in_submit_order(read_swf(queue.trace), queue.trace)
        self._seq = 0
        self._pilots: dict[int, QJob] = {}
        self._wakes: set[float] = set()
        self.background_done = 0
        self.background_skipped = 0
        #: other users' jobs as they started: (submit, start, cores, requested time, id) —
        #: the history a user of this site could have read from sacct
        self.started: list[tuple[float, float, int, float, int]] = []

    # ---------------------------------------------------------------- background load
    def prime(self) -> None:
        """Schedule the first background arrival (at a negative time: warm-up)."""
        self._next_arrival()

    def _next_arrival(self) -> None:
        for job in self._jobs:
            if job.run is None or job.run <= 0 or job.size <= 0 or job.size > self.site.cores:
                self.background_skipped += 1
                continue
            self._seq += 1
            run, estimate, _ = run_and_estimate(job, self.speed)
            at = job.submit / self.load - self.offset
            self.push(at, BG_ARRIVE, self.index, QJob(self._seq, job.size, estimate, run, at, ref=job))
            return

    def on_arrive(self, now: float, job: QJob) -> list[int]:
        self._next_arrival()
        return self._handle(now, self.policy.submit(job, now))

    def on_end(self, now: float, job: QJob) -> list[int]:
        self.background_done += 1
        return self._handle(now, self.policy.finish(job, now))

    def on_wake(self, now: float) -> list[int]:
        self._wakes.discard(now)
        return self._handle(now, self.policy.schedule(now))

    # ---------------------------------------------------------------- resel's pilots
    def submit_pilot(self, pilot: int, cores: int, walltime: float, now: float) -> list[int]:
        job = QJob(-(pilot + 1), cores, walltime, walltime, now, ref=pilot)
        self._pilots[pilot] = job
        return self._handle(now, self.policy.submit(job, now))

    def release_pilot(self, pilot: int, now: float) -> list[int]:
        """The pilot was cancelled (pending: leaves the queue) or ended (running: frees cores)."""
        job = self._pilots.pop(pilot, None)
        if job is None:
            return []
        if job.start < 0:
            return self._handle(now, self.policy.cancel(job, now))
        return self._handle(now, self.policy.finish(job, now))

    def estimate_wait(self, cores: int, walltime: float, now: float) -> float:
        """The scheduler's own answer to "how long would this pilot wait?" (sbatch --test-only)."""
        if cores > self.site.cores:
            return math.inf
        return self.policy.estimate_start(cores, walltime, now) - now

    def snapshot(self, now: float) -> QueueSnapshot:
        """The queue as a live site would show it, for the twin (:func:`policy_snapshot`).
        Take it after every event at ``now`` has been handled."""
        return policy_snapshot(self.policy, now, self.site.name)

    def past_waits(self, now: float) -> list:
        """Waits of other users' jobs known by ``now`` (they started), in the order they
        became known, as :class:`~resel.models.history.WaitRecord` for the history bound."""
        from resel.models.history import WaitRecord
        name = self.site.name
        return [WaitRecord(name, None, size, estimate, submit, start, "sim", str(jid))
                for submit, start, size, estimate, jid in self.started if start <= now]

    # ---------------------------------------------------------------- plumbing
    def _handle(self, now: float, started: list[QJob]) -> list[int]:
        """Schedule ends of started background jobs; return the started pilots' ids."""
        pilots = []
        for job in started:
            if job.id < 0:
                pilots.append(job.ref)
            else:
                self.started.append((job.submit, now, job.size, job.estimate, job.id))
                self.push(now + job.run, BG_END, self.index, job)
        wake = self.policy.wakeup()
        if wake is not None and wake > now and wake not in self._wakes:
            self._wakes.add(wake)
            self.push(wake, QWAKE, self.index, None)
        return pilots
