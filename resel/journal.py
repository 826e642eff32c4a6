"""The journal: every event and action of a run as its row of the store's ``events`` table,
and back.

A row is ``(run_id, seq, time, kind, data, done, error)``: ``kind`` is the record's class name,
``time`` its own time (an action without one takes its event's), ``data`` its other fields as
JSON, ``done`` NULL for an event or a record-only action (a decision), 0 for an action still to
carry out and 1 once it is carried out (``error`` says why it failed, or is being retried).

Every writer and reader shares this one encoding, so what one writes the others read the
same way: the live coordinator (it records an event and its actions before acting, marks each
action done, and replays the journal on ``--resume``), the store's writer of simulated runs
(:func:`resel.store.save_run`, in bulk), ``resel status`` (:mod:`resel.live.view`, which
replays the events without the coordinator; the time of a run's last record; the last row a
stored summary must cover, :mod:`resel.live.summary`) and the report and
its figures (:func:`read`: the records of some kinds, rebuilt). No other module reads the
``events`` table or parses its JSON (tests/test_one_vocabulary.py holds them to it).

An action is marked done by the ``seq`` it was recorded with — the row's key with ``run_id``
— never by looking for a row with the same text: two identical actions (the same timer set
twice) are two rows.

Standard library and the pure core only: ``resel status`` and the store import it without
sqlite-utils or the site clients. The writing functions take the coordinator's sqlite-utils
``Database`` but do not import it.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from resel.events import (
    Action, BagCancelled, BagDone, BagSubmitted, BandwidthMeasured, OutputsMeasured, CancelPilot, CancelTask, Decision, DecisionKind,
    DispatchTask, Event, PilotEnded, PilotRequeued, PilotStarted, SetTimer, SiteLost, SiteQuarantined, SiteReleased,
    SubmitPilot, TaskDelivered, TaskFailed, TaskFetching, TaskFinished, TaskLost, TaskMeasured, TaskStarted,
    TaskUndelivered, TaskWithdrawn, TimerFired, WithdrawTask, RateLearned, StrategyChosen, TaskOverdue,
)
from resel import store_rows
from resel.errors import StoreError
from resel.journal_tail import count, last_seq, last_time, rows_after  # noqa: F401 - the journal's, re-exported
from resel.json_safe import clean

if TYPE_CHECKING:
    from sqlite_utils import Database

#: the events a journal holds, by the kind stored with them (what a replay feeds the engine)
EVENT_TYPES: dict[str, type[Event]] = {cls.__name__: cls for cls in (
    BagSubmitted, PilotStarted, PilotEnded, PilotRequeued, SiteLost, TaskStarted, TaskFinished, TaskFailed, TaskLost,
    TimerFired, BagCancelled, TaskFetching, TaskDelivered, TaskUndelivered, BandwidthMeasured, OutputsMeasured,
    TaskMeasured, TaskWithdrawn)}
#: the actions a journal holds, by kind (what a resume finishes when they are still undone)
ACTION_TYPES: dict[str, type[Action]] = {cls.__name__: cls for cls in (
    SubmitPilot, CancelPilot, DispatchTask, CancelTask, SetTimer, Decision, BagDone, SiteQuarantined, SiteReleased,
    WithdrawTask, RateLearned, StrategyChosen, TaskOverdue)}


class BadRecord(ValueError):
    """A stored row that is not a record this version can rebuild. ``why`` is ``"json"`` (the
    data is not readable JSON), ``"kind"`` (not an event or action this version knows: a newer
    resel's, or not resel's) or ``"fields"`` (its fields are not the kind's: an older resel's)."""

    def __init__(self, why: str, message: str) -> None:
        super().__init__(message)
        self.why = why


@cache
def fields_of(cls: type) -> tuple[str, ...]:
    """The fields a record of this type stores as ``data``: all but ``time`` (a column)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "time")


@cache
def _has_time(cls: type) -> bool:
    return any(f.name == "time" for f in dataclasses.fields(cls))


def row_time(record: Event | Action, default: float) -> float:
    """The time a record is stored at: its own if it has one (every event, the actions that
    carry a time), else ``default`` — the time of the event that asked for it."""
    own = getattr(record, "time", None)
    return own if isinstance(own, float) else default


def encode(record: Event | Action) -> str:
    """A record's ``data``: its fields but ``time``, as JSON. NaN and infinities are stored
    as null, enum members as their values, nested dataclasses as objects (:mod:`resel.json_safe`);
    a record of plain finite values — nearly all of them — is dumped as it is, which gives the
    same text without walking it (a simulated run stores thousands)."""
    data = {name: getattr(record, name) for name in fields_of(type(record))}
    try:
        return _STRICT.encode(data)
    except (TypeError, ValueError):   # NaN or inf, an enum that is not a str, a dataclass
        return json.dumps(clean(data))


#: json.dumps' own encoder but refusing NaN (one instance: dumps(allow_nan=False) makes one per call)
_STRICT = json.JSONEncoder(allow_nan=False)


def encode_all(log: Iterable[tuple[float, str, Event | Action]]) -> Iterator[tuple[int, float, str, str]]:
    """A run's log of ``(time, kind, record)`` as ``(seq, time, kind, data)`` rows, numbered
    from 0 in order (the simulator's log; the store inserts them in one statement)."""
    for seq, (time, kind, record) in enumerate(log):
        yield seq, time, kind, encode(record)


def decode(kind: str, time: float, data: str | dict) -> Event | Action:
    """The record a row holds: the kind's class built from ``time`` and ``data`` (the JSON text,
    or the object it was read into). A decision's kind becomes its :class:`DecisionKind`
    member; one this version does not know (another version's) stays the recorded text.

    Raises:
        BadRecord: the data is not readable JSON, the kind is unknown, or the fields are not
            the kind's.
    """
    cls = EVENT_TYPES.get(kind) or ACTION_TYPES.get(kind)
    if cls is None:
        raise BadRecord("kind", f"{kind!r} is not an event or action this version of resel knows")
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise BadRecord("json", f"its data is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadRecord("json", f"its data is {type(data).__name__}, not a JSON object")
    if cls is Decision:
        try:
            data = {**data, "kind": DecisionKind(data.get("kind"))}
        except ValueError:
            pass
    try:
        return cls(time=time, **data) if _has_time(cls) else cls(**data)
    except TypeError as exc:
        raise BadRecord("fields", f"its fields are not a {kind}'s ({exc})") from None


def is_event(kind: str) -> bool:
    """A row of this kind is an event (fed to the engine on replay), not an action."""
    return kind in EVENT_TYPES


def rows(db: Any, run_id: int) -> Iterator[dict]:
    """The run's rows in the order they were recorded: ``seq``, ``time``, ``kind``, ``data``,
    ``done`` (``db``: a sqlite-utils ``Database`` or the store's reader)."""
    return iter(db.query("select seq, time, kind, data, done from events where run_id = ? order by seq", [run_id]))


def read(db: Any, run_id: int, *types: type) -> Iterator[tuple[float, Event | Action]]:
    """The run's records of these types (every one if none is named), in the order they were
    recorded, each with its row's time — an action without a time of its own (a dispatch, a
    cancellation) was stored at its event's. ``db``: a sqlite-utils ``Database`` or the store's
    reader.

    Raises:
        BadRecord: a row of a type asked for that this version cannot rebuild, naming the row.
    """
    sql = "select seq, time, kind, data from events where run_id = ?"
    args: list[Any] = [run_id]
    if types:
        sql += f" and kind in ({', '.join('?' for _ in types)})"
        args += [cls.__name__ for cls in types]
    for row in db.query(sql + " order by seq", args):
        try:
            record = decode(row["kind"], row["time"], row["data"])
        except BadRecord as exc:
            raise BadRecord(exc.why, f"run {run_id}, event {row['seq']} ({row['kind']}): {exc}") from None
        yield row["time"], record


def append(db: Database, run_id: int, seq: int, time: float, record: Event | Action, done: int | None) -> None:
    """Record one event or action as row ``seq`` of the run (``done``: None for an event or a
    record-only action, 0 for an action still to carry out, 1 for one that needs nothing)."""
    store_rows.run(db, _APPEND, (run_id, seq, time, type(record).__name__, encode(record), done))


def mark(db: Database, run_id: int, seq: int, *, done: bool, error: str | None = None) -> None:
    """Mark the action recorded as row ``seq`` done (or not yet, to be retried), with why it
    failed if it did. By the row's key, so only that row changes even if another holds the
    same action.

    The coordinator marks only rows it recorded, each committed before it acts (a turn that
    fails rolls back with the turn; a resumed one marks the rows it replayed), so a missing row
    means the store changed under it — its rows removed, or the file replaced by an older
    copy. That is said as a :class:`~resel.errors.StoreError` (one line from the command, the
    pilots left running), never a traceback.

    Raises:
        StoreError: the run has no row ``seq``.
    """
    if not store_rows.run(db, _MARK, (1 if done else 0, error, run_id, seq)):
        raise StoreError(f"run {run_id} has no journal row {seq} to mark done: the store changed while its "
                         "coordinator ran (its rows removed, or the file replaced by an older copy); its pilots "
                         f"keep running — `resel run --resume {run_id}` goes on from what the store holds, "
                         f"`resel cancel {run_id}` stops them")


#: the journal's two writes, prepared once (no per-row introspection of the table: issue 29 §2)
_APPEND = store_rows.insert_sql("events", ("run_id", "seq", "time", "kind", "data", "done"))
_MARK = 'UPDATE "events" SET "done" = ?, "error" = ? WHERE "run_id" = ? AND "seq" = ?'
