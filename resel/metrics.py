"""What a run achieved: per-task and per-workload times, and the re-selection audit.

Definitions (seeds/003 §3.4 and §4.2), with time 0 the bag's submission:

* per task: TTC = end of its successful attempt; T_x = that attempt's duration;
  T_q = TTC − T_x (everything before it, including attempts that were cancelled or lost);
* per workload: TTC_wkd = the end of the last attempt (a failed one included); T_x,wkd = length of the union of all execution
  intervals (every attempt: time during which at least one task was executing);
  T_q,wkd = TTC_wkd − T_x,wkd (time only spent acquiring).

A bag whose tasks have outputs (docs/data.md) is done when they are home: an attempt's
execution interval then runs until its outputs were delivered, so the trip home counts in T_x
(per task and per workload) and TTC, never in T_q (it is no wait for resources).

The re-selection functions RESEL / P_RESEL and the penalty bounds of eq. 3.7–3.10 live here
too, as pure functions, so the property tests and the simulator's audit use the same code.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from typing import Iterable

from resel.states import AttemptOutcome, TaskState


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end) intervals.

    Sorted by start only: intervals sharing a start all fall into the same merged block
    whatever their order, so the blocks, and the sum of their lengths, are those of a sort by
    (start, end) — and a sort on float keys is about 2.5 times faster than on tuples (1.5
    million attempts at 1,000,000 tasks)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals, key=itemgetter(0)):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start
    return total


@dataclass(frozen=True, slots=True)
class TaskTimes:
    task: int
    origin: str      # the initial selection
    site: str        # where it finished (empty if it failed)
    tq: float
    tx: float
    ttc: float
    attempts: int
    state: str


@dataclass(frozen=True)
class WorkloadMetrics:
    """The three workload times (seconds) and what happened to the tasks."""

    ttc_wkd: float
    tx_wkd: float
    tq_wkd: float
    tasks: int
    done: int
    failed: int
    reassigned: int          # tasks that finished somewhere other than their initial site
    restarts: int            # attempts cancelled and run again (a move-back, a restart, an overdue one)
    wasted_core_s: float     # core-seconds of attempts that did not finish
    per_site: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def task_times(tasks, site_names: list[str]) -> list[TaskTimes]:
    """Per-task T_q, T_x, TTC from the engine's task records."""
    out = []
    for task in tasks:
        final = next((a for a in reversed(task.attempts) if a.outcome == AttemptOutcome.DONE), None)
        if final is None:
            out.append(TaskTimes(task.id, site_names[task.first_origin], "", math.nan, math.nan,
                                 math.nan, len(task.attempts), task.state.value))
            continue
        ttc = final.end if final.delivered is None else final.delivered   # done once its outputs are home
        tx = ttc - final.start
        out.append(TaskTimes(task.id, site_names[task.first_origin], site_names[final.site], ttc - tx, tx,
                             ttc, len(task.attempts), task.state.value))
    return out


def workload_metrics(tasks, site_names: list[str], cores_per_task: int | tuple[int, ...] = 1) -> WorkloadMetrics:
    """TTC_wkd, T_x,wkd and T_q,wkd of a finished run (see the module docstring).

    ``cores_per_task``: every task's cores, or each task's (by id: a table of several widths,
    :attr:`resel.domain.Bag.task_cores`) — what a lost attempt wasted."""
    widths = cores_per_task if isinstance(cores_per_task, tuple) else None
    intervals, ends, per_site = [], [], {}
    done = failed = reassigned = restarts = 0
    wasted = 0.0
    for task in tasks:
        for a in task.attempts:
            start, end = a.start, a.end
            if end is None:
                continue
            if a.delivered is not None:   # moving its outputs home counts as the task's time (docs/data.md)
                end = a.delivered
            intervals.append((start, end))
            ends.append(end)     # the bag completes when its last attempt ends, failed or not
            if a.outcome == AttemptOutcome.DONE:
                name = site_names[a.site]
                per_site[name] = per_site.get(name, 0) + 1
                if a.site != task.first_origin:
                    reassigned += 1
            else:
                wasted += (end - start) * (cores_per_task if widths is None else widths[task.id])
                restarts += a.outcome == AttemptOutcome.CANCELLED
        done += task.state is TaskState.DONE     # (an Enum's .value is a Python-level property)
        failed += task.state is TaskState.FAILED
    ttc = max(ends, default=0.0)
    tx = union_length(intervals)
    return WorkloadMetrics(ttc, tx, max(0.0, ttc - tx), len(tasks), done, failed, reassigned,
                           restarts, wasted, dict(sorted(per_site.items())))


def summarize(values: list[float]) -> dict[str, float]:
    """Mean and sample standard deviation (0 for a single value), as the thesis reports."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return {"mean": math.nan, "std": math.nan, "n": 0}
    return {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "n": len(vals)}


# ------------------------------------------------------------------ re-selection theory
def resel(tx_r: float, tx_r2: float, a_r: float, a_r2: float) -> str:
    """RESEL (seeds/003 §3.4): ``"r"`` if W > 0 and a_r − a_r' < W, else ``"r'"``.

    Equivalent to argmin(a_r + T_x,r, a_r' + T_x,r'), ties going to r'.
    """
    w = tx_r2 - tx_r
    return "r" if (w > 0 and a_r - a_r2 < w) else "r'"


def p_resel(est_tx_r: float, est_tx_r2: float, a_r: float, a_r2: float) -> str:
    """P_RESEL: RESEL computed with predicted times, i.e. with the window Ŵ."""
    return resel(est_tx_r, est_tx_r2, a_r, a_r2)


def ttc_of(choice: str, tx_r: float, tx_r2: float, a_r: float, a_r2: float) -> float:
    return a_r + tx_r if choice == "r" else a_r2 + tx_r2


@dataclass(frozen=True, slots=True)
class Judgement:
    """One re-selection judged against the oracle: which case of §3.4 and its bound."""

    correct: bool
    case: str          # "", "1", "2a", "2b", "2c"
    penalty: float     # |TTC(P_RESEL) − TTC(RESEL)|
    bound: float       # the bound of eq. 3.7–3.10 for that case (inf when correct)


def judge(tx_r: float, tx_r2: float, est_tx_r: float, est_tx_r2: float, a_r: float, a_r2: float) -> Judgement:
    """Compare P_RESEL with RESEL for one task; valid for a_r' <= a_r (r' acquired first)."""
    real = resel(tx_r, tx_r2, a_r, a_r2)
    pred = p_resel(est_tx_r, est_tx_r2, a_r, a_r2)
    if real == pred:
        return Judgement(True, "", 0.0, math.inf)
    w, w_hat = tx_r2 - tx_r, est_tx_r2 - est_tx_r
    penalty = abs(ttc_of(pred, tx_r, tx_r2, a_r, a_r2) - ttc_of(real, tx_r, tx_r2, a_r, a_r2))
    if w <= 0:
        return Judgement(False, "1", penalty, abs(w_hat) + abs(w))      # eq. 3.7
    if w_hat <= 0:
        return Judgement(False, "2a", penalty, w)                       # eq. 3.8
    if w > w_hat:
        return Judgement(False, "2b", penalty, abs(w - w_hat))          # eq. 3.9
    return Judgement(False, "2c", penalty, abs(w_hat - w))              # eq. 3.10


@dataclass
class ReselAudit:
    """How often P_RESEL differed from RESEL in a run, and what it cost."""

    decisions: int = 0
    judged: int = 0
    incorrect: int = 0
    by_case: dict[str, int] = field(default_factory=dict)
    penalty_total: float = 0.0
    penalty_max: float = 0.0
    bound_violations: int = 0

    def add(self, j: Judgement) -> None:
        self.judged += 1
        if j.correct:
            return
        self.incorrect += 1
        self.by_case[j.case] = self.by_case.get(j.case, 0) + 1
        self.penalty_total += j.penalty
        self.penalty_max = max(self.penalty_max, j.penalty)
        self.bound_violations += j.penalty > j.bound + 1e-9 * max(1.0, j.bound)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunCosts:
    """What a run cost beyond its tasks' work (issue 17: the peers' price of redundancy).

    ``submissions`` counts every pilot asked for; ``cancellations`` the pilots withdrawn while
    the bag still ran (pending or started — the requests other users' jobs queued behind; the
    release of every pilot when the bag is done is not counted). ``thrown_core_h`` are attempts
    that did not finish (a provisional run moved back, a task lost with its pilot);
    ``idle_core_h`` the cores started pilots held with nothing of the bag on them (a race's
    second winner, a tail of a wave, a pilot cancelled after it started).
    """

    submissions: int
    cancellations: int
    thrown_core_h: float
    idle_core_h: float

    @property
    def wasted_core_h(self) -> float:
        return self.thrown_core_h + self.idle_core_h

    def as_dict(self) -> dict:
        return {**asdict(self), "wasted_core_h": self.wasted_core_h}


def run_costs(engine, cores_per_task: int = 1) -> RunCosts:
    """Pilot submissions, cancellations and wasted core-hours of a finished (or stopped) run,
    from the engine's pilot and task records.

    A pilot's slots are counted as the engine counts them: for a bag of several widths packed
    into its cores (resel/engine_packing.py) a slot is ``engine.slot_cores`` cores and a task
    takes ``engine.task_slots`` of them; otherwise one ``cores_per_task``-wide slot each."""
    packed = getattr(engine, "_u", None) is not None
    busy: dict[int, float] = {}
    thrown = 0.0
    end = 0.0
    for task in engine.tasks:
        for a in task.attempts:
            start, stop = a.start, a.end
            if stop is None or start is None:
                continue
            end = max(end, stop)
            units = engine.task_slots(a.site, task.id) if packed else 1
            busy[a.pilot] = busy.get(a.pilot, 0.0) + (stop - start) * units
            if a.outcome != AttemptOutcome.DONE:
                thrown += (stop - start) * (units * engine.slot_cores(a.site) if packed else cores_per_task)
    cancellations = 0
    idle = 0.0
    for pilot in engine.pilots.values():
        ended = pilot.ended if pilot.ended is not None else end
        if pilot.state.value == "cancelled" and ended < end:
            cancellations += 1
        if pilot.started is not None:
            held = pilot.slots * max(0.0, ended - pilot.started)
            spare = held - busy.get(pilot.id, 0.0)
            if spare > 1e-9 * max(1.0, held):      # not the rounding of a pilot kept busy to its end
                idle += spare * (engine.slot_cores(pilot.site) if packed else cores_per_task)
    return RunCosts(len(engine.pilots), cancellations, thrown / 3600.0, idle / 3600.0)
