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

**Hand-ahead** (``prefetch`` > 0, the live coordinator): since a slot freed on r goes to r's
own waiting tasks first anyway, the engine hands each pilot of r the next of those tasks
before a slot frees (state QUEUED), so the agent starts one the instant a slot frees instead
of a poll later. A queued task still counts as waiting for every decision: re-selection may
take it back (a CancelTask to the pilot, then a dispatch elsewhere), and a pilot withdrawn or
ended gives its queued tasks back. Only the start is early; the choice is the engine's.
Live, the engine hears of an agent's start a poll late, so taking a queued task back is a
*request* (:class:`~resel.events.WithdrawTask`, state RECALLED) that the agent's claim may
refuse: the driver answers that it was withdrawn (the task waits again) or started (it stays).

**Learning** (strategy ``+learn``, ``auto``: :mod:`resel.learning`): each site's T̂x is
updated from the tasks that finish there, the run's rates as the prior; windows, the order of
targets and origins, requeues and walltime packing use the current estimate, and a free slot
that would finish a running task sooner than it will end where it runs — counting the time it
has run, with the slot's rate at the top of its credible interval — restarts it there.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from itertools import chain
from statistics import NormalDist
from typing import Callable, Mapping

from resel.blackhole import QuarantinePolicy, SiteHealth, describe, is_black_hole
from resel.domain import Bag, Site
from resel.errors import IllegalTransition, ReselError
from resel.engine_peers import PeerRules
from resel.events import (
    Action, BagCancelled, BagDone, BagSubmitted, BandwidthMeasured, OutputsMeasured, CancelPilot, CancelTask, Decision, DecisionKind,
    DispatchTask, Event, PilotEnded, PilotRequeued, PilotStarted, SetTimer, SiteLost, SiteQuarantined, SiteReleased,
    RateLearned, StrategyChosen, SubmitPilot, TaskDelivered, TaskFailed, TaskFetching, TaskFinished, TaskLost, TaskMeasured,
    TaskStarted, TaskUndelivered, TaskWithdrawn, TimerFired, WithdrawTask,
)
from resel.learning import DEFAULT_SPREAD, RateBeliefs
from resel.models.lim import SiteRate, site_rates
from resel.models.runtime import EngineRates
from resel.selection import Strategy, initial_assignment, queue_split, resolve_auto, viable_sites
from resel.states import AttemptOutcome, PilotState, TaskState, next_pilot_state, next_task_state
from resel.transfer import DataTimes, TransferModel
from resel.walltime import WalltimePolicy, fits

WAITING, QUEUED, RUNNING, PROVISIONAL = TaskState.WAITING, TaskState.QUEUED, TaskState.RUNNING, TaskState.PROVISIONAL
FETCHING, RECALLED = TaskState.FETCHING, TaskState.RECALLED

#: learning strategies: how likely a move of a started attempt must be to pay before its work is
#: thrown away (docs/engine.md, "Rates learned during the run"); MOVE_Z its normal quantile
MOVE_CONFIDENCE = 0.6
MOVE_Z = NormalDist().inv_cdf(MOVE_CONFIDENCE)

#: a site's measured task counts at which its learned rate is recorded (RateLearned), besides moves of 10 %
_SAY_AT = frozenset({1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000})

#: pilot sizes per single-pilot site the queue-aware strategy weighs (full, half, quarter, …)
MENU_SIZES = 6

#: PilotEnded reasons that mean "reached its walltime" (the simulator's, Slurm's TIMEOUT,
#: PBS/HTCondor wordings): such an end is resel's packing, never the site's fault
WALLTIME_REASONS = ("walltime", "timeout", "walltime exceeded", "deadline")


@dataclass(slots=True)
class Attempt:
    """One attempt of a task: on which site and pilot, when it started and ended, how it ended.

    A record, not a list, so a reader (metrics, the live view, the simulator's audit) names what
    it reads. ``start`` is the dispatch time until the agent's own start record moves it;
    ``end`` is None while the attempt is open (and stays None for one withdrawn unstarted)."""

    site: int
    pilot: int
    start: float
    end: float | None = None
    outcome: AttemptOutcome = AttemptOutcome.OPEN
    #: when its outputs were home and verified (bags with outputs; docs/data.md), else None;
    #: left out of the repr, which tests/test_engine_schedule.py's pinned digests hash
    delivered: float | None = field(default=None, repr=False)


class TaskRecord:
    """The engine's book-keeping for one task (read it; do not write it)."""

    __slots__ = ("id", "state", "origin", "first_origin", "site", "pilot", "attempt",
                 "deadline", "opened", "failures", "losses", "attempts", "moved_from", "since", "priced")

    def __init__(self, tid: int, origin: int):
        self.id = tid
        self.state = WAITING
        self.origin = origin          # the site the task is bound to (r); changes on commit
        self.first_origin = origin    # initial selection, for reports
        self.site = -1                # where the current attempt runs
        self.pilot = -1
        self.attempt = 0
        self.deadline = 0.0           # end of the re-selection window while PROVISIONAL
        self.opened = 0.0             # a_r' of that window: when the task got its slot on r'
        self.failures = 0
        self.losses = 0
        self.moved_from = -1          # the quarantined site it was moved away from (comes back on release)
        self.since = 0.0              # when it was bound to its origin (the rebroker's timeout)
        #: (T̂x'(r), T̂x'(r'), Ŵ) its open window was priced with (bags that move data; else None)
        self.priced: tuple[float, float, float] | None = None
        self.attempts: list[Attempt] = []   # every attempt, oldest first


class PilotRecord:
    """A pilot's slots as the engine counts them.

    ``tasks`` hold a slot each (running or provisional); ``queued`` were handed ahead and wait
    in the agent's inbox. ``free`` slots take a task now; ``reserved`` slots have freed but the
    agent is starting a queued task in them; ``debt`` counts queued tasks the agent started
    before the engine heard that a slot freed (paid back by the next slot that frees).
    """

    __slots__ = ("id", "site", "slots", "free", "state", "submitted", "started", "ended", "tasks",
                 "queued", "reserved", "debt", "walltime", "draining", "done")

    def __init__(self, pid: int, site: int, slots: int, submitted: float, walltime: float = math.inf):
        self.id, self.site, self.slots, self.free = pid, site, slots, slots
        self.walltime = walltime       # what it asked for: it is killed at started + walltime
        self.draining = False          # too little walltime left for a task: takes none, ends when idle
        self.done = 0                  # attempts that finished on it (a pilot that did none and died
                                       # soon after its start counts against its site)
        self.state = PilotState.PENDING
        self.submitted, self.started, self.ended = submitted, None, None
        self.tasks: dict[int, None] = {}
        self.queued: dict[int, None] = {}
        self.reserved = 0
        self.debt = 0


class _SiteBook:
    """Per-site indices that keep every decision O(sites), not O(tasks)."""

    __slots__ = ("waiting", "queued", "prov", "pending", "active", "free_pilots", "free", "reserved",
                 "pending_slots", "acquired_at", "cap_slots", "origins", "spec", "cap_saved", "draining",
                 "per_task", "max_pilots", "recalled", "incoming")

    def __init__(self, cap_slots: int, per_task: bool = False, max_pilots: int = 1):
        self.per_task = per_task             # the site's pilot.mode is "per-task" (a pool)
        self.max_pilots = max_pilots         # the site's pilot.max_pilots
        self.waiting: deque[int] = deque()
        self.queued: dict[int, None] = {}    # handed ahead to this site's pilots, not started
        self.reserved = 0                    # freed slots held for queued tasks (sum over pilots)
        self.prov: dict[int, None] = {}
        self.pending: dict[int, None] = {}
        self.active: dict[int, None] = {}
        self.free_pilots: dict[int, None] = {}
        self.free = 0
        self.pending_slots = 0
        self.acquired_at: float | None = None
        self.cap_slots = cap_slots
        self.origins: list[int] = []   # sites whose tasks may be re-selected onto this one
        self.spec = False              # acquires pilots for other sites' waiting tasks
        self.cap_saved = cap_slots     # cap_slots while the site is quarantined (0 then)
        self.draining = 0              # active pilots draining (not counted against max_pilots)
        self.recalled = 0              # its queued tasks asked back (WithdrawTask), not answered yet
        self.incoming = 0              # tasks asked back for this target's free slots, not answered yet


class Engine(PeerRules):
    """Selection, late binding and re-selection for one bag over a list of sites.

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
            a free slot (0: none, the simulator; the live coordinator uses 1).
        quarantine: the black-hole rule's numbers (:mod:`resel.blackhole`); default on.
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
    """

    def __init__(self, bag: Bag, sites: list[Site], strategy: Strategy | str = "model", *,
                 seed: int = 0, clock: str = "base", max_attempts: int = 3, max_losses: int = 5,
                 prefetch: int = 0, rates: Mapping[str, SiteRate] | EngineRates | None = None,
                 quarantine: QuarantinePolicy | None = None, walltime: WalltimePolicy | str = "limit",
                 decisions: bool = True, data: TransferModel | None = None):
        self.bag = bag
        self.decisions = decisions
        self.prefetch = max(0, int(prefetch))
        self.sites = list(sites)
        self.strategy = Strategy.parse(strategy) if isinstance(strategy, str) else strategy
        self.max_attempts, self.max_losses = max_attempts, max_losses
        given = rates if isinstance(rates, EngineRates) else EngineRates(rates or {})
        lim = site_rates(self.sites, clock)
        self.rates = [given.rates.get(s.name, lim[s.name]) for s in self.sites]
        self.tx = [r.tx(bag.profile.instructions) for r in self.rates]   # T̂x per site
        split = given.split or {}
        self._split_tx = [split[s.name].tx(bag.profile.instructions) if s.name in split else self.tx[i]
                          for i, s in enumerate(self.sites)]
        self._windows = given.windows      # Ŵ(r', r) by name pair (--risk), else T̂x(r') − T̂x(r)
        upper = given.upper or {}
        #: T̂x,hi per site: the top of its runtime interval, what walltime packing plans with
        self.tx_hi = [max(self.tx[i], upper[s.name].tx(bag.profile.instructions)) if s.name in upper
                      else self.tx[i] for i, s in enumerate(self.sites)]
        #: a bag with a task table: each task's T̂x is its site's (the tasks' mean) times its
        #: weight (None: equal tasks, every figure the site's); walltime checks plan with the
        #: largest task's
        self._w = bag.weights
        self._wmax = max(self._w) if self._w else 1.0
        #: each site's waiting tasks largest first: ``order = "largest"``, or ``auto`` (the
        #: default) where no site is a per-task pool — where it measurably helped (docs/peers.md)
        self._largest_first = self._w is not None and (bag.order == "largest" or (
            bag.order == "auto" and not any(s.pilot.mode == "per-task" for s in self.sites)))
        #: learning (strategy ``+learn``, ``auto``): the priors' worth and spread per site name, the
        #: beliefs made at submission (resel.learning), the agents' measured times not yet counted,
        #: per site a max-heap of its running attempts by start (the restart rule's candidates)
        self._priors = dict(given.prior or {})
        self._learn = False
        self.beliefs: RateBeliefs | None = None
        self._measured: dict[tuple[int, int], float] = {}
        self._running: list[tuple[list, list]] = []   # per site: (max-heap, min-heap) of (±start, task, attempt)
        #: what ``auto`` ran as and why (None for another strategy), set at submission
        self.auto_choice: tuple[str, str] | None = None
        #: tasks asked back from an agent (WithdrawTask) → the target whose free slot wanted them (−1: none)
        self._recalls: dict[int, int] = {}
        self.walltime = walltime if isinstance(walltime, WalltimePolicy) else WalltimePolicy(walltime)
        #: the data model (None: no data priced, D = 0); its figures per site in ``_dt``, updated
        #: by BandwidthMeasured, and per site when its shared inputs are there (``_ready``: None
        #: while cold, else the first binding there + their transfer time)
        self.data = data if data is not None and data.moves else None
        #: the model as given, kept even while it moves nothing: OutputsMeasured may make it move
        self._model = data
        self._dt: list[DataTimes] = ([self.data.times(s.name) for s in self.sites] if self.data is not None else [])
        self._ready: list[float | None] = [None] * len(self.sites)
        self._resort = False          # a data figure changed: re-rank targets and origins
        self.quarantine = quarantine or QuarantinePolicy()
        #: outcomes per site for the black-hole rule (resel/blackhole.py)
        self.health = [SiteHealth() for _ in self.sites]
        self._suspects: set[int] = set()
        self._drained: dict[int, None] = {}
        #: (when its remaining walltime falls below T̂x,hi, pilot id, started) per started pilot
        self._expiries: list[tuple[float, int, float]] = []
        self._viable: list[int] = []
        self._rng = random.Random(seed)
        self.tasks: list[TaskRecord] = []
        self.pilots: dict[int, PilotRecord] = {}
        self._books = [_SiteBook(max(0, min(s.pilot.max_cores or s.cores, s.cores) // bag.cores_per_task),
                                 s.pilot.mode == "per-task", s.pilot.max_pilots)
                       for s in self.sites]
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
        self._handlers: dict[type, Callable[[Event, list[Action]], None]] = {
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
        self.lost_sites: dict[str, str] = {}

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

    def probe_shapes(self) -> dict[int, tuple[int, float]]:
        """Per site index, the pilot (cores, walltime) it would be asked for if it got the bag.

        A ``single``-mode site gets one pilot for every task, up to its cap; a ``per-task``
        site one task's cores. Drivers ask each site how long such a pilot would wait.
        """
        out = {}
        cpt = self.bag.cores_per_task
        for i, (site, book) in enumerate(zip(self.sites, self._books)):
            slots = 1 if site.pilot.mode == "per-task" else max(1, min(self.bag.count, book.cap_slots))
            tasks = 1 if site.pilot.mode == "per-task" else self.bag.count
            out[i] = (slots * cpt, self._pilot_walltime(i, tasks, slots))
        return out

    def probe_menu(self) -> dict[int, list[tuple[int, int, float]]]:
        """Per site index, the pilot sizes the queue-aware strategy may choose between, as
        (task slots, cores, walltime), largest first: a ``single`` site's full pilot halved
        down to one slot (at most ``MENU_SIZES`` sizes), a pool's one-task pilot (its slots:
        how many such pilots run at once). Smaller pilots often start much sooner (backfill);
        the driver says when each would start, in ``BagSubmitted.wait_menu``.
        """
        out = {}
        cpt = self.bag.cores_per_task
        for i, (site, book) in enumerate(zip(self.sites, self._books)):
            if book.cap_slots <= 0:
                out[i] = []
            elif site.pilot.mode == "per-task":
                out[i] = [(max(1, min(book.cap_slots, site.pilot.max_pilots)), cpt, self._pilot_walltime(i, 1, 1))]
            else:
                slots, sizes = max(1, min(self.bag.count, book.cap_slots)), []
                while slots >= 1 and len(sizes) < MENU_SIZES:
                    sizes.append((slots, slots * cpt, self._pilot_walltime(i, self.bag.count, slots)))
                    slots //= 2
                out[i] = sizes
        return out

    @property
    def learning(self) -> bool:
        """Whether this run learns the sites' rates (strategy ``+learn`` or ``auto``)."""
        return self._learn or self.strategy.learn

    def learned(self) -> dict[str, dict]:
        """Per site name, what a learning run believes of its rate now (empty otherwise)."""
        if self.beliefs is None:
            return {}
        return {s.name: self.beliefs.as_dict(i) for i, s in enumerate(self.sites)}

    @property
    def reselection_targets(self) -> list[str]:
        """Sites that take re-selected tasks, preferred first (empty without re-selection)."""
        return [self.sites[x].name for x in self._targets]

    @property
    def quarantined(self) -> dict[str, SiteHealth]:
        """Sites quarantined as black holes right now, with their counts and release time."""
        return {self.sites[i].name: h for i, h in enumerate(self.health) if h.quarantined}

    def acquired_at(self, site: str) -> float | None:
        """a_r: when the site's first pilot started, or None while unacquired."""
        return self._books[self._index(site)].acquired_at

    # ------------------------------------------------------------------ events
    def _on_submitted(self, ev: BagSubmitted, out: list[Action]) -> None:
        if self.started:
            raise IllegalTransition("BagSubmitted twice")
        viable = viable_sites(self.bag, self.sites)
        if self.walltime.guard:   # a site whose limit is below T̂x,hi can never finish a task
            # (with data: nor one whose first task, its inputs and the shared ones staged, does not fit)
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
            viable = fit
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
            options = [[(k, w) for (k, _, _), w in zip(menu[i], ev.wait_menu.get(s.name) or [])]
                       for i, s in enumerate(self.sites)]
            split_tx = self._split_tx
            if self.data is not None:   # waves of T̂x + own inputs, after the shared inputs; + outputs home
                split_tx = [tx + d.own_in for tx, d in zip(split_tx, self._dt)]
                options = [[(k, None if w is None else max(0.0, w) + d.shared_in + d.out) for k, w in opts]
                           for opts, d in zip(options, self._dt)]
            origins, candidates, caps = queue_split(self.strategy, self.bag, viable, split_tx, options)
            for x, cap in caps.items():          # the pilot size the split chose for x
                self._books[x].cap_slots = min(self._books[x].cap_slots, cap)
        else:   # tasks each site runs at once: its full pilot's slots, or a pool's one-slot pilots
            slots = [menu[i][0][0] if menu[i] else 0 for i in range(len(self.sites))]
            origins, candidates = initial_assignment(self.strategy, self.bag, viable, self.rates, self._rng,
                                                     waits, slots, self._dt if self.data is not None else None)
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
            heapq.heappush(self._expiries, (ev.time + pilot.walltime - self._slot_hi(pilot.site), pilot.id, ev.time))
        self._dirty.add(pilot.site)
        if self.strategy.peer:
            self._peer_started(pilot.site, ev.time, out)

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
            self._lose(self.tasks[tid], ev.time)
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
            self._lose(self.tasks[tid], ev.time)
        self._dirty.add(pilot.site)

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
        self._requeue(task, ev.time, *self._retry_or_give_up(task, x, AttemptOutcome.LOST,
                                                             task.losses >= self.max_losses, ev.time))

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

    def _on_task_failed(self, ev: TaskFailed, out: list[Action]) -> None:
        task = self._task(ev.task)
        if task.attempt == ev.attempt and (task.state is QUEUED or task.state is RECALLED):
            self._start_queued(task, ev.time)   # e.g. a bad task file: failed without a start
        if task.attempt != ev.attempt or task.state not in (RUNNING, PROVISIONAL):
            return
        self._outcome(task.site, bad=True)
        x = task.site
        self._end_attempt(task, ev.time, AttemptOutcome.FAILED)
        task.failures += 1
        self._requeue(task, ev.time, *self._retry_or_give_up(task, x, AttemptOutcome.FAILED,
                                                             task.failures >= self.max_attempts, ev.time))

    def _on_timer(self, ev: TimerFired, out: list[Action]) -> None:
        if ev.site is not None:
            self._release(self._index(ev.site), ev.attempt, ev.time, out)
            return
        if ev.task == -1 and self.strategy.peer:   # the engine's own timer: a peer strategy's round
            self._peer_timer(ev, out)
            return
        task = self._task(ev.task)
        if task.attempt != ev.attempt or task.state is not PROVISIONAL:
            return
        self._commit(task, ev.time, out)

    def _on_site_lost(self, ev: SiteLost, out: list[Action]) -> None:
        x = self._index(ev.site)
        if ev.site in self.lost_sites:
            return
        self.lost_sites[ev.site] = ev.reason
        book = self._books[x]
        book.cap_slots = 0                       # _size_pilots never asks this site again
        if x in self._targets:
            self._targets.remove(x)
        for other in self._books:
            if x in other.origins:
                other.origins.remove(x)
        for pid in list(book.pending):           # withdrawn: the driver cancels them
            self._cancel_pilot(self.pilots[pid], ev.time, out)
        usable = [i for i, b in enumerate(self._books) if b.cap_slots > 0
                  and self.sites[i].name not in self.lost_sites]
        names = [s.name for s in self.sites]
        if not usable:
            while book.waiting:                  # nowhere left to run: give up, say why
                task = self.tasks[book.waiting.popleft()]
                self._waiting_total -= 1
                task.state = next_task_state(task.state, "give-up")
                self._settled_one(done=False)
            if self._remaining == 0:
                self._finish(ev.time, out)
            return
        best = self._fastest(usable, ev.time)
        while book.waiting:
            tid = book.waiting.popleft()
            task = self.tasks[tid]
            task.origin = best
            self._books[best].waiting.append(tid)
            if self.decisions:
                out.append(Decision(time=ev.time, kind=DecisionKind.SITE_LOST, task=tid, origin=ev.site,
                                    target=names[best], tx_r=self._txd(x, ev.time), tx_r2=self._txd(best, ev.time)))
        for tid in list(book.prov):              # provisional elsewhere: r is gone, commit to r'
            task = self.tasks[tid]
            self._commit(task, ev.time, out)
        self._reorder(best)
        self._waiting_changed = True
        self._dirty.add(best)

    def _reorder(self, x: int) -> None:
        """Largest first: site x's waiting tasks back in decreasing size after others joined them."""
        if self._largest_first:
            w = self._w
            book = self._books[x]
            book.waiting = deque(sorted(book.waiting, key=lambda tid: -w[tid]))

    # ------------------------------------------------------------------ walltime packing
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
        T̂x,hi, i.e. t > start + walltime − T̂x,hi: a heap of those instants, so an event pays
        nothing until one passes): its free slots leave the books, the slots that free later
        stay out, and it is released once idle."""
        heap = self._expiries
        while heap and heap[0][0] < t:
            _, pid, started = heapq.heappop(heap)
            pilot = self.pilots[pid]
            if pilot.state is not PilotState.ACTIVE or pilot.started != started or pilot.draining:
                continue   # ended, or requeued and started again (a later entry is its own)
            x = pilot.site
            if self.data is not None or self._learn:   # a bandwidth or a rate learned since may have moved it
                due = started + pilot.walltime - self._slot_hi(x)
                if due >= t:
                    heapq.heappush(heap, (due, pid, started))
                    continue
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

    # ------------------------------------------------------------------ black-hole sites
    def _usable(self, exclude: int = -1) -> list[int]:
        """Sites that may take tasks: viable, not lost, not quarantined, not ``exclude``."""
        return [i for i in self._viable if i != exclude and self._books[i].cap_slots > 0
                and self.sites[i].name not in self.lost_sites and not self.health[i].quarantined]

    def _outcome(self, x: int, bad: bool) -> None:
        """Count an attempt's (or a pilot's) end on site x; a bad one makes x a suspect."""
        if x < 0:
            return
        self.health[x].add(bad)
        if bad:
            self._suspects.add(x)

    def _judge(self, x: int, t: float, out: list[Action]) -> None:
        health = self.health[x]
        if health.quarantined or self.sites[x].name in self.lost_sites:
            return
        others_n = sum(h.n for i, h in enumerate(self.health) if i != x)
        others_bad = sum(h.bad for i, h in enumerate(self.health) if i != x)
        if not is_black_hole(health, others_n, others_bad, self.quarantine):
            return
        usable = self._usable(exclude=x)
        if not usable:
            return   # the last usable site is never quarantined: nowhere else to go
        self._quarantine(x, usable, describe(health, others_n, others_bad), t, out)

    def _quarantine(self, x: int, usable: list[int], reason: str, t: float, out: list[Action]) -> None:
        """Site x is a black hole: withdraw its pending pilots, move its waiting (and handed
        ahead) tasks to the fastest usable site as for a lost site, and set the release timer.
        Tasks running there stay until they end (a success still counts for the site)."""
        health, book, name = self.health[x], self._books[x], self.sites[x].name
        health.quarantines += 1
        health.since, health.until = t, t + self.quarantine.backoff_for(health.quarantines)
        health.reason = reason
        book.cap_saved, book.cap_slots = book.cap_slots, 0
        out.append(SiteQuarantined(time=t, site=name, until=health.until, reason=reason))
        for pid in list(book.pending):
            self._cancel_pilot(self.pilots[pid], t, out)
        for tid in reversed(list(book.queued)):      # handed ahead to its busy pilots: ask them back
            self._recall(self.tasks[tid], t, out)      # (moved on when withdrawn, or run there if started)
        best = self._fastest(usable, t)
        while book.waiting:
            tid = book.waiting.popleft()
            task = self.tasks[tid]
            task.origin, task.moved_from = best, x
            self._books[best].waiting.append(tid)
            if self.decisions:
                out.append(Decision(time=t, kind=DecisionKind.QUARANTINE, task=tid, origin=name,
                                    target=self.sites[best].name, tx_r=self._txd(x, t), tx_r2=self._txd(best, t)))
        for tid in list(book.prov):                  # provisional elsewhere: r is out, keep r'
            self._commit(self.tasks[tid], t, out)
        self._reorder(best)
        self._waiting_changed = True
        self._dirty.update((x, best))
        out.append(SetTimer(at=health.until, task=-1, attempt=health.quarantines, site=name))

    def _release(self, x: int, k: int, t: float, out: list[Action]) -> None:
        """The k-th quarantine of site x ends: it may take tasks again, its counts restart, and
        the tasks it lost to the quarantine that still wait elsewhere come back (the retry)."""
        health, book, name = self.health[x], self._books[x], self.sites[x].name
        if not health.quarantined or health.quarantines != k:
            return   # a stale or repeated timer
        health.until = health.since = None
        health.reset()
        out.append(SiteReleased(time=t, site=name))
        if name in self.lost_sites:
            return
        book.cap_slots = book.cap_saved
        for y, other in enumerate(self._books):
            if y == x or not other.waiting:
                continue
            back = [tid for tid in other.waiting if self.tasks[tid].moved_from == x]
            if not back:
                continue
            keep = set(back)
            other.waiting = deque(tid for tid in other.waiting if tid not in keep)
            for tid in back:
                self.tasks[tid].origin, self.tasks[tid].moved_from = x, -1
                book.waiting.append(tid)
                if self.decisions:
                    out.append(Decision(time=t, kind=DecisionKind.QUARANTINE_RELEASE, task=tid, origin=self.sites[y].name,
                                        target=name, tx_r=self._txd(y, t), tx_r2=self._txd(x, t)))
            self._dirty.add(y)
        self._reorder(x)
        self._waiting_changed = True
        self._dirty.add(x)

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

    def _window(self, target: int, origin: int, t: float) -> float:
        """Ŵ(r', r) at t: T̂x'(r') − T̂x'(r), or the given window of the pair (an upper quantile,
        --risk) plus D(r') − D(r) (data times are priced as points: they have no interval).
        A race has no windows: whichever kept site frees a slot takes the task for good."""
        if self.strategy.base == "race":
            return 0.0
        if self._windows is not None and not (self._learn and (self.beliefs.tasks(target) or self.beliefs.tasks(origin))):
            # (a site measured in this run: its quantile window, from the prior, is stale — point rule)
            w = self._windows.get((self.sites[target].name, self.sites[origin].name))
            if w is not None:
                return w if self.data is None else w + (self._data_s(target, t) - self._data_s(origin, t))
        if self.data is None:
            return self.tx[target] - self.tx[origin]
        return self._txd(target, t) - self._txd(origin, t)

    # ------------------------------------------------------------------ data (docs/engine.md)
    def _data_s(self, x: int, t: float) -> float:
        """D(x) at t: a task's own inputs to x and its outputs home, plus the shared inputs
        while x is cold (what is left of their trip while they are on their way)."""
        d = self._dt[x]
        ready = self._ready[x]
        return d.own_in + d.out + (d.shared_in if ready is None else max(0.0, ready - t))

    def _txd(self, x: int, t: float) -> float:
        """T̂x'(x) = T̂x(x) + D(x) at t: what the engine compares sites by (T̂x without data)."""
        if self.data is None:
            return self.tx[x]
        return self.tx[x] + self._data_s(x, t)

    def _task_txd(self, x: int, t: float, tid: int) -> float:
        """T̂x'(x) of task ``tid``: its weight times the site's T̂x, plus D(x)."""
        if self._w is None:
            return self._txd(x, t)
        tx = self.tx[x] * self._w[tid]
        return tx if self.data is None else tx + self._data_s(x, t)

    def _task_window(self, target: int, origin: int, t: float, tid: int) -> float:
        """Ŵ(r', r) of task ``tid`` at t: the run-time part scaled by its weight, the data part
        as it is (a task table's tasks share the bag's data sizes)."""
        window = self._window(target, origin, t)
        if self._w is None or self.strategy.base == "race":
            return window
        d = 0.0 if self.data is None else self._data_s(target, t) - self._data_s(origin, t)
        return (window - d) * self._w[tid] + d

    def _priced(self, task: TaskRecord, r: int, x: int, t: float) -> tuple[float, float, float]:
        """(T̂x'(r), T̂x'(r'), Ŵ) of the task's window: as it was opened (a bag that moves data),
        else as the rates say now."""
        if task.priced is not None:
            return task.priced
        if self._w is None:
            return self.tx[r], self.tx[x], self._window(x, r, t)
        w = self._w[task.id]
        return self.tx[r] * w, self.tx[x] * w, self._task_window(x, r, t, task.id)

    def _fastest(self, candidates: list[int], t: float) -> int:
        """The candidate of lowest T̂x' at t, ties to the first in site order."""
        return min(candidates, key=lambda i: (self._txd(i, t), i))

    def _slot_hi(self, x: int) -> float:
        """How long a task holds a slot of x at most: T̂x,hi plus its own inputs' trip, which
        is staged after the task is bound to the slot; its outputs travel after the slot is
        free. (The shared inputs, sent once per site, are added where x is cold.)"""
        if self.data is None:
            return self.tx_hi[x] if self._w is None else self.tx_hi[x] * self._wmax
        return (self.tx_hi[x] if self._w is None else self.tx_hi[x] * self._wmax) + self._dt[x].own_in

    def _bound(self, x: int, t: float) -> None:
        """A task was bound to site x at t: if x was cold its shared inputs leave now."""
        if self._ready[x] is None:
            self._ready[x] = t + self._dt[x].shared_in
            self._resort = True

    def _on_bandwidth(self, ev: BandwidthMeasured, out: list[Action]) -> None:
        """A site's MB/s measured during the run: new decisions price its data with it; windows
        already open keep theirs, a pilot's drain instant moves with its new slot time."""
        x = next((i for i, s in enumerate(self.sites) if s.name == ev.site), None)
        if x is None:
            raise IllegalTransition(f"BandwidthMeasured for unknown site {ev.site!r}")
        for value in (ev.inbound, ev.outbound):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise IllegalTransition(f"BandwidthMeasured for {ev.site}: {value!r} is not MB/s > 0")
        if self.data is None:   # no data priced: nothing depends on a bandwidth yet
            if self._model is not None:    # (but kept for when outputs are measured)
                self._model = self._model.with_bandwidth(ev.site, ev.inbound, ev.outbound)
            return
        self.data = self.data.with_bandwidth(ev.site, ev.inbound, ev.outbound)
        self._model = self.data
        self._dt[x] = self.data.times(ev.site)
        self._resort = True
        if self.walltime.guard:   # a slower link drains the site's pilots sooner (_expire re-checks)
            for pid in self._books[x].active:
                pilot = self.pilots[pid]
                if math.isfinite(pilot.walltime) and not pilot.draining:
                    heapq.heappush(self._expiries, (pilot.started + pilot.walltime - self._slot_hi(x), pid,
                                                    pilot.started))

    @property
    def data_model(self):
        """The data model the engine prices with — or, while it moves no byte, the one it was
        given (None: the driver gave none)."""
        return self.data if self.data is not None else self._model

    def _on_outputs_measured(self, ev: OutputsMeasured, out: list[Action]) -> None:
        """A task's outputs measured (the mean of those delivered so far): new decisions price
        their trip home with it. A bag priced with no data until now (outputs declared, their
        size not) starts pricing it here; windows already open keep their figures."""
        value = ev.out_bytes
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise IllegalTransition(f"OutputsMeasured: {value!r} is not a number of bytes >= 0")
        model = self.data if self.data is not None else self._model
        if model is None:
            return   # the driver prices no data for this bag (no model was given)
        model = dataclasses.replace(model, out_bytes=float(value))
        self._model = model
        self.data = model if model.moves else None
        self._dt = [model.times(s.name) for s in self.sites] if self.data is not None else []
        self._resort = True

    # ------------------------------------------------------------------ learning (resel.learning)
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
            for pid in self._books[x].active:
                pilot = self.pilots[pid]
                if math.isfinite(pilot.walltime) and not pilot.draining:
                    heapq.heappush(self._expiries, (pilot.started + pilot.walltime - self._slot_hi(x), pid,
                                                    pilot.started))

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
        flip that costs the work done)."""
        r2 = task.site
        left = self._task_txd(r2, t, task.id) - (t - task.attempts[-1].start)
        here = self._task_txd(x, t, task.id)
        if not here < left:
            return False
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
            newest, oldest = self._running[r]
            extra = self._data_s(r, t) if self.data is not None else 0.0
            tx_r = self.tx[r]
            while book.free > book.incoming:
                task = self._candidate(r, newest, -1.0)
                if task is None:
                    break
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

    # ------------------------------------------------------------------ asking a queued task back
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

    def _answered(self, task: TaskRecord, book: _SiteBook) -> None:
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
        if self._books[task.origin].cap_slots <= 0 and (
                self.sites[task.origin].name in self.lost_sites or self.health[task.origin].quarantined):
            usable = self._usable()
            if usable:
                task.origin = self._fastest(usable, ev.time)
        self._books[task.origin].waiting.appendleft(task.id)
        self._waiting_changed = True
        self._dirty.add(task.origin)

    def _end_attempt(self, task: TaskRecord, time: float, outcome: AttemptOutcome) -> None:
        """Close the running attempt and give its slot back."""
        rec = task.attempts[-1]
        rec.end, rec.outcome = time, outcome
        pilot = self.pilots[task.pilot]
        del pilot.tasks[task.id]
        if pilot.state is PilotState.ACTIVE:
            self._free_slot(pilot)
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

    def _lose(self, task: TaskRecord, time: float) -> None:
        """The pilot under a running task vanished: back to waiting (not the task's fault)."""
        rec = task.attempts[-1]
        rec.end, rec.outcome = time, AttemptOutcome.LOST
        x = task.site
        task.pilot = task.site = -1
        task.losses += 1
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
                task.origin = self._fastest(usable, t)
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

    def _dispatch(self, task: TaskRecord, x: int, t: float, state: TaskState, out: list[Action]) -> PilotRecord:
        book = self._books[x]
        pid = next(iter(book.free_pilots))
        pilot = self.pilots[pid]
        pilot.free -= 1
        book.free -= 1
        self._free_total -= 1
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
        expiries = self._expiries
        if (expiries and expiries[0][0] < t) or self._drained:
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
                if book.waiting and (book.active or book.pending):
                    self._hand_ahead(x, t, out)

    def _fill_home(self, x: int, t: float, out: list[Action]) -> None:
        book = self._books[x]
        while book.free and book.waiting:
            self._dispatch(self.tasks[book.waiting.popleft()], x, t, RUNNING, out)
            self._waiting_total -= 1
            self._waiting_changed = True
        while book.free and book.prov:   # each pass removes the task from book.prov
            tid = next(iter(book.prov))
            task = self.tasks[tid]
            if t >= task.deadline or (self._learn and not self._moves_back(x, task, t)):
                self._commit(task, t, out)   # the window closed at this very instant: keep r' (learning:
                continue                     # the rule with today's rates says r' still finishes sooner)
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
        for pid in chain(list(book.active), list(book.pending)):
            pilot = self.pilots[pid]
            if pilot.state is PilotState.ACTIVE and (pilot.free or pilot.draining):
                continue   # a free slot takes a task at once (_fill_home), it needs no queue
            room = self.prefetch * pilot.slots - len(pilot.queued)
            while room > 0 and book.waiting and self._can_queue(pilot, t):
                self._queue(self.tasks[book.waiting.popleft()], pilot, t, out)
                room -= 1
            if not book.waiting:
                return

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
                if origin.waiting:
                    task = self.tasks[origin.waiting.popleft()]
                else:   # handed ahead to a pilot of r and not started as far as we know: its agent
                    # may have claimed it since the last poll, so it is asked back, not taken
                    self._recall(self.tasks[next(reversed(origin.queued))], t, out, x)
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

    def _size_pilots(self, x: int, t: float, out: list[Action]) -> None:
        """Ask for the slots the site's tasks still need; withdraw what nobody needs."""
        book = self._books[x]
        # a queued task whose slot already freed (reserved) needs nothing more
        if book.spec:   # every other candidate site is an origin of this target
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
            self._submit(x, min(need - have, book.cap_slots), t, out, tasks=need - have)

    def _withdraw_surplus(self, book: _SiteBook, surplus: int, t: float, out: list[Action]) -> None:
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
        out.append(SubmitPilot(pilot=pid, site=site.name, cores=slots * self.bag.cores_per_task,
                               walltime=walltime))

    def _pilot_walltime(self, x: int, tasks: int, slots: int) -> float:
        """The walltime a pilot of site x asks for: sized from its tasks within the site's limit
        (with data: each task's slot time :meth:`_slot_hi`, and the shared inputs while x is cold)."""
        limit = self.sites[x].pilot.walltime
        request = self.walltime.request(limit, self._slot_hi(x), tasks, slots)
        if self.data is not None and self._ready[x] is None:
            request = min(limit, request + self._dt[x].shared_in)
        return request

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
        self._give_back_queued(pilot, t)   # the stop file tells its agent; no cancel per task
        self._withdraw(pilot)
        pilot.state = next_pilot_state(pilot.state, "cancel")
        pilot.ended = t
        out.append(CancelPilot(pilot=pilot.id, site=self.sites[pilot.site].name))

    def _finish(self, t: float, out: list[Action]) -> None:
        for pilot in list(self.pilots.values()):
            if not pilot.state.final:
                self._cancel_pilot(pilot, t, out)
        self.finished = True
        out.append(BagDone(time=t, done=self.done_count, failed=self.failed_count))
