"""A run store is code (issue 24, Seen 1): nobody but its user (or root) may be able to change it.

The issue's two attacks, with two real users created for this module (the owner and another
member of the owner's group), the owner's commands run as real processes under the owner's
uid, gid, groups and umask 002:

* a group member pre-creates ``proj/shared.db`` 0666 holding a live run whose site's ``env``
  puts ``PATH`` on a folder of theirs; the owner's ``resel cancel``, ``status``, ``run
  --resume``, ``runs``, ``report``, ``simulate`` … ``--db proj/shared.db`` ran their
  ``squeue`` and ``scancel`` as the owner;
* the owner's own 0600 store in a setgid 2775 group folder is replaced with ``mv``.

A control shows the hostile store is effective: the same file, once it is the owner's own in
a folder of theirs, does run the planted ``scancel`` as the owner — which is why who can write a
store is checked. The remaining tests check each rule of :mod:`resel.trust` on its own.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from resel.errors import StoreError
from resel.store import open_store, read_store
from test_other_users import User, Users, as_user, users  # noqa: F401 - the module's fixture, reused

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
                                reason="needs root, useradd and setpriv to act as two real users")

RESEL = [sys.executable, "-m", "resel.cli"]
TINY = "; MaxProcs: 4\n1 0 5 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n"
#: every command that opens a store: those that read it and those that write it
COMMANDS = [["runs"], ["report", "1"], ["status"], ["status", "1"], ["cancel", "1"], ["run", "--resume", "1"],
            ["simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model"], ["history", "show"],
            ["model", "show"]]


@pytest.fixture
def base():
    """A folder every user can traverse, with the owner's home (0700) and a sticky ``drop``."""
    path = Path(tempfile.mkdtemp(prefix="resel-store-trust-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def owned(path: Path, user: User, mode: int, gid: int | None = None) -> Path:
    os.chown(path, user.uid, user.gid if gid is None else gid)
    os.chmod(path, mode)
    return path


def folder(path: Path, user: User, mode: int = 0o700, gid: int | None = None) -> Path:
    path.mkdir()
    return owned(path, user, mode, gid)


def resel_as(user: User, *args: str, home: Path, umask: int = 0o002) -> subprocess.CompletedProcess:
    """``resel ARGS`` as a real process of ``user`` (uid, gid, groups, umask)."""
    start = (f"import os, runpy, sys; os.umask(0o{umask:03o}); sys.argv = ['resel', *sys.argv[1:]]; "
             "runpy.run_module('resel.cli', run_name='__main__')")
    argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--", sys.executable, "-c",
            start, *args]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "MPLCONFIGDIR": str(home), "COLUMNS": "200",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd="/")


def home_with_store(user: User, base: Path) -> tuple[Path, Path]:
    """The user's home (0700) with a store of one simulated run, made by the user's own resel."""
    home = folder(base / "home", user)
    store = home / "resel.db"
    got = resel_as(user, "simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db", str(store),
                   home=home)
    assert got.returncode == 0, got.stderr
    return home, store


def hostile_bin(base: Path, attacker: User) -> tuple[Path, Path]:
    """The other user's folder of scheduler commands: each records who ran it, in ``drop``."""
    drop = base / "drop"
    drop.mkdir(mode=0o1777)
    drop.chmod(0o1777)
    bin_dir = folder(base / "attacker-bin", attacker, 0o755)
    for name in ("squeue", "scancel", "sbatch", "sinfo", "sacct", "scontrol"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n/usr/bin/id -un >> {drop}/pwned\necho {name} \"$@\" >> {drop}/pwned\n")
        owned(script, attacker, 0o755)
    return bin_dir, drop / "pwned"


def hostile_store(path: Path, bin_dir: Path, workdir: Path) -> None:
    """A store with a live run (run 1, running, one pilot with a batch job) on a local Slurm
    site whose ``env`` puts ``PATH`` on ``bin_dir``; made as the attacker would make it."""
    from resel.api import default_bag
    from resel.config import load_sites
    from resel.live.stored import LiveOptions
    from resel.store import to_json, utc_now
    sites_file = path.parent / "hostile-sites.toml"
    sites_file.write_text('[[site]]\nname = "here"\nkind = "slurm"\ncores = 2\nclock = { base = 2.0 }\n'
                          'pilot = { mode = "single", max_cores = 2, walltime = 300 }\n'
                          f'access = {{ transport = "local", workdir = "{workdir}", env = {{ PATH = "{bin_dir}" }} }}\n')
    sites = load_sites(sites_file)
    sites_file.unlink()
    bag = default_bag().resized(4)
    db = open_store(path)
    run = db["runs"].insert({"created": utc_now(), "mode": "live", "bag": bag.name, "strategy": "model", "size": 4,
                             "seed": 0, "clock": "base", "status": "running", "t0": time.time(),
                             "options": to_json(LiveOptions(strategy="model")), "sites": to_json(sites),
                             "bag_spec": to_json(bag), "run_key": "r1-5ec0de"}).last_pk
    db["live_pilots"].insert({"run_id": run, "pilot": 0, "site": "here", "job_id": "4242", "cores": 2,
                              "walltime": 300.0, "submitted": 0.0, "state": "running"})
    db.conn.close()


def digest(path: Path) -> bytes:
    return path.read_bytes()


def test_a_group_members_store_in_the_project_folder_runs_nothing_as_the_owner(users: Users, base: Path):
    """Seen 1, first attack: ``proj/shared.db`` 0666, pre-created by the other user."""
    owner, other = users.owner, users.other
    home = folder(base / "home", owner)
    bin_dir, pwned = hostile_bin(base, other)
    proj = base / "proj"                                                # a group project folder
    proj.mkdir()
    os.chown(proj, 0, users.group)
    os.chmod(proj, 0o2775)
    made = Path(tempfile.mkdtemp(dir=base)) / "shared.db"
    hostile_store(made, bin_dir, home / "work")
    shared = proj / "shared.db"
    shutil.move(made, shared)
    owned(shared, other, 0o666, users.group)
    before = digest(shared)
    for args in COMMANDS:
        got = resel_as(owner, *args, "--db", str(shared), home=home)
        assert got.returncode == 1 and "Traceback" not in got.stderr, (args, got.stderr)
        assert f"run store {shared}: its folder {proj} is writable by its group" in got.stderr, (args, got.stderr)
        assert "runs as you" in got.stderr
    assert not pwned.exists(), pwned.read_text()
    assert digest(shared) == before and sorted(p.name for p in proj.iterdir()) == ["shared.db"]
    # the same file where the folder is the owner's: refused for the file itself now
    mine = folder(base / "mine", owner, 0o755)
    shutil.copy(shared, mine / "shared.db")
    owned(mine / "shared.db", other, 0o666, users.group)
    got = resel_as(owner, "cancel", "1", "--db", str(mine / "shared.db"), home=home)
    assert got.returncode == 1 and "the file belongs to user " + other.name in got.stderr, got.stderr
    owned(mine / "shared.db", owner, 0o666, users.group)
    got = resel_as(owner, "status", "--db", str(mine / "shared.db"), home=home)
    assert got.returncode == 1 and "the file is writable by its group and by other users (mode 0666)" in got.stderr
    assert f"chmod go-w {mine / 'shared.db'}" in got.stderr
    assert not pwned.exists()
    # control: once the store is the owner's alone, its stored site runs — a store is code. (Its
    # run has no journal: `resel cancel` asks the site for the run's jobs — squeue, as the
    # owner — where, before a run stopped before its bag was recorded could be cancelled, it
    # ran scancel on the pilot row the store holds)
    os.chmod(mine / "shared.db", 0o600)
    got = resel_as(owner, "cancel", "1", "--db", str(mine / "shared.db"), home=home)
    assert "run store" not in got.stderr, got.stderr
    ran = pwned.read_text().splitlines()
    assert ran[0] == owner.name and any(line.startswith(("squeue ", "scancel ")) for line in ran[1:]), ran


def test_a_store_replaced_with_mv_in_a_group_folder_is_refused(users: Users, base: Path):
    """Seen 1, second attack: the owner's own 0600 store in a setgid 2775 group folder, moved
    away by the other user and replaced with theirs."""
    owner, other = users.owner, users.other
    home = folder(base / "home", owner)
    bin_dir, pwned = hostile_bin(base, other)
    proj = folder(base / "proj", owner, 0o2775, users.group)
    store = proj / "resel.db"
    got = resel_as(owner, "simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db", str(store),
                   home=home)
    assert got.returncode == 1 and f"its folder {proj} is writable by its group (mode 2775)" in got.stderr
    assert f"chmod go-w {proj}" in got.stderr and not store.exists()    # nothing made in a refused folder
    # the store made before resel checked (0600, the owner's), then swapped by the other user
    private = folder(base / "private", owner)
    got = resel_as(owner, "simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db",
                   str(private / "resel.db"), home=home)
    assert got.returncode == 0, got.stderr
    shutil.move(private / "resel.db", store)
    os.chmod(private, 0o755)

    theirs = folder(base / "attacker", other, 0o755) / "theirs.db"
    made = Path(tempfile.mkdtemp(dir=base)) / "made.db"
    hostile_store(made, bin_dir, home / "work")
    shutil.move(made, theirs)
    owned(theirs, other, 0o644)                         # readable, so the owner's resel reads it

    def swap():
        os.rename(store, proj / "resel.db.old")
        os.rename(theirs, store)
    assert as_user(other, swap) == ("ok", None)
    assert store.stat().st_uid == other.uid
    for args in COMMANDS:
        got = resel_as(owner, *args, "--db", str(store), home=home)
        assert got.returncode == 1 and "Traceback" not in got.stderr, (args, got.stderr)
        assert f"its folder {proj} is writable by its group" in got.stderr, (args, got.stderr)
    assert not pwned.exists()


def test_a_store_below_a_group_folder_without_sticky_bit_is_refused(users: Users, base: Path):
    """The owner's private folder inside a group folder: the group may rename it and put its own."""
    owner = users.owner
    home = folder(base / "home", owner)
    proj = folder(base / "proj", owner, 0o2775, users.group)
    mine = folder(proj / "owner", owner)
    got = resel_as(owner, "runs", "--db", str(mine / "resel.db"), home=home)
    assert got.returncode == 1
    assert (f"{proj}, a folder above it, is writable by its group and has no sticky bit (mode 2775)"
            in got.stderr), got.stderr
    os.chmod(proj, 0o3775)                              # sticky: nobody else may rename owner/
    got = resel_as(owner, "runs", "--db", str(mine / "resel.db"), home=home)
    assert got.returncode == 0, got.stderr


def test_a_store_in_a_sticky_world_writable_folder_is_refused(users: Users, base: Path):
    """/tmp-like: nobody can rename the store there, but anyone can plant its -journal or -wal."""
    owner = users.owner
    home = folder(base / "home", owner)
    drop = folder(base / "drop", owner, 0o1777)
    got = resel_as(owner, "simulate", "--sizes", "4", "--repeat", "1", "--db", str(drop / "resel.db"), home=home)
    assert got.returncode == 1 and not (drop / "resel.db").exists()
    assert (f"its folder {drop} is writable by its group and by other users (mode 1777), who could replace the "
            "store or plant its -journal or -wal file") in got.stderr, got.stderr
    assert "the sticky bit does not prevent that" in got.stderr


def test_a_store_path_through_another_users_link_is_refused(users: Users, base: Path):
    owner, other = users.owner, users.other
    home, _ = home_with_store(owner, base)
    drop = base / "drop"
    drop.mkdir()
    drop.chmod(0o1777)
    link = drop / "store.db"
    assert as_user(other, os.symlink, str(home / "resel.db"), str(link))[0] == "ok"
    got = resel_as(owner, "runs", "--db", str(link), home=home)
    assert got.returncode == 1
    assert f"{link} is a symbolic link owned by user {other.name}" in got.stderr, got.stderr
    assert resel_as(owner, "runs", "--db", str(home / "resel.db"), home=home).returncode == 0


def test_a_companion_file_another_user_owns_is_refused(users: Users, base: Path):
    owner, other = users.owner, users.other
    home, _ = home_with_store(owner, base)
    journal = home / "resel.db-journal"
    journal.write_bytes(b"")
    owned(journal, other, 0o644)
    got = resel_as(owner, "runs", "--db", str(home / "resel.db"), home=home)
    assert got.returncode == 1
    assert f"its companion {journal} belongs to user {other.name}" in got.stderr, got.stderr


def test_a_store_replaced_after_it_was_opened_is_not_written_or_acted_on(tmp_path):
    """A store moved away under a running command: its next write transaction, and reading a
    live run's sites, fail instead of going to the wrong file."""
    from resel.live.stored import load_live_run
    path = tmp_path / "resel.db"
    db = open_store(path)
    with db.atomic():
        db["experiments"].insert({"created": "x", "params": "{}"})
    reader = read_store(path)
    os.rename(path, tmp_path / "moved.db")
    shutil.copy(tmp_path / "moved.db", path)              # another file at the same path
    with pytest.raises(StoreError, match=rf"run store {path} was moved, deleted or replaced since resel opened it"):
        with db.atomic():
            db["experiments"].insert({"created": "y", "params": "{}"})
    with pytest.raises(StoreError, match="was moved, deleted or replaced"):
        load_live_run(reader, 1)
    assert db.execute("select count(*) from experiments").fetchone() == (1,)     # "y" was not written
    os.unlink(path)
    with pytest.raises(StoreError, match="moved, deleted or replaced"):
        with db.atomic():
            pass


def test_a_store_of_root_is_read_by_another_user(users: Users, base: Path):
    """Root is trusted (it can change anything anyway): its stores still read as before."""
    home = folder(base / "home", users.owner)
    shared = base / "shared"
    shared.mkdir(mode=0o755)
    got = subprocess.run([*RESEL, "simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db",
                          str(shared / "resel.db")], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    os.chmod(shared / "resel.db", 0o644)
    assert stat.S_IMODE((shared / "resel.db").stat().st_mode) == 0o644
    got = resel_as(users.owner, "runs", "--db", str(shared / "resel.db"), home=home)
    assert got.returncode == 0 and "model" in got.stdout, got.stderr


def test_store_writable_by_group_is_refused(users: Users, base: Path):
    """The owner's store in a private folder, group-writable (umask 002 before resel made stores
    0600, or a chmod): every command refuses it and says the chmod that fixes it."""
    owner = users.owner
    home, store = home_with_store(owner, base)
    os.chmod(store, 0o660)
    for args in COMMANDS:
        got = resel_as(owner, *args, "--db", str(store), home=home)
        assert got.returncode == 1 and "Traceback" not in got.stderr, (args, got.stderr)
        assert (f"run store {store}: the file is writable by its group (mode 0660)" in got.stderr
                and f"Run `chmod go-w {store}`" in got.stderr), (args, got.stderr)
    os.chmod(store, 0o640)                                 # the fix
    assert resel_as(owner, "runs", "--db", str(store), home=home).returncode == 0


def test_store_owned_by_another_user_is_refused(users: Users, base: Path):
    owner, other = users.owner, users.other
    home = folder(base / "home", owner, 0o755)
    store = home / "theirs.db"
    made = Path(tempfile.mkdtemp(dir=base)) / "made.db"
    got = subprocess.run([*RESEL, "simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db",
                          str(made)], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    shutil.move(made, store)
    owned(store, other, 0o644)
    for args in (["runs"], ["report", "1"], ["simulate", "--sizes", "4", "--repeat", "1"]):
        got = resel_as(owner, *args, "--db", str(store), home=home)
        assert got.returncode == 1, got.stderr
        assert f"run store {store}: the file belongs to user {other.name} (uid {other.uid})" in got.stderr
        assert "To look at theirs, copy it first" in got.stderr
