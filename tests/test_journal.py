"""The journal (resel/journal.py): every event and action kind survives its row, an action
is marked done by the row it was recorded as, and a simulated run's rows are what they were.

The rows go through a real store (``open_store``, the migrations' ``events`` table), not a
stand-in. The kinds a journal must know are read off :mod:`resel.events` itself (every concrete
record class there), so a kind added later without a place in the journal fails here.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resel
from resel import events as events_module
from resel.events import Action, Decision, DecisionKind, Event, SetTimer, SubmitPilot, TaskFinished, TimerFired
from resel import journal
from resel.store import open_store

#: every concrete event and action in resel.events (the bases themselves carry nothing to store)
RECORD_CLASSES = sorted((cls for _name, cls in inspect.getmembers(events_module, inspect.isclass)
                         if cls.__module__ == events_module.__name__ and dataclasses.is_dataclass(cls)
                         and issubclass(cls, (Event, Action)) and cls not in (Event, Action)),
                        key=lambda cls: cls.__name__)

FINITE = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text(max_size=20)
#: a strategy per field annotation in resel.events; an annotation missing here fails the test
#: (a new field type needs a strategy before its round trip is believed)
BY_ANNOTATION = {
    "float": FINITE,
    "int": st.integers(min_value=-2**53, max_value=2**53),
    "bool": st.booleans(),
    "str": TEXT,
    "str | None": st.none() | TEXT,
    "float | None": st.none() | FINITE,
    "DecisionKind": st.sampled_from(DecisionKind),
    "dict[str, float] | None": st.none() | st.dictionaries(TEXT, FINITE, max_size=4),
    "dict[str, list[float | None]] | None": st.none() | st.dictionaries(TEXT, st.lists(st.none() | FINITE, max_size=4),
                                                                       max_size=4),
}


def records_of(cls: type) -> st.SearchStrategy:
    missing = [f.type for f in dataclasses.fields(cls) if f.type not in BY_ANNOTATION]
    assert not missing, f"{cls.__name__}: no strategy for {missing} in BY_ANNOTATION"
    return st.builds(cls, **{f.name: BY_ANNOTATION[f.type] for f in dataclasses.fields(cls)})


ANY_RECORD = st.one_of([records_of(cls) for cls in RECORD_CLASSES])


@pytest.fixture
def db():
    store = open_store(memory=True)
    store["runs"].insert({"id": 1, "mode": "live"})
    store["runs"].insert({"id": 2, "mode": "live"})
    return store


def test_the_journal_knows_every_event_and_action_kind_and_tells_them_apart():
    assert set(journal.EVENT_TYPES) == {c.__name__ for c in RECORD_CLASSES if issubclass(c, Event)}
    assert set(journal.ACTION_TYPES) == {c.__name__ for c in RECORD_CLASSES if issubclass(c, Action)}
    assert all(journal.is_event(k) for k in journal.EVENT_TYPES)
    assert not any(journal.is_event(k) for k in journal.ACTION_TYPES)


@settings(max_examples=300, deadline=None)
@given(record=ANY_RECORD, event_time=FINITE)
def test_every_record_survives_its_encoding(record, event_time):
    kind = type(record).__name__
    at = journal.row_time(record, event_time)
    data = journal.encode(record)
    assert journal.decode(kind, at, data) == record
    # the data is plain JSON (no NaN), every field but time, named as the record names them
    loaded = json.loads(data, parse_constant=lambda c: pytest.fail(f"{c} in {data}"))
    assert set(loaded) == {f.name for f in dataclasses.fields(record)} - {"time"}
    # the row's time is the record's own, else the event's that asked for it
    assert at == (record.time if hasattr(record, "time") else event_time)


@settings(max_examples=60, deadline=None)
@given(records=st.lists(ANY_RECORD, min_size=1, max_size=12), event_time=FINITE)
def test_every_record_survives_the_store(records, event_time):
    store = open_store(memory=True)
    store["runs"].insert({"id": 7, "mode": "live"})
    for seq, record in enumerate(records):
        journal.append(store, 7, seq, journal.row_time(record, event_time), record,
                       None if isinstance(record, Event) else 0)
    rows = list(journal.rows(store, 7))
    assert [r["seq"] for r in rows] == list(range(len(records)))
    assert [journal.decode(r["kind"], r["time"], r["data"]) for r in rows] == records
    assert [r["done"] for r in rows] == [None if isinstance(r, Event) else 0 for r in records]


def test_what_json_cannot_hold_is_stored_as_json_safe_does():
    """NaN and infinities become null (resel.json_safe.clean), as the live coordinator always
    stored them; the rest of the record is unchanged."""
    d = Decision(time=3.0, kind=DecisionKind.ASSIGN, task=1, origin="a", target="b", tx_r=math.inf, a_r=math.nan,
                 window=2.5)
    data = journal.encode(d)
    assert json.loads(data) == {"kind": "assign", "task": 1, "origin": "a", "target": "b", "a_r": None,
                                "a_r2": None, "tx_r": None, "tx_r2": None, "window": 2.5}
    assert journal.decode("Decision", 3.0, data) == dataclasses.replace(d, tx_r=None, a_r=None)


def test_an_action_is_marked_done_by_its_row_even_when_another_row_holds_the_same_json(db):
    """The same timer set twice (in run 1, and at the same seq in run 2): identical kind, time
    and data. Marking one must leave the others as they were."""
    timer = SetTimer(at=60.0, task=3, attempt=1, site="tba")
    for run_id in (1, 2):
        for seq in (0, 1):
            journal.append(db, run_id, seq, 5.0, timer, 0)
    texts = {(r["kind"], r["time"], r["data"]) for run_id in (1, 2) for r in journal.rows(db, run_id)}
    assert len(texts) == 1          # four rows, one text: a match on text could not tell them apart
    journal.mark(db, 1, 1, done=True)
    journal.mark(db, 2, 0, done=False, error="connection lost")
    state = {(r["run_id"], r["seq"]): (r["done"], r["error"])
             for r in db.query("select run_id, seq, done, error from events order by run_id, seq")}
    assert state == {(1, 0): (0, None), (1, 1): (1, None), (2, 0): (0, "connection lost"), (2, 1): (0, None)}


def test_marking_a_row_the_store_does_not_hold_is_said_as_a_store_error(db):
    """No path of the coordinator marks a row it did not record and commit first; a missing row
    means the store changed under it, said in one line (a ReselError: the command shows its
    message, never a traceback) naming the run, the row and the way on."""
    from resel.errors import ReselError, StoreError
    journal.append(db, 1, 0, 5.0, SetTimer(at=60.0, task=3, attempt=1, site="tba"), 0)
    with pytest.raises(StoreError, match=r"run 1 has no journal row 1 to mark done: the store changed") as raised:
        journal.mark(db, 1, 1, done=True)
    assert isinstance(raised.value, ReselError) and "resel run --resume 1" in str(raised.value)
    with pytest.raises(StoreError):
        journal.mark(db, 2, 0, done=True)          # the row is run 1's
    assert [r["done"] for r in journal.rows(db, 1)] == [0]


def test_rows_that_are_not_records_are_refused_with_why(db):
    with pytest.raises(journal.BadRecord) as bad:
        journal.decode("TaskFinished", 1.0, "{not json")
    assert bad.value.why == "json" and isinstance(bad.value, ValueError)
    with pytest.raises(journal.BadRecord) as bad:
        journal.decode("TaskFinished", 1.0, "[1, 2]")
    assert bad.value.why == "json"
    with pytest.raises(journal.BadRecord) as bad:
        journal.decode("SomethingNewer", 1.0, "{}")
    assert bad.value.why == "kind" and "SomethingNewer" in str(bad.value)
    with pytest.raises(journal.BadRecord) as bad:
        journal.decode("TaskFinished", 1.0, json.dumps({"task": 1}))      # no attempt: an older resel's
    assert bad.value.why == "fields" and "TaskFinished" in str(bad.value)
    with pytest.raises(journal.BadRecord) as bad:
        journal.decode("SubmitPilot", 1.0, json.dumps({"pilot": 1, "site": "a", "cores": 2, "walltime": 9.0,
                                                       "colour": "red"}))
    assert bad.value.why == "fields"


def test_a_decision_kind_from_another_version_stays_its_text():
    data = json.dumps({"kind": "from-the-future", "task": 0, "origin": "a", "target": "b"})
    assert journal.decode("Decision", 2.0, data).kind == "from-the-future"
    assert journal.decode("Decision", 2.0, data.replace("from-the-future", "move-back")).kind is DecisionKind.MOVE_BACK


def test_decode_takes_the_object_already_read():
    assert journal.decode("TimerFired", 4.0, {"task": 2, "attempt": 1}) == TimerFired(time=4.0, task=2, attempt=1)
    assert journal.decode("SubmitPilot", 4.0, {"pilot": 0, "site": "s", "cores": 4, "walltime": 60.0}) == \
        SubmitPilot(pilot=0, site="s", cores=4, walltime=60.0)


@pytest.mark.parametrize("strategy", ["random", "reselect", "queue+reselect", "race:2"])
def test_a_simulated_runs_rows_are_its_log_as_before(strategy):
    """The store's bulk rows (save_run) are the simulator's log numbered from 0, each record's
    fields but time as JSON — the definition the store used before the journal, written out
    here independently — byte for byte, so stored simulated runs read the same."""
    result = resel.simulate(resel.default_bag().resized(32), resel.default_sites(), strategy, seed=2)
    expected = [(seq, time, kind, json.dumps({f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)
                                              if f.name != "time"}))
                for seq, (time, kind, rec) in enumerate(result.events)]
    assert list(journal.encode_all(result.events)) == expected
    assert {"BagSubmitted", "SubmitPilot", "DispatchTask", "TaskFinished"} <= {kind for _s, _t, kind, _d in expected}
    assert all(journal.decode(kind, time, data) == rec
               for (_s, time, kind, data), (_t, _k, rec) in zip(expected, result.events))


def test_a_finished_task_row_reads_back_as_the_event():
    data = journal.encode(TaskFinished(time=9.5, task=4, attempt=2))
    assert json.loads(data) == {"task": 4, "attempt": 2}
    assert journal.decode("TaskFinished", 9.5, data) == TaskFinished(time=9.5, task=4, attempt=2)


def test_readers_get_the_records_of_the_kinds_they_ask_with_their_rows_times(db):
    """journal.read, the report's and the figures' way in (issue 27 item 3): records rebuilt by
    decode, in order, each with its row's time (a dispatch has none of its own), only of the
    kinds asked, only of the run; count and last_time answer the rest."""
    from resel.events import DispatchTask, PilotEnded
    journal.append(db, 1, 0, 5.0, TaskFinished(time=5.0, task=1, attempt=1), None)
    journal.append(db, 1, 1, 5.0, DispatchTask(task=2, attempt=1, pilot=0, site="a"), 0)
    journal.append(db, 1, 2, 7.5, PilotEnded(time=7.5, pilot=0, reason="walltime"), None)
    journal.append(db, 2, 0, 1.0, DispatchTask(task=9, attempt=1, pilot=3, site="b"), 0)
    assert list(journal.read(db, 1, DispatchTask, PilotEnded)) == [
        (5.0, DispatchTask(task=2, attempt=1, pilot=0, site="a")), (7.5, PilotEnded(time=7.5, pilot=0, reason="walltime"))]
    assert [type(r) for _t, r in journal.read(db, 1)] == [TaskFinished, DispatchTask, PilotEnded]
    assert (journal.count(db, 1), journal.last_time(db, 1), journal.count(db, 3), journal.last_time(db, 3)) \
        == (3, 7.5, 0, None)
    db["events"].insert({"run_id": 1, "seq": 3, "time": 8.0, "kind": "PilotEnded", "data": "{not json"})
    with pytest.raises(journal.BadRecord) as bad:
        list(journal.read(db, 1, PilotEnded))
    assert bad.value.why == "json" and "run 1, event 3 (PilotEnded)" in str(bad.value)
    assert len(list(journal.read(db, 1, DispatchTask))) == 1          # a row not asked for is not read
