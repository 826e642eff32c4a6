"""The crash soak's checks (benchmarks/soak_audit.py) on runs made by hand: a real store (the
schema `open_store` makes), agents' files in the agent's own formats. Each check must catch what
it names, and only that: a clean run passes, a lost task, a lost result and two attempts of a
task overlapping — by the task's own stamps, by its agent's result, by its pilot's end — fail,
and a task done twice one after the other is a duplicate counted once, not a failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from resel.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from soak_audit import audit_run  # noqa: E402

T0 = 1_800_000_000.0
KEY = "r1-abcdef"


class Run:
    """A finished live run of ``count`` tasks in a store, and its agents' directories."""

    def __init__(self, tmp_path: Path, count: int = 3, waves: bool = False):
        #: the agents' formats: per-key files (agent protocol 5 and earlier) or waves (6), one
        #: wave per pilot and folder, incarnation ``00aa``
        self.waves = waves
        self.db_path = tmp_path / "s.db"
        self.db = open_store(self.db_path)
        self.count = count
        self.sites = {"tba": tmp_path / "a", "tbb": tmp_path / "b"}
        self.db["runs"].insert({"id": 1, "mode": "live", "size": count, "status": "done", "done": count,
                                "failed": 0, "t0": T0, "run_key": KEY})
        self.db["tasks"].insert_all({"run_id": 1, "task": t, "state": "done"} for t in range(count))

    def pilot(self, pilot: int, site: str, ended: float | None = None) -> None:
        self.db["live_pilots"].insert({"run_id": 1, "pilot": pilot, "site": site, "ended": ended})

    def attempt(self, task: int, attempt: int, pilot: int, site: str, start: float, end: float | None,
                outcome: str | None = "done", *, stamp: tuple | None = None, stored: bool = True) -> None:
        """An attempt as its agent leaves it: started/, results/ (unless ``outcome`` is None: the
        agent died first), the task's stamp file; and in the store as the coordinator read it."""
        pdir = self.sites[site] / KEY / f"p{pilot}"
        key = f"t{task}-a{attempt}"
        for sub in ("started", "results", f"tasks/{key}"):
            (pdir / sub).mkdir(parents=True, exist_ok=True)
        self.write(pdir / "started", key, {"task": task, "attempt": attempt, "time": start, "host": "n1"})
        stamp = stamp if stamp is not None else (start, end if outcome == "done" else None)
        (pdir / "tasks" / key / "stamp").write_text(f"soak-start {stamp[0]}\n"
                                                    + (f"soak-end {stamp[1]}\n" if stamp[1] is not None else ""))
        if outcome is not None:
            rec = {"task": task, "attempt": attempt, "outcome": outcome, "start": start, "end": end,
                   "exit_code": 0 if outcome == "done" else None, "stdout_tail": ""}
            self.write(pdir / "results", key, rec)
        if stored:
            self.db["attempts"].insert({"run_id": 1, "task": task, "attempt": attempt, "site": site, "pilot": pilot,
                                        "start": start, "end": end, "outcome": outcome})

    def write(self, folder: Path, key: str, rec: dict) -> None:
        if not self.waves:
            (folder / f"{key}.json").write_text(json.dumps(rec))
            return
        wave = folder / "00aa-1.json"
        wave.write_text(json.dumps((json.loads(wave.read_text()) if wave.exists() else []) + [rec]))

    def audit(self):
        return audit_run(self.db_path, 1, self.sites)


@pytest.fixture(params=["per-key", "waves"])
def run(tmp_path, request):
    r = Run(tmp_path, waves=request.param == "waves")
    r.pilot(0, "tba")
    r.pilot(1, "tbb", ended=50.0)           # seen ended at t0 + 50
    return r


def test_a_clean_run_passes(run):
    for t in range(3):
        run.attempt(t, 1, 0, "tba", T0 + 10 * t, T0 + 10 * t + 5)
    audit = run.audit()
    assert audit.problems == [] and (audit.lost, audit.results_lost, audit.concurrent) == (0, 0, 0)
    assert audit.attempts_started == 3 and audit.results_read == 3


def test_a_task_no_agent_finished_is_lost(run):
    run.attempt(0, 1, 0, "tba", T0, T0 + 5)
    run.attempt(1, 1, 0, "tba", T0, T0 + 5)
    run.attempt(2, 1, 1, "tbb", T0, T0 + 5, outcome="failed")
    audit = run.audit()
    assert audit.lost == 1 and any("task 2 lost" in p for p in audit.problems)


def test_a_result_the_store_does_not_have_is_lost(run):
    run.attempt(0, 1, 0, "tba", T0, T0 + 5)
    run.attempt(1, 1, 0, "tba", T0, T0 + 5)
    run.attempt(2, 1, 0, "tba", T0, T0 + 5, stored=False)
    audit = run.audit()
    assert audit.results_lost == 1 and audit.lost == 0


def test_an_orphan_still_running_when_its_task_ran_again(run):
    """Attempt 1's agent died (no result) but the task ran on to its own end stamp, past the
    start of attempt 2 elsewhere: twice at once."""
    run.attempt(0, 1, 0, "tba", T0, None, outcome=None, stamp=(T0, T0 + 10))
    run.attempt(0, 2, 1, "tbb", T0 + 6, T0 + 12)
    run.attempt(1, 1, 0, "tba", T0, T0 + 5)
    run.attempt(2, 1, 0, "tba", T0, T0 + 5)
    audit = run.audit()
    assert audit.concurrent == 1 and audit.orphans == 1 and "task 0 ran twice at once" in audit.problems[0]


@pytest.mark.parametrize("end_source", ["result", "pilot"])
def test_an_overlap_seen_by_the_agents_result_or_the_pilots_end(run, end_source):
    """No end stamp (the task was killed): the interval ends at its agent's result, or — its
    agent gone without one — at its pilot's end as the store saw it (t0 + 50)."""
    if end_source == "result":
        run.attempt(0, 1, 1, "tbb", T0 + 30, T0 + 60, outcome="lost", stamp=(T0 + 30, None))
    else:
        run.attempt(0, 1, 1, "tbb", T0 + 30, None, outcome=None, stamp=(T0 + 30, None))
    run.attempt(0, 2, 0, "tba", T0 + 45, T0 + 70)
    run.attempt(1, 1, 0, "tba", T0, T0 + 5)
    run.attempt(2, 1, 0, "tba", T0, T0 + 5)
    assert run.audit().concurrent == 1


def test_an_overlap_behind_a_short_attempt_is_caught(run):
    """Attempts sorted by start: 1 [0, 40], 2 [5, 6], 3 [20, 25]. 3 overlaps 1 although not its
    neighbour 2: the check compares with the latest end so far, not the previous attempt."""
    run.attempt(0, 1, 0, "tba", T0, T0 + 40, outcome="cancelled", stamp=(T0, None))
    run.attempt(0, 2, 1, "tbb", T0 + 5, T0 + 6, outcome="cancelled", stamp=(T0 + 5, None))
    run.attempt(0, 3, 1, "tbb", T0 + 20, T0 + 25)
    run.attempt(1, 1, 0, "tba", T0, T0 + 5)
    run.attempt(2, 1, 0, "tba", T0, T0 + 5)
    audit = run.audit()
    assert audit.concurrent == 1 and len(audit.problems) == 2


def test_a_task_done_twice_one_after_the_other_is_a_duplicate_not_a_failure(run):
    """Done on tbb, its result unseen when the pilot ended, so run again on tba after: a
    duplicate completion, counted once by the run (done = 3), no overlap (equal stamps touch)."""
    run.attempt(0, 1, 1, "tbb", T0 + 10, T0 + 20)
    run.attempt(0, 2, 0, "tba", T0 + 20, T0 + 30)
    run.attempt(1, 1, 0, "tba", T0, T0 + 5)
    run.attempt(2, 1, 0, "tba", T0, T0 + 5)
    audit = run.audit()
    assert audit.problems == [] and audit.duplicates == 1


def test_a_run_that_counted_a_task_twice_fails(run):
    for t in range(3):
        run.attempt(t, 1, 0, "tba", T0, T0 + 5)
    run.db["tasks"].insert({"run_id": 1, "task": 3, "state": "done"})
    assert any("tasks table has 4 rows" in p for p in run.audit().problems)


def test_a_key_two_agents_wrote_counts_the_result_the_store_holds(tmp_path):
    """Protocol 6: an agent and its successor alive at once may each write a result for one key
    (lost by the successor, done by the old one); the coordinator stored the first it read.
    That is no lost result, whichever of the two the store holds."""
    for stored in ("done", "lost"):
        r = Run(tmp_path / stored, waves=True)
        r.pilot(0, "tba")
        for t in range(3):
            r.attempt(t, 1, 0, "tba", T0, T0 + 5, outcome="done", stored=t != 0)
        pdir = r.sites["tba"] / KEY / "p0"
        (pdir / "results" / "00bb-1.json").write_text(json.dumps([{"task": 0, "attempt": 1, "outcome": "lost",
                                                                   "start": T0, "end": T0 + 5}]))
        r.db["attempts"].insert({"run_id": 1, "task": 0, "attempt": 1, "site": "tba", "pilot": 0, "start": T0,
                                 "end": T0 + 5, "outcome": stored})
        audit = r.audit()
        assert audit.results_lost == 0 and audit.problems == [], (stored, audit.problems)
