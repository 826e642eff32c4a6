"""Walltime packing: how long a pilot asks for, and whether a task still fits in it.

A pilot that reaches its walltime is killed by the scheduler with whatever runs on it; every
task then lost costs its whole run so far. Two rules prevent that (docs/engine.md, "Walltime
packing"), both with T̂x,hi — the upper end of the site's runtime interval (the 0.95 quantile
of the measured/predicted ratios, i.e. the top of the central 90 % interval of
:mod:`resel.models.runtime`), or the point T̂x where nothing measured its spread:

* **dispatch guard** — a task goes to a pilot only if the pilot's remaining walltime
  (start + walltime − now) is ≥ T̂x,hi. A pilot whose remaining walltime fell below T̂x,hi
  *drains*: its free slots are taken out of the books, it takes no new task, and it is
  released (cancelled) as soon as its last task ends — a clean end instead of a kill. Tasks are
  handed ahead (live ``prefetch``) only to a pilot that can still finish them after the tasks
  before them: the q-th queued task of a pilot with ``slots`` slots starts at the latest
  ⌈q / slots⌉ waves from now, so it needs (⌈q / slots⌉ + 1) · T̂x,hi of remaining walltime on
  a running pilot (its running tasks end within one wave) and ⌈q / slots⌉ · T̂x,hi on a
  pending one.
* **sizing** (``pack``) — a pilot meant for ``tasks`` tasks on ``slots`` slots asks for
  ⌈tasks / slots⌉ · T̂x,hi · (1 + ``margin``) + ``slack`` seconds (10 % and 120 s by default:
  the spread the interval does not cover and the pilot's own start-up), capped at the site's
  limit (``pilot.walltime``, the partition's or queue's maximum). Shorter requests start
  sooner where the scheduler backfills; a pilot whose waves do not fit the limit runs what
  fits and drains, and a new pilot is asked for the rest.

A site whose limit is below T̂x,hi can never finish a task and is not viable for the bag.

Modes: ``limit`` (the guard; pilots ask for the limit — the default, so runs measured before keep
their numbers), ``pack`` (both rules; ``--walltime pack``),
``off`` (neither: what resel did before — kept for the benchmark's "before" column).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MODES = ("pack", "limit", "off")


@dataclass(frozen=True, slots=True)
class WalltimePolicy:
    """The walltime rules' mode and margins (see the module docstring)."""

    mode: str = "limit"
    margin: float = 0.10
    slack: float = 120.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"walltime mode must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def guard(self) -> bool:
        """Whether the dispatch guard (and draining) is on."""
        return self.mode != "off"

    def request(self, limit: float, tx_hi: float, tasks: int, slots: int) -> float:
        """The walltime a pilot of ``slots`` slots meant for ``tasks`` tasks asks for."""
        if self.mode != "pack" or tasks <= 0 or slots <= 0:
            return limit
        waves = math.ceil(tasks / slots)
        return min(limit, waves * tx_hi * (1.0 + self.margin) + self.slack)


def fits(remaining: float, tx_hi: float) -> bool:
    """A task predicted to need at most ``tx_hi`` seconds may start with ``remaining`` left."""
    return remaining >= tx_hi
