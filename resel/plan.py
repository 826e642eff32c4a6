"""``resel plan``: when would a pilot start on each live site, and what would the engine do.

Three estimates of a pilot's start, each with what it rests on (issue 8):

* **history** — a QBETS bound: with ``confidence``, a fraction ``quantile`` of past pilots of
  this shape class on this site started within it (:mod:`resel.models.history`);
* **twin** — the site's queue snapshot simulated forward under its policy, every job running
  to its time limit, nothing new arriving (:mod:`resel.models.twin`);
* **scheduler** — the site's own answer (``sbatch --test-only`` and its kin).

The plan ranks by one of them (``auto``: the twin where the queue can be read, else the history
bound, else the scheduler — the order the evaluation in docs/queue-aware.md supports: the twin
knows the queue *now*, a history bound only how it usually is) for every pilot size the
queue-aware strategy may choose (:meth:`~resel.engine.Engine.probe_menu`), and feeds them to
the same :class:`~resel.engine.Engine`
that ``resel run`` drives, so the plan is the run's first step, minus the submissions. A site
whose queue cannot be read is *said* to be unreadable — its row carries the error and the
engine ranks it last (or gives it up, if it cannot be reached at all); nothing is guessed.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from resel.domain import Bag, Site
from resel.engine import Engine
from resel.errors import ReselError
from resel.events import BagSubmitted, Decision, SiteLost, SubmitPilot
from resel.models.lim import site_rates
from resel.selection import Strategy, predicted_ttc

SOURCES = ("auto", "history", "twin", "scheduler")


@dataclass
class SitePlan:
    """One site's row of the plan. Seconds are from now; None = not known (``*_note`` says why)."""

    site: str
    kind: str
    pilot_cores: int
    walltime: float
    tx: float                               # T̂x of one task (LIM)
    free_cores: int | None = None
    total_cores: int | None = None
    history_s: float | None = None
    history_note: str | None = None
    twin_s: float | None = None
    twin_note: str | None = None
    scheduler_s: float | None = None
    scheduler_note: str | None = None
    used: str | None = None                 # which estimate the plan ranks the site by
    wait_s: float | None = None
    ttc_s: float | None = None              # predicted TTC of the whole bag on this site alone (best size)
    finish_s: float | None = None           # predicted end of the share the plan gives this site
    error: str | None = None                # the site could not be reached at all
    tasks: int = 0                          # tasks the engine assigns here first
    pilots: list[int] = field(default_factory=list)   # cores of each pilot the engine would submit
    role: str = ""                          # "origin", "extra pilot" or ""
    #: every pilot size weighed: {slots, cores, history_s, twin_s, scheduler_s, used, wait_s}
    menu: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose(row: Any, source: str) -> tuple[str | None, float | None]:
    """The estimate to rank by (a :class:`SitePlan` or one of its ``menu`` entries): the one
    asked for, or (``auto``) the first known of twin, history bound, scheduler."""
    order = ("twin", "history", "scheduler") if source == "auto" else (source,)
    for name in order:
        value = row.get(f"{name}_s") if isinstance(row, dict) else getattr(row, f"{name}_s")
        if value is not None:
            return name, value
    return None, None


def _err(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


def probe_site(site: Site, shapes: list[tuple[int, int, float]], tx: float, history: Any, *, quantile: float,
               confidence: float, opener: Callable[[Site], Any] | None = None) -> SitePlan:
    """Open one live site, ask it (:func:`site_estimates`), close it; an unreachable site's row
    carries the error instead of estimates."""
    from resel.backends.connect import close_quietly, open_site
    ps = None
    try:
        ps = (opener or open_site)(site)
        return site_estimates(ps.scheduler, site, shapes, tx, history, quantile=quantile, confidence=confidence)
    except Exception as exc:   # noqa: BLE001 - the row says why; the other sites go on
        _, cores, walltime = shapes[0] if shapes else (0, 0, 0.0)
        row = SitePlan(site.name, site.kind, cores, walltime, tx, error=_err(exc))
        row.twin_note = row.scheduler_note = "site unreachable"
        row.history_s, row.history_note = _history(history, site.name, cores, walltime, quantile, confidence)
        return row
    finally:
        close_quietly(ps)


def _history(history: Any, site: str, cores: int, walltime: float, quantile: float,
             confidence: float) -> tuple[float | None, str]:
    if history is None:
        return None, "no history store"
    bound = history.bound(site, cores, walltime, quantile=quantile, confidence=confidence)
    if bound.seconds is None:
        return None, bound.reason
    return bound.seconds, f"q{quantile:g} bound at {confidence:.0%} confidence from {bound.n} waits ({bound.level})"


def site_estimates(sched: Any, site: Site, shapes: list[tuple[int, int, float]], tx: float, history: Any, *,
                   quantile: float, confidence: float) -> SitePlan:
    """The three start estimates of each pilot size in ``shapes`` ((slots, cores, walltime),
    the full pilot first) from an open scheduler client.

    Availability must answer (else the site is unreachable and this raises); each estimate then
    fails on its own — a scheduler that refuses ``--test-only`` still gets a twin from its
    queue — and the reason for every missing number is kept in its note. The queue is read
    once; the twin runs once per size.
    """
    _, cores, walltime = shapes[0]
    row = SitePlan(site.name, site.kind, cores, walltime, tx)
    av = sched.availability()
    row.free_cores, row.total_cores = av.free_cores, av.total_cores
    snap, snap_note = None, None
    snapshot_fn = getattr(sched, "queue_snapshot", None)
    if snapshot_fn is None:
        api = site.access.api if site.access else "?"
        snap_note = f"no queue snapshot for {site.kind} sites through api {api!r}"
    else:
        try:
            snap = snapshot_fn()
        except Exception as exc:   # noqa: BLE001
            snap_note = f"queue unreadable: {_err(exc)}"
    for slots, cores_k, walltime_k in shapes:
        entry: dict[str, Any] = {"slots": slots, "cores": cores_k}
        entry["history_s"], entry["history_note"] = _history(history, site.name, cores_k, walltime_k,
                                                             quantile, confidence)
        entry["twin_s"], entry["twin_note"] = None, snap_note
        if snap is not None:
            try:
                from resel.models.twin import twin_start
                est = twin_start(snap, cores_k, walltime_k)
                entry["twin_s"] = max(0.0, est.wait - max(0.0, time.time() - snap.taken_at))
                entry["twin_note"] = "; ".join(filter(None, [est.explanation, *est.notes]))
            except Exception as exc:   # noqa: BLE001
                entry["twin_note"] = f"no twin: {_err(exc)}"
        try:
            start = sched.test_only(cores_k, walltime_k)
            entry["scheduler_s"] = None if start is None else max(0.0, start - time.time())
            entry["scheduler_note"] = "the scheduler gave no estimate" if start is None else None
        except Exception as exc:   # noqa: BLE001
            entry["scheduler_s"], entry["scheduler_note"] = None, f"no scheduler estimate: {_err(exc)}"
        row.menu.append(entry)
    full = row.menu[0]
    for name in ("history", "twin", "scheduler"):
        setattr(row, f"{name}_s", full[f"{name}_s"])
        setattr(row, f"{name}_note", full[f"{name}_note"])
    return row


def plan(bag: Bag, sites: list[Site], *, strategy: str = "queue+reselect", source: str = "auto",
         quantile: float = 0.95, confidence: float = 0.95, clock: str = "base", seed: int = 0,
         history: Any = None, opener: Callable[[Site], Any] | None = None) -> dict[str, Any]:
    """Probe every site concurrently, choose estimates, run the engine's first step.

    Returns a JSON-ready document: per site the three estimates with their notes, T̂x, the
    predicted TTC and the engine's plan (tasks, pilots, role); nothing is submitted.
    """
    if source not in SOURCES:
        raise ReselError(f"unknown estimate source {source!r}; one of {', '.join(SOURCES)}")
    strat = Strategy.parse(strategy)
    engine = Engine(bag, sites, strat, seed=seed, clock=clock)
    shapes = engine.probe_shapes()
    menu = engine.probe_menu()
    rates = site_rates(sites, clock)
    txs = [rates[s.name].tx(bag.profile.instructions) for s in sites]

    def one(i: int) -> SitePlan:
        sizes = menu[i] if strat.base == "queue" and menu[i] else [(0, *shapes[i])]
        return probe_site(sites[i], sizes, txs[i], history, quantile=quantile, confidence=confidence,
                          opener=opener)

    with ThreadPoolExecutor(max_workers=max(1, len(sites))) as pool:
        rows = list(pool.map(one, range(len(sites))))
    for i, row in enumerate(rows):
        row.used, row.wait_s = choose(row, source)
        best = math.inf
        for entry in row.menu:
            entry["used"], entry["wait_s"] = choose(entry, source)
            slots = entry["slots"] or max(1, shapes[i][0] // bag.cores_per_task)
            best = min(best, predicted_ttc(entry["wait_s"], row.tx, bag.count, slots))
        row.ttc_s = None if best == math.inf else best
    estimates = {r.site: r.wait_s for r in rows}
    wait_menu = ({r.site: [e["wait_s"] for e in r.menu] for r in rows if not r.error}
                 if strat.base == "queue" else None)
    events: list[Any] = [BagSubmitted(time=0.0, wait_estimates=estimates, wait_menu=wait_menu)]
    events += [SiteLost(time=0.0, site=r.site, reason=r.error) for r in rows if r.error]
    problem = None
    finishes: list[float | None] = []
    actions: list[Any] = []
    try:
        for ev in events:
            actions += engine.handle(ev)
    except ReselError as exc:
        problem = str(exc)
    by_name = {r.site: r for r in rows}
    if problem is None:
        for t in engine.tasks:
            by_name[engine.sites[t.origin].name].tasks += 1
        for a in actions:
            if isinstance(a, SubmitPilot):
                by_name[a.site].pilots.append(a.cores)
        held = engine.reselection_targets
        for r in rows:
            r.role = "origin" if r.tasks else ("extra pilot" if r.site in held and r.pilots else "")
            if r.tasks and r.pilots:     # when this site's share would be done, as predicted
                slots = max(1, r.pilots[0] // bag.cores_per_task)
                wait = next((e["wait_s"] for e in r.menu if e["slots"] == slots), r.wait_s)
                finish = predicted_ttc(wait, r.tx, r.tasks, slots)
                r.finish_s = None if finish == math.inf else finish
    finishes = [r.finish_s for r in rows if r.tasks]
    return {
        "bag": bag.name, "tasks": bag.count, "strategy": strat.name, "estimate": source,
        "quantile": quantile, "confidence": confidence, "clock": clock,
        "predicted_ttc_s": max(finishes) if finishes and None not in finishes else None,
        "sites": [r.as_dict() for r in rows],
        "moves": [a.kind for a in actions if isinstance(a, Decision) and a.kind == "site-lost"],
        "problem": problem,
        "submitted": False,
    }
