"""The ±10-minute start hit of every wait predictor on a trace's recorded waits (issue 16 item 5).

Issue 16 asks for the share of jobs that waited whose start is predicted within ±10 minutes,
the conditioned predictor against the scheduler's own estimate (goal: at least 3×). The probes
are :func:`resel.sim.finish_eval.recorded_probes` with ``hits=True``: every trace job after a 10 %
warm-up, the queue rebuilt from the trace at its submission, judged against its recorded wait.
The jobs scored are those that waited (recorded wait > 0 s) and that the conditioned predictor
could predict (it needs 20 past errors: the first few dozen jobs after the warm-up are left
out, for every column alike, as in docs/calibration.md's other tables).

The predictors, each with only what it may know:

* ``scheduler``: EASY's start estimate on the rebuilt queue (``sbatch --test-only``'s answer:
  the queue laid in order, the job at its tail); ``twin``: the twin's forward simulation;
* ``conditioned median`` / ``conditioned likeliest``: the twin corrected by its past errors
  (:mod:`resel.models.conditioned`; the likeliest is the centre of the predicted law's densest
  20-minute window);
* ``learned start``: :mod:`resel.models.learned_start` on the queue's features, walked forward
  (a job is predicted from the jobs that had started before its submission);
* ``always now`` and ``always 10 min``: constant predictions, the floor any predictor must
  clear (10 minutes hits every job that starts within 20);
* ``clairvoyant twin``: the queue simulated with the true run times of every job in it, no
  later arrivals (:func:`resel.sim.wait_eval.clairvoyant_wait`) — what seeing the queue could give
  with perfect run times; and ``clairvoyant twin, oracle hedge``: a hit when either 10 minutes
  or the clairvoyant twin hits, as if an oracle told which of the two to say. Neither is a
  strict bound (the real scheduler is not EASY, and a predictor can learn its habits: the
  learned start beats the plain clairvoyant twin on both traces); the oracle hedge is the
  reference for what seeing the queue, even with perfect run times, adds to the hedge.

The same hits are also counted among the jobs that waited at least 10 minutes, where a
prediction of "now" cannot hit and a constant one hits only waits of 10–20 minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from resel.sim.finish_eval import HIT, conditioned_rows
from resel.models import learned_start

#: the issue's goal: this many times the scheduler estimate's hit rate
GOAL = 3.0


@dataclass(frozen=True, slots=True)
class HitRate:
    """One predictor's hits among the scored jobs of one trace."""

    trace: str
    predictor: str
    knows: str
    hits: int
    jobs: int
    #: the same among the jobs that waited at least 10 minutes (where "starts now" cannot hit)
    hits_long: int = 0
    jobs_long: int = 0

    @property
    def share(self) -> float:
        return self.hits / self.jobs if self.jobs else math.nan

    @property
    def share_long(self) -> float:
        return self.hits_long / self.jobs_long if self.jobs_long else math.nan

    def as_dict(self) -> dict:
        return {"trace": self.trace, "predictor": self.predictor, "knows": self.knows,
                "hits": self.hits, "jobs": self.jobs, "share": self.share,
                "hits_long": self.hits_long, "jobs_long": self.jobs_long, "share_long": self.share_long}


def clock_offset(trace: Any) -> float:
    """Local epoch seconds of a trace's time 0 (its header's UnixStartTime + TimeZone), for the
    time-of-day feature; 0 where the header does not say (wagap's has no header)."""
    header = trace.header
    start = header.unix_start_time
    if start is None:
        return 0.0
    zone = header.fields.get("TimeZone", "0").split("\n")[0].strip()
    return float(start) + (float(zone) if zone.lstrip("+-").isdigit() else 0.0)


def _hit(pred: float | None, real: float) -> bool:
    return pred is not None and abs(pred - real) <= HIT


def hit_rates(probes: Sequence[Any], trace: str, **options) -> list[HitRate]:
    """Every predictor's hits on the jobs that waited (see the module). ``probes`` must carry
    features and the clairvoyant estimate (``recorded_probes(..., hits=True)``); ``options``
    go to :class:`resel.models.learned_start.LearnedStart`."""
    ordered = sorted(probes, key=lambda p: p.at)
    if any(p.features is None or "clairvoyant" not in p.estimates for p in ordered):
        raise ValueError("the probes lack features or the clairvoyant estimate: make them with hits=True")
    rows = conditioned_rows(ordered, "twin")
    learned = learned_start.walk_forward([learned_start.Case(p.at, p.features, p.real) for p in ordered],
                                         **options)
    scored = [(p, r, lp) for p, r, (_, lp) in zip(ordered, rows, learned) if r.cond is not None and p.real > 0]
    predictors: list[tuple[str, str, Any]] = [
        ("scheduler", "the queue (EASY's estimate)", lambda p, r, lp: _hit(p.estimates.get("scheduler"), p.real)),
        ("twin", "the queue (forward simulation)", lambda p, r, lp: _hit(p.estimates.get("twin"), p.real)),
        ("conditioned median", "the queue + the twin's past errors",
         lambda p, r, lp: _hit(r.cond.at(0.5), p.real)),
        ("conditioned likeliest", "the queue + the twin's past errors",
         lambda p, r, lp: _hit(r.cond.likeliest(HIT), p.real)),
        ("learned start (new)", "the queue's features + past jobs' waits",
         lambda p, r, lp: _hit(lp.point, p.real)),
        ("always now", "nothing", lambda p, r, lp: _hit(0.0, p.real)),
        ("always 10 min", "nothing", lambda p, r, lp: _hit(HIT, p.real)),
        ("clairvoyant twin", "the queue + true run times (not knowable)",
         lambda p, r, lp: _hit(p.estimates.get("clairvoyant"), p.real)),
        ("clairvoyant twin, oracle hedge", "+ which of 10 min / clairvoyant hits (not knowable)",
         lambda p, r, lp: _hit(HIT, p.real) or _hit(p.estimates.get("clairvoyant"), p.real)),
    ]
    long = [(p, r, lp) for p, r, lp in scored if p.real >= HIT]
    out = [HitRate(trace, name, knows, sum(1 for p, r, lp in scored if fn(p, r, lp)), len(scored),
                   sum(1 for p, r, lp in long if fn(p, r, lp)), len(long))
           for name, knows, fn in predictors]
    away = [(p, lp) for p, r, lp in scored if lp.point != HIT]
    out.append(HitRate(trace, "learned start, where it does not say 10 min", "(a subset)",
                       sum(1 for p, lp in away if _hit(lp.point, p.real)), len(away)))
    return out


def rate_of(rates: Sequence[HitRate], predictor: str) -> HitRate:
    return next(r for r in rates if r.predictor == predictor)


def verdict(rates: Sequence[HitRate]) -> dict:
    """The goal for one trace: the new predictor against ``GOAL`` × the scheduler's rate, and
    where the goal lies against the clairvoyant references."""
    sched = rate_of(rates, "scheduler").share
    new = rate_of(rates, "learned start (new)").share
    goal = GOAL * sched
    return {"trace": rates[0].trace, "scheduler": sched, "goal": goal, "new": new,
            "ratio": new / sched if sched else math.nan, "pass": new >= goal,
            "clairvoyant": rate_of(rates, "clairvoyant twin").share,
            "oracle_hedge": rate_of(rates, "clairvoyant twin, oracle hedge").share,
            "goal_above_references": goal > rate_of(rates, "clairvoyant twin, oracle hedge").share,
            "jobs": rate_of(rates, "scheduler").jobs,
            "away_jobs": rate_of(rates, "learned start, where it does not say 10 min").jobs,
            "away_hits": rate_of(rates, "learned start, where it does not say 10 min").hits}


def markdown(per_trace: Sequence[Sequence[HitRate]]) -> str:
    """One table: a row per trace and predictor, its share and its ratio to the scheduler's;
    then one verdict line per trace."""
    lines = ["| trace | predictor | knows | jobs that waited | hits ±10 min | share | × scheduler "
             "| waited ≥ 10 min: share | × scheduler |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]

    def times(x: float, ref: float) -> str:
        return f"{x / ref:.2f}×" if ref else "–"
    for rates in per_trace:
        sched = rate_of(rates, "scheduler")
        for r in rates:
            if r.knows == "(a subset)":
                continue
            lines.append(f"| {r.trace} | {r.predictor} | {r.knows} | {r.jobs} | {r.hits} | {100 * r.share:.1f} % "
                         f"| {times(r.share, sched.share)} | {100 * r.share_long:.1f} % "
                         f"| {times(r.share_long, sched.share_long)} |")
    lines.append("")
    for rates in per_trace:
        v = verdict(rates)
        lines.append(f"- {v['trace']}: goal {GOAL:g}× the scheduler's {100 * v['scheduler']:.1f} % = "
                     f"{100 * v['goal']:.1f} %; learned start {100 * v['new']:.1f} % ({v['ratio']:.2f}×): "
                     f"**{'PASS' if v['pass'] else 'MISS'}**; clairvoyant twin {100 * v['clairvoyant']:.1f} %, "
                     f"with the oracle hedge {100 * v['oracle_hedge']:.1f} %"
                     + (" — the goal lies above both" if v["goal_above_references"] else "")
                     + f"; the learned start said other than 10 min for {v['away_jobs']} of {v['jobs']} jobs "
                       f"and hit {v['away_hits']} of them")
    return "\n".join(lines)
