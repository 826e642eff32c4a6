"""A wait predictor that sees the queue *now* and learns its own bias (issue 16 item 3).

The QBETS bound (:mod:`resel.models.qbets`) bounds the wait of a random moment: it never looks
at the queue. The twin (:mod:`resel.models.twin`) and the scheduler's own estimate look at the
queue but are point guesses with a bias — on the recorded traces they cover only 45–59 % of
real waits (docs/queue-aware.md). This predictor combines the two kinds of knowledge: it starts
from the point estimate ê for the queue as it is, and corrects it with the errors the same
estimate made on this site's past jobs of the same shape class.

The error of one past job is taken in a shifted log space,

    e = g(real) − g(ê),   g(x) = ln(x + S),  S = 60 s,

so that it is a *ratio* for long waits (a twin that is 2× optimistic on 5-hour waits is 2×
optimistic on 10-hour ones) and a *difference* of about e·S for waits near zero (where a ratio
of two tiny numbers means nothing — a scheduler starts a job a cycle after it fits). The
predicted p-quantile of the wait is then

    W_p = g⁻¹(g(ê) + e_p) = (ê + S) · exp(e_p) − S,  floored at 0,

with e_p the type-6 quantile (:func:`resel.models.runtime.quantile`) of the errors: the
empirical predictive distribution of "what ê usually turned out to mean here". Errors are kept
per site, size of the estimate (:func:`estimate_bucket`) and shape class
(:func:`resel.models.history.shape_class`); a group with fewer than ``min_errors`` falls back
to the same estimate bucket's errors of the core bucket, then of every shape, then to all of
the site's errors (as the history bound falls back), and the level used is reported. Only the latest
``window`` errors of a group count, so a shifting queue is followed.

An error is known only once its job has *started*: callers feed :meth:`observe` at the start
time and must never feed a job that has not started by the time they predict (the walk-forward
of :func:`walk_forward` does this for evaluations).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from resel.models.runtime import quantile

#: the shift S of g(x) = ln(x + S), seconds: below about S errors act as differences
SHIFT = 60.0
#: errors a group needs before its quantiles are used (a 90 % interval's ranks need 19)
MIN_ERRORS = 20
#: most recent errors kept per group
WINDOW = 1000
#: step of the online recalibration (see :meth:`ConditionedWait.judge`): each judged outcome
#: moves the level at which a quantile is read by GAMMA · (miss − target)
GAMMA = 0.01
#: the quantiles whose levels are recalibrated, and their targets
ANCHORS = (0.05, 0.5, 0.95)
#: how far beyond [0, 1] a reading level may go: past the largest (smallest) error seen, the
#: law is extended linearly at the slope of its outer tail (see :func:`read_level`)
LEVEL_SPAN = (-0.5, 1.5)
LEVELS = ("shape", "cores", "estimate", "site")
#: upper limits (seconds) of the estimate's buckets: "starts now", minutes, hours, a day, more
ESTIMATE_BUCKETS = (60.0, 3600.0, 6 * 3600.0, 24 * 3600.0, math.inf)


def estimate_bucket(estimate: float) -> int:
    """Which of :data:`ESTIMATE_BUCKETS` an estimate falls in. Errors depend on the estimate
    itself: an estimator that says "now" is wrong differently (a scheduling cycle, a job it did
    not see) from one that says "in ten hours" (every running job ending early)."""
    for i, upper in enumerate(ESTIMATE_BUCKETS):
        if estimate < upper:
            return i
    return len(ESTIMATE_BUCKETS) - 1


def g(x: float) -> float:
    return math.log(max(0.0, x) + SHIFT)


def g_inv(y: float) -> float:
    return max(0.0, math.exp(y) - SHIFT)


def _classes() -> tuple[Callable[[int, float | None], str], Callable[[int], str]]:
    from resel.models.history import cores_class, shape_class
    return shape_class, cores_class


class _Group:
    """The latest ``window`` errors of one group, in arrival order and sorted."""

    __slots__ = ("order", "sorted", "window")

    def __init__(self, window: int):
        self.order: deque[float] = deque()
        self.sorted: list[float] = []
        self.window = window

    def add(self, e: float) -> None:
        self.order.append(e)
        bisect.insort(self.sorted, e)
        if len(self.order) > self.window:
            old = self.order.popleft()
            del self.sorted[bisect.bisect_left(self.sorted, old)]


@dataclass(frozen=True, slots=True)
class WaitQuantiles:
    """The conditioned prediction: the wait at each asked quantile, from which group."""

    estimate: float                  # the point estimate ê it started from
    quantiles: tuple[tuple[float, float], ...]   # (p, seconds), ascending p
    level: str                       # shape, cores or site
    n: int                           # errors behind it

    def at(self, p: float) -> float:
        for q, w in self.quantiles:
            if abs(q - p) < 1e-12:
                return w
        raise KeyError(p)

    def cdf(self, w: float) -> float:
        """P(wait ≤ w), interpolated between the stored quantiles (0 below the first, 1 above
        the last: the tails beyond them are not resolved)."""
        qs = self.quantiles
        if w < qs[0][1]:
            return 0.0
        if w >= qs[-1][1]:
            return 1.0
        for (p0, w0), (p1, w1) in zip(qs, qs[1:]):
            if w < w1:
                return p0 + (p1 - p0) * (w - w0) / (w1 - w0) if w1 > w0 else p1
        return 1.0

    def likeliest(self, half: float = 600.0) -> float:
        """The start prediction most likely to be within ±``half`` of the real wait: the
        centre of the (2·half)-wide window holding the most probability. Why not the median:
        a wait law with a spike at "starts now" and a long tail has its median in the tail's
        foot, where a ±10-minute window catches little; this is the point a ±10-minute hit rate
        rewards (candidates: every stored quantile as a window's centre or its left edge)."""
        best, best_mass = self.quantiles[0][1], -1.0
        for _, w in self.quantiles:
            for c in (w, w + half, max(half, w)):
                mass = self.cdf(c + half) - self.cdf(c - half)
                if mass > best_mass + 1e-12:
                    best, best_mass = c, mass
        return max(0.0, best)

    def sample(self, u: float) -> float:
        """The wait at quantile ``u`` by linear interpolation between the stored quantiles
        (used to draw waits; clamped at the outermost stored quantiles)."""
        qs = self.quantiles
        if u <= qs[0][0]:
            return qs[0][1]
        for (p0, w0), (p1, w1) in zip(qs, qs[1:]):
            if u <= p1:
                return w0 + (w1 - w0) * (u - p0) / (p1 - p0)
        return qs[-1][1]


def km_quantiles(complete: Sequence[float], censored: Sequence[float], ps: Sequence[float]) -> list[float]:
    """Quantiles of errors of which some are only known to be at least a value (jobs still
    waiting): the Kaplan–Meier estimate of their distribution, read as a step function.

    Without censored values this is the type-6 quantile (what :func:`quantile` gives). A
    quantile the data cannot reach (the censored values hold up the top of the law) is the
    largest value seen — a lower bound, said as such in the module docstring.
    """
    if not censored:
        return [quantile(complete, p) for p in ps]
    events = sorted([(v, 0) for v in complete] + [(v, 1) for v in censored])   # complete first at ties
    at_risk = len(events)
    surv = 1.0
    steps: list[tuple[float, float]] = []
    for v, cens in events:
        if not cens:
            surv *= 1.0 - 1.0 / at_risk
            steps.append((v, 1.0 - surv))
        at_risk -= 1
    top = events[-1][0]
    out = []
    for p in ps:
        out.append(next((v for v, f in steps if f >= p - 1e-12), top))
    return out


def read_level(complete: Sequence[float], censored: Sequence[float], levels: Sequence[float]) -> list[float]:
    """Error quantiles at reading levels that may lie outside [0, 1].

    Inside, the (Kaplan–Meier) quantile. Above 1 the law is extended past the largest error e₁
    at the slope of its upper tail, e₁ + (L − 1) · s with s = max((e₁ − e_.95) / 0.05,
    (e_.95 − e_.5) / 0.45); below 0 likewise past the smallest. Why extend at all: when a queue
    jams, waits exceed every error seen so far for a while, and an interval that can never
    reach past them keeps missing until the jam's waits are known — after the jam.
    """
    inside = [min(1.0, max(0.0, x)) for x in levels]
    base = km_quantiles(complete, censored, inside + [0.0, 0.05, 0.5, 0.95, 1.0])
    vals, (e0, e05, e5, e95, e1) = base[:len(levels)], base[len(levels):]
    up = max((e1 - e95) / 0.05, (e95 - e5) / 0.45, 0.0)
    down = max((e05 - e0) / 0.05, (e5 - e05) / 0.45, 0.0)
    out = []
    for x, v in zip(levels, vals):
        out.append(e1 + (x - 1.0) * up if x > 1.0 else e0 - (0.0 - x) * down if x < 0.0 else v)
    return out


class ConditionedWait:
    """Errors of one point estimate per site and shape class; predicted wait quantiles.

    Two ways in: :meth:`observe` a finished wait (a history of past jobs), or
    :meth:`submitted` then :meth:`started` as a replay goes — jobs submitted and not yet started
    then count as *censored* errors (their wait is at least the time they have waited so far),
    which keeps the law from being biased towards the jobs that happened to start quickly
    while the queue grows.
    """

    def __init__(self, min_errors: int = MIN_ERRORS, window: int = WINDOW, adapt: bool = True):
        self.min_errors, self.window, self.adapt = min_errors, window, adapt
        #: per (site, estimate bucket), the levels at which the 5/50/95 % quantiles are read
        #: (see :meth:`judge`); other levels are interpolated between them
        self.anchors: dict[tuple, list[float]] = {}
        self.groups: dict[tuple, _Group] = {}
        self.pending: dict[tuple, dict] = {}          # group key -> {ident: (submitted at, g(ê))}
        self._pending_of: dict = {}                   # ident -> (site, cores, walltime, estimate, keys)
        self.shape_class, self.cores_class = _classes()
        self.levels = {lvl: 0 for lvl in LEVELS} | {"none": 0}

    def _keys(self, site: str, cores: int, walltime: float | None, estimate: float) -> list[tuple[str, tuple]]:
        b = estimate_bucket(estimate)
        return [("shape", (site, b, "shape", self.shape_class(cores, walltime))),
                ("cores", (site, b, "cores", self.cores_class(cores))),
                ("estimate", (site, b)),
                ("site", (site, "site"))]

    def observe(self, site: str, cores: int, walltime: float | None, estimate: float, real: float) -> None:
        """One past job: the estimate made when it was submitted, and its real wait."""
        e = g(real) - g(estimate)
        for _, key in self._keys(site, cores, walltime, estimate):
            grp = self.groups.get(key)
            if grp is None:
                grp = self.groups[key] = _Group(self.window)
            grp.add(e)

    def submitted(self, ident, site: str, cores: int, walltime: float | None, estimate: float,
                  at: float) -> None:
        """A job was submitted at ``at`` with point estimate ``estimate``; it waits until
        :meth:`started`."""
        keys = [key for _, key in self._keys(site, cores, walltime, estimate)]
        ge = g(estimate)
        for key in keys:
            self.pending.setdefault(key, {})[ident] = (at, ge)
        self._pending_of[ident] = (site, cores, walltime, estimate, keys)

    def started(self, ident, real: float) -> None:
        """The job submitted as ``ident`` started after waiting ``real`` seconds."""
        site, cores, walltime, estimate, keys = self._pending_of.pop(ident)
        for key in keys:
            self.pending[key].pop(ident, None)
        self.observe(site, cores, walltime, estimate, real)

    def errors(self, site: str, cores: int, walltime: float | None,
               estimate: float) -> tuple[str, list[float]] | None:
        """The finest group with enough errors: (level, ascending errors), or None."""
        for level, key in self._keys(site, cores, walltime, estimate):
            grp = self.groups.get(key)
            if grp is not None and len(grp.sorted) >= self.min_errors:
                return level, grp.sorted
        return None

    def predict(self, site: str, cores: int, walltime: float | None, estimate: float,
                ps: Sequence[float] = (0.05, 0.5, 0.9, 0.95), now: float | None = None) -> WaitQuantiles | None:
        """The wait's quantiles ``ps`` given the point estimate now; None with too few errors.

        With ``now``, the group's jobs still waiting count as censored errors (see the class).
        """
        for level, key in self._keys(site, cores, walltime, estimate):
            grp = self.groups.get(key)
            if grp is not None and len(grp.sorted) >= self.min_errors:
                break
        else:
            self.levels["none"] += 1
            return None
        self.levels[level] += 1
        censored = []
        if now is not None:
            censored = [g(now - at) - ge for at, ge in self.pending.get(key, {}).values() if now > at]
        base = g(estimate)
        ps = sorted(ps)
        levels = [self.level(site, estimate, p) for p in ps] if self.adapt else ps
        errs = read_level(grp.sorted, censored, levels)
        qs = tuple((p, g_inv(base + e)) for p, e in zip(ps, errs))
        return WaitQuantiles(estimate, qs, level, len(grp.sorted) + len(censored))

    def level(self, site: str, estimate: float, p: float) -> float:
        """The level at which the nominal p-quantile is read now: the recalibrated anchors,
        linearly interpolated between (0, 0), the anchors and (1, 1)."""
        a = self.anchors.get((site, estimate_bucket(estimate)))
        if a is None:
            return p
        xs = (0.0, *ANCHORS, 1.0)
        ys = (min(0.0, a[0]), *a, max(1.0, a[-1]))
        for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]):
            if p <= x1:
                return y0 + (y1 - y0) * (p - x0) / (x1 - x0)
        return ys[-1]

    def judge(self, site: str, predicted: WaitQuantiles, real: float) -> None:
        """Online recalibration from one outcome (adaptive conformal inference, Gibbs & Candès
        2021): each anchor quantile's reading level moves by GAMMA · (miss − target) — a real
        wait above the predicted P95 raises the P95's level, one below lowers it by a twentieth
        as much — so over time 5 % fall above the P95, 5 % below the P5 and half above the
        median, even when the errors drift or come in bursts (which the exchangeability behind
        a plain quantile does not allow). Levels may leave [0, 1] by up to half
        (:data:`LEVEL_SPAN`); past the errors seen the law is extended (:func:`read_level`).
        Kept per site and size of the estimate,
        since the estimate's errors differ most between "starts now" and "in ten hours".
        Call it when the job starts, with the prediction made when it was submitted.
        """
        if not self.adapt:
            return
        try:
            q = [predicted.at(p) for p in ANCHORS]
        except KeyError:
            return
        key = (site, estimate_bucket(predicted.estimate))
        a = self.anchors.setdefault(key, list(ANCHORS))
        for i, (p, w) in enumerate(zip(ANCHORS, q)):
            above = 1.0 if real > w else 0.0
            a[i] = min(LEVEL_SPAN[1], max(LEVEL_SPAN[0], a[i] + GAMMA * (above - (1.0 - p))))
        for i in range(1, len(a)):        # keep them ordered
            a[i] = max(a[i], a[i - 1])


# ------------------------------------------------------------------ walk-forward evaluation
@dataclass(frozen=True, slots=True)
class Case:
    """One job or probe pilot: when it was submitted, its shape, the point estimate then, and
    its real wait (known from ``at + real`` on)."""

    at: float
    cores: int
    walltime: float | None
    estimate: float | None
    real: float
    site: str = "site"


def walk_forward(cases: Iterable[Case], ps: Sequence[float] = (0.05, 0.5, 0.9, 0.95), *,
                 min_errors: int = MIN_ERRORS, window: int = WINDOW, censor: bool = False, adapt: bool = True
                 ) -> list[tuple[Case, WaitQuantiles | None]]:
    """Predict every case from what was known when it was submitted, in submission order: the
    errors of the cases that had *started* before (start = at + real < its at) and, with
    ``censor``, the cases submitted before it and still waiting (censored errors) — never a
    wait that had not happened yet.

    Cases without a point estimate get None and teach nothing. Returned in submission order.
    """
    ordered = sorted(cases, key=lambda c: c.at)
    known = [(i, c) for i, c in enumerate(ordered) if c.estimate is not None]
    by_start = sorted(known, key=lambda ic: ic[1].at + ic[1].real)
    ps = sorted(set(ps) | {0.05, 0.5, 0.95})
    model = ConditionedWait(min_errors, window, adapt)
    made: dict[int, WaitQuantiles] = {}
    fed = 0
    out = []
    for i, c in enumerate(ordered):
        while fed < len(by_start) and by_start[fed][1].at + by_start[fed][1].real < c.at:
            j, d = by_start[fed]
            if j in made:
                model.judge(d.site, made.pop(j), d.real)
            if censor:
                model.started(j, d.real)
            else:
                model.observe(d.site, d.cores, d.walltime, d.estimate, d.real)
            fed += 1
        if c.estimate is None:
            out.append((c, None))
            continue
        pred = model.predict(c.site, c.cores, c.walltime, c.estimate, ps, now=c.at if censor else None)
        out.append((c, pred))
        if pred is not None:
            made[i] = pred
        if censor:
            model.submitted(i, c.site, c.cores, c.walltime, c.estimate, c.at)
    return out


# ------------------------------------------------------------------ the store
#: the table of past errors: (site, source, origin, job, cores, walltime, estimate, real, submit)
TABLE = "wait_errors"


def save_errors(db, rows: Iterable[dict]) -> int:
    """Store past errors (dicts with the :data:`TABLE` columns); ``job`` identifies the job
    within its ``origin`` (e.g. its position in a trace), so learning from the same trace twice
    replaces rather than adds."""
    rows = list(rows)
    if rows:
        db[TABLE].upsert_all(rows, pk=("site", "source", "origin", "job"), alter=True)
    return len(rows)


def load_wait_errors(db, *, min_errors: int = MIN_ERRORS) -> dict[str, ConditionedWait]:
    """Per estimate source, a :class:`ConditionedWait` holding every stored error in
    submission order (empty dict without a store or errors)."""
    if db is None or TABLE not in db.table_names():
        return {}
    out: dict[str, ConditionedWait] = {}
    for r in db.query(f"select * from {TABLE} order by submit"):
        model = out.get(r["source"])
        if model is None:
            model = out[r["source"]] = ConditionedWait(min_errors)
        model.observe(r["site"], int(r["cores"]), r["walltime"], float(r["estimate"]), float(r["real"]))
    return out
