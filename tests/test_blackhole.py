"""Black-hole sites (issue 18 item 1): the rule by hand, the engine's quarantine and release, and
the property that a bag still completes when one of three simulated sites fails every task."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_bag, make_site
from resel.sim.simulation import simulate
from resel.blackhole import QuarantinePolicy, SiteHealth, is_black_hole
from resel.domain import Truth
from resel.engine import Engine
from resel.events import (
    DISPATCH_FAILED, BagSubmitted, Decision, DispatchTask, PilotEnded, PilotRequeued, PilotStarted, SetTimer, SiteQuarantined,
    SiteReleased, SubmitPilot, TaskFailed, TaskFinished, TimerFired,
)
from resel.models.distributions import Dist

POLICY = QuarantinePolicy()


def of(actions, cls):
    return [a for a in actions if type(a) is cls]


# ---------------------------------------------------------------- the rule, by hand
@pytest.mark.parametrize("n, bad, others_n, others_bad, expected, why", [
    (4, 4, 0, 0, False, "4 bad < min_bad 5"),
    (5, 5, 0, 0, True, "5/5 = 1.0 ≥ 0.5, nothing measured elsewhere (rate 0)"),
    (10, 5, 0, 0, True, "5/10 = 0.5 ≥ 0.5: the threshold itself quarantines"),
    (11, 5, 0, 0, False, "5/11 = 0.4545 < 0.5"),
    (10, 6, 10, 3, True, "0.6 ≥ 2 · 0.3 = 0.6: equal to the ratio quarantines"),
    (10, 6, 100, 31, False, "0.6 < 2 · 0.31 = 0.62: it fails everywhere, the site is not to blame"),
    (5, 5, 5, 5, False, "the command fails everywhere: 1.0 < 2 · 1.0"),
])
def test_rule_by_hand(n, bad, others_n, others_bad, expected, why):
    assert is_black_hole(SiteHealth(n=n, bad=bad), others_n, others_bad, POLICY) is expected, why


def test_rule_off_and_backoff_doubles_up_to_its_cap():
    assert not is_black_hole(SiteHealth(n=9, bad=9), 0, 0, QuarantinePolicy(enabled=False))
    # 1800 · 2^(k−1), capped at 4 h = 14400 s
    assert [POLICY.backoff_for(k) for k in (1, 2, 3, 4, 5, 9)] == [1800, 3600, 7200, 14400, 14400, 14400]


# ---------------------------------------------------------------- the engine
def _bh_engine(count: int = 10) -> tuple[Engine, list]:
    """bh: 4 GHz (T̂x 2.5 s), 8 cores; ok: 2 GHz (T̂x 5 s). ``model`` puts every task on bh."""
    bh, ok = make_site("bh", 4.0, cores=8), make_site("ok", 2.0, cores=8)
    engine = Engine(make_bag(count), [bh, ok], "model")
    out = engine.handle(BagSubmitted(time=0.0))
    out += engine.handle(PilotStarted(time=1.0, pilot=0))
    return engine, out


def test_five_failures_quarantine_the_site_and_move_its_waiting_tasks():
    engine, out = _bh_engine()
    assert [(a.task, a.site) for a in of(out, DispatchTask)] == [(t, "bh") for t in range(8)]
    for task in range(4):   # each failed task goes back to the front and straight into its slot
        act = engine.handle(TaskFailed(time=2.0, task=task, attempt=1))
        assert of(act, DispatchTask) == [DispatchTask(task=task, attempt=2, pilot=0, site="bh")]
        assert not of(act, SiteQuarantined)
    # the 5th bad outcome of 5 (rate 1.0, nothing elsewhere): quarantined before the slot refills
    act = engine.handle(TaskFailed(time=2.0, task=4, attempt=1))
    assert of(act, SiteQuarantined) == [SiteQuarantined(
        time=2.0, site="bh", until=1802.0, reason="5 of 5 attempts/pilots failed or were lost (100%); "
                                                  "elsewhere none measured")]
    assert not of(act, DispatchTask)
    # the waiting tasks (4 first: it went to the front) move to ok, which is asked for 3 slots
    assert [(d.kind, d.task, d.origin, d.target) for d in of(act, Decision)] == [
        ("quarantine", 4, "bh", "ok"), ("quarantine", 8, "bh", "ok"), ("quarantine", 9, "bh", "ok")]
    assert of(act, SetTimer) == [SetTimer(at=1802.0, task=-1, attempt=1, site="bh")]
    assert of(act, SubmitPilot) == [SubmitPilot(pilot=1, site="ok", cores=3, walltime=48 * 3600.0)]
    assert set(engine.quarantined) == {"bh"}
    # a task still running there that fails now is requeued on ok, not on bh; it had failed on
    # bh before, so bh's counts do not change (a task failing again says nothing new of a site)
    engine.handle(TaskFailed(time=3.0, task=0, attempt=2))
    assert engine.tasks[0].origin == 1 and engine.tasks[0].state.value == "waiting"
    assert (engine.health[0].n, engine.health[0].bad) == (5, 5)
    # a success there still counts for it, but it stays out until its back-off ends
    act = engine.handle(TaskFinished(time=4.0, task=5, attempt=1))
    assert not of(act, DispatchTask) and engine.health[0].n == 6 and engine.health[0].bad == 5

    # the release: counts restart and the tasks the quarantine moved come back (the retry);
    # bh's pilot has three free slots (tasks 4, 0 and 5 left it) and takes all three at once
    act = engine.handle(TimerFired(time=1802.0, task=-1, attempt=1, site="bh"))
    assert of(act, SiteReleased) == [SiteReleased(time=1802.0, site="bh")]
    assert [(d.kind, d.task) for d in of(act, Decision)] == [
        ("quarantine-release", 4), ("quarantine-release", 8), ("quarantine-release", 9)]
    assert [(a.task, a.site) for a in of(act, DispatchTask)] == [(4, "bh"), (8, "bh"), (9, "bh")]
    assert engine.quarantined == {} and (engine.health[0].n, engine.health[0].bad) == (0, 0)
    # the same timer again (a replayed or repeated report) changes nothing
    assert engine.handle(TimerFired(time=1803.0, task=-1, attempt=1, site="bh")) == []


def test_the_last_usable_site_is_never_quarantined():
    """One site only: it fails every task, and the tasks are given up after max_attempts (3),
    never moved nowhere."""
    engine = Engine(make_bag(2), [make_site("bh", 4.0, cores=2)], "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    out = []
    for attempt in (1, 2, 3):
        for task in (0, 1):
            out += engine.handle(TaskFailed(time=1.0 + attempt, task=task, attempt=attempt))
    assert not of(out, SiteQuarantined) and engine.failed_count == 2 and engine.finished


def test_a_pilot_that_takes_its_tasks_down_is_one_incident():
    """A pilot ending under 8 running tasks (not at its walltime) is one bad outcome, not eight;
    a requeue is one too; a pilot reaching its walltime is none."""
    engine, _ = _bh_engine(count=8)
    engine.handle(PilotEnded(time=50.0, pilot=0, reason="node_fail"))
    assert (engine.health[0].n, engine.health[0].bad) == (1, 1)
    engine.handle(PilotStarted(time=60.0, pilot=1))
    engine.handle(PilotRequeued(time=70.0, pilot=1))
    assert (engine.health[0].n, engine.health[0].bad) == (2, 2)
    engine.handle(PilotStarted(time=80.0, pilot=1))
    engine.handle(PilotEnded(time=80.0 + 48 * 3600.0, pilot=1, reason="walltime"))
    assert (engine.health[0].n, engine.health[0].bad) == (2, 2) and not engine.quarantined


def test_pilots_dying_at_start_quarantine_their_site():
    """Five pilots of a per-task pool ended (rejected) before they started: five bad outcomes of
    five, so the pool is quarantined and its task goes to hpc."""
    hpc, pool = make_site("hpc", 1.0, cores=4), make_site("pool", 4.0, mode="per-task", max_pilots=1)
    engine = Engine(make_bag(1), [hpc, pool], "model")
    out = engine.handle(BagSubmitted(time=0.0))
    for k in range(5):
        pid = of(out, SubmitPilot)[0].pilot
        assert of(out, SubmitPilot)[0].site == "pool"
        out = engine.handle(PilotEnded(time=10.0 * (k + 1), pilot=pid, reason="failed"))
    assert of(out, SiteQuarantined)[0].site == "pool"
    assert [(d.kind, d.task, d.target) for d in of(out, Decision)] == [("quarantine", 0, "hpc")]
    assert [a.site for a in of(out, SubmitPilot)] == ["hpc"]


def test_a_task_is_not_given_up_on_one_sites_word():
    """A 1-slot black hole fails task 0 three times (max_attempts) before the site has 5 bad
    outcomes: it is not given up but moved to ok; its next failure (4 ≥ 3, on two sites) is final."""
    bh, ok = make_site("bh", 4.0, cores=1), make_site("ok", 2.0, cores=1)
    engine = Engine(make_bag(2), [bh, ok], "model")
    engine.handle(BagSubmitted(time=0.0))
    engine.handle(PilotStarted(time=1.0, pilot=0))
    engine.handle(TaskFailed(time=2.0, task=0, attempt=1))
    engine.handle(TaskFailed(time=3.0, task=0, attempt=2))
    out = engine.handle(TaskFailed(time=4.0, task=0, attempt=3))
    assert engine.tasks[0].state.value == "waiting" and engine.tasks[0].origin == 1
    assert [(a.task, a.site) for a in of(out, DispatchTask)] == [(1, "bh")]
    assert of(out, SubmitPilot)[0].site == "ok"
    pid = of(out, SubmitPilot)[0].pilot
    out = engine.handle(PilotStarted(time=5.0, pilot=pid))
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=4, pilot=pid, site="ok")]
    engine.handle(TaskFailed(time=6.0, task=0, attempt=4))
    assert engine.tasks[0].state.value == "failed"


def test_a_task_sent_elsewhere_by_its_failures_is_never_moved_back_nor_condemns_the_site():
    """A broken task (a bad input: it fails wherever it runs) fails max_attempts times on a, its
    failures all there: it goes to b for one more try — and stays there. a is faster, acquired
    and a re-selection target while b's pilot waits, so before, a's free slot took it back at
    once, and it failed there again and again, one more try each time, until a — a healthy site
    whose other tasks were done — was quarantined for that one task (seen live: 5 failures of
    one task on tba, tba quarantined for 30 minutes). a counts the task's failures once."""
    a, b = make_site("a", 4.0, cores=2, target=True), make_site("b", 2.0, cores=2)
    engine = Engine(make_bag(3), [a, b], "model+reselect")
    out = engine.handle(BagSubmitted(time=0.0))
    out += engine.handle(PilotStarted(time=1.0, pilot=0))
    assert [(d.task, d.site) for d in of(out, DispatchTask)] == [(0, "a"), (1, "a")]
    out = engine.handle(TaskFinished(time=2.0, task=1, attempt=1))
    assert [(d.task, d.site) for d in of(out, DispatchTask)] == [(2, "a")]
    for attempt in (1, 2):
        out = engine.handle(TaskFailed(time=2.0 + attempt, task=0, attempt=attempt))
        assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=attempt + 1, pilot=0, site="a")]
    out = engine.handle(TaskFailed(time=5.0, task=0, attempt=3))
    assert not of(out, DispatchTask) and [p.site for p in of(out, SubmitPilot)] == ["b"]
    assert engine.tasks[0].origin == 1 and engine.tasks[0].state.value == "waiting"
    out = engine.handle(TaskFinished(time=6.0, task=2, attempt=1))     # a's slots both free now
    assert not of(out, DispatchTask) and not of(out, SiteQuarantined)
    assert (engine.health[0].n, engine.health[0].bad) == (3, 1) and not engine.quarantined
    out = engine.handle(PilotStarted(time=60.0, pilot=1))
    assert of(out, DispatchTask) == [DispatchTask(task=0, attempt=4, pilot=1, site="b")]
    engine.handle(TaskFailed(time=61.0, task=0, attempt=4))
    assert engine.tasks[0].state.value == "failed" and engine.finished and not engine.quarantined
    assert [a.site for a in engine.tasks[0].attempts] == [0, 0, 0, 1]


@pytest.mark.parametrize("reason, quarantined", [("exit code 3", False),
                                                 (DISPATCH_FAILED + "Permission denied", True)])
def test_a_task_failing_again_counts_once_but_a_refused_dispatch_every_time(reason, quarantined):
    """Two tasks fail 3 and 2 times on bh: as their own non-zero exits that is 2 bad outcomes
    (each task once: a broken task says nothing new the second time), no quarantine; as
    dispatches bh itself refused (its inbox not writable), 5 — bh's fault each time —, and bh
    is quarantined on the fifth."""
    engine, _ = _bh_engine(count=2)
    out = []
    for task, attempts in ((0, 3), (1, 2)):
        for attempt in range(1, attempts + 1):
            out += engine.handle(TaskFailed(time=1.0 + attempt, task=task, attempt=attempt, reason=reason))
    assert engine.health[0].bad == (5 if quarantined else 2)
    assert bool(of(out, SiteQuarantined)) is quarantined


# ---------------------------------------------------------------- the property, simulated
def _three_sites(black: int, pool_target: bool):
    from resel.domain import Clock, PilotPolicy, Site, WaitModel
    sites = []
    for i, (name, ghz, mode) in enumerate([("a", 2.0, "single"), ("b", 2.5, "single"), ("c", 1.5, "per-task")]):
        truth = Truth(1.0, Dist.fixed(1.0), Dist.fixed(ghz), fail=1.0 if i == black else 0.0, fail_after=30.0)
        sites.append(Site(name=name, kind="simulated", cores=16, clock=Clock(ghz),
                          pilot=PilotPolicy(mode=mode, max_pilots=1 if mode == "single" else 16),
                          reselect_target=pool_target or mode == "per-task",
                          wait=WaitModel(Dist.fixed(60.0 * (i + 1))), truth=truth))
    return sites


@settings(max_examples=40, deadline=None)
@given(black=st.integers(0, 2), count=st.integers(1, 60), seed=st.integers(0, 50),
       strategy=st.sampled_from(["random", "model", "reselect", "model+reselect", "topk:2+reselect"]),
       pool_target=st.booleans(), walltime=st.sampled_from(["limit", "pack"]))
def test_a_bag_completes_when_one_of_three_sites_fails_every_task(black, count, seed, strategy, pool_target,
                                                                   walltime):
    """Whichever site is the black hole, whatever the strategy and walltime rules: every task is
    done exactly once, none failed, no attempt finished on the black hole, no two attempts of a
    task ran at once (no loss, no double completion), and none was killed at walltime."""
    bag = dataclasses.replace(make_bag(count, instructions=2e12))
    res = simulate(bag, _three_sites(black, pool_target), strategy, seed=seed, walltime=walltime)
    assert res.walltime_kills == 0
    engine = res.engine
    assert engine.finished and engine.done_count == count and engine.failed_count == 0
    for task in engine.tasks:
        outcomes = [a.outcome for a in task.attempts]
        assert outcomes.count("done") == 1, task.attempts
        done = next(a for a in task.attempts if a.outcome == "done")
        assert done.site != black
        spans = sorted((a.start, a.end) for a in task.attempts if a.end is not None and a.outcome != "withdrawn")
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), spans


# ---------------------------------------------------------------- sites file → simulate → report
def test_a_sites_file_black_hole_is_quarantined_and_the_report_says_so(tmp_path):
    """supermic (the fastest: `model` sends it every task) gets truth.fail = 1 in a copy of the
    default sites file: the run completes elsewhere, and `resel report` names the quarantine with
    its counts; --json lists it."""
    import json
    import re

    from click.testing import CliRunner
    from resel.cli import cli
    from resel.api import default_sites_path

    text = default_sites_path().read_text()
    head, tail = text.split('name = "supermic"', 1)
    tail = re.sub(r"truth = \{ kappa = 1\.0,", "truth = { kappa = 1.0, fail = 1.0, fail_after = 60,", tail, count=1)
    sites = tmp_path / "sites.toml"
    sites.write_text(head + 'name = "supermic"' + tail)
    db = tmp_path / "r.db"
    run = CliRunner().invoke(cli, ["simulate", "--sites", str(sites), "--strategies", "model", "--sizes", "32",
                                   "--repeat", "1", "--db", str(db), "--json"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    doc = json.loads(run.output)
    cell = doc["results"][0]
    assert cell["failed"] == 0 and cell["quarantines"] >= 1 and cell["walltime_kills"] == 0
    run_id = cell["run_ids"][0]
    shown = CliRunner().invoke(cli, ["report", str(run_id), "--db", str(db)], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert re.search(r"quarantined supermic at [\d.,]+ (s|min|h|d) \(until [\d.,]+ (s|min|h|d).*\): black hole — \d+ of \d+ attempts",
                     " ".join(shown.output.split())), shown.output
    js = json.loads(CliRunner().invoke(cli, ["report", str(run_id), "--db", str(db), "--json"]).output)
    assert [q["site"] for q in js["quarantines"]][:1] == ["supermic"]
    assert js["quarantines"][0]["until"] - js["quarantines"][0]["time"] == pytest.approx(1800)


def test_tasks_moved_one_event_at_a_time_in_one_instant_get_one_pilot():
    """After the quarantine at t = 2 (tasks 4, 8, 9 moved: ok asked for 3 slots), tasks 5, 6, 7
    fail at the same instant and follow one by one: the pilot asked for at this very instant is
    replaced each time (it has no queue place to lose), ending with one pilot of 6 slots instead
    of 3 tasks left to run in waves behind a 3-slot pilot."""
    engine, _ = _bh_engine()
    out = []
    for task in range(5):
        out += engine.handle(TaskFailed(time=2.0, task=task, attempt=1))
    for task in (5, 6, 7):
        out += engine.handle(TaskFailed(time=2.0, task=task, attempt=1))
    asked = [(a.pilot, a.cores) for a in of(out, SubmitPilot)]
    assert asked == [(1, 3), (2, 4), (3, 5), (4, 6)]
    from resel.events import CancelPilot
    assert [a.pilot for a in of(out, CancelPilot)] == [1, 2, 3]
    assert [p.slots for p in engine.pilots.values() if p.state.value == "pending"] == [6]


def test_pilots_dying_under_their_tasks_quarantine_the_site_without_losing_a_task():
    """bh's pilot dies 10 s after each start with its 8 tasks on it, five times: five incidents
    of five quarantine bh, and the tasks — at max_losses (5), all lost on bh — are not given up
    but moved to ok, which is asked for a pilot of 8 slots."""
    engine, out = _bh_engine(count=8)
    pid, start = 0, 1.0
    for k in range(5):
        if k:
            pid = of(out, SubmitPilot)[0].pilot
            out = engine.handle(PilotStarted(time=start, pilot=pid))
        assert len(of(out, DispatchTask)) == 8
        out = engine.handle(PilotEnded(time=start + 10.0, pilot=pid, reason="failed"))
        start += 20.0
    assert [a.site for a in of(out, SiteQuarantined)] == ["bh"]
    assert engine.failed_count == 0 and all(t.state.value == "waiting" and t.origin == 1 for t in engine.tasks)
    assert all(t.losses == 5 for t in engine.tasks)
    assert [(a.site, a.cores) for a in of(out, SubmitPilot)] == [("ok", 8)]
