"""Initial selection strategies: which site each task of a bag is first assigned to.

A strategy is named by a short spec: ``random``, ``model``, ``topk:K`` (the chapter-5
variant: the K best sites by LIM affinity, tasks spread round-robin over them), ``queue``
(queue-aware: the lowest predicted TTC = the site's own wait estimate + T̂x), each optionally
followed by ``+reselect`` to turn run-time re-selection on. ``reselect`` alone means
``random+reselect`` — the thesis's experiment 3 replayed the random runs with re-selection.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from resel.domain import Bag, Site
from resel.errors import ReselError
from resel.formalism import lim_resource, lim_task, res_select, satisfy_task, top_k
from resel.models.lim import SiteRate

BASES = ("random", "model", "topk", "queue")


@dataclass(frozen=True, slots=True)
class Strategy:
    """A parsed strategy spec."""

    base: str
    reselect: bool = False
    k: int = 2

    @property
    def name(self) -> str:
        core = f"topk:{self.k}" if self.base == "topk" else self.base
        if self.base == "random" and self.reselect:
            return "reselect"
        return core + ("+reselect" if self.reselect else "")

    @staticmethod
    def parse(spec: str) -> "Strategy":
        """``random``, ``model``, ``topk:3``, ``reselect``, ``model+reselect``, …"""
        text = spec.strip().lower().replace("queue-aware", "queue")
        if text in ("reselect", "re-selection", "reselection"):
            return Strategy("random", True)
        parts = text.split("+")
        base, flags = parts[0], parts[1:]
        k = 2
        if base.startswith("topk"):
            num = base[4:].lstrip(":") or "2"
            if not num.isdigit() or int(num) < 1:
                raise ReselError(f"strategy {spec!r}: topk takes a whole number >= 1, as in topk:2")
            base, k = "topk", int(num)
        if base not in BASES or any(f not in ("reselect",) for f in flags):
            raise ReselError(f"unknown strategy {spec!r}: use random, model, topk:K, queue, reselect or BASE+reselect")
        return Strategy(base, bool(flags), k)


def viable_sites(bag: Bag, sites: list[Site]) -> list[int]:
    """Indices of the sites that can run the bag's tasks (Alg. 2 on the LIM instantiation)."""
    task = lim_task(bag.name, bag.profile.instructions, bag.isa)
    out = []
    for i, site in enumerate(sites):
        cap = site.pilot.max_cores or site.cores
        if bag.cores_per_task <= min(cap, site.cores) and satisfy_task(lim_resource(site.name, site.clock.base, site.isa), task):
            out.append(i)
    return out


def ranked(viable: list[int], rates: list[SiteRate], instructions: float, k: int) -> list[int]:
    """The k best viable sites by LIM affinity −T̂x, ties to the first in site order."""
    return top_k(viable, lambda i: -rates[i].tx(instructions), k)


def initial_assignment(strategy: Strategy, bag: Bag, viable: list[int], rates: list[SiteRate],
                       rng: random.Random, waits: list[float | None] | None = None) -> tuple[list[int], list[int]]:
    """Each task's origin site index, and the candidate sites re-selection may move it to.

    Args:
        waits: per site, the estimated queue wait of its pilot (the queue-aware strategy).

    Raises:
        ReselError: no site can run the bag, or ``queue`` was asked for without estimates.
    """
    if not viable:
        raise ReselError(f"no site can run bag {bag.name!r} (ISA {bag.isa}, {bag.cores_per_task} cores per task)")
    n = bag.count
    if strategy.base == "random":
        return [rng.choice(viable) for _ in range(n)], viable
    if strategy.base == "model":
        best = res_select(viable, lambda i: -rates[i].tx(bag.profile.instructions))
        return [best] * n, viable
    if strategy.base == "queue":
        if waits is None or any(waits[i] is None for i in viable):
            raise ReselError("the queue-aware strategy needs every site's wait estimate")
        best = res_select(viable, lambda i: -(waits[i] + rates[i].tx(bag.profile.instructions)))
        return [best] * n, viable
    best_k = ranked(viable, rates, bag.profile.instructions, strategy.k)
    return [best_k[t % len(best_k)] for t in range(n)], best_k
