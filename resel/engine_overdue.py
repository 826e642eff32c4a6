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

It is checked by one sweep timer while attempts run on a site with a limit, every quarter of
the shortest limit in force (an attempt is cancelled between 1× and 1.25× its limit), not a
timer per attempt: a live run of 100,000 tasks journals two rows a sweep, not two a task, and
a simulation of tasks of hours sweeps every few hours. The timer's ``task`` is -1 and its
``attempt`` the negative sweep number, so every sweep is its own journal key and a resumed
run re-arms the one still pending. Each decision is a :class:`~resel.events.TaskOverdue`
record. Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from resel.engine_books import PROVISIONAL, RUNNING, TaskRecord
from resel.events import Action, CancelTask, SetTimer, TaskOverdue
from resel.states import AttemptOutcome


@dataclass(frozen=True)
class OverduePolicy:
    """The overdue rule's numbers (module docstring); ``enabled`` False turns it off."""

    factor: float = 10.0      # × the longest task measured on the site
    floor: float = 600.0      # never overdue before this many seconds
    measured: int = 3         # tasks ended well on a site before it has a limit
    sweeps: int = 4           # sweeps per shortest limit in force (an attempt is found by 1.25×)
    enabled: bool = True


class OverdueRules:
    """The engine's overdue attempts (a mixin of :class:`~resel.engine.Engine`)."""

    def _init_overdue(self, policy: OverduePolicy | None) -> None:
        self.overdue = policy or OverduePolicy()
        #: per site: tasks ended well (up to ``measured``), and the longest of them per unit of
        #: size (seconds) — counted as an attempt ends well (``Engine._end_attempt``); None:
        #: the rule is off
        self._ended_well: list[int] | None = [0] * len(self.sites) if self.overdue.enabled else None
        self._longest = [0.0] * len(self.sites)
        self._overdue_n = self.overdue.measured
        #: tasks cancelled as overdue → the limit they ran past: their next attempts have none
        self._reruns: dict[int, float] = {}
        #: the smallest size of a task (a bag of unequal tasks), so the smallest limit of a site
        self._w_min = min(self._w) if self._w else 1.0
        self._overdue_ready = False     # some site has a limit
        self._sweep = 0                 # sweeps armed so far; the pending one is -_sweep
        self._sweep_armed = False

    def overdue_limit(self, x: int, tid: int) -> float:
        """How long task ``tid`` may run on site x before it is overdue (inf: no limit yet)."""
        policy = self.overdue
        if self._ended_well is None or self._ended_well[x] < policy.measured:
            return math.inf
        w = 1.0 if self._w is None else self._w[tid]
        return max(policy.floor, policy.factor * self._longest[x] * w)

    def longest_running(self, x: int) -> tuple[int, float, float | None] | None:
        """The attempt that has run longest on site x now (the earliest start; the lowest task
        on a tie) — (task, its start, its overdue limit, None if none) — or None: what the live
        table shows as it nears its limit."""
        tasks, pilots = self.tasks, self.pilots
        best = min(((tasks[tid].attempts[-1].start, tid) for pid in self._books[x].active for tid in pilots[pid].tasks),
                   default=None)
        if best is None:
            return None
        start, tid = best
        limit = math.inf if tid in self._reruns else self.overdue_limit(x, tid)
        return tid, start, (None if limit == math.inf else limit)

    def _least_limit(self, x: int) -> float:
        """The limit of site x's smallest task: no attempt there is overdue sooner."""
        policy = self.overdue
        return max(policy.floor, policy.factor * self._longest[x] * self._w_min)

    def _limited(self) -> list[int]:
        """The sites that have a limit."""
        measured = self.overdue.measured
        return [x for x, n in enumerate(self._ended_well) if n >= measured]

    def _sweep_worth_arming(self) -> bool:
        """Whether an attempt runs on a site that has a limit."""
        books, pilots = self._books, self.pilots
        return any(pilots[pid].tasks for x in self._limited() for pid in books[x].active)

    def _arm_sweep(self, t: float, out: list[Action]) -> None:
        """After an event: the next sweep, if an attempt runs where a limit holds and none is
        pending — a quarter of the shortest limit in force on (a limit of hours is swept every
        hour or so, not every few minutes: the sweep's cost is what runs, each time)."""
        self._sweep += 1
        self._sweep_armed = True
        period = min(self._least_limit(x) for x in self._limited()) / self.overdue.sweeps
        out.append(SetTimer(at=t + period, task=-1, attempt=-self._sweep))

    def _on_sweep(self, attempt: int, t: float, out: list[Action]) -> None:
        """The sweep timer fired: cancel the overdue attempts; the next sweep is armed by
        :meth:`~resel.engine.Engine.handle` if anything still runs where a limit holds."""
        if attempt != -self._sweep:
            return                       # a stale sweep (a resumed run's, already replaced)
        self._sweep_armed = False
        tasks, pilots = self.tasks, self.pilots
        for x in self._limited():
            cut = t - self._least_limit(x)
            # every attempt on x that has run as long as x's smallest limit (inline: a sweep
            # reads every running attempt of the site)
            old = [task for pid in self._books[x].active for tid in pilots[pid].tasks
                   if (task := tasks[tid]).attempts[-1].start <= cut]
            for task in old:
                if task.id in self._reruns or not (task.state is RUNNING or task.state is PROVISIONAL):
                    continue             # a rerun (no limit of this rule), or not in a slot
                ran = t - task.attempts[-1].start
                limit = self.overdue_limit(x, task.id)
                if ran >= limit:
                    self._cancel_overdue(task, x, ran, limit, t, out)

    def _cancel_overdue(self, task: TaskRecord, x: int, ran: float, limit: float, t: float,
                        out: list[Action]) -> None:
        name = self.sites[x].name
        out.append(CancelTask(task=task.id, attempt=task.attempt, pilot=task.pilot, site=name))
        out.append(TaskOverdue(time=t, task=task.id, attempt=task.attempt, site=name, ran=ran, limit=limit,
                               gave_up=False))
        self._reruns[task.id] = limit
        self._end_attempt(task, t, AttemptOutcome.CANCELLED)
        self._requeue(task, t, False)

    def _hung(self, task: TaskRecord, x: int, t: float, out: list[Action]) -> bool:
        """Task's attempt on x was just lost (closed): if an attempt of it was cancelled as
        overdue before and this one too ran past that limit, give it up as hung (True)."""
        rec, limit = task.attempts[-1], self._reruns.get(task.id)
        if limit is None or rec.end is None or rec.end - rec.start < limit:
            return False
        out.append(TaskOverdue(time=t, task=task.id, attempt=task.attempt, site=self.sites[x].name,
                               ran=rec.end - rec.start, limit=limit, gave_up=True))
        self._requeue(task, t, True)
        return True
