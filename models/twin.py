"""The live twin: a snapshot of a site's queue, simulated forward with the site's own policy.

A scheduler's ``sbatch --test-only`` answer is an estimate made by code the user cannot see,
under assumptions the user cannot check. The twin makes the same estimate on the user's side,
in the open: the running jobs (each with its time limit and how long it has run), the pending
jobs in priority order, and the site's policy (:mod:`resel.sim.policies`) are replayed with
no new arrivals and every job running exactly its limit, until a pilot of the asked shape,
submitted now, starts. For EASY this is the honest answer: the pilot may be backfilled earlier
than :meth:`~resel.sim.policies.Policy.estimate_start`'s upper bound.

What the twin could not know is said, never hidden: a :class:`~resel.backends.jobs.QueueSnapshot` carries ``notes``
(what its reader assumed or left out), and the :class:`TwinEstimate` adds its own.

Pure: no I/O, no clock. Times are in the snapshot's own clock (epoch seconds for a live site,
simulated seconds for a simulated one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from resel.backends.jobs import QueueSnapshot, SnapJob, finite_number
from resel.errors import ModelError, ReselError
from resel.sim.core import Environment
from resel.sim.policies import Conservative, QJob
from resel.sim.queue import BatchQueue

__all__ = ["TwinEstimate", "twin_start"]


@dataclass(frozen=True, slots=True)
class TwinEstimate:
    """When the pilot would start (``start``, in the snapshot's clock; ``wait`` after it).

    ``ahead``: queued jobs that start before the pilot; ``overtook``: queued jobs the pilot
    starts ahead of (it was backfilled); ``released_by``: the job whose end let it start
    (None if it starts at once or at a scheduler wake-up). ``notes``: the snapshot's and the
    twin's own assumptions — a plan must show them with the number.
    """

    start: float
    wait: float
    policy: str
    ahead: tuple[str, ...]
    overtook: tuple[str, ...]
    released_by: str | None
    explanation: str
    notes: tuple[str, ...]


def twin_start(snapshot: QueueSnapshot, cores: int, walltime: float, *,
               runtime_ratio: float = 1.0) -> TwinEstimate:
    """When a pilot of ``cores`` × ``walltime`` submitted at ``snapshot.taken_at`` would start.

    The snapshot's running jobs are placed as started ``elapsed`` ago, its pending jobs are
    submitted in priority order, then the pilot; the policy then runs forward with no new
    arrivals. Every job runs ``runtime_ratio`` × its time limit (the scheduler still plans with
    the limit): 1.0 is what the scheduler assumes; a smaller ratio is the lever for sites whose
    users over-request, where jobs end well before their limits.
    """
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ModelError(f"pilot cores must be a positive whole number, not {cores!r}")
    if finite_number(walltime, "pilot walltime") <= 0:
        raise ModelError(f"pilot walltime must be positive, not {walltime!r}")
    if finite_number(runtime_ratio, "runtime ratio") <= 0:
        raise ModelError(f"runtime ratio must be positive, not {runtime_ratio!r}")
    if cores > snapshot.total_cores:
        raise ModelError(f"a pilot of {cores} cores can never start on {snapshot.site}: "
                         f"its queue has {snapshot.total_cores} cores")
    est = _Twin(snapshot, runtime_ratio).run(cores, float(walltime))
    return _at_next_cycle(snapshot, est)


def _at_next_cycle(snap: QueueSnapshot, est: TwinEstimate) -> TwinEstimate:
    """A matchmaking pool starts a job only in a negotiation cycle: cycles end at
    ``cycle_end + k · cycle_period``; the pilot starts at the first at or after ``est.start``."""
    if snap.cycle_end is None or not snap.cycle_period or snap.cycle_period <= 0:
        return est
    k = max(0, math.ceil((est.start - snap.cycle_end) / snap.cycle_period - 1e-9))
    start = snap.cycle_end + k * snap.cycle_period
    note = f"started at the pool's next negotiation cycle (every {snap.cycle_period:g} s)"
    return TwinEstimate(start=start, wait=start - snap.taken_at, policy=est.policy, ahead=est.ahead,
                        overtook=est.overtook, released_by=est.released_by,
                        explanation=f"{est.explanation}; {note}", notes=est.notes)


class _Twin:
    """One forward run: a :class:`~resel.sim.queue.BatchQueue` from the snapshot, and what
    was assumed on the way."""

    def __init__(self, snapshot: QueueSnapshot, ratio: float):
        self.snap = snapshot
        self.ratio = ratio
        self.now = snapshot.taken_at
        self.queue = BatchQueue(snapshot.policy, snapshot.total_cores, Environment(snapshot.taken_at),
                                on_start=self._on_start, on_end=self._on_end)
        self.policy = self.queue.policy
        self.notes: list[str] = list(snapshot.notes)
        self.ids = _job_ids(snapshot)
        self.order: dict[int, int] = {}         # id(QJob) -> the order it started in
        self.last_end: tuple[float, str | None] = (math.nan, None)

    # ---------------------------------------------------------------- building the state
    def _limit(self, job: SnapJob) -> float | None:
        if job.time_limit is not None:
            return float(job.time_limit)
        return self.snap.default_limit

    def _usable(self, jobs: tuple[SnapJob, ...], kind: str) -> list[tuple[int, SnapJob, float]]:
        """The jobs the twin can place, with their ids and limits; the others noted."""
        out, too_big, no_limit = [], [], []
        for i, job in enumerate(jobs):
            limit = self._limit(job)
            if job.cores < 1 or job.cores > self.snap.total_cores:
                too_big.append(f"{job.job_id or '#' + str(i)} ({job.cores})")
            elif limit is None:
                no_limit.append(job.job_id or f"#{i}")
            else:
                out.append((self.ids[kind, i], job, limit))
        if too_big:
            self.notes.append(f"{len(too_big)} {kind} job(s) asking for cores the queue does not have "
                              f"(of {self.snap.total_cores}) left out: {', '.join(too_big)}")
        if no_limit:
            raise ModelError(f"site {self.snap.site}: {kind} job(s) {', '.join(no_limit)} have no time limit "
                             "and the snapshot has no default limit: the queue cannot be simulated")
        return out

    def _place(self) -> list[QJob]:
        """Running jobs placed, pending ones submitted in order; returns the pending ones.
        Everything happens at the snapshot's instant, so one pass follows all of it."""
        now, ratio = self.now, self.ratio
        ended_now = []
        for qid, job, limit in self._usable(self.snap.running, "running"):
            if job.elapsed >= limit:
                ended_now.append(job.job_id)       # killed at its limit any moment: frees now
                continue
            start = now - job.elapsed
            self.queue.adopt(QJob(qid, job.cores, limit, ratio * limit, start, start=start, ref=job.job_id))
        if ended_now:
            self.notes.append(f"{len(ended_now)} running job(s) past their time limit taken as "
                              f"ending now: {', '.join(ended_now)}")
        if self.policy.free < 0:
            self.notes.append(f"the running jobs hold {self.snap.total_cores - self.policy.free} cores "
                              f"of {self.snap.total_cores}: the snapshot is inconsistent")
        planned = isinstance(self.policy, Conservative)
        moved = 0
        queued: list[QJob] = []
        for rank, (qid, job, limit) in enumerate(self._usable(self.snap.pending, "pending")):
            # submit = rank: SJBF breaks estimate ties by submission, and the queue is in order
            q = QJob(qid, job.cores, limit, ratio * limit, float(rank), ref=job.job_id)
            queued.append(q)
            if planned and job.reserved is not None:
                try:
                    self.queue.submit_reserved(q, job.reserved)
                    continue
                except ReselError:
                    moved += 1                     # its plan no longer fits: re-planned below
            self.queue.submit(q)
        if moved:
            self.notes.append(f"{moved} pending job(s) whose reserved start no longer fits were re-planned")
        return queued

    # ---------------------------------------------------------------- the event loop
    def _on_start(self, job: QJob, now: float) -> None:
        self.order[id(job)] = len(self.order)

    def _on_end(self, job: QJob, now: float) -> None:
        if now != self.last_end[0]:          # the first job to end at each instant
            self.last_end = (now, job.ref)

    def run(self, cores: int, walltime: float) -> TwinEstimate:
        queued = self._place()
        # the pilot holds its cores for its whole walltime; its end does not matter here
        pilot = QJob(min(self.ids.values(), default=0) - 1, cores, walltime, math.inf,
                     float(len(queued)), ref=_PILOT)
        self.queue.submit(pilot)
        env = self.queue.env
        while id(pilot) not in self.order:      # not started (times may be negative: warm-up)
            if not len(env):             # every job ends, so the pilot must fit at last
                raise ModelError(f"site {self.snap.site}: the twin ran out of events before the pilot started")
            env.step()
        self.now = env.now
        # the job whose end let the pilot start: the first to end at that instant, if any did
        released_by = self.last_end[1] if self.last_end[0] == pilot.start and pilot.start > self.snap.taken_at else None
        return self._estimate(pilot, queued, released_by)

    def _estimate(self, pilot: QJob, queued: list[QJob], released_by: str | None) -> TwinEstimate:
        rank = self.order[id(pilot)]
        ahead = tuple(j.ref for j in queued if self.order.get(id(j), math.inf) < rank)
        overtook = tuple(j.ref for j in queued if self.order.get(id(j), math.inf) > rank)
        wait = pilot.start - self.snap.taken_at
        if wait <= 0 and not overtook:
            text = f"starts at once: {self.snap.total_cores - self.snap.busy_cores} cores free"
        else:
            parts = [f"starts after {wait:.0f} s" if wait > 0 else "starts at once"]
            if ahead:
                parts.append(f"behind {len(ahead)} queued job(s)")
            if overtook:
                parts.append(f"backfilled ahead of {len(overtook)} queued job(s) without delaying "
                             + ("any of them" if self.snap.policy == "conservative" else "the first"))
            if released_by:
                parts.append(f"when job {released_by} ends")
            text = ", ".join(parts)
        return TwinEstimate(start=pilot.start, wait=wait, policy=self.snap.policy, ahead=ahead,
                            overtook=overtook, released_by=released_by,
                            explanation=f"{self.snap.policy} twin of {self.snap.site}: {text}",
                            notes=tuple(self.notes))


#: the ``ref`` that marks the twin's own pilot among the snapshot's jobs
_PILOT = object()


def _job_ids(snapshot: QueueSnapshot) -> dict[tuple[str, int], int]:
    """Integer ids for the policy: the site's own where they are distinct whole numbers.

    EASY orders jobs ending at the same instant by id, so keeping the site's ids (submission
    order, for Slurm and for the simulator) makes the twin break ties as the site does.
    """
    keys = [("running", i) for i in range(len(snapshot.running))]
    keys += [("pending", i) for i in range(len(snapshot.pending))]
    texts = [j.job_id for j in (*snapshot.running, *snapshot.pending)]
    try:
        own = [int(t) for t in texts]
    except ValueError:
        own = []
    if own and len(set(own)) == len(own):
        return dict(zip(keys, own))
    return {key: n for n, key in enumerate(keys, 1)}
