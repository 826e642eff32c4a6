"""When will a job start if it does not start at once? Quantiles of a long wait, learned from
the site's past jobs (issue 26 item 6).

Waits that matter are the long ones: a pilot that starts within minutes costs a plan nothing,
one that waits hours decides it. This predictor answers, at a job's submission, "if it waits at
least :data:`MIN_WAIT` (10 minutes), when will it start?" — the quantiles of its wait *given*
that it waits that long — and is judged on the jobs that did (:mod:`resel.sim.start_eval`).

The model: ln(wait) is linear in what the queue shows at submission
(:data:`resel.models.start_features.FEATURES`, and the queue's history of
:class:`resel.sim.start_eval.History`: how long the jobs still pending have waited so far, the user's own
pending jobs and recent waits, the site's recent waits), fitted by weighted ridge least squares
on the past jobs that waited at least 10 minutes, each weighted by its age (a half-life, so a
drifting site is followed). The wait's p-quantile is exp(μ + r_p), r_p the p-quantile of the
residuals of the :data:`LOCAL` recent past jobs whose fitted value is nearest μ, floored at
:data:`MIN_WAIT`.

Everything is learnt from jobs that had *started* before the prediction (their waits known):
callers feed :meth:`StartQuantiles.observe` at start times (:func:`walk_forward` does). Two
things are then chosen or corrected online, never tuned on the jobs predicted:

* the configuration (half-life and ridge, :data:`CONFIGS`): each one predicts every job, each
  is scored by its pinball loss on the jobs that have started so far (prequential), and the
  prediction given is the one of the configuration with the lowest loss until then;
* the levels at which the P10, P50 and P90 are read: adaptive conformal inference (Gibbs &
  Candès 2021), each judged outcome of a job that waited at least 10 minutes moving the level
  by :data:`GAMMA` · (miss − target), so the P90 covers 90 % of such jobs over time however the
  residuals drift.

numpy only (the ``test`` extra: the evaluation and its benchmark import it; no command does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

#: the waits this predictor is about: at least 10 minutes
MIN_WAIT = 600.0
#: the quantiles predicted
PS = (0.1, 0.5, 0.9)
#: step of the online recalibration of the reading levels
GAMMA = 0.005
#: the reading levels stay within this span
LEVEL_SPAN = (0.005, 0.995)
#: past jobs (of at least MIN_WAIT) the fit uses, newest first
WINDOW = 5000
#: the newest past jobs whose residuals give the spread ...
RESIDUALS = 2000
#: ... of which the LOCAL whose fitted ln(wait) is nearest the job's (the spread differs between
#: a queue that says "hours" and one that says "minutes")
LOCAL = 400
#: refit after this many new past jobs
REFIT = 25
#: past jobs of at least MIN_WAIT needed before predicting (the features' scales are fixed then)
MIN_CASES = 100
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Config:
    """One way to predict: the weight of a past job halves every ``half_life_days``; ``ridge``
    is the penalty on the (standardised) coefficients; ``prior`` the weight, in log space, of
    the queue's own recent long waits (the quantiles :meth:`LongWaits.predict` is given as
    ``prior``: what a site's recent history says whatever the features)."""

    half_life_days: float
    ridge: float
    prior: float = 0.0

    @property
    def label(self) -> str:
        return f"half-life {self.half_life_days:g} d, ridge {self.ridge:g}, prior {self.prior:g}"


#: the configurations chosen between (the first until the others have a record)
CONFIGS: tuple[Config, ...] = tuple(Config(h, r, w) for w in (0.0, 0.5) for h in (30.0, 7.0, 120.0, 2.0, 0.5)
                                    for r in (1.0, 30.0))


def pinball(q: float, y: float, p: float) -> float:
    """The pinball (quantile) loss of predicting ``q`` for the p-quantile when ``y`` happened."""
    return (p - (1.0 if y < q else 0.0)) * (y - q)


@dataclass(frozen=True, slots=True)
class StartQuantiles:
    """A prediction: the wait's quantiles :data:`PS` given it lasts at least :data:`MIN_WAIT`
    (seconds after submission), the configuration that made it and every configuration's own
    quantiles (for :meth:`LongWaits.judge`). ``quantiles`` is None before enough history."""

    quantiles: tuple[float, ...] | None
    config: Config | None
    n: int
    each: tuple[tuple[float, ...] | None, ...] = ()

    def at(self, p: float) -> float:
        if self.quantiles is None:
            raise ValueError("no prediction: too little history")
        return self.quantiles[PS.index(p)]


@dataclass(frozen=True, slots=True)
class _Fit:
    """One (half-life, ridge)'s fit: coefficients, the recent fitted values (ascending) with
    their residuals, and the range of the fitted values."""

    beta: np.ndarray
    mus: np.ndarray
    resid: np.ndarray
    lo: float
    hi: float


class LongWaits:
    """Past jobs of one site that waited at least :data:`MIN_WAIT` (their features at
    submission, when, their waits), each configuration's fit and record; :meth:`predict`."""

    def __init__(self, *, configs: Sequence[Config] = CONFIGS, window: int = WINDOW, min_cases: int = MIN_CASES,
                 adapt: bool = True):
        if not configs:
            raise ValueError("at least one configuration")
        self.configs = tuple(configs)
        self.window, self.min_cases, self.adapt = window, min_cases, adapt
        self._x: list[np.ndarray] = []
        self._at: list[float] = []
        self._y: list[float] = []
        self.scale: tuple[np.ndarray, np.ndarray] | None = None
        self._fits: dict[tuple[float, float], _Fit] = {}
        self._since = 0
        self.loss = [0.0] * len(self.configs)
        self.judged = 0
        #: the levels at which P10, P50, P90 are read (moved by :meth:`judge`)
        self.levels = list(PS)

    def __len__(self) -> int:
        return len(self._y)

    def observe(self, features: Sequence[float], at: float, wait: float) -> None:
        """A past job started after ``wait`` seconds (submitted at ``at`` with ``features``);
        only waits of at least :data:`MIN_WAIT` are kept."""
        if wait < MIN_WAIT:
            return
        row = np.asarray(features, dtype=float)
        if not np.isfinite(row).all():
            raise ValueError(f"features must be finite numbers, not {tuple(features)!r}")
        if self._x and row.shape != self._x[0].shape:
            raise ValueError(f"expected {self._x[0].size} features, got {row.size}")
        self._x.append(row)
        self._at.append(float(at))
        self._y.append(float(np.log(wait)))
        self._since += 1
        if self.scale is None and len(self._y) >= self.min_cases:
            x = np.array(self._x)
            sd = x.std(axis=0)
            self.scale = (x.mean(axis=0), np.where(sd > 1e-9, sd, 1.0))

    def _refit(self, now: float) -> None:
        assert self.scale is not None
        mean, sd = self.scale
        lo = max(0, len(self._y) - self.window)
        x = (np.array(self._x[lo:]) - mean) / sd
        a = np.hstack([x, np.ones((len(x), 1))])
        y = np.array(self._y[lo:])
        age = np.maximum(0.0, now - np.array(self._at[lo:]))
        for fit in {(c.half_life_days, c.ridge) for c in self.configs}:
            half_life, ridge = fit
            w = 0.5 ** (age / (half_life * DAY))
            pen = np.full(a.shape[1], ridge)
            pen[-1] = 0.0                                   # the intercept is not penalised
            aw = a * w[:, None]
            beta = np.linalg.solve(a.T @ aw + np.diag(pen), aw.T @ y)
            fitted = a @ beta
            mu_r = fitted[-RESIDUALS:]
            order = np.argsort(mu_r, kind="stable")
            self._fits[fit] = _Fit(beta, mu_r[order], (y - fitted)[-RESIDUALS:][order],
                                   float(fitted.min()), float(fitted.max()))
        self._since = 0

    def predict(self, features: Sequence[float], at: float, prior: Sequence[float] | None = None) -> StartQuantiles:
        """The wait's quantiles :data:`PS` for a job submitted at ``at`` with ``features``, given
        that it waits at least :data:`MIN_WAIT`; no quantiles before ``min_cases`` such past jobs.
        ``prior``: the same quantiles from the queue's recent long waits (None: not known; the
        configurations that weigh it then predict without it)."""
        n = len(self._y)
        if n < self.min_cases or self.scale is None:
            return StartQuantiles(None, None, n, (None,) * len(self.configs))
        if self._since >= REFIT or not self._fits:
            self._refit(at)
        mean, sd = self.scale
        x = np.append((np.asarray(features, dtype=float) - mean) / sd, 1.0)
        logs: dict[tuple[float, float], np.ndarray] = {}
        for key, f in self._fits.items():
            # never beyond the fitted values of the past jobs: a feature out of its past range
            # would otherwise extrapolate exponentially (years of wait from one odd queue)
            mu = min(f.hi, max(f.lo, float(x @ f.beta)))
            if len(f.mus) > LOCAL:
                k = int(np.searchsorted(f.mus, mu))
                start = min(max(0, k - LOCAL // 2), len(f.mus) - LOCAL)
                resid = f.resid[start:start + LOCAL]
            else:
                resid = f.resid
            logs[key] = mu + np.quantile(resid, self.levels)
        each = []
        ln_prior = None if prior is None else np.log(np.maximum(MIN_WAIT, np.asarray(prior, dtype=float)))
        for c in self.configs:
            q = logs[(c.half_life_days, c.ridge)]
            if c.prior and ln_prior is not None:
                q = (1.0 - c.prior) * q + c.prior * ln_prior
            each.append(tuple(max(MIN_WAIT, float(np.exp(v))) for v in q))
        b = self.best()
        return StartQuantiles(each[b], self.configs[b], n, tuple(each))

    def best(self) -> int:
        """The configuration with the lowest pinball loss so far (the first on a tie)."""
        return min(range(len(self.configs)), key=lambda i: (self.loss[i], i))

    def judge(self, prediction: StartQuantiles, wait: float, counted: Sequence[bool] = (False,) * len(PS)) -> None:
        """Score one job that has now started (call it at its start, with the prediction made
        at its submission); only jobs that waited at least :data:`MIN_WAIT` count — the jobs
        this predictor is about. ``counted``: the quantiles whose miss :meth:`overdue` already
        counted (a miss is known as soon as the job is still waiting past the quantile)."""
        if prediction.quantiles is None or wait < MIN_WAIT:
            return
        self.judged += 1
        for i, qs in enumerate(prediction.each):
            if qs is not None:
                self.loss[i] += sum(pinball(q, wait, p) for q, p in zip(qs, PS))
        for k, q in enumerate(prediction.quantiles):
            if not counted[k]:
                self._level(k, 1.0 if wait > q else 0.0)

    def overdue(self, k: int) -> None:
        """A job still waits past its predicted ``PS[k]`` quantile: a miss of that quantile,
        known now, before the job starts (in a burst of long waits, learning it only at the
        starts would come after the burst)."""
        self._level(k, 1.0)

    def _level(self, k: int, above: float) -> None:
        """Adaptive conformal inference: the k-th reading level moves by GAMMA · (miss − target)."""
        if not self.adapt:
            return
        p = PS[k]
        self.levels[k] = min(LEVEL_SPAN[1], max(LEVEL_SPAN[0], self.levels[k] + GAMMA * (above - (1.0 - p))))
        for j in range(1, len(self.levels)):
            self.levels[j] = max(self.levels[j], self.levels[j - 1])


@dataclass(frozen=True, slots=True)
class Case:
    """One job: submitted ``at`` with ``features``, started ``real`` seconds later; ``prior``
    the quantiles of its queue's recent long waits at its submission (None: unknown)."""

    at: float
    features: tuple[float, ...]
    real: float
    prior: tuple[float, ...] | None = None


def walk_forward(cases: Iterable[Case], **options) -> list[tuple[Case, StartQuantiles]]:
    """Predict every case from what was known at its submission, in submission order: the
    cases that had *started* before (their waits, their scores), and the cases still waiting
    past a predicted quantile (a miss known then, :meth:`LongWaits.overdue`) — never a wait that
    had not ended. ``options`` go to :class:`LongWaits`."""
    import heapq
    ordered = sorted(cases, key=lambda c: c.at)
    by_start = sorted(range(len(ordered)), key=lambda i: ordered[i].at + ordered[i].real)
    model = LongWaits(**options)
    made: dict[int, StartQuantiles] = {}
    counted: dict[int, list[bool]] = {}
    due: list[tuple[float, int, int]] = []            # (when a quantile is passed, case, quantile)
    fed = 0
    out: list[tuple[Case, StartQuantiles]] = []
    for i, c in enumerate(ordered):
        while True:
            nxt_start = ordered[by_start[fed]].at + ordered[by_start[fed]].real if fed < len(by_start) else math.inf
            nxt_due = due[0][0] if due else math.inf
            if min(nxt_start, nxt_due) >= c.at:
                break
            if nxt_due < nxt_start:                  # a job reaches a quantile still waiting: a miss, now
                _, j, k = heapq.heappop(due)
                if j in made and ordered[j].at + ordered[j].real > nxt_due:
                    model.overdue(k)
                    counted[j][k] = True
                continue
            j = by_start[fed]
            d = ordered[j]
            if j in made:
                model.judge(made.pop(j), d.real, counted.pop(j))
            model.observe(d.features, d.at, d.real)
            fed += 1
        pred = model.predict(c.features, c.at, c.prior)
        made[i] = pred
        counted[i] = [False] * len(PS)
        if pred.quantiles is not None:
            for k, q in enumerate(pred.quantiles):
                heapq.heappush(due, (c.at + q, i, k))
        out.append((c, pred))
    return out
