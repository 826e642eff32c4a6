"""Compare strategies over workload sizes and repetitions — the thesis's experiments 2 and 3.

Repetition ``i`` of every strategy and size uses seed ``seed + i``: strategies are compared
on the same random draws (paired), as the thesis compared re-selection with the very random
runs it replayed.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, field
from typing import Callable

from resel.backends.simulated import SimResult, simulate
from resel.domain import Bag, Site
from resel.errors import ReselError
from resel.metrics import ReselAudit, WorkloadMetrics, summarize
from resel.selection import Strategy

METRICS = ("ttc_wkd", "tx_wkd", "tq_wkd")


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What a cell keeps of one run: its metrics and audit (the whole :class:`SimResult` —
    engine, pilots, events — is handed to ``on_run`` to store and then dropped, so memory stays
    flat in the number of repetitions)."""

    metrics: WorkloadMetrics
    audit: ReselAudit
    walltime_kills: int = 0     # attempts killed by their pilot's walltime (docs/walltime.md)
    quarantines: int = 0        # black-hole quarantines (docs/engine.md)


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
        out["reselection"] = {
            "decisions": sum(a.decisions for a in audits), "judged": sum(a.judged for a in audits),
            "incorrect": sum(a.incorrect for a in audits),
            "penalty_mean": (sum(a.penalty_total for a in audits) / max(1, sum(a.incorrect for a in audits))),
            "penalty_max": max((a.penalty_max for a in audits), default=0.0),
            "bound_violations": sum(a.bound_violations for a in audits),
        }
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

    def cell(self, strategy: str, size: int) -> Cell:
        return self.cells[(Strategy.parse(strategy).name, size)]

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
    from resel.backends.sim_estimates import SOURCES
    base, _, source = spec.partition("@")
    strat = Strategy.parse(base)
    source = source.strip().lower() or default_estimate
    if source not in SOURCES:
        raise ReselError(f"strategy {spec!r}: unknown start estimate {source!r}; one of {', '.join(SOURCES)}")
    name = strat.name + (f"@{source}" if "@" in spec else "")
    return strat, source, name


def run_experiment(bag: Bag, sites: list[Site], strategies: list[str], sizes: list[int], *,
                   repeat: int = 5, seed: int = 0, clock: str = "base", estimate: str = "scheduler",
                   quantile: float = 0.9, confidence: float = 0.9,
                   on_run: Callable[[SimResult], int | None] | None = None, rates=None,
                   walltime: str = "limit") -> Experiment:
    """Simulate every strategy × size × repetition.

    Args:
        estimate: start-estimate source for strategies without an ``@source`` suffix.
        rates: the engine's T̂x rates for every run (:class:`~resel.models.runtime.EngineRates`);
            default LIM with ``clock``.
        walltime: the engine's walltime rules (:mod:`resel.walltime`: limit, pack, off).
        on_run: called after each run (e.g. to store it and advance a progress bar); if it
            returns a run id, the id is kept with the cell.
    """
    parsed = {}
    for spec in strategies:
        strat, source, name = split_spec(spec, estimate)
        parsed.setdefault(name, (strat, source))
    names = list(parsed)   # each once, in order
    sizes = list(dict.fromkeys(sizes))
    exp = Experiment(bag, list(sites), names, sizes, repeat, seed, clock)
    for size in sizes:
        sized = bag.resized(size)
        for name in names:
            cell = exp.cells.setdefault((name, size), Cell(name, size))
            for i in range(repeat):
                strat, source = parsed[name]
                result = simulate(sized, sites, strat, seed=seed + i, clock=clock, estimate=source,
                                  quantile=quantile, confidence=confidence, rates=rates, walltime=walltime)
                result.strategy = name
                cell.runs.append(RunOutcome(result.metrics, result.audit, result.walltime_kills,
                                            sum(h.quarantines for h in result.engine.health)))
                if on_run is not None:
                    run_id = on_run(result)
                    if run_id is not None:
                        cell.run_ids.append(run_id)
                # a run's objects hold reference cycles (engine handlers, event callbacks): free
                # them now, while they are all that is garbage, rather than let several runs pile
                # up until the collector's next full pass (memory flat in the repetitions)
                del result
                gc.collect()
    return exp
