"""Overdue attempts: a task that runs far longer than any its site has run is cancelled once.

Why. Nothing in a bag says how long a task may take, and a task that hangs (a deadlock, a
stuck file system, a rank waiting for a dead peer) holds its slot until the pilot's walltime
kills it. The task is then lost — not its fault, as far as anyone can tell — and rerun, up to
``max_losses`` (5) times: one deterministic hang held the bag open for five pilot walltimes,
ten days at the default 48 h, while every other task had long finished. ``--task-timeout S``
bounds an attempt, but only for a user who knows a bound and thought to give it.

The rule (docs/engine.md, "Overdue attempts"), on by default:

* **A site's limit.** Once ``measured`` tasks (3) ended well on site x in this run, an
  attempt on x is *overdue* after max(``floor``, ``factor`` × the longest of them) — the
  longest per unit of a task's size in a bag of unequal tasks, times the task's own size.
  Before x has measured that much it has no limit: LIM's prior is too far off (2.4–3.6×) to
  call anything overdue.
* **Once cancelled, never lost.** An overdue attempt is cancelled (its time counted as
  waste) and the task waits again. Its next attempt runs with no limit of this rule: a task
  that is merely long finishes then, so the rule never gives a task up for being long.
* **Hung twice, given up.** If that next attempt also runs past the limit and then ends lost
  (the pilot's walltime, a node gone), the task is given up as hung — one walltime at most
  instead of ``max_losses`` of them.

It is checked by one timer every ``period`` seconds while attempts run on a site with a
limit (the timer's ``task`` -1 and ``attempt`` the negative sweep number, so every sweep is
its own journal key and a resumed run re-arms the one still pending), not a timer per
attempt: a live run of 100,000 tasks journals two rows a sweep, not two a task. Each
decision is a :class:`~resel.events.TaskOverdue` record. Pure rules over the engine's state;
a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from resel.engine_books import PROVISIONAL, RUNNING, TaskRecord
from resel.events import Action, CancelTask, SetTimer, TaskOverdue
from resel.states import AttemptOutcome, PilotState


@dataclass(frozen=True)
class OverduePolicy:
    """The overdue rule's numbers (module docstring); ``enabled`` False turns it off."""

    factor: float = 10.0      # × the longest task measured on the site
    floor: float = 600.0      # never overdue before this many seconds
    measured: int = 3         # tasks ended well on a site before it has a limit
    period: float = 300.0     # seconds between sweeps while attempts run
    enabled: bool = True


class OverdueRules:
    """The engine's overdue attempts (a mixin of :class:`~resel.engine.Engine`)."""

    def _init_overdue(self, policy: OverduePolicy | None) -> None:
        self.overdue = policy or OverduePolicy()
        #: per site: tasks ended well, and the longest of them per unit of size (seconds)
        self._ended_well = [0] * len(self.sites)
        self._longest = [0.0] * len(self.sites)
        self._overdue_ready = False     # some site has a limit
        self._sweep = 0                 # sweeps armed so far; the pending one is -_sweep
        self._sweep_armed = False

    def overdue_limit(self, x: int, tid: int) -> float:
        """How long task ``tid`` may run on site x before it is overdue (inf: no limit yet)."""
        policy = self.overdue
        if not policy.enabled or self._ended_well[x] < policy.measured:
            return math.inf
        w = 1.0 if self._w is None else self._w[tid]
        return max(policy.floor, policy.factor * self._longest[x] * w)

    def _ended_well_on(self, task: TaskRecord, t: float) -> None:
        """Task's running attempt ended well at t (before the attempt is closed): its time
        joins its site's longest."""
        x = task.site
        ran = t - task.attempts[-1].start
        if self._w is not None:
            w = self._w[task.id]
            ran = ran / w if w > 0 else 0.0
        if ran > self._longest[x]:
            self._longest[x] = ran
        self._ended_well[x] += 1
        if self._ended_well[x] >= self.overdue.measured and self.overdue.enabled:
            self._overdue_ready = True

    def _arm_sweep(self, t: float, out: list[Action]) -> None:
        """After an event: the next sweep, if a site has a limit and none is pending."""
        self._sweep += 1
        self._sweep_armed = True
        out.append(SetTimer(at=t + self.overdue.period, task=-1, attempt=-self._sweep))

    def _on_sweep(self, attempt: int, t: float, out: list[Action]) -> None:
        """The sweep timer fired: cancel the overdue attempts; the next sweep is armed by
        :meth:`~resel.engine.Engine.handle` if anything still runs where a limit holds."""
        if attempt != -self._sweep:
            return                       # a stale sweep (a resumed run's, already replaced)
        self._sweep_armed = False
        for x, book in enumerate(self._books):
            if self._ended_well[x] < self.overdue.measured:
                continue
            for pid in list(book.active):
                pilot = self.pilots[pid]
                if pilot.state is not PilotState.ACTIVE:
                    continue
                for tid in list(pilot.tasks):
                    task = self.tasks[tid]
                    if task.state is RUNNING or task.state is PROVISIONAL:
                        self._check_overdue(task, x, t, out)

    def _runs_under_limit(self) -> bool:
        """Whether any attempt runs on a site that has a limit (a sweep is worth arming)."""
        for x, book in enumerate(self._books):
            if self._ended_well[x] >= self.overdue.measured and any(
                    self.pilots[pid].tasks for pid in book.active):
                return True
        return False

    def _check_overdue(self, task: TaskRecord, x: int, t: float, out: list[Action]) -> None:
        rec = task.attempts[-1]
        ran = t - rec.start
        if task.overdue:                 # its rerun: no limit of this rule (module docstring)
            return
        limit = self.overdue_limit(x, task.id)
        if ran < limit:
            return
        name = self.sites[x].name
        out.append(CancelTask(task=task.id, attempt=task.attempt, pilot=task.pilot, site=name))
        out.append(TaskOverdue(time=t, task=task.id, attempt=task.attempt, site=name, ran=ran, limit=limit,
                               gave_up=False))
        task.overdue = limit
        self._end_attempt(task, t, AttemptOutcome.CANCELLED)
        self._requeue(task, t, False)

    def _hung(self, task: TaskRecord, x: int, t: float, out: list[Action]) -> bool:
        """Task's attempt on x was just lost (closed): if an attempt of it was cancelled as
        overdue before and this one too ran past that limit, give it up as hung (True)."""
        rec = task.attempts[-1]
        if not task.overdue or rec.end is None or rec.end - rec.start < task.overdue:
            return False
        out.append(TaskOverdue(time=t, task=task.id, attempt=task.attempt, site=self.sites[x].name,
                               ran=rec.end - rec.start, limit=task.overdue, gave_up=True))
        self._requeue(task, t, True)
        return True
