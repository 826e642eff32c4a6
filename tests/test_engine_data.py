"""The engine prices task data (issue 25 item 5, docs/engine.md "Selection sees the data"):
T̂x'(x) = T̂x(x) + D(x), D(x) = own_in/bw_in + out/bw_out (+ shared/bw_in while x is cold).

Fed events in h11's test_state style over the conftest sites — hpc (index 0, T̂x = 5 s, one
pilot, not a target) and pool (index 1, T̂x = 10 s, per-task pilots, a target) — with sizes and
bandwidths picked so every D is a short sum of exact binary fractions; each expected figure is
worked out by hand in the test's docstring.
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import make_bag, make_site
from resel.domain import Bandwidth, PilotPolicy
from resel.engine import Engine
from resel.errors import IllegalTransition
from resel.events import (
    BandwidthMeasured, BagSubmitted, CancelTask, Decision, DispatchTask, PilotStarted, SetTimer, SiteLost, SubmitPilot,
    TaskFinished, TimerFired,
)
from resel.selection import predicted_ttc
from resel.states import TaskState
from resel.transfer import MB, DataTimes, TransferModel

P, R = TaskState.PROVISIONAL, TaskState.RUNNING


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


def decided(actions, kind):
    return [(d.task, d.tx_r, d.tx_r2, d.window) for d in of(actions, Decision) if d.kind == kind]


def model(own=0.0, shared=0.0, out=0.0, **bw: tuple[float, float]) -> TransferModel:
    """Sizes in MB, bandwidths per site as (in, out) MB/s."""
    return TransferModel(own * MB, shared * MB, out * MB, {k: Bandwidth(*v) for k, v in bw.items()})


# ------------------------------------------------------------------ initial selection
def test_outputs_over_a_slow_link_flip_the_model_choice(sites):
    """10 MB of outputs: hpc sends them at 1 MB/s (10 s), pool at 10 MB/s (1 s). T̂x'(hpc) =
    5 + 10 = 15 > T̂x'(pool) = 10 + 1 = 11: every task goes to pool; blind to data, to hpc."""
    data = model(out=10, hpc=(100, 1), pool=(100, 10))
    engine = Engine(make_bag(2), sites, "model", data=data)
    out = engine.handle(BagSubmitted(time=0.0))
    assert [t.origin for t in engine.tasks] == [1, 1]
    assert [d.tx_r for d in of(out, Decision)] == [11.0, 11.0]       # the assign decisions log T̂x'
    blind = Engine(make_bag(2), sites, "model")
    out = blind.handle(BagSubmitted(time=0.0))
    assert [t.origin for t in blind.tasks] == [0, 0] and [d.tx_r for d in of(out, Decision)] == [5.0, 5.0]


def test_the_shared_inputs_count_at_submission_every_site_being_cold(sites):
    """16 MB shared: hpc receives at 1 MB/s (16 s), pool at 4 MB/s (4 s). Cold, T̂x'(hpc) = 21,
    T̂x'(pool) = 14: model picks pool; topk:1 too."""
    data = model(shared=16, hpc=(1, 100), pool=(4, 100))
    for strategy in ("model", "topk:1"):
        engine = Engine(make_bag(1), sites, strategy, data=data)
        engine.handle(BagSubmitted(time=0.0))
        assert engine.tasks[0].origin == 1, strategy


def test_a_model_that_moves_nothing_is_no_model(sites):
    """Sizes all 0: the engine prices no data (D = 0.0 exactly, decisions as without)."""
    engine = Engine(make_bag(1), sites, "model", data=model(hpc=(1, 1)))
    assert engine.data is None
    engine.handle(BagSubmitted(time=0.0))
    assert engine.tasks[0].origin == 0


def test_queue_split_counts_outputs_after_the_last_wave(sites):
    """queue: hpc's pilot starts in 2 s, pool's in 0. Blind: 2 + 5 = 7 < 10, hpc. Outputs of
    8 MB at 1 MB/s from hpc (8 s) and 8 MB/s from pool (1 s): 2 + 5 + 8 = 15 > 0 + 10 + 1 = 11,
    pool."""
    data = model(out=8, hpc=(100, 1), pool=(100, 8))
    for given, want in ((data, 1), (None, 0)):
        engine = Engine(make_bag(1), sites, "queue", data=given)
        menu = engine.probe_menu()
        assert [len(menu[0]), len(menu[1])] == [1, 1]
        engine.handle(BagSubmitted(time=0.0, wait_menu={"hpc": [2.0], "pool": [0.0]}))
        assert engine.tasks[0].origin == want


def test_predicted_ttc_pays_the_shared_inputs_once_and_each_tasks_inputs_in_its_wave():
    """5 tasks on 2 slots: 3 waves. Wait 100, T̂x 50, own 2, shared 30, out 7:
    100 + 30 + 3 · (50 + 2) + 7 = 293; without data 100 + 3 · 50 = 250."""
    assert predicted_ttc(100.0, 50.0, 5, 2, DataTimes(2.0, 30.0, 7.0)) == 293.0
    assert predicted_ttc(100.0, 50.0, 5, 2) == 250.0
    assert predicted_ttc(None, 50.0, 5, 2, DataTimes(2.0, 30.0, 7.0)) == float("inf")


# ------------------------------------------------------------------ windows
WINDOW_DATA = dict(own=4, out=8, hpc=(8, 8), pool=(4, 2))


def test_a_window_with_data_moves_the_task_back_where_the_blind_window_commits(sites):
    """Own inputs 4 MB, outputs 8 MB; hpc 8 MB/s both ways, pool 4 in and 2 out.
    D(hpc) = 0.5 + 1 = 1.5, D(pool) = 1 + 4 = 5: T̂x'(hpc) = 6.5, T̂x'(pool) = 15 and
    Ŵ(pool, hpc) = 8.5 (blind: 5). pool starts at 1: the task runs there provisionally, timer at
    9.5. hpc acquired at 7: 7 − 1 = 6 < 8.5, moved back (blind, the window closed at 6: commit)."""
    engine = Engine(make_bag(1), sites, "model+reselect", data=model(**WINDOW_DATA))
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=1))
    assert engine.tasks[0].state is P
    assert of(out, SetTimer) == [SetTimer(at=9.5, task=0, attempt=1)]
    assert decided(out, "reselect-provisional") == [(0, 6.5, 15.0, 8.5)]
    out = engine.handle(PilotStarted(time=7.0, pilot=0))
    assert of(out, CancelTask) == [CancelTask(task=0, attempt=1, pilot=1, site="pool")]
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=2, pilot=0, site="hpc")]
    [move] = [d for d in of(out, Decision) if d.kind == "move-back"]
    assert (move.a_r, move.a_r2, move.tx_r, move.tx_r2, move.window) == (7.0, 1.0, 6.5, 15.0, 8.5)

    blind = Engine(make_bag(1), sites, "model+reselect")
    blind.handle(BagSubmitted(time=0.0))
    assert of(blind.handle(PilotStarted(time=1.0, pilot=1)), SetTimer) == [SetTimer(at=6.0, task=0, attempt=1)]
    out = blind.handle(TimerFired(time=6.0, task=0, attempt=1))
    assert decided(out, "window-commit") == [(0, 5.0, 10.0, 5.0)]
    assert of(blind.handle(PilotStarted(time=7.0, pilot=0)), CancelTask) == []


def test_risk_windows_add_the_data_difference(sites):
    """--risk gives Ŵ(pool, hpc) = 7 (an upper quantile of T_x(pool) − T_x(hpc)); with the data
    above the window is 7 + D(pool) − D(hpc) = 7 + 5 − 1.5 = 10.5, the timer at 1 + 10.5."""
    from resel.models.runtime import EngineRates
    rates = EngineRates({}, windows={("pool", "hpc"): 7.0})
    engine = Engine(make_bag(1), sites, "model+reselect", rates=rates, data=model(**WINDOW_DATA))
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=1))
    assert of(out, SetTimer) == [SetTimer(at=11.5, task=0, attempt=1)]
    assert decided(out, "reselect-provisional") == [(0, 6.5, 15.0, 10.5)]


def test_a_cold_target_pays_the_shared_inputs_a_warm_one_does_not(sites):
    """8 MB shared; hpc receives at 8 MB/s (1 s), pool at 2 MB/s (4 s). At submission both are
    cold: T̂x'(hpc) = 6, T̂x'(pool) = 14. pool's first pilot starts at 1: task 0's window is
    14 − 6 = 8, and pool's shared inputs are there at 1 + 4 = 5. Its second pilot starts at 7,
    pool warm, hpc still cold: task 1's window is 10 − 6 = 4. A pilot starting at 3, while the
    shared inputs are on their way, prices what is left of them: 10 + (5 − 3) − 6 = 6."""
    data = model(shared=8, hpc=(8, 8), pool=(2, 2))
    for second, window in ((7.0, 4.0), (3.0, 6.0)):
        engine = Engine(make_bag(2), sites, "model+reselect", data=data)
        out = engine.handle(BagSubmitted(time=0.0))
        assert [(a.pilot, a.site) for a in of(out, SubmitPilot)] == [(0, "hpc"), (1, "pool"), (2, "pool")]
        out = engine.handle(PilotStarted(time=1.0, pilot=1))
        assert decided(out, "reselect-provisional") == [(0, 6.0, 14.0, 8.0)]
        out = engine.handle(PilotStarted(time=second, pilot=2))
        assert decided(out, "reselect-provisional") == [(1, 6.0, 10.0 + window - 4.0, window)]
        assert of(out, SetTimer) == [SetTimer(at=second + window, task=1, attempt=1)]


def test_a_measured_bandwidth_changes_the_next_window_not_the_open_one(sites):
    """Outputs 8 MB, both sites 8 MB/s (1 s each): Ŵ(pool, hpc) = 11 − 6 = 5. Task 0 goes to pool
    at 1 (timer at 6). At 2 pool's outbound is measured at 2 MB/s: its outputs now take 4 s, the
    next window is 14 − 6 = 8. Task 1 goes to pool at 3: timer at 11. Task 0's window still
    closes at 6 and its commit logs what it was opened with (11, 5). hpc acquired at 9: task 1
    moves back (9 − 3 = 6 < 8; with the old figure its window would have closed at 8)."""
    engine = Engine(make_bag(2), sites, "model+reselect", data=model(out=8, hpc=(8, 8), pool=(8, 8)))
    engine.handle(BagSubmitted(time=0.0))
    out = engine.handle(PilotStarted(time=1.0, pilot=1))
    assert of(out, SetTimer) == [SetTimer(at=6.0, task=0, attempt=1)]
    assert engine.handle(BandwidthMeasured(time=2.0, site="pool", outbound=2.0)) == []
    out = engine.handle(PilotStarted(time=3.0, pilot=2))
    assert decided(out, "reselect-provisional") == [(1, 6.0, 14.0, 8.0)]
    assert of(out, SetTimer) == [SetTimer(at=11.0, task=1, attempt=1)]
    out = engine.handle(TimerFired(time=6.0, task=0, attempt=1))
    assert decided(out, "window-commit") == [(0, 6.0, 11.0, 5.0)]
    out = engine.handle(PilotStarted(time=9.0, pilot=0))
    assert decided(out, "move-back") == [(1, 6.0, 14.0, 8.0)]
    assert engine.tasks[1].state is R and engine.tasks[1].site == 0


def test_bandwidth_measured_is_checked_and_ignored_without_data(sites):
    engine = Engine(make_bag(1), sites, "model+reselect", data=model(out=8, hpc=(8, 8), pool=(8, 8)))
    with pytest.raises(IllegalTransition):
        engine.handle(BandwidthMeasured(time=0.0, site="pool", inbound=1.0))   # before BagSubmitted
    engine.handle(BagSubmitted(time=0.0))
    for bad in (dict(site="nowhere", inbound=1.0), dict(site="pool", inbound=0.0),
                dict(site="pool", outbound=float("nan")), dict(site="pool", outbound=-2.0)):
        with pytest.raises(IllegalTransition):
            engine.handle(BandwidthMeasured(time=1.0, **bad))
    assert engine.data.bandwidth_of("pool") == Bandwidth(8.0, 8.0)       # unchanged by the refusals
    engine.handle(BandwidthMeasured(time=1.0, site="pool", inbound=3.0))  # one way only
    assert engine.data.bandwidth_of("pool") == Bandwidth(3.0, 8.0)
    blind = Engine(make_bag(1), sites, "model+reselect")
    blind.handle(BagSubmitted(time=0.0))
    assert blind.handle(BandwidthMeasured(time=1.0, site="pool", inbound=3.0)) == []


# ------------------------------------------------------------------ rebinding
def three_sites():
    """a: 2 GHz (T̂x 5 s), b: 1.6 GHz (6.25 s), c: 1 GHz (10 s), all single-pilot sites."""
    return [make_site("a", 2.0), make_site("b", 1.6), make_site("c", 1.0)]


def test_a_lost_sites_tasks_go_to_the_lowest_tx_prime():
    """a is lost. Outputs 8 MB: b sends them at 1 MB/s (8 s), c at 8 MB/s (1 s), a at 8 MB/s.
    T̂x'(b) = 14.25 > T̂x'(c) = 11: a's waiting task goes to c (blind: to b, 6.25 < 10)."""
    data = model(out=8, a=(8, 8), b=(8, 1), c=(8, 8))
    engine = Engine(make_bag(1), three_sites(), "model", data=data)
    engine.handle(BagSubmitted(time=0.0))
    assert engine.tasks[0].origin == 0
    out = engine.handle(SiteLost(time=1.0, site="a", reason="gone"))
    assert [(d.target, d.tx_r, d.tx_r2) for d in of(out, Decision)] == [("c", 6.0, 11.0)]
    blind = Engine(make_bag(1), three_sites(), "model")
    blind.handle(BagSubmitted(time=0.0))
    assert [d.target for d in of(blind.handle(SiteLost(time=1.0, site="a", reason="gone")), Decision)] == ["b"]


# ------------------------------------------------------------------ walltime packing
def test_own_inputs_hold_the_slot_in_walltime_packing():
    """hpc alone, one slot, limit 20 s, no spread: T̂x,hi = 5. Own inputs 4 MB at 8 MB/s hold the
    slot 0.5 s more: the pilot drains at 20 − 5.5 = 14.5 (blind: 15). A slot freed at 14.8 takes
    no task with data (a new pilot is asked for instead); blind, it takes the next one."""
    hpc = dataclasses.replace(make_site("hpc", 2.0), pilot=PilotPolicy(mode="single", max_cores=1, walltime=20.0))
    for data, dispatched in ((model(own=4, hpc=(8, 8)), []), (None, [1])):
        engine = Engine(make_bag(3), [hpc], "model", data=data)
        engine.handle(BagSubmitted(time=0.0))
        engine.handle(PilotStarted(time=0.0, pilot=0))
        out = engine.handle(TaskFinished(time=14.8, task=0, attempt=1))
        assert [a.task for a in of(out, DispatchTask)] == dispatched
        assert bool(of(out, SubmitPilot)) == (data is not None)


def test_packed_walltime_adds_the_own_inputs_per_wave_and_the_shared_once_while_cold():
    """--walltime pack, hpc with 2 slots and 2 tasks (one wave): own inputs 4 MB and shared 8 MB
    at 8 MB/s (0.5 s and 1 s): (5 + 0.5) · 1.1 + 120 + 1 = 127.05 s (blind: 5 · 1.1 + 120 = 125.5)."""
    hpc = make_site("hpc", 2.0, max_cores=2)
    engine = Engine(make_bag(2), [hpc], "model", walltime="pack", data=model(own=4, shared=8, hpc=(8, 8)))
    out = engine.handle(BagSubmitted(time=0.0))
    assert [a.walltime for a in of(out, SubmitPilot)] == [pytest.approx(127.05, abs=1e-9)]
    blind = Engine(make_bag(2), [hpc], "model", walltime="pack")
    assert [a.walltime for a in of(blind.handle(BagSubmitted(time=0.0)), SubmitPilot)] == [pytest.approx(125.5)]


def test_a_hand_ahead_binds_the_task_and_warms_its_site(sites):
    """Live (prefetch 1): at submission task 0 is handed ahead to hpc's pending pilot — bound,
    so hpc's shared 8 MB leave at 0 and are there at 1 (8 MB/s). pool (2 MB/s in: 4 s of shared)
    starts at 2 and takes the task back: T̂x'(hpc) = 5 + 0 (warm), T̂x'(pool) = 10 + 4, Ŵ = 9
    (with hpc still cold it would be 14 − 6 = 8)."""
    engine = Engine(make_bag(1), sites, "model+reselect", prefetch=1, data=model(shared=8, hpc=(8, 8), pool=(2, 2)))
    out = engine.handle(BagSubmitted(time=0.0))
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=1, pilot=0, site="hpc")]
    assert engine.tasks[0].state is TaskState.QUEUED
    out = engine.handle(PilotStarted(time=2.0, pilot=1))
    assert of(out, CancelTask) == [CancelTask(task=0, attempt=1, pilot=0, site="hpc")]
    assert decided(out, "reselect-provisional") == [(0, 5.0, 14.0, 9.0)]


def test_outputs_measured_starts_pricing_a_bag_whose_output_size_was_unknown():
    """A bag with outputs but no output_mb is priced with no data; once deliveries measure its
    outputs (OutputsMeasured), the next choice prices their trip home: 100 MB at 1 MB/s out of
    the slow site is 100 s, which turns a 10 s lead of that site into a 90 s loss."""
    from conftest import make_bag, make_site
    from resel.domain import Bandwidth
    from resel.engine import Engine
    from resel.events import BagSubmitted, OutputsMeasured
    from resel.transfer import TransferModel
    fast = make_site("fast", 2.0)          # T̂x 5 s at conftest's instructions
    slow_link = make_site("far", 4.0)      # T̂x 2.5 s, but 1 MB/s home
    model = TransferModel(0.0, 0.0, 0.0, bandwidth={"far": Bandwidth(1.0, 1.0), "fast": Bandwidth(1000.0, 1000.0)})
    engine = Engine(make_bag(2), [fast, slow_link], "model", data=model)
    assert engine.data is None and engine.data_model is model
    engine.handle(OutputsMeasured(time=0.0, out_bytes=100e6)) if False else None   # events before submission are refused
    second = Engine(make_bag(2), [fast, slow_link], "model", data=model)
    second.handle(BagSubmitted(time=0.0))
    assert [t.origin for t in second.tasks] == [1, 1]          # no data known: the faster clock
    second.handle(OutputsMeasured(time=1.0, out_bytes=100e6))
    assert second.data is not None and second.data.out_bytes == 100e6
    assert second._data_s(1, 1.0) == 100.0 and second._data_s(0, 1.0) == 0.1
