"""The queue-aware strategy (issue 8): rank sites by predicted start + waves of T̂x, hold extra
pilots on the next best sites, and let re-selection recover from a wrong prediction.

Sites (no TOML): a (2 GHz, T̂x 5 s), b (1 GHz, T̂x 10 s), c (4 GHz, T̂x 2.5 s); single pilots,
none a re-selection target of its own — the strategy makes its held sites targets.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from conftest import make_bag, make_site
from resel.engine import Engine
from resel.errors import ReselError
from resel.events import BagSubmitted, CancelPilot, Decision, DispatchTask, PilotStarted, SubmitPilot
from resel.models.lim import site_rates
from resel.selection import Strategy, initial_assignment, predicted_ttc, queue_ranking

REPO = Path(__file__).resolve().parents[1]


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


@pytest.fixture
def abc():
    return [make_site("a", 2.0), make_site("b", 1.0), make_site("c", 4.0)]


def test_parse_queue_with_extra_sites():
    assert Strategy.parse("queue+reselect") == Strategy("queue", True, 2, 1)
    assert Strategy.parse("queue:2+reselect").extra == 2
    assert Strategy.parse("queue:0+reselect").name == "queue:0+reselect"
    assert Strategy.parse("queue:1").name == "queue"
    with pytest.raises(ReselError, match="whole number of extra sites"):
        Strategy.parse("queue:x")


def test_predicted_ttc_counts_waves_and_unknown_is_infinite():
    assert predicted_ttc(100.0, 10.0, tasks=8, slots=8) == 110.0
    assert predicted_ttc(100.0, 10.0, tasks=9, slots=8) == 120.0       # two waves
    assert predicted_ttc(None, 10.0, tasks=1, slots=1) == math.inf     # unreadable queue: last
    assert predicted_ttc(-5.0, 10.0, tasks=1, slots=1) == 10.0          # a start in the past is now


def test_ranking_trades_wait_against_speed(abc):
    """c is fastest but waits an hour; a waits 10 s: a ranks first, then c, then b."""
    bag = make_bag(4)
    rates = site_rates(abc, "base")
    r = [rates[s.name] for s in abc]
    ranking = queue_ranking(bag, [0, 1, 2], r, [10.0, 20.0, 3600.0])
    assert [i for i, _ in ranking] == [0, 1, 2]
    ranking = queue_ranking(bag, [0, 1, 2], r, [10.0, None, 6.0])
    assert [i for i, _ in ranking] == [2, 0, 1] and ranking[-1][1] == math.inf


def test_unknown_sites_are_not_held_and_all_unknown_is_an_error(abc):
    bag, rng = make_bag(2), random.Random(0)
    rates = [site_rates(abc, "base")[s.name] for s in abc]
    origins, held = initial_assignment(Strategy.parse("queue:2+reselect"), bag, [0, 1, 2], rates, rng,
                                       [5.0, None, 50.0])
    assert origins == [0, 0] and held == [0, 2]          # b could not be read: never held
    with pytest.raises(ReselError, match="none of the viable sites' queues could be read"):
        initial_assignment(Strategy.parse("queue+reselect"), bag, [0, 1, 2], rates, rng, [None, None, None])


def test_extra_pilot_is_held_and_cancelled_when_the_origin_starts(abc):
    """queue:1+reselect: a (best) gets the tasks, c holds an extra pilot for them; when a
    starts first it takes every task and c's pending pilot is withdrawn."""
    engine = Engine(make_bag(3), abc, "queue:1+reselect")
    out = engine.handle(BagSubmitted(time=0.0, wait_estimates={"a": 0.0, "b": 1e5, "c": 10.0}))
    assert {t.origin for t in engine.tasks} == {0}
    assert [(p.site, p.cores) for p in of(out, SubmitPilot)] == [("a", 3), ("c", 3)]
    assert engine.reselection_targets == ["c", "a"]      # fastest first
    out = engine.handle(PilotStarted(time=1.0, pilot=0))
    assert len(of(out, DispatchTask)) == 3
    assert [(c.pilot, c.site) for c in of(out, CancelPilot)] == [(1, "c")]


def test_wrong_prediction_recovered_by_reselection(abc):
    """The plan bet on a (predicted 0 s) but c starts first: c is faster (Ŵ < 0), so every
    task moves to c for good, and a's pilot is withdrawn."""
    engine = Engine(make_bag(3), abc, "queue+reselect")
    engine.handle(BagSubmitted(time=0.0, wait_estimates={"a": 0.0, "b": 1e5, "c": 10.0}))
    out = engine.handle(PilotStarted(time=30.0, pilot=1))
    moves = [d for d in of(out, Decision) if d.kind == "reselect-commit"]
    assert len(moves) == 3 and all(d.target == "c" for d in moves)
    assert [(c.pilot, c.site) for c in of(out, CancelPilot)] == [(0, "a")]


def test_without_reselect_no_extra_pilot(abc):
    engine = Engine(make_bag(3), abc, "queue")
    out = engine.handle(BagSubmitted(time=0.0, wait_estimates={"a": 0.0, "b": 1e5, "c": 10.0}))
    assert [p.site for p in of(out, SubmitPilot)] == ["a"]


def test_queue_aware_beats_reselection_alone_on_the_default_sites(default_sites):
    """On the thesis-like sites, where XSEDE waits are long for big bags, queue-aware +
    re-selection finishes the bag sooner than the thesis's re-selection alone (random +
    re-selection), paired seeds. The full table is benchmarks/eval_queue_aware.py's."""
    from resel.api import default_bag
    from resel.sim.simulation import simulate
    bag = default_bag().resized(256)
    for seed in range(3):
        alone = simulate(bag, default_sites, "reselect", seed=seed, record=False).metrics.ttc_wkd
        queue = simulate(bag, default_sites, "queue+reselect", seed=seed, record=False).metrics.ttc_wkd
        assert queue <= 0.8 * alone, (seed, queue, alone)


def test_simulated_start_estimates_from_three_sources():
    """At the bag's arrival each trace-driven site answers from its scheduler, its twin and its
    history; the twin is the QueueSite's own snapshot run forward, the history bound comes from
    other users' jobs that had started by then (nothing from the future)."""
    import math

    import resel
    from resel.sim.estimates import drawn_history, start_estimates
    from resel.sim.queuesite import QueueSite
    from resel.models.twin import twin_start
    from resel.sim.core import Environment

    sites = resel.load_sites(REPO / "examples" / "sites-traces-hpc.toml")
    env = Environment()
    queues = {i: QueueSite(i, s, env) for i, s in enumerate(sites)}
    for q in queues.values():
        q.prime()
    env.run(math.nextafter(0.0, -math.inf))   # warm-up, as the simulator does
    shapes = {i: (64, 86400.0) for i in queues}
    est = {src: start_estimates(src, sites, shapes, queues, [None] * 3, quantile=0.9, confidence=0.9)
           for src in ("scheduler", "twin", "history")}
    for i, s in enumerate(sites):
        assert est["twin"][s.name] == twin_start(queues[i].snapshot(0.0), 64, 86400.0).wait
        assert est["scheduler"][s.name] == queues[i].estimate_wait(64, 86400.0, 0.0)
        assert all(r.start <= 0.0 for r in queues[i].past_waits(0.0))
        assert est["history"][s.name] is None or est["history"][s.name] >= 0
    assert any(est["history"][s.name] is not None for s in sites)
    waits = drawn_history(resel.default_sites()[0], 28, seed=1)
    assert len(waits) == 200 and waits == drawn_history(resel.default_sites()[0], 28, seed=1)


def test_unknown_estimate_source_is_refused():
    from resel.sim.estimates import start_estimates
    with pytest.raises(ReselError, match="unknown wait estimate"):
        start_estimates("oracle", [], {}, {}, [])


def test_split_prefers_half_pilots_that_start_now_over_a_whole_machine_that_drains():
    """Two sites of 8 slots, T̂x 100 s: a full pilot waits 1000 s, half a pilot starts at
    once. Alone, a site finishes in 2 waves (200 s); split 4 + 4 on half pilots: 100 s."""
    from resel.selection import queue_split
    menu = [(8, 1000.0), (4, 0.0), (2, 0.0), (1, 0.0)]
    origins, held, sizes = queue_split(Strategy.parse("queue:0+reselect"), make_bag(8), [0, 1], [100.0, 100.0],
                                       [menu, menu])
    assert sorted(origins) == [0] * 4 + [1] * 4 and sizes == {0: 4, 1: 4} and held == [0, 1]


def test_split_keeps_one_site_when_another_is_slower_than_waiting(abc):
    """The fast site's half pilot in two waves beats anything the others can add."""
    from resel.selection import queue_split
    options = [[(4, 0.0), (2, 0.0)], [(4, None), (2, None)], [(4, 10_000.0), (2, 10_000.0)]]
    origins, held, sizes = queue_split(Strategy.parse("queue:1+reselect"), make_bag(8), [0, 1, 2],
                                       [100.0, 50.0, 100.0], options)
    assert origins == [0] * 8 and sizes[0] == 4
    assert held == [0, 2] and sizes[2] == 4          # c holds the extra pilot; b (unknown) never
    with pytest.raises(ReselError, match="could be read"):
        queue_split(Strategy.parse("queue"), make_bag(1), [0], [1.0], [[(1, None)]])


def test_engine_sizes_pilots_from_the_menu(abc):
    """BagSubmitted.wait_menu (aligned with probe_menu) decides the pilots the engine submits."""
    engine = Engine(make_bag(8), abc, "queue:0+reselect")
    menu = engine.probe_menu()
    # ⌊8 · 2^(−j/2)⌋ for j = 0, 1, …: 8, 5.66, 4, 2.83, 2, 1.41, 1 — each size once — and
    # ⌈8 / w⌉ for w = 1 … 16, the fewest slots for w waves: 8, 4, 3, 2, 2, 2, 2, 1, …
    assert [k for k, _, _ in menu[0]] == [8, 5, 4, 3, 2, 1]
    waits = {s.name: [1000.0, 1000.0, 0.0, 0.0, 0.0, 0.0] for s in abc}
    waits["b"] = [None] * 6
    out = engine.handle(BagSubmitted(time=0.0, wait_menu=waits, wait_estimates={"a": 1000.0, "c": 1000.0}))
    # c (T̂x 2.5 s) takes 4 tasks per wave: all 8 on half a pilot beats any split with a (5 s)
    assert [(p.site, p.cores) for p in of(out, SubmitPilot)] == [("c", 4)]


def test_the_menu_offers_the_fewest_slots_for_each_wave_count():
    """From the definition: the menu is the ladder and ⌈units / w⌉ for w = 1 … MENU_WAVES within
    [least, full], each once, largest first; so for every wave count up to MENU_WAVES that some
    size within the cap runs the bag in, the smallest size that does is offered."""
    from resel.engine_pilots import MENU_WAVES, menu_ladder, menu_sizes
    assert menu_sizes(240, 1, 1024)[:8] == [240, 205, 171, 169, 147, 128, 120, 114]
    for units in (1, 7, 16, 100, 256, 1000):
        for full in (1, 3, 8, 60, 240):
            for least in (1, 2):
                if least > full:
                    continue
                sizes = menu_sizes(full, least, units)
                assert sizes == sorted(set(sizes), reverse=True) and set(menu_ladder(full, least)) <= set(sizes)
                assert all(least <= k <= full for k in sizes)
                for w in range(1, MENU_WAVES + 1):
                    fit = [k for k in range(least, full + 1) if math.ceil(units / k) == w]
                    if fit:
                        assert min(fit) in sizes, (units, full, least, w)


def test_the_split_takes_the_steadier_of_two_nearly_equal_sizes():
    """A larger pilot that saves a wave by starting later is worth it only by more than STEADY:
    within it, the size whose start is estimated earliest (ties: the larger) — a near-whole-
    machine size's start estimate is the one most often wrong (docs/peers.md)."""
    from resel.selection import STEADY, _steadier
    tx = 1000.0          # 1,024 tasks: 512 slots 2 waves, 342 3, 256 4, 128 8
    options = [(512, 4000.0), (342, 3000.0), (256, 1000.0), (128, 0.0)]
    # 512 finishes at 4000 + 2 · 1000 = 6000, the bound 6600: 342 (6000) and 256 (5000) are
    # within it, 128 (8000) is not; of those within, 256 starts earliest
    assert STEADY == pytest.approx(1.10)
    assert _steadier(options, tx, 1024, 512) == 256
    assert _steadier([(512, 4000.0), (342, 4050.0)], tx, 1024, 512) == 512      # a later start: kept
    assert _steadier([(512, 4000.0), (342, 4000.0)], tx, 1024, 512) == 512      # the same start: the larger
    assert _steadier([(512, 4000.0), (342, 3700.0)], tx, 1024, 512) == 512      # 6700 > 6600: past the bound
    assert _steadier([(512, 4000.0), (342, 3500.0)], tx, 1024, 512) == 342      # 6500: within
    assert _steadier([(512, None), (342, 0.0)], tx, 1024, 512) == 512           # no estimate for the choice


def test_the_menu_ladder_holds_every_halving_size_and_ends_at_the_least():
    """From the definition ⌊full · 2^(−j/2)⌋: strictly decreasing from ``full`` to ``least``,
    every halving size ⌊full / 2^j⌋ at or above ``least`` among them, and no step more than
    a halving."""
    from resel.engine_pilots import menu_ladder
    assert menu_ladder(240) == [240, 169, 120, 84, 60, 42, 30, 21, 15, 10, 7, 5, 3, 2, 1]
    for full in range(1, 300):
        for least in range(1, min(full, 5) + 1):
            ladder = menu_ladder(full, least)
            assert ladder[0] == full and ladder[-1] == least
            assert all(a > b >= a // 2 for a, b in zip(ladder, ladder[1:])), (full, least, ladder)
            halvings = {full >> j for j in range(12) if full >> j >= least}
            assert halvings <= set(ladder), (full, least, ladder)


def test_the_menu_offers_the_sizes_between_halvings():
    """A backfill hole is seldom a power-of-two share of the machine. 10 tasks of T̂x 2.5 s
    (c) on an 8-slot machine where 8 slots wait 1,000 s and 5 or fewer start at once: 5 slots
    run them in 2 waves (5 s); the halving ladder (8, 4, 2, 1) offered 4, 3 waves (7.5 s)."""
    engine = Engine(make_bag(10), [make_site("c", 4.0, cores=8)], "queue:0")
    assert engine.tx[0] == pytest.approx(2.5)
    sizes = [k for k, _, _ in engine.probe_menu()[0]]
    assert sizes == [8, 5, 4, 3, 2, 1]       # the ladder, and ⌈10 / w⌉: the fewest slots for w waves
    waits = {"c": [1000.0 if k > 5 else 0.0 for k in sizes]}
    out = engine.handle(BagSubmitted(time=0.0, wait_menu=waits, wait_estimates={"c": 1000.0}))
    assert [(p.site, p.cores) for p in of(out, SubmitPilot)] == [("c", 5)]


def test_queue_aware_splits_the_bag_where_whole_machine_pilots_wait():
    """Three Seth queues, 256 tasks (more than a machine): re-selection alone vs queue-aware
    with the twin, three arrival moments, paired seeds — the full table is
    benchmarks/eval_queue_aware.py's."""
    import sys
    sys.path.insert(0, str(REPO / "benchmarks"))
    import resel
    from eval_queue_aware import shifted
    from resel.sim.simulation import simulate
    base = resel.load_sites(REPO / "examples" / "sites-traces-hpc.toml")
    bag = resel.default_bag().resized(256)
    alone = queue = 0.0
    for i in range(3):
        sites = shifted(base, i * 3 * 86400)
        alone += simulate(bag, sites, "reselect", seed=i, record=False).metrics.ttc_wkd
        queue += simulate(bag, sites, "queue+reselect", seed=i, record=False, estimate="twin").metrics.ttc_wkd
    assert queue <= 0.8 * alone, (queue, alone)


def test_a_run_stored_with_the_halving_menu_replays_the_split_it_made():
    """A run stored before the menu offered the sizes between halvings has one wait per halving
    size (240, 120, 60, 30, 15, 7): resumed, its waits stand for those sizes, not the first six
    of today's ladder. 256 tasks, the full pilot waiting 10⁶ s, every smaller size at once:
    of the halving sizes 120 slots finish first (⌈256/120⌉ = 3 waves; 60 take 5), so the pilot
    asks for 120 cores, as the run did; read against today's ladder, the same waits would have
    put the 10⁶ s on 240 and 0 on 169 — a 169-core pilot the run never asked for."""
    site = make_site("c", 4.0, cores=240)
    engine = Engine(make_bag(256), [site], "queue:0")
    ladder = [240, 169, 120, 84, 60, 42, 30, 21, 15, 10, 7, 5, 3, 2, 1]
    waves = [math.ceil(256 / w) for w in range(2, 17)]          # 128, 86, …, 16: the fewest slots for w waves
    assert [k for k, _, _ in engine.probe_menu()[0]] == sorted(set(ladder) | set(waves), reverse=True)
    out = engine.handle(BagSubmitted(time=0.0, wait_menu={"c": [1e6, 0.0, 0.0, 0.0, 0.0, 0.0]},
                                     wait_estimates={"c": 1e6}))
    assert [(p.site, p.cores) for p in of(out, SubmitPilot)] == [("c", 120)]
    # stored with the ladder alone (15 waits, 2026-11-29): its waits stand for the ladder's sizes
    ladder_run = Engine(make_bag(256), [site], "queue:0")
    out = ladder_run.handle(BagSubmitted(time=0.0, wait_menu={"c": [1e6] + [0.0] * 14}, wait_estimates={"c": 1e6}))
    assert [(p.site, p.cores) for p in of(out, SubmitPilot)] == [("c", 169)]
    fresh = Engine(make_bag(256), [site], "queue:0")
    out = fresh.handle(BagSubmitted(time=0.0, wait_menu={"c": [1e6] + [0.0] * 29}, wait_estimates={"c": 1e6}))
    (pilot,) = of(out, SubmitPilot)
    assert pilot.cores in (128, 169)          # two waves at once: no size that starts at once does better
