"""Walltime packing inside the engine: no task dispatched past a pilot's walltime.

:mod:`resel.walltime` holds the policy and its arithmetic (docs/walltime.md); here is what the
engine does with it: a site whose limit cannot fit one task takes none; a task is handed ahead
to a pilot only if it still finishes inside the pilot's walltime; a pilot whose remaining
walltime falls below a task's longest hold (T̂x,hi, plus its inputs' trip) is drained — its
free slots leave the books, and it is released once idle, a clean end before the scheduler's
kill; and a pilot asks for the walltime its tasks need, within the site's limit.

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import heapq
import math

from resel.engine_books import PilotRecord
from resel.errors import ReselError
from resel.events import Action
from resel.states import PilotState
from resel.walltime import WalltimePolicy, fits


class WalltimeRules:
    """The engine's walltime guard, drains and requests (a mixin of :class:`~resel.engine.Engine`)."""

    def _init_walltime(self, walltime: WalltimePolicy | str) -> None:
        """The policy (or its mode); no pilot started yet, so none to drain."""
        self.walltime = walltime if isinstance(walltime, WalltimePolicy) else WalltimePolicy(walltime)
        self._drained: dict[int, None] = {}
        #: per site, a heap of (deadline = started + walltime, pilot id, started) of its started
        #: pilots. A pilot must drain once t > deadline − T̂x,hi(site), and T̂x,hi is one figure
        #: for all of a site's pilots, so their order by deadline never changes when a rate is
        #: learned or a bandwidth measured: only the site's one due instant moves. (One heap of
        #: due instants, pushed again for every pilot at every change, grew with tasks × pilots:
        #: 24 GB at 100,000 tasks with learning on.)
        self._deadlines: dict[int, list[tuple[float, int, float]]] = {}
        #: per site, its first pilot's deadline − T̂x,hi; and the smallest of them
        self._dues: dict[int, float] = {}
        self._next_due = math.inf

    def _track_deadline(self, pilot: PilotRecord, started: float) -> None:
        """A started pilot of finite walltime joins its site's deadlines (with the guard on)."""
        heapq.heappush(self._deadlines.setdefault(pilot.site, []), (started + pilot.walltime, pilot.id, started))
        self._refresh_due(pilot.site)

    def _refresh_due(self, x: int) -> None:
        """Site x's due instant again: after its first deadline changed, or its T̂x,hi moved (a
        rate learned, a bandwidth or the outputs measured)."""
        heap = self._deadlines.get(x)
        if heap:
            self._dues[x] = heap[0][0] - self._slot_hi(x)
        else:
            self._dues.pop(x, None)
        self._next_due = min(self._dues.values(), default=math.inf)

    def _refresh_dues(self) -> None:
        """Every site's due instant again (the data model was replaced)."""
        for x in list(self._deadlines):
            self._refresh_due(x)

    def _fitting(self, viable: list[int]) -> list[int]:
        """The viable sites whose walltime limit fits one task (with the guard on): a site whose
        limit is below T̂x,hi can never finish a task, so it is given no slots (with data: nor one
        whose first task, its inputs and the shared ones staged, does not fit). None fitting is
        an error that says why."""
        if not self.walltime.guard:
            return viable
        need = [self._slot_hi(i) if self.data is None else self._slot_hi(i) + self._dt[i].shared_in
                for i in range(len(self.sites))]
        fit = [i for i in viable if fits(self.sites[i].pilot.walltime, need[i])]
        if viable and not fit:
            what = "T̂x,hi" if self.data is None else "T̂x,hi + inputs"
            raise ReselError("no site's walltime limit fits one task: " + ", ".join(
                f"{self.sites[i].name} {self.sites[i].pilot.walltime:g} s < {what} {need[i]:.0f} s"
                for i in viable) + "; raise pilot.walltime or use --walltime off")
        for i in set(viable) - set(fit):
            self._books[i].cap_slots = self._books[i].cap_saved = 0
        return fit

    def _walltime_left(self, pilot: PilotRecord, t: float) -> float:
        """Walltime left to an active pilot at t (its full walltime while pending)."""
        if pilot.started is None or pilot.state is PilotState.PENDING:
            return pilot.walltime
        return pilot.started + pilot.walltime - t

    def _can_queue(self, pilot: PilotRecord, t: float) -> bool:
        """Whether one more task handed ahead to the pilot still finishes inside its walltime:
        the q-th queued task starts within ⌈q/slots⌉ waves (one more on a running pilot, whose
        running tasks end within one), each at most T̂x,hi."""
        if not self.walltime.guard:
            return True
        waves = math.ceil((len(pilot.queued) + 1) / pilot.slots)
        if pilot.state is PilotState.ACTIVE:
            waves += 1
        return fits(self._walltime_left(pilot, t), waves * self._slot_hi(pilot.site))

    def _expire(self, t: float, out: list[Action]) -> None:
        """Drain every pilot that can no longer finish a task (remaining walltime below
        T̂x,hi, i.e. t > start + walltime − T̂x,hi: each site's first such instant is kept, so an
        event pays nothing until one passes): its free slots leave the books, the slots that free later
        stay out, and it is released once idle."""
        while self._next_due < t:
            # the site whose first pilot is due soonest (ties: the lower pilot id, as one heap of
            # (due, pilot, started) would pop them)
            x = min(self._dues, key=lambda y: (self._dues[y], self._deadlines[y][0][1:]))
            _, pid, started = heapq.heappop(self._deadlines[x])
            self._refresh_due(x)
            pilot = self.pilots[pid]
            if pilot.state is not PilotState.ACTIVE or pilot.started != started or pilot.draining:
                continue   # ended, or requeued and started again (a later entry is its own)
            book = self._books[x]
            pilot.draining = True
            book.draining += 1
            if pilot.free:
                book.free -= pilot.free
                self._free_total -= pilot.free
                pilot.free = 0
                del book.free_pilots[pid]
            self._dirty.add(x)
            if not pilot.tasks and not pilot.queued:
                self._drained[pid] = None
        if self._drained:
            for pid in list(self._drained):
                pilot = self.pilots[pid]
                if not pilot.state.final:
                    self._cancel_pilot(pilot, t, out)   # a clean end before the scheduler's kill
            self._drained.clear()

    def _pilot_walltime(self, x: int, tasks: int, slots: int) -> float:
        """The walltime a pilot of site x asks for: sized from its tasks within the site's limit
        (with data: each task's slot time :meth:`_slot_hi`, and the shared inputs while x is cold)."""
        limit = self.sites[x].pilot.walltime
        request = self.walltime.request(limit, self._slot_hi(x), tasks, slots)
        if self.data is not None and self._ready[x] is None:
            request = min(limit, request + self._dt[x].shared_in)
        return request
