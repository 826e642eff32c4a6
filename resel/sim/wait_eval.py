"""How good are wait predictions for a pilot? An evaluation on replayed traces (issue 8, part 5).

A trace is replayed on one site under a batch policy; at many points in time a probe pilot is
"submitted", every estimator is asked when it would start, and the pilot's *real* start is
measured by continuing the simulation with the pilot in the queue and the trace still
arriving. The main replay is never disturbed: each probe runs on a clone of the queue state
taken at its injection time, and the clone only runs until the probe starts, so a probe costs
the events of its own wait, not the rest of the trace.

Estimators only see what a real site would show at that moment: the queue and the running
jobs (scheduler estimate, twin) and the waits of jobs that have already *started* (history
bound). A wait is only known once its job started, so the history tracker is fed at start
events of the main replay, never from the trace's future.

The point of the comparison: the scheduler's estimate and the twin are point estimates built
on requested walltimes, while the history bound is a bound with a stated coverage. The
metrics (:func:`summarize`) are the same for all three, so the table shows how often each one
would have been a safe upper bound and how loose it was.

The simulation is the estimates' own model of the world, so :func:`evaluate_recorded` also
judges them against the trace's *recorded* waits, with the queue rebuilt from the trace.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from resel.errors import ReselError
from resel.models.qbets import WaitBounds
from resel.sim.policies import Policy, QJob, make_policy, run_and_estimate
from resel.sim.queue import BatchQueue, ListFeed
from resel.sim.swf import Job

if TYPE_CHECKING:
    from resel.backends.jobs import QueueSnapshot

#: real waits shorter than this count as "started at once" for the tightness ratio
MIN_WAIT = 60.0


@dataclass(frozen=True, slots=True)
class Shape:
    """A probe pilot's request: cores and walltime (seconds)."""

    cores: int
    walltime: float

    @property
    def label(self) -> str:
        hours = self.walltime / 3600
        return f"{self.cores}c×{hours:g}h"


#: the default probes: small to wide pilots, short and long
DEFAULT_SHAPES: tuple[Shape, ...] = tuple(Shape(c, w) for c in (1, 8, 32, 64) for w in (3600.0, 43200.0))


@dataclass(frozen=True, slots=True)
class BgJob:
    """A background job as the replay needs it: when it arrives, what it asks, how long it runs."""

    submit: float
    size: int
    estimate: float
    run: float


def load_jobs(jobs: Iterable[Job], cores: int, *, speed: float = 1.0, kill: bool = False,
              first: int | None = None, load: float = 1.0) -> list[BgJob]:
    """The trace's usable jobs, in submit order (unknown run times and jobs wider than the site
    are dropped, as :func:`resel.sim.replay.replay` drops them). ``first`` keeps only that many
    trace lines, for quick runs and tests. ``load`` > 1 compresses the arrivals (submit /
    load), the usual way to ask how the estimates hold up on a busier queue."""
    if load <= 0:
        raise ReselError(f"load must be positive, not {load}")
    out: list[BgJob] = []
    for i, job in enumerate(jobs):
        if first is not None and i >= first:
            break
        if job.run is None or job.run < 0 or job.size <= 0 or job.size > cores:
            continue
        run, estimate, _ = run_and_estimate(job, speed, kill=kill)
        out.append(BgJob(float(job.submit) / load, int(job.size), float(estimate), float(run)))
    out.sort(key=lambda j: j.submit)
    return out


def injection_times(jobs: Sequence[BgJob], n: int, *, warmup: float = 0.1, tail: float = 0.05,
                    seed: int | None = None) -> list[float]:
    """``n`` probe times in the trace's submit span, after a warm-up fraction (the queue and the
    history need time to fill) and before a tail (near the end the queue drains: no arrivals
    left to compete with). Evenly spaced, or uniform at random with ``seed``."""
    if not jobs or n <= 0:
        return []
    t0, t1 = jobs[0].submit, jobs[-1].submit
    a, b = t0 + warmup * (t1 - t0), t1 - tail * (t1 - t0)
    if b <= a:
        raise ReselError("the trace is too short for the warm-up and tail asked for")
    if seed is None:
        return [a + (i + 0.5) * (b - a) / n for i in range(n)]
    rng = random.Random(seed)
    return sorted(rng.uniform(a, b) for _ in range(n))


def _arrival(bg: BgJob, number: int) -> QJob:
    return QJob(number, bg.size, bg.estimate, bg.run, bg.submit)


class QueueSim:
    """One site's queue replaying a job list: a :class:`~resel.sim.queue.BatchQueue` that can
    be paused and cloned.

    ``on_start(job, now)`` sees every background job as it starts (the history feed). The
    order of :func:`resel.sim.replay.replay`: at every instant the ends, then the arrivals, then
    one scheduling pass.
    """

    def __init__(self, jobs: Sequence[BgJob], policy: str, cores: int,
                 on_start: Callable[[QJob, float], None] | None = None):
        self.jobs = jobs
        self.cores = cores
        self.on_start = on_start
        self.queue = BatchQueue(policy, cores, on_start=self._report, shared=(jobs,))
        self.queue.feed(ListFeed(jobs, _arrival))   # type: ignore[arg-type]
        self._last: list[QJob] = []

    @property
    def policy(self) -> Policy:
        return self.queue.policy

    @property
    def now(self) -> float:
        return self.queue.now

    def _report(self, job: QJob, now: float) -> None:
        self._last.append(job)
        if self.on_start is not None and job.id > 0:
            self.on_start(job, now)

    def step(self) -> list[QJob]:
        """Process one event; return the jobs it started."""
        if not len(self.queue.env):
            raise ReselError("the simulation has no events left")
        self._last = []
        self.queue.env.step()
        return self._last

    def advance(self, until: float) -> None:
        """Process every event at or before ``until``."""
        self.queue.advance(until)

    def clone(self) -> "QueueSim":
        """An independent copy of the queue state (the job list is shared: it is read-only)."""
        twin = copy.copy(self)
        twin.on_start = None
        twin.queue = self.queue.clone()
        twin.queue.on_start = twin._report
        twin._last = []
        return twin

    def real_start(self, shape: Shape, at: float) -> float:
        """When a pilot of ``shape`` submitted at ``at`` really starts, the trace continuing.

        Runs on a clone, so this simulation is left as it was. The pilot runs for its whole
        walltime (it is a pilot: it holds its cores until the walltime ends)."""
        if shape.cores > self.cores:
            raise ReselError(f"a {shape.cores}-core pilot does not fit on {self.cores} cores")
        sim = self.clone()
        sim.advance(at)
        pilot = QJob(-1, shape.cores, shape.walltime, math.inf, at)
        sim.queue.submit(pilot)
        env = sim.queue.env
        while pilot.start < 0:
            env.step()
        return pilot.start


class Estimator(Protocol):
    """A way to predict a pilot's wait from what is visible at the time it is submitted."""

    name: str

    def observe(self, job: QJob, now: float) -> None:
        """A background job started at ``now`` (its wait is now known)."""

    def predict(self, sim: QueueSim, shape: Shape, now: float) -> float | None:
        """The predicted wait in seconds (None: no prediction possible yet)."""


class SchedulerEstimate:
    """The scheduler's own answer (``sbatch --test-only``): :meth:`Policy.estimate_start`."""

    name = "scheduler"

    def observe(self, job: QJob, now: float) -> None:
        pass

    def predict(self, sim: QueueSim, shape: Shape, now: float) -> float | None:
        return sim.policy.estimate_start(shape.cores, shape.walltime, now) - now


class FunctionEstimate:
    """Any estimate from the visible queue state, given as ``fn(policy, now, cores, walltime)``
    returning the predicted wait in seconds (or None). The twin plugs in here."""

    def __init__(self, name: str, fn: Callable[[Policy, float, int, float], float | None]):
        self.name = name
        self.fn = fn

    def observe(self, job: QJob, now: float) -> None:
        pass

    def predict(self, sim: QueueSim, shape: Shape, now: float) -> float | None:
        return self.fn(sim.policy, now, shape.cores, shape.walltime)


def coarse_class(cores: int, walltime: float) -> tuple[int, int]:
    """Fallback shape class: power-of-two core bucket × walltime up to 1 h, 12 h, or longer."""
    bucket = max(0, math.ceil(math.log2(max(1, cores))))
    span = 0 if walltime <= 3600 else 1 if walltime <= 43200 else 2
    return bucket, span


def _classes() -> tuple[Callable[[int, float], object], Callable[[int], object]]:
    """models/history.py's shape and core classes where present (the classes resel's own
    bounds use), else :func:`coarse_class` and its core bucket."""
    try:
        from resel.models.history import cores_class, shape_class
    except ImportError:
        return coarse_class, lambda cores: coarse_class(cores, 0)[0]
    return shape_class, cores_class


class HistoryBound:
    """The QBETS bound of the waits of jobs of the pilot's shape class that have started.

    As :meth:`resel.models.history.WaitHistory.bound` does, a class with too little history
    for a bound falls back to the jobs of the same core bucket, then to all the site's jobs
    (:attr:`levels` counts which was used); with too little of those, no prediction.
    """

    def __init__(self, quantile: float = 0.9, confidence: float = 0.9, alarm: float = 0.01,
                 classify: Callable[[int, float], object] | None = None):
        self.name = f"qbets-{quantile:g}/{confidence:g}"
        self.quantile, self.confidence, self.alarm = quantile, confidence, alarm
        shape_class, cores_class = _classes()
        self.classify = classify or shape_class
        self.cores_class = cores_class
        self.classes: dict[object, WaitBounds] = {}
        self.site = WaitBounds(quantile, confidence, alarm)
        self.levels = {"shape": 0, "cores": 0, "site": 0, "none": 0}
        self.last_start = -math.inf    # the latest start fed in (the no-peeking check)

    @property
    def fallbacks(self) -> int:
        """Predictions that came from a coarser group than the pilot's shape class."""
        return self.levels["cores"] + self.levels["site"]

    def _tracker(self, key: object) -> WaitBounds:
        tracker = self.classes.get(key)
        if tracker is None:
            tracker = self.classes[key] = WaitBounds(self.quantile, self.confidence, self.alarm)
        return tracker

    def observe(self, job: QJob, now: float) -> None:
        wait = now - job.submit
        self._tracker(("shape", self.classify(job.size, job.estimate))).observe(wait)
        self._tracker(("cores", self.cores_class(job.size))).observe(wait)
        self.site.observe(wait)
        self.last_start = max(self.last_start, now)

    def predict(self, sim: QueueSim, shape: Shape, now: float) -> float | None:
        for level, tracker in (("shape", self._tracker(("shape", self.classify(shape.cores, shape.walltime)))),
                               ("cores", self._tracker(("cores", self.cores_class(shape.cores)))),
                               ("site", self.site)):
            if tracker.bound is not None:
                self.levels[level] += 1
                return tracker.bound
        self.levels["none"] += 1
        return None


@dataclass
class Probe:
    """One injected pilot: its shape, when, each estimator's predicted wait, and the real wait."""

    at: float
    shape: Shape
    real: float
    estimates: dict[str, float | None] = field(default_factory=dict)
    #: the row it is reported in (default: its shape's label)
    group: str = ""
    #: what the queue looked like at submission (:func:`evaluate_recorded`'s ``features``)
    features: tuple[float, ...] | None = None

    @property
    def row(self) -> str:
        return self.group or self.shape.label


class _Fanout:
    """Feeds each start to every estimator."""

    def __init__(self, estimators: Sequence[Estimator]):
        self.estimators = estimators

    def __call__(self, job: QJob, now: float) -> None:
        for est in self.estimators:
            est.observe(job, now)


def evaluate(jobs: Sequence[BgJob], policy: str, cores: int, times: Sequence[float],
             shapes: Sequence[Shape] = DEFAULT_SHAPES,
             estimators: Sequence[Estimator] | None = None) -> list[Probe]:
    """Replay ``jobs`` under ``policy`` and probe at each of ``times`` with every shape.

    Estimates are taken on the main replay's state after every event at or before the probe
    time; the real start comes from a clone with the probe in the queue.
    """
    if estimators is None:
        estimators = default_estimators()
    sim = QueueSim(jobs, policy, cores, on_start=_Fanout(estimators))
    probes: list[Probe] = []
    for at in sorted(times):
        sim.advance(at)
        for shape in shapes:
            if shape.cores > cores:
                continue
            estimates = {e.name: e.predict(sim, shape, at) for e in estimators}
            start = sim.real_start(shape, at)
            probes.append(Probe(at, shape, start - at, estimates))
    return probes


def snapshot_of(policy: Policy, now: float, site: str = "site") -> "QueueSnapshot":
    """The queue as a live site would show it (:func:`resel.sim.queuesite.policy_snapshot`)."""
    from resel.sim.queuesite import policy_snapshot

    return policy_snapshot(policy, now, site)


def twin_wait(policy: Policy, now: float, cores: int, walltime: float) -> float:
    """The twin's predicted wait (:func:`resel.models.twin.twin_start`) from the visible queue:
    every job runs its whole request, no new arrivals."""
    from resel.models.twin import twin_start

    return twin_start(snapshot_of(policy, now), cores, walltime).wait


def clairvoyant_wait(policy: Policy, now: float, cores: int, walltime: float) -> float:
    """The wait of a clairvoyant twin: the visible queue simulated forward under ``policy`` with
    every job already there ending at its *true* run time (the scheduler still plans with the
    requested times), no new arrivals. No predictor can know those run times at submission;
    this is the reference for what seeing the queue can give at best, since the only things it
    still lacks are the jobs submitted later (and a real scheduler's priorities and outages).
    Only a replay knows ``run``, so this exists for evaluations, not for live sites."""
    from resel.sim.core import Environment
    from resel.sim.queue import BatchQueue

    queue = BatchQueue(policy.name, policy.cores, Environment(now))
    for job in sorted(policy.running.values(), key=lambda j: j.id):
        queue.adopt(QJob(job.id, job.size, job.estimate, job.run, job.submit, start=job.start))
    for rank, job in enumerate(policy.queue):
        queue.submit(QJob(job.id, job.size, job.estimate, job.run, float(rank)))
    pilot = QJob(-1, cores, walltime, math.inf, float(len(policy.queue)))
    queue.submit(pilot)
    env = queue.env
    while pilot.start < 0 and len(env):
        env.step()
    if pilot.start < 0:
        raise ReselError("the clairvoyant twin ran out of events before the pilot started")
    return pilot.start - now


def default_estimators(twin: Callable[[Policy, float, int, float], float | None] | None = None
                       ) -> list[Estimator]:
    """QBETS at 0.9/0.9 and 0.95/0.95, the scheduler's estimate, and the twin if given."""
    out: list[Estimator] = [HistoryBound(0.9, 0.9), HistoryBound(0.95, 0.95), SchedulerEstimate()]
    if twin is not None:
        out.append(FunctionEstimate("twin", twin))
    return out


# ------------------------------------------------------------------------ recorded reality
@dataclass(frozen=True, slots=True)
class Recorded:
    """A trace job as it really ran: submitted, started (submit + recorded wait), ended."""

    submit: float
    start: float
    end: float
    size: int
    estimate: float


def load_recorded(jobs: Iterable[Job], cores: int) -> list[Recorded]:
    """The trace's jobs with a known wait and run that fit the site, in submit order."""
    return [r for r, _ in recorded_with_jobs(jobs, cores)]


def recorded_with_jobs(jobs: Iterable[Job], cores: int) -> list[tuple[Recorded, Job]]:
    """:func:`load_recorded`'s jobs, each beside the trace job it came from (its user, queue …)."""
    out = []
    for job in jobs:
        if job.run is None or job.run < 0 or job.wait is None or job.wait < 0:
            continue
        if job.size <= 0 or job.size > cores:
            continue
        run, estimate, _ = run_and_estimate(job)
        start = float(job.submit) + float(job.wait)
        out.append((Recorded(float(job.submit), start, start + run, int(job.size), float(estimate)), job))
    out.sort(key=lambda rj: rj[0].submit)
    return out


class _View:
    """What an estimator may look at: a policy rebuilt from the visible queue."""

    def __init__(self, policy: Policy):
        self.policy = policy


def _rebuilt_policy(policy: str, cores: int, running: list[Recorded], pending: list[Recorded],
                    now: float) -> Policy:
    """``policy`` holding the real running jobs (as started at their real starts) and the real
    pending jobs submitted in arrival order (any that fit start at once: the model cannot see
    why the real site held them). Running jobs beyond the machine (the trace's own
    inconsistencies) are left out."""
    sched = make_policy(policy, cores)
    for i, r in enumerate(running):
        if sched.free < r.size:
            continue
        job = QJob(i + 1, r.size, r.estimate, r.end - r.start, r.submit, start=r.start)
        job.resv = r.start
        sched.place_running(job)
    for i, r in enumerate(pending, len(running) + 1):     # all at this instant: one pass after them
        sched.enqueue(QJob(i, r.size, r.estimate, r.end - r.start, r.submit), now)
    sched.schedule(now)
    return sched


def coarse_label(cores: int, walltime: float) -> str:
    """A readable name for :func:`coarse_class`: e.g. ``5-8c × ≤12h``."""
    bucket, span = coarse_class(cores, walltime)
    lo, hi = (1, 1) if bucket == 0 else (2 ** (bucket - 1) + 1, 2 ** bucket)
    cores_text = f"{lo}c" if lo == hi else f"{lo}-{hi}c"
    return f"{cores_text} × {('≤1h', '≤12h', '>12h')[span]}"


def evaluate_recorded(jobs: Sequence[Recorded], policy: str, cores: int, n: int, *,
                      warmup: float = 0.1, seed: int | None = None,
                      estimators: Sequence[Estimator] | None = None,
                      features: Callable[[Policy, float, Shape, dict], tuple[float, ...]] | None = None
                      ) -> list[Probe]:
    """Judge the estimates against what really happened: the probes are ``n`` of the trace's
    own jobs, their real waits the recorded ones.

    At each probe job's submission the queue is rebuilt from the trace itself (jobs that had
    really started and not ended are running, jobs submitted before it and not yet started are
    pending, in arrival order), and the history is fed the recorded waits of the jobs that had
    really started before it. This tests the estimates against the real scheduler, with its
    priorities, node layout and outages, which no simulation reproduces; the price is that
    the probes have the trace jobs' shapes, not chosen ones.

    ``features(policy, now, shape, estimates)``, where given, describes the visible queue for a
    learned predictor (:mod:`resel.models.start_features`); it is kept with each probe.
    """
    if estimators is None:
        estimators = default_estimators()
    first = next((i for i, r in enumerate(jobs) if r.submit >= jobs[0].submit
                  + warmup * (jobs[-1].submit - jobs[0].submit)), len(jobs))
    candidates = range(first, len(jobs))
    if seed is None:
        step = max(1, len(candidates) // max(1, n))
        chosen = list(candidates[::step])[:n]
    else:
        chosen = sorted(random.Random(seed).sample(candidates, min(n, len(candidates))))
    by_start = sorted(range(len(jobs)), key=lambda i: jobs[i].start)
    fed = 0
    probes = []
    for index in chosen:
        probe = jobs[index]
        now = probe.submit
        while fed < len(by_start) and jobs[by_start[fed]].start < now:
            r = jobs[by_start[fed]]
            job = QJob(by_start[fed] + 1, r.size, r.estimate, r.end - r.start, r.submit, start=r.start)
            for est in estimators:
                est.observe(job, r.start)
            fed += 1
        running = [r for r in jobs[:index] if r.start <= now < r.end]
        pending = [r for r in jobs[:index] if r.start > now]
        view = _View(_rebuilt_policy(policy, cores, running, pending, now))
        shape = Shape(probe.size, probe.estimate)
        estimates = {e.name: e.predict(view, shape, now) for e in estimators}  # type: ignore[arg-type]
        probes.append(Probe(now, shape, probe.start - now, estimates,
                            coarse_label(probe.size, probe.estimate),
                            features(view.policy, now, shape, estimates) if features is not None else None))
    return probes


# ------------------------------------------------------------------------------------ metrics
@dataclass
class Score:
    """How one estimator did on a set of probes.

    ``coverage``: fraction of judged probes whose real wait was within the estimate (what a
    bound promises; for point estimates it shows how often they were safe). ``coverage_waited``:
    the same over probes that really waited (a zero real wait is covered by any estimate).
    ``coverage_slack``: the coverage if a miss by less than :data:`MIN_WAIT` counts as covered
    (a real scheduler starts a job a cycle after it fits: a 2 s wait against an estimate of 0
    is a miss to ``coverage`` but no matter to a pilot). ``median_ratio``/``mean_ratio``: estimate / real wait over probes that waited at least
    :data:`MIN_WAIT` (tightness: 1 is exact, above 1 pessimistic). ``median_abs_error``: seconds,
    over all judged probes, so zero waits count too.
    """

    estimator: str
    shape: str
    probes: int
    judged: int
    waited: int
    coverage: float
    coverage_waited: float
    coverage_slack: float
    median_ratio: float
    mean_ratio: float
    ratio_n: int
    median_abs_error: float
    median_real: float

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def score(probes: Sequence[Probe], estimator: str, shape: str = "all", min_wait: float = MIN_WAIT) -> Score:
    """The :class:`Score` of one estimator over ``probes``."""
    judged = [(p.estimates.get(estimator), p.real) for p in probes if p.estimates.get(estimator) is not None]
    waited = [(e, r) for e, r in judged if r > 0]
    ratios = [e / r for e, r in judged if r >= min_wait]
    nan = math.nan
    return Score(
        estimator, shape, len(probes), len(judged), sum(1 for p in probes if p.real > 0),
        sum(r <= e for e, r in judged) / len(judged) if judged else nan,
        sum(r <= e for e, r in waited) / len(waited) if waited else nan,
        sum(r < e + min_wait for e, r in judged) / len(judged) if judged else nan,
        statistics.median(ratios) if ratios else nan,
        statistics.fmean(ratios) if ratios else nan,
        len(ratios),
        statistics.median(abs(e - r) for e, r in judged) if judged else nan,
        statistics.median(p.real for p in probes) if probes else nan,
    )


def summarize(probes: Sequence[Probe], estimators: Sequence[str] | None = None) -> list[Score]:
    """Scores per estimator over all probes, then per estimator and row (shape or class),
    rows ordered by their smallest probe shape."""
    if estimators is None:
        estimators = list(dict.fromkeys(k for p in probes for k in p.estimates))
    rows: dict[str, list[Probe]] = {}
    for p in probes:
        rows.setdefault(p.row, []).append(p)
    order = sorted(rows, key=lambda r: min((coarse_class(p.shape.cores, p.shape.walltime), p.shape.cores,
                                             p.shape.walltime) for p in rows[r]))
    out = [score(probes, e) for e in estimators]
    for row in order:
        out.extend(score(rows[row], e, row) for e in estimators)
    return out


def _fmt(x: float, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if pct:
        return f"{100 * x:.0f} %"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.2f}"


def markdown(scores: Sequence[Score]) -> str:
    """Two tables: every estimator over all probes, then coverage and ratio per shape."""
    overall = [s for s in scores if s.shape == "all"]
    lines = ["| estimate | judged | coverage | coverage (waited) | coverage (+60 s) | median ratio "
             "| mean ratio | ratio n | median abs error (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in overall:
        lines.append(f"| {s.estimator} | {s.judged}/{s.probes} | {_fmt(s.coverage, True)} "
                     f"| {_fmt(s.coverage_waited, True)} | {_fmt(s.coverage_slack, True)} | {_fmt(s.median_ratio)} | {_fmt(s.mean_ratio)} "
                     f"| {s.ratio_n} | {_fmt(s.median_abs_error)} |")
    names = [s.estimator for s in overall]
    by_shape: dict[str, dict[str, Score]] = {}
    for s in scores:
        if s.shape != "all":
            by_shape.setdefault(s.shape, {})[s.estimator] = s
    lines += ["", "| shape | probes | waited | median real wait (s) | "
              + " | ".join(f"{n} cov / med ratio" for n in names) + " |",
              "|---|---:|---:|---:|" + "---:|" * len(names)]
    for label, row in by_shape.items():
        first = next(iter(row.values()))
        cells = " | ".join(f"{_fmt(row[n].coverage, True)} / {_fmt(row[n].median_ratio)}" for n in names)
        lines.append(f"| {label} | {first.probes} | {_fmt(first.waited / first.probes, True)} "
                     f"| {_fmt(first.median_real)} | {cells} |")
    return "\n".join(lines)
