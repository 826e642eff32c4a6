"""The simulator moves a bag's data (issue 25 item 5): inputs staged between a task's dispatch
and its execution (the shared ones once per site, first), outputs fetched after it
(TaskFetching, then TaskDelivered out_bytes / bw_out later); the audit and the oracle count the
true data times. Delivery times are worked out by hand from those rules."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resel
from conftest import make_bag, make_site
from resel.sim.simulation import simulate
from resel.config import load_bag, load_sites
from resel.domain import Bandwidth, DataSpec, PilotPolicy, Truth
from resel.models.distributions import Dist
from resel.sim.oracle import oracle_bound

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_BAG = ROOT / "examples" / "gromacs-data-bag.toml"
EXAMPLE_SITES = ROOT / "examples" / "sites-data.toml"


def exact_site(slots: int, bandwidth: Bandwidth | None = None, truth_bandwidth: Bandwidth | None = None):
    """One site whose slots run 1e10 instructions in exactly 10 s (IPC 1 at 1 GHz), pilots
    starting at once (no wait model), ``slots`` task slots."""
    site = make_site("x", 1.0, cores=slots)
    return dataclasses.replace(site, bandwidth=bandwidth, pilot=PilotPolicy("single", max_pilots=1),
                               truth=Truth(1.0, Dist.fixed(1.0), Dist.fixed(1.0), bandwidth=truth_bandwidth))


def with_data(bag, **mb):
    return dataclasses.replace(bag, data=DataSpec(**mb))


def timeline(result):
    return [(t, kind, e.task) for t, kind, e in result.events
            if kind in ("DispatchTask", "TaskFetching", "TaskFinished", "TaskDelivered")]


def test_delivery_times_by_hand():
    """Two tasks on one slot; own inputs 8 MB, shared 16 MB, outputs 4 MB; the link moves 8 MB/s
    in, 2 MB/s out. Task 0 bound at 0 to the cold site: shared 2 s, then its own 1 s, executes
    3–13, fetching at 13, home at 13 + 2 = 15. Task 1 takes the slot freed at 13: warm, its own
    inputs 1 s, executes 14–24, home at 26. Data time 5 + 3 s; 8 + 16 + 8 MB in, 4 + 4 MB out."""
    bag = with_data(make_bag(2), input_mb=8.0, shared_mb=16.0, output_mb=4.0)
    result = simulate(bag, [exact_site(1, Bandwidth(8.0, 2.0))], "model", seed=0)
    assert timeline(result) == [(0.0, "DispatchTask", 0), (13.0, "TaskFetching", 0), (13.0, "DispatchTask", 1),
                                (15.0, "TaskDelivered", 0), (24.0, "TaskFetching", 1), (26.0, "TaskDelivered", 1)]
    assert [(a.start, a.end, a.delivered) for t in result.engine.tasks for a in t.attempts] == [
        (0.0, 13.0, 15.0), (13.0, 24.0, 26.0)]
    assert result.metrics.ttc_wkd == 26.0 and result.metrics.done == 2
    cost = result.data.as_dict()
    assert cost == {"priced": True, "seconds_per_task": 4.0, "mb_in": {"x": 32.0}, "mb_out": {"x": 8.0}}


def test_tasks_bound_while_the_shared_inputs_travel_wait_for_them():
    """Two slots, both tasks bound at 0: the shared 16 MB arrive at 2 (8 MB/s), each task's own
    8 MB take 1 s more: both execute 3–13 and are home at 15. No outputs: no fetching, the tasks
    finish at 13 (TaskFinished)."""
    bag = with_data(make_bag(2), input_mb=8.0, shared_mb=16.0)
    result = simulate(bag, [exact_site(2, Bandwidth(8.0, 2.0))], "model", seed=0)
    assert timeline(result) == [(0.0, "DispatchTask", 0), (0.0, "DispatchTask", 1),
                                (13.0, "TaskFinished", 0), (13.0, "TaskFinished", 1)]
    assert result.data.as_dict()["seconds_per_task"] == 3.0


def test_true_bandwidth_wins_and_a_site_without_one_moves_at_the_documented_default():
    """Outputs 200 MB. truth.bandwidth 4 MB/s out: home 50 s after the end (priced at the
    site's 100 MB/s: 2 s). A site that states neither: 100 MB/s both ways (resel.transfer's
    DEFAULT_BANDWIDTH), 2 s."""
    bag = with_data(make_bag(1), output_mb=200.0)
    slow = simulate(bag, [exact_site(1, Bandwidth(100.0, 100.0), Bandwidth(100.0, 4.0))], "model", seed=0)
    assert timeline(slow)[-1] == (60.0, "TaskDelivered", 0)
    default = simulate(bag, [exact_site(1)], "model", seed=0)
    assert timeline(default)[-1] == (12.0, "TaskDelivered", 0)


def test_blind_engine_same_bytes_moved():
    """price_data=False: the engine prices nothing (engine.data is None) but the bytes move."""
    bag = with_data(make_bag(1), output_mb=200.0)
    blind = simulate(bag, [exact_site(1, Bandwidth(100.0, 4.0))], "model", seed=0, price_data=False)
    assert blind.engine.data is None and blind.data.priced is False
    assert timeline(blind)[-1] == (60.0, "TaskDelivered", 0)


def test_a_bag_without_data_moves_nothing():
    result = simulate(make_bag(2), [exact_site(1, Bandwidth(1.0, 1.0))], "model", seed=0)
    assert result.data is None and result.engine.data is None
    assert [k for _, k, _ in timeline(result)] == ["DispatchTask", "TaskFinished", "DispatchTask", "TaskFinished"]


def test_the_example_chooses_differently_with_data():
    """examples/gromacs-data-bag.toml on examples/sites-data.toml (1 MB/s out of the OSG, 1.5 GB
    of outputs per task). queue: blind to the data the OSG's one-minute start wins every task;
    pricing 1,500 s of outputs there, SuperMIC does — and the bag finishes sooner."""
    bag, sites = load_bag(EXAMPLE_BAG).resized(64), load_sites(EXAMPLE_SITES)
    priced = simulate(bag, sites, "queue", seed=0)
    blind = simulate(bag, sites, "queue", seed=0, price_data=False)
    assert blind.metrics.per_site == {"osg": 64} and priced.metrics.per_site == {"supermic": 64}
    assert priced.metrics.ttc_wkd < blind.metrics.ttc_wkd
    assert priced.data.as_dict()["seconds_per_task"] < 20 < 1500 < blind.data.as_dict()["seconds_per_task"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), size=st.sampled_from([16, 64]),
       strategy=st.sampled_from(["reselect", "model+reselect", "queue+reselect", "topk:2+reselect"]),
       priced=st.booleans())
def test_with_data_the_audit_finds_no_bound_violation_and_no_run_beats_the_oracle(seed, size, strategy, priced):
    """The audit judges each first re-selection with the true T_x' = T_x + D; the oracle counts
    the true data times: no penalty above its bound, no TTC below the bound."""
    bag, sites = load_bag(EXAMPLE_BAG).resized(size), load_sites(EXAMPLE_SITES)
    result = simulate(bag, sites, strategy, seed=seed, price_data=priced)
    assert result.metrics.done == size
    assert result.audit.bound_violations == 0
    submissions = {s.name: max(1, sum(1 for p in result.pilots if p.site == i)) for i, s in enumerate(sites)}
    assert result.metrics.ttc_wkd >= oracle_bound(bag, sites, seed, submissions).ttc


def test_the_oracle_is_exact_for_one_site_one_pilot_with_data():
    """SuperMIC alone, one pilot for 64 tasks: every task is bound at its start w, executes
    after its own inputs and is home its outputs later — TTC = w + I + T_x + O, the bound."""
    bag = with_data(resel.default_bag().resized(64), input_mb=50.0, output_mb=300.0)
    sites = [dataclasses.replace(s, bandwidth=Bandwidth(5.0, 3.0)) for s in resel.default_sites()
             if s.name == "supermic"]
    res = simulate(bag, sites, "model", seed=5)
    bound = oracle_bound(bag, sites, 5, 1)
    assert bound.ttc <= res.metrics.ttc_wkd <= bound.ttc * (1 + 1e-6)
    blind = oracle_bound(dataclasses.replace(bag, data=None), sites, 5, 1)
    assert bound.ttc == pytest.approx(blind.ttc + 10.0 + 100.0)


def test_the_example_sites_are_the_thesis_sites_with_a_bandwidth():
    """examples/sites-data.toml differs from the embedded thesis sites only by `bandwidth`."""
    example = load_sites(EXAMPLE_SITES)
    assert [dataclasses.replace(s, bandwidth=None) for s in example] == resel.default_sites()
    assert {s.name: s.bandwidth for s in example} == {
        "bridges": Bandwidth(100.0, 100.0), "comet": Bandwidth(100.0, 100.0),
        "supermic": Bandwidth(100.0, 100.0), "osg": Bandwidth(10.0, 1.0)}


def test_simulate_reports_what_the_data_cost(tmp_path):
    """`resel simulate --json` on the example: per result the data seconds per task and the MB
    moved per site; the top-level `data` says the sizes, each site's bandwidth and whether the
    engine priced it. --data-blind runs the same bytes with the engine blind to them."""
    import json

    from click.testing import CliRunner

    from resel.cli import cli
    args = ["simulate", str(EXAMPLE_BAG), "--sites", str(EXAMPLE_SITES), "--strategies", "queue", "--sizes", "16",
            "--repeat", "1", "--no-store", "--json", "--db", str(tmp_path / "r.db")]
    docs = {}
    for blind in (False, True):
        result = CliRunner().invoke(cli, args + (["--data-blind"] if blind else []), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        docs[blind] = json.loads(result.stdout)
    priced, blind = docs[False], docs[True]
    assert priced["data"]["priced"] is True and blind["data"]["priced"] is False
    assert (priced["data"]["input_mb"], priced["data"]["shared_mb"], priced["data"]["output_mb"]) == (5.0, 250.0, 1500.0)
    assert priced["data"]["bandwidth"]["osg"] == {"in": 10.0, "out": 1.0, "true_in": 10.0, "true_out": 1.0}
    # queue, priced: SuperMIC, 250 MB shared once (2.5 s) + 5 MB (0.05 s) + 1,500 MB out (15 s) at 100 MB/s
    [cell] = priced["results"]
    assert cell["data"]["mb_in"] == {"supermic": pytest.approx(250 + 16 * 5)}
    assert cell["data"]["mb_out"] == {"supermic": pytest.approx(16 * 1500)}
    assert cell["data"]["seconds_per_task"] == pytest.approx(2.5 + 0.05 + 15)
    [cell] = blind["results"]
    assert set(cell["data"]["mb_out"]) == {"osg"} and cell["data"]["seconds_per_task"] > 1500


def test_data_blind_on_a_bag_without_data_is_a_clean_error(tmp_path):
    from click.testing import CliRunner

    from resel.cli import cli
    result = CliRunner().invoke(cli, ["simulate", "--data-blind", "--sizes", "8", "--repeat", "1", "--no-store"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--data-blind: the bag moves no data" in result.output


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), size=st.sampled_from([1, 7, 40]),
       strategy=st.sampled_from(["random", "model", "queue", "reselect", "model+reselect", "queue+reselect",
                                 "race:2", "failover", "rebroker"]),
       walltime=st.sampled_from(["limit", "pack"]))
def test_with_data_every_task_is_delivered_once_and_the_books_balance(seed, size, strategy, walltime):
    """Any strategy on the example: after every event the engine's free-slot count is the sum
    over sites; at the end every task is done with exactly one delivered attempt, delivered at
    or after its end, and no two attempts of a task overlap."""
    from resel.sim.simulation import Simulation
    from resel.states import TaskState
    bag, sites = load_bag(EXAMPLE_BAG).resized(size), load_sites(EXAMPLE_SITES)
    sim = Simulation(bag, sites, strategy, seed=seed, walltime=walltime)
    engine = sim.engine
    while not sim.finished:
        sim.step()
        assert engine._free_total == sum(b.free for b in engine._books)
    for task in engine.tasks:
        assert task.state is TaskState.DONE
        done = [a for a in task.attempts if a.outcome == "done"]
        assert len(done) == 1 and done[0].delivered is not None and done[0].delivered >= done[0].end
        spans = sorted((a.start, a.end) for a in task.attempts if a.end is not None)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
