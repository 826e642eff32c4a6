"""A learning run prices a pool's one wave at its slowest slot, and leaves out of the queue-aware
split a site whose share the others finish by the same horizon (issue 26 goals: the default's
choices against the oracle; docs/engine.md, "A pool's wave ends with its slowest slot").

Expected values are worked by hand from the definitions: z_k, the expected largest of k standard
normals, from tables (k = 16: 1.766, k = 100: 2.508); the horizons from start + waves × T̂x.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import make_bag
from resel.selection import Strategy, queue_split, slowest_of

REPO = Path(__file__).resolve().parents[1]
POOL = [(2000, 60.0)]               # one-task pilots, a slot in a minute
BATCH = [(16, 100.0), (8, 100.0)]   # a 16-slot pilot starting at 100 s


@pytest.mark.parametrize("k, z", [(16, 1.766), (100, 2.508)])
def test_slowest_of_is_the_expected_largest_of_k_draws(k, z):
    """Blom's approximation against the tables' E[max of k N(0, 1)], within 0.02 of it."""
    assert math.log(slowest_of(k, 0.25)) / 0.25 == pytest.approx(z, abs=0.02)


def test_slowest_of_one_slot_or_no_spread_is_the_typical_time():
    assert slowest_of(1, 0.25) == 1.0 and slowest_of(16, 0.0) == 1.0


def test_without_spread_the_split_gives_a_small_bag_to_the_pool_that_starts_first():
    """T̂x 1000 s on both: the pool ends 16 tasks at 60 + 1000 = 1060 s, before the batch
    site's first task can end (1100 s): all 16 to the pool (the split as before issue 26's goals)."""
    origins, held, _ = queue_split(Strategy.parse("queue:1+reselect"), make_bag(16), [0, 1],
                                   [1000.0, 1000.0], [POOL, BATCH])
    assert origins == [0] * 16 and held == [0, 1]


def test_with_spread_a_small_bag_goes_to_the_one_batch_pilot():
    """σ = 0.25: 16 tasks on the pool end at 60 + 1000 · e^(0.25 · 1.766) ≈ 1615 s; the batch
    pilot ends them at 1100 s. At that horizon the pool still fits one task (1060 s), but the
    batch pilot alone finishes all 16 by then: the pool's share buys nothing and is left out;
    the pool still holds pilots, as the extra site."""
    origins, held, sizes = queue_split(Strategy.parse("queue:1+reselect"), make_bag(16), [0, 1],
                                       [1000.0, 1000.0], [POOL, BATCH], spread={0: 0.25})
    assert origins == [1] * 16 and sizes[1] == 16 and held == [1, 0]


def test_with_spread_both_sites_are_kept_where_both_are_needed():
    """20 tasks: the batch pilot runs 16 by 1100 s and needs a second wave (2100 s) for more;
    the pool's j tasks end at 60 + 1000 · e^(0.25 z_j), z_j by Blom: z_4 = 1.049 → 1360 s,
    z_5 = 1.180 → 1403 s (the tables' 1.029 and 1.163 give 1354 and 1397 s: the same count).
    The smallest horizon holding 20 is the pool's 4th task's, ≈ 1360 s: 16 + 4, and
    neither site alone finishes the bag by then."""
    origins, _, _ = queue_split(Strategy.parse("queue:1+reselect"), make_bag(20), [0, 1],
                                [1000.0, 1000.0], [POOL, BATCH], spread={0: 0.25})
    assert origins.count(0) == 4 and origins.count(1) == 16


def test_auto_on_the_heterogeneous_set_keeps_a_one_wave_bag_off_the_unmeasured_pool():
    """examples/sites-hetero.toml, 16 tasks, seed 0: LIM rates the pool about as fast as Bridges
    (T̂x 9,760 against 8,696 s) and its slots start at once; priced at its slowest of 16 slots it
    loses, and the bag runs on Bridges' one pilot — where the true rates send it too
    (docs/peers.md, the hetero set: 1.04 h; the pool took it before, 2.69 h)."""
    import resel
    from resel.sim.simulation import simulate
    sites = resel.load_sites(REPO / "examples" / "sites-hetero.toml")
    res = simulate(resel.default_bag().resized(16), sites, "auto", seed=0, record=False)
    ran = {sites[t.attempts[-1].site].name for t in res.engine.tasks}
    assert ran == {"bridges"} and res.metrics.ttc_wkd / 3600 == pytest.approx(1.04, abs=0.01)
    plain = simulate(resel.default_bag().resized(16), sites, "queue+reselect", seed=0, record=False)
    assert {sites[t.attempts[-1].site].name for t in plain.engine.tasks} == {"osg"}   # no learning: as before


def _engine(tasks: int, hpc_start: float):
    """auto on a 64-core batch site and a pool, both T̂x 5 s (the same clock), the pool's slots
    in 0.5 s; the batch site's pilots of every size start at ``hpc_start``."""
    from conftest import make_site
    from resel.engine import Engine
    from resel.events import BagSubmitted
    sites = [make_site("hpc", 2.0), make_site("pool", 2.0, mode="per-task", max_pilots=64)]
    engine = Engine(make_bag(tasks), sites, "auto")
    menu = engine.probe_menu()
    waits = {"hpc": [hpc_start] * len(menu[0]), "pool": [0.5]}
    engine.handle(BagSubmitted(time=0.0, wait_menu=waits, wait_estimates={"hpc": hpc_start, "pool": 0.5}))
    return engine


def test_a_pool_the_split_left_out_is_priced_at_its_slowest_slot_in_its_windows():
    """16 tasks: the pool's 16 end at 0.5 + 5 · 1.556 = 8.28 s, the batch pilot's at 6 s; the
    pool's one task by 6 s (5.5 s) saves no wave and is left out. Its window toward the batch
    site is then T̂x · slowest_of(16) − T̂x = 5 · 0.556 = 2.78 s, not 0 (equal rates)."""
    engine = _engine(16, 1.0)
    assert {t.first_origin for t in engine.tasks} == {0}
    assert engine._window(1, 0, 0.0) == pytest.approx(5.0 * (math.exp(0.25 * 1.7688) - 1.0), rel=1e-3)


def test_a_pool_the_split_gave_a_share_keeps_per_task_windows():
    """80 tasks: the batch pilot runs 64 by 6 s and the rest only by 11 s; the pool's 16 end at
    8.28 s, so the split gives it 16 and its window toward the batch site is T̂x − T̂x = 0."""
    engine = _engine(80, 1.0)
    assert sum(t.first_origin == 1 for t in engine.tasks) == 16
    assert engine._window(1, 0, 0.0) == 0.0
