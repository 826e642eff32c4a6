"""Coverage of the conditioned wait predictor and of finish-time intervals on replayed traces
(issue 16 item 5).

The probes — pilots injected into a replayed trace (simulated reality) or the trace's own jobs
judged against their recorded waits (recorded reality) — come from :mod:`resel.sim.wait_eval`,
through its public functions only (``evaluate``, ``evaluate_recorded`` and their estimators):
this module adds what happens after, so it keeps working whatever event loop produces them.

For each probe, in submission order (:func:`resel.models.conditioned.walk_forward`):

* the **conditioned** predictor starts from the base point estimate (the twin's or the
  scheduler's) and corrects it with the errors that estimate made on the probes that had
  already started — its 5/50/90/95 % quantiles;
* the **wait interval** is [P5, P95]; covered when the real wait lies inside it;
* the **±10 min hit** of a point prediction: |prediction − real| ≤ 600 s, for the conditioned
  median, for the conditioned law's likeliest 20-minute window
  (:meth:`~resel.models.conditioned.WaitQuantiles.likeliest`, the point this metric rewards),
  and for the base estimate itself and the scheduler's own answer;
* the **finish time** of a pilot's first wave: F = W + T̂x · max over its tasks of ρ, with ρ
  the run-time ratios measured / predicted — one task (the default, ``wave=1``) or one task per
  core of the pilot (``wave="cores"``: the plan's rule for a full wave, whose maximum reaches
  far into the ratios' tail). Predicted: the conditioned wait's
  quantiles combined with the calibration residuals (:func:`resel.models.finish.sum_quantiles`);
  real: the probe's real wait plus T̂x times the maximum of held-out ratios drawn for its
  tasks (seeded per probe). Both ratio sets come from real GROMACS runs on this machine
  (``benchmarks/eval_gromacs_runtime.py`` writes them), so the finish time joins a real wait
  and real run-time errors.

Everything is reported for all probes and separately for the probes that really waited (a zero
wait sits inside almost any interval).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from resel.models.conditioned import Case, WaitQuantiles, walk_forward
from resel.models.finish import grid, sum_quantiles
from resel.models.runtime import quantile
from resel.sim import wait_eval as we

HIT = 600.0             # ±10 minutes
PS = (0.05, 0.5, 0.9, 0.95)
#: a finer grid of the conditioned wait, for combining with the run time
GRID_PS = tuple(round(0.02 * i, 2) for i in range(1, 50))
GRID_PS = tuple(sorted(set(GRID_PS + (0.01, 0.05, 0.5, 0.9, 0.95, 0.99))))


def estimators(quantile_: float = 0.9, confidence: float = 0.9, *, clairvoyant: bool = False) -> list[Any]:
    """The base estimates the evaluation needs: the scheduler's, the twin's, and the QBETS
    bound as the history-only reference; with ``clairvoyant`` also the clairvoyant twin
    (:func:`resel.sim.wait_eval.clairvoyant_wait`: the queue with true run times, a reference)."""
    out = [we.SchedulerEstimate(), we.FunctionEstimate("twin", we.twin_wait),
           we.HistoryBound(quantile_, confidence)]
    if clairvoyant:
        out.append(we.FunctionEstimate("clairvoyant", we.clairvoyant_wait))
    return out


def queue_features(clock_offset: float = 0.0):
    """The probe's :data:`resel.models.start_features.FEATURES`, from the queue a live site
    would show (:func:`resel.sim.wait_eval.snapshot_of`) and the estimates made on it."""
    from resel.models.start_features import snapshot_features

    def features(policy: Any, now: float, shape: Any, estimates: dict) -> tuple[float, ...]:
        return snapshot_features(we.snapshot_of(policy, now), shape.cores, shape.walltime,
                                 estimates.get("twin"), estimates.get("scheduler"), clock_offset=clock_offset)
    return features


def recorded_probes(jobs: Sequence[Any], policy: str, cores: int, n: int | None = None, *,
                    warmup: float = 0.1, quantile_: float = 0.9, confidence: float = 0.9,
                    hits: bool = False, clock_offset: float = 0.0) -> list[Any]:
    """The trace's own jobs as probes, judged against their recorded waits (every job after the
    warm-up unless ``n``): the conditioned predictor learns from all of them as they start.
    ``hits`` adds what the ±10-minute comparison needs (:mod:`resel.sim.hit_eval`): the clairvoyant
    twin's estimate and the queue's features (time of day from ``clock_offset``)."""
    n = len(jobs) if n is None else n
    return we.evaluate_recorded(jobs, policy, cores, n, warmup=warmup,
                                estimators=estimators(quantile_, confidence, clairvoyant=hits),
                                features=queue_features(clock_offset) if hits else None)


def simulated_probes(jobs: Sequence[Any], policy: str, cores: int, points: int,
                     shapes: Sequence[Any] = we.DEFAULT_SHAPES, *, warmup: float = 0.1, seed: int | None = None,
                     quantile_: float = 0.9, confidence: float = 0.9) -> list[Any]:
    """Probe pilots injected into the replay at ``points`` instants × ``shapes``."""
    times = we.injection_times(jobs, points, warmup=warmup, seed=seed)
    return we.evaluate(jobs, policy, cores, times, shapes, estimators(quantile_, confidence))


@dataclass
class Row:
    """One probe after the walk-forward."""

    at: float
    cores: int
    walltime: float
    real: float
    base: float | None                     # the point estimate the predictor started from
    scheduler: float | None
    qbets: float | None
    cond: WaitQuantiles | None
    finish_real: float | None = None
    finish_pred: list[float] | None = None  # P5, P50, P90, P95


def conditioned_rows(probes: Sequence[Any], base: str = "twin", *, qbets: str = "qbets-0.9/0.9",
                     min_errors: int = 20, window: int = 1000) -> list[Row]:
    """Walk forward over the probes with ``base`` as the point estimate to correct."""
    cases = [Case(p.at, p.shape.cores, p.shape.walltime, p.estimates.get(base), p.real) for p in probes]
    out = []
    for (case, wq), p in zip(walk_forward(cases, GRID_PS, min_errors=min_errors, window=window),
                             sorted(probes, key=lambda p: p.at)):
        out.append(Row(case.at, case.cores, case.walltime or 0.0, case.real, case.estimate,
                       p.estimates.get("scheduler"), p.estimates.get(qbets), wq))
    return out


def add_finish(rows: Sequence[Row], train_ratios: Sequence[float], test_ratios: Sequence[float], tx: float,
               *, seed: int = 0, k: int = 50, wave: int | str = 1) -> None:
    """Predicted and real finish times of a first wave of tasks of T̂x = ``tx`` per probe: ``wave``
    tasks, or (``"cores"``) one per core of the probe."""
    train = sorted(train_ratios)
    test = list(test_ratios)
    for i, r in enumerate(rows):
        if r.cond is None:
            continue
        m = max(1, r.cores) if wave == "cores" else int(wave)
        run_grid = [tx * quantile(train, ((j + 0.5) / k) ** (1.0 / m)) for j in range(k)]
        wait_grid = grid(r.cond.sample, k)
        r.finish_pred = sum_quantiles(wait_grid, run_grid, PS)
        rng = random.Random(f"{seed}:{i}")
        r.finish_real = r.real + tx * max(rng.choice(test) for _ in range(m))


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


@dataclass
class Scores:
    """The numbers of one table row (all shares are fractions; times seconds)."""

    subset: str
    probes: int
    predicted: int
    wait_cov90: float               # real in [P5, P95]
    wait_cov_p90: float             # real <= P90 (the one-sided bound)
    wait_width_med: float
    qbets_cov: float                # the history bound's coverage on the same probes
    hit_cond: float                 # |P50 − real| <= 10 min
    hit_likeliest: float            # |centre of the likeliest 20-min window − real| <= 10 min
    hit_base: float                 # |base estimate − real| <= 10 min
    hit_scheduler: float
    finish_cov90: float = math.nan
    finish_width_med: float = math.nan
    finish_n: int = 0
    levels: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def score(rows: Sequence[Row], subset: str = "all") -> Scores:
    pred = [r for r in rows if r.cond is not None]
    cov = [r.cond.at(0.05) <= r.real <= r.cond.at(0.95) for r in pred]
    one = [r.real <= r.cond.at(0.9) for r in pred]
    width = [r.cond.at(0.95) - r.cond.at(0.05) for r in pred]
    qb = [r.real <= r.qbets for r in pred if r.qbets is not None]
    hit_c = [abs(r.cond.at(0.5) - r.real) <= HIT for r in pred]
    hit_l = [abs(r.cond.likeliest(HIT) - r.real) <= HIT for r in pred]
    hit_b = [abs(r.base - r.real) <= HIT for r in pred if r.base is not None]
    hit_s = [abs(r.scheduler - r.real) <= HIT for r in pred if r.scheduler is not None]
    fin = [r for r in pred if r.finish_pred is not None]
    fcov = [r.finish_pred[0] <= r.finish_real <= r.finish_pred[3] for r in fin]
    fwid = [r.finish_pred[3] - r.finish_pred[0] for r in fin]
    levels: dict[str, int] = {}
    for r in pred:
        levels[r.cond.level] = levels.get(r.cond.level, 0) + 1
    return Scores(subset, len(rows), len(pred), _share(cov), _share(one), _median(width), _share(qb),
                  _share(hit_c), _share(hit_l), _share(hit_b), _share(hit_s), _share(fcov), _median(fwid), len(fin), levels)


def scores(rows: Sequence[Row]) -> list[Scores]:
    """All probes, the probes that waited (> 0 s), and those that waited at least 10 minutes."""
    return [score(rows, "all"), score([r for r in rows if r.real > 0], "waited"),
            score([r for r in rows if r.real >= HIT], "waited ≥ 10 min")]


def _pct(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f} %"


def _dur(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x / 3600:.2f} h" if x >= 7200 else f"{x / 60:.1f} min" if x >= 120 else f"{x:.0f} s"


def markdown(table: Sequence[tuple[str, Scores]]) -> str:
    """One row per (label, scores)."""
    lines = ["| case | probes | predicted | 90 % wait interval covers | median width | P90 covers "
             "| QBETS 0.9/0.9 covers | ±10 min: conditioned P50 | ±10 min: conditioned likeliest "
             "| ±10 min: base estimate | ±10 min: scheduler | 90 % finish interval covers | median width |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, s in table:
        lines.append(f"| {label} ({s.subset}) | {s.probes} | {s.predicted} | {_pct(s.wait_cov90)} "
                     f"| {_dur(s.wait_width_med)} | {_pct(s.wait_cov_p90)} | {_pct(s.qbets_cov)} | {_pct(s.hit_cond)} "
                     f"| {_pct(s.hit_likeliest)} "
                     f"| {_pct(s.hit_base)} | {_pct(s.hit_scheduler)} | {_pct(s.finish_cov90)} "
                     f"| {_dur(s.finish_width_med)} |")
    return "\n".join(lines)
