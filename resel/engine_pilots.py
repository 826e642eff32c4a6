"""The engine's pilots: their shapes, the slots asked for and withdrawn, and their ends.

Late binding (seeds/003 §3.4) needs pilots to bind to: one pilot per supercomputer sized for
its tasks, or single-core pilots on a pool (a site's ``pilot.mode``), asked for when a site's
tasks need more slots than it has or will have, withdrawn — pending ones newest first, then
idle ones — when nobody needs them. What a pilot's end or requeue means for the tasks it ran
is here too: they wait again (resel/engine_outcomes.py counts the losses).

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import math

from resel.engine_books import PilotRecord, SiteBook
from resel.events import Action, CancelPilot, CancelTask, PilotEnded, PilotRequeued, SubmitPilot
from resel.states import PilotState, next_pilot_state

#: the queue-aware strategy's pilot sizes per single-pilot site: the full pilot, then each size
#: 2^(-1/MENU_STEPS) of the one before (rounded down), down to one slot — the halving ladder
#: (full, half, quarter, …) with the sizes between. A backfill hole is rarely a power-of-two
#: fraction of the machine: on hpc2n-3q at 256 tasks (seed 2) 176 of seth-a's 240 cores start
#: at once and 180 wait 4,933 s; halving offered 120 (three waves) and nothing between
MENU_STEPS = 2

#: the menu also offers, for w = 1 … MENU_WAVES, the fewest slots that run the bag in w waves
#: (⌈units / w⌉): a size between two of them buys no wave over the smaller one. The ladder's
#: 2^(−1/2) steps miss these: on wagap at 1,024 tasks zegox starts 241, 192 and 124 slots at
#: once (seeds 0–2), the ladder offered 203, 144 and 101 (6, 8 and 11 waves where 205, 171 and
#: 114 — one wave count each — run 5, 6 and 9)
MENU_WAVES = 16

#: PilotEnded reasons that mean "reached its walltime" (the simulator's, Slurm's TIMEOUT,
#: PBS/HTCondor wordings): such an end is resel's packing, never the site's fault
WALLTIME_REASONS = ("walltime", "timeout", "walltime exceeded", "deadline")


def menu_ladder(full: int, least: int = 1) -> list[int]:
    """Pilot sizes from ``full`` slots down to ``least``, largest first: ⌊full · 2^(−j/MENU_STEPS)⌋
    for j = 0, 1, …, each once. Every halving size (⌊full / 2^j⌋) is among them."""
    out: list[int] = []
    j = 0
    while True:
        k = max(least, math.floor(full * 2 ** (-j / MENU_STEPS) + 1e-9))
        if not out or k < out[-1]:
            out.append(k)
        if k <= least:
            return out
        j += 1


def menu_sizes(full: int, least: int = 1, units: int = 0) -> list[int]:
    """The menu's pilot sizes, largest first: :func:`menu_ladder` and, for a bag of ``units``
    slots' worth of tasks, ⌈units / w⌉ for w = 1 … MENU_WAVES within [least, full]."""
    waves = {math.ceil(units / w) for w in range(1, MENU_WAVES + 1)} if units > 0 else set()
    return sorted(set(menu_ladder(full, least)) | {k for k in waves if least <= k <= full}, reverse=True)


def halving_menu(full: int, least: int = 1) -> list[int]:
    """The menu before 2026-11-29: ``full`` halved while at least ``least``, at most six sizes.
    A run stored then (its ``BagSubmitted.wait_menu`` one wait per such size) replays with it."""
    out, slots = [], full
    while slots >= least and len(out) < 6:
        out.append(slots)
        slots //= 2
    return out


class PilotRules:
    """The engine's pilots: probe shapes, sizing, submission, withdrawal, ends (a mixin of
    :class:`~resel.engine.Engine`)."""

    def probe_shapes(self) -> dict[int, tuple[int, float]]:
        """Per site index, the pilot (cores, walltime) it would be asked for if it got the bag.

        A ``single``-mode site gets one pilot for every task, up to its cap; a ``per-task``
        site one task's cores. Drivers ask each site how long such a pilot would wait.
        """
        out = {}
        for i, (site, book) in enumerate(zip(self.sites, self._books)):
            units = self._units_of(i, range(self.bag.count))   # (the bag's tasks: one unit each for one width)
            slots = 1 if site.pilot.mode == "per-task" else max(1, min(units, book.cap_slots))
            tasks = 1 if site.pilot.mode == "per-task" else units
            out[i] = (slots * self.slot_cores(i), self._pilot_walltime(i, tasks, slots))
        return out

    def probe_menu(self) -> dict[int, list[tuple[int, int, float]]]:
        """Per site index, the pilot sizes the queue-aware strategy may choose between, as
        (task slots, cores, walltime), largest first: a ``single`` site's full pilot down to one
        slot on :func:`menu_ladder`, a pool's one-task pilot (its slots: how many such pilots
        run at once). Smaller pilots often start much sooner (backfill); the driver says when
        each would start, in ``BagSubmitted.wait_menu``.
        """
        out = {}
        cpt = self.bag.cores_per_task
        for i, (site, book) in enumerate(zip(self.sites, self._books)):
            if book.cap_slots <= 0:
                out[i] = []
            elif site.pilot.mode == "per-task":
                out[i] = [(max(1, min(book.cap_slots, site.pilot.max_pilots)), cpt, self._pilot_walltime(i, 1, 1))]
            else:
                # (several widths: units of slot_cores, none smaller than the widest task)
                unit, units = self.slot_cores(i), self._units_of(i, range(self.bag.count))
                least = max(1, cpt // unit)
                out[i] = [(slots, slots * unit, self._pilot_walltime(i, units, slots))
                          for slots in menu_sizes(max(least, min(units, book.cap_slots)), least, units)]
        return out

    def _menu_slots(self, menu: list[tuple[int, int, float]], waits: int) -> list[int]:
        """The pilot sizes a driver's ``waits`` estimates of one site stand for: this menu's, or —
        a run stored before the menu offered the sizes between halvings, replayed on resume —
        the halving menu's, when that is the one with as many sizes (the ladder holds every
        halving size and more, so a menu that differs is always longer)."""
        slots = [k for k, _, _ in menu]
        if waits == len(slots) or len(slots) < 2:
            return slots
        for old in (menu_ladder(slots[0], slots[-1]), halving_menu(slots[0], slots[-1])):
            if waits == len(old):   # (stored before the wave sizes joined the ladder, or before that)
                return old
        return slots

    def _on_pilot_ended(self, ev: PilotEnded, out: list[Action]) -> None:
        pilot = self._pilot(ev.pilot)
        if pilot.state.final:
            return
        at_walltime = ev.reason.lower() in WALLTIME_REASONS or (
            pilot.started is not None and ev.time - pilot.started >= pilot.walltime)
        died_young = not pilot.done and (pilot.started is None
                                         or ev.time - pilot.started < self.quarantine.start_grace)
        if not at_walltime and (pilot.tasks or died_young):
            self._outcome(pilot.site, bad=True)   # one incident, however many tasks it took down
        self._give_back_queued(pilot, ev.time)
        self._withdraw(pilot)
        for tid in list(pilot.tasks):
            self._lose(self.tasks[tid], ev.time, out)
        pilot.state = next_pilot_state(pilot.state, "end")
        pilot.ended = ev.time
        self._dirty.add(pilot.site)

    def _on_pilot_requeued(self, ev: PilotRequeued, out: list[Action]) -> None:
        """The running pilot's job is back in the queue: what it ran is lost, its slots are
        pending again. Its queued tasks stay queued (the next incarnation starts them); each
        lost attempt is cancelled too, so that an attempt still in the inbox never runs twice."""
        pilot = self._pilot(ev.pilot)
        if pilot.state is not PilotState.ACTIVE:
            return   # already pending (a repeated report) or over: nothing runs there
        name = self.sites[pilot.site].name
        self._outcome(pilot.site, bad=True)   # one incident against the site (a node failure)
        for tid in pilot.tasks:
            out.append(CancelTask(task=tid, attempt=self.tasks[tid].attempt, pilot=pilot.id, site=name))
        self._withdraw(pilot)
        lost = list(pilot.tasks)
        pilot.tasks.clear()
        pilot.state = next_pilot_state(pilot.state, "requeue")
        pilot.free, pilot.reserved, pilot.debt = pilot.slots, 0, 0
        book = self._books[pilot.site]
        book.pending[pilot.id] = None
        book.pending_slots += pilot.slots
        for tid in reversed(lost):   # each goes to the front: keep their order
            self._lose(self.tasks[tid], ev.time, out)
        self._dirty.add(pilot.site)

    def _size_pilots(self, x: int, t: float, out: list[Action]) -> None:
        """Ask for the slots the site's tasks still need; withdraw what nobody needs."""
        book = self._books[x]
        # a queued task whose slot already freed (reserved) needs nothing more
        if self._u is not None and not book.per_task:   # several widths: count units, not tasks
            need = self._waiting_units(x, book.spec) + self._units_of(x, book.prov)
        elif book.spec:   # every other candidate site is an origin of this target
            need = self._waiting_total - book.reserved + len(book.prov)
        else:
            # (+ incoming: tasks asked back for its free slots, on their way — its pilot stays)
            need = len(book.waiting) + len(book.queued) + book.recalled - book.reserved + len(book.prov) + book.incoming
        have = book.free + book.pending_slots
        if need <= have:
            if need < have:
                self._withdraw_surplus(book, have - need, t, out)
            return
        if book.cap_slots <= 0:
            return   # nothing to ask of a site that takes no task (lost, quarantined, no fit)
        if book.pending and not book.per_task:
            # tasks arriving one event at a time within one instant (a quarantine's failures):
            # a pilot asked for at this very instant has no queue place to lose, so it is
            # replaced by one sized for them all rather than left to run them in waves
            for pid in list(book.pending):
                pilot = self.pilots[pid]
                if pilot.submitted == t and not pilot.queued and pilot.slots < book.cap_slots:
                    have -= pilot.slots
                    self._cancel_pilot(pilot, t, out)
        # (replacing only lowers ``have``: still short) a draining pilot is on its way out: its
        # replacement may queue meanwhile
        count = len(book.pending) + len(book.active) - book.draining
        if book.per_task:
            if count < book.max_pilots:   # (a pool at its pilot cap: the usual case)
                for _ in range(min(need - have, book.max_pilots - count)):
                    self._submit(x, 1, t, out, tasks=1)
        elif count < book.max_pilots:
            size = need - have
            if self._u is not None:   # several widths: a pilot the widest task that needs it fits
                waiting = [tid for b in self._books for tid in b.waiting] if book.spec else list(book.waiting)
                size = max(size, max((self.task_slots(x, tid) for tid in waiting + list(book.prov)), default=1))
            self._submit(x, min(size, book.cap_slots), t, out, tasks=need - have)

    def _withdraw_surplus(self, book: SiteBook, surplus: int, t: float, out: list[Action]) -> None:
        """Cancel pending pilots, newest first, then idle active ones, that fit in ``surplus``
        slots nobody needs (a pilot bigger than what is left over is kept)."""
        for pid in reversed(list(book.pending)):
            if surplus <= 0:
                break
            pilot = self.pilots[pid]
            if pilot.slots <= surplus and not pilot.tasks:   # (one back in the queue may still run some)
                surplus -= pilot.slots
                self._cancel_pilot(pilot, t, out)
        for pid in list(book.free_pilots):
            pilot = self.pilots[pid]
            if pilot.free == pilot.slots and pilot.slots <= surplus:   # idle and not needed
                surplus -= pilot.slots
                self._cancel_pilot(pilot, t, out)

    def _submit(self, x: int, slots: int, t: float, out: list[Action], tasks: int | None = None) -> None:
        """Ask for a pilot of ``slots`` slots meant for ``tasks`` tasks (its walltime is sized
        from them, :mod:`resel.walltime`)."""
        pid = self._next_pilot
        self._next_pilot += 1
        walltime = self._pilot_walltime(x, slots if tasks is None else tasks, slots)
        pilot = PilotRecord(pid, x, slots, t, walltime)
        self.pilots[pid] = pilot
        book = self._books[x]
        book.pending[pid] = None
        book.pending_slots += slots
        site = self.sites[x]
        out.append(SubmitPilot(pilot=pid, site=site.name, cores=slots * self.slot_cores(x),
                               walltime=walltime))

    def _withdraw(self, pilot: PilotRecord) -> None:
        """Take a pending or active pilot's slots out of its site's books."""
        book = self._books[pilot.site]
        if pilot.state is PilotState.PENDING:
            del book.pending[pilot.id]
            book.pending_slots -= pilot.slots
        else:
            del book.active[pilot.id]
            book.free_pilots.pop(pilot.id, None)
            book.free -= pilot.free
            self._free_total -= pilot.free
            book.reserved -= pilot.reserved
            pilot.reserved = 0
            if pilot.draining:
                book.draining -= 1
                pilot.draining = False
            self._drained.pop(pilot.id, None)

    def _cancel_pilot(self, pilot: PilotRecord, t: float, out: list[Action]) -> None:
        """Withdraw a pilot; its handed-ahead tasks wait again at once (a later event may never
        come to place them). Live, its agent may have claimed one since the driver last read:
        ``given_back`` names them, and the driver takes their inbox files back before it sends
        them elsewhere (docs/live.md, "Withdrawn with its tasks")."""
        if pilot.queued:
            pilot.given_back = tuple((tid, self.tasks[tid].attempt) for tid in pilot.queued)
        self._give_back_queued(pilot, t)   # the stop file tells its agent; no cancel per task
        self._withdraw(pilot)
        pilot.state = next_pilot_state(pilot.state, "cancel")
        pilot.ended = t
        out.append(CancelPilot(pilot=pilot.id, site=self.sites[pilot.site].name))
