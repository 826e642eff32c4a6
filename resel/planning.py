"""The plan's computation, the same for live and simulated sites: which estimate ranks each
site, the engine's first step on them, each share's and the whole plan's finish.

``resel plan`` asks the live sites (:mod:`resel.live.plan`) or the simulator
(:mod:`resel.sim.plan`) for each site's row — its three start estimates for every pilot size —
and both hand the rows to :func:`plan` here, so a plan reads the same whichever sites it was
made for. Pure: no I/O, no clock; the rows carry what was asked.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from resel.domain import Bag, Site
from resel.engine import Engine
from resel.errors import ReselError
from resel.events import BagSubmitted, Decision, SiteLost, SubmitPilot
from resel.models.finish import (constant, plan_finish, pool_share_samples, quantiles_of, share_samples,
                                 wait_law_from_quantiles)
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
    #: why the site was chosen, given extra pilots or left out (:mod:`resel.planning_explain`)
    explain: dict[str, Any] | None = None
    #: a bag of several widths on a ``single`` site: its share packed into the pilots' cores as
    #: the engine packs them (:func:`packed_share`): {unit_cores, units, pilot_units, run_s, waves};
    #: on a pool: its tasks one per pilot, ``pilot_units`` at a time (:func:`pooled_share`), ``pool`` true
    packed: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

#: what asks the sites for their rows: (site, its pilot sizes (slots, cores, walltime) with the
#: full pilot first, T̂x of one task) for every site -> one row per site, in the same order
Probe = Callable[[list[tuple[Site, list[tuple[int, int, float]], float]]], list["SitePlan"]]


def choose(row: Any, source: str) -> tuple[str | None, float | None]:
    """The estimate to rank by (a :class:`SitePlan` or one of its ``menu`` entries): the one
    asked for, or (``auto``) the first known of twin, history bound, scheduler."""
    order = ("twin", "history", "scheduler") if source == "auto" else (source,)
    for name in order:
        value = row.get(f"{name}_s") if isinstance(row, dict) else getattr(row, f"{name}_s")
        if value is not None:
            return name, value
    return None, None


def check_options(strategy: str, source: str, objective: str) -> Strategy:
    """The strategy parsed; an unknown estimate source or objective refused (before any site
    is asked)."""
    if source not in SOURCES:
        raise ReselError(f"unknown estimate source {source!r}; one of {', '.join(SOURCES)}")
    if objective not in ("p50", "p90"):
        raise ReselError(f"unknown objective {objective!r}; p50 or p90")
    return Strategy.parse(strategy)


def plan(bag: Bag, sites: list[Site], *, strategy: str = "queue+reselect", source: str = "auto",
         quantile: float = 0.95, confidence: float = 0.95, clock: str = "base", seed: int = 0,
         runtime: Any = None, risk: float | None = None, objective: str = "p50", wait_errors: Any = None,
         rows: list[SitePlan] | None = None, probe: Probe | None = None,
         limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """Choose estimates for every site's rows and run the engine's first step on them.

    Args:
        sites: the sites, already sized within the user's ``limits`` where there are any.
        runtime: the :class:`~resel.models.runtime.RuntimeModel` the run would use (default:
            LIM with ``clock``, no intervals).
        risk: re-selection windows at this upper quantile of Ŵ (the engine's input, shown).
        objective: ``p50`` or ``p90`` — what the queue-aware split minimises: the plan's
            predicted finish with point waits and T̂x, or with each site's 90th-percentile wait
            and run time.
        wait_errors: per estimate source (``twin``, ``scheduler``, ``history``), a
            :class:`~resel.models.conditioned.ConditionedWait` holding the sites' past errors of
            that estimate; the spread of each wait comes from it.
        rows: the sites' rows already made (simulated sites, :mod:`resel.sim.plan`); None asks
            ``probe`` for them.
        probe: given (site, pilot sizes, T̂x) for every site, their rows (the live sites asked,
            :func:`resel.live.plan.plan`).
        limits: per site, the user's limits found (``as_dict()`` and ``blocked``): shown on the
            rows, and a site they leave no room on is given up, as the run does.

    Returns a JSON-ready document: per site the three estimates with their notes, T̂x and its
    interval, the predicted TTC, the engine's plan (tasks, pilots, role) and the share's P50/P90
    finish; the plan's P50/P90 finish; nothing is submitted.
    """
    strat = check_options(strategy, source, objective)
    if runtime is None:
        runtime = _lim_runtime(sites, clock)
    instr = bag.profile.instructions
    engine_rates = runtime.engine_rates(instr, risk=risk, objective=objective)
    # priced with the bag's stated data, as the run's engine is: the same split, the same pilots
    from resel.transfer import TransferModel
    data = TransferModel.from_bag(bag, sites)
    engine = Engine(bag, sites, strat, seed=seed, clock=clock, rates=engine_rates, data=data)
    shapes = engine.probe_shapes()
    menu = engine.probe_menu()
    txs = list(engine.tx)

    if rows is None:
        if probe is None:
            raise ReselError("a plan needs its sites' rows, or a probe that asks the sites for them")
        rows = probe([(site, menu[i] if strat.asks_waits and menu[i] else [(0, *shapes[i])], txs[i])
                      for i, site in enumerate(sites)])
    _price_rows(rows, runtime, instr, txs, source, wait_errors)
    dts = {s.name: (data.times(s.name) if data is not None else None) for s in sites}
    _bag_alone(rows, sites, shapes, bag, source, dts, engine)
    # the engine ranks each site by its full pilot's estimate (menu[0]): taken before the rows
    # are turned to the pilot each asks for
    estimates = {r.site: r.wait_s for r in rows}

    wait_menu = ({r.site: [planned_wait(e, objective) for e in r.menu] for r in rows if not r.error}
                 if strat.asks_waits else None)
    problem, actions = _first_step(engine, rows, estimates, wait_menu, limits)
    walltimes, heaviest = _engine_plan(engine, rows, actions, bag) if problem is None else ({}, {})
    pool_txs = _share_finishes(rows, bag, walltimes, heaviest, dts, engine)
    pools = {s.name for s in sites if s.pilot.mode == "per-task"}
    shares = _finish_distributions(rows, runtime, bag, seed, dts, pools, heaviest, pool_txs) if problem is None else {}
    whole = plan_finish(shares) if shares and len(shares) == sum(1 for r in rows if r.tasks) else None
    plan_ttc = _explained(rows, strat.name, engine)
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


def _lim_runtime(sites: list[Site], clock: str) -> Any:
    """The runtime model a plan uses when it is given none: LIM with ``clock``, no intervals."""
    from resel.models.runtime import RuntimeModel, SiteRuntime
    lim = site_rates(sites, clock)
    return RuntimeModel({s.name: SiteRuntime(s.name, lim[s.name], "lim", f"LIM ({clock} clock)") for s in sites},
                        "lim")


def _explained(rows: list[SitePlan], strategy: str, engine: Engine) -> float | None:
    """The plan's predicted TTC (its latest share's finish; None if one is unknown), and each row's
    reason for its role (:func:`resel.planning_explain.explain`)."""
    finishes: list[float | None] = [r.finish_s for r in rows if r.tasks]
    plan_ttc = max(finishes) if finishes and None not in finishes else None
    from resel.planning_explain import explain
    said = explain([r.as_dict() for r in rows], strategy=strategy, plan_ttc=plan_ttc, engine=engine)
    for r in rows:
        r.explain = said[r.site]
    return plan_ttc


def _price_rows(rows: list[SitePlan], runtime: Any, instr: float, txs: list[float], source: str,
                wait_errors: Any) -> None:
    """Each row's T̂x with its interval and the model that gave it (an HTCondor pool's slots
    of unequal speed give LIM an interval), and each pilot size's wait quantiles."""
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


def _bag_alone(rows: list[SitePlan], sites: list[Site], shapes: list[Any], bag: Bag, source: str,
              dts: dict[str, Any], engine: Engine) -> None:
    """Each row's chosen estimate and data times, and the TTC of the whole bag on that site alone
    (per pilot size, and the best of them). A bag of several widths on a ``single`` site: the
    menu's slots are units of cores, and the bag takes the units of all its tasks there — as
    many waves as the cores allow, as the queue-aware split counts it."""
    mixed = bag.task_cores is not None
    for i, row in enumerate(rows):
        # (a bag of one width: one slot per task, as before)
        need = sum(engine.task_slots(i, t) for t in range(bag.count)) if mixed else bag.count
        row.used, row.wait_s = choose(row, source)
        row.reselect_target = sites[i].reselect_target
        dt = dts.get(row.site)
        row.data = None if dt is None else {"own_in_s": dt.own_in, "shared_in_s": dt.shared_in, "out_s": dt.out}
        best = math.inf
        for entry in row.menu:
            entry["used"], entry["wait_s"] = choose(entry, source)
            slots = entry["slots"] or max(1, shapes[i][0] // (engine.slot_cores(i) if mixed else bag.cores_per_task))
            alone = predicted_ttc(entry["wait_s"], row.tx, need, slots, dt)
            entry["bag_alone_s"] = None if alone == math.inf else alone
            best = min(best, alone)
        row.ttc_s = None if best == math.inf else best


def _first_step(engine: Engine, rows: list[SitePlan], estimates: dict[str, Any], wait_menu: dict[str, Any] | None,
                limits: dict[str, Any] | None) -> tuple[str | None, list[Any]]:
    """The engine's first step on the rows: the bag submitted with every site's estimates, the
    sites that failed or that the user's limits leave no room on lost. Returns the problem the
    engine raised (None: none) and its actions."""
    events: list[Any] = [BagSubmitted(time=0.0, wait_estimates=estimates, wait_menu=wait_menu)]
    events += [SiteLost(time=0.0, site=r.site, reason=r.error) for r in rows if r.error]
    for r in rows:
        found = (limits or {}).get(r.site)
        if found is not None:
            r.limits = found.as_dict()
            if found.blocked and not r.error:
                events.append(SiteLost(time=0.0, site=r.site, reason=f"limits: {found.blocked}"))
    problem = None
    actions: list[Any] = []
    try:
        for ev in events:
            actions += engine.handle(ev)
    except ReselError as exc:
        problem = str(exc)
    if problem is None and rows and len(engine.lost_sites) == len(rows):
        # the engine gave every task up: a plan would only list the tasks it cannot place
        problem = "no site can run the bag: " + "; ".join(f"{name}: {why}" for name, why in engine.lost_sites.items())
    return problem, actions


def _engine_plan(engine: Engine, rows: list[SitePlan], actions: list[Any],
                 bag: Bag) -> tuple[dict[str, float], dict[str, float]]:
    """What the engine's first step did, on the rows: tasks bound, pilots asked, each site's role.
    Returns the walltime each site's first pilot asks, and with a task table the largest weight
    bound to each site."""
    by_name = {r.site: r for r in rows}
    walltimes: dict[str, float] = {}
    heaviest: dict[str, float] = {}   # a task table: the largest weight bound to each site
    if bag.weights is not None:
        for t in engine.tasks:
            name = engine.sites[t.origin].name
            heaviest[name] = max(heaviest.get(name, 0.0), bag.weights[t.id])
    for t in engine.tasks:
        by_name[engine.sites[t.origin].name].tasks += 1
    for a in actions:
        if isinstance(a, SubmitPilot):
            by_name[a.site].pilots.append(a.cores)
            walltimes.setdefault(a.site, a.walltime)
    held = engine.reselection_targets
    for r in rows:
        r.role = "origin" if r.tasks else ("extra pilot" if r.site in held and r.pilots else "")
    return walltimes, heaviest


def _share_finishes(rows: list[SitePlan], bag: Bag, walltimes: dict[str, float], heaviest: dict[str, float],
                    dts: dict[str, Any], engine: Engine) -> dict[str, list[float]]:
    """The pilot each row asks for, and when its share of the bag would be done, as predicted.
    Returns, per pool holding tasks of several widths, its tasks' T̂x in the order they wait
    (:func:`pooled_share`; its draws take them)."""
    pool_txs: dict[str, list[float]] = {}
    for i, r in enumerate(rows):
        pool = engine.sites[i].pilot.mode == "per-task"
        packing = bag.task_cores is not None and not pool
        if r.tasks and r.pilots and packing:
            r.packed = packed_share(engine, i, r.tx, r.pilots)
        _show_asked_pilot(r, engine.slot_cores(i) if packing else bag.cores_per_task, walltimes.get(r.site))
        if r.tasks and r.pilots and pool and bag.task_cores is not None and r.wait_s is not None:
            # (the pool's pilots at a time, as the engine caps them: its menu's one size)
            at_once = min(len(r.pilots), (engine.probe_menu()[i] or [(len(r.pilots),)])[0][0])
            r.packed, pool_txs[r.site] = pooled_share(engine, i, r.tx, r.wait_s, at_once, dts.get(r.site))
        if r.tasks and r.pilots:     # when this site's share would be done, as predicted
            if r.packed is not None and r.packed.get("pool"):
                dt = dts.get(r.site)
                finish = r.packed["run_s"] + (0.0 if dt is None else dt.shared_in + dt.out)
            elif r.packed is None:
                finish = predicted_ttc(r.wait_s, r.tx, r.tasks, r.slots, dts.get(r.site))
            else:
                finish = predicted_ttc(r.wait_s, r.packed["run_s"] / r.packed["waves"], r.packed["waves"], 1,
                                       dts.get(r.site))
            largest = heaviest.get(r.site)
            if largest is not None and finish != math.inf:   # a task table: no sooner than its largest task there
                finish = max(finish, predicted_ttc(r.wait_s, r.tx * largest, 1, 1, dts.get(r.site)))
            r.finish_s = None if finish == math.inf else finish
    return pool_txs


def packed_share(engine: Engine, x: int, tx: float, pilots: list[int]) -> dict[str, Any]:
    """Site x's share of a bag of several widths packed into ``pilots`` (their cores), each task
    its own T̂x (``tx`` × its weight), waiting in the engine's order (largest first where it
    orders so), as :func:`~resel.engine_packing.packed_run` packs them. ``waves`` is the fewest
    waves the cores allow (⌈units / pilot units⌉): the share's finish counts its data and its
    slots' spread per wave as a bag of one width does, over ``run_s`` / ``waves`` each."""
    from resel.engine_packing import packed_run
    unit = engine.slot_cores(x)
    tids = share_order(engine, x)
    weights = engine.bag.weights or (1.0,) * engine.bag.count
    units = [engine.task_slots(x, tid) for tid in tids]
    pools = [c // unit for c in pilots]
    run = packed_run(units, [tx * weights[tid] for tid in tids], pools)
    return {"unit_cores": unit, "units": sum(units), "pilot_units": sum(pools), "run_s": run,
            "waves": max(1, min(len(tids), -(-sum(units) // max(1, sum(pools)))))}


def share_order(engine: Engine, x: int) -> list[int]:
    """The tasks bound to site x, in the order they wait there (largest first where the
    engine orders so; ties by index, as the engine)."""
    tids = [t.id for t in engine.tasks if t.origin == x]
    if engine.largest_first:
        weights = engine.bag.weights or (1.0,) * engine.bag.count
        tids.sort(key=lambda tid: -weights[tid])
    return tids


def pooled_share(engine: Engine, x: int, tx: float, wait: float, slots: int,
                 data: Any = None) -> tuple[dict[str, Any], list[float]]:
    """Pool x's share of a bag of several widths, by the tasks it really holds: each task its
    own T̂x (``tx`` × its weight) in the engine's order, one pilot each, ``slots`` pilots at a
    time (the pool's cap: 2,000 cores in 4-core pilots run 500), the next task's pilot
    submitted as one ends. Returns the row's ``packed`` (``pool`` true; ``run_s``: that
    schedule's end at the point values — each pilot's ``wait``, its own inputs, its T̂x —, the
    share's point finish without the shared inputs and outputs) and the tasks' T̂x in order,
    which its draws take (:func:`~resel.models.finish.pool_share_samples`).
    Priced by the bag's mean T̂x in waves of ``slots``, a share of 892 tasks whose sizes span two
    decades ended when its largest task did, not when the pool ran them all."""
    from resel.models.finish import pool_starts
    weights = engine.bag.weights or (1.0,) * engine.bag.count
    txs = [tx * weights[tid] for tid in share_order(engine, x)]
    own = 0.0 if data is None else data.own_in
    durations = [max(0.0, wait) + own + t for t in txs]
    starts = pool_starts(durations, slots)
    return {"unit_cores": engine.bag.cores_per_task, "units": len(txs), "pilot_units": slots,
            "run_s": max(s + d for s, d in zip(starts, durations)), "waves": max(1, -(-len(txs) // max(1, slots))),
            "pool": True}, txs


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
    predicted TTC (what "bag alone" and a "too slow" verdict compare); None without a menu.

    A packed share (``packed``: several widths) asks for a pilot of its tasks' cores, which the
    menu seldom lists: its size is the smallest listed that holds it (whose start estimate is
    that of a pilot of its shape), not the one the bag alone would pick."""
    get = row.get if isinstance(row, dict) else lambda k, d=None: getattr(row, k, d)
    menu, pilots = get("menu") or [], get("pilots") or []
    if pilots:
        found = next((e for e in menu if e.get("cores") == pilots[0]), None)
        if found is None and get("packed") is not None:
            found = min((e for e in menu if (e.get("cores") or 0) >= pilots[0]), key=lambda e: e["cores"], default=None)
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
    holds cores / cores_per_task of them (a bag of several widths: cores / the unit it packs
    them in, what its agent is told), a pool's one-task pilots one each, side by side."""
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
                          heaviest: dict[str, float] | None = None,
                          pool_txs: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
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
        tx, waves = r.tx, None
        rng = _random.Random(f"finish:{seed}:{r.site}")
        if r.site in (pool_txs or {}):    # a pool's tasks of several sizes, each its own
            draws = pool_share_samples(law, pool_txs[r.site], runtime.sites[r.site].ratios, r.packed["pilot_units"],
                                       rng, data=data.get(r.site))
        else:
            if r.packed is not None:      # several widths packed: its waves' worth, tasks spread over them
                k = r.packed["waves"]
                tx, waves = r.packed["run_s"] / k, [r.tasks // k + (j < r.tasks % k) for j in range(k)]
            draws = share_samples(law, tx, runtime.sites[r.site].ratios, r.tasks, r.slots, rng,
                                  data=data.get(r.site), own_waits=r.site in pools, waves=waves)
        largest = (heaviest or {}).get(r.site)
        # (a share of several widths counts each task's own T̂x in its draws, each after the
        # drawn wait; this floor's wait is the point estimate, which a wait corrected by its
        # past errors may put far later: on sites-traces-wagap.toml the twin's 82,592 s where
        # the corrected P50 said 30,108 s and the run started the pilot at 37,702 s)
        if largest is not None and r.packed is None:
            floor = predicted_ttc(w, r.tx * largest, 1, 1, data.get(r.site))
            draws = [max(d, floor) for d in draws]
        fq = quantiles_of(draws)
        r.finish_p50, r.finish_p90 = fq.p50, fq.p90
        shares[r.site] = draws
    return shares
