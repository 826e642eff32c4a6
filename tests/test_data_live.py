"""Task data end to end on the real testbed (docs/data.md): tba (local Slurm) and tbb (Slurm over
the testbed's sshd). Inputs are checked and hashed before anything is submitted, reach the site
a task is bound to (a shared file once per site), outputs come home with their sha256 checked,
and a `kill -9` of the coordinator while files are in flight loses nothing and reruns nothing.

Every expected value is computed here from the bytes the test wrote (hashlib), and what
happened is read from the agents' own files, the store and the results folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from live_helpers import REPO, cancel_leftovers, done_results, our_jobs, sites_toml, wait_for
from live_helpers import start_with_data as start
from resel import task_data
from resel.backends.connect import open_site
from resel.config import load_bag, load_sites
from resel.live.coordinator import Coordinator, LiveOptions
from resel.store import open_store

RESEL = [sys.executable, "-m", "resel.cli"]


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


@pytest.fixture
def request_cleanup():
    """Callables run after the test, whatever its outcome."""
    todo: list = []
    yield todo
    for undo in todo:
        undo()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def data_bag(root: Path, count: int, command: str, outputs: str, *, own: int = 5000, shared: int = 1 << 20,
             name: str = "data") -> tuple[Path, dict[int, bytes], bytes]:
    """A bag in ``root`` whose tasks each read sys/N.dat (``own`` random bytes) and ff.itp
    (``shared`` random bytes, the same for all); returns its path and the bytes."""
    (root / "sys").mkdir(parents=True, exist_ok=True)
    own_bytes = {i: os.urandom(own + i) for i in range(count)}
    for i, data in own_bytes.items():
        (root / "sys" / f"{i}.dat").write_bytes(data)
    ff = os.urandom(shared)
    (root / "ff.itp").write_bytes(ff)
    bag = root / "bag.toml"
    bag.write_text(f'[bag]\nname = "{name}"\ncommand = {json.dumps(command)}\ncount = {count}\n'
                   f'inputs = [{{ path = "sys/{{index}}.dat", as = "sys.dat" }}, "ff.itp"]\noutputs = {outputs}\n'
                   '[bag.profile]\ninstructions = 4e9\n', encoding="utf-8")
    return bag, own_bytes, ff


#: each task writes the sha256 of its own input then the shared one (what the test recomputes)
DIGEST_CMD = "mkdir -p out; cat sys.dat ff.itp | sha256sum | cut -c1-64 > md.log; echo $RESEL_TASK > out/n.txt; sleep 1"


def test_inputs_reach_both_clusters_and_every_output_comes_home_verified(tmp_path, testbed):
    count = 12
    bag, own, ff = data_bag(tmp_path, count, DIGEST_CMD, '["md.log", "out/*.txt"]')
    coord = start(tmp_path, bag, sites_toml(testbed))
    try:
        coord.run(max_time=240)
    finally:
        coord.close()
    db, run_id = coord.db, coord.run_id
    run = db["runs"].get(run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", count, 0)
    # every output home, its content the one the task must have written from ITS inputs
    for i in range(count):
        home = Path(run["results"]) / task_data.task_folder(i, count)
        assert (home / "md.log").read_text().strip() == sha(own[i] + ff)
        assert (home / "out" / "n.txt").read_text().strip() == str(i)
    rows = list(db.query("select task, name, size, sha256, path, site from task_outputs where run_id = ?", [run_id]))
    assert len(rows) == 2 * count
    for r in rows:
        data = Path(r["path"]).read_bytes()
        assert (len(data), sha(data)) == (r["size"], r["sha256"])
    # both clusters ran tasks; each received the shared file exactly once, and its tasks' own files
    ran = {r["site"] for r in rows}
    assert ran == {"tba", "tbb"}
    sent = list(db.query("select site, sha256, size from site_files where run_id = ?", [run_id]))
    for site in ran:
        mine = [s for s in sent if s["site"] == site]
        assert sum(s["sha256"] == sha(ff) for s in mine) == 1
        tasks_there = {r["task"] for r in rows if r["site"] == site}
        assert {sha(own[i]) for i in tasks_there} <= {s["sha256"] for s in mine}
    # each task done exactly once, by the agents' own files; no folder or cache left on a site
    assert done_results(testbed, coord.run_key) == {i: 1 for i in range(count)}
    for site, root in (("tba", testbed.work_a),):
        run_dir = Path(root) / coord.run_key
        assert not (run_dir / "cache").exists()
        assert list(run_dir.glob("p*/tasks/*")) == []
    assert our_jobs(testbed, coord.run_key) == []
    res = subprocess.run(RESEL + ["results", str(run_id), "--db", str(tmp_path / "resel.db"), "--json"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["counts"] == {"ok": 2 * count, "missing": 0, "changed": 0}


def test_an_input_changed_after_the_check_is_refused_never_run(tmp_path, testbed):
    """Task 1's input is edited after the run checked it: task 1 fails with that reason before
    anything runs on the new bytes; the other tasks are done."""
    bag, own, ff = data_bag(tmp_path, 3, DIGEST_CMD, '["md.log"]')
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    loaded = load_bag(bag)
    manifest = task_data.build(loaded)
    (tmp_path / "sys" / "1.dat").write_bytes(b"edited after the check")
    db = open_store(tmp_path / "resel.db")
    coord = Coordinator.start(db, loaded, load_sites(sites_path), LiveOptions(poll=0.3, strategy="model"), open_site,
                              manifest=manifest, results=str(tmp_path / "results"))
    try:
        coord.run(max_time=180)
    finally:
        coord.close()
    run = db["runs"].get(coord.run_id)
    assert (run["done"], run["failed"]) == (2, 1)
    reasons = [r["reason"] for r in db.query("select reason from attempts where run_id = ? and task = 1",
                                             [coord.run_id])]
    assert reasons and all("changed since the run started" in r for r in reasons)
    assert 1 not in done_results(testbed, coord.run_key)
    assert not (Path(run["results"]) / "task-1").exists()


def _wait_part(folder: Path, timeout: float) -> bool:
    def any_part():
        return any(p.name.startswith(".") and ".part-" in p.name for p in folder.rglob("*")) if folder.exists() else False
    return bool(wait_for(any_part, timeout, every=0.02))


def test_kill_coordinator_while_outputs_are_in_flight_then_resume(tmp_path, testbed):
    """`kill -9` of `resel run` while an output is half home (a .part file in the results
    folder), then `--resume`: every output home and checked, no partial file taken, no task
    run again because of the transfer."""
    count = 6
    big = "head -c 40000000 /dev/urandom > traj.xtc; " + DIGEST_CMD
    bag, own, ff = data_bag(tmp_path, count, big, '["md.log", "traj.xtc"]')
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    db_path, results = tmp_path / "resel.db", tmp_path / "results"
    run = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites_path), "--db", str(db_path), "--poll", "0.3",
                                    "--strategy", "topk:2", "--results", str(results), "--no-progress"],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _wait_part(results, 120), "no output was ever in flight"
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.wait()
    db = open_store(db_path)
    run_id = list(db.query("select id from runs order by id desc limit 1"))[0]["id"]
    assert db["runs"].get(run_id)["status"] == "running"
    res = subprocess.run(RESEL + ["run", "--resume", str(run_id), "--db", str(db_path), "--poll", "0.3", "--json",
                                  "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["done"] == count
    row = db["runs"].get(run_id)
    for i in range(count):
        home = Path(row["results"]) / task_data.task_folder(i, count)
        assert (home / "md.log").read_text().strip() == sha(own[i] + ff)
        assert (home / "traj.xtc").stat().st_size == 40_000_000
    assert [p for p in Path(row["results"]).rglob("*") if ".part-" in p.name] == []
    attempts = list(db.query("select task, count(*) as n from attempts where run_id = ? group by task", [run_id]))
    assert {a["task"]: a["n"] for a in attempts} == {i: 1 for i in range(count)}, "a task ran again"
    assert done_results(testbed, row["run_key"]) == {i: 1 for i in range(count)}
    check = subprocess.run(RESEL + ["results", str(run_id), "--db", str(db_path)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def _in_flight(db_path: Path, testbed) -> Path | None:
    """The run's cache on tbb once a file is on its way there (a temporary `.SHA.part-…` name),
    else None; only this run's: another run's leftover in the shared workdir is not it."""
    try:
        rows = list(open_store(db_path).query("select run_key from runs")) if db_path.exists() else []
    except Exception:   # noqa: BLE001 - the store still being made by `resel run`
        return None
    if not rows or not rows[0]["run_key"]:
        return None
    cache = Path(testbed.work_b) / rows[0]["run_key"] / "cache"
    try:
        return cache if any(".part-" in p.name for p in cache.iterdir()) else None
    except FileNotFoundError:
        return None


def test_kill_coordinator_while_an_input_is_in_flight_then_resume(tmp_path, testbed):
    """The shared input is 150 MB: `kill -9` while it is on its way to tbb (a temporary file in
    the run's cache over SFTP), then `--resume`: it is sent again, never taken half-sent."""
    bag, own, ff = data_bag(tmp_path, 2, DIGEST_CMD, '["md.log"]', shared=150_000_000)
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text("[[site]]" + sites_toml(testbed).split("[[site]]")[2], encoding="utf-8")   # tbb alone
    db_path, results = tmp_path / "resel.db", tmp_path / "results"
    run = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites_path), "--db", str(db_path), "--poll", "0.3",
                                    "--strategy", "model", "--results", str(results), "--no-progress"],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: _in_flight(db_path, testbed), 120, every=0.05), "the input was never in flight"
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.wait()
    db = open_store(db_path)
    run_id = list(db.query("select id from runs order by id desc limit 1"))[0]["id"]
    res = subprocess.run(RESEL + ["run", "--resume", str(run_id), "--db", str(db_path), "--poll", "0.3", "--json",
                                  "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    row = db["runs"].get(run_id)
    for i in range(2):
        assert (Path(row["results"]) / f"task-{i}" / "md.log").read_text().strip() == sha(own[i] + ff)
    assert done_results(testbed, row["run_key"]) == {0: 1, 1: 1}


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the results folder (CI runs as root)")
def test_a_full_results_disk_stops_fetching_and_loses_nothing(tmp_path, testbed):
    """Results on a 3 MB tmpfs, outputs of 1 MB per task: the coordinator stops with an error
    naming the folder; once there is room, `--resume` brings every output home."""
    count = 6
    cmd = "head -c 1000000 /dev/urandom > big.bin; " + DIGEST_CMD
    bag, own, ff = data_bag(tmp_path, count, cmd, '["md.log", "big.bin"]')
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    results = tmp_path / "results"
    results.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(results)], check=True)
    db_path = tmp_path / "resel.db"
    try:
        first = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites_path), "--db", str(db_path), "--poll",
                                        "0.3", "--strategy", "model", "--results", str(results), "--no-progress"],
                               cwd=REPO, capture_output=True, text=True, timeout=240)
        assert first.returncode != 0
        assert "is full" in first.stderr and str(results) in first.stderr, first.stderr
        db = open_store(db_path)
        run_id = list(db.query("select id from runs order by id desc limit 1"))[0]["id"]
        assert db["runs"].get(run_id)["status"] == "running"
        # room again: the same disk grows; what came home before the disk filled stays there
        subprocess.run(["mount", "-o", "remount,size=64m", str(results)], check=True)
        res = subprocess.run(RESEL + ["run", "--resume", str(run_id), "--db", str(db_path), "--poll", "0.3", "--json",
                                      "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        row = db["runs"].get(run_id)
        for i in range(count):
            home = Path(row["results"]) / task_data.task_folder(i, count)
            assert (home / "md.log").read_text().strip() == sha(own[i] + ff)
            assert (home / "big.bin").stat().st_size == 1_000_000
        assert [p for p in results.rglob("*") if ".part-" in p.name] == []
    finally:
        subprocess.run(["umount", str(results)], check=False)
    attempts = list(db.query("select task, count(*) as n from attempts where run_id = ? group by task", [run_id]))
    assert {a["task"]: a["n"] for a in attempts} == {i: 1 for i in range(count)}


def test_a_missing_input_is_one_error_and_nothing_is_submitted(tmp_path, testbed):
    bag, own, ff = data_bag(tmp_path, 4, DIGEST_CMD, '["md.log"]')
    (tmp_path / "sys" / "2.dat").unlink()
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    res = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites_path), "--db", str(tmp_path / "r.db"),
                                  "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert f"bag.inputs[0]: task 2: input {tmp_path}/sys/2.dat not found" in res.stderr
    assert not (tmp_path / "r.db").exists() or not list(open_store(tmp_path / "r.db").query("select id from runs"))


def test_an_input_another_user_swaps_for_a_fifo_after_the_check_is_refused_not_waited_for(tmp_path, testbed,
                                                                                          request_cleanup):
    """Task 1's input lies in a folder another user may write (a group project folder, or here
    a sticky one where the file is theirs): after the run checked it, they put a FIFO in its
    place. Before, the upload opened it and waited for a writer that never came: the site's
    thread hung, and the run with it. Now it is refused like a changed input: task 1 fails
    with that reason, the other tasks are done, nothing waits."""
    import pwd
    import threading
    other = pwd.getpwnam(testbed.user)               # a real second user
    bag, own, ff = data_bag(tmp_path, 3, DIGEST_CMD, '["md.log"]')
    import shutil
    import tempfile
    shared = Path(tempfile.mkdtemp(prefix="resel-shared-", dir="/tmp"))   # pytest's tmp_path is root's alone
    request_cleanup.append(lambda: shutil.rmtree(shared, ignore_errors=True))
    shared.chmod(0o1777)
    theirs = shared / "1.dat"
    theirs.write_bytes(own[1])
    os.chown(theirs, other.pw_uid, other.pw_gid)
    (tmp_path / "sys" / "1.dat").unlink()
    (tmp_path / "sys" / "1.dat").symlink_to(theirs)  # the owner's bag names the shared file
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    loaded = load_bag(bag)
    manifest = task_data.build(loaded)
    swap = subprocess.run(["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--init-groups",
                           "sh", "-c", f"rm -f {theirs} && mkfifo -m 644 {theirs}"], capture_output=True, text=True)
    assert swap.returncode == 0, swap.stderr
    unblocked = threading.Event()

    def unblock():                                   # so a hung upload ends the test, not the session
        if not unblocked.wait(150):
            with open(theirs, "wb"):
                pass
    guard = threading.Thread(target=unblock, daemon=True)
    guard.start()
    db = open_store(tmp_path / "resel.db")
    coord = Coordinator.start(db, loaded, load_sites(sites_path), LiveOptions(poll=0.3, strategy="model"), open_site,
                              manifest=manifest, results=str(tmp_path / "results"))
    began = time.monotonic()
    try:
        coord.run(max_time=180)
    finally:
        coord.close()
        hung = not unblocked.is_set() and not guard.is_alive()
        unblocked.set()
    assert not hung, "the upload waited on the FIFO until the test opened it"
    assert time.monotonic() - began < 120
    run = db["runs"].get(coord.run_id)
    assert (run["done"], run["failed"]) == (2, 1)
    reasons = [r["reason"] for r in db.query("select reason from attempts where run_id = ? and task = 1",
                                             [coord.run_id])]
    assert reasons and all("not a regular file" in r for r in reasons), reasons
    assert 1 not in done_results(testbed, coord.run_key)


def test_cancel_after_a_kill_mid_upload_leaves_no_half_sent_input_on_the_site(tmp_path, testbed):
    """`kill -9` while the 150 MB shared input is on its way to tbb, then `resel cancel`: the
    run's cache on the site goes with it, the half-sent temporary file included. Before, the
    cancelling coordinator knew of no cache there (it had staged nothing itself) and left the
    partial file — 220 MB after a Ctrl-C in a first hour on the testbed — on the user's site."""
    bag, own, ff = data_bag(tmp_path, 2, DIGEST_CMD, '["md.log"]', shared=150_000_000)
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text("[[site]]" + sites_toml(testbed).split("[[site]]")[2], encoding="utf-8")   # tbb alone
    db_path = tmp_path / "resel.db"
    run = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites_path), "--db", str(db_path), "--poll", "0.3",
                                    "--strategy", "model", "--results", str(tmp_path / "results"), "--no-progress"],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        cache = wait_for(lambda: _in_flight(db_path, testbed), 120, every=0.05)
        assert cache, "the input was never in flight"
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.wait()
    run_id = list(open_store(db_path).query("select id from runs"))[0]["id"]
    res = subprocess.run(RESEL + ["cancel", str(run_id), "--db", str(db_path), "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not cache.exists(), sorted(p.name for p in cache.iterdir())
