"""Start estimates of simulated sites, from the same three sources ``resel plan`` asks live.

When the bag arrives (virtual time 0), each site is asked when its pilot would start:

* ``scheduler`` — a queue site answers like ``sbatch --test-only``: its policy's
  :meth:`~resel.sim.policies.Policy.estimate_start` on requested times; a site with a drawn
  wait quotes the wait model's mean (what a user would read off a dashboard);
* ``twin`` — a queue site's snapshot simulated forward (:mod:`resel.models.twin`); a site with a
  drawn wait has no queue to simulate and quotes its mean;
* ``history`` — a QBETS bound of the wait (``quantile`` with ``confidence``) from the waits seen
  before the bag arrived: other users' jobs of the pilot's shape class during a queue site's
  warm-up, or, for a drawn-wait site, ``HISTORY_PILOTS`` earlier pilots drawn from its model
  with their own seeded stream (as if resel had used the site before).

A site with too little history for a bound gets None: the queue-aware strategy ranks it last
rather than trusting a number nobody measured.
"""

from __future__ import annotations

import math
import random
from typing import Any

from resel.domain import Site
from resel.errors import ReselError

SOURCES = ("scheduler", "twin", "history")

#: earlier pilots a drawn-wait site is assumed to have run (history source)
HISTORY_PILOTS = 200


def drawn_history(site: Site, cores: int, seed: int, n: int = HISTORY_PILOTS) -> list[float]:
    """Past waits of pilots of ``cores`` on a drawn-wait site, from a stream of their own."""
    if site.wait is None:
        return [0.0] * n
    rng = random.Random(f"{seed}:{site.name}:history")
    draw = site.wait.dist.sampler(rng)
    nodes = max(1, math.ceil(cores / site.wait.cores_per_node))
    scale = nodes ** site.wait.size_exponent if site.wait.size_exponent else 1.0
    return [max(0.0, draw() * scale) for _ in range(n)]


def start_estimates(source: str, sites: list[Site], shapes: dict[int, tuple[int, float]], queues: dict[int, Any],
                    truths: list[Any], *, quantile: float = 0.9, confidence: float = 0.9, seed: int = 0,
                    now: float = 0.0) -> dict[str, float | None]:
    """Per site name, the predicted wait (seconds from ``now``) of its pilot, or None."""
    estimate = _estimator(source, sites, queues, truths, quantile, confidence, seed, now)
    return {sites[i].name: estimate(i, cores, walltime) for i, (cores, walltime) in shapes.items()}


def menu_estimates(source: str, sites: list[Site], menu: dict[int, list[tuple[int, int, float]]],
                   queues: dict[int, Any], truths: list[Any], *, quantile: float = 0.9, confidence: float = 0.9,
                   seed: int = 0, now: float = 0.0) -> dict[str, list[float | None]]:
    """Per site name, the predicted wait of each pilot size of :meth:`Engine.probe_menu`."""
    estimate = _estimator(source, sites, queues, truths, quantile, confidence, seed, now)
    return {sites[i].name: [estimate(i, cores, walltime) for _, cores, walltime in options]
            for i, options in menu.items()}


def _estimator(source: str, sites: list[Site], queues: dict[int, Any], truths: list[Any], quantile: float,
               confidence: float, seed: int, now: float):
    if source not in SOURCES:
        raise ReselError(f"unknown wait estimate {source!r}; one of {', '.join(SOURCES)}")
    histories: dict[int, Any] = {}

    def estimate(i: int, cores: int, walltime: float) -> float | None:
        site, q = sites[i], queues.get(i)
        if q is not None and cores > site.cores:
            return math.inf
        if source == "scheduler":
            return q.estimate_wait(cores, walltime, now) if q is not None else truths[i].expected_wait(cores)
        if source == "twin":
            if q is None:
                return truths[i].expected_wait(cores)
            from resel.models.twin import twin_start
            return twin_start(q.snapshot(now), cores, walltime).wait
        from resel.models.history import WaitHistory, WaitRecord
        if q is None:      # a drawn-wait site: earlier pilots of this very shape
            records = [WaitRecord(site.name, None, cores, walltime, now - w - k, now - k, "sim", str(k))
                       for k, w in enumerate(drawn_history(site, cores, seed))]
            return WaitHistory(records).bound(site.name, cores, walltime, quantile, confidence).seconds
        if i not in histories:
            histories[i] = WaitHistory(q.past_waits(now))
        return histories[i].bound(site.name, cores, walltime, quantile, confidence).seconds

    return estimate
