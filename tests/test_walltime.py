"""Walltime packing (issue 18 item 2): the request size by hand, the dispatch guard and draining
in the engine, hand-ahead within the walltime, and in simulation no task killed at walltime when
the true T_x lies inside the predicted interval (while the old behaviour kills some)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import INSTRUCTIONS, make_bag, make_site
from resel.sim.simulation import simulate
from resel.domain import Clock, PilotPolicy, Site, Truth, WaitModel
from resel.engine import Engine
from resel.events import BagSubmitted, CancelPilot, DispatchTask, PilotStarted, SubmitPilot, TaskFinished
from resel.models.distributions import Dist
from resel.models.lim import SiteRate
from resel.models.runtime import EngineRates
from resel.walltime import WalltimePolicy


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


def with_walltime(site: Site, walltime: float) -> Site:
    return dataclasses.replace(site, pilot=dataclasses.replace(site.pilot, walltime=walltime))


@pytest.mark.parametrize("tasks, slots, mode, expected", [
    (5, 2, "pack", 3 * 1000 * 1.1 + 120),   # ⌈5/2⌉ = 3 waves: 3420 s, under the 3600 s limit
    (7, 2, "pack", 3600.0),                 # 4 waves = 4520 s: capped at the limit
    (1, 1, "pack", 1000 * 1.1 + 120),       # a pool's one-task pilot: 1220 s
    (5, 2, "limit", 3600.0),                # limit mode asks for the limit, as before
    (5, 2, "off", 3600.0),
])
def test_request_by_hand(tasks, slots, mode, expected):
    assert WalltimePolicy(mode).request(3600.0, 1000.0, tasks, slots) == pytest.approx(expected)


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="pack, limit, off"):
        WalltimePolicy("tight")


def _one_slot(mode: str, count: int = 3, walltime: float = 12.0, **kw) -> tuple[Engine, list]:
    """hpc: 2 GHz, so T̂x = 5 s; one core; a 12 s walltime limit: two tasks fit, not three."""
    site = with_walltime(make_site("hpc", 2.0, cores=1), walltime)
    engine = Engine(make_bag(count), [site], "model", walltime=mode, **kw)
    out = engine.handle(BagSubmitted(time=0.0))
    return engine, out


def test_guard_drains_a_pilot_too_short_for_the_next_task():
    """limit mode: the pilot asks for 12 s; tasks start at 0 and 5 (12 and 7 s left ≥ 5); at 10
    only 2 s are left < 5: no dispatch, the idle pilot is released and a new one asked for."""
    engine, out = _one_slot("limit")
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=0, site="hpc", cores=1, walltime=12.0)]
    out = engine.handle(PilotStarted(time=0.0, pilot=0))
    assert [a.task for a in of(out, DispatchTask)] == [0]
    out = engine.handle(TaskFinished(time=5.0, task=0, attempt=1))
    assert [a.task for a in of(out, DispatchTask)] == [1]
    out = engine.handle(TaskFinished(time=10.0, task=1, attempt=1))
    assert not of(out, DispatchTask)
    assert of(out, CancelPilot) == [CancelPilot(pilot=0, site="hpc")]
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=1, site="hpc", cores=1, walltime=12.0)]


def test_off_dispatches_into_the_walltime_as_before():
    engine, _ = _one_slot("off")
    engine.handle(PilotStarted(time=0.0, pilot=0))
    engine.handle(TaskFinished(time=5.0, task=0, attempt=1))
    out = engine.handle(TaskFinished(time=10.0, task=1, attempt=1))
    assert [a.task for a in of(out, DispatchTask)] == [2]   # to be killed at 12


def test_pack_sizes_the_request_from_its_tasks():
    """pack: 5 tasks on a 2-core site, T̂x 5 s: ⌈5/2⌉ · 5 · 1.1 + 120 = 136.5 s."""
    site = make_site("hpc", 2.0, cores=2)
    engine = Engine(make_bag(5), [site], "model", walltime="pack")
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, SubmitPilot) == [SubmitPilot(pilot=0, site="hpc", cores=2, walltime=136.5)]


def test_the_guard_uses_the_upper_quantile():
    """An upper rate twice as slow as the point: T̂x,hi = 10 s, so a 12 s pilot takes one task only."""
    rates = EngineRates({"hpc": SiteRate("hpc", 1.0, 2.0)}, upper={"hpc": SiteRate("hpc", 1.0, 1.0)})
    engine, _ = _one_slot("limit", rates=rates)
    assert engine.tx_hi == [10.0] and engine.tx == [5.0]
    engine.handle(PilotStarted(time=0.0, pilot=0))
    out = engine.handle(TaskFinished(time=5.0, task=0, attempt=1))   # 7 s left < 10
    assert not of(out, DispatchTask) and of(out, CancelPilot)


def test_a_site_whose_limit_is_below_one_task_is_not_viable():
    short, ok = with_walltime(make_site("short", 4.0), 2.0), make_site("ok", 1.0)   # T̂x 2.5 s > 2 s
    engine = Engine(make_bag(2), [short, ok], "model")
    out = engine.handle(BagSubmitted(time=0.0))
    assert [a.site for a in of(out, SubmitPilot)] == ["ok"]


def test_hand_ahead_only_what_still_fits():
    """prefetch 1, one slot, T̂x 5, 12 s. Submitted: task 0 is handed to the pending pilot (its
    first wave: 5 ≤ 12). Started at 0 and task 0 running: task 1 is handed ahead (the 1st queued
    task of a running pilot needs (1 + 1) · 5 = 10 ≤ 12 s). At 5 task 1 starts in the freed
    slot, and task 2 is not handed ahead: 7 s left < 10."""
    from resel.events import TaskStarted
    engine, out = _one_slot("limit", prefetch=1)
    assert [(a.task, a.attempt) for a in of(out, DispatchTask)] == [(0, 1)]
    assert not of(engine.handle(PilotStarted(time=0.0, pilot=0)), DispatchTask)
    out = engine.handle(TaskStarted(time=0.0, task=0, attempt=1))
    assert [(a.task, a.attempt) for a in of(out, DispatchTask)] == [(1, 1)]
    engine.handle(TaskFinished(time=5.0, task=0, attempt=1))
    out = engine.handle(TaskStarted(time=5.0, task=1, attempt=1))
    assert not of(out, DispatchTask)


# ---------------------------------------------------------------- in simulation
def _sites(limit: float, slow: float | None = None) -> list[Site]:
    """Two clusters whose slots take 0.8–1.25 × the predicted T_x (truth clock uniform around
    the LIM clock; ``slow``: exactly that factor), with a walltime limit of ``limit`` seconds."""
    out = []
    for name, ghz, cores in (("a", 2.0, 8), ("b", 1.6, 4)):
        clock = Dist.fixed(ghz / slow) if slow else Dist.of("uniform", low=ghz / 1.25, high=ghz / 0.8)
        truth = Truth(1.0, Dist.fixed(1.0), clock)
        out.append(Site(name=name, kind="simulated", cores=cores, clock=Clock(ghz),
                        pilot=PilotPolicy(walltime=limit), wait=WaitModel(Dist.fixed(30.0)), truth=truth))
    return out


def _rates() -> EngineRates:
    """Point LIM rates, and the interval's top: a slot 1.25× slower than predicted."""
    return EngineRates({s: SiteRate(s, 1.0, g) for s, g in (("a", 2.0), ("b", 1.6))},
                       upper={s: SiteRate(s, 1.0, g / 1.25) for s, g in (("a", 2.0), ("b", 1.6))})


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(1, 40), waves=st.floats(1.0, 4.0),
       mode=st.sampled_from(["limit", "pack"]), strategy=st.sampled_from(["model", "random", "reselect"]))
def test_no_task_killed_when_runtimes_stay_in_their_interval(seed, count, waves, mode, strategy):
    """Whatever the limit (1 to 4 upper-bound task lengths on a), the guard never lets a pilot
    reach its walltime under a task, and every task is done once."""
    instructions = 2e12                                     # T̂x on a: 1000 s; T̂x,hi 1250 s
    limit = waves * 1250.0 * 1.0 + 1.0
    res = simulate(make_bag(count, instructions=instructions), _sites(limit), strategy, seed=seed,
                   rates=_rates(), walltime=mode)
    assert res.walltime_kills == 0
    assert res.engine.done_count == count and res.engine.failed_count == 0


def test_the_old_behaviour_kills_tasks_at_walltime():
    """24 tasks on a (8 cores, T̂x 1000 s, every slot 1.2× slower: 1200 s, inside the interval),
    limit 3125 s, pilot started at 30: waves at 30, 1230 and 2430; with the guard off the third
    wave (8 tasks) is killed at 3155; with it, the third wave goes to a new pilot (725 s left <
    T̂x,hi 1250) and nothing is killed."""
    bag = make_bag(24, instructions=2e12)
    off = simulate(bag, _sites(3125.0, slow=1.2), "model", rates=_rates(), walltime="off")
    assert off.walltime_kills == 8 and off.engine.done_count == 24
    for mode in ("limit", "pack"):
        on = simulate(bag, _sites(3125.0, slow=1.2), "model", rates=_rates(), walltime=mode)
        assert on.walltime_kills == 0 and on.engine.done_count == 24


def test_drain_bookkeeping_grows_with_pilots_not_with_rate_updates(monkeypatch):
    """Every learned rate moves a site's drain instant. The engine keeps one deadline per started
    pilot and one due instant per site, so what it holds grows with the pilots started — not
    with pilots × rate updates (one heap entry per pilot per update: 24 GB at 100,000 tasks of
    the default strategy). A pool of one-task pilots with learning on is the worst case."""
    import resel
    from resel.engine_walltime import WalltimeRules
    peak = {"held": 0, "refreshes": 0}
    refresh = WalltimeRules._refresh_due

    def counting(self, x):
        refresh(self, x)
        peak["refreshes"] += 1
        peak["held"] = max(peak["held"], sum(len(heap) for heap in self._deadlines.values()))

    monkeypatch.setattr(WalltimeRules, "_refresh_due", counting)
    result = simulate(resel.default_bag().resized(1500), resel.default_sites(), "model+reselect+learn", seed=3,
                      record=False, walltime="pack")
    started = sum(1 for p in result.engine.pilots.values() if p.started is not None)
    assert result.metrics.done == 1500 and result.engine.learned()
    assert peak["refreshes"] > 2 * started     # rates moved far more often than pilots started …
    assert 100 < peak["held"] <= started       # … and the deadlines held never outgrew the pilots
