"""``resel plan`` on simulated sites: the same table as for live ones, from the simulator.

The three start estimates of each pilot size come from the simulator itself — a run of
:func:`resel.sim.simulation.simulate` stopped when the bag arrives (virtual time 0), once
per source (``scheduler``, ``twin``, ``history``), reading the estimates it handed the engine
from the recorded :class:`~resel.events.BagSubmitted` — so the plan shows exactly what a
simulated run would decide with.

The spread of each wait:

* a site with a drawn wait (a wait distribution, no queue) has no "now" to condition on: its
  waits are independent draws, so the past waits of pilots of the same shape
  (:func:`resel.sim.estimates.drawn_history`, the history source's own sample) give
  the wait's percentiles directly;
* a site whose queue replays a trace gets the conditioned predictor: probe pilots of each
  menu size injected into the same trace before the bag arrives
  (:func:`resel.sim.finish_eval.simulated_probes`) teach it the errors the twin and the scheduler's
  estimate made on this site.
"""

from __future__ import annotations

import math
from typing import Any

from resel.domain import Bag, Site
from resel.planning import WAIT_PS, SitePlan

#: probe instants per queue site when learning the estimates' errors before the bag arrives
LEARN_POINTS = 120


def _bag_submitted(result: Any) -> Any:
    for _t, kind, ev in result.events:
        if kind == "BagSubmitted":
            return ev
    raise RuntimeError("the simulation recorded no BagSubmitted")


def simulated_rows(bag: Bag, sites: list[Site], strategy: str, *, quantile: float, confidence: float,
                   seed: int, rates: Any, clock: str = "base") -> tuple[list[SitePlan], dict[str, Any]]:
    """The plan's rows for simulated sites, and the wait-error models learned for queue sites
    (per source, as :func:`resel.planning.plan` takes them)."""
    from resel.sim.estimates import drawn_history
    from resel.sim.simulation import simulate
    from resel.engine import Engine
    from resel.models.finish import empirical
    from resel.selection import Strategy

    from resel.transfer import TransferModel

    strat = Strategy.parse(strategy)
    # priced with the bag's data as the simulated run below is, so its pilot shapes are the run's
    engine = Engine(bag, sites, strat, seed=seed, clock=clock, rates=rates, data=TransferModel.from_bag(bag, sites))
    shapes, menu = engine.probe_shapes(), engine.probe_menu()
    by_source: dict[str, Any] = {}
    for src in ("scheduler", "twin", "history"):
        res = simulate(bag, sites, strat, seed=seed, clock=clock, until=0.0, estimate=src, quantile=quantile,
                       confidence=confidence, rates=rates)
        by_source[src] = _bag_submitted(res)
    rows = []
    for i, site in enumerate(sites):
        sizes = menu[i] if strat.asks_waits and menu[i] else [(0, *shapes[i])]
        _, cores, walltime = sizes[0]
        row = SitePlan(site.name, site.kind, cores, walltime, engine.tx[i], total_cores=site.cores)
        for k, (slots, cores_k, walltime_k) in enumerate(sizes):
            entry: dict[str, Any] = {"slots": slots, "cores": cores_k}
            for src, ev in by_source.items():
                if ev.wait_menu is not None and strat.asks_waits:
                    vals = ev.wait_menu.get(site.name) or []
                    v = vals[k] if k < len(vals) else None
                else:
                    v = (ev.wait_estimates or {}).get(site.name) if k == 0 else None
                v = None if v is None or not math.isfinite(v) else v
                entry[f"{src}_s"] = v
                entry[f"{src}_note"] = None if v is not None else f"no {src} estimate"
            if site.queue is None:
                past = drawn_history(site, cores_k, seed)
                law = empirical(past)
                entry["wait_quantiles"] = {f"{p:g}": law(p) for p in WAIT_PS}
                entry["wait_note"] = (f"drawn waits are independent: percentiles of {len(past)} past pilots "
                                      f"of {cores_k} cores")
            row.menu.append(entry)
        full = row.menu[0]
        for name in ("history", "twin", "scheduler"):
            setattr(row, f"{name}_s", full[f"{name}_s"])
            setattr(row, f"{name}_note", full[f"{name}_note"])
        rows.append(row)
    errors = learn_queue_errors(sites, menu if strat.asks_waits else
                                {i: [(0, *shapes[i])] for i in range(len(sites))})
    return rows, errors


def simulated_plan(bag: Bag, sites: list[Site], *, strategy: str, source: str, quantile: float, confidence: float,
                   clock: str, seed: int, runtime: Any, risk: float | None = None,
                   objective: str = "p50") -> dict[str, Any]:
    """``resel plan`` on simulated sites: their rows (:func:`simulated_rows`, with the engine's
    rates of ``runtime``) planned by :func:`resel.planning.plan`, as live sites' rows are."""
    from resel.planning import plan
    rows, errors = simulated_rows(bag, sites, strategy, quantile=quantile, confidence=confidence, seed=seed,
                                  rates=runtime.engine_rates(bag.profile.instructions, risk=risk, objective=objective),
                                  clock=clock)
    return plan(bag, sites, strategy=strategy, source=source, quantile=quantile, confidence=confidence, clock=clock,
                seed=seed, runtime=runtime, risk=risk, objective=objective, wait_errors=errors, rows=rows)


def learn_queue_errors(sites: list[Site], menu: dict[int, list[tuple[int, int, float]]],
                       points: int = LEARN_POINTS, workers: int | None = None) -> dict[str, Any]:
    """The twin's and the scheduler's errors on each queue site's trace before the bag
    arrives: probe pilots of the site's menu sizes at ``points`` instants of the replay,
    walked forward (:func:`resel.models.conditioned.walk_forward` order: a probe teaches only
    once it started, and only probes that started before the bag's arrival teach at all).

    A site's probes are kept between runs (:mod:`resel.sim.probe_cache`): they depend only on
    its trace, queue, shapes and resel's replay code, and replaying them is most of a plan.
    Those not kept are replayed in ``workers`` processes (default: the cores this process may
    use), the sites' instants split between them (:func:`probe_sites`)."""
    from resel.models.conditioned import ConditionedWait
    from resel.sim import probe_cache

    models = {"twin": ConditionedWait(), "scheduler": ConditionedWait()}
    wanted: dict[int, tuple[Any, list[tuple[int, float]], dict]] = {}
    for i, site in enumerate(sites):
        q = site.queue
        if q is None:
            continue
        shapes = sorted({(c, w) for _, c, w in menu.get(i, []) if 0 < c <= site.cores})
        if shapes:
            wanted[i] = (q, shapes, probe_cache.inputs(q.trace, q.policy, site.cores, q.offset, q.load, q.speed,
                                                       shapes, points))
    found = {i: probe_cache.load(key) for i, (_, _, key) in wanted.items()}
    missing = [i for i, rows in found.items() if rows is None]
    if missing:
        replayed = probe_sites([(wanted[i][0], sites[i].cores, wanted[i][1]) for i in missing], points, workers)
        for i, rows in zip(missing, replayed):
            probe_cache.save(wanted[i][2], rows)
            found[i] = rows
    for i in wanted:
        for cores, walltime, src, estimate, real in found[i]:
            models[src].observe(sites[i].name, cores, walltime, estimate, real)
    return models


ProbeRow = tuple[int, float, str, float, float]


def site_probes(q: Any, cores: int, shapes: list[tuple[int, float]], points: int) -> list[ProbeRow]:
    """A queue site's probes that teach: (cores, walltime, source, estimate, real wait) of each
    probe pilot started before the bag's arrival, in the order they are learned."""
    return [row for instant in _probe_part(q, cores, shapes, points, 0, 1) for row in instant]


def probe_sites(asked: list[tuple[Any, int, list[tuple[int, float]]]], points: int,
                workers: int | None = None) -> list[list[ProbeRow]]:
    """:func:`site_probes` of each (queue, cores, shapes) asked, the same rows in the same order,
    in up to ``workers`` processes (default: the cores this process may use).

    Each probe is a pure function of the replay up to its instant (the estimators read the
    queue as it stands and learn nothing from the replay), and replaying a whole trace costs
    well under a second where its probes cost up to a minute (sites-hetero's Seth: 0.3 s
    against 51 s), so each process replays the trace itself and probes every ``parts``-th
    instant; the rows are put back in the instants' order. Dealt out so, not cut into runs of
    consecutive instants: the probes near the bag's arrival cost the most (Seth's last quarter
    of instants: 42 of its 53 s), and neighbours cost alike."""
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    from resel.sim.experiment import local_cores

    workers = local_cores() if workers is None else max(1, workers)
    # fork, where there is one: spawn and forkserver run the caller's main module again in each
    # process, which a user's script without a `__main__` guard does not survive; the child
    # only replays and returns rows, so no lock another thread (resel plan's spinner) held at
    # the fork is ever needed in it
    if "fork" not in multiprocessing.get_all_start_methods():
        workers = 1
    parts = max(1, min(workers, points))
    jobs = [(q, cores, shapes, points, k, parts) for q, cores, shapes in asked for k in range(parts)]
    if workers <= 1 or len(jobs) <= 1:
        dealt = [_probe_part(*job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            dealt = list(pool.map(_probe_part_of, jobs))
    out = []
    for n in range(len(asked)):
        mine = dealt[n * parts:(n + 1) * parts]
        out.append([row for k in range(points) for row in mine[k % parts][k // parts]])
    return out


def _probe_part_of(job: tuple) -> list[list[ProbeRow]]:
    return _probe_part(*job)


def _probe_part(q: Any, cores: int, shapes: list[tuple[int, float]], points: int, first: int,
                stride: int) -> list[list[ProbeRow]]:
    """The teaching probes of the site's instants ``first``, ``first + stride``, …: one list of
    rows per instant (empty where none teaches)."""
    from pathlib import Path

    from resel.sim import wait_eval as we
    from resel.sim.swf import Trace

    arrive = q.offset                   # trace seconds (after the load's compression)
    jobs = we.load_jobs(Trace(Path(q.trace)), cores, speed=q.speed, load=q.load)
    ks = range(first, points, stride)
    if not jobs or jobs[0].submit >= arrive:
        return [[] for _ in ks]
    start = jobs[0].submit + 0.1 * (arrive - jobs[0].submit)
    times = [start + (k + 0.5) * (arrive - start) / points for k in ks]
    probes = we.evaluate(jobs, q.policy, cores, times, [we.Shape(c, w) for c, w in shapes],
                         [we.SchedulerEstimate(), we.FunctionEstimate("twin", we.twin_wait)])
    rows: dict[float, list[ProbeRow]] = {t: [] for t in times}
    for p in probes:
        if p.at + p.real >= arrive:      # not started by the bag's arrival: unknown then
            continue
        for src in ("twin", "scheduler"):
            est = p.estimates.get(src)
            if est is not None:
                rows[p.at].append((p.shape.cores, p.shape.walltime, src, est, p.real))
    return [rows[t] for t in times]
