"""The live commands through the real CLI (subprocesses) on the real testbed."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from live_helpers import cancel_leftovers, REPO, bag_toml, our_jobs, sites_toml, write_inputs
from waiting import poll
from resel.store import open_store


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    """Whatever a test does, no pilot of it stays on the testbed to slow down the next one."""
    yield
    cancel_leftovers(testbed, tmp_path)


RESEL = [sys.executable, "-m", "resel.cli"]


def resel(*args, timeout=120):
    return subprocess.run(RESEL + [str(a) for a in args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@contextmanager
def _run_until_a_task_runs(sites: Path, bag: Path, db: Path):
    """`resel run BAG` in the background (SIGINT as a terminal's Ctrl-C), until `resel status`
    shows a task running: (the process, that status). The caller stops it; it is killed if
    still there when the block ends."""
    import signal
    proc = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db), "--poll", "0.3",
                                     "--no-progress"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def status():
            res = resel("status", "--db", db, "--json")
            return json.loads(res.stdout) if res.returncode == 0 else None
        snap = poll(lambda: (s := status()) and sum(x["running"] for x in s["sites"]) >= 1 and s, 60, every=0.3)
        assert snap, status()
        yield proc, snap
    finally:
        if proc.poll() is None:
            proc.kill()


def _ctrl_c(proc: subprocess.Popen) -> None:
    import signal
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130


def test_sites_check_reports_both_clusters_and_a_dead_one(tmp_path, testbed):
    """One table over every site; a dead site shows its error and does not hold up the others."""
    dead = sites_toml(testbed, b={"host": "127.0.0.1", "port": 1}).split("[[site]]")[2]
    text = sites_toml(testbed) + "[[site]]" + dead.replace('name = "tbb"', 'name = "dead"')
    sites = tmp_path / "sites.toml"
    sites.write_text(text)
    res = resel("sites", "check", "--sites", sites, "--json")
    assert res.returncode == 1, res.stderr               # a site failed: non-zero, but a full report
    rows = {r["site"]: r for r in json.loads(res.stdout)["sites"]}
    assert rows["tba"]["reachable"] and rows["tba"]["total_cores"] == 8 and rows["tba"]["version"].startswith("22.05")
    assert rows["tbb"]["reachable"] and rows["tbb"]["total_cores"] == 4
    assert [p["name"] for p in rows["tba"]["partitions"]] == ["debug", "short"]
    assert rows["tba"]["start_estimate_s"] is not None and rows["tba"]["cpu"]["model"]
    assert not rows["dead"]["reachable"] and "127.0.0.1:1" in rows["dead"]["error"]
    table = resel("sites", "check", "--sites", sites)
    assert "tba" in table.stdout and "dead" in table.stdout and "Traceback" not in table.stderr


def test_dry_run_submits_nothing(tmp_path, testbed):
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(10, "echo hi"))
    before = _testbed_jobs(testbed)
    res = resel("run", bag, "--sites", sites, "--dry-run", "--strategy", "model", "--json", "--db", tmp_path / "db")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    rows = {r["site"]: r for r in plan["sites"]}
    assert rows["tba"]["tasks"] == 10 and rows["tba"]["pilots"] == [8] and rows["tba"]["role"] == "origin"
    assert rows["tbb"]["tasks"] == 0 and rows["tba"]["tx"] == 2.0
    assert rows["tba"]["scheduler_s"] is not None and rows["tba"]["twin_s"] is not None
    assert plan["submitted"] is False
    assert not (_testbed_jobs(testbed) - before)   # nothing submitted (jobs ending meanwhile are fine)
    assert not (tmp_path / "db").exists() or not list(open_store(tmp_path / "db").query("select * from runs"))


def test_status_and_cancel_leave_nothing_on_any_site(tmp_path, testbed):
    """Start a long bag, watch it with `resel status`, `resel cancel` it: no pilot is left."""
    # every core of both clusters is needed (12 running tasks): wait until an earlier test's
    # pilots have drained (cancelled jobs stay COMPLETING for KillWait and their epilog)
    from live_helpers import slurm, wait_for
    assert wait_for(lambda: not any(slurm(testbed, c, "squeue", "-h", "-o", "%i").stdout.split() for c in ("a", "b")),
                    timeout=90), [slurm(testbed, c, "squeue").stdout for c in ("a", "b")]
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(30, "sleep 60"))
    db = tmp_path / "resel.db"
    proc = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db), "--poll", "0.3",
                                     "--strategy", "topk:2", "--no-progress"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        store = open_store(db)
        def status():
            res = resel("status", "--db", db, "--json")
            return json.loads(res.stdout) if res.returncode == 0 else None
        busy = poll(lambda: (s := status()) and sum(x["running"] for x in s["sites"]) >= 12 and s, 60, every=0.5)
        snap = busy or status()
        assert snap and sum(s["running"] for s in snap["sites"]) == 12, snap   # 8 + 4 cores busy
        assert snap["status"] == "running" and snap["total"] == 30
        assert {p["site"] for p in snap["pilots"]} == {"tba", "tbb"}
        run_id = snap["run_id"]
        res = resel("cancel", run_id, "--db", db, "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == {"run": run_id, "cancelled": True, "left": []}
        proc.wait(timeout=60)                               # the coordinator notices and stops
        run_key = store["runs"].get(run_id)["run_key"]
        assert our_jobs(testbed, run_key) == []
        assert store["runs"].get(run_id)["status"] == "cancelled"
        assert "cancelled" in resel("status", run_id, "--db", db).stdout
    finally:
        if proc.poll() is None:
            proc.kill()


def test_run_json_and_table(tmp_path, testbed):
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(6, "echo $RESEL_TASK"))
    res = resel("run", bag, "--sites", sites, "--db", tmp_path / "db", "--poll", "0.3", "--json", "--no-progress")
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["done"] == 6 and snap["status"] == "done"
    assert "resume with `resel run --resume" in res.stderr


def test_bad_inputs_are_one_line_errors(tmp_path, testbed):
    sim = REPO / "examples" / "sites-thesis.toml"
    res = resel("run", REPO / "examples" / "gromacs-bag.toml", "--sites", sim, "--db", tmp_path / "db")
    assert res.returncode == 1 and "simulated" in res.stderr and "Traceback" not in res.stderr
    res = resel("status", "999", "--db", tmp_path / "db")
    assert res.returncode == 1 and "no run 999" in res.stderr
    res = resel("run", "--resume", "999", "--db", tmp_path / "db")
    assert res.returncode == 1 and "no run 999" in res.stderr


def _testbed_jobs(tb) -> set[str]:
    from live_helpers import slurm
    return {line for c in ("a", "b") for line in slurm(tb, c, "squeue", "-h", "-o", "%i").stdout.split()}


def test_sites_status_one_table_a_silent_site_does_not_hold_up_the_others(tmp_path, testbed):
    """A site whose SSH server accepts the connection but never speaks: shown as not answering."""
    import socket
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)                                     # accepts (kernel backlog), never answers
    port = silent.getsockname()[1]
    try:
        dead = sites_toml(testbed, b={"host": "127.0.0.1", "port": port}).split("[[site]]")[2]
        sites = tmp_path / "sites.toml"
        sites.write_text(sites_toml(testbed) + "[[site]]" + dead.replace('name = "tbb"', 'name = "silent"'))
        began = time.monotonic()
        # 8 s: tbb's answer needs an SSH handshake and four commands, ~1 s idle but 3 s and
        # more on a loaded runner; the silent site still must not hold the others up (took)
        res = resel("sites", "status", "--sites", sites, "--timeout", "8", "--json")
        took = time.monotonic() - began
    finally:
        silent.close()
    assert res.returncode == 1
    rows = {r["site"]: r for r in json.loads(res.stdout)["sites"]}
    assert rows["tba"]["total_cores"] == 8 and rows["tba"]["kind"] == "slurm" and rows["tba"]["error"] is None
    assert rows["tbb"]["total_cores"] == 4 and rows["tbb"]["error"] is None
    assert rows["silent"]["error"] == "no answer within 8 s"
    assert took < 20, took                               # one timeout for all sites, not one each


def test_resel_log_debug_shows_every_scheduler_command(tmp_path, testbed):
    """RESEL_LOG=debug: each command resel runs on a site (locally on tba, over SSH on tbb) is on
    stderr with its argv, exit code and time; without it, none is; a bad level is one clear line."""
    sites, _ = write_inputs(tmp_path, sites_toml(testbed), bag_toml(1, "true"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "RESEL_LOG"}
    quiet = subprocess.run(RESEL + ["sites", "check", "--sites", str(sites), "--json"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert "resel.backends.transport" not in quiet.stderr
    loud = subprocess.run(RESEL + ["sites", "check", "--sites", str(sites), "--json"], cwd=REPO,
                          env={**env, "RESEL_LOG": "debug"}, capture_output=True, text=True, timeout=120)
    assert loud.returncode == 0, loud.stderr
    assert json.loads(loud.stdout) == json.loads(loud.stdout)            # stdout stays clean JSON
    lines = [ln for ln in loud.stderr.splitlines() if "resel.backends.transport" in ln]
    assert any(" local: sinfo " in ln and "-> exit 0 in " in ln for ln in lines), loud.stderr
    assert any(ln.split("resel.backends.transport: ")[1].startswith("ssh:") and " sinfo --version -> exit 0 in "
               in ln for ln in lines), loud.stderr
    bad = subprocess.run(RESEL + ["runs"], cwd=REPO, env={**env, "RESEL_LOG": "loud"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "RESEL_LOG='loud'" in bad.stderr and "Traceback" not in bad.stderr


def test_a_site_given_up_says_why_once_in_the_run_table(tmp_path, testbed):
    """`resel run`'s last table: a dead site's note gives the reason once, not 'gave up: X; error: X'."""
    dead = sites_toml(testbed, b={"host": "127.0.0.1", "port": 1}).split("[[site]]")[2]
    text = "[[site]]" + sites_toml(testbed).split("[[site]]")[2] + "[[site]]" + dead.replace('name = "tbb"',
                                                                                             'name = "dead"')
    sites, bag = write_inputs(tmp_path, text, bag_toml(2, "echo $RESEL_TASK"))
    res = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(tmp_path / "db"), "--poll",
                                  "0.3", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if line.startswith("dead "))
    assert "gave up: " in row and row.count("127.0.0.1:1") == 1, row


def test_status_of_a_run_whose_coordinator_stopped_says_so_and_how_to_carry_on(tmp_path, testbed):
    """Ctrl-C stops `resel run` and leaves its pilots running: `resel status` then still reads
    'running' from the store, with counts frozen where the coordinator left them — it must say
    that no resel carries the run on, and how to (`--resume`) or stop it (`cancel`); `resel
    runs` lists it as stopped, not running."""
    sites, bag = write_inputs(tmp_path, sites_toml(testbed), bag_toml(6, "sleep 3"))
    db = tmp_path / "resel.db"
    with _run_until_a_task_runs(sites, bag, db) as (proc, snap):
        assert snap["status"] == "running", snap
        assert snap["coordinator"] and snap["coordinator"]["pid"] == proc.pid
        assert "no resel carries" not in resel("status", "--db", db).stdout
        assert "running" in resel("runs", "--db", db).stdout
        _ctrl_c(proc)
    run_id = snap["run_id"]
    after = json.loads(resel("status", run_id, "--db", db, "--json").stdout)
    assert after["status"] == "running" and after["coordinator"] is None
    text = resel("status", run_id, "--db", db).stdout
    assert "no resel carries" in text and f"resel run --resume {run_id}" in text and f"resel cancel {run_id}" in text
    listed = resel("runs", "--db", db).stdout      # resel runs says so too, not "running"
    assert "stopped" in listed and "running" not in listed.split("created: UTC")[0], listed
    done = resel("run", "--resume", run_id, "--db", db, "--poll", "0.3", "--no-progress", timeout=180)
    assert done.returncode == 0, done.stderr
    end = resel("status", run_id, "--db", db)
    assert "(done)" in end.stdout and "no resel carries" not in end.stdout


def test_results_of_a_run_whose_tasks_failed_name_them_and_why(tmp_path, testbed):
    """A task whose required output never appears fails: `resel results` must not say '0 ok,
    0 missing' and exit 0 as if the run had nothing to bring home — it names the failed tasks,
    why they failed (their last attempt's reason) and exits 1."""
    bag_text = bag_toml(2, "echo hi > out.txt").replace("count = 2\n", 'count = 2\noutputs = ["out.txt", "md.xtc"]\n')
    tbb = "[[site]]" + sites_toml(testbed).split("[[site]]")[2]      # one site: the run ends in seconds
    sites, bag = write_inputs(tmp_path, tbb, bag_text)
    db = tmp_path / "db"
    run = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db), "--poll", "0.3",
                                  "--no-progress", "--results", str(tmp_path / "res"), "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 1 and json.loads(run.stdout)["failed"] == 2, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    res = resel("results", run_id, "--db", db, "--json")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert [(f["task"], f["why"]) for f in doc["failed"]] == [(0, "missing output: md.xtc"),
                                                              (1, "missing output: md.xtc")]
    assert "2 task(s) failed" in doc["error"]
    # where each failed attempt's files stayed: that site's task folder, with what the task wrote
    for f in doc["failed"]:
        site, folder = f["folder"].split(":", 1)
        assert site == "tbb" and re.search(rf"/r{run_id}-[0-9a-f]+/p\d+/tasks/t{f['task']}-a\d+$", folder), f
        assert (Path(os.path.expanduser(folder)) / "out.txt").read_text() == "hi\n"
    text = resel("results", run_id, "--db", db)
    assert text.returncode == 1 and "2 task(s) failed" in text.stdout + text.stderr
    assert "missing output: md.xtc" in text.stdout and f"its files: {doc['failed'][0]['folder']}" in text.stdout
    report = resel("report", run_id, "--db", db).stdout
    assert f"its files: {doc['failed'][1]['folder']}" in report, report


def test_resume_refuses_what_it_would_silently_ignore(tmp_path, testbed):
    """`--resume RUN` carries the run on with the bag, sites, results folder and options stored
    with it: a `--dry-run` beside it must not resume for real (it submitted pilots and ran every
    task), and a BAG_FILE, `--sites`, `--results` or a run option (`--strategy`, …) given with it
    is refused, not silently dropped."""
    tbb = "[[site]]" + sites_toml(testbed).split("[[site]]")[2]
    sites, bag = write_inputs(tmp_path, tbb, bag_toml(4, "sleep 3"))
    db = tmp_path / "resel.db"
    with _run_until_a_task_runs(sites, bag, db) as (proc, snap):
        _ctrl_c(proc)
    run_id = snap["run_id"]
    steps = open_store(db)["runs"].get(run_id)["steps"]
    for extra in (["--dry-run"], [str(bag)], ["--sites", str(sites)], ["--results", str(tmp_path / "elsewhere")],
                  ["--strategy", "model"], ["--task-timeout", "5"], ["--no-quarantine"]):
        res = resel("run", "--resume", run_id, "--db", db, "--no-progress", *extra, timeout=180)
        assert res.returncode == 2, (extra, res.stdout, res.stderr)
        assert "--resume" in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert open_store(db)["runs"].get(run_id)["steps"] == steps, extra     # not carried on
    # --poll is this coordinator's pace, not a decision of the run: taken, and stored
    assert json.loads(open_store(db)["runs"].get(run_id)["options"])["poll"] == 0.3
    done = resel("run", "--resume", run_id, "--db", db, "--no-progress", "--poll", "0.7", timeout=180)
    assert done.returncode == 0, done.stderr
    assert json.loads(open_store(db)["runs"].get(run_id)["options"])["poll"] == 0.7


def test_a_site_that_never_speaks_ssh_prints_no_paramiko_log(tmp_path, testbed):
    """An SSH port that accepts and never answers (a hung sshd, another service): the site's
    error says so in resel's words (not paramiko's 'No existing session'); paramiko's own ERROR log ('Exception (client): Error reading SSH protocol
    banner' and its traceback, from its transport thread as resel gives up on the handshake)
    must not reach the user's stderr. Whether paramiko logs depends on a race between its
    thread and the close, so three such sites are checked at once."""
    import socket
    socks = []
    for _ in range(3):
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(5)                                 # accepts (kernel backlog), never answers
        socks.append(silent)
    try:
        sites = tmp_path / "sites.toml"          # as a user writes it: no ssh_config, a user and a port
        sites.write_text("".join(
            f'[[site]]\nname = "silent{i}"\nkind = "slurm"\ncores = 4\nclock = {{ base = 3.0 }}\n'
            'pilot = { mode = "single", max_cores = 4, walltime = 900 }\n'
            f'access = {{ transport = "ssh", host = "127.0.0.1", port = {s.getsockname()[1]}, '
            f'user = "{testbed.user}", workdir = "~/resel-work" }}\n' for i, s in enumerate(socks)))
        res = resel("sites", "check", "--sites", sites, "--json")
    finally:
        for s in socks:
            s.close()
    assert res.returncode == 1
    errors = [row["error"] for row in json.loads(res.stdout)["sites"]]
    assert all("127.0.0.1" in e and "no SSH greeting" in e and "No existing session" not in e for e in errors), errors
    assert "Exception (client)" not in res.stderr and "Traceback" not in res.stderr, res.stderr


def _stopped_while_starting(tmp_path, testbed) -> tuple[Path, int, subprocess.CompletedProcess]:
    """A run stopped by Ctrl-C after it was stored, while its sites were first checked (one
    accepts SSH and never answers, so that check lasts ~10 s): its store, its id, and how
    `resel run` ended."""
    import signal
    import socket
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)
    port = silent.getsockname()[1]
    try:
        text = ("[[site]]" + sites_toml(testbed).split("[[site]]")[2]
                + f'[[site]]\nname = "silent"\nkind = "slurm"\ncores = 4\nclock = {{ base = 3.0 }}\n'
                'pilot = { mode = "single", max_cores = 4, walltime = 900 }\n'
                f'access = {{ transport = "ssh", host = "127.0.0.1", port = {port}, user = "{testbed.user}", '
                'workdir = "~/resel-work" }\n')
        sites, bag = write_inputs(tmp_path, text, bag_toml(2, "echo $RESEL_TASK"))
        db = tmp_path / "resel.db"
        proc = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db), "--poll", "0.3",
                                         "--no-progress"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            def stored():
                try:
                    return [r["id"] for r in open_store(db).query("select id from runs")] if db.exists() else []
                except Exception:   # noqa: BLE001 - the store being created
                    return []
            ids = poll(stored, 60, every=0.1)
            assert ids, "no run was stored"
            time.sleep(0.5)                      # its sites' first check is under way (the silent one: ~10 s)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        silent.close()
    return db, ids[0], subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_while_a_new_run_first_checks_its_sites_names_the_run(tmp_path, testbed):
    """Ctrl-C after the run is stored but while its sites are first checked: `resel run` must
    say which run it left and how to carry it on, as a Ctrl-C later does — not click's bare
    'Aborted!', which left a run 'running' in `resel runs` that the user was never told of."""
    db, run_id, ended = _stopped_while_starting(tmp_path, testbed)
    assert ended.returncode == 130, ended.stderr
    assert f"resel run --resume {run_id}" in ended.stderr and "Aborted" not in ended.stderr, ended.stderr
    done = resel("run", "--resume", run_id, "--db", db, "--no-progress", "--json", timeout=180)
    assert done.returncode == 0 and json.loads(done.stdout)["done"] == 2, done.stderr


def test_cancel_of_a_run_stopped_before_its_bag_was_recorded(tmp_path, testbed):
    """`resel cancel` of a run stopped while its sites were first checked (no bag submission
    recorded, so no pilot): it is cancelled. Before, the engine refused 'BagCancelled before
    BagSubmitted', and the run stayed 'cancelling' — neither resumable nor cancellable nor
    prunable."""
    db, run_id, ended = _stopped_while_starting(tmp_path, testbed)
    assert ended.returncode == 130, ended.stderr
    res = resel("cancel", run_id, "--db", db, "--json", timeout=180)
    assert "before BagSubmitted" not in res.stdout + res.stderr, res.stdout + res.stderr
    assert open_store(db)["runs"].get(run_id)["status"] == "cancelled"
    assert "(cancelled)" in resel("status", run_id, "--db", db).stdout
    assert resel("prune", "--run", run_id, "--db", db).returncode == 0


def test_a_bag_s_results_folder_is_beside_the_bag_as_its_inputs_are(tmp_path, testbed):
    """Every path a bag file names (inputs, its task table) is relative to the bag file; so is
    its `results`: a run started from another folder puts the outputs beside the bag, not in
    whatever folder the user happened to be in."""
    here, elsewhere = tmp_path / "campaign", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (here / "in.txt").write_text("data\n")
    bag_text = bag_toml(2, "cat in.txt > out.txt").replace(
        "count = 2\n", 'count = 2\ninputs = ["in.txt"]\noutputs = ["out.txt"]\nresults = "res"\n')
    tbb = "[[site]]" + sites_toml(testbed).split("[[site]]")[2]
    sites, bag = write_inputs(here, tbb, bag_text)
    db = tmp_path / "db"
    res = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db), "--poll", "0.3",
                                  "--no-progress", "--json"], cwd=elsewhere, capture_output=True, text=True,
                         timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout)["run_id"]
    assert sorted(p.relative_to(here).as_posix() for p in (here / "res").rglob("out.txt")) == \
        [f"res/{run_id}/task-0/out.txt", f"res/{run_id}/task-1/out.txt"]
    assert not (elsewhere / "res").exists()
