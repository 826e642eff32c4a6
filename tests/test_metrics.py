"""Tests of resel.metrics: interval union, run metrics, summaries, RESEL/P_RESEL and eq. 3.7–3.10."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resel.engine import Attempt, TaskRecord
from resel.metrics import (
    Judgement, ReselAudit, judge, p_resel, resel, summarize, task_times, union_length,
    workload_metrics,
)
from resel.states import TaskState

# ------------------------------------------------------------------ union_length


@pytest.mark.parametrize("intervals, length", [
    ([], 0.0),
    ([(2.0, 5.0)], 3.0),
    ([(0.0, 2.0), (1.0, 3.0)], 3.0),                 # overlap
    ([(0.0, 1.0), (2.0, 3.0)], 2.0),                 # gap
    ([(0.0, 10.0), (2.0, 3.0)], 10.0),               # nested
    ([(0.0, 1.0), (1.0, 2.0)], 2.0),                 # touching
    ([(5.0, 6.0), (0.0, 1.0), (0.5, 2.0)], 3.0),     # unsorted input
    ([(1.0, 1.0), (4.0, 4.0)], 0.0),                 # empty intervals
    ([(0.0, 4.0), (1.0, 2.0), (3.0, 6.0), (8.0, 9.0)], 7.0),
], ids=["none", "one", "overlap", "gap", "nested", "touching", "unsorted", "zero-length", "mixed"])
def test_union_length(intervals, length):
    """union_length on hand-made intervals."""
    assert union_length(intervals) == length


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)).map(lambda p: (p[0], p[0] + p[1])),
                max_size=12))
def test_union_length_matches_unit_grid(intervals):
    """union_length equals the number of unit cells covered (integer intervals)."""
    cells = {c for start, end in intervals for c in range(start, end)}
    assert union_length(intervals) == len(cells)


def _union_by_tuple_sort(intervals):
    """The reference: merge in (start, end) order, as union_length did before it sorted by start."""
    total, cur = 0.0, None
    for start, end in sorted(intervals):
        if cur is None or start > cur[1]:
            total += 0.0 if cur is None else cur[1] - cur[0]
            cur = [start, end]
        else:
            cur[1] = max(cur[1], end)
    return total + (0.0 if cur is None else cur[1] - cur[0])


@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.3, 1e6 / 3, 2.5]), st.floats(0, 1e6, allow_nan=False))
                .map(lambda p: (p[0], p[0] + p[1])), max_size=30))
def test_union_length_is_exactly_that_of_a_sort_by_start_and_end(intervals):
    """Sorting by start only (the fast sort) gives bit-for-bit the sum of a (start, end) sort,
    with many intervals sharing a start."""
    assert union_length(intervals) == _union_by_tuple_sort(intervals)


# ------------------------------------------------------------------ workload_metrics
def record(tid, origin, state, attempts):
    t = TaskRecord(tid, origin)
    t.state = state
    t.attempts = [Attempt(*a) for a in attempts]
    return t


NAMES = ["hpc", "pool"]


@pytest.fixture
def run():
    """A hand-built run over hpc (0) and pool (1).

    task 0: origin hpc; provisional on pool 1–4 (cancelled by a move-back), done on hpc 4–9;
    task 1: origin hpc; done on pool 2–12 (re-assigned);
    task 2: origin pool; failed on pool 0.5–1.5 and given up.
    """
    return [
        record(0, 0, TaskState.DONE, [(1, 5, 1.0, 4.0, "cancelled"), (0, 0, 4.0, 9.0, "done")]),
        record(1, 0, TaskState.DONE, [(1, 6, 2.0, 12.0, "done")]),
        record(2, 1, TaskState.FAILED, [(1, 7, 0.5, 1.5, "failed")]),
    ]


def test_workload_ttc_is_last_successful_end(run):
    """TTC_wkd = 12, the end of the last successful attempt."""
    assert workload_metrics(run, NAMES).ttc_wkd == 12.0


def test_workload_tx_is_union_of_all_attempts(run):
    """T_x,wkd = |[0.5, 12]| = 11.5: every attempt counts, cancelled and failed ones too."""
    assert workload_metrics(run, NAMES).tx_wkd == 11.5


def test_workload_tq_is_ttc_minus_tx(run):
    """T_q,wkd = 12 − 11.5 = 0.5 (the time before the first attempt started)."""
    assert workload_metrics(run, NAMES).tq_wkd == 0.5


def test_workload_counts(run):
    """done 2, failed 1, 1 re-assigned, 1 restart; wasted = (3 + 1) s × 2 cores = 8 core-s."""
    m = workload_metrics(run, NAMES, cores_per_task=2)
    assert (m.tasks, m.done, m.failed, m.reassigned, m.restarts) == (3, 2, 1, 1, 1)
    assert m.wasted_core_s == 8.0
    assert m.per_site == {"hpc": 1, "pool": 1}


def test_workload_ignores_unfinished_attempts():
    """An attempt still running (end None) adds no interval and no end."""
    tasks = [record(0, 0, TaskState.DONE, [(0, 0, 1.0, 3.0, "done")]),
             record(1, 0, TaskState.RUNNING, [(0, 0, 2.0, None, "")])]
    m = workload_metrics(tasks, NAMES)
    assert (m.ttc_wkd, m.tx_wkd, m.tq_wkd, m.done, m.failed) == (3.0, 2.0, 1.0, 1, 0)


def test_workload_of_no_tasks_is_zero():
    """An empty run has zero times."""
    m = workload_metrics([], NAMES)
    assert (m.ttc_wkd, m.tx_wkd, m.tq_wkd, m.tasks) == (0.0, 0.0, 0.0, 0)


def test_workload_identity_holds_when_a_failure_ends_last():
    """Done 0–5 and a task failing 6–10: TTC_wkd = T_q,wkd + T_x,wkd still holds (T_x = 9)."""
    tasks = [record(0, 0, TaskState.DONE, [(0, 0, 0.0, 5.0, "done")]),
             record(1, 0, TaskState.FAILED, [(0, 0, 6.0, 10.0, "failed")])]
    m = workload_metrics(tasks, NAMES)
    assert m.tx_wkd == 9.0
    assert m.ttc_wkd == m.tq_wkd + m.tx_wkd
    assert m.ttc_wkd >= m.tx_wkd


def test_task_times(run):
    """Per task: TTC = end of the done attempt, T_x its length, T_q = TTC − T_x; NaN if failed."""
    t0, t1, t2 = task_times(run, NAMES)
    assert (t0.origin, t0.site, t0.tq, t0.tx, t0.ttc, t0.attempts, t0.state) == ("hpc", "hpc", 4.0, 5.0, 9.0, 2, "done")
    assert (t1.origin, t1.site, t1.tq, t1.tx, t1.ttc, t1.attempts) == ("hpc", "pool", 2.0, 10.0, 12.0, 1)
    assert (t2.origin, t2.site, t2.state) == ("pool", "", "failed")
    assert math.isnan(t2.tq) and math.isnan(t2.tx) and math.isnan(t2.ttc)


# ------------------------------------------------------------------ summarize
def test_summarize_mean_and_sample_std():
    """[1, 2, 3, 4]: mean 2.5, sample std sqrt(5/3)."""
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))
    assert s["n"] == 4


def test_summarize_single_value_has_zero_std():
    """One value: std 0, not an error."""
    assert summarize([7.0]) == {"mean": 7.0, "std": 0.0, "n": 1}


def test_summarize_skips_nan():
    """NaN values (failed tasks) are left out."""
    assert summarize([2.0, math.nan, 4.0]) == {"mean": 3.0, "std": pytest.approx(math.sqrt(2)), "n": 2}


def test_summarize_empty():
    """No values: NaN mean and std, n 0."""
    s = summarize([math.nan])
    assert math.isnan(s["mean"]) and math.isnan(s["std"]) and s["n"] == 0


# ------------------------------------------------------------------ RESEL / P_RESEL, hand cases
def test_resel_moves_back_inside_window():
    """W = 10 − 5 = 5, a_r − a_r' = 3 < 5: back to r."""
    assert resel(5.0, 10.0, 4.0, 1.0) == "r"


def test_resel_keeps_target_after_window():
    """W = 5, a_r − a_r' = 6 ≥ 5: stay on r'."""
    assert resel(5.0, 10.0, 7.0, 1.0) == "r'"


def test_resel_at_window_edge_goes_to_target():
    """a_r − a_r' = W exactly: TTCs tie, r' wins."""
    assert resel(5.0, 10.0, 6.0, 1.0) == "r'"


def test_resel_faster_target_always_wins():
    """W ≤ 0: r' whatever the acquisition times."""
    assert resel(10.0, 5.0, 1.0, 1.0) == "r'"
    assert resel(10.0, 10.0, 1.0, 0.0) == "r'"


def test_p_resel_uses_predicted_window():
    """P_RESEL is RESEL on predictions."""
    assert p_resel(5.0, 10.0, 4.0, 1.0) == "r"


def test_judge_case_2b_hand_computed():
    """W = 10, Ŵ = 5, a_r − a_r' = 7: P_RESEL keeps r' (TTC 15), RESEL says r (12): penalty 3 ≤ 5."""
    assert judge(5.0, 15.0, 5.0, 10.0, 7.0, 0.0) == Judgement(False, "2b", 3.0, 5.0)


def test_judge_case_2c_hand_computed():
    """W = 5, Ŵ = 10, a_r − a_r' = 7: P_RESEL says r (12), RESEL r' (10): penalty 2 < 5."""
    assert judge(5.0, 10.0, 5.0, 15.0, 7.0, 0.0) == Judgement(False, "2c", 2.0, 5.0)


def test_judge_case_1_hand_computed():
    """W = −2, Ŵ = 4, a_r − a_r' = 3: P_RESEL r (13) vs r' (8): penalty 5 < 4 + 2."""
    assert judge(10.0, 8.0, 10.0, 14.0, 3.0, 0.0) == Judgement(False, "1", 5.0, 6.0)


def test_judge_case_2a_hand_computed():
    """W = 5, Ŵ = −1, a_r − a_r' = 2: P_RESEL r' (10) vs r (7): penalty 3 < 5."""
    assert judge(5.0, 10.0, 6.0, 5.0, 2.0, 0.0) == Judgement(False, "2a", 3.0, 5.0)


def test_judge_correct():
    """Same choice: correct, no penalty, infinite bound."""
    assert judge(5.0, 10.0, 6.0, 11.0, 2.0, 0.0) == Judgement(True, "", 0.0, math.inf)


def test_audit_counts_and_flags_violations():
    """ReselAudit counts incorrect cases and flags a penalty over its bound."""
    audit = ReselAudit()
    audit.add(Judgement(True, "", 0.0, math.inf))
    audit.add(Judgement(False, "2b", 3.0, 5.0))
    audit.add(Judgement(False, "2c", 6.0, 5.0))
    assert (audit.judged, audit.incorrect, audit.by_case) == (3, 2, {"2b": 1, "2c": 1})
    assert (audit.penalty_total, audit.penalty_max, audit.bound_violations) == (9.0, 6.0, 1)


# ------------------------------------------------------------------ properties
# Integers keep the arithmetic exact, so "a_r − a_r' < W" and "a_r + T_x,r < a_r' + T_x,r'" are
# the same statement, as they are over the reals.
times = st.integers(min_value=1, max_value=10_000)
acq = st.integers(min_value=0, max_value=10_000)


@given(tx_r=times, tx_r2=times, a_r2=acq, gap=acq)
def test_resel_is_argmin_of_ttc(tx_r, tx_r2, a_r2, gap):
    """For a_r' ≤ a_r: RESEL picks r iff a_r + T_x,r < a_r' + T_x,r' (ties to r')."""
    a_r = a_r2 + gap
    assert (resel(tx_r, tx_r2, a_r, a_r2) == "r") == (a_r + tx_r < a_r2 + tx_r2)


@given(tx_r=times, tx_r2=times, est_r=times, est_r2=times, a_r2=acq, gap=acq)
def test_penalty_never_exceeds_bound(tx_r, tx_r2, est_r, est_r2, a_r2, gap):
    """judge(...).penalty ≤ the eq. 3.7–3.10 bound of its case, for a_r' ≤ a_r."""
    j = judge(tx_r, tx_r2, est_r, est_r2, a_r2 + gap, a_r2)
    assert j.penalty <= j.bound
    assert j.correct == (j.case == "")


@settings(max_examples=200)
@given(tx_r=st.floats(1.0, 1e5), tx_r2=st.floats(1.0, 1e5), est_r=st.floats(1.0, 1e5),
       est_r2=st.floats(1.0, 1e5), a_r2=st.floats(0.0, 1e5), gap=st.floats(0.0, 1e5))
def test_penalty_within_bound_on_floats(tx_r, tx_r2, est_r, est_r2, a_r2, gap):
    """On floats, the penalty stays within its bound up to rounding (the audit's tolerance)."""
    j = judge(tx_r, tx_r2, est_r, est_r2, a_r2 + gap, a_r2)
    assert j.penalty <= j.bound + 1e-9 * max(1.0, j.bound, a_r2 + gap + tx_r + tx_r2)


@given(tx_r=times, tx_r2=times, c=st.integers(-500, 10_000), a_r2=acq, gap=acq)
def test_constant_additive_error_never_misselects(tx_r, tx_r2, c, a_r2, gap):
    """T̂x = T_x + c on both sites keeps Ŵ = W, so P_RESEL always equals RESEL."""
    assert judge(tx_r, tx_r2, tx_r + c, tx_r2 + c, a_r2 + gap, a_r2).correct
