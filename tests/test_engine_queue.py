"""Hand-ahead (QUEUED tasks), requeued pilots, agents relaunched under the same job, and a
cancelled bag: the engine's side of issue 13 §0b.

The engine is pure, so these tests drive it with events; the randomized test plays the agent's
rules (docs/agent.md: take inbox files oldest first while a slot is free, honour a cancel of a
file still in the inbox) against it and checks the books after every event.
"""

from __future__ import annotations

import heapq
import random

import pytest

from conftest import make_bag, make_site
from resel.engine import Engine
from resel.events import (
    BagCancelled, BagDone, BagSubmitted, CancelPilot, CancelTask, Decision, DecisionKind, DispatchTask,
    PilotRequeued,
    PilotStarted, SetTimer, SiteLost, SubmitPilot, TaskFinished, TaskLost, TaskStarted, TaskWithdrawn, TimerFired,
    WithdrawTask,
)
from resel.states import PilotState, TaskState


def of(actions, cls):
    return [a for a in actions if isinstance(a, cls)]


def check_books(engine: Engine) -> None:
    """Every count the engine keeps per site agrees with its pilots and tasks."""
    for x, book in enumerate(engine._books):
        pilots = [p for p in engine.pilots.values() if p.site == x]
        active = [p for p in pilots if p.state is PilotState.ACTIVE]
        pending = [p for p in pilots if p.state is PilotState.PENDING]
        assert book.free == sum(p.free for p in active)
        assert book.reserved == sum(p.reserved for p in active)
        assert book.pending_slots == sum(p.slots for p in pending)
        assert set(book.free_pilots) == {p.id for p in active if p.free > 0}
        handed = {t for p in pilots for t in p.queued}
        recalled = {t for t in handed if engine.tasks[t].state is TaskState.RECALLED}
        assert set(book.queued) == handed - recalled          # a recalled task is no longer offered
        assert book.recalled == len(recalled)
        for p in active:
            assert len(p.tasks) + p.reserved + p.free == p.slots + p.debt, vars(p) if hasattr(p, "__dict__") else p.id
            assert p.reserved <= len(p.queued)
        for p in pilots:
            if p.state.final:
                assert not p.queued
    assert engine._free_total == sum(book.free for book in engine._books)
    waiting = 0
    for task in engine.tasks:
        if task.state in (TaskState.QUEUED, TaskState.RECALLED):
            assert task.id in engine.pilots[task.pilot].queued
        elif task.state in (TaskState.RUNNING, TaskState.PROVISIONAL):
            assert task.id in engine.pilots[task.pilot].tasks
        waiting += task.state in (TaskState.WAITING, TaskState.QUEUED, TaskState.RECALLED)
    if not engine.finished:
        assert engine._waiting_total == waiting
        assert sum(b.incoming for b in engine._books) == sum(t >= 0 for t in engine._recalls.values())


def test_without_prefetch_nothing_is_handed_ahead():
    engine = Engine(make_bag(6), [make_site("a", 2.0, cores=2)], "model")
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=0))
    assert [(a.task, a.attempt) for a in of(out, DispatchTask)] == [(0, 1), (1, 1)]
    assert all(t.state is not TaskState.QUEUED for t in engine.tasks)


def test_a_busy_pilot_gets_one_task_per_slot_ahead_and_a_freed_slot_needs_no_dispatch():
    engine = Engine(make_bag(7), [make_site("a", 2.0, cores=2)], "model", prefetch=1)
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=0, site="a", cores=2, walltime=48 * 3600.0)]
    # the pilot just asked for is handed its first wave (its two slots), after its submission
    assert [(a.task, a.pilot) for a in of(out, DispatchTask)] == [(0, 0), (1, 0)]
    assert out.index(of(out, SubmitPilot)[0]) < out.index(of(out, DispatchTask)[0])
    assert [t.state for t in engine.tasks[:2]] == [TaskState.QUEUED] * 2
    # started: the first wave takes its slots (reserved for the agent to start them)
    out = engine.handle(PilotStarted(time=1.0, pilot=0))
    assert of(out, DispatchTask) == []
    pilot = engine.pilots[0]
    assert (pilot.free, pilot.reserved, list(pilot.queued)) == (0, 2, [0, 1])
    check_books(engine)
    # each start makes room in the queue: the second wave is handed ahead
    assert [a.task for a in of(engine.handle(TaskStarted(time=1.1, task=0, attempt=1)), DispatchTask)] == [2]
    assert [a.task for a in of(engine.handle(TaskStarted(time=1.1, task=1, attempt=1)), DispatchTask)] == [3]
    assert engine.tasks[0].state is TaskState.RUNNING and pilot.reserved == 0
    check_books(engine)
    # a slot frees: task 2 (queued) is the agent's to start; the engine queues task 4 behind it
    out = engine.handle(TaskFinished(time=4.0, task=0, attempt=1))
    assert of(out, DispatchTask) == []                     # nothing new: the queue is full
    assert pilot.reserved == 1 and pilot.free == 0
    out = engine.handle(TaskStarted(time=4.01, task=2, attempt=1))
    assert [a.task for a in of(out, DispatchTask)] == [4]
    assert engine.tasks[4].state is TaskState.QUEUED
    check_books(engine)
    # T_x of a queued task counts from its start, not from when it was handed ahead
    engine.handle(TaskFinished(time=7.01, task=2, attempt=1))
    last = engine.tasks[2].attempts[-1]
    assert (last.start, last.end, last.outcome) == (4.01, 7.01, "done")
    check_books(engine)


def _queued_on_fast_pool_starting(n_pool_pilots: int = 1):
    """fast (1 slot) runs task 0 with task 1 handed ahead; a pool pilot starts with a free slot."""
    fast = make_site("fast", 2.0, cores=1)
    pool = make_site("pool", 1.0, mode="per-task", target=True, cores=4)
    engine = Engine(make_bag(3), [fast, pool], "model+reselect", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))             # fast: 1 slot, task 0 runs
    engine.handle(TaskStarted(time=1.1, task=0, attempt=1))
    assert [t.id for t in engine.tasks if t.state is TaskState.QUEUED] == [1]   # one per slot; 2 waits
    pools = [p.id for p in engine.pilots.values() if engine.sites[p.site].name == "pool"][:n_pool_pilots]
    out = []
    for pid in pools:
        out += engine.handle(PilotStarted(time=2.0, pilot=pid))
    return engine, out


def test_reselection_asks_a_queued_task_back_and_moves_it_once_withdrawn():
    """A queued task still waits for r, but its agent may have claimed it since the last poll:
    a free target slot asks it back (WithdrawTask, no CancelTask) and takes it only once the
    driver says it was withdrawn unstarted (docs/engine.md, issue 26 item 5)."""
    engine, out = _queued_on_fast_pool_starting(2)
    assert [(a.task, a.site) for a in of(out, DispatchTask)] == [(2, "pool")]   # the waiting task first
    assert of(out, WithdrawTask) == [WithdrawTask(task=1, attempt=1, pilot=0, site="fast")]
    assert of(out, CancelTask) == []                           # nothing is killed on a guess
    assert engine.tasks[1].state is TaskState.RECALLED
    check_books(engine)
    out = engine.handle(TaskWithdrawn(time=2.5, task=1, attempt=1))
    assert engine.tasks[1].attempts[0].outcome == "withdrawn" and engine.tasks[1].attempts[0].end is None
    assert [(a.task, a.attempt, a.site) for a in of(out, DispatchTask)] == [(1, 2, "pool")]
    check_books(engine)


def test_a_task_given_back_after_its_site_was_lost_is_rebound_on_record():
    """Task 1 is asked back from fast; fast is lost before the answer. Withdrawn, it goes to
    the fastest usable site — with a site-lost decision, as fast's waiting tasks got when it
    went (before, it moved with none: the audit said it ran where it never did)."""
    engine, _ = _queued_on_fast_pool_starting(2)
    engine.handle(SiteLost(time=2.2, site="fast", reason="gone"))
    out = engine.handle(TaskWithdrawn(time=2.5, task=1, attempt=1))
    assert [(d.kind, d.task, d.origin, d.target) for d in of(out, Decision)] == [("site-lost", 1, "fast", "pool")]
    assert [(a.task, a.site) for a in of(out, DispatchTask)] == [(1, "pool")]
    check_books(engine)


def test_a_recalled_task_its_agent_had_started_stays_and_counts_from_its_start():
    """The agent claimed the task before the request reached it: TaskStarted answers, the task
    runs where it is (no second attempt anywhere), and the slot held for it is free again."""
    engine, out = _queued_on_fast_pool_starting(2)
    assert engine.tasks[1].state is TaskState.RECALLED
    engine.handle(TaskFinished(time=2.2, task=0, attempt=1))   # its slot freed: the agent took task 1
    out = engine.handle(TaskStarted(time=2.3, task=1, attempt=1))
    assert engine.tasks[1].state is TaskState.RUNNING and len(engine.tasks[1].attempts) == 1
    assert engine.tasks[1].attempts[0].start == 2.3
    assert of(out, DispatchTask) == [] and of(out, CancelTask) == []
    check_books(engine)
    # a late "withdrawn" for it (a driver that raced) changes nothing
    assert engine.handle(TaskWithdrawn(time=2.4, task=1, attempt=1)) == []
    check_books(engine)


def test_requeued_pilot_loses_what_ran_keeps_its_queue_and_starts_again():
    engine = Engine(make_bag(4), [make_site("a", 2.0, cores=2)], "model", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    for tid in (0, 1):
        engine.handle(TaskStarted(time=1.1, task=tid, attempt=1))
    assert [t.state for t in engine.tasks] == [TaskState.RUNNING] * 2 + [TaskState.QUEUED] * 2
    out = engine.handle(PilotRequeued(time=5.0, pilot=0, reason="requeued"))
    assert of(out, CancelTask) == [CancelTask(task=0, attempt=1, pilot=0, site="a"),
                                   CancelTask(task=1, attempt=1, pilot=0, site="a")]
    assert engine.pilots[0].state is PilotState.PENDING
    assert [t.state for t in engine.tasks] == [TaskState.WAITING] * 2 + [TaskState.QUEUED] * 2
    assert [t.losses for t in engine.tasks] == [1, 1, 0, 0]
    assert of(out, SubmitPilot) == []                          # its own slots come back when it restarts
    check_books(engine)
    assert engine.handle(PilotRequeued(time=5.5, pilot=0)) == []   # repeated: nothing
    out = engine.handle(PilotStarted(time=30.0, pilot=0))
    # the next incarnation starts the queued 2 and 3 first; 0 and 1 are handed ahead behind them
    assert of(out, DispatchTask) == []
    check_books(engine)
    handed = []
    for tid in (2, 3):
        handed += of(engine.handle(TaskStarted(time=30.1, task=tid, attempt=1)), DispatchTask)
    assert [(a.task, a.attempt) for a in handed] == [(0, 2), (1, 2)]
    for tid in (2, 3):
        engine.handle(TaskFinished(time=33.0, task=tid, attempt=1))
        check_books(engine)
    for tid in (0, 1):
        engine.handle(TaskStarted(time=33.1, task=tid, attempt=2))
        out = engine.handle(TaskFinished(time=36.0, task=tid, attempt=2))
    assert of(out, BagDone) == [BagDone(time=36.0, done=4, failed=0)]


def test_a_relaunched_agent_reports_its_predecessors_attempts_lost():
    """TaskLost frees the slot on the living pilot and the task is dispatched there again."""
    engine = Engine(make_bag(2), [make_site("a", 2.0, cores=2)], "model", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskStarted(time=1.1, task=0, attempt=1))
    engine.handle(TaskStarted(time=1.1, task=1, attempt=1))
    out = engine.handle(TaskLost(time=9.0, task=0, attempt=1, reason="agent restarted"))
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=2, pilot=0, site="a")]
    assert engine.tasks[0].losses == 1 and engine.tasks[0].attempts[0].outcome == "lost"
    assert engine.handle(TaskLost(time=9.1, task=0, attempt=1)) == []   # stale: ignored
    check_books(engine)
    # a queued attempt the dead agent took (no start record read) is lost the same way
    engine2 = Engine(make_bag(3), [make_site("a", 2.0, cores=1)], "model", prefetch=1)
    engine2.handle(BagSubmitted(time=0.0))
    engine2.handle(PilotStarted(time=1.0, pilot=0))
    engine2.handle(TaskStarted(time=1.1, task=0, attempt=1))
    assert engine2.tasks[1].state is TaskState.QUEUED
    engine2.handle(TaskFinished(time=3.0, task=0, attempt=1))
    out = engine2.handle(TaskLost(time=9.0, task=1, attempt=1, reason="agent restarted"))
    # the freed slot takes it again at once (the front of the queue), task 2 queues behind it
    assert of(out, DispatchTask) == [DispatchTask(task=1, attempt=2, pilot=0, site="a"),
                                     DispatchTask(task=2, attempt=1, pilot=0, site="a")]
    assert engine2.tasks[1].state is TaskState.RUNNING and engine2.tasks[2].state is TaskState.QUEUED
    check_books(engine2)


def test_bag_cancelled_stops_everything_and_ignores_later_reports():
    engine = Engine(make_bag(5), [make_site("a", 2.0, cores=2), make_site("b", 1.0, cores=2)], "topk:2",
                    prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskStarted(time=1.1, task=0, attempt=1))
    engine.handle(TaskFinished(time=2.0, task=0, attempt=1))
    out = engine.handle(BagCancelled(time=3.0))
    assert {a.pilot for a in of(out, CancelPilot)} == {p.id for p in engine.pilots.values()}
    assert all(p.state.final for p in engine.pilots.values())
    assert [t.state for t in engine.tasks].count(TaskState.DONE) == 1
    assert all(t.state in (TaskState.DONE, TaskState.WAITING) for t in engine.tasks)
    assert engine.finished and engine.cancelled
    assert engine.handle(TaskFinished(time=4.0, task=2, attempt=1)) == []


#: the random runs' setups: the live default before issue 29 §2 (1 per slot, model+reselect onto
#: a slower pool: provisional moves only); a measured depth up to 4; and two equal targets under
#: topk:2+reselect, where a drained busy site is handed the other's tasks (moved for good)
SETUPS = {
    "prefetch-1": (lambda: [make_site("hpc", 2.0, cores=4), make_site("pool", 1.5, mode="per-task", target=True,
                                                                      cores=3)], "model+reselect", 1, None),
    "depth-4": (lambda: [make_site("hpc", 2.0, cores=4), make_site("pool", 1.5, mode="per-task", target=True,
                                                                   cores=3)], "model+reselect", 4, 2.0),
    "reselected-ahead": (lambda: [make_site("a", 2.0, cores=4, target=True), make_site("b", 2.0, cores=2, target=True),
                                  make_site("pool", 2.0, mode="per-task", target=True, cores=3)],
                         "topk:3+reselect", 4, 2.0),
}


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("lag", [0.0, 0.8])
@pytest.mark.parametrize("seed", range(12))
def test_random_runs_with_the_agents_rules_finish_every_task_exactly_once(seed, lag, setup):
    """Sites with re-selection, hand-ahead (SETUPS), random task lengths, pilot requeues and agent
    relaunches; an agent model that follows docs/agent.md. Books checked after every event.
    With ``lag`` the engine hears of a claim up to that many seconds late (a poll's period), so
    it asks back tasks their agents have started — none may run twice or be killed for it."""
    rng = random.Random(seed)
    make_sites, strategy, prefetch, cycle = SETUPS[setup]
    engine = Engine(make_bag(30), make_sites(), strategy, prefetch=prefetch, prefetch_cycle=cycle)
    heap: list = []
    seq = 0

    def push(t, *item):
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, *item))

    inbox: dict[int, list] = {}      # pilot -> [(task, attempt)] in arrival order
    running: dict[int, dict] = {}    # pilot -> {(task, attempt): end}
    slots: dict[int, int] = {}
    alive: dict[int, bool] = {}
    cancelled: set = set()
    killed_started: list = []
    orphans: dict[int, list] = {}
    started_seen: set = set()

    def engine_knew_started(a) -> bool:
        return (a.task, a.attempt) in started_seen
    done_runs: dict[int, int] = {}
    requeues = 0

    def act(actions, now):
        for a in actions:
            if isinstance(a, SubmitPilot):
                slots[a.pilot] = a.cores
                inbox[a.pilot], running[a.pilot], alive[a.pilot] = [], {}, False
                push(now + rng.uniform(0.5, 6.0), "start", a.pilot)
            elif isinstance(a, DispatchTask):
                inbox[a.pilot].append((a.task, a.attempt))
                push(now + 0.05, "claim", a.pilot)
            elif isinstance(a, WithdrawTask):   # the coordinator takes it only if still in the inbox
                key = (a.task, a.attempt)
                if key in inbox.get(a.pilot, []):
                    inbox[a.pilot].remove(key)
                    push(now + 0.05, "withdrawn", key)
                # else: the agent claimed it; its TaskStarted was reported (or is on its way)
            elif isinstance(a, CancelTask):
                cancelled.add((a.task, a.attempt))
                if (a.task, a.attempt) in running.get(a.pilot, {}) and engine.tasks[a.task].state is not \
                        TaskState.WAITING and a.attempt == engine.tasks[a.task].attempt:
                    pass   # a move-back or requeue of what the engine knows runs: allowed
                elif (a.task, a.attempt) in running.get(a.pilot, {}) and not engine_knew_started(a):
                    killed_started.append((a.task, a.attempt))
                key = (a.task, a.attempt)
                if key in inbox.get(a.pilot, []):
                    inbox[a.pilot].remove(key)
                elif key in running.get(a.pilot, {}):
                    running[a.pilot].pop(key)
                    push(now + 0.05, "claim", a.pilot)
            elif isinstance(a, CancelPilot):
                alive[a.pilot] = False
                inbox[a.pilot], running[a.pilot] = [], {}
            elif isinstance(a, SetTimer):
                push(a.at, "timer", (a.task, a.attempt))
            elif isinstance(a, Decision) and a.task >= 0:
                placed[a.task] = a.target       # where its decisions send it: the last one counts

    placed: dict[int, str] = {}

    def feed(event):
        if isinstance(event, TaskStarted):
            started_seen.add((event.task, event.attempt))
        out = engine.handle(event)
        check_books(engine)
        act(out, event.time)

    feed(BagSubmitted(time=0.0))
    while heap and not engine.finished:
        now, _, kind, what = heapq.heappop(heap)
        if kind == "start":
            if what in alive and not alive[what] and engine.pilots[what].state is PilotState.PENDING:
                alive[what] = True
                feed(PilotStarted(time=now, pilot=what))
                for key in orphans.pop(what, []):         # docs/agent.md: "lost", agent restarted
                    feed(TaskLost(time=now, task=key[0], attempt=key[1], reason="agent restarted"))
                push(now, "claim", what)
        elif kind == "claim" and alive.get(what):
            while inbox[what] and len(running[what]) < slots[what]:
                key = inbox[what].pop(0)
                running[what][key] = now + rng.uniform(1.0, 4.0)
                if lag:
                    push(now + rng.uniform(0.0, lag), "started", (what, key))
                else:
                    feed(TaskStarted(time=now, task=key[0], attempt=key[1]))
                push(running[what][key], "end", (what, key))
            if running[what] and rng.random() < 0.03 and requeues < 3:   # a requeue or a relaunch
                requeues += 1
                if rng.random() < 0.5:
                    alive[what] = False
                    orphans[what] = list(running[what])   # claimed: the next agent reports them lost
                    running[what] = {}
                    feed(PilotRequeued(time=now, pilot=what))
                    push(now + rng.uniform(1, 5), "start", what)
                else:
                    for key in list(running[what]):
                        running[what].pop(key)
                        feed(TaskLost(time=now, task=key[0], attempt=key[1], reason="agent restarted"))
                    push(now, "claim", what)
        elif kind == "end":
            pilot, key = what
            if alive.get(pilot) and running[pilot].get(key) == now:
                del running[pilot][key]
                done_runs[key[0]] = done_runs.get(key[0], 0) + 1
                feed(TaskFinished(time=now, task=key[0], attempt=key[1]))
                push(now, "claim", pilot)
        elif kind == "timer":
            feed(TimerFired(time=now, task=what[0], attempt=what[1]))
        elif kind == "withdrawn":
            feed(TaskWithdrawn(time=now, task=what[0], attempt=what[1]))
        elif kind == "started":   # read a poll late; a requeued incarnation's start is never read
            pilot, key = what
            if key in running.get(pilot, {}):
                feed(TaskStarted(time=now, task=key[0], attempt=key[1]))
    assert engine.finished and engine.done_count == 30
    assert done_runs == {i: 1 for i in range(30)}     # no task ran to completion twice
    assert not killed_started, killed_started         # no started attempt killed by a guess
    ran = {t.id: engine.sites[next(a.site for a in t.attempts if a.outcome == "done")].name for t in engine.tasks}
    assert ran == placed                              # every move on record, and none recorded that was not made


def test_a_target_keeps_its_pilot_for_the_tasks_it_asked_back():
    """The live case of tests/test_live.py's Torque run: a is full (its pilot pending, its tasks
    handed ahead), b's pilot finishes its own tasks and asks for a's. Its idle slots are promised
    to those tasks, so its pilot is not released before the answer; once they are withdrawn they
    run on b (provisionally: they still wait for a)."""
    a = make_site("a", 2.0, cores=4, target=True)
    b = make_site("b", 1.0, cores=2, target=True)
    engine = Engine(make_bag(6), [a, b], "topk:2+reselect", prefetch=1)
    engine.handle(BagSubmitted(time=0.0))
    pa = next(p.id for p in engine.pilots.values() if p.site == 0)
    pb = next(p.id for p in engine.pilots.values() if p.site == 1)
    engine.handle(PilotStarted(time=1.0, pilot=pb))
    own = [t.id for t in engine.tasks if t.origin == 1]
    for tid in own:
        engine.handle(TaskStarted(time=1.1, task=tid, attempt=1))
    out = []
    for tid in own:
        out += engine.handle(TaskFinished(time=3.0, task=tid, attempt=1))
    asked = of(out, WithdrawTask)
    assert len(asked) == 2 and {w.pilot for w in asked} == {pa}
    assert CancelPilot(pilot=pb, site="b") not in out          # kept for what it asked for
    check_books(engine)
    moved = []
    for w in asked:
        moved += engine.handle(TaskWithdrawn(time=3.2, task=w.task, attempt=w.attempt))
    assert sorted((d.task, d.site) for d in of(moved, DispatchTask)) == sorted((w.task, "b") for w in asked)
    assert all(engine.tasks[w.task].state is TaskState.PROVISIONAL for w in asked)
    check_books(engine)


def _two_targets(clock_a: float, **engine_kw) -> tuple[Engine, int]:
    """a (2 slots) and b (2 slots, its pilot still pending), both targets, ``topk:2+reselect``
    over 12 tasks at depth 2: a's pilot starts and runs its first two tasks, so its own share is
    all running or handed ahead (2 per slot) — nothing of its own waits."""
    a = make_site("a", clock_a, cores=2, target=True)
    b = make_site("b", 2.0, cores=2, target=True)
    engine = Engine(make_bag(12), [a, b], "topk:2+reselect", prefetch=2, **engine_kw)
    engine.handle(BagSubmitted(time=0.0))
    pa = next(p.id for p in engine.pilots.values() if p.site == 0)
    engine.handle(PilotStarted(time=1.0, pilot=pa))
    for tid in list(engine.pilots[pa].queued)[:2]:
        engine.handle(TaskStarted(time=1.1, task=tid, attempt=1))
    assert not engine._books[0].waiting and engine._books[1].waiting
    check_books(engine)
    return engine, pa


def test_a_drained_busy_target_is_handed_other_sites_tasks_it_moves_for_good():
    """Issue 29 §2: a site past its own share got one re-selected task per free slot per cycle
    whatever the depth. With equal clocks Ŵ(a, b) = T̂x(a) − T̂x(b) = 0: a free slot of a would
    move b's next waiting task for good, so a's depth takes it ahead of a slot as well."""
    engine, pa = _two_targets(2.0)
    waiting_b = list(engine._books[1].waiting)
    first_running = [t for t in engine.pilots[pa].tasks]
    engine.handle(TaskFinished(time=3.0, task=first_running[0], attempt=1))   # its slot: the next queued one
    started = next(iter(engine.pilots[pa].queued))
    out = engine.handle(TaskStarted(time=3.01, task=started, attempt=1))     # room for one more
    assert [(d.task, d.attempt, d.pilot, d.site) for d in of(out, DispatchTask)] == [(waiting_b[0], 1, pa, "a")]
    task = engine.tasks[waiting_b[0]]
    assert (task.state, task.origin) == (TaskState.QUEUED, 0)               # a's for good, not provisional
    assert [(d.kind, d.origin, d.target, d.window) for d in out if isinstance(d, Decision)] == [
        (DecisionKind.RESELECT_COMMIT, "b", "a", 0.0)]
    assert of(out, SetTimer) == []                                           # no window to close
    check_books(engine)


def test_a_task_a_target_would_run_only_provisionally_is_not_handed_ahead():
    """a slower than b: Ŵ(a, b) > 0, a free slot of a would run b's task provisionally, its window
    opening when it gets the slot — so none is handed ahead of a slot."""
    engine, pa = _two_targets(1.0)
    engine.handle(TaskFinished(time=30.0, task=next(iter(engine.pilots[pa].tasks)), attempt=1))
    out = engine.handle(TaskStarted(time=30.01, task=next(iter(engine.pilots[pa].queued)), attempt=1))
    assert of(out, DispatchTask) == [] and all(engine.tasks[t].origin == 1 for t in engine._books[1].waiting)
    check_books(engine)


def test_without_the_change_a_drained_target_takes_nothing_ahead_when_prefetch_is_zero():
    """The simulator (prefetch 0) hands nothing ahead, re-selected or not: its numbers stay."""
    a = make_site("a", 2.0, cores=2, target=True)
    b = make_site("b", 2.0, cores=2, target=True)
    engine = Engine(make_bag(12), [a, b], "topk:2+reselect")
    out = engine.handle(BagSubmitted(time=0.0))
    out += engine.handle(PilotStarted(time=1.0, pilot=0))
    out += engine.handle(TaskFinished(time=3.0, task=0, attempt=1))
    assert all(t.state is not TaskState.QUEUED for t in engine.tasks)


@pytest.mark.parametrize("tx, depth", [(None, 1), (0.25, 4), (0.0, 6), (0.4, 3), (3.0, 1)])
def test_the_depth_is_the_refill_cycle_over_the_measured_tx_between_one_and_the_cap(tx, depth):
    """prefetch_cycle 1.0, cap 6, one pilot of 2 slots: before a task is done, 1 per slot; after
    one done in T_x seconds, ⌈1.0 / T_x⌉ per slot (a slot busy for one cycle), capped at 6,
    the cap for a task seen to end as it started."""
    engine = Engine(make_bag(40), [make_site("a", 2.0, cores=2)], "model", prefetch=6, prefetch_cycle=1.0)
    engine.handle(BagSubmitted(time=0.0))
    pilot = engine.pilots[0]
    assert len(pilot.queued) == 2                                            # nothing measured: 1 per slot
    engine.handle(PilotStarted(time=1.0, pilot=0))
    for tid in (0, 1):
        engine.handle(TaskStarted(time=1.0, task=tid, attempt=1))
    assert list(pilot.queued) == [2, 3]
    if tx is not None:
        engine.handle(TaskFinished(time=1.0 + tx, task=0, attempt=1))
    engine.handle(TaskStarted(time=1.5, task=2, attempt=1))                  # the agent took the next
    assert len(pilot.queued) == depth * pilot.slots
    check_books(engine)


def test_a_fixed_prefetch_without_a_cycle_is_that_depth_from_the_start():
    engine = Engine(make_bag(40), [make_site("a", 2.0, cores=2)], "model", prefetch=4)
    engine.handle(BagSubmitted(time=0.0))
    assert len(engine.pilots[0].queued) == 8


def test_the_reselected_setup_does_hand_re_selected_tasks_ahead():
    """The random runs' "reselected-ahead" setup exercises what it is there for: some task is
    handed ahead to a pilot of a site that was not its origin (its decision says so)."""
    make_sites, strategy, prefetch, cycle = SETUPS["reselected-ahead"]
    engine = Engine(make_bag(30), make_sites(), strategy, prefetch=prefetch, prefetch_cycle=cycle)
    engine.handle(BagSubmitted(time=0.0))
    pa = next(p.id for p in engine.pilots.values() if p.site == 0)
    engine.handle(PilotStarted(time=1.0, pilot=pa))
    out = []
    t = 1.0
    while engine._books[0].waiting or len(engine.pilots[pa].queued) == 4:   # a drains its own share
        tid = next(iter(engine.pilots[pa].queued))
        out += engine.handle(TaskStarted(time=t, task=tid, attempt=1))
        t += 0.1
        out += engine.handle(TaskFinished(time=t, task=tid, attempt=1))
    commits = [d for d in out if isinstance(d, Decision) and d.kind is DecisionKind.RESELECT_COMMIT]
    assert commits and all(engine.tasks[d.task].pilot == pa for d in commits if engine.tasks[d.task].state
                           is TaskState.QUEUED)


def _drive(engine: Engine, started: set[int], horizon: float = 200.0) -> dict[int, int]:
    """Run the bag with agents that follow docs/agent.md on the pilots in ``started`` (the
    others stay pending for ever: an HTCondor pool that matches no more of our jobs). A
    WithdrawTask of a file no agent claimed is answered ``withdrawn``. Returns runs per task."""
    heap: list = []
    seq = 0
    inbox: dict[int, list] = {}
    running: dict[int, tuple | None] = {}
    runs: dict[int, int] = {}

    def push(t, *item):
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, *item))

    def act(actions, now):
        for a in actions:
            if isinstance(a, SubmitPilot):
                inbox[a.pilot], running[a.pilot] = [], None
                if a.pilot in started:
                    push(now + 1.0, "start", a.pilot)
            elif isinstance(a, DispatchTask):
                inbox[a.pilot].append((a.task, a.attempt))
                push(now, "claim", a.pilot)
            elif isinstance(a, WithdrawTask) and (a.task, a.attempt) in inbox[a.pilot]:
                inbox[a.pilot].remove((a.task, a.attempt))
                push(now + 0.1, "withdrawn", (a.task, a.attempt))

    def feed(event):
        act(engine.handle(event), event.time)
        check_books(engine)

    feed(BagSubmitted(time=0.0))
    while heap and not engine.finished and heap[0][0] < horizon:
        now, _, kind, what = heapq.heappop(heap)
        if kind == "start":
            feed(PilotStarted(time=now, pilot=what))
            push(now, "claim", what)
        elif kind == "claim" and engine.pilots[what].state is PilotState.ACTIVE and running[what] is None \
                and inbox[what]:
            key = inbox[what].pop(0)
            running[what] = key
            feed(TaskStarted(time=now, task=key[0], attempt=key[1]))
            push(now + 2.0, "end", what)
        elif kind == "end":
            key, running[what] = running[what], None
            runs[key[0]] = runs.get(key[0], 0) + 1
            feed(TaskFinished(time=now, task=key[0], attempt=key[1]))
            push(now, "claim", what)
        elif kind == "withdrawn":
            feed(TaskWithdrawn(time=now, task=what[0], attempt=what[1]))
    return runs


def test_a_free_slot_asks_back_what_waits_on_its_sites_pilot_that_never_starts():
    """Found by the crash soak (seed 5, bag 22): 32 tasks handed ahead to two pool pilots that
    never started (the pool matched no more jobs), while the site's two running pilots sat idle
    for 300 s. Without a prefetch those tasks would have waited in the site's queue and the free
    slots taken them; so the free slot asks them back and runs them. Expected from the
    definition: pilot 0 (started at 1 s) runs its 4 queued tasks to 9 s; its free slot asks
    back the end of pilot 1's queue (task 5), answered 0.1 s later, run 9.1-11.1; then pilot 1,
    with one task left and one slot free beside it, is surplus and withdrawn, its task given
    back in that decision (the engine's rule since the soak's first stall): 11.1-13.1."""
    site = make_site("hpc", 2.0, mode="per-task", max_pilots=2, cores=2)
    engine = Engine(make_bag(6), [site], "model", prefetch=4)
    runs = _drive(engine, started={0})
    assert engine.finished and engine.done_count == 6
    assert runs == {i: 1 for i in range(6)}
    assert {engine.tasks[i].attempts[-1].pilot for i in range(6)} == {0}
    assert [(t.attempts[-1].start, t.attempts[-1].end) for t in engine.tasks[4:]] == \
        [pytest.approx((11.1, 13.1)), pytest.approx((9.1, 11.1))]


def test_a_pools_pending_pilot_is_handed_nothing_ahead():
    """An HTCondor pool's agent reads a copy of its inbox: a task handed ahead to a pilot that
    has not started could come back only by its agent's answer (Site.agent_reads_a_copy). So
    its pending pilots get none; a started one gets its depth (here 4 per slot)."""
    from dataclasses import replace
    pool = replace(make_site("pool", 2.0, mode="per-task", max_pilots=2, cores=2), kind="htcondor")
    engine = Engine(make_bag(6), [pool], "model", prefetch=4)
    out = engine.handle(BagSubmitted(time=0.0))
    assert len(of(out, SubmitPilot)) == 2 and of(out, DispatchTask) == []
    out = engine.handle(PilotStarted(time=1.0, pilot=0))
    assert [(a.task, a.pilot) for a in of(out, DispatchTask)] == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)]
    # (one to the free slot, four ahead of it) and still nothing for the pending pilot 1
    assert all(a.pilot == 0 for a in of(out, DispatchTask))
    runs = _drive(Engine(make_bag(6), [pool], "model", prefetch=4), started={0})
    assert runs == {i: 1 for i in range(6)}
