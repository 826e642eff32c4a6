"""The run store survives its users (issue 13 §4), with real processes.

* 16 ``resel simulate`` processes on one new store, and a writer holding the lock for seconds
  beside them: before WAL, the busy timeout and immediate transactions, several died with
  ``database is locked`` and their experiments were half stored.
* ``resel simulate`` beside a live ``resel run`` on the testbed.
* Another application's SQLite file is not changed by a single byte, whatever command is
  pointed at it; a read-only store (another user's) is refused before work by writing commands
  and read by reading ones; the store is created 0600 in folders made 0700.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import pytest

from resel import store as store_module
from resel.errors import StoreError
from resel.store import open_store
from waiting import wait_until  # tests/ is on sys.path (rootdir conftest)

RESEL = [sys.executable, "-m", "resel.cli"]
TINY = "; MaxProcs: 4\n1 0 5 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n"


def resel(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([*RESEL, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kw)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def stored_events(db: Path) -> int:
    """How many events the store holds (0 before it, or its events table, exists); read only."""
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as c:
            return c.execute("select count(*) from events").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_sixteen_simulates_and_a_slow_writer_on_one_new_store_all_finish(tmp_path):
    db = tmp_path / "shared" / "resel.db"
    procs = [resel("simulate", "--db", db, "--sizes", "8,16", "--repeat", "2", "--seed", i,
                   "--strategies", "random,reselect", "--json") for i in range(16)]
    # a writer that holds the write lock for 3 s while they start (as a long transaction would)
    wait_until(db.exists, 120, "the first simulate to create the store")
    holder = subprocess.run([sys.executable, "-c", (
        "import sys, time; from resel.store import open_store\n"
        "db = open_store(sys.argv[1])\n"
        "with db.atomic():\n"
        "    db['experiments'].insert({'created': 'holder', 'params': '{}'})\n"
        "    time.sleep(3)\n"), str(db)], capture_output=True, text=True, timeout=300)   # kept: the 3 s held
    assert holder.returncode == 0, holder.stderr
    results = [finish(p) for p in procs]
    for code, out, err in results:
        assert code == 0 and "Traceback" not in err, err
    docs = [json.loads(out) for _, out, _ in results]
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from experiments").fetchone() == (17,)
        assert c.execute("select count(*) from runs").fetchone() == (16 * 2 * 2 * 2,)
        stored = {r[0]: r[1] for r in c.execute("select id, experiment_id from runs")}
        applied = [r[0] for r in c.execute("select name from _sqlite_migrations where migration_set = 'resel'")]
    assert len(applied) == len(set(applied)) == len(store_module.migrations._migrations)   # each once
    for doc in docs:    # every run each process reported is in the store, under its experiment
        for row in doc["results"]:
            assert all(stored[r] == doc["experiment_id"] for r in row["run_ids"])


def test_a_simulate_beside_a_live_run_on_the_testbed(tmp_path, testbed):
    """A live `resel run` writes its events as it goes; 6 simulates share its store; all finish."""
    from live_helpers import bag_toml, sites_toml, write_inputs
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(12, "sleep 1; echo {index}", name="beside"))
    db = tmp_path / "resel.db"
    live = resel("run", bag, "--sites", sites, "--db", db, "--poll", "0.3", "--strategy", "model",
                 "--no-progress", "--max-time", "240", "--json")
    wait_until(lambda: stored_events(db), 120, "the live run's first events in the store")
    sims = [resel("simulate", "--db", db, "--sizes", "16", "--repeat", "2", "--seed", i,
                  "--strategies", "model,earliest,race", "--json") for i in range(6)]   # 3 stored runs each
    for p in sims:
        code, out, err = finish(p)
        assert code == 0, err
    code, out, err = finish(live, timeout=300)
    assert code == 0, err
    assert json.loads(out)["done"] == 12
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from runs where mode = 'simulated'").fetchone() == (6 * 3 * 2,)
        assert c.execute("select status, done from runs where mode = 'live'").fetchall() == [("done", 12)]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("args", [
    ["runs"], ["report", "1"], ["status"], ["cancel", "1"], ["run", "--resume", "1"],
    ["simulate", "--sizes", "4", "--repeat", "1"], ["history", "show"], ["model", "show"],
    ["history", "import", "--site", "x", "--swf", "{trace}"],
])
def test_another_applications_database_is_left_byte_for_byte(tmp_path, args):
    other = tmp_path / "notes.sqlite"
    with sqlite3.connect(other) as c:
        c.execute("create table notes (id integer primary key, body text)")
        c.executemany("insert into notes (body) values (?)", [(f"note {i}",) for i in range(100)])
    c.close()
    before, files = _sha(other), sorted(os.listdir(tmp_path))
    trace = tmp_path.parent / f"{tmp_path.name}-tiny.swf"
    trace.write_text(TINY, encoding="utf-8")
    argv = [a.replace("{trace}", str(trace)) for a in args]
    code, out, err = finish(resel(*argv, "--db", other))
    assert code == 1 and "Traceback" not in err
    assert f"{other} is not a resel run store: it holds another application's tables (notes)" in err, err
    assert _sha(other) == before and sorted(os.listdir(tmp_path)) == files   # no -wal, -shm, -journal


def test_a_new_store_is_private(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "a" / "b" / "resel.db"
        open_store(path).conn.close()
        existing = tmp_path / "mine"
        existing.mkdir(mode=0o755)
        open_store(existing / "resel.db").conn.close()
    finally:
        os.umask(old)
    assert [oct((tmp_path / p).stat().st_mode & 0o777) for p in ("a", "a/b", "a/b/resel.db")] == \
        ["0o700", "0o700", "0o600"]
    assert oct(existing.stat().st_mode & 0o777) == "0o755"          # a folder resel did not make: as it was
    assert oct((existing / "resel.db").stat().st_mode & 0o777) == "0o600"


def test_the_store_uses_wal_except_on_a_network_filesystem(tmp_path, monkeypatch):
    assert open_store(tmp_path / "local.db").execute("pragma journal_mode").fetchone()[0] == "wal"
    monkeypatch.setattr(store_module, "_filesystem", lambda path: "nfs4")
    assert open_store(tmp_path / "nfs.db").execute("pragma journal_mode").fetchone()[0] == "delete"


def test_the_filesystem_of_a_path_is_read_from_the_mount_table():
    kind = store_module._filesystem(Path(tempfile.gettempdir()))
    assert kind and kind not in store_module.NETWORK_FILESYSTEMS


@pytest.fixture
def foreign_user():
    """Run a command as the unprivileged user ``nobody`` (another user of the machine)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as another user")
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def test_a_read_only_store_is_refused_before_work_and_read_by_reading_commands(tmp_path, foreign_user):
    folder = Path(tempfile.mkdtemp(prefix="resel-ro-"))
    try:
        os.chmod(folder, 0o755)
        db = folder / "resel.db"
        code, out, err = finish(resel("simulate", "--db", db, "--sizes", "4", "--repeat", "1", "--strategies", "model"))
        assert code == 0, err
        os.chmod(db, 0o644)                               # nobody may read it, not write it
        before = _sha(db)
        env = {"PATH": os.environ["PATH"], "HOME": str(folder), "MPLCONFIGDIR": str(folder),
               **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}

        def as_nobody(*args):
            return subprocess.run([*foreign_user, *RESEL, *map(str, args)], capture_output=True, text=True,
                                  env=env, timeout=300, cwd="/")

        start = time.monotonic()
        got = as_nobody("simulate", "--db", db, "--sizes", "512", "--repeat", "50")
        assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
        assert f"run store {db} is read-only for this user" in got.stderr
        assert got.stdout == "" and time.monotonic() - start < 60       # refused before simulating anything
        (folder / "tiny.swf").write_text(TINY, encoding="utf-8")
        for args in (["history", "import", "--site", "x", "--swf", folder / "tiny.swf", "--db", db],
                     ["profile", "--db", db, "--", "true"]):
            got = as_nobody(*args)
            assert got.returncode == 1 and "is read-only for this user" in got.stderr, got.stderr
        got = as_nobody("runs", "--db", db)
        assert got.returncode == 0 and "model" in got.stdout, got.stderr
        got = as_nobody("report", "1", "--db", db)
        assert got.returncode == 0 and "run 1" in got.stdout, got.stderr
        assert _sha(db) == before
    finally:
        shutil.rmtree(folder)


def test_another_users_store_reads_as_its_owner_reads_it(bench_store, foreign_user):
    """``resel runs`` and ``resel status`` on a store another user cannot write (read through
    sqlite3 alone, immutable: no lock, no -shm) print what its owner sees, and change nothing."""
    folder = Path(tempfile.mkdtemp(prefix="resel-ro-"))
    try:
        os.chmod(folder, 0o755)
        db = folder / "resel.db"
        shutil.copy(bench_store, db)
        os.chmod(db, 0o644)
        before, files = _sha(db), sorted(os.listdir(folder))
        env = {"PATH": os.environ["PATH"], "HOME": str(folder), "COLUMNS": "120",
               **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
        commands = [["runs"], ["runs", "--json"], ["status"], ["status", "--json"], ["status", "1"]]
        theirs = [subprocess.run([*foreign_user, *RESEL, *args, "--db", str(db)], capture_output=True, text=True,
                                 env=env, timeout=300, cwd="/") for args in commands]
        assert _sha(db) == before and sorted(os.listdir(folder)) == files
        mine = [subprocess.run([*RESEL, *args, "--db", str(db)], capture_output=True, text=True, env=env,
                               timeout=300, cwd="/") for args in commands]
        for args, got, want in zip(commands, theirs, mine):
            assert "Traceback" not in got.stderr, got.stderr
            assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr), args
        assert [t.returncode for t in theirs] == [0, 0, 0, 0, 1] and "run 4 (running)" in theirs[2].stdout
    finally:
        shutil.rmtree(folder)


def test_a_store_path_that_is_a_folder_is_one_line(tmp_path):
    with pytest.raises(StoreError, match="is not a file"):
        open_store(tmp_path)


def test_every_figure_a_plot_folder_receives_is_checked_before_work():
    from resel.outputs import FIGURES
    from resel.report.plots import RUN_FIGURES
    assert set(FIGURES) == set(RUN_FIGURES) | {"workload_by_size"}
