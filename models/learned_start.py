"""A job's start predicted for the ±10-minute hit, learned from the site's history (issue 16
item 5).

The ±10-minute hit rewards the *mode* of the wait law, not its median: a prediction c hits a
real wait w when |c − w| ≤ 10 min, so the best point is the centre of the 20-minute window
holding the most probability. Waits are never negative, so a window is never better placed
below [0, 20 min]: the smallest useful prediction is 10 minutes, which hits every job that
starts within 20 (``always now`` hits only those within 10).

The law is estimated from the site's past jobs that resemble this one
(:data:`resel.models.start_features.FEATURES`: the twin's and the scheduler's estimates, the
free cores, the work queued and running, the job's size and request, the time of day) — its
nearest neighbours in those features, the distance also growing with the neighbour's age so a
drifting site is followed — shrunk towards the site's recent waits (a handful of neighbours
says little about a 20-minute window). The point is the centre of the window that holds the
most neighbours plus ``prior`` × the share of recent waits it holds, moved to the middle of the
waits it holds (it still holds them all, and a wait a little off them is likelier caught).

How many neighbours, how much shrinkage and how much age counts is itself learnt, never tuned
on the jobs being predicted: every configuration of :data:`CONFIGS` predicts every job, each is
scored on the jobs that have *started* so far (prequential), and the prediction given is the
one of the configuration that has hit most often until then.

Only what was known at the job's submission enters: a past job teaches once it has started
(its wait is then known); callers feed :meth:`LearnedStart.observe` at start times, as
:func:`walk_forward` does. numpy (declared in the ``test`` extra: no command imports this module,
only the evaluation :mod:`resel.sim.hit_eval`, its benchmark and tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

#: half the hit window: ±10 minutes
HALF = 600.0
#: seconds in the unit of age (a week): with recency r, a neighbour one week older is as far
#: as one standard deviation further off in r features
WEEK = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class Config:
    """One way to read the neighbours: ``k`` of them, ``prior`` weight of the site's recent
    waits, ``recency`` (distance per week of age)."""

    k: int
    prior: float
    recency: float

    @property
    def label(self) -> str:
        return f"k={self.k}, prior={self.prior:g}, recency={self.recency:g}"


#: the configurations learnt between; the first is taken until the others have a record
CONFIGS: tuple[Config, ...] = tuple(Config(k, a, r) for a in (2.0, 0.5, 0.0) for k in (200, 50) for r in (0.0, 1.0))


@dataclass(frozen=True, slots=True)
class StartPrediction:
    """The predicted wait (``point``, seconds after submission), the estimated probability
    that the real wait lies within ±10 minutes of it (``mass``), the configuration that made
    it, the past jobs it was learnt from, and every configuration's own point (for
    :meth:`LearnedStart.judge`)."""

    point: float
    mass: float
    config: Config | None            # None: too little history, the default point
    n: int
    points: tuple[float, ...]


def _in_windows(sorted_values: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """How many values lie within ±HALF of each centre."""
    return (np.searchsorted(sorted_values, centres + HALF, side="right")
            - np.searchsorted(sorted_values, centres - HALF, side="left"))


class LearnedStart:
    """Past jobs of one site (their features at submission and their waits) and the
    configurations' records; :meth:`predict` a new job's start.

    ``window``: the latest past jobs searched for neighbours; ``recent``: the latest waits that
    form the prior; ``min_cases``: past jobs needed before predicting (the features' scales are
    fixed from the first ``min_cases``, so nothing later leaks into them).
    """

    def __init__(self, *, window: int = 5000, recent: int = 2000, min_cases: int = 200,
                 configs: Sequence[Config] = CONFIGS):
        if not configs:
            raise ValueError("at least one configuration")
        self.window, self.recent, self.min_cases = window, recent, min_cases
        self.configs = tuple(configs)
        self.kmax = max(c.k for c in self.configs)
        self._x = np.empty((0, 0))            # features, one row per past job (capacity grows)
        self._at = np.empty(0)
        self._wait = np.empty(0)
        self._n = 0
        self.scale: np.ndarray | None = None
        #: per configuration, hits among the judged jobs
        self.hits = [0] * len(self.configs)
        self.judged = 0

    def __len__(self) -> int:
        return self._n

    def observe(self, features: Sequence[float], at: float, wait: float) -> None:
        """A past job started: its features when it was submitted at ``at``, and its wait."""
        row = np.asarray(features, dtype=float)
        n = self._n
        if n and row.shape != (self._x.shape[1],):
            raise ValueError(f"expected {self._x.shape[1]} features, got {row.size}")
        if not np.isfinite(row).all():
            raise ValueError(f"features must be finite numbers, not {tuple(features)!r}")
        if n == len(self._wait):                       # full: double the capacity
            cap = max(256, 2 * n)
            x = np.empty((cap, row.size))
            if n:
                x[:n] = self._x[:n]
            self._x = x
            self._at = np.resize(self._at, cap)
            self._wait = np.resize(self._wait, cap)
        self._x[n], self._at[n], self._wait[n] = row, float(at), max(0.0, float(wait))
        self._n = n + 1
        if self.scale is None and self._n >= self.min_cases:
            sd = self._x[:self._n].std(axis=0)
            self.scale = np.where(sd > 1e-9, sd, 1.0)

    def judge(self, prediction: StartPrediction, wait: float) -> None:
        """Score every configuration on one job that has now started (call it at its start,
        with the prediction made at its submission)."""
        self.judged += 1
        for i, c in enumerate(prediction.points):
            if abs(c - wait) <= HALF:
                self.hits[i] += 1

    def best(self) -> int:
        """The configuration that has hit most often so far (the first one on a tie)."""
        return max(range(len(self.configs)), key=lambda i: (self.hits[i], -i))

    def predict(self, features: Sequence[float], at: float) -> StartPrediction:
        """The start most likely within ±10 minutes for a job submitted at ``at`` with these
        features. Before ``min_cases`` past jobs: 10 minutes (the smallest useful prediction,
        the best one where nothing is known but that waits are never negative)."""
        n = self._n
        if n < self.min_cases or self.scale is None:
            return StartPrediction(HALF, float("nan"), None, n, (HALF,) * len(self.configs))
        lo = max(0, n - self.window)
        waits = self._wait[lo:n]
        q = np.asarray(features, dtype=float)
        base = (((self._x[lo:n] - q) / self.scale) ** 2).sum(axis=1)
        age2 = ((at - self._at[lo:n]) / WEEK) ** 2
        recent = np.sort(self._wait[max(0, n - self.recent):n])
        kmax = min(self.kmax, len(waits))
        orders: dict[float, np.ndarray] = {}
        points, masses = [], []
        for cfg in self.configs:
            order = orders.get(cfg.recency)
            if order is None:
                d = base + cfg.recency ** 2 * age2 if cfg.recency else base
                part = np.argpartition(d, kmax - 1)[:kmax] if kmax < len(d) else np.arange(len(d))
                order = orders[cfg.recency] = part[np.argsort(d[part], kind="stable")]
            near = np.sort(waits[order[:min(cfg.k, kmax)]])
            centres = np.unique(np.maximum(HALF, np.concatenate((near, recent)) + HALF))
            score = _in_windows(near, centres) / len(near)
            if cfg.prior:
                score = (score + cfg.prior * _in_windows(recent, centres) / len(recent)) / (1.0 + cfg.prior)
            c = float(centres[int(np.argmax(score))])
            # centre the window on the waits it holds: it keeps them all (they span at most
            # 20 minutes) and is the least sensitive to a wait a little off them
            both = np.concatenate((near, recent)) if cfg.prior else near
            held = both[(both >= c - HALF) & (both <= c + HALF)]
            c = max(HALF, 0.5 * (float(held.min()) + float(held.max())))
            mass = float(_in_windows(near, np.array([c]))[0]) / len(near)
            if cfg.prior:
                mass = (mass + cfg.prior * float(_in_windows(recent, np.array([c]))[0]) / len(recent)) / (1 + cfg.prior)
            points.append(c)
            masses.append(mass)
        b = self.best()
        return StartPrediction(points[b], masses[b], self.configs[b], n, tuple(points))


@dataclass(frozen=True, slots=True)
class Case:
    """One past or probe job: submitted ``at`` with ``features``, started ``real`` s later."""

    at: float
    features: tuple[float, ...]
    real: float


def walk_forward(cases: Iterable[Case], **options) -> list[tuple[Case, StartPrediction]]:
    """Predict every case from the cases that had *started* before its submission, in
    submission order (the split is by time: a job is predicted only from earlier jobs, and the
    configuration choice only from their outcomes). ``options`` go to :class:`LearnedStart`."""
    ordered = sorted(cases, key=lambda c: c.at)
    by_start = sorted(range(len(ordered)), key=lambda i: ordered[i].at + ordered[i].real)
    model = LearnedStart(**options)
    made: dict[int, StartPrediction] = {}
    fed = 0
    out: list[tuple[Case, StartPrediction]] = []
    for i, c in enumerate(ordered):
        while fed < len(by_start) and ordered[by_start[fed]].at + ordered[by_start[fed]].real < c.at:
            j = by_start[fed]
            d = ordered[j]
            if j in made:
                model.judge(made.pop(j), d.real)
            model.observe(d.features, d.at, d.real)
            fed += 1
        pred = model.predict(c.features, c.at)
        made[i] = pred
        out.append((c, pred))
    return out
