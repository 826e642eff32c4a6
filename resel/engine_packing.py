"""Tasks of different widths packed into one pilot: a pilot is a pool of cores.

A bag whose task table lists tasks of different ``cores`` (docs/configuration.md, "Bags of
unequal tasks") would waste cores if every slot were as wide as the widest task: an 8-core
pilot with 2-core slots runs four 1-core tasks, not eight. Here a pilot of a ``single`` site
counts its cores in *units* of the widths' greatest common divisor (1 for widths 1 and 2), and
a task takes as many units as its width needs, in the first pilot where they are free. Tasks
keep their order (largest first stays); a task that fits no pilot's free cores now lets a
narrower one behind it take them, as a batch scheduler's backfill would.

A bag of one width (every bag without a table, and tables whose rows all ask the same cores)
never comes here: ``_u`` is None and every rule of the engine runs as before, slot by slot, so
its runs and the numbers published from them do not move. A ``per-task`` pool keeps one task
per pilot, each pilot as wide as the widest task (its unit is ``cores_per_task``).

The plan and the oracle's hindsight count such a bag the same way: :func:`packed_run` is this
packing of one site's tasks into its pilots, run time by run time, which their waves of one
width per slot over-counted.

Hand-ahead (``prefetch``) is off for such a bag: the engine's books of queued tasks are kept
slot for slot (a freed slot reserved for a queued task, or owed to one the agent started
first), which holds only because any queued task fits any freed slot. With widths the units a
task frees fit none, one or several queued tasks, the agent picks which (protocol 5: oldest
that fits) and the engine hears it a poll later; meanwhile it would place a task into units
the agent gave a queued one (that task then waits in the inbox while the engine thinks it
runs) or hold units for a wide task the agent does not start (docs/engine.md, item 7).

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Sequence

from resel.domain import Bag, Site
from resel.engine_books import RUNNING
from resel.events import Action


class UnitQueue(deque):
    """A site's waiting tasks (a deque) that also keeps the sum of their units, so sizing a
    site's pilots reads it in O(1) instead of summing a queue of thousands at every event
    (measured: 10,000 tasks took 5× the CPU of one width before). Every deque mutation the
    engine uses keeps ``units`` true."""

    def __init__(self, iterable=(), units: tuple[int, ...] = ()):
        super().__init__(iterable)
        self.per = units
        self.units = sum(units[t] for t in self)

    def append(self, tid: int) -> None:
        super().append(tid)
        self.units += self.per[tid]

    def appendleft(self, tid: int) -> None:
        super().appendleft(tid)
        self.units += self.per[tid]

    def pop(self) -> int:
        tid = super().pop()
        self.units -= self.per[tid]
        return tid

    def popleft(self) -> int:
        tid = super().popleft()
        self.units -= self.per[tid]
        return tid

    def remove(self, tid: int) -> None:
        super().remove(tid)
        self.units -= self.per[tid]

    def __delitem__(self, i: int) -> None:
        tid = self[i]
        super().__delitem__(i)
        self.units -= self.per[tid]

    def clear(self) -> None:
        super().clear()
        self.units = 0

    def extend(self, tids) -> None:
        for tid in tids:
            self.append(tid)

    def extendleft(self, tids) -> None:
        for tid in tids:
            self.appendleft(tid)


def core_unit(bag: Bag) -> tuple[int, tuple[int, ...] | None]:
    """The cores one unit of a pilot holds, and each task's units (None: a bag of one width,
    whose unit is ``cores_per_task`` and whose every task takes one)."""
    widths = {t.cores for t in bag.tasks}
    if len(widths) <= 1:
        return bag.cores_per_task, None
    unit = math.gcd(*widths)
    return unit, tuple(t.cores // unit for t in bag.tasks)


def packed_run(units: Sequence[int], times: Sequence[float], pools: Sequence[int]) -> float:
    """When tasks of ``units`` and run ``times`` each, waiting in this order, are all done in
    pilots of ``pools`` units that start together at 0 — packed as the engine packs them: after
    each task's end (and at 0) the first waiting task whose units a pilot has free takes them
    in the first such pilot, again until none fits; one that fits nowhere waits and a narrower
    one behind it goes (:meth:`PackingRules._fill_home_packed`). Ends at one instant are taken
    one by one, in the order their tasks started, as the engine hears them.

    The hand case of tests/test_packing.py (8 units; 2, 1, 1, 4 and 2 units of 4, 1, 2, 3 and
    1 s) gives 4 s. O(n log n) for a few widths: the waiting tasks are kept by width.

    Raises:
        ValueError: a task wider than every pool (it would wait for ever).
    """
    waiting: dict[int, deque[int]] = {}
    for i, u in enumerate(units):
        waiting.setdefault(u, deque()).append(i)
    widths = sorted(waiting)
    free = list(pools)
    ends: list[tuple[float, int, int, int]] = []   # (end, started as, pilot, units)
    started = 0

    def fill(now: float) -> None:
        nonlocal started
        while True:
            room = max(free, default=0)
            best = None
            for w in widths:          # the first waiting task (lowest index) of a width that fits
                if w > room:
                    break
                q = waiting[w]
                if q and (best is None or q[0] < waiting[best][0]):
                    best = w
            if best is None:
                return
            i = waiting[best].popleft()
            p = next(k for k, f in enumerate(free) if f >= best)
            free[p] -= best
            heapq.heappush(ends, (now + times[i], started, p, best))
            started += 1

    now = 0.0
    fill(now)
    while ends:
        now, _, p, u = heapq.heappop(ends)
        free[p] += u
        fill(now)
    if any(waiting[w] for w in widths):
        raise ValueError(f"a task of {max(w for w in widths if waiting[w])} units fits no pilot of {list(pools)}")
    return now


class PackingRules:
    """Placing tasks where their cores fit (a mixin of :class:`~resel.engine.Engine`)."""

    def _init_packing(self, bag: Bag, pack: bool = True) -> None:
        #: cores per unit of a ``single`` site's pilot, and each task's units (None: one width,
        #: or ``pack`` off: a live run stored before packing replays with slots of the widest)
        self._unit, self._u = core_unit(bag) if pack else (bag.cores_per_task, None)
        if self._u is not None:
            self.prefetch = 0   # (module docstring: the agent starts what the engine placed)

    def _new_waiting(self, tids=()) -> deque[int]:
        """A site's waiting queue holding ``tids``: a :class:`UnitQueue` for a bag of several
        widths (its units summed as it changes), else a plain deque as before."""
        return deque(tids) if self._u is None else UnitQueue(tids, self._u)

    def _waiting_units(self, x: int, spec: bool) -> int:
        """The units of the tasks waiting at site x (``spec``: at every site), on x."""
        books = self._books
        if self._u is None or books[x].per_task:
            return sum(len(b.waiting) for b in books) if spec else len(books[x].waiting)
        return sum(b.waiting.units for b in books) if spec else books[x].waiting.units

    def _cap_units(self, site: Site) -> int:
        """The units a pilot of ``site`` may hold: its cores over the unit — none if the
        widest task does not fit (such a site takes no task, as with one width)."""
        cores = min(site.pilot.max_cores or site.cores, site.cores)
        cpt = self.bag.cores_per_task
        if self._u is None or site.pilot.mode == "per-task":
            return max(0, cores // cpt)
        return cores // self._unit if cores >= cpt else 0

    def slot_cores(self, x: int) -> int:
        """How many cores one slot (unit) of site x's pilots holds: a pilot of ``c`` cores
        runs ``c // slot_cores(x)`` units (what its agent is told, ``--slots``)."""
        if self._u is None or self._books[x].per_task:
            return self.bag.cores_per_task
        return self._unit

    def task_slots(self, x: int, tid: int) -> int:
        """The units task ``tid`` takes in a pilot of site x (1 for a bag of one width)."""
        if self._u is None or self._books[x].per_task:
            return 1
        return self._u[tid]

    def pilot_slot_cores(self, site: str) -> int:
        """:meth:`slot_cores` by the site's name (the live coordinator: a pilot's agent runs
        its cores over this many slots)."""
        return self.slot_cores(self._index(site))

    def inbox_slots(self, site: str, tid: int) -> int | None:
        """The slots task ``tid`` takes in a pilot of ``site``, for its inbox file; None for a
        bag of one width (whose inbox files say nothing of slots, as before)."""
        return None if self._u is None else self.task_slots(self._index(site), tid)

    def _units_of(self, x: int, tids) -> int:
        """The units the tasks ``tids`` would take on site x."""
        if self._u is None or self._books[x].per_task:
            return len(tids)
        u = self._u
        return sum(u[tid] for tid in tids)

    def _widest_free(self, x: int) -> int:
        """The most free units one pilot of site x has."""
        pilots = self.pilots
        return max((pilots[pid].free for pid in self._books[x].free_pilots), default=0)

    def _pilot_for(self, x: int, need: int) -> int:
        """The first of site x's pilots with ``need`` free units (one must exist)."""
        pilots = self.pilots
        for pid in self._books[x].free_pilots:
            if pilots[pid].free >= need:
                return pid
        raise AssertionError(f"no pilot of site {x} has {need} free units")   # callers check first

    def _take_fitting(self, x: int, queue: deque[int]) -> int | None:
        """Remove and return the first task of ``queue`` whose units fit a pilot of site x and
        that is not barred from x (None: none fits now). Tasks before it keep their places."""
        room = self._widest_free(x)
        if room <= 0:
            return None
        for i, tid in enumerate(queue):
            if self.task_slots(x, tid) <= room and self.tasks[tid].barred != x:
                del queue[i]
                return tid
        return None

    def _fill_home_packed(self, x: int, t: float, out: list[Action]) -> None:
        """``Engine._fill_home`` for a bag of several widths: site x's waiting tasks, in order,
        each where its units fit (one that fits nowhere waits, and one behind it may go); then
        its tasks running provisionally elsewhere, moved back (or committed) where they fit."""
        book = self._books[x]
        while book.free and book.waiting:
            tid = self._take_fitting(x, book.waiting)
            if tid is None:
                break
            self._dispatch(self.tasks[tid], x, t, RUNNING, out)
            self._waiting_total -= 1
            self._waiting_changed = True
        for tid in list(book.prov):
            if book.free and tid in book.prov and self._fits(x, tid):
                self._move_back(x, self.tasks[tid], t, out)

    def _fits(self, x: int, tid: int) -> bool:
        """Whether task ``tid`` fits the free units of one pilot of site x now."""
        return self.task_slots(x, tid) <= self._widest_free(x)
