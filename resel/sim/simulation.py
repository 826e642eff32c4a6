"""The simulated backend: the engine driven in virtual time on the event core.

A :class:`Simulation` owns one :class:`~resel.sim.core.Environment` (simpy's skeleton: a heap
of ``(time, priority, seq, callback, payload)`` whose counter breaks ties first-in first-out,
so runs are deterministic). At equal times task ends come before pilot ends, timers, queue
arrivals, scheduling passes and pilot starts, so freed cores are seen before new decisions
are made. It can be stepped and resumed; :func:`simulate` runs one to the end.

Each simulated site has its own truth, distinct from LIM's prediction (``Site.truth``): a
queue-wait draw per pilot (scaled by its node count), and per pilot (slot) a clock and an IPC,
so T_x = instructions · κ_true / (IPC · clock). Every random stream is seeded from the run
seed and the site name, so two strategies run with the same seed see the same waits for the
same pilots — a paired comparison, like the thesis's replay of its random runs.

A bag that moves data (``[bag.data]`` sizes, docs/data.md) has its bytes moved at each site's
true bandwidth (``truth.bandwidth``, else its ``bandwidth``, else
:data:`~resel.transfer.DEFAULT_BANDWIDTH`): a task bound to a pilot starts executing once its
inputs are there — the site's shared inputs first, sent once per run at its first binding
(a task bound while they travel waits for them), then its own — and, if it has outputs, ends
in ``TaskFetching`` and is ``TaskDelivered`` out_bytes / bw_out later. Every transfer moves at
the site's full bandwidth whatever else moves (independent transfers: no link is shared), and
nothing in the simulation fails to arrive. Whether the *engine* prices the data is separate
(``price_data``): blind to it, it decides as without data while the bytes still move — the
comparison benchmarks/eval_data_selection.py makes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

from resel.sim.estimates import menu_estimates, start_estimates
from resel.sim.queuesite import warm_queues
from resel.domain import Bag, Site, Truth
from resel.engine import Engine
from resel.events import (
    BagSubmitted, CancelPilot, CancelTask, Decision, DispatchTask, PilotEnded,
    PilotStarted, SetTimer, SubmitPilot, TaskDelivered, TaskFailed, TaskFetching, TaskFinished, TimerFired,
)
from resel.metrics import ReselAudit, WorkloadMetrics, judge, workload_metrics
from resel.models.distributions import Dist
from resel.models.lim import GHZ
from resel.selection import Strategy
from resel.sim.core import PILOT_END, STARTED, TASK_END, TIMER, Environment, collector_paused
from resel.states import TaskState
from resel.transfer import MB, DataTimes, TransferModel


class SiteTruth:
    """Seeded samplers for one site's waits and slot speeds.

    Public for the oracle (:mod:`resel.sim.oracle`), which draws the same streams from the same
    seed to bound what any strategy could have done."""

    def __init__(self, site: Site, seed: int):
        truth = site.truth or Truth(site.kappa, Dist.fixed(1.0), Dist.fixed(site.clock.get("avg")))
        self.kappa = truth.kappa
        wait_rng = random.Random(f"{seed}:{site.name}:wait")
        speed_rng = random.Random(f"{seed}:{site.name}:speed")
        if site.wait is None:
            self.wait = lambda: 0.0
            self.exponent, self.per_node, self.mean_wait = 0.0, 1, None
        else:
            self.wait = site.wait.dist.sampler(wait_rng)
            self.exponent, self.per_node = site.wait.size_exponent, site.wait.cores_per_node
            self.mean_wait = site.wait.dist.mean()
        self.ipc = truth.ipc.sampler(speed_rng)
        self.clock = truth.clock.sampler(speed_rng)
        # its own stream, drawn only where failures are on: other sites' runs stay as they were
        self.fail, self.fail_after = truth.fail, truth.fail_after
        self.fail_rng = random.Random(f"{seed}:{site.name}:fail")
        self.mean_speed = truth.ipc.mean() * truth.clock.mean() * GHZ

    def draw_wait(self, cores: int) -> float:
        nodes = max(1, math.ceil(cores / self.per_node))
        return max(0.0, self.wait() * (nodes ** self.exponent if self.exponent else 1.0))

    def expected_wait(self, cores: int) -> float:
        """The wait model's expectation for a pilot of ``cores`` — what a user would quote."""
        if self.mean_wait is None:
            return 0.0
        nodes = max(1, math.ceil(cores / self.per_node))
        return self.mean_wait * (nodes ** self.exponent if self.exponent else 1.0)

    def draws_failure(self) -> bool:
        """Whether the attempt about to start here fails (probability ``truth.fail``)."""
        return self.fail > 0 and (self.fail >= 1 or self.fail_rng.random() < self.fail)

    def draw_speed(self) -> float:
        """Instructions per second of one slot: IPC × clock (floored to stay positive)."""
        return max(0.05, self.ipc()) * max(0.1, self.clock()) * GHZ


class _DataTruth:
    """A bag's data as it really moves in one run (module docstring): each site's true transfer
    times, when its shared inputs were first sent and arrive, and what it all cost."""

    def __init__(self, model: TransferModel, sites: list[Site], priced: bool):
        self.model = model
        self.times: list[DataTimes] = [model.times(s.name) for s in sites]
        self.names = [s.name for s in sites]
        self.first: list[float | None] = [None] * len(sites)   # the site's first binding
        self.ready: list[float | None] = [None] * len(sites)   # its shared inputs there
        self.fetches = model.out_bytes > 0
        self._staged: dict[int, tuple[int, float]] = {}         # task -> (site, seconds waiting for inputs)
        self._cost = DataCost(priced)

    def stage(self, task: int, x: int, now: float) -> float:
        """The task is bound to site x at ``now``: when it can start executing there."""
        d, cost = self.times[x], self._cost
        mb = self.model.own_in_bytes / MB
        if self.ready[x] is None:            # a cold site: the shared inputs leave first
            self.first[x], self.ready[x] = now, now + d.shared_in
            mb += self.model.shared_bytes / MB
        begin = max(now, self.ready[x]) + d.own_in
        self._staged[task] = (x, begin - now)
        cost.mb_in[self.names[x]] = cost.mb_in.get(self.names[x], 0.0) + mb
        return begin

    def fetch(self, task: int, now: float) -> float:
        """The task's outputs leave its site at ``now``: when they are home."""
        x = self._staged[task][0]
        cost = self._cost
        cost.mb_out[self.names[x]] = cost.mb_out.get(self.names[x], 0.0) + self.model.out_bytes / MB
        return now + self.times[x].out

    def done(self, task: int) -> None:
        """The task is done: count its data time (inputs waited for, outputs brought home)."""
        x, waited = self._staged[task]
        self._cost.seconds += waited + (self.times[x].out if self.fetches else 0.0)
        self._cost.tasks += 1

    def seconds_at(self, x: int, at: float) -> float:
        """D(x) as this run's truth makes it for a task bound to x at ``at``: its own inputs and
        outputs, and the shared inputs' trip if x had none at ``at`` (what is left of it if they
        were on their way) — what the re-selection audit counts."""
        d, first = self.times[x], self.first[x]
        shared = d.shared_in if first is None or first > at else max(0.0, self.ready[x] - at)
        return d.own_in + shared + d.out

    def cost(self) -> DataCost:
        c = self._cost
        return DataCost(c.priced, c.seconds, c.tasks, dict(c.mb_in), dict(c.mb_out))


@dataclass
class SimPilot:
    """What the simulator knows of a pilot, including what the engine cannot: its true speed."""

    id: int
    site: int
    cores: int
    submitted: float
    start: float          # drawn acquisition time (kept even if the pilot is cancelled)
    speed: float          # instructions per second on its slots
    cancelled: bool = False
    started: bool = False
    queued: bool = False  # in a QueueSite: its start emerges from the schedule (start = inf until then)
    tx: float = 0.0       # the true T_x of one of the bag's tasks on its slots
    walltime: float = math.inf   # what it asked for: the simulated scheduler kills it then


@dataclass
class DataCost:
    """What moving a bag's data cost in one simulated run (a bag with ``[bag.data]`` sizes)."""

    priced: bool                    #: the engine priced the data (False: blind to it, the bytes moved all the same)
    seconds: float = 0.0            #: over the tasks done: waiting for their inputs + bringing their outputs home
    tasks: int = 0                  #: tasks done (what ``seconds`` is summed over)
    mb_in: dict[str, float] = field(default_factory=dict)    #: per site: inputs sent (every binding, shared once)
    mb_out: dict[str, float] = field(default_factory=dict)   #: per site: outputs brought home

    def as_dict(self) -> dict:
        return {"priced": self.priced, "seconds_per_task": self.seconds / self.tasks if self.tasks else 0.0,
                "mb_in": dict(self.mb_in), "mb_out": dict(self.mb_out)}


@dataclass
class SimResult:
    """Everything one simulated run produced."""

    bag: Bag
    sites: list[Site]
    strategy: str
    seed: int
    engine_clock: str
    metrics: WorkloadMetrics
    audit: ReselAudit
    engine: Engine
    pilots: list[SimPilot]
    decisions: list[Decision] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    steps: int = 0
    #: attempts that were running when their pilot reached its walltime (killed by the scheduler)
    walltime_kills: int = 0
    #: the same per pilot id
    kills_by_pilot: dict[int, int] = field(default_factory=dict)
    #: what moving the bag's data cost (None: the bag moves none)
    data: DataCost | None = None


def simulate(bag: Bag, sites: list[Site], strategy: Strategy | str = "model", *, seed: int = 0,
             clock: str = "base", record: bool = True, until: float = math.inf,
             estimate: str = "scheduler", quantile: float = 0.9, confidence: float = 0.9,
             rates=None, walltime: str = "limit", quarantine=None, price_data: bool = True,
             overdue=None) -> SimResult:
    """Run one bag over simulated sites with the engine; return metrics and the full record.

    Args:
        record: keep every event, action and decision (for the store and reports); the
            benchmark turns it off.
        until: stop the virtual clock there (tasks not done by then stay unfinished).
        estimate: where the pilots' predicted starts given to the engine come from —
            ``scheduler``, ``twin`` or ``history`` (:mod:`resel.sim.estimates`);
            ``quantile``/``confidence`` set the history bound.
        rates: the engine's T̂x rates (:class:`~resel.models.runtime.EngineRates` or a mapping
            site → SiteRate); default LIM with ``clock``.
        walltime, quarantine, overdue: the engine's walltime packing mode, black-hole rule and
            overdue rule (:mod:`resel.walltime`, :mod:`resel.blackhole`, :mod:`resel.engine_overdue`).
        price_data: the engine prices the bag's data (``[bag.data]``, :mod:`resel.transfer`)
            with the sites' ``bandwidth``; False: it decides blind to it (the bytes still move).

    The same as ``Simulation(...).run(until)`` then ``.result()``.
    """
    with collector_paused():   # the result's metrics too
        sim = Simulation(bag, sites, strategy, seed=seed, clock=clock, record=record, estimate=estimate,
                         quantile=quantile, confidence=confidence, rates=rates, walltime=walltime,
                         quarantine=quarantine, price_data=price_data, overdue=overdue)
        sim.run(until)
        return sim.result()


class Simulation:
    """One bag over simulated sites, in virtual time, that can be stepped.

    Building it warms the trace-driven sites up (their queues run until just before 0) and
    submits the bag at 0; :meth:`step` then handles one event, :meth:`run` every event up to
    a time (resumable), :meth:`result` reads the outcome at any point. Every site's events —
    tasks, pilots, timers, and the trace-driven queues' arrivals, ends and passes — are in one
    :class:`~resel.sim.core.Environment`, ordered at equal times by :mod:`resel.sim.core`'s
    priorities: task ends, job ends, pilot ends, timers, arrivals, scheduling passes, pilot
    starts.
    """

    def __init__(self, bag: Bag, sites: list[Site], strategy: Strategy | str = "model", *, seed: int = 0,
                 clock: str = "base", record: bool = True, estimate: str = "scheduler",
                 quantile: float = 0.9, confidence: float = 0.9, rates=None, walltime: str = "limit",
                 quarantine=None, price_data: bool = True, overdue=None):
        self.bag, self.sites, self.seed, self.clock, self.record = bag, list(sites), seed, clock, record
        self.strategy = Strategy.parse(strategy) if isinstance(strategy, str) else strategy
        # the data as it really moves, and as the engine prices it (docs/engine.md)
        truth = TransferModel.from_bag(bag, self.sites, truth=True)
        priced = TransferModel.from_bag(bag, self.sites) if price_data else None
        # not recording: the engine builds no Decision actions (they would only be dropped)
        self.engine = Engine(bag, self.sites, self.strategy, seed=seed, clock=clock, rates=rates,
                             walltime=walltime, quarantine=quarantine, decisions=record, data=priced,
                             overdue=overdue)
        self.data = _DataTruth(truth, self.sites, price_data) if truth is not None else None
        self.walltime_kills = 0
        self.kills_by_pilot: dict[int, int] = {}
        self.truths = [SiteTruth(s, seed) for s in self.sites]
        self._index = {s.name: i for i, s in enumerate(self.sites)}
        self._instructions = bag.profile.instructions
        #: a task table's weights (a task's true T_x on a pilot is the pilot's times its weight)
        self._weights = bag.weights
        self.env = env = Environment()
        self.pilots: list[SimPilot] = []
        self._live_attempt: dict[int, int] = {}
        self.decisions: list[Decision] = []
        self.log: list[tuple] = []
        self.steps = 0
        # the callbacks of the most frequent events, bound once
        self._on_task_end, self._on_timer = self._task_end, self._timer
        with collector_paused():
            self._start(estimate, quantile, confidence, seed)

    def _start(self, estimate: str, quantile: float, confidence: float, seed: int) -> None:
        """Warm the trace-driven sites up to just before 0, then submit the bag at 0."""
        if any(s.queue is not None for s in self.sites):   # warm-up: other users' jobs before the bag arrives
            self.env, self.queues = warm_queues(self.sites)
            for q in self.queues.values():
                q.on_pilot_start = self._queued_pilot_started
        else:
            self.queues = {}
        env = self.env
        env.now = 0.0
        menu = None
        if self.strategy.asks_waits:   # queue-aware (auto: where a start is estimated) weighs every
            # pilot size, the full one first
            menu = menu_estimates(estimate, self.sites, self.engine.probe_menu(), self.queues, self.truths,
                                  quantile=quantile, confidence=confidence, seed=seed)
            estimates = {name: waits[0] if waits else None for name, waits in menu.items()}
        else:
            estimates = start_estimates(estimate, self.sites, self.engine.probe_shapes(), self.queues, self.truths,
                                        quantile=quantile, confidence=confidence, seed=seed)
        first = BagSubmitted(time=0.0, wait_estimates=estimates, wait_menu=menu)
        if self.record:
            self.log.append((0.0, "BagSubmitted", first))
        self._apply(0.0, self.engine.handle(first))

    # ------------------------------------------------------------------ driving
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def finished(self) -> bool:
        """The bag is done (or nothing is left to happen)."""
        return self.engine.finished or not len(self.env)

    def step(self) -> None:
        """Handle the next event (of any site)."""
        self.env.step()

    def run(self, until: float = math.inf) -> None:
        """Handle every event up to ``until`` or until the bag is done; can be called again."""
        if not self.engine.finished:
            with collector_paused():
                self.env.run(until)    # _handle stops it once the bag is done

    def result(self) -> SimResult:
        """Metrics, audit and record of the run so far."""
        names = [s.name for s in self.sites]
        metrics = workload_metrics(self.engine.tasks, names, self.bag.task_cores or self.bag.cores_per_task)
        audit = (audit_reselection(self.decisions, self.pilots, self.truths, self.engine,
                                   self._instructions if self._weights is None else self.bag.instructions_of,
                                   self.data)
                 if self.record else ReselAudit())
        return SimResult(self.bag, list(self.sites), self.strategy.name, self.seed, self.clock, metrics, audit,
                         self.engine, self.pilots, self.decisions, self.log, self.steps, self.walltime_kills,
                         dict(self.kills_by_pilot), None if self.data is None else self.data.cost())

    # ------------------------------------------------------------------ the engine's side
    def _handle(self, now: float, event) -> None:
        self.steps += 1
        if self.record:
            self.log.append((now, type(event).__name__, event))
        self._apply(now, self.engine.handle(event))
        if self.engine.finished:
            self.env.stop()

    def _apply(self, now: float, actions: list) -> None:
        env, pilots, record = self.env, self.pilots, self.record
        schedule, live, task_end = env.schedule, self._live_attempt, self._on_task_end
        for act in actions:
            kind = type(act)
            if kind is DispatchTask:
                live[act.task] = act.attempt
                pilot = pilots[act.pilot]
                truth = self.truths[pilot.site]
                # it executes once its inputs are there (a bag that moves data), else at once
                begin = now if self.data is None else self.data.stage(act.task, pilot.site, now)
                tx = pilot.tx if self._weights is None else pilot.tx * self._weights[act.task]
                if truth.fail and truth.draws_failure():   # ends non-zero, at fail_after at most
                    schedule(begin + min(truth.fail_after, tx), TASK_END, task_end, (act.task, act.attempt, True))
                else:
                    schedule(begin + tx, TASK_END, task_end, (act.task, act.attempt))
                if record:
                    self.log.append((now, "DispatchTask", act))
                continue
            elif kind is SetTimer:
                schedule(act.at, TIMER, self._on_timer, (act.task, act.attempt, act.site))
            elif kind is Decision:
                if record:
                    self.decisions.append(act)
            elif kind is CancelTask:
                self._live_attempt.pop(act.task, None)
            elif kind is SubmitPilot:
                x = self._index[act.site]
                truth = self.truths[x]
                if x in self.queues:
                    pilot = SimPilot(act.pilot, x, act.cores, now, math.inf, truth.draw_speed(), queued=True)
                else:
                    pilot = SimPilot(act.pilot, x, act.cores, now, now + truth.draw_wait(act.cores),
                                     truth.draw_speed())
                pilot.tx = self._instructions * truth.kappa / pilot.speed    # a task's true T_x on it
                pilot.walltime = act.walltime
                pilots.append(pilot)
                if pilot.queued:
                    self.queues[x].submit_pilot(act.pilot, act.cores, act.walltime)
                else:
                    env.schedule(pilot.start, STARTED, self._pilot_start, act.pilot)
            elif kind is CancelPilot:
                pilot = pilots[act.pilot]
                pilot.cancelled = True
                if pilot.queued:
                    self.queues[pilot.site].release_pilot(act.pilot)
            if record and kind is not Decision:
                self.log.append((now, kind.__name__, act))

    # ------------------------------------------------------------------ events
    def _queued_pilot_started(self, pid: int, now: float) -> None:
        """A trace-driven site's pass started one of resel's pilots: the engine hears of it
        after every pass of the instant."""
        self.pilots[pid].start = now
        self.env.schedule(now, STARTED, self._pilot_start, pid)

    def _task_end(self, now: float, payload: tuple) -> None:
        task, attempt = payload[0], payload[1]
        live = self._live_attempt
        if live.get(task) != attempt:
            return
        del live[task]
        # _handle, inline: the most frequent event
        data = self.data
        if len(payload) > 2:   # drawn to fail (truth.fail)
            event = TaskFailed(time=now, task=task, attempt=attempt, reason="exit 1")
        elif data is not None and data.fetches:   # its outputs now travel home
            event = TaskFetching(time=now, task=task, attempt=attempt)
        else:
            event = TaskFinished(time=now, task=task, attempt=attempt)
        self.steps += 1
        if self.record:
            self.log.append((now, type(event).__name__, event))
        engine = self.engine
        self._apply(now, engine.handle(event))
        if data is not None and len(payload) == 2:
            self._after_execution(now, task, attempt)
        if engine.finished:
            self.env.stop()

    def _after_execution(self, now: float, task: int, attempt: int) -> None:
        """An attempt of a bag that moves data finished executing: if the engine took the end,
        its outputs travel home (TaskDelivered once they are there), or it is done."""
        rec = self.engine.tasks[task]
        if rec.attempt != attempt:
            return
        if rec.state is TaskState.FETCHING:
            self.env.schedule(self.data.fetch(task, now), TASK_END, self._delivered, (task, attempt))
        elif rec.state is TaskState.DONE:
            self.data.done(task)

    def _delivered(self, now: float, payload: tuple[int, int]) -> None:
        """A fetched attempt's outputs are home."""
        task, attempt = payload
        self._handle(now, TaskDelivered(time=now, task=task, attempt=attempt))
        rec = self.engine.tasks[task]
        if rec.attempt == attempt and rec.state is TaskState.DONE:
            self.data.done(task)

    def _timer(self, now: float, payload: tuple[int, int, str | None]) -> None:
        self._handle(now, TimerFired(time=now, task=payload[0], attempt=payload[1], site=payload[2]))

    def _pilot_start(self, now: float, pid: int) -> None:
        pilot = self.pilots[pid]
        if pilot.cancelled:
            return
        pilot.started = True
        self.env.schedule(now + pilot.walltime, PILOT_END, self._pilot_end, pid)
        self._handle(now, PilotStarted(time=now, pilot=pid))

    def _pilot_end(self, now: float, pid: int) -> None:
        pilot = self.pilots[pid]
        if pilot.cancelled:
            return
        pilot.cancelled = True
        if pilot.queued:
            self.queues[pilot.site].release_pilot(pid)
        record = self.engine.pilots.get(pid)
        if record is not None and not record.state.final:
            self.walltime_kills += len(record.tasks)   # killed by the scheduler at its walltime
            if record.tasks:
                self.kills_by_pilot[pid] = len(record.tasks)
        self._handle(now, PilotEnded(time=now, pilot=pid, reason="walltime"))


def audit_reselection(decisions: list[Decision], pilots: list[SimPilot], truths: list[SiteTruth],
                      engine: Engine, instructions: float | Callable[[int], float],
                      data: _DataTruth | None = None) -> ReselAudit:
    """Judge each task's first re-selection against the oracle RESEL.

    The oracle knows what the engine could not: when the origin r would have been acquired
    (the drawn start of its earliest pilot submitted before the decision, even if that pilot
    was later cancelled) and the true T_x on r and on the slot of r' the task went to. Only
    decisions taken while r was still unacquired (a_r' < a_r, the thesis's setting) are judged.

    With ``data`` (a bag that moves data) the true times are T_x' = T_x + D, D as the run's
    transfers make it for a task bound to r at a_r and to r' at a_r' — the quantity the
    engine's T̂x' predicts (the decision records carry T̂x'), so RESEL stays argmin(a + T_x').

    ``instructions``: every task's, or (a task table) a function of the task's index.
    """
    audit = ReselAudit()
    site_index = {s.name: i for i, s in enumerate(engine.sites)}
    seen: set[int] = set()
    by_site: dict[int, list[SimPilot]] = {}
    for p in pilots:
        by_site.setdefault(p.site, []).append(p)
    for d in decisions:
        if not d.kind.startswith("reselect") or d.task in seen:
            continue
        seen.add(d.task)
        audit.decisions += 1
        r, r2 = site_index[d.origin], site_index[d.target]
        candidates = [p for p in by_site.get(r, [])
                      if p.submitted <= d.time and d.time < p.start < math.inf]   # unknown start: not judged
        if d.a_r is not None or not candidates or d.a_r2 is None:
            continue
        origin_pilot = min(candidates, key=lambda p: p.start)
        task = engine.tasks[d.task]
        attempt = next(a for a in task.attempts if a.site == r2 and a.start == d.time)
        alt_pilot = pilots[attempt.pilot]
        instr = instructions(d.task) if callable(instructions) else instructions
        tx_r = instr * truths[r].kappa / origin_pilot.speed
        tx_r2 = instr * truths[r2].kappa / alt_pilot.speed
        if data is not None:
            tx_r += data.seconds_at(r, origin_pilot.start)
            tx_r2 += data.seconds_at(r2, d.a_r2)
        # a_r' as the engine logged and used it: when the task got its slot on r'
        audit.add(judge(tx_r, tx_r2, d.tx_r, d.tx_r2, origin_pilot.start, d.a_r2))
    return audit
