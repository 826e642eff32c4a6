"""Rows written straight through SQLite's cached prepared statements, as sqlite-utils writes them.

Why: the live coordinator writes a few rows per task (its journal, ``attempts``, ``decisions``)
and sqlite-utils' ``insert``/``upsert``/``update`` introspect the table on every call
(``table_names``, ``exists``, ``columns``: ~1.4 ms of a profiled task, docs/benchmarks.md,
issue 29 §2). Here the statement is built once per (table, columns) and ``sqlite3``'s statement
cache keeps it prepared; the values stored are the ones sqlite-utils stores for the same row
(:func:`value`: its ``jsonify_if_needed``, copied — tests/test_store_rows.py compares the two).

Like sqlite-utils, a statement run outside a transaction is its own (committed at once); inside
one (``Store.atomic``) it is part of it. Standard library only: :mod:`resel.journal` writes
through it and ``resel status`` imports the journal without sqlite-utils.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from functools import cache
from typing import Any, Sequence


def value(v: object) -> object:
    """A value as sqlite-utils stores it (``sqlite_utils.db.jsonify_if_needed``): containers as
    JSON, dates as ISO text, decimals as floats, everything else as it is."""
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=repr, ensure_ascii=False)
    if isinstance(v, (datetime.time, datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, (datetime.timedelta, uuid.UUID)):
        return str(v)
    return v


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@cache
def insert_sql(table: str, columns: tuple[str, ...], replace: bool = False) -> str:
    """``INSERT [OR REPLACE]`` of these columns (sqlite-utils' ``insert(..., replace=)``)."""
    return (f"INSERT{' OR REPLACE' if replace else ''} INTO {_quote(table)} "
            f"({', '.join(map(_quote, columns))}) VALUES ({', '.join('?' for _ in columns)})")


@cache
def upsert_sql(table: str, columns: tuple[str, ...], pk: tuple[str, ...]) -> str:
    """Insert, or update the given columns of the row with this key (sqlite-utils' ``upsert``
    on SQLite ≥ 3.24: ``ON CONFLICT … DO UPDATE``); columns not given keep their values."""
    rest = [c for c in columns if c not in pk]
    do = ("DO UPDATE SET " + ", ".join(f"{_quote(c)} = excluded.{_quote(c)}" for c in rest)) if rest \
        else "DO NOTHING"
    return f"{insert_sql(table, columns)} ON CONFLICT({', '.join(map(_quote, pk))}) {do}"


def run(db: Any, sql: str, params: Sequence[Any]) -> int:
    """Run one statement on ``db``'s connection, in the open transaction or as its own; the
    number of rows it changed."""
    conn = db.conn
    if conn.in_transaction:
        return conn.execute(sql, params).rowcount
    with conn:      # its own transaction, committed at once (as sqlite-utils does)
        return conn.execute(sql, params).rowcount


def insert(db: Any, table: str, row: dict[str, Any], *, replace: bool = False) -> None:
    """Insert one row (its keys the columns); with ``replace`` one with the same key goes."""
    cols = tuple(row)
    run(db, insert_sql(table, cols, replace), [value(row[c]) for c in cols])


def upsert(db: Any, table: str, row: dict[str, Any], pk: tuple[str, ...]) -> None:
    """Insert one row, or set the columns it gives on the row with its key ``pk``."""
    missing = [c for c in pk if row.get(c) is None]
    if missing:
        raise ValueError(f"upsert into {table} needs a value for {', '.join(missing)}")
    cols = tuple(row)
    run(db, upsert_sql(table, cols, pk), [value(row[c]) for c in cols])
