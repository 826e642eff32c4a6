"""Compare strategies over workload sizes and repetitions — the thesis's experiments 2 and 3.

Repetition ``i`` of every strategy and size uses seed ``seed + i``: strategies are compared
on the same random draws (paired), as the thesis compared re-selection with the very random
runs it replayed. With ``shift``, repetition ``i`` also meets the trace-driven queues ``i × shift``
seconds later in their traces (other queue states; docs/peers.md does the same). ``oracle`` among
the strategies adds, per size and repetition, the oracle's lower bound on TTC for that seed
(:mod:`resel.sim.oracle`), allowing each site as many pilots as the most any compared run
submitted there.

``workers`` > 1 runs the repetitions in that many local processes. Every run depends only on
its own arguments (bag, sites, strategy, seed), so the results — and the order ``on_run``
sees them in — are those of the serial sweep (tests/test_sweep.py checks it).
"""

from __future__ import annotations

import gc
import math
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from resel.sim.simulation import DataCost, SimResult, simulate
from resel.domain import Bag, Site
from resel.errors import ReselError
from resel.metrics import ReselAudit, RunCosts, WorkloadMetrics, run_costs, summarize
from resel.selection import Strategy

METRICS = ("ttc_wkd", "tx_wkd", "tq_wkd")
#: the pseudo-strategy whose rows are the oracle's lower bound on TTC (resel.sim.oracle)
ORACLE = "oracle"


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What a cell keeps of one run: its metrics and audit (the whole :class:`SimResult` —
    engine, pilots, events — is handed to ``on_run`` to store and then dropped, so memory stays
    flat in the number of repetitions)."""

    metrics: WorkloadMetrics
    audit: ReselAudit
    walltime_kills: int = 0     # attempts killed by their pilot's walltime (docs/walltime.md)
    quarantines: int = 0        # black-hole quarantines (docs/engine.md)
    costs: RunCosts | None = None
    data: DataCost | None = None   # what moving the bag's data cost (None: it moves none)
    #: pilots submitted per site name (the oracle allows as many)
    submissions: dict[str, int] = field(default_factory=dict)
    #: what ``auto`` ran as and why (None for another strategy)
    auto: tuple[str, str] | None = None


@dataclass
class Cell:
    """All repetitions of one strategy at one workload size."""

    strategy: str
    size: int
    runs: list[RunOutcome] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)

    def summary(self, metric: str) -> dict[str, float]:
        return summarize([getattr(r.metrics, metric) for r in self.runs])

    def as_dict(self) -> dict:
        if self.strategy == ORACLE:   # a bound per repetition, not a run: TTC only
            s = self.summary("ttc_wkd")
            return {"strategy": ORACLE, "size": self.size, "repeat": len(self.runs),
                    "ttc_wkd": {"mean": s["mean"], "std": s["std"]}, "tx_wkd": None, "tq_wkd": None,
                    "bounds": [r.metrics.ttc_wkd for r in self.runs], "run_ids": []}
        audits = [r.audit for r in self.runs]
        out = {"strategy": self.strategy, "size": self.size, "repeat": len(self.runs)}
        for metric in METRICS:
            s = self.summary(metric)
            out[metric] = {"mean": s["mean"], "std": s["std"]}
        out["reassigned"] = summarize([r.metrics.reassigned for r in self.runs])["mean"]
        out["restarts"] = summarize([r.metrics.restarts for r in self.runs])["mean"]
        out["failed"] = sum(r.metrics.failed for r in self.runs)
        out["walltime_kills"] = sum(r.walltime_kills for r in self.runs)
        out["quarantines"] = sum(r.quarantines for r in self.runs)
        costs = [r.costs for r in self.runs if r.costs is not None]
        out["costs"] = {key: summarize([getattr(c, key) for c in costs])["mean"] if costs else None
                        for key in ("submissions", "cancellations", "wasted_core_h")}
        out["reselection"] = {
            "decisions": sum(a.decisions for a in audits), "judged": sum(a.judged for a in audits),
            "incorrect": sum(a.incorrect for a in audits),
            "penalty_mean": (sum(a.penalty_total for a in audits) / max(1, sum(a.incorrect for a in audits))),
            "penalty_max": max((a.penalty_max for a in audits), default=0.0),
            "bound_violations": sum(a.bound_violations for a in audits),
        }
        data = [r.data for r in self.runs if r.data is not None]
        if data:    # a bag that moves data (docs/data.md): means over the runs
            names = sorted({n for d in data for n in (*d.mb_in, *d.mb_out)})
            out["data"] = {
                "priced": data[0].priced,
                "seconds_per_task": summarize([d.as_dict()["seconds_per_task"] for d in data])["mean"],
                "mb_in": {n: summarize([d.mb_in.get(n, 0.0) for d in data])["mean"] for n in names},
                "mb_out": {n: summarize([d.mb_out.get(n, 0.0) for d in data])["mean"] for n in names},
            }
        choices = sorted({r.auto for r in self.runs if r.auto is not None})
        if choices:
            out["auto"] = [{"ran_as": ran_as, "why": why} for ran_as, why in choices]
        out["run_ids"] = list(self.run_ids)
        return out


@dataclass
class Experiment:
    """The result of :func:`run_experiment`: one :class:`Cell` per strategy and size."""

    bag: Bag
    sites: list[Site]
    strategies: list[str]
    sizes: list[int]
    repeat: int
    seed: int
    clock: str
    cells: dict[tuple[str, int], Cell] = field(default_factory=dict)
    experiment_id: int | None = None
    shift: float = 0.0        # seconds later in the traces per repetition (run_experiment's ``shift``)

    def cell(self, strategy: str, size: int) -> Cell:
        return self.cells[(strategy if strategy == ORACLE else Strategy.parse(strategy).name, size)]

    def sooner(self, size: int, ours: str = "auto") -> tuple[str, float] | None:
        """How much sooner ``ours`` finished than the best other strategy at ``size`` (lowest mean
        TTC, the oracle left out): (its name, percent less TTC), or None without one to compare."""
        others = [s for s in self.strategies if s not in (ours, ORACLE)]
        if ours not in self.strategies or not others:
            return None
        best = min(others, key=lambda s: (self.cells[(s, size)].summary("ttc_wkd")["mean"], s))
        return best, self.change(ours, best, size)

    def change(self, strategy: str, baseline: str, size: int, metric: str = "ttc_wkd") -> float:
        """Percent reduction of ``metric``'s mean against ``baseline`` (positive = less time)."""
        ours = self.cell(strategy, size).summary(metric)["mean"]
        base = self.cell(baseline, size).summary(metric)["mean"]
        return math.nan if not base else (base - ours) / base * 100.0

    def as_dict(self) -> dict:
        """The ``--json`` document (seconds); its shape is documented in the README."""
        return {
            "experiment_id": self.experiment_id,
            "bag": {"name": self.bag.name, "instructions": self.bag.profile.instructions,
                    "cores_per_task": self.bag.cores_per_task},
            "sites": [s.name for s in self.sites],
            "strategies": self.strategies, "sizes": self.sizes, "repeat": self.repeat,
            "seed": self.seed, "clock": self.clock,
            "results": [self.cells[(st, n)].as_dict() for n in self.sizes for st in self.strategies],
        }


def split_spec(spec: str, default_estimate: str = "scheduler") -> tuple[Strategy, str, str]:
    """``queue+reselect@twin`` → (the strategy, its start-estimate source, the display name).

    The ``@source`` suffix lets one experiment compare the same strategy fed by different
    start estimates (``scheduler``, ``twin``, ``history``); without it the default is used.
    """
    from resel.sim.estimates import SOURCES
    if spec.strip().lower() == ORACLE:
        return Strategy("model"), "scheduler", ORACLE   # (never run: its rows are bounds)
    base, _, source = spec.partition("@")
    strat = Strategy.parse(base)
    source = source.strip().lower() or default_estimate
    if source not in SOURCES:
        raise ReselError(f"strategy {spec!r}: unknown start estimate {source!r}; one of {', '.join(SOURCES)}")
    name = strat.name + (f"@{source}" if "@" in spec else "")
    return strat, source, name


def local_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextmanager
def dask_executor(address: str | None, *, insecure: bool = False,
                  default_workers: int = 1) -> Iterator[Executor | None]:
    """A :class:`concurrent.futures.Executor` on the Dask cluster ``address`` names (None: no
    executor, the sweep stays local): ``local[:N]``, a private cluster started here;
    ``tls://HOST:PORT`` with Dask's TLS settings; ``tcp://HOST:PORT`` only with ``insecure``
    (:mod:`resel.sim.dask_access` says why). Dask's executor submits every repetition as its
    own task (``pure=False``: none is taken from a cache) and hands the results back in
    submission order.

    Raises:
        ReselError: the address is refused, Dask is not installed, the cluster cannot be
            started or reached, or it fails while the repetitions run.
    """
    if address is None:
        yield None
        return
    from resel.sim.dask_access import dask_client, parse_target
    with dask_client(parse_target(address, insecure=insecure), default_workers=default_workers) as client:
        yield client.get_executor(pure=False)


def _one_run(job: tuple) -> SimResult:
    """One repetition, in whichever process runs it: a pure function of its arguments."""
    sized, sites, strat, seed, clock, source, quantile, confidence, rates, name, record, walltime, priced = job
    result = simulate(sized, sites, strat, seed=seed, clock=clock, estimate=source, quantile=quantile,
                      confidence=confidence, rates=rates, record=record, walltime=walltime, price_data=priced)
    result.strategy = name
    return result


#: seconds of a local sweep run in this process before worker processes are started: starting
#: them and shipping results back costs more than a short sweep takes (the thesis sites' old
#: default `resel simulate`: 1.8 s serial, 2.1 s on two processes), and each new process warms
#: trace-driven queues up again (0.5–1 s per set of sites), so only what outlasts this goes
#: parallel (docs/experiments.md)
SERIAL_FIRST_S = 5.0


def sweep(jobs: list[tuple], workers: int = 1, executor: Executor | None = None):
    """Yield :func:`_one_run` of every job, in the jobs' order: serially, in ``workers`` local
    processes, or on a given :class:`concurrent.futures.Executor` (e.g. a Dask client's
    ``get_executor()``, docs/peers.md). With ``workers`` > 1 the first :data:`SERIAL_FIRST_S`
    seconds run here, the rest (if any is left) in the processes."""
    if executor is not None:
        yield from executor.map(_one_run, jobs)
        return
    done, began = 0, time.perf_counter()
    while done < len(jobs) and (workers <= 1 or time.perf_counter() - began < SERIAL_FIRST_S):
        yield _one_run(jobs[done])
        done += 1
    rest = jobs[done:]
    if len(rest) <= 1:
        yield from map(_one_run, rest)
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(rest))) as pool:
        yield from pool.map(_one_run, rest, chunksize=1)


def run_experiment(bag: Bag, sites: list[Site], strategies: list[str], sizes: list[int], *,
                   repeat: int = 5, seed: int = 0, clock: str = "base", estimate: str = "scheduler",
                   quantile: float = 0.9, confidence: float = 0.9,
                   on_run: Callable[[SimResult], int | None] | None = None, rates=None,
                   workers: int = 1, executor: Executor | None = None, record: bool = True,
                   walltime: str = "limit", price_data: bool = True, shift: float = 0.0) -> Experiment:
    """Simulate every strategy × size × repetition.

    Args:
        estimate: start-estimate source for strategies without an ``@source`` suffix.
        rates: the engine's T̂x rates for every run (:class:`~resel.models.runtime.EngineRates`);
            default LIM with ``clock``.
        walltime: the engine's walltime rules (:mod:`resel.walltime`: limit, pack, off).
        on_run: called after each run, in the serial order whatever ``workers`` (e.g. to store
            it and advance a progress bar); if it returns a run id, the id is kept with the cell.
        workers: local processes running the repetitions (1: in this process).
        executor: run them on this executor instead (a distributed one, docs/peers.md).
        record: keep each run's events and decisions (the store needs them).
        price_data: the engine prices the bag's data (``[bag.data]``); False: blind to it, the
            simulator still moving the bytes (docs/engine.md, "Selection sees the data").
        shift: seconds later in their traces the trace-driven queues meet repetition i's bag, × i.
    """
    parsed = {}
    for spec in strategies:
        strat, source, name = split_spec(spec, estimate)
        parsed.setdefault(name, (strat, source))
    names = list(parsed)   # each once, in order
    sizes = list(dict.fromkeys(sizes))
    exp = Experiment(bag, list(sites), names, sizes, repeat, seed, clock, shift=shift)
    jobs, cells = [], []
    per_rep = [shifted(sites, i * shift) for i in range(repeat)]
    for size in sizes:
        sized = bag.resized(size)
        for name in names:
            cell = exp.cells.setdefault((name, size), Cell(name, size))
            if name == ORACLE:
                continue
            strat, source = parsed[name]
            for i in range(repeat):
                jobs.append((sized, per_rep[i], strat, seed + i, clock, source, quantile, confidence, rates,
                             name, record, walltime, price_data))
                cells.append(cell)
    owners = iter(cells)    # not zip(): its reused result tuple would keep the last run alive
    for result in sweep(jobs, workers, executor):
        cell = next(owners)
        counts: dict[str, int] = {}
        for p in result.engine.pilots.values():
            name = result.sites[p.site].name
            counts[name] = counts.get(name, 0) + 1
        cell.runs.append(RunOutcome(result.metrics, result.audit, result.walltime_kills,
                                    sum(h.quarantines for h in result.engine.health),
                                    run_costs(result.engine, result.bag.cores_per_task), result.data,
                                    counts, result.engine.auto_choice))
        if on_run is not None:
            run_id = on_run(result)
            if run_id is not None:
                cell.run_ids.append(run_id)
        # a run's objects hold reference cycles (engine handlers, event callbacks): free
        # them now, while they are all that is garbage, rather than let several runs pile
        # up until the collector's next full pass (memory flat in the repetitions)
        del result
        gc.collect()
    if ORACLE in names:
        _bounds(exp, bag, per_rep, seed)
    return exp


def shifted(sites: list[Site], seconds: float) -> list[Site]:
    """The sites with every trace-driven queue meeting the bag ``seconds`` later in its trace."""
    import dataclasses
    if not seconds:
        return list(sites)
    return [s if s.queue is None else dataclasses.replace(s, queue=dataclasses.replace(s.queue, offset=s.queue.offset
                                                                                          + seconds))
            for s in sites]


def _bounds(exp: Experiment, bag: Bag, per_rep: list[list[Site]], seed: int) -> None:
    """The oracle's cells: per size and repetition, the bound for that seed allowing each site as
    many pilots as the most any compared run of that repetition submitted there."""
    from resel.sim.oracle import oracle_bound
    ran = [n for n in exp.strategies if n != ORACLE]
    for size in exp.sizes:
        cell = exp.cells[(ORACLE, size)]
        for i, sites in enumerate(per_rep):
            subs: dict[str, int] = {}
            for name in ran:
                runs = exp.cells[(name, size)].runs
                if i < len(runs):
                    for site, c in runs[i].submissions.items():
                        subs[site] = max(subs.get(site, 1), c)
            ttc = oracle_bound(bag.resized(size), sites, seed + i, subs or 1).ttc
            nan = math.nan
            cell.runs.append(RunOutcome(WorkloadMetrics(ttc, nan, nan, size, 0, 0, 0, 0, 0.0), ReselAudit()))
