"""Tasks of different widths packed into one pilot (resel/engine_packing.py): a pilot is a pool
of cores and a task takes its own where they fit.

The case worked by hand: one 8-core site at 1 GHz (IPC 1, no wait: T_x = I / 1e9 s), the table
in its given order, widths and run times

    a 2 cores 4 s, b 1 core 1 s, c 1 core 2 s, d 4 cores 3 s, e 2 cores 1 s.

Packed: a, b, c, d take 2 + 1 + 1 + 4 = 8 cores at 0 and e waits; b ends at 1 (1 core free, e
needs 2), c at 2 (2 free): e runs 2–3; d ends at 3, a at 4. TTC 4 s, at most 4 tasks at once.
One width per slot (every slot 4 cores wide, the widest task): 2 slots — a, b at 0; c 1–3;
d 3–6; e 4–5: TTC 6 s.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resel
from conftest import make_site
from resel.domain import Bag, Profile, TaskSpec
from resel.engine import Engine
from resel.engine_packing import UnitQueue, core_unit
from resel.events import BagSubmitted, DispatchTask, PilotStarted, SubmitPilot, TaskFinished
from resel.sim.oracle import oracle_bound
from resel.sim.simulation import simulate

#: (name, cores, seconds at 1 GHz)
CASE = [("a", 2, 4.0), ("b", 1, 1.0), ("c", 1, 2.0), ("d", 4, 3.0), ("e", 2, 1.0)]
#: by hand (module docstring): each task's (start, end), packed
PACKED = {"a": (0.0, 4.0), "b": (0.0, 1.0), "c": (0.0, 2.0), "d": (0.0, 3.0), "e": (2.0, 3.0)}
#: … and with every slot as wide as the widest task
ONE_WIDTH = {"a": (0.0, 4.0), "b": (0.0, 1.0), "c": (1.0, 3.0), "d": (3.0, 6.0), "e": (4.0, 5.0)}


def case_bag(widths: list[int] | None = None, order: str = "given") -> Bag:
    """The hand case as a table bag (``widths`` replace its cores)."""
    specs = tuple(TaskSpec(n, s * 1e9, cores=w) for (n, _, s), w in
                  zip(CASE, widths or [c for _, c, _ in CASE]))
    return Bag("pack", "run {task}", len(specs), max(t.cores for t in specs),
               Profile(sum(t.instructions for t in specs) / len(specs)), tasks=specs, order=order)


def spans(res) -> dict[str, tuple[float, float]]:
    return {CASE[t.id][0]: (t.attempts[-1].start, t.attempts[-1].end) for t in res.engine.tasks}


def test_core_unit_is_the_widths_gcd_and_one_width_keeps_its_slot():
    assert core_unit(case_bag()) == (1, (2, 1, 1, 4, 2))
    assert core_unit(case_bag([2, 4, 6, 2, 2])) == (2, (1, 2, 3, 1, 1))
    assert core_unit(case_bag([4] * 5)) == (4, None)                       # one width: slots as before
    assert core_unit(Bag("b", "run", 3, 2, Profile(1e9))) == (2, None)     # no table


def test_simulator_packs_the_hand_case():
    res = simulate(case_bag(), [make_site("s", 1.0, cores=8)], "model", seed=0)
    assert spans(res) == PACKED
    assert res.metrics.ttc_wkd == pytest.approx(4.0)
    (pilot,) = res.engine.pilots.values()
    assert pilot.slots * res.engine.slot_cores(0) == 8


def test_one_width_per_slot_runs_the_hand_case_in_two_slots():
    res = simulate(case_bag([4] * 5), [make_site("s", 1.0, cores=8)], "model", seed=0)
    assert spans(res) == ONE_WIDTH
    assert res.metrics.ttc_wkd == pytest.approx(6.0)


def test_engine_driven_by_hand_agrees():
    """The engine alone, events fed in the hand schedule's order: what it dispatches when."""
    eng = Engine(case_bag(), [make_site("s", 1.0, cores=8)], "model")
    acts = eng.handle(BagSubmitted(time=0.0))
    (sub,) = [a for a in acts if isinstance(a, SubmitPilot)]
    assert sub.cores == 8   # 10 cores of tasks wait: the site's 8, not 8 // 4 slots of 4
    now: dict[int, DispatchTask] = {}

    def dispatched(acts) -> set[str]:
        got = {a.task: a for a in acts if isinstance(a, DispatchTask)}
        now.update(got)
        return {CASE[t][0] for t in got}

    assert dispatched(eng.handle(PilotStarted(time=0.0, pilot=sub.pilot))) == {"a", "b", "c", "d"}
    ids = {name: i for i, (name, _, _) in enumerate(CASE)}

    def finish(name: str, t: float) -> set[str]:
        d = now[ids[name]]
        return dispatched(eng.handle(TaskFinished(time=t, task=d.task, attempt=d.attempt)))

    assert finish("b", 1.0) == set()      # 1 core free: e (2) waits
    assert finish("c", 2.0) == {"e"}
    assert finish("d", 3.0) == set() and finish("e", 3.0) == set()
    finish("a", 4.0)
    assert eng.finished and eng.done_count == 5


def test_pack_off_is_one_width_per_slot_as_before():
    """``pack=False`` (a live run stored before packing): 8 // 4 = 2 slots of 4 cores — the
    pilot asked for is 8 cores, and its start dispatches a and b only."""
    eng = Engine(case_bag(), [make_site("s", 1.0, cores=8)], "model", pack=False)
    (sub,) = [a for a in eng.handle(BagSubmitted(time=0.0)) if isinstance(a, SubmitPilot)]
    assert sub.cores == 8 and eng.slot_cores(0) == 4 and eng.inbox_slots("s", 0) is None
    got = [a.task for a in eng.handle(PilotStarted(time=0.0, pilot=sub.pilot)) if isinstance(a, DispatchTask)]
    assert got == [0, 1]


def test_a_narrow_task_behind_a_wide_one_takes_the_cores_it_cannot():
    """6 cores, widths 4, 4, 2 (4 s, 4 s, 1 s): the second 4 does not fit beside the first,
    the 2 behind it does — it runs 0–1 — and the second 4 runs 4–8."""
    specs = (TaskSpec("w1", 4e9, cores=4), TaskSpec("w2", 4e9, cores=4), TaskSpec("n", 1e9, cores=2))
    bag = Bag("p", "run", 3, 4, Profile(3e9), tasks=specs, order="given")
    res = simulate(bag, [make_site("s", 1.0, cores=6)], "model", seed=0)
    got = {t.id: (t.attempts[-1].start, t.attempts[-1].end) for t in res.engine.tasks}
    assert got == {0: (0.0, 4.0), 1: (4.0, 8.0), 2: (0.0, 1.0)}


def peak_cores(res, bag: Bag) -> list[tuple[int, int]]:
    """Per pilot that ran a task, (the most cores its attempts held at one instant, its cores),
    from every attempt's start and end (ends before starts at one instant)."""
    eng, out = res.engine, []
    widths = [t.cores for t in bag.tasks]
    for pid, pilot in eng.pilots.items():
        spans = [(a.start, a.end, widths[t.id]) for t in eng.tasks for a in t.attempts
                 if a.pilot == pid and a.end is not None]
        events = sorted([(s, 1, w) for s, _, w in spans] + [(e, 0, -w) for _, e, w in spans])
        held = peak = 0
        for _time, _kind, delta in events:
            held += delta
            peak = max(peak, held)
        if events:
            out.append((peak, pilot.slots * eng.slot_cores(pilot.site)))
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), strategy=st.sampled_from(["model", "model+reselect", "auto"]),
       rows=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.floats(1.0, 50.0)), min_size=2, max_size=40))
def test_cores_held_never_exceed_the_pilots_and_every_task_runs(seed, strategy, rows):
    """Random widths (1–8 cores) on the thesis sites: each pilot's attempts never hold more
    cores at once than it has, and every task ends done."""
    specs = tuple(TaskSpec(f"t{i}", s * 1e12, cores=w) for i, (w, s) in enumerate(rows))
    bag = Bag("p", "run", len(specs), max(w for w, _ in rows), Profile(sum(t.instructions for t in specs) / len(specs)),
              tasks=specs, order="largest")
    res = simulate(bag, resel.default_sites(), strategy, seed=seed, record=False)
    assert res.metrics.done == len(specs)
    for peak, cores in peak_cores(res, bag):
        assert peak <= cores


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["append", "appendleft", "pop", "popleft", "del", "remove"]),
                              st.integers(0, 9)), max_size=60))
def test_a_waiting_queue_keeps_its_units_sum(ops):
    """Whatever the engine does to a site's queue, ``units`` is the sum of its tasks' units."""
    per = (1, 2, 4, 1, 3, 2, 8, 1, 1, 5)
    q = UnitQueue([6, 1], per)
    for op, tid in ops:
        if op in ("append", "appendleft"):
            getattr(q, op)(tid)
        elif op in ("pop", "popleft") and q:
            getattr(q, op)()
        elif op == "del" and q:
            del q[tid % len(q)]
        elif op == "remove" and tid in q:
            q.remove(tid)
        assert q.units == sum(per[t] for t in q)


def test_the_oracle_still_bounds_a_packed_bag():
    """The hand case: taken one width per slot (2 slots of 4 cores) the oracle said 11 s of work
    over 2 slots, 5.5 s — above the packed run's 4 s. Every task as narrow as the narrowest
    (1 core: 8 slots), the bound is its largest task, 4 s, which the packed run meets."""
    site = make_site("s", 1.0, cores=8)
    assert oracle_bound(case_bag(), [site], 0, 1).ttc == pytest.approx(4.0, rel=1e-6)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cap=st.sampled_from([8, 64]),
       rows=st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.floats(1.0, 50.0)), min_size=2, max_size=40))
def test_no_packed_run_beats_the_oracle(seed, cap, rows):
    """Random widths on the thesis sites, supercomputer pilots capped at ``cap`` cores."""
    import dataclasses
    sites = [s if s.pilot.mode != "single" else dataclasses.replace(s, pilot=dataclasses.replace(s.pilot, max_cores=cap))
             for s in resel.default_sites()]
    specs = tuple(TaskSpec(f"t{i}", n * 1e12, cores=w) for i, (w, n) in enumerate(rows))
    bag = Bag("p", "run", len(specs), max(w for w, _ in rows), Profile(sum(t.instructions for t in specs) / len(specs)),
              tasks=specs, order="largest")
    runs = [simulate(bag, sites, s, seed=seed, record=False) for s in ("model+reselect", "auto")]
    counts: dict[str, int] = {}
    for r in runs:
        for p in r.engine.pilots.values():
            counts[sites[p.site].name] = counts.get(sites[p.site].name, 0) + 1
    bound = oracle_bound(bag, sites, seed, counts).ttc
    for r in runs:
        assert r.metrics.ttc_wkd >= bound - 1e-6 * bound


def test_a_packed_runs_costs_count_each_task_by_its_cores():
    """The hand case: one 8-core pilot held 0–4 s (32 core-s); its tasks used 2·4 + 1 + 2 +
    4·3 + 2·1 = 25 core-s: 7 core-s idle. Nothing failed: nothing thrown away."""
    from resel.metrics import run_costs
    res = simulate(case_bag(), [make_site("s", 1.0, cores=8)], "model", seed=0)
    costs = run_costs(res.engine, 4)
    (pilot,) = res.engine.pilots.values()
    assert (pilot.started, pilot.ended) == (0.0, 4.0)
    assert costs.idle_core_h * 3600 == pytest.approx(7.0) and costs.thrown_core_h == 0.0
    assert res.metrics.wasted_core_s == 0.0


def test_a_lost_attempt_wastes_its_own_cores():
    """A 4-core task's attempt lost after 2 s wastes 8 core-s; a 1-core one's, 2 (not the
    widest task's 4 each)."""
    from resel.domain import Bag as _Bag
    from resel.metrics import workload_metrics
    from resel.engine_books import Attempt, TaskRecord
    from resel.states import AttemptOutcome
    bag = _Bag("w", "run", 2, 4, Profile(1e9), tasks=(TaskSpec("wide", 1e9, cores=4), TaskSpec("narrow", 1e9, cores=1)))
    tasks = []
    for tid in (0, 1):
        t = TaskRecord(tid, 0)
        t.attempts = [Attempt(0, 0, 0.0, 2.0, AttemptOutcome.LOST), Attempt(0, 0, 2.0, 3.0, AttemptOutcome.DONE)]
        tasks.append(t)
    assert bag.task_cores == (4, 1)
    assert workload_metrics(tasks, ["s"], bag.task_cores).wasted_core_s == 2.0 * 4 + 2.0 * 1
    assert workload_metrics(tasks, ["s"], 4).wasted_core_s == 16.0   # one width: as before
