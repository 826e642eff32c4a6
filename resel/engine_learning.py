"""Rates learned during the run (strategy ``+learn``, ``auto``), and the restarts they allow.

Each site's T̂x starts as the run's prior and is updated from the tasks that finish there
(:class:`~resel.learning.RateBeliefs`: the statistics; here, what the engine does with them):
windows, the order of targets and origins, requeues and walltime packing use the current
estimate; a provisional task moves back only when today's rates still say so, likely enough
(:data:`MOVE_CONFIDENCE`); and a free slot that would finish a running task sooner than it
will end where it runs — counting the time it has run, with the slot's rate at the top of its
credible interval — restarts it there (docs/engine.md, "Rates learned during the run").

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations

import heapq
import math
from statistics import NormalDist

from resel.engine_books import RUNNING, TaskRecord
from resel.errors import IllegalTransition
from resel.events import Action, CancelTask, Decision, DecisionKind, RateLearned, TaskMeasured
from resel.learning import DEFAULT_SPREAD, RateBeliefs
from resel.models.runtime import EngineRates
from resel.selection import slowest_of
from resel.states import AttemptOutcome, next_task_state

#: learning strategies: how likely a move of a started attempt must be to pay before its work is
#: thrown away (docs/engine.md, "Rates learned during the run"); MOVE_Z its normal quantile
MOVE_CONFIDENCE = 0.6
MOVE_Z = NormalDist().inv_cdf(MOVE_CONFIDENCE)

#: a site's measured task counts at which its learned rate is recorded (RateLearned), besides moves of 10 %
_SAY_AT = frozenset({1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000})


class LearningRules:
    """The engine's learning: beliefs of the sites' rates, and the restart rule (a mixin of
    :class:`~resel.engine.Engine`)."""

    def _init_learning(self, given: EngineRates) -> None:
        """Nothing learned yet: the priors' worth and spread per site name; the beliefs are made
        at submission (:meth:`_start_learning`), if the strategy learns."""
        #: the beliefs (resel.learning), the agents' measured times not yet counted, per site a
        #: max-heap of its running attempts by start (the restart rule's candidates)
        self._priors = dict(given.prior or {})
        self._learn = False
        self.beliefs: RateBeliefs | None = None
        self._measured: dict[tuple[int, int], float] = {}
        self._running: list[tuple[list, list]] = []   # per site: (max-heap, min-heap) of (±start, task, attempt)
        #: the sites the queue-aware split gave tasks (a learning run's pool pricing, _pool_slowest)
        self._shared: frozenset[int] = frozenset()

    @property
    def learning(self) -> bool:
        """Whether this run learns the sites' rates (strategy ``+learn`` or ``auto``)."""
        return self._learn or self.strategy.learn

    def learned(self) -> dict[str, dict]:
        """Per site name, what a learning run believes of its rate now (empty otherwise)."""
        if self.beliefs is None:
            return {}
        return {s.name: self.beliefs.as_dict(i) for i, s in enumerate(self.sites)}

    def _start_learning(self) -> None:
        """The run's beliefs of the sites' rates, each prior the rate the run starts with: its
        source and spread as the driver gave them (``EngineRates.prior``), else LIM with the
        spread of the site's runtime interval (T̂x,hi is its 95th percentile) or the default."""
        self._learn = True
        priors = []
        for i, site in enumerate(self.sites):
            prior = self._priors.get(site.name)
            if prior is None:
                hi = self.tx_hi[i] / self.tx[i] if self.tx[i] > 0 else 1.0
                prior = ("lim", math.log(hi) / 1.645 if hi > 1.0 else DEFAULT_SPREAD)
            priors.append(prior)
        self.beliefs = RateBeliefs.of(list(self.tx), priors)
        self._said = list(self.tx)   # each site's T̂x as last recorded (RateLearned)
        self._prior_split = list(self._split_tx)
        self._prior_hi = list(self.tx_hi)
        self._running = [([], []) for _ in self.sites]

    def _pool_spread(self) -> dict[int, float]:
        """Per pool (a site whose tasks each get a pilot, so a slot, of their own), the ln-spread
        its beliefs give one task's rate — the prior's s₀ before any task, what its tasks
        measured after: the queue-aware split prices a pool's one wave of j tasks at the slowest
        of j slots (:func:`resel.selection.slowest_of`). A batch pilot's tasks share its node
        and are priced at T̂x, as before (docs/engine.md, "A pool's wave ends with its slowest
        slot")."""
        return {i: math.sqrt(self.beliefs.sites[i].noise) for i, s in enumerate(self.sites)
                if s.pilot.mode == "per-task"}

    def _pool_slowest(self, x: int) -> float:
        """How much longer than T̂x the bag's wave on pool x would take if the pool took the
        tasks of the others: its slowest of as many slots as the bag has tasks (at most the
        pool's pilots), with the ln-spread its beliefs give one task (:meth:`_pool_spread`).
        The windows from a pool and the move-back rule price the pool so where the split left
        it without a share: any task it takes then starts a wave the split chose not to run.
        1 for a pool the split gave a share — its wave's end is already set by that share, and
        one task more moves it little — and for a site whose pilots are not one task each."""
        site = self.sites[x]
        if site.pilot.mode != "per-task" or self.beliefs is None or x in self._shared:
            return 1.0
        k = min(len(self.tasks), max(1, site.pilot.max_pilots))
        return slowest_of(k, math.sqrt(self.beliefs.sites[x].noise))

    def _on_task_measured(self, ev: TaskMeasured, out: list[Action]) -> None:
        """The agent's own clock for an attempt about to be reported done: kept for the learning
        (the gap between two coordinator events blurs it by a poll)."""
        task = self._task(ev.task)
        if not (isinstance(ev.seconds, (int, float)) and math.isfinite(ev.seconds) and ev.seconds >= 0):
            raise IllegalTransition(f"TaskMeasured for task {ev.task}: {ev.seconds!r} is not seconds >= 0")
        if self._learn and task.attempt == ev.attempt:
            self._measured[(ev.task, ev.attempt)] = float(ev.seconds)

    def _learn_from(self, task: TaskRecord, t: float, out: list[Action]) -> None:
        """The task's attempt ended well on its site: count its execution time there (and say so,
        :class:`~resel.events.RateLearned`, where an estimate moved enough to record)."""
        x = task.site
        seconds = self._measured.pop((task.id, task.attempt), None)
        if seconds is None:   # the engine's own times (the simulator starts a task at its dispatch)
            rec = task.attempts[-1]
            seconds = t - rec.start
            if self.data is not None:   # less its inputs' trip, as priced (they held the slot first)
                ready = self._ready[x]
                seconds -= self._dt[x].own_in + (0.0 if ready is None else max(0.0, ready - rec.start))
        if self._w is not None and self._w[task.id] > 0:   # in the tasks' mean, as the beliefs count
            seconds /= self._w[task.id]
        if self.beliefs.observe(x, seconds):
            for y in range(len(self.sites)):   # a LIM site's evidence moves every LIM site's estimate
                self._update_rate(y)
                last = self._said[y]
                n = self.beliefs.tasks(y)
                if (y == x and n in _SAY_AT) or abs(self.tx[y] / last - 1.0) >= 0.1:
                    self._said[y] = self.tx[y]
                    lo, hi = self.beliefs.interval(y, 0.9)
                    out.append(RateLearned(time=t, site=self.sites[y].name, tx=self.tx[y], low=lo, high=hi,
                                           tasks=n, prior=self.beliefs.sites[y].prior_tx))

    def _update_rate(self, x: int) -> None:
        """Site x's belief moved: its T̂x, the split's and walltime packing's follow by the same
        factor; targets and origins are ranked again, and its pilots' drain instants re-checked."""
        factor = self.beliefs.factor(x)
        if self.tx[x] == self.beliefs.tx(x):
            return
        self.tx[x] = self.beliefs.tx(x)
        self._split_tx[x] = self._prior_split[x] * factor
        self.tx_hi[x] = max(self.tx[x], self._prior_hi[x] * factor)
        self._resort = True
        if self.walltime.guard:
            self._refresh_due(x)

    def _fast_bound(self, x: int, t: float) -> float:
        """T̂x'(x) at the top of the 90 % credible interval of x's rate: what the restart rule
        trusts a free slot of x to take (an unmeasured site's interval is wide: it is not
        trusted on hope)."""
        hi = self.beliefs.interval(x, 0.9)[1]
        return hi + (self._data_s(x, t) if self.data is not None else 0.0)

    def _moves_back(self, x: int, task: TaskRecord, t: float) -> bool:
        """Whether a provisional attempt of ``task`` on r' moves back to its origin x, just
        acquired: the window rule with today's rates, counting the time it has run on r' —
        T̂x'(x) < T̂x'(r') − elapsed (with the rates it was opened with, the same as
        a_r − a_r' < Ŵ) — and likely enough to be right to throw its work away: the ratio of
        the two rates, as uncertain as the beliefs say, favours x with probability at least
        :data:`MOVE_CONFIDENCE` (a move that LIM's figures favour by a few percent is a coin
        flip that costs the work done) — unless it started this very instant (no work to lose:
        the point rule decides, as without learning)."""
        r2 = task.site
        slow = self._pool_slowest(r2)    # a pool: what the bag's wave there takes, its slowest slot
        own = self.tx[r2] * (1.0 if self._w is None else self._w[task.id])
        left = self._task_txd(r2, t, task.id) + own * (slow - 1.0) - (t - task.attempts[-1].start)
        here = self._task_txd(x, t, task.id)
        if not here < left:
            return False
        if t <= task.attempts[-1].start:   # started this very instant: moving it throws no work away
            return True
        spread = math.sqrt(self.beliefs.var_diff(x, r2))
        return spread == 0.0 or math.log(left / here) >= MOVE_Z * spread

    def _mark_running(self, x: int, task: TaskRecord, start: float) -> None:
        """The task runs for good on x since ``start``: a restart candidate (the newest and the
        oldest attempts are where the most is left)."""
        newest, oldest = self._running[x]
        heapq.heappush(newest, (-start, task.id, task.attempt))
        heapq.heappush(oldest, (start, task.id, task.attempt))

    def _candidate(self, r: int, heap: list, sign: float) -> TaskRecord | None:
        """The top of one of r's restart heaps that still runs as recorded (stale entries go)."""
        while heap:
            key, tid, attempt = heap[0]
            task = self.tasks[tid]
            if (task.state is RUNNING and task.site == r and task.attempt == attempt
                    and task.attempts[-1].start == sign * key):
                return task
            heapq.heappop(heap)
        return None

    def _restart_onto(self, x: int, t: float, out: list[Action]) -> None:
        """Free slots of target x that no waiting task took: restart there running attempts of
        x's origins that x finishes sooner, newest first — likely enough to throw their work
        away (:data:`MOVE_CONFIDENCE`): the attempt, given how long it has run, still runs when
        x's slot would have finished it, x's rate at the top of its credible interval
        (:meth:`resel.learning.RateBeliefs.outlasts`). An attempt that has run past its site's
        estimate is left alone: that its siblings run as long says the site is slower than
        believed, not that the attempt has long to go."""
        book = self._books[x]
        fast = self._fast_bound(x, t)
        for r in book.origins:
            if self._books[r].per_task and self._restart_wave(r, x, t, fast, out):
                if not book.free > book.incoming:
                    return
                continue
            newest, oldest = self._running[r]
            extra = self._data_s(r, t) if self.data is not None else 0.0
            tx_r = self.tx[r]
            while book.free > book.incoming:
                task = self._candidate(r, newest, -1.0)
                if task is None or (self._u is not None and not self._fits(x, task.id)) or task.barred == x:
                    break   # (several widths: the newest attempt's cores must fit x's free ones;
                    # a task its failures on x sent away is never brought back: engine_outcomes)
                elapsed = t - task.attempts[-1].start
                w = 1.0 if self._w is None else self._w[task.id]
                if self._w is not None and w <= 0:
                    break
                if self._w is not None:   # in the tasks' mean, as the beliefs count
                    if elapsed >= tx_r * w or self.beliefs.outlasts(r, elapsed / w, fast - extra) < MOVE_CONFIDENCE:
                        break
                    heapq.heappop(newest)
                    self._restart(task, r, x, t, self.beliefs.left(r, elapsed / w) * w + extra, out)
                    continue
                if elapsed >= tx_r or self.beliefs.outlasts(r, elapsed, fast - extra) < MOVE_CONFIDENCE:
                    break
                heapq.heappop(newest)
                self._restart(task, r, x, t, self.beliefs.left(r, elapsed) + extra, out)
            if not book.free > book.incoming:
                return

    def _restart_wave(self, r: int, x: int, t: float, fast: float, out: list[Action]) -> bool:
        """Pool r's whole running wave onto target x's free slots, if they hold all of it and the
        wave likely outlasts them: the bag's tasks there end with the slowest of them, and which
        slot is slow nobody can tell before it ends, so moving some of them gains little and
        moving all of them gains the wave's tail (the per-task rule weighs each alone and never
        sees it). Likely enough (:data:`MOVE_CONFIDENCE`): at least one of the wave, given how
        long each has run, still runs when x's slot would have finished it, x's rate at the top
        of its interval — with r's rate given also that none of its running tasks has ended yet
        (:meth:`resel.learning.RateBeliefs.survivors`): a wave still running past what r was
        believed to take says r is slower, before any of it ends. True if it moved the wave."""
        room = self._books[x].free - self._books[x].incoming
        if self._u is not None or room <= 0:
            return False   # (several widths: which of x's pilots holds which is packing's call)
        wave: list[TaskRecord] = []
        for pid in self._books[r].active:
            for tid in self.pilots[pid].tasks:
                task = self.tasks[tid]
                if task.state is not RUNNING or task.site != r:
                    continue
                if task.barred == x or len(wave) >= room:
                    return False   # one it may not move, or more than x holds: the tail stays
                wave.append(task)
        if not wave:
            return False
        extra = self._data_s(r, t) if self.data is not None else 0.0
        w = self._w
        if w is not None and any(w[task.id] <= 0 for task in wave):
            return False
        units = [(t - task.attempts[-1].start) / (1.0 if w is None else w[task.id]) for task in wave]
        seen = self.beliefs.survivors(r, units)
        if seen.any_outlasts(fast - extra) < MOVE_CONFIDENCE:
            return False
        for task, u in sorted(zip(wave, units), key=lambda p: p[0].id):
            scale = 1.0 if w is None else w[task.id]
            self._restart(task, r, x, t, seen.left(u) * scale + extra, out)
        return True

    def _restart(self, task: TaskRecord, r: int, x: int, t: float, left: float, out: list[Action]) -> None:
        """Cancel the task's attempt on r and run it on x's free slot for good (decision
        ``restart``: ``window`` is the time it had run on r, ``tx_r`` what was expected left)."""
        opened = task.attempts[-1].start
        out.append(CancelTask(task=task.id, attempt=task.attempt, pilot=task.pilot, site=self.sites[r].name))
        self._end_attempt(task, t, AttemptOutcome.CANCELLED)
        task.state = next_task_state(task.state, "restart")
        self._dispatch(task, x, t, RUNNING, out)
        task.origin = x
        self._dirty.add(r)
        if self.decisions:
            out.append(Decision(time=t, kind=DecisionKind.RESTART, task=task.id, origin=self.sites[r].name,
                                target=self.sites[x].name, a_r=self._books[r].acquired_at, a_r2=opened,
                                tx_r=left, tx_r2=self._task_txd(x, t, task.id), window=t - opened))
