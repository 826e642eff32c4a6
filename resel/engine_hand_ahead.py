"""Hand-ahead (``prefetch`` > 0, the live coordinator): tasks queued on a pilot before a slot frees.

Since a slot freed on r goes to r's own waiting tasks first anyway, the engine hands each
pilot of r the next of those tasks (up to "the depth" per slot, below) before a slot frees
(state QUEUED), so the agent starts one
the instant a slot frees instead of a poll later. A queued task still counts as waiting for
every decision: re-selection may take it back, and a pilot withdrawn or ended gives its queued
tasks back. Live, the engine hears of an agent's start a poll late, so taking a queued task
back is a *request* (:class:`~resel.events.WithdrawTask`, state RECALLED) that the agent's
claim may refuse: the driver answers that it was withdrawn (the task waits again) or started
(it stays). Only the start is early: which tasks a pilot is handed is the core's choice
(``Engine._hand_ahead``, resel/engine.py), the tasks its next free slots would take anyway —
its site's own, then, once those are gone, the ones re-selection would move to it for good
(``Engine._hand_ahead_reselected``).

**The depth** (tasks handed ahead per slot). A freed slot is refilled by the agent from its
inbox; the inbox is refilled a cycle later (the coordinator reads the result, decides, writes,
and the agent looks at its inbox again). A slot that runs tasks of T_x seconds stays busy over
that cycle only if it holds ⌈cycle / T_x⌉ of them — one task per slot is the limit for short
tasks (docs/benchmarks.md, issue 29 §2: 1.3–1.6 tasks/s per slot at one, 2.4–2.7× that at four).
So with ``prefetch_cycle`` the depth is ⌈cycle / T_x⌉ with T_x the site's measured mean (the
seconds between the engine seeing a task start and end there), at least 1, at most
``prefetch``: 1 while nothing is measured (a handed-ahead task binds the task to the pilot
early, so no deeper than a measurement supports), the cap for tasks shorter than cycle/cap.
The walltime guard (``_can_queue``) caps it further on a pilot that could not finish them.

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import math

from resel.engine_books import QUEUED, RECALLED, Attempt, PilotRecord, SiteBook, TaskRecord
from resel.events import Action, CancelTask, Decision, DecisionKind, DispatchTask, TaskWithdrawn, WithdrawTask
from resel.states import AttemptOutcome, PilotState, next_task_state


class HandAheadRules:
    """The engine's queue of tasks handed ahead to pilots (a mixin of :class:`~resel.engine.Engine`)."""

    def _init_hand_ahead(self, cycle: float | None = None) -> None:
        #: tasks asked back from an agent (WithdrawTask) → the target whose free slot wanted them (−1: none)
        self._recalls: dict[int, int] = {}
        #: the driver's refill cycle (s): the depth follows the measured T_x; None: ``prefetch`` fixed
        self._cycle = None if cycle is None else max(0.0, float(cycle))

    def _depth(self, x: int) -> int:
        """Tasks handed ahead per slot of site x's pilots (the module's "The depth")."""
        if self._cycle is None or self.prefetch <= 1:
            return self.prefetch
        book = self._books[x]
        if not book.ran_n:
            return 1                      # nothing measured here yet
        if book.ran_s <= 0.0:
            return self.prefetch          # tasks that ended as they started, as far as we saw
        return max(1, min(self.prefetch, math.ceil(self._cycle * book.ran_n / book.ran_s)))

    def _ran(self, x: int, seconds: float) -> None:
        """A task done on x ran ``seconds`` (as the engine saw its start and end): the depth's T_x."""
        book = self._books[x]
        book.ran_n += 1
        book.ran_s += max(0.0, seconds)

    def _queue(self, task: TaskRecord, pilot: PilotRecord, t: float, out: list[Action]) -> None:
        """Hand a waiting task to a pilot ahead of a free slot (WAITING -> QUEUED)."""
        task.attempt += 1
        task.state = next_task_state(task.state, "queue")
        task.site, task.pilot = pilot.site, pilot.id
        task.attempts.append(Attempt(pilot.site, pilot.id, t))
        pilot.queued[task.id] = None
        self._books[pilot.site].queued[task.id] = None
        if self.data is not None:   # handed ahead: its inputs are staged now (docs/data.md)
            self._bound(pilot.site, t)
        out.append(DispatchTask(task=task.id, attempt=task.attempt, pilot=pilot.id, site=self.sites[pilot.site].name))

    def _start_queued(self, task: TaskRecord, t: float) -> None:
        """The agent started a queued attempt (QUEUED -> RUNNING): it takes its reserved slot."""
        pilot = self.pilots[task.pilot]
        book = self._books[pilot.site]
        del pilot.queued[task.id]
        if task.state is RECALLED:   # it was asked back, and its agent had claimed it: it stays
            self._answered(task, book)
        else:
            del book.queued[task.id]
        pilot.tasks[task.id] = None
        if pilot.state is PilotState.ACTIVE:
            if pilot.reserved:
                pilot.reserved -= 1
                book.reserved -= 1
            elif pilot.free:
                pilot.free -= 1
                book.free -= 1
                self._free_total -= 1
                if pilot.free == 0:
                    del book.free_pilots[pilot.id]
            else:
                pilot.debt += 1           # the slot's end is still on its way to us
        task.state = next_task_state(task.state, "start")
        task.attempts[-1].start = t
        if self._learn:
            self._mark_running(pilot.site, task, t)
        self._waiting_total -= 1
        self._waiting_changed = True
        self._dirty.add(pilot.site)

    def _unqueue(self, task: TaskRecord, t: float, out: list[Action] | None) -> None:
        """Take a queued attempt back before it started (QUEUED -> WAITING): with ``out``, the
        agent is told to cancel it (a pilot being stopped or gone needs no word)."""
        pilot = self.pilots[task.pilot]
        book = self._books[pilot.site]
        del pilot.queued[task.id]
        if task.state is RECALLED:
            self._answered(task, book)
        else:
            del book.queued[task.id]
        if pilot.reserved > len(pilot.queued):   # the slot it was to take is free again
            pilot.reserved -= 1
            book.reserved -= 1
            if pilot.state is PilotState.ACTIVE:
                pilot.free += 1
                book.free += 1
                self._free_total += 1
                book.free_pilots[pilot.id] = None
        task.attempts[-1].outcome = AttemptOutcome.WITHDRAWN   # never started: no end, no time counted
        if out is not None:
            out.append(CancelTask(task=task.id, attempt=task.attempt, pilot=pilot.id,
                                  site=self.sites[pilot.site].name))
        task.pilot = task.site = -1
        task.state = next_task_state(task.state, "withdraw")
        self._dirty.add(pilot.site)

    def _give_back_queued(self, pilot: PilotRecord, t: float) -> None:
        """A pilot that stops or ends returns its queued tasks to the front of their queue."""
        for tid in reversed(list(pilot.queued)):
            task = self.tasks[tid]
            self._unqueue(task, t, None)
            self._books[task.origin].waiting.appendleft(tid)
            self._waiting_changed = True

    def _recall_from_pending(self, x: int, t: float, out: list[Action]) -> None:
        """Site x has a free slot and nothing waiting while tasks sit handed ahead to its pilots
        that have not started: the free slot asks them back (newest pilot first, the end of its
        queue first), one per free slot not already promised one. Without a prefetch those
        tasks would have waited in x's queue and this slot would have taken them; with it they
        waited on a pilot that may never start — the crash soak's bag stalled so, for 300 s,
        beside two idle pool slots (seed 5, bag 22: the pool matched no more jobs)."""
        book = self._books[x]
        room = book.free - book.incoming
        for pid in reversed(list(book.pending)):
            for tid in reversed(list(self.pilots[pid].queued)):
                if room <= 0:
                    return
                task = self.tasks[tid]
                if task.state is QUEUED:   # (a RECALLED one is asked back already)
                    self._recall(task, t, out, x)
                    room -= 1

    def _recall(self, task: TaskRecord, t: float, out: list[Action], target: int = -1) -> None:
        """Ask a handed-ahead task back (QUEUED -> RECALLED): its agent may have claimed it since
        the driver last looked, so the driver takes it only if it is unclaimed and answers
        (TaskWithdrawn, or TaskStarted). ``target``: the site whose free slot wanted it."""
        pilot = self.pilots[task.pilot]
        book = self._books[pilot.site]
        del book.queued[task.id]
        book.recalled += 1
        task.state = next_task_state(task.state, "recall")
        self._recalls[task.id] = target
        if target >= 0:
            self._books[target].incoming += 1
        out.append(WithdrawTask(task=task.id, attempt=task.attempt, pilot=pilot.id, site=self.sites[pilot.site].name))
        self._dirty.add(pilot.site)

    def _answered(self, task: TaskRecord, book: SiteBook) -> None:
        """A recall is answered (withdrawn, started, or the pilot gave its queue back)."""
        book.recalled -= 1
        target = self._recalls.pop(task.id, -1)
        if target >= 0:
            self._books[target].incoming -= 1
            self._dirty.add(target)

    def _on_task_withdrawn(self, ev: TaskWithdrawn, out: list[Action]) -> None:
        """The driver took a recalled (or queued) attempt back unstarted: the task waits again at
        the front of its origin's queue — or of the fastest usable site, if its origin is gone."""
        task = self._task(ev.task)
        if task.attempt != ev.attempt or task.state not in (QUEUED, RECALLED):
            return   # started after all (a result came first), or given back already
        self._unqueue(task, ev.time, None)
        gone = self.sites[task.origin].name
        if self._books[task.origin].cap_slots <= 0 and (gone in self.lost_sites or self.health[task.origin].quarantined):
            usable = self._usable()
            if usable:
                best = self._fastest(usable, ev.time)
                if self.decisions:   # rebound as the site's waiting tasks were when it went: on record too
                    kind = DecisionKind.SITE_LOST if gone in self.lost_sites else DecisionKind.QUARANTINE
                    out.append(Decision(time=ev.time, kind=kind, task=task.id, origin=gone,
                                        target=self.sites[best].name, tx_r=self._txd(task.origin, ev.time),
                                        tx_r2=self._txd(best, ev.time)))
                if gone not in self.lost_sites:
                    task.moved_from = task.origin   # back when the quarantine ends, as the others
                task.origin = best
        self._books[task.origin].waiting.appendleft(task.id)
        self._waiting_changed = True
        self._dirty.add(task.origin)
