"""``resel runs`` and ``resel status`` read the store through :mod:`sqlite3` alone
(:func:`resel.store.read_store`, issue 15 item 4): the same checks and errors as
``open_store(write=False)``, the same answers as the sqlite-utils connection it returns, the
same output — and the reader never writes.

The reference is the sqlite-utils path itself (``open_store(write=False)``, what these commands
used before): each command is run both ways on one store and the outputs compared byte for byte.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
import sqlite_utils
from click.testing import CliRunner

from resel import store
from resel.live import notes as live_notes
from resel.cli import cli
from resel.errors import StoreError
from resel.store import StoreReader, list_runs, open_store, read_store


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, argv)
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"], ["runs", "--limit", "2"], ["status"],
                                  ["status", "--json"], ["status", "4"], ["status", "4", "--json"],
                                  ["status", "1"], ["status", "9"]], ids=" ".join)
def test_reading_commands_print_what_the_sqlite_utils_store_gives(bench_store, monkeypatch, argv):
    opened = []

    def spy(path=None):
        db = real(path)
        opened.append(type(db))
        return db

    real = store.read_store
    monkeypatch.setattr(store, "read_store", spy)
    light = _invoke([*argv, "--db", str(bench_store)])
    assert opened == [StoreReader]
    monkeypatch.setattr(store, "read_store", lambda path=None: open_store(path, write=False))
    reference = _invoke([*argv, "--db", str(bench_store)])
    assert light == reference
    code, out, err = light
    if argv[1:2] in (["1"], ["9"]):
        assert code == 1 and ("is a simulated run" in err or "no run 9" in err), err
    else:
        assert code == 0 and out, err
    if "--json" in argv:
        doc = json.loads(out)
        assert len(doc) == 4 if argv[0] == "runs" else doc["run_id"] == 4


def test_the_reader_answers_as_sqlite_utils(bench_store):
    reader, full = read_store(bench_store), open_store(bench_store, write=False)
    assert isinstance(reader, StoreReader) and isinstance(full, sqlite_utils.Database)
    assert sorted(reader.table_names()) == sorted(full.table_names())
    assert list_runs(reader, 3) == list_runs(full, 3)
    sql = "select * from events where run_id = ? order by seq"
    assert list(reader.query(sql, [4])) == list(full.query(sql, [4]))
    assert list(reader.query("select * from runs where id = :id", {"id": 4})) == \
        list(full.query("select * from runs where id = :id", {"id": 4}))
    assert live_notes.read(reader, 4) == live_notes.read(full, 4)


def test_the_reader_cannot_write(bench_store, tmp_path):
    db = tmp_path / "copy.db"
    shutil.copy(bench_store, db)
    reader = read_store(db)
    assert isinstance(reader, StoreReader)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("insert into experiments (created, params) values ('x', '{}')")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.execute("update runs set status = 'done' where id = 4")
    reader.close()
    assert open_store(db)["runs"].get(4)["status"] == "running"


def _tables(path) -> set[str]:
    with sqlite3.connect(path) as c:
        names = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
    c.close()
    return names


def _error(opener, path) -> str:
    with pytest.raises(StoreError) as info:
        opener(path)
    return str(info.value)


def _bytes(path) -> bytes:
    return path.read_bytes()


def test_read_store_refuses_what_open_store_refuses_with_its_words(bench_store, tmp_path):
    cases = {}
    cases["text"] = tmp_path / "notes.txt"
    cases["text"].write_text("not a database\n", encoding="utf-8")
    cases["foreign"] = tmp_path / "other.sqlite"
    with sqlite3.connect(cases["foreign"]) as c:
        c.execute("create table notes (id integer primary key, body text)")
    c.close()
    cases["newer"] = tmp_path / "newer.db"
    shutil.copy(bench_store, cases["newer"])
    with sqlite3.connect(cases["newer"]) as c:
        c.execute("insert into _sqlite_migrations (migration_set, name, applied_at) "
                  "values ('resel', 'm999_future', '')")
    c.close()
    cases["damaged"] = tmp_path / "damaged.db"
    shutil.copy(bench_store, cases["damaged"])
    with sqlite3.connect(cases["damaged"]) as c:
        c.execute("drop table live_notes")
    c.close()
    cases["folder"] = tmp_path / "folder.db"
    cases["folder"].mkdir()
    words = {"text": "not an SQLite database", "foreign": "another application's tables (notes)",
             "newer": "was made by a newer resel (its schema has m999_future", "damaged": "table live_notes is missing",
             "folder": "is not a file"}
    for name, path in cases.items():
        before = None if path.is_dir() else _bytes(path)
        light = _error(read_store, path)
        assert light == _error(lambda p: open_store(p, write=False), path), name
        assert words[name] in light, light
        if name in ("text", "foreign"):
            assert _bytes(path) == before       # another application's file: not a byte changed


def test_read_store_hands_what_must_change_first_to_open_store(bench_store, tmp_path):
    """A new store (made), one with migrations pending (migrated) and one not in WAL mode
    (converted) are opened as ``open_store(write=False)`` opens them: by it."""
    new = tmp_path / "sub" / "new.db"
    made = read_store(new)
    assert isinstance(made, sqlite_utils.Database) and new.is_file()
    assert {"runs", "events", "live_notes"} <= set(made.table_names())

    older = tmp_path / "older.db"
    from resel.store_migrations import Store, migrations
    partial = Store(older)
    migrations.apply(partial, stop_before="m008_live_notes")
    partial.close()
    assert "live_notes" not in _tables(older)
    migrated = read_store(older)
    assert isinstance(migrated, sqlite_utils.Database) and "live_notes" in migrated.table_names()
    assert isinstance(read_store(older), StoreReader)   # up to date now (its record still in the -wal file)
    migrated.close()
    assert isinstance(read_store(older), StoreReader)

    journal = tmp_path / "journal.db"
    shutil.copy(bench_store, journal)
    with sqlite3.connect(journal) as c:
        assert c.execute("pragma journal_mode = delete").fetchone() == ("delete",)
    c.close()
    assert not store._in_wal_mode(journal) and store._in_wal_mode(bench_store)
    converted = read_store(journal)
    assert isinstance(converted, sqlite_utils.Database)
    assert converted.execute("pragma journal_mode").fetchone() == ("wal",)
    converted.close()
    assert store._in_wal_mode(journal)


def test_the_migration_names_are_the_migrations():
    """``store.MIGRATIONS`` (what a reader checks a store against) names the migrations
    defined in store_migrations, in order (loading that module with the two apart fails)."""
    from resel.store_migrations import migrations
    assert tuple(m.name for m in migrations._migrations) == store.MIGRATIONS
    assert store.migrations is migrations


def test_a_store_whose_writer_is_still_open_is_read_by_sqlite3_alone(tmp_path):
    """A live ``resel run`` keeps its new store open: its tables and migrations may all still be
    in the -wal file, the database file itself without a table. ``resel status`` beside it
    reads it through the reader all the same, and sees what the writer wrote."""
    from resel.store import add_experiment
    path = tmp_path / "live.db"
    writer = open_store(path)
    add_experiment(writer, {"note": "beside"})
    alone = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    assert alone.execute("select count(*) from sqlite_master").fetchone() == (0,)   # the file alone: nothing yet
    alone.close()
    assert "m001_initial" in store._check_is_resel_store(path)   # read through its WAL: a store
    reader = read_store(path)
    assert isinstance(reader, StoreReader)
    assert [r["params"] for r in reader.query("select params from experiments")] == ['{"note": "beside"}']
    writer.close()
