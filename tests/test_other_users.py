"""Nobody else's file is ever run as the bag owner: the issue's reproductions with two real
users, created for this module and removed after it (even when a test fails).

* the owner (umask 002) works in a group project folder the other user shares;
* the other user creates the configured work directory first, or swaps the agent before the
  pilot starts;
* the other user plants links where the agent writes.

Resel's side (shipping the agent, making the pilot directory, dispatching) runs in a child
process that has switched to the owner's uid, gid, groups and umask; the pilot is the batch
script resel writes, run by /bin/sh as the owner (setpriv), as the batch system would run it,
with the agent for real under /usr/bin/python3. The last test does the same through the live
testbed's Slurm cluster tbb over SSH.
"""

from __future__ import annotations

import grp
import json
import os
import pickle
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from resel.backends.pilotsite import AGENT_NAME, PilotSite
from resel.backends.transport import LocalTransport
from resel.config import load_sites
from agent_files import keyed
from waiting import poll, wait_until  # tests/ is on sys.path (rootdir conftest)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
                                reason="needs root, useradd and setpriv to act as two real users")

PYTHON = "/usr/bin/python3"      # readable by every user (the test's own Python may not be)
RUN_KEY = "r1-5ec0de"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Users:
    owner: User
    other: User
    group: int


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def users():
    """Two fresh users sharing a fresh primary group (as members of one project are)."""
    tag = uuid.uuid4().hex[:6]
    group, names = f"rs{tag}g", (f"rs{tag}o", f"rs{tag}x")
    made: list[str] = []
    group_made = False
    try:
        _run("groupadd", group)
        group_made = True
        for name in names:
            _run("useradd", "-M", "-N", "-g", group, "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name)
            made.append(name)
        owner, other = (User(n, pwd.getpwnam(n).pw_uid, grp.getgrnam(group).gr_gid) for n in names)
        yield Users(owner, other, grp.getgrnam(group).gr_gid)
    finally:
        for name in made:
            _kill_processes_of(pwd.getpwnam(name).pw_uid)
            subprocess.run(["userdel", name], capture_output=True, timeout=60)
        if group_made:
            subprocess.run(["groupdel", group], capture_output=True, timeout=60)


def _kill_processes_of(uid: int) -> None:
    """Processes a failed test left running as one of its own temporary users, by pid."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


@pytest.fixture
def base():
    """A folder every user can traverse (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="resel-users-", dir="/tmp"))
    path.chmod(0o755)
    drop = path / "drop"              # where a hostile command would leave its mark
    drop.mkdir()
    drop.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def as_user(user: User, fn, *args, umask: int = 0o022):
    """Run fn(*args) in a child process that is ``user`` (uid, gid, groups, umask); returns
    ("ok", value) or ("error", "ExceptionName: message")."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups(os.getgrouplist(user.name, user.gid))
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
            os.umask(umask)
            try:
                out = ("ok", fn(*args))
            except BaseException as e:             # noqa: BLE001 - reported to the parent
                out = ("error", f"{type(e).__name__}: {e}")
            with os.fdopen(w, "wb") as f:
                f.write(pickle.dumps(out))
        except BaseException:                      # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the child process failed"
    return pickle.loads(data)


def run_job(user: User, script: str, cwd: Path, umask: int = 0o022) -> subprocess.Popen:
    """The pilot's batch script run by /bin/sh as ``user``, from stdin, as sbatch hands it over."""
    argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "/bin/sh", "-c",
            f"umask {umask:03o}; exec /bin/sh -s"]
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})
    proc.stdin.write(script.encode())
    proc.stdin.close()
    proc.stdin = None                  # so that communicate() does not flush it
    return proc


def local_site(tmp: Path, workdir: Path):
    sites = tmp / f"sites-{uuid.uuid4().hex[:6]}.toml"
    sites.write_text('[[site]]\nname = "here"\nkind = "slurm"\ncores = 2\nclock = { base = 2.0 }\n'
                     'pilot = { mode = "single", max_cores = 2, walltime = 300 }\n'
                     f'access = {{ transport = "local", workdir = "{workdir}", python = "{PYTHON}" }}\n')
    return load_sites(sites)[0]


def prepare(site, command: str):
    """What resel does for a pilot, as the owner: ship the agent, make the pilot's directory,
    write its batch script, dispatch task 1."""
    ps = PilotSite(site, LocalTransport(), scheduler=None)
    ps.ship_agent()
    pdir = ps.make_pilot_dir(RUN_KEY, 0)
    script = ps.pilot_script(RUN_KEY, 0, 1, 300).replace("--drain 30", "--drain 1")
    ps.dispatch(RUN_KEY, 0, 1, 0, command)
    return pdir, script


def hostile(base: Path) -> str:
    return f"id -un > {base}/drop/pwned"


def task_file(path: str, command: str, task: int = 0) -> None:
    with open(path, "w") as f:
        json.dump({"task": task, "attempt": 0, "command": command}, f)


def wait_for(predicate, timeout=30.0, what="condition", check=True):
    """predicate()'s first truthy value; on timeout an AssertionError (None if not ``check``)."""
    if check:
        return wait_until(predicate, timeout, what)
    return poll(predicate, timeout) or None


def read_json(path: Path):
    """The record at path once it is a regular file (not a planted link), else None."""
    return path.is_file() and not path.is_symlink() and json.loads(path.read_text())


def result_of(pdir: Path, key: str) -> dict | None:
    """The agent's result for ``key``: a record in a wave of results/ (agent protocol 6)."""
    found = keyed(Path(pdir) / "results").get(key)
    return found[0] if found else None


def stop_pilot(owner: User, pdir: str, proc: subprocess.Popen) -> tuple[str, str]:
    def write_stop():
        Path(pdir, "stop").write_text("stop\n")
    as_user(owner, write_stop)
    try:
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out.decode(), err.decode()


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


# --------------------------------------------------------------------------- (a) umask 002


def test_a_group_members_inbox_file_never_runs_as_the_owner(users, base):
    """The issue's first reproduction: the owner's umask is 002 in a group project folder (setgid,
    group-writable), the other user is in the group. Before: the inbox was 2775 and the other
    user's t0-a0.json ran as the owner."""
    owner, other = users.owner, users.other
    proj = base / "proj"
    proj.mkdir()
    os.chown(proj, 0, users.group)
    proj.chmod(0o2775)
    site = local_site(base, proj / "work")
    status, value = as_user(owner, prepare, site, "id -un > mine.txt", umask=0o002)
    assert status == "ok", value
    pdir, script = value
    made = modes(proj / "work")
    # the other user tries to drop a task, and to look into the work directory
    dropped = as_user(other, task_file, f"{pdir}/inbox/t0-a0.json", hostile(base))
    listed = as_user(other, os.listdir, str(proj / "work"))
    # a file of theirs that got there anyway (left from when a folder was open) is not run either
    planted = f"{pdir}/inbox/t2-a0.json"
    task_file(planted, hostile(base), task=2)
    os.chown(planted, other.uid, users.group)

    proc = run_job(owner, script, Path(pdir), umask=0o002)
    try:
        result = wait_for(lambda: result_of(pdir, "t1-a0"), what="the owner's task")
        rejected = wait_for(lambda: read_json(Path(pdir, "rejected.json")), what="the rejection record", check=False)
        time.sleep(1.0)     # kept: the test is that nothing else in the inbox runs (within this second)
    finally:
        out, err = stop_pilot(owner, pdir, proc)
    assert not (base / "drop" / "pwned").exists(), "the other user's task ran as the owner"
    assert dropped[0] == "error" and dropped[1].startswith("PermissionError"), dropped
    assert listed[0] == "error" and listed[1].startswith("PermissionError"), listed
    # everything resel made is the owner's alone, whatever the umask
    assert all(m == 0o700 for rel, m in made.items() if (proj / "work" / rel).is_dir()), made
    assert all(m == 0o600 for rel, m in made.items() if (proj / "work" / rel).is_file()), made
    assert result["outcome"] == "done", (result, err)
    assert Path(pdir, "tasks", "t1-a0", "mine.txt").read_text().strip() == owner.name
    assert rejected and rejected["count"] == 1 and rejected["files"][0]["name"] == "inbox/t2-a0.json"
    assert rejected["files"][0]["uid"] == other.uid
    assert "rejected inbox/t2-a0.json" in Path(pdir, "agent.log").read_text()


# --------------------------------------------------------------------------- (b) the workdir first


def test_a_work_directory_the_other_user_made_first_is_refused(users, base):
    """The issue's second reproduction, first half. Before: resel adopted the folder and
    shipped the agent into it."""
    owner, other = users.owner, users.other
    shared = base / "shared"                  # a /tmp-like folder: everybody may create in it
    shared.mkdir()
    shared.chmod(0o1777)
    work = shared / "resel-work"

    def make_it_first():
        os.mkdir(work)
        os.chmod(work, 0o777)                  # and invite the owner in
    assert as_user(other, make_it_first)[0] == "ok"
    status, message = as_user(owner, prepare, local_site(base, work), "true", umask=0o002)
    assert status == "error" and message.startswith("WorkdirError")
    assert f"work directory {work} belongs to uid {other.uid}, not to you (uid {owner.uid})" in message
    assert "Choose a workdir of your own" in message
    assert list(work.iterdir()) == []         # nothing shipped there


def test_an_agent_changed_before_the_pilot_starts_is_not_run(users, base):
    """The issue's second reproduction, second half: the agent is swapped between shipping and
    the pilot's start. Now the other user cannot reach it; and if the file changes anyway (root
    stands in for them below), the batch script, which carries the agent's sha256, refuses it."""
    owner, other = users.owner, users.other
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    site = local_site(base, shared / "owner-work")
    status, value = as_user(owner, prepare, site, "true", umask=0o002)
    assert status == "ok", value
    pdir, script = value
    agent = shared / "owner-work" / AGENT_NAME
    swap = as_user(other, Path(agent).write_text, f"import os\nos.system({hostile(base)!r})\n")
    agent.write_text(f"import os\nos.system({hostile(base)!r})\n")      # the swap, had it happened
    assert agent.stat().st_uid == owner.uid
    proc = run_job(owner, script, Path(pdir))
    out, err = proc.communicate(timeout=30)
    assert not (base / "drop" / "pwned").exists(), "the swapped agent ran as the owner"
    assert swap[0] == "error" and swap[1].startswith("PermissionError"), swap
    assert proc.returncode == 1, err
    assert f"refusing to run {agent}: its sha256 is" in err.decode() and "as resel shipped it" in err.decode()
    assert not Path(pdir, "agent.json").exists()


# --------------------------------------------------------------------------- (c) planted links


def test_links_the_other_user_planted_truncate_nothing(users, base):
    """The other user planted links where the agent writes while the pilot's folders were
    group-writable (an older resel under umask 002); the owner then fixed the modes as resel's
    message says. Before: the agent appended its log to the owner's file the link pointed at and
    truncated two more through a task's stdout and stderr."""
    owner, other = users.owner, users.other
    site = local_site(base, base / "work")
    work = base / "work"
    work.mkdir()
    os.chown(work, owner.uid, users.group)
    status, value = as_user(owner, prepare, site, "echo out; echo err >&2")
    assert status == "ok", value
    pdir, script = Path(value[0]), value[1]
    (pdir / "tasks" / "t1-a0").mkdir(parents=True)
    for d in [work, work / RUN_KEY, pdir, pdir / "tasks", pdir / "tasks" / "t1-a0",
              *(pdir / s for s in ("inbox", "cancel", "results", "started"))]:
        d.mkdir(exist_ok=True)
        os.chown(d, owner.uid, users.group)
        d.chmod(0o2775)
    private = base / "owner-files"            # the owner's own files, out of the other's reach
    private.mkdir()
    os.chown(private, owner.uid, users.group)
    private.chmod(0o700)
    links = {"agent.log": "notes", "heartbeat.json": "thesis", "results/t1-a0.json": "data",
             "tasks/t1-a0/stdout": "paper", "tasks/t1-a0/stderr": "code"}
    for name in links.values():
        (private / name).write_text(f"the owner's {name}\n")
        os.chown(private / name, owner.uid, users.group)

    def plant():
        for rel, name in links.items():
            os.symlink(private / name, pdir / rel)
    assert as_user(other, plant) == ("ok", None)

    def fix_modes():                           # `chmod go-w` on what resel reported
        for d in [work, work / RUN_KEY, pdir, *(p for p in pdir.rglob("*") if p.is_dir() and not p.is_symlink())]:
            d.chmod(0o700)
    assert as_user(owner, fix_modes) == ("ok", None)
    proc = run_job(owner, script, pdir)
    try:
        result = wait_for(lambda: result_of(pdir, "t1-a0"), what="the task's result", check=False)
    finally:
        out, err = stop_pilot(owner, str(pdir), proc)
    for rel, name in links.items():
        assert (private / name).read_text() == f"the owner's {name}\n", rel
        # protocol 6 writes results in waves: the link at the per-key name stays, never followed
        assert (pdir / rel).is_symlink() == (rel == "results/t1-a0.json"), rel
    assert result and result["outcome"] == "done", err
    assert (result["stdout_tail"], result["stderr_tail"]) == ("out\n", "err\n")
    assert "agent started" in (pdir / "agent.log").read_text()


# --------------------------------------------------------------------------- live, through Slurm


def test_a_live_pilot_refuses_a_swapped_agent(testbed, tmp_path):
    """On the testbed's cluster tbb over SSH (user reseltb): the agent is changed after resel
    shipped it and before the pilot starts; the real batch job refuses it and runs nothing."""
    from live_helpers import sites_toml
    from resel.backends.connect import open_site

    workdir = f"/home/{testbed.user}/resel-security-{uuid.uuid4().hex[:6]}"   # not the shared workdir
    (tmp_path / "sites.toml").write_text(sites_toml(testbed, b={"workdir": workdir}))
    tbb = load_sites(tmp_path / "sites.toml")[1]
    ps = open_site(tbb)
    job = None
    try:
        agent = Path(ps.ship_agent())
        shipped = stat.S_IMODE(Path(workdir).stat().st_mode), stat.S_IMODE(agent.stat().st_mode)
        pwned = Path(workdir, "pwned")
        agent.write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")     # as root: the swap
        job = ps.submit_pilot(RUN_KEY, 0, 1, 60)
        pdir = Path(ps.pilot_dir(RUN_KEY, 0))

        def ended():
            info = ps.scheduler.jobs([job]).get(job)
            return info is None or info.state.final
        wait_for(ended, timeout=120, what=f"job {job} to end")
        job = None
        out = wait_for(lambda: (pdir / "pilot.out").exists() and (pdir / "pilot.out").read_text(), what="pilot.out")
        assert not pwned.exists(), "the swapped agent ran"
        assert f"refusing to run {agent}: its sha256 is" in out, out
        assert not (pdir / "agent.json").exists()
        assert shipped == (0o700, 0o600)
    finally:
        if job is not None:
            ps.scheduler.cancel([job])
        ps.transport.run(["rm", "-rf", "--", workdir])
        ps.transport.close()
