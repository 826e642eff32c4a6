"""The counts ``resel status`` shows, kept by the coordinator as its engine changes and stored
with the rows they summarise, so ``status`` answers without replaying the journal (issue 29 §2).

Replaying every event of a run cost ``status`` 0.27 s at 2,000 tasks and grows with the run
(~430,000 rows at 100,000 tasks). Instead the coordinator keeps a :class:`Tally` — where each
task and pilot is counted (:func:`resel.live.view.task_cell`, :func:`~resel.live.view.pilot_cell`)
and how many each cell holds — and writes it, with the run's last journal row and the latest
time any row holds, as one ``live_notes`` row (site "", key "summary", beside the coordinator's
lease: no migration, and an older resel reading the store shows nothing of it) **in the
transaction that records the event**: the summary is never ahead of the journal, and a crash
loses both or neither.

A task's cell can change in any of the engine's rules (a pilot's end puts its tasks back, a
lost site moves its waiting tasks, a window commits). Rather than track each rule, the tally
watches the records themselves: the engine's :class:`~resel.engine_books.TaskRecord` and
:class:`~resel.engine_books.PilotRecord` objects become a subclass whose ``__setattr__`` also
notes the record's id (same slots, so their class can be swapped), and after an event only the
records written are counted again — every write, whichever rule made it. The engine is not
changed and the simulator, which never builds a tally, pays nothing.

``status`` uses the summary only when it covers the journal's last row
(:func:`read`); otherwise — a run stored before the summary, or one a resel without it carried
on — it replays, as before.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import islice
from typing import TYPE_CHECKING, Any

from resel.journal_tail import last_seq, rows_after
from resel.live.view import COLUMNS, pilot_cell, task_cell

if TYPE_CHECKING:
    from resel.engine import Engine

#: the summary's ``live_notes`` row: site "" as the lease's, its own key and kind
SITE, KEY = "", "summary"


def _watched(base: type, written: set[int]) -> type:
    """A subclass of ``base`` (same slots) whose every attribute write adds the record's id to
    ``written``."""
    def __setattr__(self: Any, name: str, value: Any, _set=object.__setattr__, _add=written.add) -> None:
        _set(self, name, value)
        _add(self.id)
    return type(f"Watched{base.__name__}", (base,), {"__slots__": (), "__setattr__": __setattr__})


class Tally:
    """Where every task and pilot of one engine is counted, kept up to date event by event."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.names = [s.name for s in engine.sites]
        self._tasks_written: set[int] = set()
        self._pilots_written: set[int] = set()
        from resel.engine_books import PilotRecord, TaskRecord   # here: `resel status` reads, never watches
        self._task_class = _watched(TaskRecord, self._tasks_written)
        self._pilot_class = _watched(PilotRecord, self._pilots_written)
        self.counts: Counter[tuple[str, int]] = Counter()
        self._task_cells: list[tuple[str, int] | None] = []
        self._pilot_cells: dict[int, tuple[str, int] | None] = {}
        self._known_pilots = 0
        self.update()

    def update(self) -> None:
        """Count again the records the engine wrote since the last update, and take in the
        records it made (the bag's tasks at its submission, each new pilot)."""
        engine = self.engine
        if len(engine.tasks) > len(self._task_cells):
            for task in engine.tasks[len(self._task_cells):]:
                task.__class__ = self._task_class
                self._task_cells.append(None)
                self._tasks_written.add(task.id)
        if len(engine.pilots) > self._known_pilots:     # pilots are only ever added, newest last
            for pilot in islice(reversed(engine.pilots.values()), len(engine.pilots) - self._known_pilots):
                pilot.__class__ = self._pilot_class
                self._pilots_written.add(pilot.id)
            self._known_pilots = len(engine.pilots)
        for tid in self._tasks_written:
            cell = task_cell(engine.tasks[tid])
            self._move(self._task_cells[tid], cell)
            self._task_cells[tid] = cell
        self._tasks_written.clear()
        for pid in self._pilots_written:
            cell = pilot_cell(engine.pilots[pid])
            self._move(self._pilot_cells.get(pid), cell)
            self._pilot_cells[pid] = cell
        self._pilots_written.clear()

    def _move(self, old: tuple[str, int] | None, new: tuple[str, int] | None) -> None:
        if old != new:
            if old is not None:
                self.counts[old] -= 1
            if new is not None:
                self.counts[new] += 1

    def summary(self) -> dict[str, Any]:
        """The counts ``status`` shows: the bag's, and per site its row's counted columns, whether
        it was given up and whether it is quarantined (with the counts that decided and until when)."""
        engine = self.engine
        quarantined = engine.quarantined
        sites = []
        for i, name in enumerate(self.names):
            health = quarantined.get(name)
            longest = engine.longest_running(i)
            sites.append({"site": name, **{c: self.counts[(c, i)] for c in COLUMNS},
                          "lost": engine.lost_sites.get(name),
                          "quarantined": health.reason if health else None,
                          "quarantined_until": health.until if health else None,
                          # the attempt running longest: task, start, overdue limit (None: none)
                          "longest_running": list(longest) if longest else None})
        return {"total": len(engine.tasks), "done": engine.done_count, "failed": engine.failed_count, "sites": sites}


class Summary:
    """The coordinator's side: the tally of its current engine and the journal rows it covers,
    written in the transaction that records them (:meth:`save`)."""

    def __init__(self) -> None:
        self.tally: Tally | None = None
        self.seq = -1                     # the last journal row the stored summary covers
        self.last_time: float | None = None

    def save(self, db: Any, run_id: int, engine: Engine) -> None:
        """Bring the tally up to date with ``engine`` and store it, covering every journal row
        written so far (call it inside the transaction that wrote them)."""
        if self.tally is None or self.tally.engine is not engine:
            self.tally = Tally(engine)    # the first save, or the engine rebuilt: counted whole once
            self.seq, self.last_time = -1, None
        else:
            self.tally.update()
        seq, latest = rows_after(db, run_id, self.seq)
        if seq is None:
            return
        self.seq = seq
        if latest is not None and (self.last_time is None or latest > self.last_time):
            self.last_time = latest
        doc = {"seq": seq, "last_time": self.last_time, **self.tally.summary()}
        db.execute("insert or replace into live_notes (run_id, site, key, kind, first, last, count, detail) "
                   "values (?, ?, ?, ?, ?, ?, ?, ?)",
                   [run_id, SITE, KEY, KEY, 0.0, self.last_time, 1, json.dumps(doc)])


def read(db: Any, run_id: int) -> dict[str, Any] | None:
    """The run's stored summary if it covers the journal's last row, else None (a run stored
    before summaries, or carried on by a resel that keeps none: replay it). Both are read in one
    read transaction, so a coordinator writing meanwhile cannot make them disagree."""
    if "live_notes" not in db.table_names():
        return None
    conn = db.conn
    own = not conn.in_transaction
    if own:
        conn.execute("begin")
    try:
        rows = list(db.query("select detail from live_notes where run_id = ? and site = ? and key = ?",
                             [run_id, SITE, KEY]))
        last = last_seq(db, run_id)
    finally:
        if own:
            conn.execute("commit")
    if not rows or last is None:
        return None
    try:
        doc = json.loads(rows[0]["detail"])
    except (TypeError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("seq") == last else None
