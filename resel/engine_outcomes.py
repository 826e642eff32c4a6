"""How an attempt ends when it does not simply finish: failures, losses, retries, give-ups.

A task that fails (non-zero exit) is retried up to ``max_attempts`` failures, one whose pilot
vanishes under it up to ``max_losses`` losses — but never given up on the word of one site
alone while another is usable. A task whose outputs travel home (docs/data.md) is settled where
it ran when its attempt ends well, and counts as done only once they are delivered; outputs
that never come home are a failure after all. A bag the user cancels stops every pilot.

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`. The attempt that
finishes well at once (:class:`~resel.events.TaskFinished`, the hottest event) is the core's.
"""

from __future__ import annotations

from resel.engine_books import FETCHING, PROVISIONAL, QUEUED, RECALLED, RUNNING, TaskRecord
from resel.events import (DISPATCH_FAILED, Action, BagCancelled, TaskDelivered, TaskFailed, TaskFetching,
                          TaskLost, TaskUndelivered)
from resel.states import AttemptOutcome, next_task_state


class OutcomeRules:
    """The engine's ends of attempts other than a plain finish (a mixin of :class:`~resel.engine.Engine`)."""

    def _on_task_lost(self, ev: TaskLost, out: list[Action]) -> None:
        task = self._task(ev.task)
        if task.attempt != ev.attempt:
            return
        if task.state is QUEUED or task.state is RECALLED:   # taken by an agent that died before we read its start
            self._start_queued(task, ev.time)
        if task.state not in (RUNNING, PROVISIONAL):
            return
        x = task.site
        self._end_attempt(task, ev.time, AttemptOutcome.LOST)   # the pilot lives on: its slot is free again
        task.losses += 1
        if self._hung(task, x, ev.time, out):
            return
        self._requeue(task, ev.time, *self._retry_or_give_up(task, x, AttemptOutcome.LOST,
                                                             task.losses >= self.max_losses, ev.time))

    def _on_task_failed(self, ev: TaskFailed, out: list[Action]) -> None:
        task = self._task(ev.task)
        if task.attempt == ev.attempt and (task.state is QUEUED or task.state is RECALLED):
            self._start_queued(task, ev.time)   # e.g. a bad task file: failed without a start
        if task.attempt != ev.attempt or task.state not in (RUNNING, PROVISIONAL):
            return
        x = task.site
        # a task failing there again says nothing new of the site — unless the site refused the
        # dispatch itself, its own fault each time
        if ev.reason.startswith(DISPATCH_FAILED) or not any(
                a.site == x and a.outcome is AttemptOutcome.FAILED for a in task.attempts[:-1]):
            self._outcome(x, bad=True)
        self._end_attempt(task, ev.time, AttemptOutcome.FAILED)
        task.failures += 1
        self._requeue(task, ev.time, *self._retry_or_give_up(task, x, AttemptOutcome.FAILED,
                                                             task.failures >= self.max_attempts, ev.time))

    def _on_task_fetching(self, ev: TaskFetching, out: list[Action]) -> None:
        """The attempt ended well; its outputs are coming home (docs/data.md). Its slot is free
        and the task is settled where it ran (a provisional one leaves its window: the work is
        done, a move could only undo it), but it counts as remaining until it is delivered."""
        task = self._task(ev.task)
        if task.attempt == ev.attempt and (task.state is QUEUED or task.state is RECALLED):
            self._start_queued(task, ev.time)
        if task.attempt != ev.attempt or task.state not in (RUNNING, PROVISIONAL):
            return
        self.health[task.site].n += 1
        self.pilots[task.pilot].done += 1
        if self._learn:
            self._learn_from(task, ev.time, out)
        self._end_attempt(task, ev.time, AttemptOutcome.DONE)
        if task.state is PROVISIONAL:
            del self._books[task.origin].prov[task.id]
            self._dirty.add(task.origin)
        task.state = next_task_state(task.state, "fetch")

    def _on_task_delivered(self, ev: TaskDelivered, out: list[Action]) -> None:
        task = self._task(ev.task)
        if task.attempt != ev.attempt or task.state is not FETCHING:
            return
        task.attempts[-1].delivered = ev.time
        task.state = next_task_state(task.state, "deliver")
        self._settled_one(done=True)

    def _on_task_undelivered(self, ev: TaskUndelivered, out: list[Action]) -> None:
        """The outputs never came home: the attempt failed after all (it counts toward the
        task's failures and against its site), and the task waits to run again."""
        task = self._task(ev.task)
        if task.attempt != ev.attempt or task.state is not FETCHING:
            return
        rec = task.attempts[-1]
        rec.outcome = AttemptOutcome.FAILED
        x = rec.site
        health = self.health[x]             # counted good at TaskFetching: now it is a bad one
        health.bad = min(health.n, health.bad + 1)
        self._suspects.add(x)
        task.failures += 1
        self._requeue(task, ev.time, *self._retry_or_give_up(task, x, AttemptOutcome.FAILED,
                                                             task.failures >= self.max_attempts, ev.time))

    def _on_bag_cancelled(self, ev: BagCancelled, out: list[Action]) -> None:
        for pilot in list(self.pilots.values()):
            if pilot.state.final:
                continue
            self._give_back_queued(pilot, ev.time)
            for tid in list(pilot.tasks):
                task = self.tasks[tid]
                task.attempts[-1].end, task.attempts[-1].outcome = ev.time, AttemptOutcome.CANCELLED
                if task.state is PROVISIONAL:
                    del self._books[task.origin].prov[tid]
                task.state = next_task_state(task.state, "stop")
                task.pilot = task.site = -1
            pilot.tasks.clear()
            self._cancel_pilot(pilot, ev.time, out)
        self.cancelled = self.finished = True

    def _lose(self, task: TaskRecord, time: float, out: list[Action]) -> None:
        """The pilot under a running task vanished: back to waiting (not the task's fault) — or
        given up as hung (engine_overdue)."""
        rec = task.attempts[-1]
        rec.end, rec.outcome = time, AttemptOutcome.LOST
        x = task.site
        task.pilot = task.site = -1
        task.losses += 1
        if self._hung(task, x, time, out):
            return
        self._requeue(task, time, *self._retry_or_give_up(task, x, AttemptOutcome.LOST,
                                                          task.losses >= self.max_losses, time))

    def _retry_or_give_up(self, task: TaskRecord, x: int, outcome: AttemptOutcome, give_up: bool,
                          t: float) -> tuple[bool, int | None]:
        """(give up?, the site to requeue on): a task is never given up on the word of one site
        alone — when every attempt that ended ``outcome`` (failed, lost) was on x, the site it
        just ended on, and another site is usable, it gets one more try on the fastest of those
        (a black hole not yet quarantined, a site whose pilots keep dying)."""
        if give_up and {a.site for a in task.attempts if a.outcome == outcome} == {x}:
            others = self._usable(exclude=x)
            if others:
                # and it stays elsewhere: re-selection, hand-ahead and restarts never move it
                # back to x (it did, and the task failed there again and again, one more try each
                # time, until x was quarantined for that one task)
                task.barred = x
                return False, self._fastest(others, t)
        return give_up, None

    def _requeue(self, task: TaskRecord, t: float, give_up: bool, origin: int | None = None) -> None:
        """Back to waiting (front of its origin's queue, or of ``origin``'s), or given up."""
        if task.state is PROVISIONAL:
            del self._books[task.origin].prov[task.id]
        if origin is not None and not give_up:
            self._dirty.add(task.origin)
            task.origin = origin
        if self._books[task.origin].cap_slots <= 0 and (
                self.sites[task.origin].name in self.lost_sites or self.health[task.origin].quarantined):
            usable = self._usable()
            if usable:   # its origin is gone or quarantined: requeue on the fastest site still usable
                task.origin = self._fastest([y for y in usable if y != task.barred] or usable, t)
            else:
                give_up = True
        if give_up:
            task.state = next_task_state(task.state, "give-up")
            self._settled_one(done=False)
        else:
            task.state = next_task_state(task.state, "lost")
            self._books[task.origin].waiting.appendleft(task.id)
            self._waiting_total += 1
            self._waiting_changed = True
        self._dirty.add(task.origin)

    def _settled_one(self, done: bool) -> None:
        self._remaining -= 1
        if done:
            self.done_count += 1
        else:
            self.failed_count += 1
