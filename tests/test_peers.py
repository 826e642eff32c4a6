"""Peer strategies (race, earliest, failover, rebroker), their costs and the oracle bound (issue 17).

Real parts: the engine and simulator as `resel simulate` runs them, on the embedded thesis
sites and on sites whose queues replay the real HPC2N trace (examples/sites-traces.toml).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resel
from resel.sim.simulation import simulate
from resel.errors import ReselError
from resel.metrics import run_costs
from resel.sim.oracle import oracle_bound
from resel.selection import Strategy

ROOT = Path(__file__).resolve().parent.parent
PEERS = ["race", "race:2", "earliest", "failover", "failover:3600", "rebroker", "rebroker:600"]
OURS = ["random", "model", "reselect", "model+reselect", "queue+reselect", "topk:2", "auto"]


def _submissions(results, sites) -> dict[str, int]:
    """Per site, the most pilots any of the runs submitted there (the class the oracle bounds)."""
    out: dict[str, int] = {}
    for r in results:
        counts: dict[str, int] = {}
        for p in r.engine.pilots.values():
            counts[sites[p.site].name] = counts.get(sites[p.site].name, 0) + 1
        for k, v in counts.items():
            out[k] = max(out.get(k, 1), v)
    return out


def test_peer_specs_parse_and_name():
    assert Strategy.parse("race").name == "race" and Strategy.parse("race:3").k == 3
    assert Strategy.parse("failover").timeout == 120.0
    assert Strategy.parse("failover:300").name == "failover:300"
    assert Strategy.parse("rebroker").timeout == 3600.0
    assert Strategy.parse("earliest").peer and not Strategy.parse("model").peer
    for bad in ("race:0", "race+reselect", "failover:0", "failover:x", "earliest:2", "rebroker:inf"):
        with pytest.raises(ReselError, match="strategy"):
            Strategy.parse(bad)


def test_race_keeps_the_first_site_and_cancels_the_rest():
    sites = resel.default_sites()
    bag = resel.default_bag().resized(64)
    res = simulate(bag, sites, "race", seed=3)
    first = min((p for p in res.pilots), key=lambda p: p.start)
    # every site was asked for a pilot at 0, the first to start ran the whole bag
    assert {sites[p.site].name for p in res.pilots if p.submitted == 0.0} == {s.name for s in sites}
    assert set(res.metrics.per_site) == {sites[first.site].name}
    costs = run_costs(res.engine)
    assert costs.cancellations >= len(sites) - 1
    assert any(d.kind == "race-closed" for d in res.decisions)


def test_race_k_shares_the_bag_between_the_first_k():
    sites = [s for s in resel.default_sites() if s.name != "osg"]   # three supercomputers
    bag = resel.default_bag().resized(512)
    res = simulate(bag, sites, "race:2", seed=0)
    started = sorted((p.start, sites[p.site].name) for p in res.pilots if p.started)
    winners = {name for _, name in started[:2]}
    assert set(res.metrics.per_site) <= winners
    assert res.metrics.done == 512


def test_earliest_submits_once_to_the_earliest_estimate():
    sites = resel.default_sites()
    bag = resel.default_bag().resized(256)
    res = simulate(bag, sites, "earliest", seed=1)
    assert len(res.metrics.per_site) == 1
    chosen = next(iter(res.metrics.per_site))
    assert all(sites[p.site].name == chosen for p in res.pilots)
    assert run_costs(res.engine).cancellations == 0


def test_failover_moves_on_after_T_and_doubles_each_round():
    sites = [s for s in resel.default_sites() if s.name != "osg"]
    bag = resel.default_bag().resized(1024)
    res = simulate(bag, sites, "failover:60", seed=2)
    moves = [d for d in res.decisions if d.kind == "failover"]
    # every move comes T, 2T, 4T … after the previous one (one round = len(sites) moves)
    times = [0.0] + [d.time for d in moves]
    for i, (a, b) in enumerate(zip(times, times[1:])):
        assert b - a == pytest.approx(60 * 2 ** (i // len(sites)))
    # the site that ran the bag started its pilot within the time it was given
    assert res.metrics.done == 1024 and len(res.metrics.per_site) == 1


def test_rebroker_moves_excess_only_to_sites_that_run():
    sites = resel.default_sites()
    bag = resel.default_bag().resized(256)
    res = simulate(bag, sites, "rebroker:600", seed=0)
    moves = [d for d in res.decisions if d.kind == "rebroker"]
    assert moves and res.metrics.done == 256
    for d in moves:   # the destination had a started pilot when the task moved
        started = [p.start for p in res.pilots if sites[p.site].name == d.target and p.started]
        assert started and min(started) <= d.time


def _check_oracle(bag, sites, seed, strategies):
    results = [simulate(bag, sites, s, seed=seed, record=False) for s in strategies]
    bound = oracle_bound(bag, sites, seed, _submissions(results, sites))
    for s, r in zip(strategies, results):
        assert r.metrics.done == bag.count
        assert r.metrics.ttc_wkd >= bound.ttc, (s, seed, r.metrics.ttc_wkd, bound.ttc)
    return bound, results


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), size=st.sampled_from([1, 2, 7, 16, 64, 200]))
def test_no_strategy_beats_the_oracle_on_the_thesis_sites(seed, size):
    bag = resel.default_bag().resized(size)
    _check_oracle(bag, resel.default_sites(), seed, OURS + PEERS)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), size=st.sampled_from([16, 64]))
def test_no_strategy_beats_the_oracle_on_trace_queues(seed, size):
    sites = resel.load_sites(ROOT / "examples" / "sites-traces.toml")
    bag = resel.default_bag().resized(size)
    _check_oracle(bag, sites, seed, ["model", "model+reselect", "queue+reselect", "race", "earliest",
                                     "failover", "rebroker"])


def test_oracle_is_exact_for_one_site_one_pilot():
    """One drawn-wait site, one pilot: the best schedule is that pilot, full size, at its draw."""
    sites = [s for s in resel.default_sites() if s.name == "supermic"]
    bag = resel.default_bag().resized(64)
    res = simulate(bag, sites, "model", seed=5)
    bound = oracle_bound(bag, sites, 5, 1)
    assert bound.ttc <= res.metrics.ttc_wkd <= bound.ttc * (1 + 1e-6)


def test_costs_count_from_the_records():
    """Costs derived by hand from the engine's records: every pilot submitted, the ones withdrawn
    before the bag's end, thrown attempts and the idle cores of started pilots."""
    sites = resel.default_sites()
    bag = resel.default_bag().resized(64)
    res = simulate(bag, sites, "model+reselect", seed=4)
    eng = res.engine
    end = res.metrics.ttc_wkd
    thrown = sum((a.end - a.start) for t in eng.tasks for a in t.attempts if a.end is not None and a.outcome != "done")
    costs = run_costs(eng)
    assert costs.submissions == len(eng.pilots) == len(res.pilots)
    assert costs.cancellations == sum(1 for p in eng.pilots.values() if p.state.value == "cancelled" and p.ended < end)
    assert costs.thrown_core_h == pytest.approx(thrown / 3600) and costs.thrown_core_h > 0
    assert costs.thrown_core_h == pytest.approx(res.metrics.wasted_core_s / 3600)
    # the model strategy alone: one pilot, every slot busy from its start to the bag's end
    alone = run_costs(simulate(bag, sites, "model", seed=4).engine)
    assert (alone.submissions, alone.cancellations, alone.wasted_core_h) == (1, 0, 0.0)


def test_failover_with_one_site_keeps_its_place_in_the_queue():
    sites = [s for s in resel.default_sites() if s.name == "bridges"]
    res = simulate(resel.default_bag().resized(256), sites, "failover:60", seed=0)
    assert len(res.pilots) == 1 and not [d for d in res.decisions if d.kind == "failover"]
    assert res.metrics.done == 256


def test_probed_starts_become_slot_steps():
    """The tightened bound's A(τ) from probed starts (issue 26), from its definition: the earliest
    any pilot at least that large starts; between two probed sizes at most the larger less one."""
    from resel.sim.oracle import probe_sizes, probe_slots
    starts = [(1, 0.0), (2, 0.0), (4, 100.0), (8, 50.0), (16, 400.0)]
    assert probe_slots(starts) == [(0.0, 3), (50.0, 12), (400.0, 1)]
    assert probe_slots([(1, 5.0)]) == [(5.0, 1)]
    sizes = probe_sizes(240)
    assert sizes[:8] == list(range(1, 9)) and sizes[-1] == 240 and sizes == sorted(set(sizes))
    assert all(b / a <= 1.25 or b - a == 1 for a, b in zip(sizes[8:], sizes[9:-1]))   # ×2^¼, rounded


def test_the_backlog_only_tightens_the_bound_and_every_run_stays_above_it():
    """On HPC2N's three queues (the main job's sites) the bound that counts the backlog is at
    least the old one, and the runs of resel's default and the peers finish no sooner."""
    sites = resel.load_sites(resel.queue_sites_path())
    bag = resel.default_bag().resized(64)
    runs = {name: simulate(bag, sites, name, seed=1, record=False) for name in ("auto", "earliest", "race")}
    subs = _submissions(list(runs.values()), sites)
    tight, loose = oracle_bound(bag, sites, 1, subs), oracle_bound(bag, sites, 1, subs, backlog=False)
    assert tight.ttc >= loose.ttc
    assert all(r.metrics.ttc_wkd >= tight.ttc for r in runs.values())


def test_hindsight_names_the_site_that_starts_first_and_the_one_that_finishes_first():
    """Two drawn-wait sites, by hand: fast waits 900 s and runs a task in 1,000 s; quick starts
    at once and takes 3,000 s: quick starts first, fast finishes 8 tasks first (1 wave)."""
    from resel.domain import Clock, PilotPolicy, Site, Truth, WaitModel
    from resel.models.distributions import Dist
    from resel.sim.oracle import hindsight
    mk = lambda name, wait, ghz: Site(name, "simulated", 8, Clock(ghz), pilot=PilotPolicy("single"),  # noqa: E731
                                      wait=WaitModel(Dist.fixed(wait)), truth=Truth(1.0, Dist.fixed(1.0),
                                                                                    Dist.fixed(ghz)))
    sites = [mk("fast", 900.0, 2e13 / 1000 / 1e9), mk("quick", 0.0, 2e13 / 3000 / 1e9)]
    seen = hindsight(resel.default_bag().resized(8), sites, 0)
    assert seen.starts_first == "quick" and seen.finishes_first == "fast" and seen.differ
    assert seen.finish_alone["fast"] == pytest.approx(1900.0) and seen.finish_alone["quick"] == pytest.approx(3000.0)
    # fast's first task ends at 900 + 1,000 s, before quick's at 0 + 3,000 s: reachable first
    assert seen.first_task == pytest.approx({"fast": 1900.0, "quick": 3000.0}) and seen.reachable
    assert seen.soonest_task == seen.first_task     # one pilot size each: the soonest is the best


def test_hindsight_says_when_the_site_that_finishes_first_cannot_be_reached_first():
    """fast (8 cores) waits 2,500 s and runs a task in 1,000 s: 8 tasks end at 3,500 s; quick (2
    cores) starts at once, 3,000 s a task, 4 waves: 12,000 s. fast finishes first, but its first
    task ends at 3,500 s, after quick's at 3,000 s: not reachable first."""
    from resel.domain import Clock, PilotPolicy, Site, Truth, WaitModel
    from resel.models.distributions import Dist
    from resel.sim.oracle import hindsight
    mk = lambda name, cores, wait, tx: Site(name, "simulated", cores, Clock(2e13 / tx / 1e9),  # noqa: E731
                                            pilot=PilotPolicy("single"), wait=WaitModel(Dist.fixed(wait)),
                                            truth=Truth(1.0, Dist.fixed(1.0), Dist.fixed(2e13 / tx / 1e9)))
    seen = hindsight(resel.default_bag().resized(8), [mk("fast", 8, 2500.0, 1000.0), mk("quick", 2, 0.0, 3000.0)], 0)
    assert seen.finish_alone == pytest.approx({"fast": 3500.0, "quick": 12000.0})
    assert seen.first_task == seen.soonest_task == pytest.approx({"fast": 3500.0, "quick": 3000.0})
    assert (seen.finishes_first, seen.starts_first, seen.differ, seen.reachable) == ("fast", "quick", True, False)
