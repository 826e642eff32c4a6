"""Queue-wait bounds from history, in the manner of QBETS (Nurmi, Brevik, Wolski).

A scheduler's own start estimate is a point guess that is often wrong; what a user can trust
is a *bound with a confidence*: "with 95 % confidence, at least 95 % of pilots like this one
start within B seconds". QBETS gets it without assuming any distribution: if the waits are
independent draws, the number of observed waits below the true q-quantile is Binomial(n, q),
so the k-th smallest observed wait is an upper bound of the q-quantile with confidence
P(Binomial(n, q) < k). The smallest k reaching the confidence gives the tightest bound.

Queues change (a new allocation period, a big user arrives), so old history misleads. The
:class:`WaitBounds` tracker watches how many waits in a row exceed the current bound: under a
stable queue that happens with probability (1 − q) each, so a run whose probability falls below
``alarm`` is a change point, and the history is cut to the waits since it began.
"""

from __future__ import annotations

import math
from bisect import insort
from dataclasses import dataclass, field
from functools import lru_cache


def _log_pmf(i: int, n: int, q: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(q) + (n - i) * math.log1p(-q))


def binomial_cdf_below(k: int, n: int, q: float) -> float:
    """P(X < k) for X ~ Binomial(n, q).

    Summed downward from i = k − 1 by the ratio pmf(i − 1)/pmf(i), stopping once below the mode
    the terms no longer change the sum: only O(√n) terms count, so a tracker that asks for
    every n up to thousands stays fast, and log-space start values keep large n from underflowing.
    """
    if k <= 0:
        return 0.0
    if k > n:
        return 1.0
    i = k - 1
    term = math.exp(_log_pmf(i, n, q))
    total = 0.0
    ratio_base = (1 - q) / q
    mode = (n + 1) * q
    while i >= 0:
        total += term
        if i < mode and term <= total * 1e-17:
            break
        term *= i / (n - i + 1) * ratio_base      # pmf(i - 1) from pmf(i)
        i -= 1
        if term == 0.0 and i < mode:
            break
    return min(1.0, total)


@lru_cache(maxsize=65536)
def bound_index(n: int, quantile: float, confidence: float) -> int | None:
    """The 1-based rank k of the order statistic bounding the quantile, or None if n is too small.

    Cached: a running tracker asks for every n in turn, and every shape class asks again.
    """
    if not (0.0 < quantile < 1.0 and 0.0 < confidence < 1.0):
        raise ValueError("quantile and confidence must be strictly between 0 and 1")
    if n < 1 or quantile ** n > 1 - confidence:
        return None          # even the largest wait is not a bound: P(X < n) = 1 - q**n
    # start near the normal approximation, then step with pmf(k) = P(X < k + 1) - P(X < k)
    k = min(n, max(1, int(n * quantile + math.sqrt(n * quantile * (1 - quantile))) - 3))
    below = binomial_cdf_below(k, n, quantile)
    while k > 1:
        lower = below - math.exp(_log_pmf(k - 1, n, quantile))
        if lower < confidence:
            break
        k, below = k - 1, lower
    while below < confidence and k <= n:
        below += math.exp(_log_pmf(k, n, quantile))
        k += 1
    if below < confidence:
        return None
    return k


def min_history(quantile: float, confidence: float) -> int:
    """The fewest observations for which any bound exists: quantile**n <= 1 - confidence."""
    return math.ceil(math.log(1 - confidence) / math.log(quantile))


def upper_bound(waits: list[float], quantile: float = 0.95, confidence: float = 0.95) -> float | None:
    """Upper bound of the ``quantile`` of the waits, with ``confidence``; None if too few."""
    ordered = sorted(waits)
    k = bound_index(len(ordered), quantile, confidence)
    return None if k is None else ordered[k - 1]


@dataclass
class WaitBounds:
    """A running QBETS bound for one site and shape class, with change-point trimming.

    Feed it waits in submission order with :meth:`observe`; :attr:`bound` is the bound to
    predict with *before* the next observation. ``alarm`` is the probability under which a run
    of consecutive exceedances is taken as a change in the queue.
    """

    quantile: float = 0.95
    confidence: float = 0.95
    alarm: float = 0.01
    history: list[float] = field(default_factory=list)   # in arrival order
    _sorted: list[float] = field(default_factory=list, repr=False)
    misses: int = 0
    changes: int = 0
    bound: float | None = None

    def observe(self, wait: float) -> None:
        if self.bound is not None and wait > self.bound:
            self.misses += 1
            if (1 - self.quantile) ** self.misses < self.alarm and len(self.history) > self.misses:
                # a change point: keep the misses before this one (this one is appended below);
                # the wait just before the run belongs to the old queue and goes too
                self.history = self.history[len(self.history) - (self.misses - 1):]
                self._sorted = sorted(self.history)
                self.changes += 1
        else:
            self.misses = 0
        self.history.append(wait)
        insort(self._sorted, wait)
        k = bound_index(len(self._sorted), self.quantile, self.confidence)
        self.bound = None if k is None else self._sorted[k - 1]


def coverage(waits: list[float], quantile: float = 0.95, confidence: float = 0.95,
             alarm: float = 0.01) -> dict[str, float]:
    """Replay a wait sequence: how often the bound held, and how tight it was.

    Each wait is predicted with the bound made from the waits before it (walk-forward, no peeking).
    """
    tracker = WaitBounds(quantile, confidence, alarm)
    hits = judged = 0
    ratios: list[float] = []
    for w in waits:
        if tracker.bound is not None:
            judged += 1
            hits += w <= tracker.bound
            if w > 0:
                ratios.append(tracker.bound / w)
        tracker.observe(w)
    ratios.sort()
    return {"judged": judged, "coverage": hits / judged if judged else math.nan,
            "median_bound_over_wait": ratios[len(ratios) // 2] if ratios else math.nan,
            "change_points": tracker.changes}
