"""resel/store_rows.py writes the rows sqlite-utils writes, without its introspection per call.

The expected rows are sqlite-utils' own, for the same inputs on a copy of the same table: what
the store held before the coordinator's rows went through prepared statements (issue 29 §2)."""

from __future__ import annotations

import datetime
import decimal
import sqlite3
import uuid

import pytest

from resel import store_rows
from resel.store import open_store
from resel.store_migrations import memory_store

VALUES = [1, 2.5, "text ü", None, True, {"a": [1, 2.0, None], "é": "x"}, [1, "b"], (3, 4),
          decimal.Decimal("1.25"), datetime.datetime(2026, 11, 29, 3, 4, 5), datetime.date(2026, 1, 2),
          datetime.timedelta(seconds=90), uuid.UUID(int=7), float("inf"), b"\x00\x01"]


def _pair():
    """Two stores with a table of the shape the coordinator writes: a composite key."""
    dbs = (memory_store(), memory_store())
    for db in dbs:
        db.execute("create table t (run_id integer, task integer, attempt integer, a, b, c, "
                   "primary key (run_id, task, attempt))")
    return dbs


def _rows(db):
    return [tuple(r) for r in db.execute("select rowid, * from t order by rowid").fetchall()]


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_a_value_is_stored_as_sqlite_utils_stores_it(v):
    ours, theirs = _pair()
    store_rows.insert(ours, "t", {"run_id": 1, "task": 2, "attempt": 1, "a": v})
    theirs["t"].insert({"run_id": 1, "task": 2, "attempt": 1, "a": v})
    assert _rows(ours) == _rows(theirs)
    assert [type(x) for x in _rows(ours)[0]] == [type(x) for x in _rows(theirs)[0]]


def test_upserts_and_replaces_leave_the_rows_sqlite_utils_leaves():
    """An upsert sets only the columns it gives (a started record, then its result); a replace
    swaps the whole row; an insert of a key already there fails in both."""
    ours, theirs = _pair()
    steps = [("upsert", {"run_id": 1, "task": 0, "attempt": 1, "a": 6.5, "b": "n1"}),
             ("upsert", {"run_id": 1, "task": 1, "attempt": 1, "a": 7.0}),
             ("upsert", {"run_id": 1, "task": 0, "attempt": 1, "c": {"perf": [1, 2]}, "a": None}),
             ("upsert", {"run_id": 1, "task": 0, "attempt": 1}),
             ("replace", {"run_id": 1, "task": 1, "attempt": 1, "b": "again"}),
             ("insert", {"run_id": 2, "task": 0, "attempt": 1, "c": [1]})]
    for how, row in steps:
        if how == "upsert":
            store_rows.upsert(ours, "t", dict(row), pk=("run_id", "task", "attempt"))
            theirs["t"].upsert(dict(row), pk=("run_id", "task", "attempt"))
        else:
            store_rows.insert(ours, "t", dict(row), replace=how == "replace")
            theirs["t"].insert(dict(row), replace=how == "replace")
        assert _rows(ours) == _rows(theirs), (how, row)
    with pytest.raises(sqlite3.IntegrityError):
        store_rows.insert(ours, "t", {"run_id": 2, "task": 0, "attempt": 1})
    with pytest.raises(sqlite3.IntegrityError):
        theirs["t"].insert({"run_id": 2, "task": 0, "attempt": 1})
    with pytest.raises(ValueError):
        store_rows.upsert(ours, "t", {"run_id": 2, "task": None, "attempt": 1}, pk=("run_id", "task", "attempt"))


def test_a_row_outside_a_transaction_is_committed_and_inside_one_goes_with_it(tmp_path):
    """As sqlite-utils: alone, a row is its own transaction (another connection reads it at
    once); within ``Store.atomic`` it is that transaction's, rolled back with it."""
    db = open_store(tmp_path / "s.db")
    db.execute("create table t (k integer primary key, v)")
    store_rows.insert(db, "t", {"k": 1, "v": "alone"})
    assert not db.conn.in_transaction
    other = sqlite3.connect(tmp_path / "s.db")
    assert other.execute("select v from t").fetchall() == [("alone",)]
    with pytest.raises(RuntimeError):
        with db.atomic():
            store_rows.upsert(db, "t", {"k": 2, "v": "in"}, pk=("k",))
            assert store_rows.run(db, 'UPDATE "t" SET "v" = ? WHERE "k" = ?', ("changed", 1)) == 1
            raise RuntimeError("killed")
    assert other.execute("select k, v from t").fetchall() == [(1, "alone")]
    other.close()
