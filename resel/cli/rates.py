"""The options every command that predicts shares: ``--model``, ``--risk``, ``--objective``,
and how they become the engine's inputs (issue 16).

Kept in one place so ``run``, ``simulate``, ``plan`` and ``model predict`` mean the same by
them: ``--model auto`` (default) takes the stored fit of the bag's application where one exists
for the site, else LIM; ``--model lim`` / ``fitted`` force one. ``--risk Q`` gives the engine
re-selection windows at the Q-quantile of Ŵ instead of T̂x(r') − T̂x(r); ``--objective p90``
makes the queue-aware split minimise the plan's 90th-percentile finish instead of its median.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from resel.cli.common import Finite

model_option = click.option(
    "--model", "model", type=click.Choice(["auto", "lim", "fitted"]), default="auto", show_default=True,
    help="T̂x model: the stored fit of the bag's application where one exists for the site (auto), "
         "LIM from the sites file (lim), or the fit (fitted; LIM only where a site has none, said so).")
risk_option = click.option(
    "--risk", type=Finite(0.5, 0.99), default=None,
    help="Re-selection windows at this upper quantile of Ŵ (from the runtime intervals), e.g. 0.9; "
         "default: the point rule Ŵ = T̂x(r') − T̂x(r).")
walltime_option = click.option(
    "--walltime", "walltime", type=click.Choice(["limit", "pack", "off"]), default="limit", show_default=True,
    help="Walltime rules (docs/walltime.md): limit = never dispatch a task whose T̂x,hi (the top of its "
         "runtime interval) exceeds the pilot's remaining walltime, pilots ask for the site's limit; "
         "pack = also size each pilot's walltime from its tasks (waves · T̂x,hi · 1.1 + 120 s, within the "
         "limit); off = neither (what resel did before).")
objective_option = click.option(
    "--objective", type=click.Choice(["p50", "p90"]), default="p50", show_default=True,
    help="What the queue-aware split minimises: the plan's median finish, or its 90th percentile "
         "(each site's P90 wait and run time).")


def store_if_exists(db_path: Path | None) -> Any:
    """The run store if its file exists (reading fits must not create a store), else None."""
    from resel.store import default_path, open_store
    path = Path(db_path) if db_path else default_path()
    return open_store(path) if path.exists() else None


def runtime_for(bag: Any, sites: list[Any], *, model: str, db: Any, clock: str = "base",
                simulated: bool = False, seed: int = 0) -> Any:
    """The :class:`~resel.models.runtime.RuntimeModel` of ``bag`` on ``sites``."""
    from resel.models.fitted import runtime_model
    return runtime_model(bag, sites, model=model, db=db, clock=clock, simulated_ads=simulated, seed=seed)


def engine_rates_for(bag: Any, runtime: Any, *, risk: float | None, objective: str = "p50") -> Any:
    return runtime.engine_rates(bag.profile.instructions, risk=risk, objective=objective)
