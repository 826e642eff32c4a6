"""A simulated site that is a real batch queue: other users' jobs from an SWF trace, scheduled
by a batch policy, with resel's pilots in the same queue.

The site is a :class:`~resel.sim.queue.BatchQueue` on the simulator's environment: background
arrivals and ends, and the scheduling passes, are events of that one heap, ordered with the
simulator's own (:mod:`resel.sim.core`). Which of resel's pilots a pass started is reported to
the simulator (``on_pilot_start``). Background jobs come from the trace one at a time; a trace
of at most :data:`KEEP_TRACE_BYTES` is parsed once per process and kept (a larger one is
streamed, costing no memory), so the queues of a sweep can be warmed up once and copied
(:func:`warm_queues`).
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any, Callable, Iterator

from resel.domain import Site
from resel.backends.jobs import QueueSnapshot, SnapJob
from resel.sim.core import Environment
from resel.sim.policies import Conservative, Policy, QJob, run_and_estimate
from resel.sim.queue import BatchQueue, ListFeed
from resel.sim.swf import in_submit_order, read_swf

#: traces up to this size are parsed once per process and their jobs kept (HPC2N's is 0.3 MB,
#: wagap-2013's 2.4 MB); larger ones are streamed as they are read
KEEP_TRACE_BYTES = 64 * 2 ** 20
#: warmed-up queue states kept per process (one per distinct set of trace-driven sites)
KEEP_WARM = 8
_TRACES: dict[tuple, tuple] = {}
_WARM: dict[tuple, tuple] = {}


def _kept_trace(path: str) -> tuple | None:
    """The trace's jobs in submit order, parsed once per process (None: too large to keep)."""
    try:
        st = os.stat(path)
    except OSError:
        return None      # read_swf says what is wrong with it
    if st.st_size > KEEP_TRACE_BYTES:
        return None
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    jobs = _TRACES.get(key)
    if jobs is None:
        jobs = _TRACES[key] = tuple(in_submit_order(read_swf(path), path))
    return jobs


def _background_job(item: tuple, number: int) -> QJob:
    job, run, estimate, at = item
    return QJob(number, job.size, estimate, run, at, ref=job)


def policy_snapshot(policy: Policy, now: float, site: str) -> QueueSnapshot:
    """A batch policy's state as a live site would show it, for the twin (:mod:`resel.models.twin`).

    Running jobs carry their estimate as time limit and the time since they started; pending
    ones come in the policy's queue order. A conservative policy's reservations are history
    (see :meth:`Conservative.submit_reserved`), so they go along as ``reserved``.
    """
    planned = isinstance(policy, Conservative)
    if planned:
        policy.plan(now)      # jobs that arrived at this instant get their reservation first

    def user(job: QJob) -> str:
        return "resel" if job.id < 0 else "background"

    running = tuple(SnapJob(j.size, j.estimate, now - j.start, str(j.id), user(j))
                    for j in policy.running.values())
    pending = tuple(SnapJob(j.size, j.estimate, 0.0, str(j.id), user(j), reserved=j.resv if planned else None)
                    for j in policy.queue)
    return QueueSnapshot(site, now, policy.cores, running, pending, policy.name)


class QueueSite:
    """One site's batch queue in a simulation."""

    def __init__(self, index: int, site: Site, env: Environment,
                 on_pilot_start: Callable[[int, float], None] | None = None):
        queue = site.queue
        self.index = index
        self.site = site
        self.env = env
        self.on_pilot_start = on_pilot_start
        self.batch = BatchQueue(queue.policy, site.cores, env, on_start=self._started, on_end=self._ended)
        self.offset, self.load, self.speed = queue.offset, queue.load, queue.speed
        self._pilots: dict[int, QJob] = {}
        self.background_done = 0
        self.background_skipped = 0
        #: other users' jobs as they started: (submit, start, cores, requested time, id) —
        #: the history a user of this site could have read from sacct
        self.started: list[tuple[float, float, int, float, int]] = []

    @property
    def policy(self) -> Policy:
        return self.batch.policy

    # ---------------------------------------------------------------- background load
    def prime(self) -> None:
        """Start the background arrivals (the first at a negative time: warm-up)."""
        jobs = _kept_trace(self.site.queue.trace)
        if jobs is None:
            self.batch.feed(self._background())
            return
        items = []
        for job in jobs:   # the same jobs, numbers and times as _background, from the kept trace
            if job.run is None or job.run <= 0 or job.size <= 0 or job.size > self.site.cores:
                self.background_skipped += 1
                continue
            run, estimate, _ = run_and_estimate(job, self.speed)
            items.append((job, run, estimate, job.submit / self.load - self.offset))
        self.batch.shared = (*getattr(self.batch, "shared", ()), items)
        self.batch.feed(ListFeed(items, _background_job))   # type: ignore[arg-type]

    def _background(self) -> Iterator[QJob]:
        seq = 0
        trace = self.site.queue.trace
        for job in in_submit_order(read_swf(trace), trace):
            if job.run is None or job.run <= 0 or job.size <= 0 or job.size > self.site.cores:
                self.background_skipped += 1
                continue
            seq += 1
            run, estimate, _ = run_and_estimate(job, self.speed)
            at = job.submit / self.load - self.offset
            yield QJob(seq, job.size, estimate, run, at, ref=job)

    def _started(self, job: QJob, now: float) -> None:
        if job.id < 0:
            if self.on_pilot_start is not None:
                self.on_pilot_start(job.ref, now)
        else:
            self.started.append((job.submit, now, job.size, job.estimate, job.id))

    def _ended(self, job: QJob, now: float) -> None:
        self.background_done += 1

    # ---------------------------------------------------------------- resel's pilots


    def submit_pilot(self, pilot: int, cores: int, walltime: float) -> None:
        """A pilot joins the queue now; it holds its cores until the simulator ends it."""
        job = QJob(-(pilot + 1), cores, walltime, math.inf, self.env.now, ref=pilot)
        self._pilots[pilot] = job
        self.batch.submit(job)

    def release_pilot(self, pilot: int) -> None:
        """The pilot was cancelled (pending: leaves the queue) or ended (running: frees cores)."""
        job = self._pilots.pop(pilot, None)
        if job is None:
            return
        if job.start < 0:
            self.batch.cancel(job)
        else:
            self.batch.stop(job)

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


def _warm_key(sites: list[Site]) -> tuple:
    return tuple((i, s.name, s.cores, s.queue) for i, s in enumerate(sites) if s.queue is not None)


def warm_queues(sites: list[Site]) -> tuple[Environment, dict[int, "QueueSite"]]:
    """The trace-driven sites' queues on one fresh environment, warmed up to just before the bag
    arrives at 0 (other users' jobs replayed from their traces' start), reporting no pilot
    start yet (set ``on_pilot_start``).

    The warm-up depends on the sites alone — not on the seed, the strategy or the bag — and
    is most of a trace-driven run's cost, so it is done once per process and set of sites
    and each caller gets its own deep copy (the traces' job lists shared, never copied): the
    same state, event for event, as warming up anew (tests/test_engine_schedule.py's traced
    case runs through it). A site whose trace is too large to keep is warmed up each time.
    """
    key = _warm_key(sites)
    kept = _WARM.get(key)
    if kept is None:
        env = Environment()
        queues = {i: QueueSite(i, s, env, None) for i, s in enumerate(sites) if s.queue is not None}
        for q in queues.values():
            q.prime()
        env.run(math.nextafter(0.0, -math.inf))     # warm-up: other users' jobs before the bag arrives
        env.now = 0.0
        if not all(isinstance(q.batch._source, (ListFeed, type(None))) for q in queues.values()):
            return env, queues                       # a streamed trace: nothing to copy from
        while len(_WARM) >= KEEP_WARM:
            _WARM.pop(next(iter(_WARM)))
        kept = _WARM[key] = (env, queues)
    return _copy_warm(*kept)


def _copy_warm(env: Environment, queues: dict[int, "QueueSite"]) -> tuple[Environment, dict[int, "QueueSite"]]:
    memo: dict[int, Any] = {}
    for q in queues.values():
        for shared in getattr(q.batch, "shared", ()):
            memo[id(shared)] = shared
            for item in shared:
                memo[id(item[0])] = item[0]            # the trace's jobs: read, never written
        memo[id(q.site)] = q.site
    return copy.deepcopy((env, queues), memo)
