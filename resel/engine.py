"""The re-selection engine: a pure state machine from events to actions.

It never sleeps, reads a clock or does I/O (h11's rule): a driver feeds it stamped events
(:mod:`resel.events`) and carries out the actions it returns. The same engine runs inside the
offline simulator and, live, inside the coordinator — which is what makes a dry run honest.

What it decides (seeds/003 §3.3–3.4):

* **initial selection** — each task's origin site r(s), by a :class:`~resel.selection.Strategy`;
* **pilots** — one pilot per supercomputer sized for its tasks, or single-core pilots on a
  pool (site ``pilot.mode``), cancelled when no task needs them any more;
* **late binding** — a task runs only when a pilot's cores are free (acquired);
* **re-selection** — when an acquired site r' has a free slot and a task still waits for its
  origin r, with Ŵ(r', r) = T̂x(r') − T̂x(r): Ŵ ≤ 0 moves it for good; Ŵ > 0 runs it on r'
  provisionally, and if r is acquired before the window closes (a_r − a_r' < Ŵ) the task is
  cancelled on r' and restarted on r; otherwise it is committed to r' when the window closes.
  With several acquired sites free, the task goes to the one with the lowest TTC
  (all start now, so the lowest T̂x); afterwards it moves only between r and that r'.

**Data** (``data``, :mod:`resel.transfer`): a bag whose tasks move files has every comparison
of sites made with T̂x' = T̂x + D, D a task's data time on the site — inputs to it, outputs home,
the shared inputs while the site is cold (docs/engine.md, "Selection sees the data").

Choices the thesis leaves open, made here and documented in docs/engine.md: a slot freed on r
goes first to r's own waiting tasks, then to move-backs; a free target slot pulls a task from
the slowest origin first (smallest Ŵ, so W ≤ 0 moves come first); tasks of an origin leave in
submission order.

**Hand-ahead** (``prefetch`` > 0, the live coordinator): each pilot of r is handed r's next
waiting tasks before a slot frees (state QUEUED), so the agent starts one the instant a slot
frees; a queued task still counts as waiting for every decision, and taking it back is a
request the agent's claim may refuse (resel/engine_hand_ahead.py). Only the start is early;
the choice is the engine's (``_hand_ahead``, below). A busy acquired target that has no waiting
task of its own is handed other sites' waiting tasks the same way when the window rule moves
them for good (Ŵ ≤ 0: it finishes them no later; ``_hand_ahead_reselected``); a task it would
only run provisionally (Ŵ > 0) still waits for a free slot, where its window opens.

**Learning** (strategy ``+learn``, ``auto``: :mod:`resel.learning`): each site's T̂x is
updated from the tasks that finish there, the run's rates as the prior; windows, the order of
targets and origins, requeues and walltime packing use the current estimate, and a free slot
that would finish a running task sooner than it will end where it runs restarts it there
(resel/engine_learning.py).

**Where the rules live.** This file is the §3.4 core, to be read beside the thesis: the
initial selection, pilots acquired (a_r), late binding, re-selection with its window, the
move-back and the commit, and the pass after every event that applies them (``_settle``).
The rest of the engine's rules are mixins over the same books, one concern each:
resel/engine_pricing.py (T̂x, D and Ŵ: what sites are compared by), engine_learning.py
(rates learned, restarts), engine_health.py (black holes, lost sites), engine_walltime.py,
engine_pilots.py (pilot sizing, submission, withdrawal, ends), engine_hand_ahead.py,
engine_outcomes.py (failures, losses, retries, delivery), engine_overdue.py (attempts
that hang), engine_peers.py (the peer strategies); the records are in engine_books.py.
"""

from __future__ import annotations

import math
import random
from collections import deque
from itertools import chain
from typing import Callable, Mapping

from resel.blackhole import QuarantinePolicy
from resel.domain import Bag, Site
from resel.engine_books import (  # noqa: F401 - the records, exported here as before
    PROVISIONAL, QUEUED, RECALLED, RUNNING, Attempt, PilotRecord, SiteBook, TaskRecord,
)
from resel.engine_hand_ahead import HandAheadRules
from resel.engine_health import HealthRules
from resel.engine_learning import MOVE_CONFIDENCE, MOVE_Z, LearningRules  # noqa: F401 - exported as before
from resel.engine_outcomes import OutcomeRules
from resel.engine_packing import PackingRules
from resel.engine_peers import PeerRules
from resel.engine_pilots import WALLTIME_REASONS, PilotRules  # noqa: F401 - exported as before
from resel.engine_pricing import PricingRules
from resel.engine_overdue import OverduePolicy, OverdueRules
from resel.engine_walltime import WalltimeRules
from resel.errors import IllegalTransition, ReselError
from resel.events import (
    Action, BagCancelled, BagDone, BagSubmitted, BandwidthMeasured, OutputsMeasured, CancelPilot, CancelTask, Decision,
    DecisionKind, DispatchTask, Event, PilotEnded, PilotRequeued, PilotStarted, SetTimer, SiteLost, StrategyChosen,
    TaskDelivered, TaskFailed, TaskFetching, TaskFinished, TaskLost, TaskMeasured, TaskStarted, TaskUndelivered,
    TaskWithdrawn, TimerFired,
)
from resel.models.lim import SiteRate
from resel.models.runtime import EngineRates
from resel.selection import Strategy, initial_assignment, queue_split, resolve_auto, viable_sites
from resel.states import AttemptOutcome, PilotState, TaskState, next_pilot_state, next_task_state
from resel.transfer import TransferModel
from resel.walltime import WalltimePolicy


class Engine(PricingRules, LearningRules, HealthRules, WalltimeRules, PilotRules, HandAheadRules, OutcomeRules,
             PackingRules, OverdueRules,
             PeerRules):
    """Selection, late binding and re-selection for one bag over a list of sites.

    Its other rules are mixins over the same books (the module's "Where the rules live"). What
    a driver or a report reads: :meth:`handle`, ``largest_first``, ``remaining``,
    ``reselection_targets`` and :meth:`acquired_at` here; :meth:`probe_shapes` and
    :meth:`probe_menu` (resel/engine_pilots.py), ``learning`` and :meth:`learned`
    (engine_learning.py), ``quarantined`` (engine_health.py), ``data_model``
    (engine_pricing.py); and the books themselves, ``tasks`` and ``pilots``, read only.

    Args:
        bag: the tasks (all share one profile, so T̂x depends on the site only).
        sites: candidate sites, in the order used for tie-breaking.
        strategy: a :class:`Strategy` or its spec (``random``, ``model``, ``reselect``, …).
        seed: seeds the random initial selection; the engine is deterministic given it.
        clock: ``"base"`` (thesis) or ``"avg"`` — which site clock LIM predicts with when no
            ``rates`` are given.
        rates: T̂x rates per site name (:class:`~resel.models.lim.SiteRate`), or
            :class:`~resel.models.runtime.EngineRates` (rates plus risk windows and the split's
            rates). The driver builds them (LIM or a calibrated fit, :mod:`resel.models.runtime`)
            so the simulator and the live coordinator decide with the same numbers; sites
            missing from them fall back to LIM with ``clock``.
        max_attempts: failures (non-zero exit) after which a task is given up as failed.
        max_losses: pilot losses (walltime, node failure) after which a task is given up.
        prefetch: per slot of a pilot, how many of its site's waiting tasks it is handed ahead of
            a free slot (0: none, the simulator; the live coordinator: ``resel run --prefetch``).
        prefetch_cycle: seconds a freed slot waits for work the driver sends (the coordinator's
            poll plus the agent's look at its inbox). Given, ``prefetch`` is a cap and each site's
            depth follows its measured T_x: ⌈cycle / T_x⌉ per slot — enough to keep a slot busy
            for one cycle — between 1 (while nothing is measured there) and ``prefetch``
            (resel/engine_hand_ahead.py). None: ``prefetch`` per slot, fixed.
        quarantine: the black-hole rule's numbers (:mod:`resel.blackhole`); default on.
        overdue: the overdue rule's numbers (:mod:`resel.engine_overdue`: an attempt that runs
            far longer than any its site ran is cancelled and run once more); default on.
        walltime: walltime packing (:mod:`resel.walltime`): a :class:`WalltimePolicy` or its
            mode: ``limit`` (default: the dispatch guard, pilots ask for the limit), ``pack``
            (pilots also ask only for what their tasks need) or ``off``.
        decisions: return a :class:`Decision` action for every choice (default). A driver that
            records nothing (the simulator with ``record=False``) turns them off: they have no
            effect but to be recorded, and at a million tasks they are two million records
            built to be dropped. Every other action, and every state, is the same either way.
        data: the bag's data sizes and the sites' bandwidths (:class:`~resel.transfer.TransferModel`):
            wherever sites are compared the engine then ranks them by T̂x' = T̂x + D, D a task's
            data time on the site (docs/engine.md, "Selection sees the data"), and
            :class:`~resel.events.BandwidthMeasured` updates a site's figure. None (or a model
            that moves no byte): D = 0 everywhere, every decision exactly as without data.
        pack: a bag of tasks of several widths packs them into a pilot's cores (default;
            resel/engine_packing.py). False: every slot as wide as the widest task, as before
            packing existed (live runs stored then replay so). A bag of one width: no effect.
        split_cores: with ``pack``, the queue-aware split counts each task's cores and run time
            (default; resel/selection.py ``_packed_split``). False: each unit of a pilot's menu
            counted as a task of the mean, as before (live runs stored then replay so).
    """

    def __init__(self, bag: Bag, sites: list[Site], strategy: Strategy | str = "model", *,
                 seed: int = 0, clock: str = "base", max_attempts: int = 3, max_losses: int = 5,
                 prefetch: int = 0, prefetch_cycle: float | None = None,
                 rates: Mapping[str, SiteRate] | EngineRates | None = None,
                 quarantine: QuarantinePolicy | None = None, walltime: WalltimePolicy | str = "limit",
                 decisions: bool = True, data: TransferModel | None = None, pack: bool = True,
                 split_cores: bool = True, overdue: OverduePolicy | None = None):
        self.bag = bag
        self.decisions = decisions
        self.prefetch = max(0, int(prefetch))
        self.sites = list(sites)
        self.strategy = Strategy.parse(strategy) if isinstance(strategy, str) else strategy
        self.max_attempts, self.max_losses = max_attempts, max_losses
        given = rates if isinstance(rates, EngineRates) else EngineRates(rates or {})
        self._init_pricing(bag, given, clock, data)
        #: each site's waiting tasks largest first: ``order = "largest"``, or ``auto`` (the
        #: default) where no site is a per-task pool — where it measurably helped (docs/peers.md)
        self._largest_first = self._w is not None and (bag.order == "largest" or (
            bag.order == "auto" and not any(s.pilot.mode == "per-task" for s in self.sites)))
        self._init_learning(given)
        #: what ``auto`` ran as and why (None for another strategy), set at submission
        self.auto_choice: tuple[str, str] | None = None
        self._init_hand_ahead(prefetch_cycle)
        self._init_walltime(walltime)
        self._init_health(quarantine)
        self._init_overdue(overdue)
        self._viable: list[int] = []
        self._rng = random.Random(seed)
        self.tasks: list[TaskRecord] = []
        self.pilots: dict[int, PilotRecord] = {}
        self._init_packing(bag, pack)   # (after prefetch: a bag of several widths hands nothing ahead)
        self._split_cores = split_cores
        self._books = [SiteBook(self._cap_units(s), s.pilot.mode == "per-task", s.pilot.max_pilots)
                       for s in self.sites]
        if self._u is not None:   # several widths: queues that keep their units' sum
            for book in self._books:
                book.waiting = self._new_waiting()
        self._next_pilot = 0
        self._dirty: set[int] = set()
        self._waiting_changed = False
        self._waiting_total = 0       # tasks WAITING or QUEUED anywhere (waiting deques + queued)
        self._free_total = 0          # free slots over every site (the sum of the books' free)
        self._remaining = 0
        self.started = False
        self.finished = False
        self.cancelled = False
        self.done_count = 0
        self.failed_count = 0
        self._targets: list[int] = []
        self._handlers = self._event_handlers()

    def _event_handlers(self) -> dict[type, Callable[[Event, list[Action]], None]]:
        """Which method takes which event (the mixins' handlers included)."""
        return {
            BagSubmitted: self._on_submitted, PilotStarted: self._on_pilot_started,
            PilotEnded: self._on_pilot_ended, TaskStarted: self._on_task_started,
            TaskFinished: self._on_task_finished, TaskFailed: self._on_task_failed,
            TimerFired: self._on_timer, SiteLost: self._on_site_lost,
            PilotRequeued: self._on_pilot_requeued, TaskLost: self._on_task_lost,
            BagCancelled: self._on_bag_cancelled, TaskFetching: self._on_task_fetching,
            TaskDelivered: self._on_task_delivered, TaskUndelivered: self._on_task_undelivered,
            BandwidthMeasured: self._on_bandwidth, OutputsMeasured: self._on_outputs_measured,
            TaskMeasured: self._on_task_measured, TaskWithdrawn: self._on_task_withdrawn,
        }

    # ------------------------------------------------------------------ public
    def handle(self, event: Event) -> list[Action]:
        """Apply one event; return the actions the driver must carry out, in order.

        Raises:
            IllegalTransition: the event names an unknown pilot or task, or arrives before
                :class:`BagSubmitted`. The engine's state is then unchanged.
        """
        handler = self._handlers.get(type(event))
        if handler is None:
            raise IllegalTransition(f"unknown event type {type(event).__name__}")
        if not self.started and not isinstance(event, BagSubmitted):
            raise IllegalTransition(f"{type(event).__name__} before BagSubmitted")
        if self.cancelled:
            return []   # a report arriving after the user cancelled the run changes nothing
        out: list[Action] = []
        handler(event, out)
        if not self.finished:
            self._settle(event.time, out)
            if self._overdue_ready and not self._sweep_armed and not self.finished and self._sweep_worth_arming():
                self._arm_sweep(event.time, out)
        return out

    @property
    def largest_first(self) -> bool:
        """Whether each site's waiting tasks are ordered largest first (a task table's ``order``,
        ``auto`` resolved against the sites)."""
        return self._largest_first

    @property
    def remaining(self) -> int:
        """Tasks neither done nor failed."""
        return self._remaining

    @property
    def reselection_targets(self) -> list[str]:
        """Sites that take re-selected tasks, preferred first (empty without re-selection)."""
        return [self.sites[x].name for x in self._targets]

    def acquired_at(self, site: str) -> float | None:
        """a_r: when the site's first pilot started, or None while unacquired."""
        return self._books[self._index(site)].acquired_at

    # ------------------------------------------------------------------ events
    def _on_submitted(self, ev: BagSubmitted, out: list[Action]) -> None:
        if self.started:
            raise IllegalTransition("BagSubmitted twice")
        viable = self._fitting(viable_sites(self.bag, self.sites))   # (walltime: one task must fit)
        self._viable = list(viable)
        if self.strategy.auto:   # resel's default: queue-aware where a start is estimated, else by T̂x
            self.strategy, why = resolve_auto(self.strategy, self.sites, viable, ev.wait_menu, ev.wait_estimates)
            self.auto_choice = (self.strategy.name, why)
            out.append(StrategyChosen(time=ev.time, strategy=self.strategy.name, reason=why))
        if self.strategy.learn:
            self._start_learning()
        waits = None
        if ev.wait_estimates is not None:
            waits = [ev.wait_estimates.get(s.name) for s in self.sites]
        menu = self.probe_menu()
        if self.strategy.base == "queue" and ev.wait_menu is not None:
            options = [[(k, w) for k, w in zip(self._menu_slots(menu[i], len(ev.wait_menu.get(s.name) or [])),
                                                ev.wait_menu.get(s.name) or [])]
                       for i, s in enumerate(self.sites)]
            split_tx = self._split_tx
            if self.data is not None:   # waves of T̂x + own inputs, after the shared inputs; + outputs home
                split_tx = [tx + d.own_in for tx, d in zip(split_tx, self._dt)]
                options = [[(k, None if w is None else max(0.0, w) + d.shared_in + d.out) for k, w in opts]
                           for opts, d in zip(options, self._dt)]
            # (several widths: the menu's slots are units of cores; each task counts its own)
            units = None if self._u is None or not self._split_cores else [
                None if b.per_task else self._u for b in self._books]
            origins, candidates, caps = queue_split(self.strategy, self.bag, viable, split_tx, options, units,
                                                    None if units is None else self._w,
                                                    spread=self._pool_spread() if self.learning else None)
            for x, cap in caps.items():          # the pilot size the split chose for x
                self._books[x].cap_slots = min(self._books[x].cap_slots, cap)
        else:   # tasks each site runs at once: its full pilot's slots, or a pool's one-slot pilots
            slots = [menu[i][0][0] if menu[i] else 0 for i in range(len(self.sites))]
            need = None if self._u is None or not self._split_cores else [
                self._units_of(i, range(self.bag.count)) for i in range(len(self.sites))]
            origins, candidates = initial_assignment(self.strategy, self.bag, viable, self.rates, self._rng,
                                                     waits, slots, self._dt if self.data is not None else None, need)
        if self.learning:   # the pools the split gave a share (their windows price a typical slot)
            self._shared = frozenset(origins)
        self.started = True
        names = [s.name for s in self.sites]
        order = range(len(origins))
        if self._largest_first:   # most instructions first, ties by index
            order = sorted(order, key=lambda tid: -self._w[tid])
        self.tasks.extend(TaskRecord(tid, origin) for tid, origin in enumerate(origins))
        for tid in order:
            origin = origins[tid]
            self._books[origin].waiting.append(tid)
            if self.decisions:
                out.append(Decision(time=ev.time, kind=DecisionKind.ASSIGN, task=tid, origin=names[origin],
                                    target=names[origin], tx_r=self._task_txd(origin, ev.time, tid)))
        self._remaining = self._waiting_total = len(origins)
        if self.strategy.reselect:
            self._plan_reselection(candidates, ev.time)
        elif self.strategy.peer:
            self._peer_setup(candidates, ev.time, out)
        self._dirty.update(range(len(self.sites)))
        if not origins:
            self._finish(ev.time, out)

    def _plan_reselection(self, candidates: list[int], t: float) -> None:
        """Which sites take re-selected tasks, and from which origins, in preference order.

        The queue-aware strategy holds pilots on its chosen sites on purpose: each of them is a
        target whatever its ``reselect_target``, and the ones that are not the origin ask for
        pilots for the waiting tasks of the others (as a pool does), so whichever of them
        starts first takes the work.
        """
        held = self.strategy.base == "queue"
        targets = list(candidates) if held else [x for x in candidates if self.sites[x].reselect_target]
        # fastest target first: with several acquired sites free, a task goes to the lowest TTC
        self._targets = sorted(targets, key=lambda x: (self._txd(x, t), x))
        for x in self._targets:
            book = self._books[x]
            # slowest origin first: the smallest window, so Ŵ <= 0 (move for good) comes first
            book.origins = sorted((r for r in candidates if r != x), key=lambda r: (self._window(x, r, t), r))
            book.spec = self.sites[x].pilot.mode == "per-task" or (held and not book.waiting)

    def _rerank(self, t: float) -> None:
        """A data figure changed (a site's shared inputs left, a bandwidth measured): the targets
        and each target's origins in the order :meth:`_plan_reselection` gives, with today's T̂x'."""
        self._targets.sort(key=lambda x: (self._txd(x, t), x))
        for x in self._targets:
            self._books[x].origins.sort(key=lambda r: (self._window(x, r, t), r))

    def _on_pilot_started(self, ev: PilotStarted, out: list[Action]) -> None:
        pilot = self._pilot(ev.pilot)
        if pilot.state is PilotState.CANCELLED:
            out.append(CancelPilot(pilot=pilot.id, site=self.sites[pilot.site].name))  # lost the race
            return
        if pilot.state is not PilotState.PENDING:
            return  # a repeated report: ignore, never move backwards
        pilot.state = next_pilot_state(pilot.state, "start")
        pilot.started = ev.time
        book = self._books[pilot.site]
        del book.pending[pilot.id]
        book.pending_slots -= pilot.slots
        book.active[pilot.id] = None
        # tasks handed ahead while it was pending take its first slots: the agent starts them
        busy = min(len(pilot.tasks), pilot.slots)
        pilot.reserved = min(len(pilot.queued), pilot.slots - busy)
        pilot.free = pilot.slots - busy - pilot.reserved
        book.reserved += pilot.reserved
        if pilot.free:
            book.free_pilots[pilot.id] = None
        book.free += pilot.free
        self._free_total += pilot.free
        if book.acquired_at is None:
            book.acquired_at = ev.time
        if self.walltime.guard and math.isfinite(pilot.walltime):
            self._track_deadline(pilot, ev.time)
        self._dirty.add(pilot.site)
        if self.strategy.peer:
            self._peer_started(pilot.site, ev.time, out)

    def _on_task_started(self, ev: TaskStarted, out: list[Action]) -> None:
        task = self._task(ev.task)
        if task.attempt != ev.attempt:
            return
        if task.state is QUEUED or task.state is RECALLED:
            self._start_queued(task, ev.time)
        elif task.state in (RUNNING, PROVISIONAL):
            task.attempts[-1].start = ev.time
            if self._learn and task.state is RUNNING:   # its start moved: so does its restart candidacy
                self._mark_running(task.site, task, ev.time)

    def _on_task_finished(self, ev: TaskFinished, out: list[Action]) -> None:
        tid = ev.task   # self._task, inline: the hottest event
        if not 0 <= tid < len(self.tasks):
            raise IllegalTransition(f"unknown task {tid}")
        task = self.tasks[tid]
        if task.attempt == ev.attempt and (task.state is QUEUED or task.state is RECALLED):
            self._start_queued(task, ev.time)   # its result came with (or before) its start
        if task.attempt != ev.attempt or task.state not in (RUNNING, PROVISIONAL):
            return  # a cancelled attempt finishing late: not ours any more
        self.health[task.site].n += 1            # a good outcome (inline: the hottest event)
        self.pilots[task.pilot].done += 1
        if self._learn:
            self._learn_from(task, ev.time, out)
        self._end_attempt(task, ev.time, AttemptOutcome.DONE)
        if task.state is PROVISIONAL:
            del self._books[task.origin].prov[task.id]
            self._dirty.add(task.origin)
        task.state = next_task_state(task.state, "finish")
        self._remaining -= 1   # self._settled_one(done=True), inline
        self.done_count += 1

    def _on_timer(self, ev: TimerFired, out: list[Action]) -> None:
        if ev.site is not None:
            self._release(self._index(ev.site), ev.attempt, ev.time, out)
            return
        if ev.task == -1 and ev.attempt < 0:       # the overdue sweep (engine_overdue)
            self._on_sweep(ev.attempt, ev.time, out)
            return
        if ev.task == -1 and self.strategy.peer:   # the engine's own timer: a peer strategy's round
            self._peer_timer(ev, out)
            return
        task = self._task(ev.task)
        if task.attempt != ev.attempt or task.state is not PROVISIONAL:
            return
        self._commit(task, ev.time, out)

    # ------------------------------------------------------------------ helpers
    def _pilot(self, pid: int) -> PilotRecord:
        try:
            return self.pilots[pid]
        except KeyError:
            raise IllegalTransition(f"unknown pilot {pid}") from None

    def _task(self, tid: int) -> TaskRecord:
        if not 0 <= tid < len(self.tasks):
            raise IllegalTransition(f"unknown task {tid}")
        return self.tasks[tid]

    def _index(self, site: str) -> int:
        for i, s in enumerate(self.sites):
            if s.name == site:
                return i
        raise ReselError(f"unknown site {site!r}; the engine has {', '.join(s.name for s in self.sites)}")

    # ------------------------------------------------------------------ late binding: a slot taken, a slot freed
    def _end_attempt(self, task: TaskRecord, time: float, outcome: AttemptOutcome) -> None:
        """Close the running attempt and give its slot back."""
        rec = task.attempts[-1]
        rec.end, rec.outcome = time, outcome
        if outcome is AttemptOutcome.DONE:
            if self._cycle is not None:
                self._ran(task.site, time - rec.start)
            ended = self._ended_well
            if ended is not None:   # its site's longest (engine_overdue; inline: the hottest path)
                x, ran = task.site, time - rec.start
                if self._w is not None:
                    w = self._w[task.id]
                    ran = ran / w if w > 0 else 0.0
                longest = self._longest
                if ran > longest[x]:
                    longest[x] = ran
                if ended[x] < self._overdue_n:   # (counted up to the number that gives a limit)
                    ended[x] += 1
                    self._overdue_ready = self._overdue_ready or ended[x] == self._overdue_n
        pilot = self.pilots[task.pilot]
        del pilot.tasks[task.id]
        if pilot.state is PilotState.ACTIVE:
            if self._u is None:
                self._free_slot(pilot)
            else:
                self._free_units(pilot, self.task_slots(pilot.site, task.id))
        task.pilot = task.site = -1

    def _free_slot(self, pilot: PilotRecord) -> None:
        """A slot of an active pilot freed: the agent fills it with a queued task if it has one."""
        book = self._books[pilot.site]
        if pilot.debt:
            pilot.debt -= 1               # a queued task already started in it
        elif len(pilot.queued) > pilot.reserved:
            pilot.reserved += 1
            book.reserved += 1
        elif pilot.draining:              # takes no new task; released once idle
            if not pilot.tasks and not pilot.queued:
                self._drained[pilot.id] = None
        else:
            pilot.free += 1
            book.free += 1
            self._free_total += 1
            book.free_pilots[pilot.id] = None
        self._dirty.add(pilot.site)

    def _free_units(self, pilot: PilotRecord, units: int) -> None:
        """A task of ``units`` ended on an active pilot of a bag of several widths (no
        hand-ahead there: nothing is reserved or owed)."""
        book = self._books[pilot.site]
        if pilot.draining:
            if not pilot.tasks and not pilot.queued:
                self._drained[pilot.id] = None
        else:
            pilot.free += units
            book.free += units
            self._free_total += units
            book.free_pilots[pilot.id] = None
        self._dirty.add(pilot.site)

    def _dispatch(self, task: TaskRecord, x: int, t: float, state: TaskState, out: list[Action]) -> PilotRecord:
        book = self._books[x]
        if self._u is None:
            pid, units = next(iter(book.free_pilots)), 1
        else:   # a pool of cores: the first pilot where the task's fit (the caller checked one does)
            units = self.task_slots(x, task.id)
            pid = self._pilot_for(x, units)
        pilot = self.pilots[pid]
        pilot.free -= units
        book.free -= units
        self._free_total -= units
        if pilot.free == 0:
            del book.free_pilots[pid]
        pilot.tasks[task.id] = None
        task.attempt += 1
        task.state = next_task_state(task.state, "dispatch" if state is RUNNING else "dispatch-provisional")
        task.site, task.pilot = x, pid
        task.attempts.append(Attempt(x, pid, t))
        if self.data is not None:
            self._bound(x, t)
        if self._learn and state is RUNNING:
            self._mark_running(x, task, t)
        out.append(DispatchTask(task=task.id, attempt=task.attempt, pilot=pid, site=self.sites[x].name))
        return pilot

    def _commit(self, task: TaskRecord, t: float, out: list[Action]) -> None:
        """The window closed with the task still on r': it belongs to r' now."""
        r, x = task.origin, task.site
        del self._books[r].prov[task.id]
        task.state = next_task_state(task.state, "commit")
        task.origin = x
        self._dirty.add(r)
        if self._learn:
            self._mark_running(x, task, task.attempts[-1].start)
        if self.decisions:
            # the figures the window was opened with (with data they may have changed since)
            tx_r, tx_r2, window = self._priced(task, r, x, t)
            out.append(Decision(time=t, kind=DecisionKind.WINDOW_COMMIT, task=task.id, origin=self.sites[r].name,
                                target=self.sites[x].name, a_r=self._books[r].acquired_at,
                                a_r2=task.opened, tx_r=tx_r, tx_r2=tx_r2, window=window))

    # ------------------------------------------------------------------ the decisions
    def _settle(self, t: float, out: list[Action]) -> None:
        """After every event: quarantine black holes, drain pilots too short for a task, fill
        free slots, re-select, then size the pilot requests."""
        if self._suspects:
            for x in sorted(self._suspects):
                self._judge(x, t, out)
            self._suspects.clear()
        if self._resort:
            self._resort = False
            if self.strategy.reselect:
                self._rerank(t)
        if self._next_due < t or self._drained:
            self._expire(t, out)
        books = self._books
        if self._free_total:   # most events leave no slot free, or one (the one just freed)
            for x, book in enumerate(books):
                if book.free and (book.waiting or book.prov):
                    self._fill_home(x, t, out)
                    if not self._free_total:
                        break   # no slot free anywhere: no later site can take a task
        if self._free_total:
            health = self.health
            for x in self._targets:
                if books[x].free and health[x].until is None:   # not quarantined
                    self._fill_reselect(x, t, out)
        if self._remaining == 0:
            self._finish(t, out)
            return
        dirty = self._dirty
        if self._waiting_changed:
            # a pool that asks for pilots for every waiting task must be sized again — unless
            # it is short of slots and at its pilot cap, when sizing it would do nothing (sizing
            # other sites first changes none of its counts). That is a pool's usual state, and
            # this check runs for every pool at nearly every event.
            total = self._waiting_total
            for x in self._targets:
                book = books[x]
                if book.spec and not (book.per_task and total - book.reserved + len(book.prov)
                                      > book.free + book.pending_slots and (
                                          book.cap_slots <= 0 or len(book.pending) + len(book.active)
                                          - book.draining >= book.max_pilots)):
                    dirty.add(x)
            self._waiting_changed = False
        if dirty:
            for x in sorted(dirty):   # a copy: sizing may mark sites again (cleared below)
                self._size_pilots(x, t, out)
            dirty.clear()
            # a pending pilot withdrawn as surplus gave its handed-ahead tasks back: one may now
            # wait beside a free slot of its site, which no later event might come to fill
            for x, book in enumerate(books):
                if book.free and book.waiting:
                    self._fill_home(x, t, out)
        if self.prefetch:   # after sizing: a pilot just asked for gets its first wave at once
            for x, book in enumerate(self._books):
                if book.free > book.incoming and not book.waiting and book.pending:
                    self._recall_from_pending(x, t, out)
                if book.waiting and (book.active or book.pending):
                    self._hand_ahead(x, t, out)
            # then a drained target's depth takes re-selected tasks (after the origins' own pilots
            # took theirs); an origin it took from is sized at the next event (left in _dirty)
            health = self.health
            for x in self._targets:
                book = books[x]
                if not book.waiting and book.active and health[x].until is None:
                    self._hand_ahead_reselected(x, t, out)

    def _fill_home(self, x: int, t: float, out: list[Action]) -> None:
        if self._u is not None:   # several widths: each task where its cores fit (engine_packing)
            self._fill_home_packed(x, t, out)
            return
        book = self._books[x]
        while book.free and book.waiting:
            self._dispatch(self.tasks[book.waiting.popleft()], x, t, RUNNING, out)
            self._waiting_total -= 1
            self._waiting_changed = True
        while book.free and book.prov:   # each pass removes the task from book.prov
            tid = next(iter(book.prov))
            self._move_back(x, self.tasks[tid], t, out)

    def _move_back(self, x: int, task: TaskRecord, t: float, out: list[Action]) -> None:
        """Site x (the task's origin r) has a free slot while the task runs provisionally on
        r': commit it there if its window closed, else restart it on r."""
        book = self._books[x]
        tid = task.id
        if t >= task.deadline or (self._learn and not self._moves_back(x, task, t)):
            self._commit(task, t, out)   # the window closed at this very instant: keep r' (learning:
            return                       # the rule with today's rates says r' still finishes sooner)
        # r acquired while s still runs on r' inside the window: restart s on r
        old_pilot = self.pilots[task.pilot]
        out.append(CancelTask(task=tid, attempt=task.attempt, pilot=old_pilot.id,
                              site=self.sites[task.site].name))
        a_r2 = task.opened
        r2 = task.site
        self._end_attempt(task, t, AttemptOutcome.CANCELLED)
        del book.prov[tid]
        task.state = next_task_state(task.state, "move-back")   # PROVISIONAL -> WAITING
        self._dispatch(task, x, t, RUNNING, out)                # … -> RUNNING on r
        if self.decisions:
            tx_r, tx_r2, window = self._priced(task, x, r2, t)
            out.append(Decision(time=t, kind=DecisionKind.MOVE_BACK, task=tid, origin=self.sites[x].name,
                                target=self.sites[x].name, a_r=book.acquired_at, a_r2=a_r2,
                                tx_r=tx_r, tx_r2=tx_r2, window=window))

    def _hand_ahead(self, x: int, t: float, out: list[Action]) -> None:
        """Queue r's next waiting tasks on its busy or pending pilots, ``prefetch`` per slot:
        the tasks their next free slots would take anyway (r's own waiting ones come first)."""
        book = self._books[x]
        # a pool's pending pilot gets none: only its agent could give one back (agent_reads_a_copy)
        pending = [] if self.sites[x].agent_reads_a_copy else list(book.pending)
        for pid in chain(list(book.active), pending):
            pilot = self.pilots[pid]
            if pilot.state is PilotState.ACTIVE and (pilot.free or pilot.draining):
                continue   # a free slot takes a task at once (_fill_home), it needs no queue
            room = self._depth(x) * pilot.slots - len(pilot.queued)
            while room > 0 and book.waiting and self._can_queue(pilot, t):
                self._queue(self.tasks[book.waiting.popleft()], pilot, t, out)
                room -= 1
            if not book.waiting:
                return

    def _hand_ahead_reselected(self, x: int, t: float, out: list[Action]) -> None:
        """Queue other sites' waiting tasks on x's busy acquired pilots, up to x's depth, where a
        free slot of x would move them for good (Ŵ(x, r) ≤ 0, the window rule of
        :meth:`_fill_reselect`): x has no waiting task of its own left, and without this a site
        past its own share got one task per free slot per cycle whatever the depth (issue 29 §2).
        A task x would run only provisionally (Ŵ > 0) is not handed ahead: its window opens when
        it gets a slot, so it waits for a free one. Only waiting tasks are taken, never another
        pilot's queued ones (those are asked back only for a free slot, as before)."""
        book = self._books[x]
        depth = self._depth(x)
        race = self.strategy.base == "race"
        for pid in list(book.active):
            pilot = self.pilots[pid]
            if pilot.free or pilot.draining:
                continue   # a free slot takes its task at once (_fill_reselect); a draining one takes none
            room = depth * pilot.slots - len(pilot.queued)
            for r in book.origins:
                if room <= 0:
                    break
                origin = self._books[r]
                while room > 0 and origin.waiting and self._can_queue(pilot, t):
                    tid = origin.waiting[0]
                    if self.tasks[tid].barred == x:
                        break   # its failures on x sent it to r for good (engine_outcomes)
                    window = self._window(x, r, t) if self._w is None else self._task_window(x, r, t, tid)
                    if window > 0:
                        break   # provisional on x: only a free slot opens its window
                    origin.waiting.popleft()
                    task = self.tasks[tid]
                    self._queue(task, pilot, t, out)
                    task.origin = x   # moved for good, as a free slot's Ŵ ≤ 0 move
                    self._dirty.add(r)
                    self._waiting_changed = True
                    room -= 1
                    if self.decisions:
                        out.append(Decision(
                            time=t, kind=DecisionKind.RACE_WIN if race else DecisionKind.RESELECT_COMMIT,
                            task=tid, origin=self.sites[r].name, target=self.sites[x].name,
                            a_r=origin.acquired_at, a_r2=t, tx_r=self._task_txd(r, t, tid),
                            tx_r2=self._task_txd(x, t, tid), window=window))

    def _fill_reselect(self, x: int, t: float, out: list[Action]) -> None:
        book = self._books[x]
        name_x, tx_x = self.sites[x].name, self.tx[x]
        for r in book.origins:
            origin = self._books[r]
            if not (origin.waiting or origin.queued):
                continue
            window = self._window(x, r, t)
            # T̂x'(r), T̂x'(r') as this window prices them (T̂x without data)
            priced = None if self.data is None else (self._txd(r, t), self._txd(x, t), window)
            while book.free > book.incoming and (origin.waiting or origin.queued):
                if origin.waiting and self._u is not None:   # several widths: the first that fits x
                    tid = self._take_fitting(x, origin.waiting)
                    if tid is None:
                        break
                    task = self.tasks[tid]
                elif origin.waiting and (tid := self._take_unbarred(x, origin.waiting)) is not None:
                    task = self.tasks[tid]
                else:   # handed ahead to a pilot of r and not started as far as we know: its agent
                    # may have claimed it since the last poll, so it is asked back, not taken
                    queued = next((q for q in reversed(origin.queued) if self.tasks[q].barred != x), None)
                    if queued is None:
                        break      # what r still has may not run on x (barred: engine_outcomes)
                    self._recall(self.tasks[queued], t, out, x)
                    continue
                self._waiting_total -= 1
                self._waiting_changed = True
                if self._w is not None:   # a task table: this task's own window and figures
                    window = self._task_window(x, r, t, task.id)
                    priced = None if self.data is None else (self._task_txd(r, t, task.id),
                                                             self._task_txd(x, t, task.id), window)
                # a_r' is when the task got its slot on r' (t): the window runs from there
                if window <= 0:   # r' is no slower: move for good
                    self._dispatch(task, x, t, RUNNING, out)
                    task.origin = x
                    self._dirty.add(r)
                    kind = DecisionKind.RACE_WIN if self.strategy.base == "race" else DecisionKind.RESELECT_COMMIT
                else:             # run on r' while waiting for r, at most Ŵ
                    self._dispatch(task, x, t, PROVISIONAL, out)
                    task.opened = t
                    task.deadline = t + window
                    task.priced = priced
                    origin.prov[task.id] = None
                    out.append(SetTimer(at=task.deadline, task=task.id, attempt=task.attempt))
                    kind = DecisionKind.RESELECT_PROVISIONAL
                if self.decisions:
                    if priced is not None:
                        tx_r, tx_r2 = priced[:2]
                    elif self._w is None:
                        tx_r, tx_r2 = self.tx[r], tx_x
                    else:
                        tx_r, tx_r2 = self.tx[r] * self._w[task.id], tx_x * self._w[task.id]
                    out.append(Decision(time=t, kind=kind, task=task.id, origin=self.sites[r].name,
                                        target=name_x, a_r=origin.acquired_at, a_r2=t,
                                        tx_r=tx_r, tx_r2=tx_r2, window=window))
            if not book.free:
                return
        if self._learn:
            self._restart_onto(x, t, out)

    def _take_unbarred(self, x: int, queue: deque[int]) -> int | None:
        """Remove and return the first task of ``queue`` that may run on site x — not one whose
        failures there sent it elsewhere for good (``TaskRecord.barred``) — or None."""
        if self.tasks[queue[0]].barred != x:
            return queue.popleft()
        for tid in queue:
            if self.tasks[tid].barred != x:
                queue.remove(tid)
                return tid
        return None

    def _finish(self, t: float, out: list[Action]) -> None:
        for pilot in list(self.pilots.values()):
            if not pilot.state.final:
                self._cancel_pilot(pilot, t, out)
        self.finished = True
        out.append(BagDone(time=t, done=self.done_count, failed=self.failed_count))
