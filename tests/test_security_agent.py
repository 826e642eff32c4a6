"""The agent against files it did not make: it refuses a pilot directory others control, never
acts on another user's (or a linked) inbox, cancel or stop file, and never writes through a
link. The agent runs for real (a subprocess); this test runs as root, so it sets up what
another user would have left with chown (tests/test_other_users.py does it with real users).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from resel.shipped import agent as agent_module
from agent_files import keyed
from waiting import wait_until  # tests/ is on sys.path (rootdir conftest)


def result_of(pdir: Path, key: str) -> dict | None:
    """The agent's result for ``key`` (in a wave, protocol 6), or None."""
    found = keyed(pdir / "results").get(key)
    return found[0] if found else None

AGENT = Path(agent_module.__file__)
NOBODY = 65534
FAST = ["--poll", "0.05", "--heartbeat", "0.2"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown files to another user")


def wait_for(predicate, timeout=15.0, what="condition"):
    return wait_until(predicate, timeout, what, every=0.02)


def task(path: Path, task_no: int, command: str, owner: int | None = None) -> None:
    tmp = path.parent / f".{path.name}.part"
    tmp.write_text(json.dumps({"task": task_no, "attempt": 0, "command": command}))
    if owner is not None:
        os.chown(tmp, owner, owner)
    os.replace(tmp, path)


def start(pdir: Path, umask: int | None = None) -> subprocess.Popen:
    argv = [sys.executable, str(AGENT), "--dir", str(pdir), "--pilot", "p", "--slots", "2",
            "--walltime", "300", *FAST]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def stop(proc: subprocess.Popen, pdir: Path) -> tuple[str, str]:
    (pdir / "stop").write_text("stop\n")
    try:
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.decode(), err.decode()


# --------------------------------------------------------------------------- refusing to start


@pytest.mark.parametrize("setup, why", [
    (lambda d: d.chmod(0o775), "writable by its group or by other users (mode 0775)"),
    (lambda d: d.chmod(0o757), "writable by its group or by other users (mode 0757)"),
    (lambda d: os.chown(d, NOBODY, NOBODY), f"belongs to uid {NOBODY}"),
    (lambda d: (d / "inbox").chmod(0o777), "inbox: it is writable by its group or by other users"),
    (lambda d: os.chown(d / "inbox", NOBODY, NOBODY), f"inbox: it belongs to uid {NOBODY}"),
    (lambda d: ((d / "results").rmdir(), (d / "results").symlink_to(d / "inbox")), "results: it is a symbolic link"),
], ids=["group-writable", "other-writable", "other-users", "inbox-writable", "inbox-theirs", "linked-folder"])
def test_the_agent_refuses_a_pilot_directory_others_control(tmp_path, setup, why):
    """Before: it started and ran whatever reached its inbox."""
    pdir = tmp_path / "p0"
    for sub in ("inbox", "results"):
        (pdir / sub).mkdir(parents=True)
    task(pdir / "inbox" / "t1-a0.json", 1, f"touch {tmp_path}/ran")
    setup(pdir)
    before = sorted(p.name for p in pdir.iterdir())
    proc = start(pdir)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 2, err
    assert "refusing to start" in err.decode() and why in err.decode()
    assert sorted(p.name for p in pdir.iterdir()) == before       # nothing written there
    assert not (tmp_path / "ran").exists()


def test_the_agent_makes_its_folders_private_whatever_the_umask(tmp_path):
    pdir = tmp_path / "new" / "p0"                   # missing: the agent makes it too
    proc = start(pdir, umask=0o002)
    wait_for((pdir / "heartbeat.json").exists, what="the first heartbeat")
    stop(proc, pdir)
    for folder in [tmp_path / "new", pdir, *(p for p in pdir.iterdir() if p.is_dir())]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for f in ("agent.json", "heartbeat.json", "exit.json", "agent.log"):
        assert stat.S_IMODE((pdir / f).stat().st_mode) == 0o600, f


# --------------------------------------------------------------------------- other users' files


def test_files_not_of_its_user_are_left_alone_and_counted(tmp_path):
    """Another user's inbox file, a link to a good task file, another user's cancel and stop:
    none is acted on; each is logged once and counted in rejected.json and the heartbeat, and
    the agent's own tasks run as usual."""
    pdir = tmp_path / "p0"
    pdir.mkdir()
    proc = start(pdir)
    try:
        wait_for((pdir / "heartbeat.json").exists, what="the first heartbeat")
        task(pdir / "inbox" / "t0-a0.json", 0, f"touch {tmp_path}/foreign-ran", owner=NOBODY)
        task(tmp_path / "good.json", 5, f"touch {tmp_path}/link-ran")
        (pdir / "inbox" / "t5-a0.json").symlink_to(tmp_path / "good.json")
        task(pdir / "inbox" / "t2-a0.json", 2, "sleep 1; echo mine")
        (pdir / "cancel" / "t2-a0").write_text("")
        os.chown(pdir / "cancel" / "t2-a0", NOBODY, NOBODY)
        (pdir / "stop").write_text("stop\n")
        os.chown(pdir / "stop", NOBODY, NOBODY)
        done = wait_for(lambda: result_of(pdir, "t2-a0"), what="the own task's result")
        assert done["outcome"] == "done" and done["stdout_tail"] == "mine\n"   # not cancelled, not stopped
        rejected = wait_for(lambda: (pdir / "rejected.json").exists() and
                            json.loads((pdir / "rejected.json").read_text())["count"] == 4 and
                            json.loads((pdir / "rejected.json").read_text()), what="four rejections")
        assert proc.poll() is None                   # the foreign stop did not stop it
        beat = wait_for(lambda: json.loads((pdir / "heartbeat.json").read_text()).get("rejected") == 4 or None,
                        what="the heartbeat's count")
        assert beat
    finally:
        (pdir / "stop").unlink()
        out, err = stop(proc, pdir)
    names = {f["name"]: f for f in rejected["files"]}
    assert set(names) == {"inbox/t0-a0.json", "inbox/t5-a0.json", "cancel/t2-a0", "stop"}
    assert names["inbox/t0-a0.json"]["uid"] == NOBODY and "owned by uid 65534" in names["inbox/t0-a0.json"]["why"]
    assert names["inbox/t5-a0.json"]["why"] == "a symbolic link"
    assert not (tmp_path / "foreign-ran").exists() and not (tmp_path / "link-ran").exists()
    assert result_of(pdir, "t0-a0") is None and result_of(pdir, "t5-a0") is None
    log = (pdir / "agent.log").read_text()
    assert log.count("rejected inbox/t0-a0.json") == 1 and "not run" in log


def test_a_task_file_swapped_for_another_users_after_the_listing_is_not_run(tmp_path):
    """The check is made again on the opened file once claimed (inode swapped in between)."""
    pdir = tmp_path / "p0"
    pdir.mkdir()
    (pdir / "claimed").mkdir(mode=0o700)
    agent_args = agent_module.parse_args(["--dir", str(pdir), "--pilot", "p", "--slots", "1", "--walltime", "60"])
    agent = agent_module.Agent(agent_args)
    agent.make_dirs()
    task(pdir / "claimed" / "t3-a0.json", 3, f"touch {tmp_path}/ran", owner=NOBODY)
    agent.start_claimed("t3-a0.json", str(pdir / "claimed" / "t3-a0.json"))
    assert agent.rejected[0]["name"] == "claimed/t3-a0.json" and not agent.running
    assert not (tmp_path / "ran").exists()


# --------------------------------------------------------------------------- planted links


def test_planted_links_truncate_nothing(tmp_path):
    """Links where the agent writes (its log, a task's stdout and stderr, perf.csv, a result,
    the heartbeat, agent.json, started, exit.json): every victim keeps its content, and the
    agent's files are regular files. Before: agent.log was appended to its target, stdout and
    stderr truncated theirs."""
    victims = tmp_path / "victims"
    victims.mkdir()
    pdir = tmp_path / "p0"
    for sub in ("inbox", "results", "started", "tasks/t1-a0"):
        (pdir / sub).mkdir(parents=True)
    planted = {"agent.log": "log", "agent.json": "agent", "heartbeat.json": "beat", "exit.json": "exit",
               "results/t1-a0.json": "result", "started/t1-a0.json": "started", "tasks/t1-a0/stdout": "out",
               "tasks/t1-a0/stderr": "err", "tasks/t1-a0/perf.csv": "perf"}
    for rel, name in planted.items():
        (victims / name).write_text(f"precious {name}\n")
        (pdir / rel).symlink_to(victims / name)
    doc = {"task": 1, "attempt": 0, "command": "echo out; echo err >&2", "perf": True}
    (pdir / "inbox" / "t1-a0.json").write_text(json.dumps(doc))
    proc = start(pdir)
    # protocol 6: the records go into waves, so the links at the per-key names stay, unread
    # (the agent reads the results an earlier agent left at start: never through a link)
    result = wait_for(lambda: result_of(pdir, "t1-a0"), what="the result, in a wave")
    stop(proc, pdir)
    for rel, name in planted.items():
        assert (victims / name).read_text() == f"precious {name}\n", rel
        assert (pdir / rel).is_symlink() == (rel in ("results/t1-a0.json", "started/t1-a0.json")), rel
    assert result["outcome"] == "done" and result["stdout_tail"] == "out\n" and result["stderr_tail"] == "err\n"
    assert "agent started" in (pdir / "agent.log").read_text()


def test_a_linked_task_folder_is_not_written_through(tmp_path):
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    pdir = tmp_path / "p0"
    (pdir / "tasks").mkdir(parents=True)
    (pdir / "tasks" / "t1-a0").symlink_to(victim)
    (pdir / "inbox").mkdir()
    (pdir / "inbox" / "t1-a0.json").write_text(json.dumps({"task": 1, "attempt": 0, "command": "echo hi > x"}))
    proc = start(pdir)
    result = wait_for(lambda: result_of(pdir, "t1-a0"), what="the result")
    stop(proc, pdir)
    assert result["outcome"] == "failed" and result["reason"].startswith("start failed:")
    assert "symbolic link" in result["reason"]
    assert list(victim.iterdir()) == []


def test_temporary_names_are_random_and_exclusive(tmp_path, monkeypatch):
    """A temporary file is never one another user could predict and plant (the old name was
    .NAME.PID.tmp) and is created O_EXCL|O_NOFOLLOW."""
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, flags, *a: (opened.append((p, flags)), real_open(p, flags, *a))[1])
    for _ in range(3):
        agent_module.write_json_atomic(str(tmp_path / "x.json"), {"a": 1})
    names = [os.path.basename(p) for p, _ in opened]
    assert len(set(names)) == 3 and all(str(os.getpid()) not in n for n in names)
    want = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert all(flags & want == want for _, flags in opened)
    assert os.listdir(tmp_path) == ["x.json"]


def test_an_inbox_file_is_looked_at_once_however_long_it_waits(tmp_path, monkeypatch):
    """The inbox is listed every loop turn but each file lstat-ed only the first turn its name is
    there (hundreds handed ahead, a turn per ended task: the lstats cost more than the tasks).
    What the first look rejected stays rejected; a file swapped after it is caught at the
    claim (the test above); a name that left and came back is looked at again."""
    pdir = tmp_path / "p0"
    pdir.mkdir()
    agent = agent_module.Agent(agent_module.parse_args(["--dir", str(pdir), "--pilot", "p", "--slots", "1",
                                                        "--walltime", "60"]))
    agent.make_dirs()
    for i in range(50):
        task(pdir / "inbox" / f"t{i}-a0.json", i, "true")
        os.utime(pdir / "inbox" / f"t{i}-a0.json", (1000 + i, 1000 + i))
    task(pdir / "inbox" / "t99-a0.json", 99, "true", owner=NOBODY)
    looked: list[str] = []
    real_lstat = os.lstat

    def lstat(path, *a, **kw):
        if "/inbox/" in str(path):
            looked.append(os.path.basename(str(path)))
        return real_lstat(path, *a, **kw)
    monkeypatch.setattr(agent_module.os, "lstat", lstat)
    read: list[str] = []                                   # and read once, for its order (protocol 7)
    real_read_own = agent_module.read_own

    def read_own(path, *a, **kw):
        if "/inbox/" in str(path):
            read.append(os.path.basename(str(path)))
        return real_read_own(path, *a, **kw)
    monkeypatch.setattr(agent_module, "read_own", read_own)
    first = agent.inbox_entries()
    assert [name for _m, name in first] == [f"t{i}-a0.json" for i in range(50)]   # oldest first, t99 not ours
    assert first[0][0] == (1, 1000)                        # no order: after those with one, by mtime
    for _ in range(20):
        assert agent.inbox_entries() == first
    assert sorted(looked) == sorted([f"t{i}-a0.json" for i in range(50)] + ["t99-a0.json"] * 21)
    assert sorted(read) == sorted(f"t{i}-a0.json" for i in range(50))   # never a file not ours
    assert [r["name"] for r in agent.rejected] == ["inbox/t99-a0.json"]
    (pdir / "inbox" / "t0-a0.json").unlink()             # claimed elsewhere, then sent again
    assert [name for _m, name in agent.inbox_entries()][0] == "t1-a0.json"
    task(pdir / "inbox" / "t0-a0.json", 0, "true")
    looked.clear()
    assert "t0-a0.json" in [name for _m, name in agent.inbox_entries()]
    assert sorted(looked) == ["t0-a0.json", "t99-a0.json"]
