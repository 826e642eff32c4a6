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

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from resel.backends.jobs import QueueReader, Scheduler, SlotReader
from resel.domain import Bag, Site
from resel.engine import Engine
from resel.errors import ReselError
from resel.events import BagSubmitted, Decision, SiteLost, SubmitPilot
from resel.models.finish import constant, plan_finish, quantiles_of, share_samples, wait_law_from_quantiles
from resel.models.lim import site_rates
from resel.selection import Strategy, predicted_ttc

#: wait quantiles kept per menu entry (the finish-time draws interpolate between them)
WAIT_PS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)

SOURCES = ("auto", "history", "twin", "scheduler")


@dataclass
class SitePlan:
    """One site's row of the plan. Seconds are from now; None = not known (``*_note`` says why)."""

    site: str
    kind: str
    pilot_cores: int                        # cores of the pilot this row's numbers are about (:func:`shown_entry`)
    walltime: float                         # that pilot's walltime
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
    slots: int = 0                          # task slots of those pilots together (a pool: one per pilot)
    role: str = ""                          # "origin", "extra pilot" or ""
    #: the sites file's ``reselect_target`` (the queue-aware strategy holds its extra sites whatever it says)
    reselect_target: bool = False
    #: one task's data time here in seconds, by part (None: the bag moves no data)
    data: dict[str, float] | None = None
    tx_interval: list[float] | None = None  # 90 % interval of one task's T_x (None: nothing measured)
    tx_model: str = "lim"                   # "lim" or "fit"
    tx_detail: str = ""                     # which fit, or LIM's formula; and where the spread comes from
    finish_p50: float | None = None         # the share's finish time, median and 90th percentile
    finish_p90: float | None = None
    wait_p50: float | None = None           # the chosen pilot's wait percentiles (None: spread unknown)
    wait_p90: float | None = None
    wait_note: str | None = None
    #: a pool's per-slot speeds from its ads: {"speeds", "weights", "what"} (None: not published)
    slot_spread: dict[str, Any] | None = None
    #: every pilot size weighed: {slots, cores, history_s, twin_s, scheduler_s, used, wait_s}
    menu: list[dict[str, Any]] = field(default_factory=list)
    #: the user's limits there and what they did to the pilots (:class:`~resel.live.site_limits.SiteLimits`)
    limits: dict[str, Any] | None = None
    #: why the site was chosen, given extra pilots or left out (:mod:`resel.live.plan_explain`)
    explain: dict[str, Any] | None = None

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
    """Probe every site concurrently, choose estimates, run the engine's first step.

    Args:
        runtime: the :class:`~resel.models.runtime.RuntimeModel` the run would use (default:
            LIM with ``clock``, no intervals).
        risk: re-selection windows at this upper quantile of Ŵ (the engine's input, shown).
        objective: ``p50`` or ``p90`` — what the queue-aware split minimises: the plan's
            predicted finish with point waits and T̂x, or with each site's 90th-percentile wait
            and run time.
        wait_errors: per estimate source (``twin``, ``scheduler``, ``history``), a
            :class:`~resel.models.conditioned.ConditionedWait` holding the sites' past errors of
            that estimate; the spread of each wait comes from it.
        rows: the sites' rows already probed (simulated sites); None asks the live sites.
        limits: per site, the user's limits (:class:`~resel.live.site_limits.SiteLimits`); None
            asks the live sites (with ``rows`` None). Pilots are sized within them, and a site
            they leave no room on is given up, as the run does.

    Returns a JSON-ready document: per site the three estimates with their notes, T̂x and its
    interval, the predicted TTC, the engine's plan (tasks, pilots, role) and the share's P50/P90
    finish; the plan's P50/P90 finish; nothing is submitted.
    """
    if source not in SOURCES:
        raise ReselError(f"unknown estimate source {source!r}; one of {', '.join(SOURCES)}")
    if objective not in ("p50", "p90"):
        raise ReselError(f"unknown objective {objective!r}; p50 or p90")
    strat = Strategy.parse(strategy)
    if limits is None and rows is None:
        from resel.live.site_limits import read_limits
        limits = read_limits(sites, opener)
    if limits:
        from resel.live.site_limits import apply_limits
        sites = apply_limits(sites, limits, bag.cores_per_task)
    if runtime is None:
        from resel.models.runtime import RuntimeModel, SiteRuntime
        lim = site_rates(sites, clock)
        runtime = RuntimeModel({s.name: SiteRuntime(s.name, lim[s.name], "lim", f"LIM ({clock} clock)")
                                for s in sites}, "lim")
    instr = bag.profile.instructions
    engine_rates = runtime.engine_rates(instr, risk=risk, objective=objective)
    # priced with the bag's stated data, as the run's engine is: the same split, the same pilots
    from resel.transfer import TransferModel
    data = TransferModel.from_bag(bag, sites)
    engine = Engine(bag, sites, strat, seed=seed, clock=clock, rates=engine_rates, data=data)
    shapes = engine.probe_shapes()
    menu = engine.probe_menu()
    txs = list(engine.tx)

    def one(i: int) -> SitePlan:
        sizes = menu[i] if strat.asks_waits and menu[i] else [(0, *shapes[i])]
        return probe_site(sites[i], sizes, txs[i], history, quantile=quantile, confidence=confidence,
                          opener=opener)

    if rows is None:
        with ThreadPoolExecutor(max_workers=max(1, len(sites))) as pool:
            rows = list(pool.map(one, range(len(sites))))
    for i, row in enumerate(rows):
        srt = runtime.sites[row.site]
        if srt.source == "lim" and not srt.ratios and row.slot_spread and len(set(row.slot_spread["speeds"])) > 1:
            from dataclasses import replace as _replace
            from resel.models.runtime import slot_ratios
            sp = row.slot_spread
            srt = runtime.sites[row.site] = _replace(
                srt, ratios=slot_ratios(sp["speeds"], sp["weights"]), spread=f"{sp['what']} (n={len(sp['speeds'])} slots)")
        if row.slot_spread:     # the JSON keeps what the ads said, not every slot
            sp = row.slot_spread
            row.slot_spread = {"what": sp["what"], "slots": len(sp["speeds"]),
                               "speed_min": min(sp["speeds"]), "speed_max": max(sp["speeds"])}
        row.tx = txs[i]
        iv = srt.interval(instr, 0.9)
        row.tx_interval = list(iv) if iv else None
        row.tx_model = srt.source
        row.tx_detail = srt.detail + (f"; interval from {srt.spread}" if srt.spread else "; no interval: nothing measured")
        for entry in row.menu:
            if entry.get("wait_quantiles"):      # given with the rows (a drawn-wait simulated site)
                continue
            used, w = choose(entry, source)
            entry["wait_quantiles"], entry["wait_note"] = _wait_quantiles(wait_errors, used, row.site, entry, w,
                                                                         walltime=row.walltime)
    dts = {s.name: (data.times(s.name) if data is not None else None) for s in sites}
    for i, row in enumerate(rows):
        row.used, row.wait_s = choose(row, source)
        row.reselect_target = sites[i].reselect_target
        dt = dts.get(row.site)
        row.data = None if dt is None else {"own_in_s": dt.own_in, "shared_in_s": dt.shared_in, "out_s": dt.out}
        best = math.inf
        for entry in row.menu:
            entry["used"], entry["wait_s"] = choose(entry, source)
            slots = entry["slots"] or max(1, shapes[i][0] // bag.cores_per_task)
            alone = predicted_ttc(entry["wait_s"], row.tx, bag.count, slots, dt)
            entry["bag_alone_s"] = None if alone == math.inf else alone
            best = min(best, alone)
        row.ttc_s = None if best == math.inf else best
    # the engine ranks each site by its full pilot's estimate (menu[0]): taken before the rows
    # are turned to the pilot each asks for
    estimates = {r.site: r.wait_s for r in rows}

    wait_menu = ({r.site: [planned_wait(e, objective) for e in r.menu] for r in rows if not r.error}
                 if strat.asks_waits else None)
    events: list[Any] = [BagSubmitted(time=0.0, wait_estimates=estimates, wait_menu=wait_menu)]
    events += [SiteLost(time=0.0, site=r.site, reason=r.error) for r in rows if r.error]
    for r in rows:
        found = (limits or {}).get(r.site)
        if found is not None:
            r.limits = found.as_dict()
            if found.blocked and not r.error:
                events.append(SiteLost(time=0.0, site=r.site, reason=f"limits: {found.blocked}"))
    problem = None
    finishes: list[float | None] = []
    actions: list[Any] = []
    try:
        for ev in events:
            actions += engine.handle(ev)
    except ReselError as exc:
        problem = str(exc)
    by_name = {r.site: r for r in rows}
    walltimes: dict[str, float] = {}
    heaviest: dict[str, float] = {}   # a task table: the largest weight bound to each site
    if problem is None and bag.weights is not None:
        for t in engine.tasks:
            name = engine.sites[t.origin].name
            heaviest[name] = max(heaviest.get(name, 0.0), bag.weights[t.id])
    if problem is None:
        for t in engine.tasks:
            by_name[engine.sites[t.origin].name].tasks += 1
        for a in actions:
            if isinstance(a, SubmitPilot):
                by_name[a.site].pilots.append(a.cores)
                walltimes.setdefault(a.site, a.walltime)
        held = engine.reselection_targets
        for r in rows:
            r.role = "origin" if r.tasks else ("extra pilot" if r.site in held and r.pilots else "")
    for r in rows:
        _show_asked_pilot(r, bag.cores_per_task, walltimes.get(r.site))
        if r.tasks and r.pilots:     # when this site's share would be done, as predicted
            finish = predicted_ttc(r.wait_s, r.tx, r.tasks, r.slots, dts.get(r.site))
            largest = heaviest.get(r.site)
            if largest is not None and finish != math.inf:   # a task table: no sooner than its largest task there
                finish = max(finish, predicted_ttc(r.wait_s, r.tx * largest, 1, 1, dts.get(r.site)))
            r.finish_s = None if finish == math.inf else finish
    pools = {s.name for s in sites if s.pilot.mode == "per-task"}
    shares = _finish_distributions(rows, runtime, bag, seed, dts, pools, heaviest) if problem is None else {}
    whole = plan_finish(shares) if shares and len(shares) == sum(1 for r in rows if r.tasks) else None
    finishes = [r.finish_s for r in rows if r.tasks]
    plan_ttc = max(finishes) if finishes and None not in finishes else None
    from resel.live.plan_explain import explain
    said = explain([r.as_dict() for r in rows], strategy=strat.name, plan_ttc=plan_ttc, engine=engine)
    for r in rows:
        r.explain = said[r.site]
    return {
        "bag": bag.name, "tasks": bag.count, "strategy": strat.name, "estimate": source,
        "auto": None if engine.auto_choice is None else {"ran_as": engine.auto_choice[0], "why": engine.auto_choice[1]},
        "quantile": quantile, "confidence": confidence, "clock": clock,
        "model": {"asked": runtime.model, "used": runtime.used, "application": runtime.application,
                  "summary": runtime.summary(), "notes": runtime.notes},
        "objective": objective, "risk": risk,
        "table": _table_summary(bag, engine.largest_first),
        "finish_p50_s": whole.p50 if whole else None, "finish_p90_s": whole.p90 if whole else None,
        "predicted_ttc_s": plan_ttc,
        "sites": [r.as_dict() for r in rows],
        "moves": [a.kind for a in actions if isinstance(a, Decision) and a.kind == "site-lost"],
        "problem": problem,
        "submitted": False,
    }


def _table_summary(bag: Bag, largest_first: bool) -> dict[str, Any] | None:
    """A bag with a task table: its tasks' instructions (mean — what each row's T̂x is of —,
    smallest, largest; a task's T̂x is its row's times its instructions over the mean), the
    widest task's cores, the order asked for and the one they wait in (``auto`` resolved).
    None for a bag of equal tasks."""
    if not bag.tasks:
        return None
    instr = [t.instructions for t in bag.tasks]
    return {"tasks": len(instr), "instructions_mean": bag.profile.instructions, "instructions_min": min(instr),
            "instructions_max": max(instr), "cores_max": bag.cores_per_task, "order_asked": bag.order,
            "order": "largest" if largest_first else "given"}


def shown_entry(row: Any) -> dict[str, Any] | None:
    """The menu entry (pilot size) a row's numbers are about: the size of the pilot(s) the plan
    asks for there; for a site asked for none, the size that gives the bag alone its lowest
    predicted TTC (what "bag alone" and a "too slow" verdict compare); None without a menu."""
    get = row.get if isinstance(row, dict) else lambda k, d=None: getattr(row, k, d)
    menu, pilots = get("menu") or [], get("pilots") or []
    if pilots:
        found = next((e for e in menu if e.get("cores") == pilots[0]), None)
        if found is not None:
            return found
    known = [e for e in menu if e.get("bag_alone_s") is not None]
    if known:
        return min(known, key=lambda e: e["bag_alone_s"])     # ties: the larger pilot (menu order)
    return menu[0] if menu else None


def _show_asked_pilot(row: SitePlan, cores_per_task: int, walltime: float | None) -> None:
    """Turn a row's pilot fields (cores, walltime, the three estimates, the one used, the wait)
    to the pilot the plan asks for there (:func:`shown_entry`), so that the table, ``--explain``
    and ``--json`` speak of one pilot; and count its task slots: a single-mode site's pilot
    holds cores / cores_per_task of them, a pool's one-task pilots one each, side by side."""
    entry = shown_entry(row)
    if entry is not None:
        row.pilot_cores = entry.get("cores") or row.pilot_cores
        for name in ("history", "twin", "scheduler"):
            setattr(row, f"{name}_s", entry.get(f"{name}_s"))
            setattr(row, f"{name}_note", entry.get(f"{name}_note"))
        row.used, row.wait_s = entry.get("used"), entry.get("wait_s")
    if walltime is not None:
        row.walltime = walltime
    row.slots = sum(max(1, c // max(1, cores_per_task)) for c in row.pilots)


def planned_wait(entry: dict, objective: str) -> float | None:
    """What the queue-aware split weighs for one pilot size: its start estimate, or with the
    ``p90`` objective its conditioned 90th percentile where the site has an error history."""
    if objective == "p90" and entry.get("wait_quantiles"):
        return entry["wait_quantiles"]["0.9"]
    return entry.get("wait_s")


def menu_waits(row: SitePlan, source: str, objective: str, wait_errors: Any) -> list[float | None]:
    """The waits of every size of a probed row as the split weighs them (the live coordinator's
    preflight uses this, so a run plans exactly as ``resel plan`` shows)."""
    out = []
    for entry in row.menu:
        used, w = choose(entry, source)
        entry["wait_s"] = w
        if objective == "p90" and not entry.get("wait_quantiles"):
            entry["wait_quantiles"], entry["wait_note"] = _wait_quantiles(wait_errors, used, row.site, entry, w,
                                                                         walltime=row.walltime)
        out.append(planned_wait(entry, objective))
    return out


def _wait_quantiles(wait_errors: Any, used: str | None, site: str, entry: dict, w: float | None, *,
                    walltime: float) -> tuple[dict[str, float] | None, str | None]:
    """The conditioned wait percentiles of one menu entry, or None with why."""
    if w is None or not math.isfinite(w):
        return None, None
    model = (wait_errors or {}).get(used) if used else None
    if model is None:
        return None, (f"no error history of the {used} estimate on {site}: its spread is unknown"
                      + ("" if used != "history" else " (the history bound is a bound, not a distribution)"))
    q = model.predict(site, int(entry.get("cores") or 1), walltime, w, WAIT_PS)
    if q is None:
        return None, f"too few past errors of the {used} estimate on {site} (needs {model.min_errors})"
    return ({f"{p:g}": v for p, v in q.quantiles},
            f"{used} estimate corrected by {q.n} past errors ({q.level} level)")


def _finish_distributions(rows: list[SitePlan], runtime: Any, bag: Bag, seed: int,
                          data: dict[str, Any], pools: set[str],
                          heaviest: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Each origin site's share finish draws (P50/P90 stored on the row); the dict feeds the
    plan's own finish time. A share whose wait is unknown is left out (its row says so).

    The share runs on the pilot(s) the row shows (:func:`shown_entry`), ``row.slots`` tasks at
    a time; a pool's one-task pilots (``pools``) each wait on their own, so its waves end with
    the latest of their waits and run times (:func:`~resel.models.finish.share_samples`).
    ``heaviest`` (a task table): per site the largest task's weight bound there; no draw ends
    before its wait and that task's T̂x."""
    import random as _random
    shares: dict[str, list[float]] = {}
    for r in rows:
        if not (r.tasks and r.pilots):
            continue
        entry = shown_entry(r) or {}
        w = r.wait_s
        if w is None or not math.isfinite(w):
            continue
        wq = entry.get("wait_quantiles")
        if wq:
            law = wait_law_from_quantiles([(float(p), v) for p, v in wq.items()])
            r.wait_p50, r.wait_p90 = wq["0.5"], wq["0.9"]
        else:
            law = constant(w)
        r.wait_note = entry.get("wait_note")
        draws = share_samples(law, r.tx, runtime.sites[r.site].ratios, r.tasks, r.slots,
                              _random.Random(f"finish:{seed}:{r.site}"), data=data.get(r.site),
                              own_waits=r.site in pools)
        largest = (heaviest or {}).get(r.site)
        if largest is not None:
            floor = predicted_ttc(w, r.tx * largest, 1, 1, data.get(r.site))
            draws = [max(d, floor) for d in draws]
        fq = quantiles_of(draws)
        r.finish_p50, r.finish_p90 = fq.p50, fq.p90
        shares[r.site] = draws
    return shares
