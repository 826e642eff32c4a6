"""The end of a run's journal — how many rows, the last one's seq and time, what came after a
row — asked of the ``events`` table without building a record.

Why a module of its own: the journal (:mod:`resel.journal`) owns the ``events`` table, and it
imports every event and action class to write and rebuild records (``resel.events``: ~60
dataclasses made at import). ``resel status`` from the coordinator's stored counts only asks
whether they cover the journal's last row (:mod:`resel.live.summary`): this is that question,
on the standard library, and the journal re-exports it. Only these two modules read the
``events`` table (tests/test_one_vocabulary.py).
"""

from __future__ import annotations

from typing import Any


def count(db: Any, run_id: int) -> int:
    """How many rows the run's journal holds (a simulated run may be stored without them)."""
    return next(iter(db.query("select count(*) as n from events where run_id = ?", [run_id])))["n"]


def last_time(db: Any, run_id: int) -> float | None:
    """The time of the run's last record (None for a run that recorded nothing)."""
    return next(iter(db.query("select max(time) as t from events where run_id = ?", [run_id])))["t"]


def last_seq(db: Any, run_id: int) -> int | None:
    """The ``seq`` of the run's last row (None for a run that recorded nothing): what a stored
    summary must cover to be shown instead of a replay (:mod:`resel.live.summary`)."""
    return next(iter(db.query("select max(seq) as s from events where run_id = ?", [run_id])))["s"]


def rows_after(db: Any, run_id: int, seq: int) -> tuple[int | None, float | None]:
    """The last ``seq`` and the latest time of the run's rows after row ``seq`` (None, None if
    there are none): what the coordinator's summary takes in at each transaction, reading only
    the rows that transaction wrote."""
    row = next(iter(db.query("select max(seq) as s, max(time) as t from events where run_id = ? and seq > ?",
                             [run_id, seq])))
    return row["s"], row["t"]
