"""resel.sim.grid: dispatch, reallocation and the paired comparison, on hand-computed cases.

Every case below is small enough to follow on paper. Unless said otherwise, clusters run
conservative backfilling and have speed 1.0, jobs use 1 core, and ECT means
"estimated start + estimate" as the cluster's own scheduler sees it (requested walltimes).
Outcomes are keyed by the job's arrival number (1-based), which equals the id given here.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from resel.errors import ReselError
from resel.sim.policies import POLICIES
from resel.sim.grid import (
    ALGORITHMS,
    DISPATCHERS,
    HEURISTICS,
    Cluster,
    Grid,
    GridResult,
    Move,
    Outcome,
    Reallocation,
    compare,
)
from resel.sim.swf import Job


def job(id: int, submit: float, run: float, size: int = 1, req_time: float = -1) -> Job:
    """A trace job from (id, submit, run, size, req_time); every other field unknown (-1)."""
    return Job(id, submit, -1, run, size, -1, -1, size, req_time, -1, -1, -1, -1, -1, -1, -1, -1, -1)


def placed(result: GridResult) -> dict[int, tuple[str, float, float]]:
    """{job: (cluster, start, end)} of a finished run."""
    return {k: (o.cluster, o.start, o.end) for k, o in sorted(result.outcomes.items())}


def clusters_chosen(result: GridResult) -> list[str]:
    """The cluster of each job, in arrival order."""
    return [result.outcomes[k].cluster for k in sorted(result.outcomes)]


A1, B1 = Cluster("a", 1), Cluster("b", 1)

# The over-estimate case. j1 asks 1000 s but runs 100 s on a; j2 (900 s) goes to b
# (ECT a 1000 + 900 = 1900 > b 900); j3 (500 s): a 1000 + 500 = 1500 > b 900 + 500 = 1400,
# so it queues on b behind j2. At 100 j1 ends and a is idle: on a, j3 would end at t + 500.
EARLY = [job(1, 0, 100, 1, 1000), job(2, 0, 900, 1, 900), job(3, 0, 500, 1, 500)]


def run_early(reallocation: Reallocation | None, **kw) -> GridResult:
    return Grid([A1, B1], "mct", reallocation, **kw).run(EARLY)


# ---------------------------------------------------------------------------- MCT dispatch

def test_mct_sends_a_job_to_the_faster_idle_cluster():
    """Two idle clusters, speeds 1 and 2: ECT 400 on a, 200 on b, so the job goes to b."""
    r = Grid([Cluster("a", 4, 1.0), Cluster("b", 4, 2.0)], "mct").run([job(1, 0, 400, 4, 400)])
    assert placed(r) == {1: ("b", 0.0, 200.0)}


def test_mct_sends_a_job_to_the_slow_cluster_when_the_fast_one_is_busy_long_enough():
    """j1 holds b until 200; j2 at 10: ECT a 10 + 100 = 110 < b 200 + 50 = 250, so a; j3 too."""
    jobs = [job(1, 0, 400, 4, 400), job(2, 10, 100, 4, 100), job(3, 20, 100, 4, 100)]
    r = Grid([Cluster("a", 4, 1.0), Cluster("b", 4, 2.0)], "mct").run(jobs)
    # j3 at 20: a 110 + 100 = 210 < b 250
    assert placed(r) == {1: ("b", 0.0, 200.0), 2: ("a", 10.0, 110.0), 3: ("a", 110.0, 210.0)}


# ---------------------------------------------------------------------------- ISIS dispatchers

# a and b have 1 core. j1 (1000 s) and j2 (1000 s) at 0 and 1; j3..j6 ask 10 s each at 2..5.
QUEUE_JOBS = [job(1, 0, 1000, 1, 1000), job(2, 1, 1000, 1, 1000)] + [job(i, i - 1, 10, 1, 10) for i in range(3, 7)]


def test_less_submitted_jobs_is_round_robin():
    """Three clusters and five jobs: a, b, c, a, b whatever the load."""
    r = Grid([Cluster("a", 4), Cluster("b", 4), Cluster("c", 4)], "less-submitted-jobs").run(
        [job(i, i, 100, 1, 100) for i in range(1, 6)])
    assert clusters_chosen(r) == ["a", "b", "c", "a", "b"]


def test_less_jobs_in_queue_counts_only_waiting_jobs():
    """Queues (waiting jobs only) a/b before each pick: 0/0, 0/0, 1/0, 1/0, 1/1, 2/1 -> a a b b a b."""
    # j2 joins a although a is busy: j1 runs, it does not wait. j3 starts on b at 2 (ends 12),
    # so j4 waits on b; j5 sees 1/1 and takes a (first on ties); j6 sees 2/1.
    r = Grid([A1, B1], "less-jobs-in-queue").run(QUEUE_JOBS)
    assert clusters_chosen(r) == ["a", "a", "b", "b", "a", "b"]


def test_less_work_left_weighs_the_queue_by_requested_core_seconds():
    """Work left a/b: 0/0, 0/0, 1000/0, 1000/0, 1000/10, 1000/20 -> a a b b b b."""
    r = Grid([A1, B1], "less-work-left").run(QUEUE_JOBS)
    assert clusters_chosen(r) == ["a", "a", "b", "b", "b", "b"]


# a (speed 1) and b (speed 2), 1 core each. j1 asks 60 s, j2 80 s, j3 100 s, all at 0.
SPEED_JOBS = [job(1, 0, 60, 1, 60), job(2, 0, 80, 1, 80), job(3, 0, 100, 1, 100)]
SPEED_CLUSTERS = [Cluster("a", 1, 1.0), Cluster("b", 1, 2.0)]


def test_less_waittime_ignores_speed_and_minimises_the_predicted_wait():
    """Waits a/b: j1 0/0 -> a; j2 60/0 -> b (busy till 40); j3 60/40 -> b."""
    r = Grid(SPEED_CLUSTERS, "less-waittime").run(SPEED_JOBS)
    assert clusters_chosen(r) == ["a", "b", "b"]


def test_less_sld_minimises_the_predicted_slowdown():
    """SLD a/b: j1 1 = 1 -> a (tie); j2 (60+80)/80 > 40/40 -> b; j3 (60+100)/100 = 1.6 < (40+50)/50 = 1.8 -> a."""
    r = Grid(SPEED_CLUSTERS, "less-sld").run(SPEED_JOBS)
    assert clusters_chosen(r) == ["a", "b", "a"]


def test_mct_differs_from_less_waittime_on_the_same_jobs():
    """ECT a/b: j1 60/30 -> b; j2 80/30 + 40 = 70 -> b; j3 100/70 + 50 = 120 -> a."""
    r = Grid(SPEED_CLUSTERS, "mct").run(SPEED_JOBS)
    assert clusters_chosen(r) == ["b", "b", "a"]


RANDOM_CLUSTERS = [Cluster("a", 2), Cluster("b", 4), Cluster("c", 4)]
RANDOM_JOBS = [job(i, i, 10, 4 if i % 5 == 0 else i % 3 + 1, 10) for i in range(1, 31)]


def test_random_is_reproducible_by_seed():
    """The same seed gives the same choices; another seed other choices."""
    def picks(seed):
        return clusters_chosen(Grid(RANDOM_CLUSTERS, "random", seed=seed).run(RANDOM_JOBS))
    assert picks(7) == picks(7)
    assert picks(7) != picks(8)


def test_random_only_picks_clusters_the_job_fits():
    """A 4-core job never goes to the 2-core cluster a."""
    r = Grid(RANDOM_CLUSTERS, "random", seed=3).run(RANDOM_JOBS)
    assert all(r.outcomes[k].cluster != "a" for k in range(5, 31, 5))


def test_a_job_too_big_for_every_cluster_is_skipped():
    """A 3-core job on two 2-core clusters is counted as skipped, not run."""
    r = Grid([Cluster("a", 2), Cluster("b", 2)]).run([job(1, 0, 10, 3, 10), job(2, 0, 10, 2, 10)])
    assert r.skipped == 1 and set(r.outcomes) == {2}


# ---------------------------------------------------------------------------- regular reallocation

def test_without_reallocation_the_queued_job_waits_on_its_cluster():
    """j3 waits on b behind j2 and ends at 900 + 500 = 1400."""
    assert placed(run_early(None)) == {1: ("a", 0.0, 100.0), 2: ("b", 0.0, 900.0), 3: ("b", 900.0, 1400.0)}


def test_regular_moves_a_waiting_job_after_an_early_end_elsewhere():
    """At the round at 200: old ECT 900 + 500 = 1400 on b, new 200 + 500 = 700 on a -> one move."""
    r = run_early(Reallocation("regular", "mct", period=200))
    assert r.moves == [Move(200, 3, "b", "a", 1400.0, 700.0)]


def test_a_moved_job_runs_on_its_new_cluster_and_counts_its_move():
    """After the move at 200, j3 runs on a from 200 to 700; its outcome records one move."""
    r = run_early(Reallocation("regular", "mct", period=200))
    assert placed(r)[3] == ("a", 200.0, 700.0)
    assert r.outcomes[3].moves == 1 and r.outcomes[3].submit == 0.0


@pytest.mark.parametrize("margin, moves", [(699, 1), (700, 0)])
def test_margin_blocks_a_move_whose_gain_is_not_above_it(margin, moves):
    """The gain is 1400 - 700 = 700 s: a move needs new ECT + margin < old ECT, strictly."""
    assert len(run_early(Reallocation("regular", "mct", period=200, margin=margin)).moves) == moves


# The tail case, FCFS everywhere: a has 2 cores, b 1.
# j1 (1 core, asks 3000, runs 100) and j2 (1 core, 1000 s) on a; j3 (2000 s) on b
# (a 1000 + 2000 = 3000 > b 2000); j4 (2 cores, 100 s) only fits a: 3000 -> 3100;
# j5 (100 s) at 2: a after j4 3100 + 100 = 3200, b 2000 + 100 = 2100 -> b.
# At 100 j1 ends: j4 (2 cores) still waits for j2 (ends 1000), so on a j5 would start
# behind j4 at 1100 -> ECT 1200.
TAIL_CLUSTERS = [Cluster("a", 2, 1.0, "fcfs"), Cluster("b", 1, 1.0, "fcfs")]
TAIL_JOBS = [job(1, 0, 100, 1, 3000), job(2, 0, 1000, 1, 1000), job(3, 0, 2000, 1, 2000),
             job(4, 1, 100, 2, 100), job(5, 2, 100, 1, 100)]


def test_a_moved_job_joins_the_tail_of_the_target_queue():
    """j5 moves b -> a at 200 (2100 -> 1200) and starts after j4 at 1100, not on a's free core at 200."""
    r = Grid(TAIL_CLUSTERS, "mct", Reallocation("regular", "mct", period=200)).run(TAIL_JOBS)
    assert r.moves == [Move(200, 5, "b", "a", 2100.0, 1200.0)]
    assert placed(r)[4] == ("a", 1000.0, 1100.0)
    assert placed(r)[5] == ("a", 1100.0, 1200.0)


@pytest.mark.parametrize("margin, moved", [(899, True), (900, False)])
def test_margin_on_the_tail_case(margin, moved):
    """Gain 2100 - 1200 = 900 s: a margin of 899 lets j5 move, 900 keeps it on b."""
    r = Grid(TAIL_CLUSTERS, "mct", Reallocation("regular", "mct", period=200, margin=margin)).run(TAIL_JOBS)
    assert r.outcomes[5].cluster == ("a" if moved else "b")


def test_exact_walltimes_make_no_moves_where_requests_would():
    """With exact walltimes MCT already sends j3 to a (100 + 500 < 900 + 500): nothing to correct."""
    assert run_early(Reallocation("regular", "mct", period=200)).moves
    r = run_early(Reallocation("regular", "mct", period=200), exact_walltimes=True)
    assert r.moves == []
    assert placed(r) == {1: ("a", 0.0, 100.0), 2: ("b", 0.0, 900.0), 3: ("a", 100.0, 600.0)}


@pytest.mark.parametrize("heuristic", HEURISTICS)
def test_every_heuristic_makes_the_single_move(heuristic):
    """With one waiting job the order does not matter: every heuristic moves j3 at 200."""
    r = run_early(Reallocation("regular", heuristic, period=200))
    assert r.moves == [Move(200, 3, "b", "a", 1400.0, 700.0)]


# ---------------------------------------------------------------------------- all-cancel

# j1 (asks 2000, runs 100) on a; j2 (900 s) on b; j3 (500), j4 (400), j5 (200) all queue on b
# (a is held until 2000 by j1's request). At 100 j1 ends. At the round at 200, everything
# waiting is withdrawn and resubmitted in submission order to its min-ECT cluster:
# j3: a 200 + 500 = 700 < b 900 + 500 = 1400 -> a; j4: a 700 + 400 = 1100 < b 1300 -> a;
# j5: a 1100 + 200 = 1300 > b 900 + 200 = 1100 -> b (no move).
CANCEL_JOBS = [job(1, 0, 100, 1, 2000), job(2, 0, 900, 1, 900), job(3, 0, 500, 1, 500),
               job(4, 0, 400, 1, 400), job(5, 0, 200, 1, 200)]
CANCEL_PLACED = {1: ("a", 0.0, 100.0), 2: ("b", 0.0, 900.0), 3: ("a", 200.0, 700.0),
                 4: ("a", 700.0, 1100.0), 5: ("b", 900.0, 1100.0)}


def test_all_cancel_resubmits_every_waiting_job_to_its_min_ect_cluster():
    """Two moves (j3, j4 to a); j5 goes back to b; the moves carry no old ECT."""
    r = Grid([A1, B1], "mct", Reallocation("all-cancel", "mct", period=200)).run(CANCEL_JOBS)
    assert [(m.time, m.job, m.source, m.target, m.new_ect) for m in r.moves] == [
        (200, 3, "b", "a", 700.0), (200, 4, "b", "a", 1100.0)]
    assert all(math.isnan(m.old_ect) for m in r.moves)
    assert placed(r) == CANCEL_PLACED


def test_all_cancel_ignores_the_margin():
    """A margin of 10,000 s stops every regular move but not all-cancel's resubmissions."""
    regular = Grid([A1, B1], "mct", Reallocation("regular", "mct", period=200, margin=10_000)).run(CANCEL_JOBS)
    cancel = Grid([A1, B1], "mct", Reallocation("all-cancel", "mct", period=200, margin=10_000)).run(CANCEL_JOBS)
    assert len(regular.moves) == 0 and len(cancel.moves) == 2
    assert placed(cancel) == CANCEL_PLACED


# j1 (asks 3000, runs 100) on a; j2 (2000 s) on b; j3 (200 s) at 1 goes to b (a 3200 > b 2200).
# j1 ends at 100; j4 (199 s) at 101 starts on a (ends 300); j5 (100 s) at 102 queues on a
# (300 + 100 = 400 < b 2100). At the round at 200 both waiting jobs are withdrawn. Best ECTs:
# j5 min(a 400, b 2100) = 400, j3 min(a 500, b 2200) = 500, so MinMin resubmits j5 first:
# j5 on a 300-400, then j3 on a 400-600 (a 600 < b 2200).
MINMIN_JOBS = [job(1, 0, 100, 1, 3000), job(2, 0, 2000, 1, 2000), job(3, 1, 200, 1, 200),
               job(4, 101, 199, 1, 199), job(5, 102, 100, 1, 100)]


def test_all_cancel_mct_resubmits_in_submission_order():
    """With the mct order j3 (submitted at 1) is resubmitted before j5: j3 300-500, j5 500-600."""
    r = Grid([A1, B1], "mct", Reallocation("all-cancel", "mct", period=200)).run(MINMIN_JOBS)
    assert placed(r)[3] == ("a", 300.0, 500.0) and placed(r)[5] == ("a", 500.0, 600.0)


def test_all_cancel_minmin_resubmits_the_smallest_best_ect_first():
    """MinMin: j5 (best ECT 400, on its own cluster a) goes before j3 (best 500): j5 300-400, j3 400-600."""
    r = Grid([A1, B1], "mct", Reallocation("all-cancel", "minmin", period=200)).run(MINMIN_JOBS)
    assert placed(r)[5] == ("a", 300.0, 400.0)
    assert placed(r)[3] == ("a", 400.0, 600.0)


# ---------------------------------------------------------------------------- dry run

def test_dry_run_lists_the_planned_moves_of_every_round():
    """j3 stays on b, so every round until it starts at 900 plans the move again: 700, 900, 1100, 1300."""
    r = run_early(Reallocation("regular", "mct", period=200), dry_run=True)
    assert r.moves == []
    assert r.planned == [Move(t, 3, "b", "a", 1400.0, t + 500.0) for t in (200, 400, 600, 800)]


def test_dry_run_schedule_equals_the_run_without_reallocation():
    """The same outcomes as without reallocation, and no outcome counts a move."""
    r = run_early(Reallocation("regular", "mct", period=200), dry_run=True)
    assert placed(r) == placed(run_early(None))
    assert all(o.moves == 0 for o in r.outcomes.values())


def test_dry_run_summary_counts_planned_moves():
    """summary() reports 0 moves and 4 planned moves."""
    s = run_early(Reallocation("regular", "mct", period=200), dry_run=True).summary()
    assert s["moves"] == 0 and s["planned_moves"] == 4


# ---------------------------------------------------------------------------- triggers

def test_early_end_trigger_reallocates_right_after_an_early_end():
    """period 0 + early-end: j1 ends at 100 (asked 1000), a round runs at 100 and moves j3 (ECT 600)."""
    r = run_early(Reallocation("regular", "mct", period=0, on_early_end=True))
    assert r.rounds == 1
    assert r.moves == [Move(100.0, 3, "b", "a", 1400.0, 600.0)]
    assert placed(r)[3] == ("a", 100.0, 600.0)


def test_periodic_rounds_without_early_end():
    """Period 1000 from the first submit (0): rounds at 1000..5000 while j1 (5000 s) runs."""
    jobs = [job(1, 0, 5000, 1, 5000)] + [job(i + 2, i * 100, 100, 1, 10_000) for i in range(5)]
    assert Grid([A1, B1], "mct", Reallocation(period=1000)).run(jobs).rounds == 5


def test_early_end_rounds_do_not_restart_the_periodic_clock():
    """Five early ends (100..500) plus periodic rounds at 1000..5000 make 10 rounds."""
    jobs = [job(1, 0, 5000, 1, 5000)] + [job(i + 2, i * 100, 100, 1, 10_000) for i in range(5)]
    r = Grid([A1, B1], "mct", Reallocation(period=1000, on_early_end=True)).run(jobs)
    assert r.rounds == 10


# ---------------------------------------------------------------------------- compare()

def _result(outcomes: dict[int, tuple[float, float, float]], moves: int = 0) -> GridResult:
    r = GridResult([A1, B1], "mct", None)
    r.outcomes = {k: Outcome("a", s, st_, e, 0) for k, (s, st_, e) in outcomes.items()}
    r.moves = [Move(0, 1, "a", "b", 2.0, 1.0)] * moves
    return r


BASE = {1: (0, 0, 100), 2: (0, 100, 300), 3: (10, 10, 60), 4: (20, 60, 120)}


def test_compare_on_hand_made_results():
    """j2 ends earlier (250 < 300), j3 later (90 > 60): responses 550 -> 530, one move for 4 jobs."""
    other = _result({1: (0, 0, 100), 2: (0, 50, 250), 3: (10, 40, 90), 4: (20, 60, 120)}, moves=1)
    c = compare(_result(BASE), other)
    assert c == pytest.approx({"jobs": 4, "impacted_pct": 50.0, "reallocations_per_job": 0.25,
                               "earlier_pct": 25.0, "later_pct": 25.0, "relative_mean_response": 530 / 550,
                               "mean_response_base": 137.5, "mean_response": 132.5,
                               "relative_mean_wait": 120 / 140})   # waits 0+100+0+40 -> 0+50+30+40


def test_compare_uses_only_the_jobs_both_runs_have():
    """A job only one run has is ignored: 1 common job, unchanged."""
    c = compare(_result({1: (0, 0, 100), 9: (0, 0, 5)}), _result({1: (0, 0, 100), 8: (0, 0, 7)}))
    assert c["jobs"] == 1 and c["impacted_pct"] == 0.0 and c["relative_mean_response"] == 1.0


def test_compare_without_a_common_job_raises():
    """Two runs with disjoint jobs cannot be compared."""
    with pytest.raises(ReselError):
        compare(_result({1: (0, 0, 1)}), _result({2: (0, 0, 1)}))


def test_compare_on_the_early_end_runs():
    """Only j3 changes (1400 -> 700): 1/3 impacted and earlier, responses 2400 -> 1700."""
    c = compare(run_early(None), run_early(Reallocation("regular", "mct", period=200)))
    assert c["impacted_pct"] == pytest.approx(100 / 3) and c["earlier_pct"] == pytest.approx(100 / 3)
    assert c["later_pct"] == 0.0 and c["reallocations_per_job"] == pytest.approx(1 / 3)
    assert c["relative_mean_response"] == pytest.approx(1700 / 2400)


# ---------------------------------------------------------------------------- validation

@pytest.mark.parametrize("kwargs", [{"algorithm": "sometimes"}, {"heuristic": "fastest"},
                                    {"period": 0}, {"period": -5, "on_early_end": False}])
def test_bad_reallocation_settings_raise(kwargs):
    """Unknown algorithm or heuristic, or no trigger at all, is a ReselError."""
    with pytest.raises(ReselError):
        Reallocation(**kwargs)


def test_period_zero_with_early_end_is_accepted():
    """period 0 is fine when the early-end trigger is on."""
    assert Reallocation(period=0, on_early_end=True).period == 0


@pytest.mark.parametrize("args", [([], "mct"), ([A1], "fastest")])
def test_bad_grid_settings_raise(args):
    """No cluster, or an unknown dispatcher, is a ReselError."""
    with pytest.raises(ReselError):
        Grid(*args)


@pytest.mark.parametrize("speed", [0.0, -1.0, math.nan])
def test_a_cluster_with_a_non_positive_or_nan_speed_is_refused(speed):
    """A speed that is not a positive number is a ReselError, not a crash or a negative run."""
    with pytest.raises(ReselError):
        Grid([Cluster("a", 1, speed)]).run([job(1, 0, 10, 1, 10), job(2, 0, 10, 1, 10)])


# ---------------------------------------------------------------------------- invariants

SPEEDS = (1.0, 1.2, 1.4, 2.0)


@st.composite
def workloads(draw):
    clusters = [Cluster(name, draw(st.integers(1, 6)), draw(st.sampled_from(SPEEDS)),
                        draw(st.sampled_from(sorted(POLICIES))))
                for name in "abc"[:draw(st.integers(2, 3))]]
    jobs, t = [], 0
    for i in range(1, draw(st.integers(1, 10)) + 1):
        t += draw(st.integers(0, 300))
        run = draw(st.integers(1, 600))
        req = draw(st.sampled_from([-1, run, 2 * run, run + 1000, max(1, run // 2)]))
        jobs.append(job(i, t, run, draw(st.integers(1, 7)), req))
    return clusters, jobs


@st.composite
def reallocations(draw):
    if draw(st.booleans()):
        return None
    period = draw(st.sampled_from([0, 50, 250]))
    return Reallocation(draw(st.sampled_from(ALGORITHMS)), draw(st.sampled_from(HEURISTICS)), period,
                        on_early_end=period == 0 or draw(st.booleans()), margin=draw(st.sampled_from([0, 60])))


def assert_never_overcommitted(result: GridResult, clusters: list[Cluster], size: dict[int, int]) -> None:
    for c in clusters:
        events = []
        for k, o in result.outcomes.items():
            if o.cluster == c.name:
                events += [(round(o.start, 6), size[k]), (round(o.end, 6), -size[k])]
        used = 0
        for _, delta in sorted(events):        # ends (negative) before starts at the same time
            used += delta
            assert used <= c.cores, f"{c.name} overcommitted"


@settings(max_examples=40, deadline=None)
@given(workloads(), st.sampled_from(DISPATCHERS), reallocations(), st.booleans(), st.booleans(), st.integers(0, 9))
def test_every_job_completes_exactly_once_in_every_variant(workload, dispatcher, reallocation, exact, dry_run, seed):
    """One outcome per fitting job, submit <= start <= end, run = trace run / speed, no overcommit."""
    clusters, jobs = workload
    r = Grid(clusters, dispatcher, reallocation, seed=seed, exact_walltimes=exact, dry_run=dry_run).run(jobs)
    fits = {j.id for j in jobs if j.size <= max(c.cores for c in clusters)}
    assert set(r.outcomes) == fits and r.skipped == len(jobs) - len(fits)
    speed = {c.name: c.speed for c in clusters}
    cores = {c.name: c.cores for c in clusters}
    for j in jobs:
        if j.id in fits:
            o = r.outcomes[j.id]
            assert j.submit == o.submit <= o.start <= o.end
            assert o.end - o.start == pytest.approx(j.run / speed[o.cluster])
            assert cores[o.cluster] >= j.size
    assert sum(o.moves for o in r.outcomes.values()) == len(r.moves)
    assert_never_overcommitted(r, clusters, {j.id: j.size for j in jobs})
    assert r.stats.summary(1)["wait"]["n"] == len(fits)
    if dry_run or reallocation is None:
        assert r.moves == []
        assert placed(r) == placed(Grid(clusters, dispatcher, None, seed=seed, exact_walltimes=exact).run(jobs))


@settings(max_examples=40, deadline=None)
@given(workloads(), st.sampled_from(HEURISTICS), st.sampled_from([0, 50, 250]))
def test_exact_walltimes_never_move_under_conservative_mct(workload, heuristic, period):
    """Conservative + MCT + exact walltimes: a queued job's ECT elsewhere only grows, so no move even at margin 0."""
    clusters, jobs = workload
    clusters = [Cluster(c.name, c.cores, c.speed, "conservative") for c in clusters]
    realloc = Reallocation("regular", heuristic, period, on_early_end=True, margin=0)
    r = Grid(clusters, "mct", realloc, exact_walltimes=True).run(jobs)
    assert r.moves == []


# ---------------------------------------------------------------------------- recompute (offline heuristics)

RECOMPUTE_JOBS = [job(1, 0, 100, 2, 1000), job(2, 0, 300, 1, 400), job(3, 5, 50, 1, 500),
                  job(4, 10, 200, 2, 900), job(5, 20, 80, 1, 90), job(6, 30, 60, 2, 600)]


@pytest.mark.parametrize("algorithm", ["regular", "all-cancel"])
@pytest.mark.parametrize("heuristic", ["minmin", "maxmin", "maxgain", "maxrelgain", "sufferage"])
def test_recompute_completes_every_job_once(algorithm, heuristic):
    """With ECTs recomputed after each pick, every job still runs exactly once."""
    clusters = [Cluster("a", 2, 1.0), Cluster("b", 2, 1.5)]
    r = Grid(clusters, "mct", Reallocation(algorithm, heuristic, period=50, recompute=True)).run(RECOMPUTE_JOBS)
    assert sorted(r.outcomes) == [1, 2, 3, 4, 5, 6]
    assert all(o.submit <= o.start <= o.end for o in r.outcomes.values())


def test_recompute_order_picks_each_waiting_job_once_best_first():
    """_order yields every waiting job once, the first being the one-pass order's first."""
    clusters = [Cluster("a", 1, 1.0), Cluster("b", 1, 1.0)]
    grid = Grid(clusters, "less-submitted-jobs", Reallocation("regular", "minmin", period=10 ** 6, recompute=True))
    grid.run([])            # nothing: just to have a grid to drive by hand below
    for j in [job(1, 0, 500, 1, 500), job(2, 0, 500, 1, 500), job(3, 0, 50, 1, 100), job(4, 0, 30, 1, 60)]:
        grid._arrive(j.id, j)
    waiting = [(grid._where[q.id], q) for p in grid.policies for q in p.queue]
    ordered = list(grid._order(0.0, waiting))
    assert sorted(q.id for _, q in ordered) == sorted(q.id for _, q in waiting)
    assert ordered[0] == grid._keys(0.0, waiting)[0]
