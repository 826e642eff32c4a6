"""When will the bag be done, and how sure is that? Finish-time distributions (issue 16 item 4).

A site's share of the bag is done at

    F = W + Σ_waves  T̂x · max_{tasks of the wave} ρ_task

— the pilot's wait W, then the waves of tasks its slots run (the same decomposition as
:func:`resel.selection.predicted_ttc`, whose point value is W + ⌈n / k⌉ · T̂x), each wave as
long as its slowest task. The two uncertain parts are drawn by simulation (the stated rule):

* W from the wait's quantile function: the conditioned predictor's quantiles
  (:mod:`resel.models.conditioned`) interpolated, an empirical wait history, or a constant
  when nothing is known of the wait's spread;
* ρ from the site's runtime ratios measured / predicted (:mod:`resel.models.runtime`),
  independently per task: the maximum of m draws is drawn directly as the ratios' quantile at
  U^(1/m) (the maximum of m independent uniforms is distributed as U^(1/m)), so a wave costs one
  draw whatever its width. Without ratios every task takes T̂x.

Waits, and tasks on different sites, are independent. The whole plan is done when its last
origin site is: F_plan = max over sites of F_site, drawn jointly from the same samples.
Percentiles come from ``samples`` draws with a seeded generator (default 4,000: a P90's sampling
error is then ~0.5 percentile point), so the same inputs always give the same numbers.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from resel.models.runtime import quantile

SAMPLES = 4000
PS = (0.05, 0.5, 0.9, 0.95)


@dataclass(frozen=True, slots=True)
class FinishQuantiles:
    """Percentiles of a finish time (seconds from now)."""

    p05: float
    p50: float
    p90: float
    p95: float

    def as_dict(self) -> dict:
        return {"p05": self.p05, "p50": self.p50, "p90": self.p90, "p95": self.p95}


def quantiles_of(samples: Sequence[float]) -> FinishQuantiles:
    s = sorted(samples)
    return FinishQuantiles(*(quantile(s, p) for p in PS))


WaitLaw = Callable[[float], float]


def constant(w: float) -> WaitLaw:
    return lambda _u: w


def empirical(waits: Sequence[float]) -> WaitLaw:
    """The quantile function of observed waits (e.g. a drawn-wait site's history)."""
    s = sorted(waits)
    return lambda u: quantile(s, u)


#: draws of one pilot's wait + run time a pool's widest wave picks its latest from
POOL_DRAWS = 16384


def share_samples(wait: WaitLaw, tx: float, ratios: Sequence[float], tasks: int, slots: int,
                  rng: random.Random, samples: int = SAMPLES, *, data: Any = None,
                  own_waits: bool = False, waves: Sequence[int] | None = None) -> list[float]:
    """Draws of one site's share finish time F (see the module docstring).

    ``data`` (a :class:`~resel.transfer.DataTimes`) adds the share's data times as
    :func:`resel.selection.predicted_ttc` counts them: the shared inputs before the first wave,
    each task's own inputs in its wave, the last wave's outputs home after it.

    ``own_waits``: the slots are a pool's one-task pilots, each waiting on its own (a wave of m
    of them ends with the latest of m draws of W + ρ·T̂x, drawn as the quantile at U^(1/m) of
    :data:`POOL_DRAWS` such sums); otherwise one pilot's wait precedes all its waves.

    ``waves``: the tasks of each wave, given (a pilot packing tasks of several widths,
    :func:`resel.planning.packed_share`: its waves' worth of ``tx`` each); None: ⌈tasks /
    slots⌉ waves of ``slots`` tasks.
    """
    if tasks <= 0:
        return [0.0] * samples
    if waves is None:
        slots = max(1, min(slots, tasks))
        waves = []
        left = tasks
        while left > 0:
            waves.append(min(slots, left))
            left -= waves[-1]
    own_in, before, after = (0.0, 0.0, 0.0) if data is None else (data.own_in, data.shared_in, data.out)
    s = sorted(ratios)
    out = []
    if own_waits:
        one = sorted(max(0.0, wait(rng.random())) + tx * (quantile(s, rng.random()) if s else 1.0)
                     for _ in range(POOL_DRAWS))
        for _ in range(samples):
            out.append(before + after + sum(own_in + quantile(one, rng.random() ** (1.0 / m)) for m in waves))
        return out
    for _ in range(samples):
        w = max(0.0, wait(rng.random()))
        if s:
            run = sum(own_in + tx * quantile(s, rng.random() ** (1.0 / m)) for m in waves)
        else:
            run = (tx + own_in) * len(waves)
        out.append(w + before + run + after)
    return out


def pool_starts(durations: Sequence[float], slots: int) -> list[float]:
    """When each of a pool's tasks starts, waiting in this order, on ``slots`` one-task pilots
    at a time: each task takes the first slot to free (a pool runs 500 pilots at a time and
    starts the next waiting task's pilot as one ends, not in lockstep waves)."""
    free = [0.0] * max(1, min(slots, len(durations)))
    heapq.heapify(free)
    out = []
    for d in durations:
        start = heapq.heappop(free)
        out.append(start)
        heapq.heappush(free, start + d)
    return out


#: grid points the latest task end's distribution is tabulated on (a pool of several sizes)
POOL_GRID = 512


def pool_share_samples(wait: WaitLaw, txs: Sequence[float], ratios: Sequence[float], slots: int,
                       rng: random.Random, samples: int = SAMPLES, *, data: Any = None) -> list[float]:
    """Draws of a pool's share finish when its tasks differ in size (a task table): each task
    ``i`` its own T̂x ``txs[i]``, in the order they wait, on ``slots`` one-task pilots at a time.

    Task i starts at s_i, when the point schedule (:func:`pool_starts` of wait + own inputs +
    T̂x each) frees a slot, and ends at s_i + own inputs + W_i + T̂x_i · ρ_i, its own pilot's
    wait and slot drawn independently. The share ends with the latest task:
    P(F ≤ t) = Π_i P(W + T̂x_i · ρ ≤ t − s_i − own inputs), tabulated and drawn by inversion.
    Why not the bag's mean T̂x in waves of ``slots``: with sizes over two decades the share's
    end is set by its few largest tasks, each on a slot of its own; the mean said 45 ks where
    the runs' pool ended at 57 ks (docs/queue-aware.md, "A bag of several widths"). Why not each
    wave at its largest task on the wave's slowest slot: the largest task seldom gets the
    slowest slot, and the next tasks start as slots free — that said 71 ks for the same share.
    """
    if not txs:
        return [0.0] * samples
    own_in, before, after = (0.0, 0.0, 0.0) if data is None else (data.own_in, data.shared_in, data.out)
    w_point = max(0.0, wait(0.5))
    starts = pool_starts([w_point + own_in + tx for tx in txs], slots)
    s = sorted(ratios) if ratios else [1.0]
    k = min(POOL_DRAWS, 2048)
    w_draws = [max(0.0, wait(rng.random())) for _ in range(k)]
    r_draws = [quantile(s, rng.random()) for _ in range(k)]
    lo_w, hi_w, lo_r, hi_r = min(w_draws), max(w_draws), min(r_draws), max(r_draws)
    # a task can be the latest only if its latest end passes every task's earliest end
    floor = max(st + own_in + lo_w + tx * lo_r for st, tx in zip(starts, txs))
    live = [(st + own_in, tx) for st, tx in zip(starts, txs) if st + own_in + hi_w + tx * hi_r >= floor]
    top = max(st + hi_w + tx * hi_r for st, tx in live)
    import numpy as np          # (a share of hundreds of tasks: 0.1 s, where pure Python took 3 s)
    grid_a = np.linspace(floor, top, POOL_GRID)
    w_a, r_a = np.asarray(w_draws), np.asarray(r_draws)
    log_cdf = np.zeros(POOL_GRID)
    with np.errstate(divide="ignore"):
        for st, tx in live:
            ends = np.sort(w_a + tx * r_a)
            log_cdf += np.log(np.searchsorted(ends, grid_a - st, side="right") / k)
    grid, cdf = grid_a.tolist(), np.exp(log_cdf).tolist()
    out = []
    for _ in range(samples):
        u = rng.random()
        j = bisect.bisect_left(cdf, u)
        if j <= 0:
            t = grid[0]
        elif j >= len(grid):
            t = grid[-1]
        else:
            c0, c1 = cdf[j - 1], cdf[j]
            t = grid[j - 1] + (grid[j] - grid[j - 1]) * ((u - c0) / (c1 - c0) if c1 > c0 else 1.0)
        out.append(before + t + after)
    return out


def share_finish(wait: WaitLaw, tx: float, ratios: Sequence[float], tasks: int, slots: int, *,
                 seed: int | str = 0, samples: int = SAMPLES) -> FinishQuantiles:
    return quantiles_of(share_samples(wait, tx, ratios, tasks, slots, random.Random(f"finish:{seed}"), samples))


def plan_finish(shares: Mapping[str, list[float]]) -> FinishQuantiles | None:
    """The plan's finish time: the latest of its sites' shares, sample by sample."""
    lists = [v for v in shares.values() if v]
    if not lists:
        return None
    n = min(len(v) for v in lists)
    return quantiles_of([max(v[i] for v in lists) for i in range(n)])


def wait_law_from_quantiles(qs: Sequence[tuple[float, float]]) -> WaitLaw:
    """Linear interpolation between known (p, wait) points; flat beyond the outermost ones.

    Between p = 0 and the first point and beyond the last the wait is held at the nearest
    point: a stated simplification (tails beyond P5/P95 are not modelled).
    """
    pts = sorted(qs)

    def law(u: float) -> float:
        if u <= pts[0][0]:
            return pts[0][1]
        for (p0, w0), (p1, w1) in zip(pts, pts[1:]):
            if u <= p1:
                return w0 + (w1 - w0) * (u - p0) / (p1 - p0) if p1 > p0 else w1
        return pts[-1][1]

    return law


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def grid(law: WaitLaw | Sequence[float], k: int = 50) -> list[float]:
    """``k`` equiprobable values of a law (its quantiles at (i + ½) / k), from a quantile
    function or from ascending samples."""
    if callable(law):
        return [law((i + 0.5) / k) for i in range(k)]
    s = list(law)
    return [quantile(s, (i + 0.5) / k) for i in range(k)] if s else [0.0] * k


def sum_quantiles(a: Sequence[float], b: Sequence[float], ps: Sequence[float] = PS) -> list[float]:
    """Quantiles of A + B for independent A, B each given by equiprobable grid values: every
    pair weighs alike (a deterministic stand-in for sampling, used where many finish times are
    predicted, e.g. the coverage evaluation)."""
    sums = sorted(x + y for x in a for y in b)
    return [quantile(sums, p) for p in ps]
