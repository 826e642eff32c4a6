"""The simulated backend: the engine driven in virtual time by a discrete-event loop.

The loop keeps simpy's skeleton — a heap of ``(time, priority, seq, kind, a, b)`` tuples whose
counter breaks ties first-in first-out, so runs are deterministic and entries are never
compared — specialised for speed: plain tuples, dispatch on ``kind``, no process objects.
At equal times, task ends come before pilot ends, timers and pilot starts, so freed cores are
seen before new decisions are made.

Each simulated site has its own truth, distinct from LIM's prediction (``Site.truth``): a
queue-wait draw per pilot (scaled by its node count), and per pilot (slot) a clock and an IPC,
so T_x = instructions · κ_true / (IPC · clock). Every random stream is seeded from the run
seed and the site name, so two strategies run with the same seed see the same waits for the
same pilots — a paired comparison, like the thesis's replay of its random runs.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from resel.backends.sim_estimates import menu_estimates, start_estimates
from resel.backends.simqueue import BG_ARRIVE, BG_END, QWAKE, QueueSite
from resel.domain import Bag, Site, Truth
from resel.engine import Engine
from resel.events import (
    BagSubmitted, CancelPilot, CancelTask, Decision, DispatchTask, PilotEnded,
    PilotStarted, SetTimer, SubmitPilot, TaskFinished, TimerFired,
)
from resel.metrics import ReselAudit, WorkloadMetrics, judge, workload_metrics
from resel.models.distributions import Dist
from resel.models.lim import GHZ
from resel.selection import Strategy

# event kinds, in the order they are handled at equal times: ends free cores first
TASK_END, PILOT_END, TIMER, PILOT_START = 0, 2, 3, 6     # BG_END 1, BG_ARRIVE 4, QWAKE 5: simqueue


class _SiteTruth:
    """Seeded samplers for one site's waits and slot speeds."""

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

    def draw_speed(self) -> float:
        """Instructions per second of one slot: IPC × clock (floored to stay positive)."""
        return max(0.05, self.ipc()) * max(0.1, self.clock()) * GHZ


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


def simulate(bag: Bag, sites: list[Site], strategy: Strategy | str = "model", *, seed: int = 0,
             clock: str = "base", record: bool = True, until: float = math.inf,
             estimate: str = "scheduler", quantile: float = 0.9, confidence: float = 0.9,
             rates=None) -> SimResult:
    """Run one bag over simulated sites with the engine; return metrics and the full record.

    Args:
        record: keep every event, action and decision (for the store and reports); the
            benchmark turns it off.
        until: stop the virtual clock there (tasks not done by then stay unfinished).
        estimate: where the pilots' predicted starts given to the engine come from —
            ``scheduler``, ``twin`` or ``history`` (:mod:`resel.backends.sim_estimates`);
            ``quantile``/``confidence`` set the history bound.
        rates: the engine's T̂x rates (:class:`~resel.models.runtime.EngineRates` or a mapping
            site → SiteRate); default LIM with ``clock``.
    """
    strat = Strategy.parse(strategy) if isinstance(strategy, str) else strategy
    engine = Engine(bag, sites, strat, seed=seed, clock=clock, rates=rates)
    truths = [_SiteTruth(s, seed) for s in sites]
    index = {s.name: i for i, s in enumerate(sites)}
    instructions = bag.profile.instructions
    heap: list[tuple] = []
    seq = 0
    pilots: list[SimPilot] = []
    live_attempt: dict[int, int] = {}
    decisions: list[Decision] = []
    log: list[tuple] = []
    push = heapq.heappush

    def push_queue_event(time: float, kind: int, site_index: int, payload) -> None:
        nonlocal seq
        seq += 1
        push(heap, (time, kind, seq, site_index, payload))

    queues = {i: QueueSite(i, s, push_queue_event) for i, s in enumerate(sites) if s.queue is not None}
    for q in queues.values():
        q.prime()

    def pilots_started(now: float, started: list[int]) -> None:
        nonlocal seq
        for pid in started:
            pilots[pid].start = now
            seq += 1
            push(heap, (now, PILOT_START, seq, pid, 0))

    def apply(now: float, actions: list) -> None:
        nonlocal seq
        for act in actions:
            kind = type(act)
            if kind is DispatchTask:
                pilot = pilots[act.pilot]
                tx = instructions * truths[pilot.site].kappa / pilot.speed
                live_attempt[act.task] = act.attempt
                seq += 1
                push(heap, (now + tx, TASK_END, seq, act.task, act.attempt))
            elif kind is SetTimer:
                seq += 1
                push(heap, (act.at, TIMER, seq, act.task, act.attempt))
            elif kind is Decision:
                if record:
                    decisions.append(act)
            elif kind is CancelTask:
                live_attempt.pop(act.task, None)
            elif kind is SubmitPilot:
                x = index[act.site]
                truth = truths[x]
                if x in queues:
                    pilots.append(SimPilot(act.pilot, x, act.cores, now, math.inf, truth.draw_speed(), queued=True))
                    pilots_started(now, queues[x].submit_pilot(act.pilot, act.cores, act.walltime, now))
                else:
                    start = now + truth.draw_wait(act.cores)
                    pilots.append(SimPilot(act.pilot, x, act.cores, now, start, truth.draw_speed()))
                    seq += 1
                    push(heap, (start, PILOT_START, seq, act.pilot, 0))
            elif kind is CancelPilot:
                pilot = pilots[act.pilot]
                pilot.cancelled = True
                if pilot.queued:
                    pilots_started(now, queues[pilot.site].release_pilot(act.pilot, now))
            if record and kind is not Decision:
                log.append((now, kind.__name__, act))

    def queue_event(now: float, kind: int, site_index: int, payload) -> None:
        q = queues[site_index]
        if kind == BG_ARRIVE:
            pilots_started(now, q.on_arrive(now, payload))
        elif kind == BG_END:
            pilots_started(now, q.on_end(now, payload))
        else:
            pilots_started(now, q.on_wake(now))

    pop = heapq.heappop
    while heap and heap[0][0] < 0:        # warm-up: other users' jobs before the bag arrives
        now, kind, _, a, b = pop(heap)
        queue_event(now, kind, a, b)

    now = 0.0
    menu = None
    if strat.base == "queue":     # the queue-aware strategy weighs every pilot size, the full one first
        menu = menu_estimates(estimate, sites, engine.probe_menu(), queues, truths,
                              quantile=quantile, confidence=confidence, seed=seed)
        estimates = {name: waits[0] if waits else None for name, waits in menu.items()}
    else:
        estimates = start_estimates(estimate, sites, engine.probe_shapes(), queues, truths,
                                    quantile=quantile, confidence=confidence, seed=seed)
    first = BagSubmitted(time=0.0, wait_estimates=estimates, wait_menu=menu)
    if record:
        log.append((0.0, "BagSubmitted", first))
    apply(0.0, engine.handle(first))
    steps = 0
    while heap and not engine.finished:
        now, kind, _, a, b = pop(heap)
        if now > until:
            break
        if kind in (BG_ARRIVE, BG_END, QWAKE):
            queue_event(now, kind, a, b)
            continue
        if kind == TASK_END:
            if live_attempt.get(a) != b:
                continue
            del live_attempt[a]
            event = TaskFinished(time=now, task=a, attempt=b)
        elif kind == PILOT_START:
            pilot = pilots[a]
            if pilot.cancelled:
                continue
            pilot.started = True
            site = sites[pilot.site]
            seq += 1
            push(heap, (now + site.pilot.walltime, PILOT_END, seq, a, 0))
            event = PilotStarted(time=now, pilot=a)
        elif kind == PILOT_END:
            pilot = pilots[a]
            if pilot.cancelled:
                continue
            pilot.cancelled = True
            if pilot.queued:
                pilots_started(now, queues[pilot.site].release_pilot(a, now))
            event = PilotEnded(time=now, pilot=a, reason="walltime")
        else:
            event = TimerFired(time=now, task=a, attempt=b)
        steps += 1
        if record:
            log.append((now, type(event).__name__, event))
        apply(now, engine.handle(event))

    names = [s.name for s in sites]
    metrics = workload_metrics(engine.tasks, names, bag.cores_per_task)
    audit = audit_reselection(decisions, pilots, truths, engine, instructions) if record else ReselAudit()
    return SimResult(bag, list(sites), strat.name, seed, clock, metrics, audit, engine, pilots,
                     decisions, log, steps)


def audit_reselection(decisions: list[Decision], pilots: list[SimPilot], truths: list[_SiteTruth],
                      engine: Engine, instructions: float) -> ReselAudit:
    """Judge each task's first re-selection against the oracle RESEL.

    The oracle knows what the engine could not: when the origin r would have been acquired
    (the drawn start of its earliest pilot submitted before the decision, even if that pilot
    was later cancelled) and the true T_x on r and on the slot of r' the task went to. Only
    decisions taken while r was still unacquired (a_r' < a_r, the thesis's setting) are judged.
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
        attempt = next(a for a in task.attempts if a[0] == r2 and a[2] == d.time)
        alt_pilot = pilots[attempt[1]]
        tx_r = instructions * truths[r].kappa / origin_pilot.speed
        tx_r2 = instructions * truths[r2].kappa / alt_pilot.speed
        # the thesis's a_r' is when r' was acquired; the task starts there at the decision
        audit.add(judge(tx_r, tx_r2, d.tx_r, d.tx_r2, origin_pilot.start, d.time))
    return audit
