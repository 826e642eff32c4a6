"""Several simulated batch clusters behind one meta-scheduler (seeds 004 and 000).

Every job of a (fused) trace goes through a *dispatcher* that picks a cluster for it —
MCT (minimum estimated completion time, seed 004) or one of the ISIS-Dispatcher policies of
seed 000 — and joins that cluster's queue. With *reallocation* on, the meta-scheduler
periodically (and, optionally, whenever a job ends before its estimate) looks at every job
still waiting and moves it to another cluster when that is expected to finish it sooner:

* ``regular``: for each waiting job, in the order of the heuristic, ask every cluster for an
  estimated completion time (ECT) and move the job if ``new ECT + margin < old ECT``;
* ``all-cancel``: cancel every waiting job, then resubmit each, in heuristic order, to the
  cluster with the minimum ECT. (A dry run cannot preview this without cancelling; it lists
  what the regular algorithm would move instead.)

A moved job joins the *tail* of its new queue: it loses its place, as in real batch systems.
ECTs come from the clusters' own schedulers (:meth:`Policy.estimate_start`, the simulated
``sbatch --test-only``) and use requested walltimes — reallocation exists because those are
over-estimates; with exact walltimes it has nothing to correct.

Heuristic orders: ``mct`` — submission order; ``minmin`` / ``maxmin`` — ascending /
descending best ECT; ``maxgain`` — descending (current − best ECT); ``maxrelgain`` — the gain
divided by the job's cores; ``sufferage`` — descending (second-best − best ECT). By default the
order is computed once per round from the ECTs at the round's start, and each move is then
decided with fresh ECTs; ``recompute=True`` is seed 004's offline form, which recomputes every
job's ECTs after each pick (quadratic in the waiting jobs per round).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from resel.errors import ReselError
from resel.sim.core import ARRIVE, REALLOCATE, Environment
from resel.sim.jobstats import JobStats
from resel.sim.policies import Policy, QJob, run_and_estimate
from resel.sim.queue import BatchQueue
from resel.sim.swf import Job

DISPATCHERS = ("mct", "less-waittime", "less-sld", "less-jobs-in-queue", "less-work-left",
               "less-submitted-jobs", "random")
HEURISTICS = ("mct", "minmin", "maxmin", "maxgain", "maxrelgain", "sufferage")
ALGORITHMS = ("regular", "all-cancel")


@dataclass(frozen=True)
class Cluster:
    """One batch cluster: its cores, speed relative to the trace's machines, and policy."""

    name: str
    cores: int
    speed: float = 1.0
    policy: str = "conservative"

    def __post_init__(self) -> None:
        if not isinstance(self.cores, int) or self.cores < 1:
            raise ReselError(f"cluster {self.name!r}: cores must be a whole number >= 1, not {self.cores!r}")
        if not (isinstance(self.speed, (int, float)) and math.isfinite(self.speed) and self.speed > 0):
            raise ReselError(f"cluster {self.name!r}: speed must be a finite number > 0, not {self.speed!r}")


@dataclass(frozen=True)
class Reallocation:
    """When and how waiting jobs are moved."""

    algorithm: str = "regular"
    heuristic: str = "mct"
    period: float = 3600.0
    on_early_end: bool = False
    margin: float = 60.0
    recompute: bool = False   # offline heuristics: recompute every MCT after each pick (quadratic)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ReselError(f"reallocation algorithm must be one of {', '.join(ALGORITHMS)}")
        if self.heuristic not in HEURISTICS:
            raise ReselError(f"heuristic must be one of {', '.join(HEURISTICS)}")
        if self.period <= 0 and not self.on_early_end:
            raise ReselError("give a period > 0 or turn on the early-end trigger")


@dataclass(frozen=True)
class Move:
    """One reallocation decision, with the ECTs it was based on."""

    time: float
    job: int          # the job's arrival number in the trace (1-based)
    source: str
    target: str
    old_ect: float
    new_ect: float


@dataclass
class Outcome:
    """Where and when one job ran."""

    cluster: str
    submit: float
    start: float
    end: float
    moves: int


@dataclass
class GridResult:
    clusters: list[Cluster]
    dispatcher: str
    reallocation: Reallocation | None
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)
    planned: list[Move] = field(default_factory=list)     # dry run: moves not applied
    stats: JobStats = field(default_factory=JobStats)
    rounds: int = 0
    skipped: int = 0

    def per_cluster(self) -> dict[str, int]:
        counts: dict[str, int] = {c.name: 0 for c in self.clusters}
        for o in self.outcomes.values():
            counts[o.cluster] += 1
        return counts

    def summary(self) -> dict:
        cores = sum(c.cores for c in self.clusters)
        out = {"dispatcher": self.dispatcher,
               "reallocation": None if self.reallocation is None else vars(self.reallocation),
               "jobs": len(self.outcomes), "moves": len(self.moves), "rounds": self.rounds,
               "skipped": self.skipped, "per_cluster": self.per_cluster(), **self.stats.summary(cores)}
        if self.planned:
            out["planned_moves"] = len(self.planned)
        return out


def compare(base: GridResult, other: GridResult) -> dict[str, float]:
    """Seed 004's paired metrics of ``other`` (with reallocation) against ``base`` (without).

    impacted: % of jobs whose completion time changed; reallocations per job; % finishing
    earlier / later; relative mean response time (other / base; below 1 is better), and the
    same for the mean wait — the part of the response reallocation can change.
    """
    common = base.outcomes.keys() & other.outcomes.keys()
    if not common:
        raise ReselError("the two runs have no job in common")
    earlier = later = 0
    resp_base = resp_other = wait_base = wait_other = 0.0
    for key in common:
        b, o = base.outcomes[key], other.outcomes[key]
        earlier += o.end < b.end - 1e-6
        later += o.end > b.end + 1e-6
        resp_base += b.end - b.submit
        resp_other += o.end - o.submit
        wait_base += b.start - b.submit
        wait_other += o.start - o.submit
    n = len(common)
    return {"jobs": n, "impacted_pct": 100.0 * (earlier + later) / n,
            "reallocations_per_job": len(other.moves) / n, "earlier_pct": 100.0 * earlier / n,
            "later_pct": 100.0 * later / n,
            "relative_mean_response": resp_other / resp_base if resp_base else math.nan,
            "mean_response_base": resp_base / n, "mean_response": resp_other / n,
            "relative_mean_wait": wait_other / wait_base if wait_base else math.nan}


class Grid:
    """The multi-cluster simulation; build one per run and call :meth:`run`."""

    def __init__(self, clusters: list[Cluster], dispatcher: str = "mct", reallocation: Reallocation | None = None,
                 *, seed: int = 0, exact_walltimes: bool = False, dry_run: bool = False,
                 taus: tuple[float, ...] = (10.0, 60.0)):
        if not clusters:
            raise ReselError("a grid needs at least one cluster")
        if dispatcher not in DISPATCHERS:
            raise ReselError(f"unknown dispatcher {dispatcher!r}; one of {', '.join(DISPATCHERS)}")
        self.clusters = list(clusters)
        self.env = Environment()
        self.queues: list[BatchQueue] = [
            BatchQueue(c.policy, c.cores, self.env,
                       on_start=lambda q, now, i=i: self._where.pop(q.id, None),
                       on_end=lambda q, now, i=i: self._on_end(now, i, q))
            for i, c in enumerate(clusters)]
        self.policies: list[Policy] = [q.policy for q in self.queues]
        self.dispatcher = dispatcher
        self.realloc = reallocation
        self.exact = exact_walltimes
        self.dry_run = dry_run
        self.rng = random.Random(seed)
        self.result = GridResult(self.clusters, dispatcher, reallocation, stats=JobStats(taus))
        self._submitted = [0] * len(clusters)
        self._where: dict[int, int] = {}          # queued job seq -> cluster index
        self._moves: dict[int, int] = {}
        self._realloc_at: set[float] = set()
        self._source: Iterator[Job] | None = None
        self._seq = 0
        self._progress: Callable[[int], None] | None = None

    # ------------------------------------------------------------------ driving
    def run(self, jobs: Iterable[Job], on_progress: Callable[[int], None] | None = None) -> GridResult:
        """Simulate every job of ``jobs`` (sorted by submit time) to completion.

        All clusters share one :class:`~resel.sim.core.Environment`: at every instant the jobs
        ending everywhere, then the arrivals (each dispatched as it comes), then one pass per
        cluster, then a reallocation round if one is due."""
        self._source = iter(jobs)
        self._progress = on_progress
        first = self._next_arrival()
        if self.realloc is not None and self.realloc.period > 0 and first is not None:
            self.env.schedule(first.submit + self.realloc.period, REALLOCATE, self._round, "periodic")
        self.env.run()
        return self.result

    def _next_arrival(self) -> Job | None:
        job = next(self._source, None) if self._source is not None else None
        if job is None:
            self._source = None
        else:
            self.env.schedule(job.submit, ARRIVE, self._arrival, job)
        return job

    def _arrival(self, now: float, job: Job) -> None:
        self._seq += 1
        if self._progress is not None and self._seq % 1000 == 0:
            self._progress(self._seq)
        self._arrive(self._seq, job)
        self._next_arrival()

    def _round(self, now: float, payload: str) -> None:
        self._realloc_at.discard(now)
        self._reallocate(now)
        # only the periodic chain re-arms itself; early-end rounds are one-offs
        busy = self._source is not None or self._where or any(q.running for q in self.queues)
        if payload == "periodic" and busy:
            self.env.schedule(now + self.realloc.period, REALLOCATE, self._round, "periodic")

    def _times(self, job: Job, c: int) -> tuple[float, float]:
        """(run, estimate) of ``job`` on cluster ``c`` (see :func:`run_and_estimate`)."""
        run, estimate, _ = run_and_estimate(job, self.clusters[c].speed, exact=self.exact)
        return run, estimate

    def _qjob(self, seq: int, job: Job, c: int) -> QJob:
        run, estimate = self._times(job, c)
        return QJob(seq, job.size, estimate, run, float(job.submit), ref=job)

    def _fits(self, job: Job) -> list[int]:
        return [i for i, c in enumerate(self.clusters) if c.cores >= job.size]

    def _arrive(self, seq: int, job: Job) -> None:
        if job.run is None or job.run < 0 or job.size <= 0 or not self._fits(job):
            self.result.skipped += 1
            return
        now = float(job.submit)
        c = self._choose(job, seq, now)
        self._submit(self._qjob(seq, job, c), c, now)

    def _submit(self, q: QJob, c: int, now: float) -> None:
        self._where[q.id] = c
        self._submitted[c] += 1
        self.queues[c].submit(q)

    def _on_end(self, now: float, c: int, q: QJob) -> None:
        self.result.stats.add(q.submit, q.start, q.run, q.size)
        self.result.outcomes[q.id] = Outcome(self.clusters[c].name, q.submit, q.start, now, self._moves.get(q.id, 0))
        early = q.run < q.estimate - 1e-9
        if early and self.realloc is not None and self.realloc.on_early_end and now not in self._realloc_at:
            self._realloc_at.add(now)
            self.env.schedule(now, REALLOCATE, self._round, "early-end")

    # ------------------------------------------------------------------ estimates
    def _ect(self, c: int, size: int, estimate: float, now: float) -> float:
        return self.policies[c].estimate_start(size, estimate, now) + estimate

    def _ects(self, job: Job, now: float) -> dict[int, float]:
        """ECT of ``job`` on every cluster it fits, as if submitted there now."""
        out = {}
        for c in self._fits(job):
            out[c] = self._ect(c, job.size, self._times(job, c)[1], now)
        return out

    def _choose(self, job: Job, seq: int, now: float) -> int:
        fits = self._fits(job)
        d = self.dispatcher
        if d == "random":
            return self.rng.choice(fits)
        if d == "less-submitted-jobs":
            return min(fits, key=lambda c: (self._submitted[c], c))
        if d == "less-jobs-in-queue":
            return min(fits, key=lambda c: (len(self.policies[c].queue), c))
        if d == "less-work-left":
            return min(fits, key=lambda c: (sum(q.estimate * q.size for q in self.policies[c].queue), c))
        est = {c: self._times(job, c)[1] for c in fits}
        wait = {c: self.policies[c].estimate_start(job.size, est[c], now) - now for c in fits}
        if d == "mct":              # earliest completion: start + estimate
            return min(fits, key=lambda c: (wait[c] + est[c], c))
        if d == "less-waittime":
            return min(fits, key=lambda c: (wait[c], c))
        # less-sld: predicted slowdown (wait + run) / run, the requested time standing for the run
        return min(fits, key=lambda c: ((wait[c] + est[c]) / max(1.0, est[c]), c))

    # ------------------------------------------------------------------ reallocation
    def _reallocate(self, now: float) -> None:
        self.result.rounds += 1
        waiting = [(self._where[q.id], q) for p in self.policies for q in list(p.queue)]
        if not waiting:
            return
        if self.realloc.algorithm == "all-cancel" and not self.dry_run:
            self._all_cancel(now, waiting)
        else:
            self._regular(now, waiting)

    def _order(self, now: float, waiting: list[tuple[int, QJob]]):
        """The jobs of a round in heuristic order: one pass, or (``recompute``) seed 004's
        offline form — pick the best job by the current ECTs, decide it, recompute, repeat."""
        if not self.realloc.recompute or self.realloc.heuristic == "mct":
            yield from self._keys(now, waiting)
            return
        remaining = list(waiting)
        while remaining:
            pick = self._keys(now, remaining)[0]
            remaining.remove(pick)
            yield pick

    def _keys(self, now: float, waiting: list[tuple[int, QJob]]) -> list[tuple[int, QJob]]:
        h = self.realloc.heuristic
        if h == "mct":
            return sorted(waiting, key=lambda cq: (cq[1].submit, cq[1].id))
        scored = []
        for c, q in waiting:
            ects_now = self._ects(q.ref, now)
            if q in self.policies[c].queue:     # where it waits now, its current planned completion
                current = self.policies[c].planned_start(q, now) + q.estimate
            else:                               # withdrawn (all-cancellation): as a new submission
                current = ects_now.get(c, math.inf)
            ects = sorted([current] + [v for k, v in ects_now.items() if k != c])
            best, second = ects[0], (ects[1] if len(ects) > 1 else ects[0])
            gain = current - best
            key = {"minmin": best, "maxmin": -best, "maxgain": -gain, "maxrelgain": -gain / q.size,
                   "sufferage": -(second - best)}[h]
            scored.append((key, q.submit, q.id, c, q))
        scored.sort(key=lambda s: s[:3])
        return [(s[3], s[4]) for s in scored]

    def _regular(self, now: float, waiting: list[tuple[int, QJob]]) -> None:
        for c, q in self._order(now, waiting):
            policy = self.policies[c]
            if self._where.get(q.id) != c or q not in policy.queue:
                continue          # started (or moved) since the round began
            old = policy.planned_start(q, now) + q.estimate
            ects = {k: v for k, v in self._ects(q.ref, now).items() if k != c}
            if not ects:
                continue
            target = min(ects, key=lambda k: (ects[k], k))
            if ects[target] + self.realloc.margin < old:
                move = Move(now, q.id, self.clusters[c].name, self.clusters[target].name, old, ects[target])
                if self.dry_run:
                    self.result.planned.append(move)
                    continue
                self._move(now, c, q, target)
                self.result.moves.append(move)

    def _all_cancel(self, now: float, waiting: list[tuple[int, QJob]]) -> None:
        # one pass: the order from the ECTs taken while every job still holds its place;
        # recompute: from the emptied queues, re-ranked after each resubmission
        order = None if self.realloc.recompute else self._keys(now, waiting)
        for queue in self.queues:
            for q in queue.withdraw_all():
                del self._where[q.id]
        for c, q in order if order is not None else self._order(now, waiting):
            ects = self._ects(q.ref, now)
            target = min(ects, key=lambda k: (ects[k], k))
            if target != c:
                self.result.moves.append(Move(now, q.id, self.clusters[c].name, self.clusters[target].name,
                                              math.nan, ects[target]))
                self._moves[q.id] = self._moves.get(q.id, 0) + 1
            self._submit(self._qjob(q.id, q.ref, target), target, now)

    def _move(self, now: float, c: int, q: QJob, target: int) -> None:
        del self._where[q.id]
        self.queues[c].cancel(q)
        self._moves[q.id] = self._moves.get(q.id, 0) + 1
        self._submit(self._qjob(q.id, q.ref, target), target, now)
