"""Where the coordinator is in each pilot's waves (agent protocol 6): the cursor that lets it read
``started/{incarnation}-{n}.json`` and ``results/{incarnation}-{n}.json`` one after the other
until one is missing, without listing the folders.

Why a cursor: at 100,000 tasks a pilot's folders held ~20,000 per-task files and every poll
listed them (docs/benchmarks.md, "100,000 tasks"); a wave holds everything one turn of the
agent's loop started or ended, and the cursor makes a read cost what is new. The folders are
listed only when an incarnation the cursor does not know shows up (the first read of a pilot,
a resumed coordinator, a relaunched agent): the previous incarnations' waves are found there,
and since those agents are gone their waves are complete — read to the first missing one.

A pool's wave may be read half written: where condor_chirp's ``link`` is refused, the HTCondor
wrapper puts a wave under its own name (docs/htcondor.md). A wave is never rewritten once whole,
so one that is not JSON there is most likely still being put: the cursor moves past it as past
any wave, but holds it (:attr:`WaveCursor.torn`) to be read again at the next reads, and only
after :data:`TORN_READS` reads that found it so is it reported bad, as a wave that breaks the
protocol is at once. The wrapper's own per-key ``evicted`` results, put the same way, are held
alike (by name: ``results/tK-aN.json``).

Pure bookkeeping: :meth:`~resel.backends.pilotsite.PilotSite.collect` reads the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: the first agent protocol that writes waves
WAVES_FROM = 6
#: the folders that hold waves
FOLDERS = ("started", "results")
#: an agent's incarnation as the agent makes it (random hex): the part of a wave's name before ``-n``
_INCARNATION = re.compile(r"[0-9a-f]{1,64}")
_WAVE = re.compile(r"([0-9a-f]{1,64})-([1-9][0-9]{0,17})\.json")
#: reads without a new wave after which an incarnation that is not the pilot's current one is
#: no longer looked at (a superseded agent writes its last wave within one turn of its loop)
QUIET_READS = 20
#: the most wave names of one folder a read looks for at once (then again, in another round)
AHEAD_MAX = 32
#: an HTCondor pool's pilot: its folders are listed at least once in this many reads (a
#: backstop for a wave its wrapper never pushed in order, or an ``evicted`` result pushed late;
#: pilotsite.PilotSite.collect); every 30 s at a poll of 0.5 s, 2 min at `resel run`'s default 2 s
LIST_EVERY = 60
#: reads in a row that may find a pool's wave half written (not JSON) before it is reported bad:
#: 20 s at ``resel run``'s default poll of 2 s, 5 s at 0.5 s — a few of the wrapper's intervals
#: (2 s), after each of which it puts again a wave whose put failed (not measured on a pool)
TORN_READS = 10


def wave_name(incarnation: str, n: int) -> str:
    return f"{incarnation}-{int(n)}.json"


def parse_wave_name(name: str) -> tuple[str, int] | None:
    """(incarnation, n) of a wave's file name, or None for any other name."""
    m = _WAVE.fullmatch(name)
    return (m.group(1), int(m.group(2))) if m else None


def _protocol(doc: dict | None) -> int | None:
    value = doc.get("protocol") if isinstance(doc, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class WaveCursor:
    """One pilot's place in its agents' waves: the next ``n`` to read per folder and incarnation.

    A fresh cursor (a new pilot, or every pilot of a resumed coordinator) knows no incarnation:
    its first read lists the folders once and then reads every wave from 1 — what the journal
    already holds is skipped by the coordinator's consumed set, as before."""

    #: the agent's protocol (agent.json or heartbeat), None until one was read
    protocol: int | None = None
    #: (folder, incarnation) -> the next n to read
    next: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the incarnation now running the pilot (the latest heartbeat or agent.json)
    current: str | None = None
    #: incarnation -> reads in a row that found no new wave of it
    quiet: dict[str, int] = field(default_factory=dict)
    #: incarnations read to the end and dropped: a later listing does not bring them back
    retired: set[str] = field(default_factory=set)
    #: (folder, incarnation) -> how many new waves the last read found there: how many names
    #: the next read looks for at once (:meth:`ahead`)
    last_found: dict[tuple[str, str], int] = field(default_factory=dict)
    #: reads since the folders were last listed (a pool's pilot: :meth:`listing_due`)
    unlisted_reads: int = 0
    #: whether a pool's pilot was listed before (its first listing sets its phase)
    listed_once: bool = False
    #: a pool's waves read half written (``started/NAME``, ``results/NAME``) -> reads in a row
    #: that found them so: each is read again at every read until it is whole or
    #: :data:`TORN_READS` reads found it so (:meth:`holds`)
    torn: dict[str, int] = field(default_factory=dict)

    @property
    def waves(self) -> bool:
        """Whether the pilot's agent writes waves (protocol 6 or later): otherwise its per-task
        files are listed, as before."""
        return self.protocol is not None and self.protocol >= WAVES_FROM

    def hear(self, agent: dict | None, heartbeat: dict | None) -> bool:
        """Take in what agent.json and heartbeat.json say (either may be None); True when they
        name an incarnation this cursor does not follow yet (the folders are then listed once)."""
        for doc in (agent, heartbeat):
            if _protocol(doc) is not None:
                self.protocol = _protocol(doc)
        new = False
        for doc, keys in ((agent, ("previous", "incarnation")), (heartbeat, ("incarnation",))):
            if not isinstance(doc, dict):
                continue
            for key in keys:
                inc = doc.get(key)
                if isinstance(inc, str) and _INCARNATION.fullmatch(inc):
                    new |= self.follow(inc)
                    if key == "incarnation":
                        self.current = inc
        return new or not self.next

    def follow(self, incarnation: str) -> bool:
        """Read this incarnation's waves from 1 (True) unless they are followed already."""
        if (FOLDERS[0], incarnation) in self.next or incarnation in self.retired:
            return False
        for folder in FOLDERS:
            self.next[(folder, incarnation)] = 1
        self.quiet[incarnation] = 0
        return True

    def learn(self, names: Any) -> None:
        """Follow every incarnation that has a wave among these file names (a folder's listing)."""
        for name in names:
            parsed = parse_wave_name(name)
            if parsed:
                self.follow(parsed[0])

    def listing_due(self) -> bool:
        """Whether this read of a pool's pilot lists its folders as a backstop
        (:data:`LIST_EVERY`)."""
        return self.unlisted_reads + 1 >= LIST_EVERY

    def read_counted(self, listed: bool, pilot: int = 0) -> None:
        """A read of a pool's pilot came back, with a listing of its folders or without.

        The cursor's first listing starts the count at the pilot's own phase (``pilot`` mod
        :data:`LIST_EVERY`), every later one at 0: pilots first listed on the same read (they
        started together, or a coordinator resumed) would otherwise all hit the backstop on the
        same later reads — a pool's read then listed five pilots at once and was its slowest
        (0.41 s at 100,000 tasks, docs/benchmarks.md) — while consecutive pilot numbers now
        list on different reads. A pilot is still listed at least once in :data:`LIST_EVERY`
        reads."""
        if not listed:
            self.unlisted_reads += 1
        elif self.listed_once:
            self.unlisted_reads = 0
        else:
            self.unlisted_reads, self.listed_once = int(pilot) % LIST_EVERY, True

    def due(self) -> list[tuple[str, str, int]]:
        """(folder, incarnation, n) of the first wave not read yet of each followed incarnation."""
        return [(folder, inc, n) for (folder, inc), n in sorted(self.next.items())]

    def ahead(self, folder: str, incarnation: str) -> int:
        """How many wave names of this folder and incarnation a read looks for at once: one more
        than the last read found (a pilot writes at about the same pace from one read to the
        next), so an idle pilot costs one look per folder and a busy one a single round."""
        return min(AHEAD_MAX, self.last_found.get((folder, incarnation), 0) + 1)

    def found(self, folder: str, incarnation: str, count: int) -> None:
        """A read is over for this folder and incarnation: it found ``count`` new waves."""
        self.last_found[(folder, incarnation)] = count

    def took(self, folder: str, incarnation: str) -> None:
        """Wave ``next`` of this folder and incarnation was read (or refused): on to the next."""
        self.next[(folder, incarnation)] += 1
        self.quiet[incarnation] = 0

    def holds(self, wave: str) -> bool:
        """Whether a wave this read found half written is left to the next read (True) rather
        than reported bad: fewer than :data:`TORN_READS` reads found it so, this one included."""
        return self.torn.get(wave, 0) + 1 < TORN_READS

    def held(self) -> list[str]:
        """The waves held half written (``folder/name``), to read again at this read."""
        return sorted(self.torn)

    def hold(self, torn: list[str]) -> None:
        """A read is over: ``torn`` are the waves it found half written and left to the next
        read; every other wave held before was read again on it, whole or reported bad."""
        self.torn = {wave: self.torn.get(wave, 0) + 1 for wave in torn}

    def give_up(self) -> list[str]:
        """The pilot ended: the waves still held half written (``folder/name``), no longer held —
        its wrapper is gone and will put none of them again, so each is bad now (the caller
        reports them) rather than left unreported when no read comes after."""
        held, self.torn = sorted(self.torn), {}
        return held

    def read_done(self, fresh: set[str]) -> None:
        """A read is over; ``fresh``: the incarnations it found a new wave of. An incarnation that
        is not the current one and stayed quiet for :data:`QUIET_READS` reads is dropped: its
        agent is gone and its waves were read to the end."""
        for inc in list(self.quiet):
            if inc in fresh:
                continue
            self.quiet[inc] += 1
            if inc != self.current and self.current is not None and self.quiet[inc] >= QUIET_READS:
                del self.quiet[inc]
                self.retired.add(inc)
                for folder in FOLDERS:
                    self.next.pop((folder, inc), None)
                    self.last_found.pop((folder, inc), None)
