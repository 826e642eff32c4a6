"""Per-job scheduling metrics and their estimators (notes/seed-000-002 §2).

wait = start − submit; response = wait + run; slowdown = response / run;
bounded slowdown(τ) = max(1, response / max(run, τ)) — τ = 10 s and 60 s by default, the two
thresholds the literature uses. Estimators: mean, median, P95 (Guim's primary one), IQR.
Each job's wait and run are kept in compact float arrays (16 bytes a job) so percentiles are exact.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from bisect import bisect_left
from itertools import compress
from operator import add, truediv


def percentile(sorted_values, q: float) -> float:
    """Linear-interpolation percentile (q in [0, 100]) of already sorted values."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def describe(values, ones: int = 0) -> dict[str, float]:
    """mean, median, p95, iqr, max and n of a sequence of numbers, and of ``ones`` more 1.0s.

    The 1.0s are placed among the sorted values, not sorted with them: the same list, hence
    the same numbers (:func:`math.fsum` is exact whatever the order), for a summary whose
    jobs mostly have a slowdown of exactly 1 (:meth:`JobStats.summary`).
    """
    data = sorted(values)
    if ones:
        at = bisect_left(data, 1.0)
        data[at:at] = [1.0] * ones
    n = len(data)
    if n == 0:
        return {"n": 0, "mean": math.nan, "median": math.nan, "p95": math.nan, "iqr": math.nan, "max": math.nan}
    return {"n": n, "mean": math.fsum(data) / n, "median": percentile(data, 50), "p95": percentile(data, 95),
            "iqr": percentile(data, 75) - percentile(data, 25), "max": data[-1]}


@dataclass
class JobStats:
    """Accumulates finished jobs; :meth:`summary` gives the estimators.

    Only each job's wait and run are kept (16 bytes a job); response, slowdowns and bounded
    slowdowns are derived from them when asked, so adding a job stays cheap.
    """

    taus: tuple[float, ...] = (10.0, 60.0)
    wait: array = field(default_factory=lambda: array("d"))
    run: array = field(default_factory=lambda: array("d"))
    killed: int = 0
    area: float = 0.0            # core-seconds of work done
    first_submit: float = math.inf
    last_end: float = -math.inf

    def add(self, submit: float, start: float, run: float, size: int, killed: bool = False) -> None:
        # resel.sim.replay.replay does the same inline, for speed: keep the two in step
        self.wait.append(start - submit)
        self.run.append(run)
        self.killed += killed
        self.area += run * size
        if submit < self.first_submit:
            self.first_submit = submit
        if start + run > self.last_end:
            self.last_end = start + run

    # the derived values are computed by map() and comprehensions over plain lists of the two
    # arrays (an array boxes a new float at every read), not a generator per job — a replay's
    # summary is a noticeable part of a whole ``resel replay`` process — with the same
    # operations in the same order as their definitions; max(a, b) is written out as a
    # comparison, which gives the same number

    @property
    def response(self) -> array:
        return array("d", _response(self.wait.tolist(), self.run.tolist()))

    @property
    def slowdown(self) -> array:
        """response / run, 1 for a job of no run time."""
        run = self.run.tolist()
        return array("d", _slowdown(_response(self.wait.tolist(), run), run))

    @property
    def bsld(self) -> dict[float, array]:
        """Bounded slowdown max(1, response / max(run, τ)) per τ."""
        run = self.run.tolist()
        response = _response(self.wait.tolist(), run)
        return {tau: array("d", _bsld(response, run, tau)) for tau in self.taus}

    def summary(self, cores: int) -> dict:
        span = self.last_end - self.first_submit
        wait, run = self.wait.tolist(), self.run.tolist()
        response = _response(wait, run)
        out = {"jobs": len(wait), "killed": self.killed,
               "utilisation": self.area / (cores * span) if span > 0 else math.nan,
               "makespan": span if span > 0 else 0.0,
               "wait": describe(wait), "response": describe(response)}
        # A job that did not wait has a slowdown and bounded slowdowns of exactly 1 (run / run;
        # run / max(run, τ) ≤ 1 raised to 1; 1 for a run of 0 by definition): only the jobs that
        # waited are divided, the others join them as that many 1.0s (83 % of wagap's jobs)
        waited = list(map(bool, wait))
        ones = waited.count(False)
        if ones:
            response, run = list(compress(response, waited)), list(compress(run, waited))
        out["slowdown"] = describe(_slowdown(response, run), ones)
        for tau in sorted(self.taus):
            out[f"bsld_{tau:g}"] = describe(_bsld(response, run, tau), ones)
        return out


def _response(wait: list[float], run: list[float]) -> list[float]:
    """wait + run of each job."""
    return list(map(add, wait, run))


def _slowdown(response: list[float], run: list[float]) -> list[float]:
    """response / run of each job, 1 for a job of no run time."""
    if not run or min(run) > 0:
        return list(map(truediv, response, run))
    return [x / r if r > 0 else 1.0 for x, r in zip(response, run)]


def _bsld(response: list[float], run: list[float], tau: float) -> list[float]:
    """max(1, response / max(run, τ)) of each job."""
    ratios = map(truediv, response, [r if r > tau else tau for r in run])     # / max(run, τ)
    return [x if x > 1.0 else 1.0 for x in ratios]                              # max(1, ·)
