"""A bag of several widths counted by its tasks' cores where resel predicts (issue 26 §3/§4):
the queue-aware strategy's split and pilot sizes, ``resel plan``'s waves and the oracle's
hindsight.

The split case worked by hand: 16 tasks of 100 s — tasks 0–7 four cores wide, tasks 8–15 one
core — on two 16-core sites, ``a`` whose pilot starts at once and ``b`` whose pilot starts at
100 s. The bag takes 8 · 4 + 8 · 1 = 40 cores-worth of slots (units of 1 core).

Counted by cores (resel/selection.py ``_packed_split``: tasks largest first — here all alike,
so in the table's order —, each wave of a pilot the next tasks whose units fit it): by 200 s
``a`` runs two waves of 16 cores — the eight 4-core tasks (32) — and ``b`` one wave of 16 —
the eight 1-core tasks (8); before 200 s ``a`` has run only four 4-core tasks and ``b``
nothing. So tasks 0–7 go to ``a`` (a 16-core pilot) and 8–15 to ``b`` (an 8-core one: the units
of its tasks); taken at 2 % past 200 s (``LEAN``) nothing changes: ``a``'s third wave ends at 300.

Counted as if each of the 16 units were a task (what the menu did before): ``a`` alone runs
all 16 tasks in one wave by 100 s and takes the whole bag — 300 s in fact, where the split
ends at 200 s.
"""

from __future__ import annotations

import pytest

from conftest import make_site
from resel.domain import Bag, Profile, TaskSpec
from resel.engine import Engine
from resel.engine_packing import core_unit, packed_run
from resel.events import BagSubmitted, SubmitPilot
from resel.planning import SitePlan, plan
from resel.sim.oracle import hindsight
from test_packing import case_bag
from resel.selection import Strategy, queue_ranking, queue_split

#: 100 s at 1 GHz (IPC 1, κ 1)
I100 = 100e9


def split_bag() -> Bag:
    """Tasks 0–7 four cores wide, 8–15 one core, all 100 s at 1 GHz (the module's case)."""
    specs = tuple(TaskSpec(f"t{i}", I100, cores=4 if i < 8 else 1) for i in range(16))
    return Bag("split", "run {task}", 16, 4, Profile(I100), tasks=specs)


def test_the_split_counts_each_tasks_cores():
    bag = split_bag()
    unit, units = core_unit(bag)
    assert unit == 1 and sum(units) == 40
    options = [[(16, 0.0)], [(16, 100.0)]]
    origins, held, sizes = queue_split(Strategy.parse("queue"), bag, [0, 1], [100.0, 100.0], options, [units, units],
                                       bag.weights)
    assert origins == [0] * 8 + [1] * 8
    assert held == [0, 1] and sizes == {0: 16, 1: 8}


def test_units_counted_as_tasks_would_put_the_whole_bag_on_one_site():
    """The same menu with no units (one slot per task, as the menu counted before): a's 16
    slots take all 16 tasks in one wave — the pricing the fix removes."""
    bag = split_bag()
    origins, _, sizes = queue_split(Strategy.parse("queue"), bag, [0, 1], [100.0, 100.0], [[(16, 0.0)], [(16, 100.0)]])
    assert origins == [0] * 16 and sizes == {0: 16}


def test_without_a_wait_menu_a_site_is_ranked_by_the_bags_units():
    """``queue`` given one wait per site (no menu): a alone runs 40 units over a 16-unit
    pilot, ⌈40 / 16⌉ = 3 waves of 100 s — not 16 tasks in one."""
    from resel.models.lim import SiteRate
    bag = split_bag()
    rates = [SiteRate("a", 1.0, 1.0)]                     # κ 1 at 1 GHz: 100 s for 1e11 instructions
    assert queue_ranking(bag, [0], rates, [0.0], [16], None, [40]) == [(0, pytest.approx(300.0))]
    assert queue_ranking(bag, [0], rates, [0.0], [16]) == [(0, pytest.approx(100.0))]   # one slot per task


def test_the_largest_task_goes_to_the_fastest_site():
    """f (T̂x 100 s) and s (300 s), 4 cores each, both starting at once; tasks of 2, 1, 1, 1
    cores and weights 0.5, 0.5, 2.5, 0.5. Largest first: t2, t0, t1, t3 — f's first wave holds
    t2, t0, t1 (4 cores), 250 s (t2's); its second, t3, would end at 300. s runs t3 in 150 s.
    The horizon is 250 s: f takes t2, t0, t1 (a 4-core pilot), s t3 (1 core). In the table's
    order, the mean's waves put the largest where it fits the count, not the time."""
    specs = (TaskSpec("t0", 50e9, cores=2), TaskSpec("t1", 50e9, cores=1), TaskSpec("t2", 250e9, cores=1),
             TaskSpec("t3", 50e9, cores=1))
    bag = Bag("h", "run {task}", 4, 2, Profile(100e9), tasks=specs)
    assert bag.weights == pytest.approx((0.5, 0.5, 2.5, 0.5))
    _, units = core_unit(bag)
    origins, _, sizes = queue_split(Strategy.parse("queue"), bag, [0, 1], [100.0, 300.0], [[(4, 0.0)], [(4, 0.0)]],
                                    [units, units], bag.weights)
    assert origins == [0, 0, 0, 1] and sizes == {0: 4, 1: 1}


def test_the_engine_splits_a_mixed_bag_by_cores():
    """The engine's own menu (⌊16 · 2^(−j/2)⌋ cores: 16, 11, 8, 5, 4, and ⌈40 / w⌉ for the
    bag's 40 cores in w waves: 14, 10, 8, 7, 6, 5, 4 — none narrower than the widest task) with
    the waits of the module's case: a gets tasks 0–7 and asks for 16 cores, b 8–15 and 8 cores."""
    sites = [make_site("a", 1.0, cores=16), make_site("b", 1.0, cores=16)]
    eng = Engine(split_bag(), sites, "queue")
    menu = eng.probe_menu()
    assert [k for k, _, _ in menu[0]] == [16, 14, 11, 10, 8, 7, 6, 5, 4]
    acts = eng.handle(BagSubmitted(time=0.0, wait_menu={"a": [0.0] * 9, "b": [100.0] * 9}))
    assert [t.origin for t in eng.tasks] == [0] * 8 + [1] * 8
    assert sorted((a.site, a.cores) for a in acts if isinstance(a, SubmitPilot)) == [("a", 16), ("b", 8)]


def test_a_run_stored_before_replays_the_split_that_took_units_for_tasks():
    """``split_cores=False`` (a live run stored before the split counted cores): a's 16 units
    taken for 16 tasks — the whole bag on a, as that run split it."""
    sites = [make_site("a", 1.0, cores=16), make_site("b", 1.0, cores=16)]
    eng = Engine(split_bag(), sites, "queue", split_cores=False)
    eng.handle(BagSubmitted(time=0.0, wait_menu={"a": [0.0] * 5, "b": [100.0] * 5}))
    assert [t.origin for t in eng.tasks] == [0] * 16


# ------------------------------------------------------------------ the packing, counted ahead
def test_packed_run_is_the_hand_cases():
    """tests/test_packing.py's cases by hand: 8 units, tasks of 2, 1, 1, 4, 2 units and 4, 1, 2,
    3, 1 s → 4 s; 6 units, 4, 4, 2 units and 4, 4, 1 s → 8 s (the 2 beside the first 4, the
    second 4 after it); one width: ⌈5 / 2⌉ = 3 waves of 1 s."""
    assert packed_run([2, 1, 1, 4, 2], [4.0, 1.0, 2.0, 3.0, 1.0], [8]) == pytest.approx(4.0)
    assert packed_run([4, 4, 2], [4.0, 4.0, 1.0], [6]) == pytest.approx(8.0)
    assert packed_run([1] * 5, [1.0] * 5, [2]) == pytest.approx(3.0)
    # two pilots of 4: a (2) and b, c (1 each) in the first, d (4) in the second, e (2) after b, c
    assert packed_run([2, 1, 1, 4, 2], [4.0, 1.0, 2.0, 3.0, 1.0], [4, 4]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        packed_run([4], [1.0], [2])


def hand_probe(items):
    """The rows of sites that start every pilot at once (the scheduler's estimate 0)."""
    rows = []
    for site, sizes, tx in items:
        row = SitePlan(site=site.name, kind="simulated", pilot_cores=sizes[0][1], walltime=sizes[0][2], tx=tx,
                       scheduler_s=0.0)
        row.menu = [{"slots": k, "cores": c, "scheduler_s": 0.0} for k, c, _ in sizes]
        rows.append(row)
    return rows


def test_the_plan_packs_the_hand_case():
    """The hand case planned on its 8-core site: one 8-core pilot, packed: done at 4 s (the
    simulated run's TTC, tests/test_packing.py), not 3 waves of the mean 2.2 s on 2 slots of 4
    cores (6.6 s). Its 8 slots are the agent's (1 core each); the bag alone is ⌈10 / 8⌉ waves
    of the mean: 4.4 s."""
    doc = plan(case_bag(), [make_site("s", 1.0, cores=8)], strategy="model", probe=hand_probe)
    (row,) = doc["sites"]
    assert row["pilots"] == [8] and row["slots"] == 8
    assert row["packed"] == {"unit_cores": 1, "units": 10, "pilot_units": 8, "run_s": pytest.approx(4.0), "waves": 2}
    assert row["finish_s"] == pytest.approx(4.0) and doc["predicted_ttc_s"] == pytest.approx(4.0)
    assert doc["finish_p50_s"] == pytest.approx(4.0)        # no spread: every draw is the point
    assert row["ttc_s"] == pytest.approx(4.4)
    assert "packed by cores" in row["explain"]["why"][0] and row["explain"]["numbers"]["waves"] == 2


def test_a_plan_of_one_width_is_unchanged():
    """The hand case at one width (every task 4 cores): 2 slots, ⌈5 / 2⌉ = 3 waves of 2.2 s,
    no sooner than its largest task (4 s): 6.6 s, no packing."""
    doc = plan(case_bag([4] * 5), [make_site("s", 1.0, cores=8)], strategy="model", probe=hand_probe)
    (row,) = doc["sites"]
    assert row["packed"] is None and row["slots"] == 2 and row["finish_s"] == pytest.approx(6.6)


def test_hindsight_packs_a_bag_of_several_widths():
    """The hand case alone on its 8-core site: packed, 4 s (before: 3 waves of the mean on 2
    slots of the widest, 6.6 s); at one width still 6.6 s."""
    site = make_site("s", 1.0, cores=8)
    assert hindsight(case_bag(), [site], 0).finish_alone == {"s": pytest.approx(4.0)}
    assert hindsight(case_bag([4] * 5), [site], 0).finish_alone == {"s": pytest.approx(6.6)}


def test_a_pool_holding_several_sizes_is_priced_by_its_tasks():
    """The hand case on a pool of 8 cores (one 4-core pilot per task: 2 at a time), waits 0:
    each task its own T̂x in the table's order, the next pilot as one ends — a (4 s) and b (1 s)
    at 0, c at 1 (to 3), d at 3 (to 6), e at 4 (to 5): done at 6 s, tests/test_packing.py's
    one-width run. Priced by the mean T̂x (2.2 s) it said 4.4 s at most (its largest task, 4 s,
    as a floor)."""
    pool = make_site("p", 1.0, mode="per-task", cores=8)
    doc = plan(case_bag(), [pool], strategy="model", probe=hand_probe)
    (row,) = doc["sites"]
    assert row["tasks"] == 5 and row["packed"]["pool"] and row["packed"]["pilot_units"] == 2
    assert row["packed"]["run_s"] == pytest.approx(6.0) and row["finish_s"] == pytest.approx(6.0)
    assert doc["finish_p50_s"] == pytest.approx(6.0)        # no spread: every draw is the point
    assert "at a time, each its own T̂x" in row["explain"]["why"][0]


def test_a_packed_shares_largest_task_waits_the_drawn_wait():
    """A packed share's draws wait the wait's law, not its point estimate: the hand case on its
    8-core site whose point estimate is 100 s but whose wait is known to be 10 s (the quantiles
    a corrected estimate gives): P50 = 10 + the packed 4 s. Before, the largest task's floor took
    the point wait: 100 + 4 s."""
    def probe(items):
        rows = hand_probe(items)
        for r in rows:
            r.scheduler_s = 100.0
            for e in r.menu:
                e["scheduler_s"] = 100.0
                e["wait_quantiles"] = {"0.05": 10.0, "0.5": 10.0, "0.9": 10.0, "0.95": 10.0}
        return rows
    doc = plan(case_bag(), [make_site("s", 1.0, cores=8)], strategy="model", probe=probe)
    (row,) = doc["sites"]
    assert row["finish_s"] == pytest.approx(104.0)           # the point: the point wait + 4 s
    assert row["finish_p50"] == pytest.approx(14.0) and doc["finish_p50_s"] == pytest.approx(14.0)
