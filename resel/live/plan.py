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

Each row also says *when the share would be done, and how sure that is* (issue 16): T̂x comes
from the runtime model the run would use (LIM or the stored fit, :mod:`resel.models.fitted`),
with its interval; the wait's spread from the conditioned predictor where the site has an
error history for the estimate used (:mod:`resel.models.conditioned`), else it is unknown and
the row says so; the share's and the whole plan's P50/P90 finish times are drawn by
:mod:`resel.models.finish`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from resel import planning
from resel.backends.jobs import QueueReader, Scheduler, SlotReader
from resel.domain import Bag, Site
from resel.planning import SitePlan

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
        row = site_estimates(ps.scheduler, site, shapes, tx, history, quantile=quantile, confidence=confidence)
        row.slot_spread = _slot_spread(ps.scheduler)
        return row
    except Exception as exc:   # noqa: BLE001 - the row says why; the other sites go on
        _, cores, walltime = shapes[0] if shapes else (0, 0, 0.0)
        row = SitePlan(site.name, site.kind, cores, walltime, tx, error=_err(exc))
        row.twin_note = row.scheduler_note = "site unreachable"
        row.history_s, row.history_note = _history(history, site.name, cores, walltime, quantile, confidence)
        return row
    finally:
        close_quietly(ps)


def _slot_spread(sched: Scheduler) -> dict[str, Any] | None:
    """A pool's slot speeds from its collector's ads (HTCondor), or None (other kinds, or none
    published; a failure to read them is no reason to fail the row)."""
    if not isinstance(sched, SlotReader):
        return None
    try:
        from resel.models.fitted import slot_speeds_from_ads
        found = slot_speeds_from_ads(sched.slots())
    except Exception:   # noqa: BLE001 - the interval is then simply not known
        return None
    if found is None:
        return None
    speeds, weights, what = found
    return {"speeds": speeds, "weights": weights, "what": what}


def _history(history: Any, site: str, cores: int, walltime: float, quantile: float,
             confidence: float) -> tuple[float | None, str]:
    if history is None:
        return None, "no history store"
    bound = history.bound(site, cores, walltime, quantile=quantile, confidence=confidence)
    if bound.seconds is None:
        return None, bound.reason
    return bound.seconds, f"q{quantile:g} bound at {confidence:.0%} confidence from {bound.n} waits ({bound.level})"


def _at_least_latency(entry: dict[str, Any], latency: tuple[float, int] | None) -> None:
    """A twin's or scheduler's "starts now" is raised to the site's start latency — what its
    pilots that did not queue really took to start (:meth:`WaitHistory.start_latency`)."""
    if latency is None:
        return
    seconds, n = latency
    for name in ("twin", "scheduler"):
        value = entry.get(f"{name}_s")
        if value is not None and value < seconds:
            entry[f"{name}_s"] = seconds
            entry[f"{name}_note"] = "; ".join(filter(None, [
                entry.get(f"{name}_note"), f"at least the site's start latency, {seconds:.1f} s (the median start of "
                                           f"its {n} pilot(s) of resel that did not queue)"]))


def site_estimates(sched: Scheduler, site: Site, shapes: list[tuple[int, int, float]], tx: float, history: Any, *,
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
    latency = history.start_latency(site.name) if hasattr(history, "start_latency") else None
    av = sched.availability()
    row.free_cores, row.total_cores = av.free_cores, av.total_cores
    snap, snap_note = None, None
    if not isinstance(sched, QueueReader):
        api = site.access.api if site.access else "?"
        snap_note = f"no queue snapshot for {site.kind} sites through api {api!r}"
    else:
        try:
            snap = sched.queue_snapshot()
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
        _at_least_latency(entry, latency)
        row.menu.append(entry)
    full = row.menu[0]
    for name in ("history", "twin", "scheduler"):
        setattr(row, f"{name}_s", full[f"{name}_s"])
        setattr(row, f"{name}_note", full[f"{name}_note"])
    return row



def plan(bag: Bag, sites: list[Site], *, strategy: str = "queue+reselect", source: str = "auto",
         quantile: float = 0.95, confidence: float = 0.95, clock: str = "base", seed: int = 0,
         history: Any = None, opener: Callable[[Site], Any] | None = None, runtime: Any = None,
         risk: float | None = None, objective: str = "p50", wait_errors: Any = None,
         rows: list[SitePlan] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """Probe every site concurrently, choose estimates, run the engine's first step
    (:func:`resel.planning.plan`, which simulated sites' plans run too).

    Args:
        history: the sites' wait histories (:class:`~resel.models.history.WaitHistory`), for
            the history bound.
        opener: opens a site's client (default :func:`resel.backends.connect.open_site`).
        rows: the sites' rows already probed; None asks the live sites.
        limits: per site, the user's limits (:class:`~resel.live.site_limits.SiteLimits`); None
            asks the live sites (with ``rows`` None). Pilots are sized within them, and a site
            they leave no room on is given up, as the run does.

    The other arguments, and what it returns: :func:`resel.planning.plan`.
    """
    planning.check_options(strategy, source, objective)
    if limits is None and rows is None:
        from resel.live.site_limits import read_limits
        limits = read_limits(sites, opener)
    if limits:
        from resel.live.site_limits import apply_limits
        sites = apply_limits(sites, limits, bag.cores_per_task)

    def probe(asked: list[tuple[Site, list[tuple[int, int, float]], float]]) -> list[SitePlan]:
        def one(item: tuple[Site, list[tuple[int, int, float]], float]) -> SitePlan:
            site, sizes, tx = item
            return probe_site(site, sizes, tx, history, quantile=quantile, confidence=confidence, opener=opener)
        with ThreadPoolExecutor(max_workers=max(1, len(asked))) as pool:
            return list(pool.map(one, asked))

    return planning.plan(bag, sites, strategy=strategy, source=source, quantile=quantile, confidence=confidence,
                         clock=clock, seed=seed, runtime=runtime, risk=risk, objective=objective,
                         wait_errors=wait_errors, rows=rows, probe=probe, limits=limits)
