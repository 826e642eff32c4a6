"""Time units for display: each table or figure picks s, min or h from the times it shows.

A live test run lasts seconds and a thesis-size bag days. One fixed unit makes one of them
unreadable — hours turned a testbed run into columns of 0.00/0.01/0.02 h, and seconds would turn
a 20-hour bag into 72,000. So every table and figure that shows times asks :func:`pick` once for
the values it is about to show and names the unit in its headers (``unit.header("T_q")`` →
``T_q [s]``). One unit per table keeps its columns comparable at a glance.

Standard library only: the CLI's display code imports it, and the CLI's start-up time counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class TimeUnit:
    """A display unit for durations: its symbol, its length in seconds, the decimals it shows,
    and its name in words (for a note under a table)."""

    name: str
    seconds: float
    decimals: int
    words: str

    def of(self, seconds: float) -> float:
        """``seconds`` in this unit."""
        return seconds / self.seconds

    def fmt(self, seconds: float | None, decimals: int | None = None) -> str:
        """``seconds`` as a number in this unit (no symbol: the header names it); ``—`` for an
        unknown or non-finite time."""
        if seconds is None or not math.isfinite(seconds):
            return "—"
        return f"{self.of(seconds):,.{self.decimals if decimals is None else decimals}f}"

    def cell(self, seconds: float | None) -> str:
        """``seconds`` for a table cell in this unit: :meth:`fmt`, with more decimals for a small
        time that those would round to 0 (2.5 s in a table of hours is ``0.0007``, not ``0.00``)."""
        if seconds is None or not math.isfinite(seconds):
            return "—"
        value = abs(self.of(seconds))
        decimals = self.decimals
        while 0 < value < 10 ** -decimals * 10 and decimals < self.decimals + 4:
            decimals += 1
        return self.fmt(seconds, decimals)

    def say(self, seconds: float | None) -> str:
        """``seconds`` in this unit for a sentence: at most three significant digits, no trailing
        zeros, the symbol after it (``41 h``, ``34.6 min``, ``2.5 s``); ``unknown`` for none."""
        if seconds is None or not math.isfinite(seconds):
            return "unknown"
        value = self.of(seconds)
        digits = 0 if value == 0 else max(0, 2 - math.floor(math.log10(abs(value))))
        text = f"{value:,.{digits}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return f"{text} {self.name}"

    def with_name(self, seconds: float | None) -> str:
        """``seconds`` with the unit's symbol, for a sentence rather than a table cell."""
        return f"{self.fmt(seconds)} {self.name}"

    def header(self, label: str) -> str:
        """A column header or axis label naming the unit: ``T_x [min]``."""
        return f"{label} [{self.name}]"


SECOND = TimeUnit("s", 1.0, 1, "seconds")
MINUTE = TimeUnit("min", 60.0, 1, "minutes")
HOUR = TimeUnit("h", 3600.0, 2, "hours")

#: for a sentence about a long span (a replayed trace's makespan): days beyond two of them
DAY = TimeUnit("d", 86400.0, 1, "days")

#: below this largest time a table shows seconds (up to "599.0"), then minutes up to "119.9"
SECONDS_BELOW = 600.0
MINUTES_BELOW = 2 * 3600.0


def pick(values: Iterable[float | None]) -> TimeUnit:
    """The unit for a table or axis showing ``values`` (seconds; None and NaN ignored): chosen by
    the largest magnitude, so the biggest number stays short and no other needs more digits than
    the unit's decimals give. Nothing to show gives seconds (the smallest)."""
    largest = max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)
    if largest < SECONDS_BELOW:
        return SECOND
    if largest < MINUTES_BELOW:
        return MINUTE
    return HOUR


def span(seconds: float | None) -> str:
    """A duration in a sentence, in the unit that reads (:func:`pick`'s, or days beyond two):
    ``70.3 min``, ``364 d``."""
    if seconds is not None and math.isfinite(seconds) and abs(seconds) >= 2 * DAY.seconds:
        return DAY.say(seconds)
    return pick([seconds]).say(seconds)


def plain_table(headers: list[str], rows: list[list[str]], left: int = 1) -> str:
    """A table as plain text, ``squeue``-style: columns separated by two spaces, the first
    ``left`` of them left-aligned and the rest right-aligned, a rule under the header — for
    commands that print one small table and would otherwise import rich for it (its import is
    ~35 ms of `resel replay`)."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])
