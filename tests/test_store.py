"""Tests of the run store (resel/store.py): migrations, saving a simulated run, reading it back."""

from __future__ import annotations

import sqlite3

import pytest
import sqlite_utils

import resel
from resel.errors import ReselError, StoreError
from resel.store import KEPT_ELSEWHERE, add_experiment, default_path, get_run, list_runs, open_store, save_run

TABLES = {"runs", "tasks", "pilots", "decisions", "events", "experiments"}


@pytest.fixture(scope="module")
def result():
    """One real simulated run: 20 tasks, re-selection on, fixed seed."""
    return resel.simulate(resel.default_bag().resized(20), resel.default_sites(), "reselect", seed=3)


@pytest.fixture
def saved(tmp_path, result):
    db = open_store(tmp_path / "r.db")
    return db, save_run(db, result)


# --- open_store and migrations ----------------------------------------------------------------


def test_open_store_creates_file_and_applies_migrations(tmp_path):
    path = tmp_path / "sub" / "dir" / "r.db"
    db = open_store(path)
    assert path.is_file()
    assert TABLES <= set(db.table_names())
    for table in TABLES:
        assert db[table].count == 0


def test_open_store_is_idempotent(tmp_path):
    path = tmp_path / "r.db"
    db = open_store(path)
    exp_id = add_experiment(db, {"note": "first"})
    schema = db.schema
    migrations = list(db.query("select * from _sqlite_migrations"))
    db.close()

    again = open_store(path)
    assert again.schema == schema
    assert list(again.query("select * from _sqlite_migrations")) == migrations
    assert again["experiments"].count == 1
    assert again["experiments"].get(exp_id)["params"] == '{"note": "first"}'
    again.close()
    third = open_store(str(path))  # a str path works too
    assert TABLES <= set(third.table_names())


def test_open_store_memory():
    db = open_store(memory=True)
    assert TABLES <= set(db.table_names())
    assert list_runs(db) == []


def test_open_store_parent_is_a_regular_file(tmp_path):
    parent = tmp_path / "not-a-dir"
    parent.write_text("x", encoding="utf-8")
    with pytest.raises(StoreError) as info:
        open_store(parent / "r.db")
    assert not isinstance(info.value, OSError)
    assert isinstance(info.value, ReselError)
    assert "not-a-dir" in str(info.value)


def test_open_store_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"definitely not sqlite " * 100)
    with pytest.raises(StoreError) as info:
        open_store(path)
    assert str(path) in str(info.value)


def test_open_store_foreign_sqlite_file(tmp_path):
    """A SQLite file that is not a resel store (a clashing `runs` table) is a StoreError."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table runs (x text)")
    with pytest.raises(StoreError):
        open_store(path)


def test_default_path_honours_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RESEL_DB", str(tmp_path / "env.db"))
    assert default_path() == tmp_path / "env.db"
    monkeypatch.delenv("RESEL_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "resel" / "resel.db"


def test_open_store_without_path_uses_default(tmp_path, monkeypatch):
    monkeypatch.setenv("RESEL_DB", str(tmp_path / "env.db"))
    db = open_store()
    assert (tmp_path / "env.db").is_file()
    assert TABLES <= set(db.table_names())


# --- save_run / get_run -----------------------------------------------------------------------


def test_save_run_row_counts(saved, result):
    db, run_id = saved
    assert db["runs"].count == 1
    assert db["tasks"].count_where("run_id = ?", [run_id]) == 20
    assert db["decisions"].count_where("run_id = ?", [run_id]) == len(result.decisions)
    # every event but those the tasks and pilots tables hold (store.KEPT_ELSEWHERE)
    kept = [e for e in result.events if e[1] not in KEPT_ELSEWHERE]
    assert db["events"].count_where("run_id = ?", [run_id]) == len(kept) < len(result.events)
    assert db["pilots"].count_where("run_id = ?", [run_id]) == len(result.pilots)
    assert len(result.decisions) > 0 and len(result.events) > 0


def test_save_run_columns(saved, result):
    db, run_id = saved
    row = db["runs"].get(run_id)
    assert row["strategy"] == result.strategy
    assert row["size"] == 20
    assert row["seed"] == 3
    assert row["mode"] == "simulated"
    assert row["ttc_wkd"] == pytest.approx(result.metrics.ttc_wkd)
    assert row["tx_wkd"] == pytest.approx(result.metrics.tx_wkd)
    assert row["tq_wkd"] == pytest.approx(result.metrics.tq_wkd)
    assert row["done"] + row["failed"] == 20
    seqs = [r["seq"] for r in db.query("select seq from events where run_id = ? order by seq", [run_id])]
    assert seqs == [i for i, e in enumerate(result.events) if e[1] not in KEPT_ELSEWHERE]   # each its log place
    times = [r["time"] for r in db.query("select time from events where run_id = ? order by seq", [run_id])]
    assert times == sorted(times)


def test_get_run_decodes_json_columns(saved, result):
    db, run_id = saved
    run = get_run(db, run_id)
    assert run["id"] == run_id
    assert isinstance(run["per_site"], dict)
    assert isinstance(run["audit"], dict)
    assert isinstance(run["sites"], list)
    assert isinstance(run["bag_spec"], dict)
    assert set(run["per_site"]) <= {s.name for s in resel.default_sites()}
    assert sum(run["per_site"].values()) == run["done"]
    assert run["audit"]["decisions"] == result.audit.decisions


def test_get_run_missing_raises_store_error(saved):
    db, run_id = saved
    with pytest.raises(StoreError, match=str(run_id + 1000)):
        get_run(db, run_id + 1000)


def test_get_run_missing_on_empty_memory_store():
    with pytest.raises(StoreError):
        get_run(open_store(memory=True), 1)


def test_save_run_without_events(result):
    db = open_store(memory=True)
    run_id = save_run(db, result, events=False)
    assert db["events"].count == 0
    assert db["tasks"].count_where("run_id = ?", [run_id]) == 20


def test_save_run_with_experiment_and_list_runs(result):
    db = open_store(memory=True)
    exp_id = add_experiment(db, {"sizes": [20]})
    first = save_run(db, result, experiment_id=exp_id)
    second = save_run(db, result, experiment_id=exp_id)
    assert second > first
    rows = list_runs(db)
    assert [r["id"] for r in rows] == [second, first]  # newest first
    assert {r["experiment_id"] for r in rows} == {exp_id}
    assert [r["id"] for r in list_runs(db, limit=1)] == [second]
    assert db["tasks"].count == 40


def test_store_is_readable_by_sqlite_utils(tmp_path, result):
    path = tmp_path / "r.db"
    save_run(open_store(path), result)
    plain = sqlite_utils.Database(path)
    assert plain["runs"].count == 1
    assert plain["tasks"].count == 20


def test_bulk_rows_are_what_sqlite_utils_stored(tmp_path, result):
    """save_run's prepared rows hold exactly what the per-row dicts through sqlite_utils'
    insert_all held (NaN/inf as NULL, decisions' fields in order, events' data as JSON)."""
    import dataclasses
    import json

    from resel.metrics import task_times
    from resel.json_safe import clean as _clean

    db, run_id = open_store(tmp_path / "a.db"), None
    run_id = save_run(db, result)
    names = [s.name for s in result.sites]
    old = sqlite_utils.Database(memory=True)
    old["tasks"].insert_all({"run_id": run_id, **_clean(dataclasses.asdict(t))}
                            for t in task_times(result.engine.tasks, names))
    old["pilots"].insert_all({"run_id": run_id, "pilot": p.id, "site": names[p.site], "cores": p.cores,
                              "submitted": p.submitted, "start": p.start, "started": int(p.started),
                              "cancelled": int(p.cancelled)} for p in result.pilots)
    old["decisions"].insert_all({"run_id": run_id, "seq": i, **_clean(dataclasses.asdict(d))}
                                for i, d in enumerate(result.decisions))
    old["events"].insert_all(
        {"run_id": run_id, "seq": seq, "time": time, "kind": kind,
         "data": json.dumps({f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "time"})}
        for seq, (time, kind, r) in enumerate(result.events) if kind not in KEPT_ELSEWHERE)
    assert result.decisions and result.events
    for table in ("tasks", "pilots", "decisions", "events"):
        cols = [c.name for c in old[table].columns]
        ours = list(db.query(f"select {', '.join(cols)} from {table} order by rowid"))
        theirs = list(old.query(f"select {', '.join(cols)} from {table} order by rowid"))
        assert ours == theirs, table


def test_the_schema_snapshot_is_what_the_migrations_make():
    """``store._SCHEMA_SNAPSHOT`` (read at start-up instead of applying every migration in
    memory) names every migration and holds exactly the tables and columns they make. After a
    migration is added this fails and prints the snapshot's new value, to paste into store.py."""
    from resel.store import _SCHEMA_SNAPSHOT, _applied_schema, _expected_schema, migrations
    names, tables = _SCHEMA_SNAPSHOT
    applied = _applied_schema()
    now = (tuple(m.name for m in migrations._migrations),
           {t: " ".join(sorted(applied[t])) for t in sorted(applied)})
    hint = f"store._SCHEMA_SNAPSHOT is out of date; its value is now:\n{now!r}"
    assert names == now[0], hint
    assert {t: frozenset(c.split()) for t, c in tables.items()} == applied, hint
    assert _expected_schema() == applied


def test_a_migration_the_snapshot_does_not_name_is_applied_in_memory(monkeypatch):
    """A snapshot that names other migrations than there are (one was added since) is not
    used: the expected schema comes from applying the migrations, as the snapshot's test says."""
    from resel import store
    names, tables = store._SCHEMA_SNAPSHOT
    stale = {t: c for t, c in tables.items() if t != "live_notes"}      # as if m008 were new
    monkeypatch.setattr(store, "_SCHEMA_SNAPSHOT", (names[:-1], stale))
    store._expected_schema.cache_clear()
    try:
        assert "live_notes" in store._expected_schema()
        assert store._expected_schema() == store._applied_schema()
    finally:
        store._expected_schema.cache_clear()


def test_the_events_left_out_are_held_exactly_by_the_tasks_and_pilots_tables(result):
    """What a simulated run does not store twice (store.KEPT_ELSEWHERE), checked by definition on
    a re-selection run: each TaskFinished is its task's row — done, at its TTC, on its last
    attempt — and each PilotStarted its pilot's row, started, at its start; one for one."""
    db = open_store(memory=True)
    run_id = save_run(db, result)
    tasks = {r["task"]: r for r in db.query("select * from tasks where run_id = ?", [run_id])}
    pilots = {r["pilot"]: r for r in db.query("select * from pilots where run_id = ?", [run_id])}
    finished = [(t, e) for t, kind, e in result.events if kind == "TaskFinished"]
    started = [(t, e) for t, kind, e in result.events if kind == "PilotStarted"]
    assert finished and started
    assert sorted(e.task for _, e in finished) == sorted(k for k, r in tasks.items() if r["state"] == "done")
    for time, e in finished:
        row = tasks[e.task]
        assert row["state"] == "done" and row["ttc"] == time and row["attempts"] == e.attempt
    assert sorted(e.pilot for _, e in started) == sorted(k for k, r in pilots.items() if r["started"])
    for time, e in started:
        assert pilots[e.pilot]["start"] == time
