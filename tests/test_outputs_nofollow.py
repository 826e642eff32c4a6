"""Every file resel writes for the user is created without following a link (issue 24, Seen 4).

The issue's attack with two real users: the other user plants links in a world-writable folder
(sticky, like /tmp, and one without the sticky bit) pointing at the owner's own files; the
owner's ``report --html``, ``report --plot``, ``simulate --plot`` and ``replay --output`` into
that folder once overwrote them (where ``fs.protected_symlinks`` is 0, as on this machine).
Now each is refused with a clear error and the owner's files are unchanged. Then the writing
itself: a temporary file beside the target, renamed over it — a link planted while writing is
replaced, not followed; a failed command leaves the old file as it was; the file is 0600.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from resel.errors import ReselError
from resel.outputs import create
from test_other_users import Users, as_user, users  # noqa: F401 - the module's fixture, reused
from test_store_trust import folder, resel_as

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
                                reason="needs root, useradd and setpriv to act as two real users")

TRACE = "; MaxProcs: 4\n1 0 5 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n2 1 5 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n"
PRECIOUS = "the owner's own file\n"


@pytest.fixture
def scene(users: Users):
    """The owner's home (0700) with a store of one simulated run, a trace and a precious file;
    a sticky world-writable ``drop`` and a plain world-writable ``open`` folder."""
    base = Path(tempfile.mkdtemp(prefix="resel-nofollow-", dir="/tmp"))
    base.chmod(0o755)
    try:
        home = folder(base / "home", users.owner, 0o711)       # others may pass through to a link's target
        got = resel_as(users.owner, "simulate", "--sizes", "4,8", "--repeat", "1", "--strategies", "model",
                       "--db", str(home / "resel.db"), home=home)
        assert got.returncode == 0, got.stderr
        for name, text in (("precious.txt", PRECIOUS), ("trace.swf", TRACE)):
            (home / name).write_text(text)
            os.chown(home / name, users.owner.uid, users.owner.gid)
        drop, plain = base / "drop", base / "open"
        for path, mode in ((drop, 0o1777), (plain, 0o777)):
            path.mkdir()
            path.chmod(mode)
        yield base, home, drop, plain
    finally:
        shutil.rmtree(base, ignore_errors=True)


def plant(users: Users, link: Path, target: Path) -> None:
    assert as_user(users.other, os.symlink, str(target), str(link)) == ("ok", None)
    assert link.lstat().st_uid == users.other.uid


def unchanged(home: Path) -> bool:
    return (home / "precious.txt").read_text() == PRECIOUS and not list(home.glob(".*.tmp"))


@pytest.mark.parametrize("where", ["drop", "open"])
def test_report_html_through_another_users_link_is_refused(users, scene, where):
    base, home, *_ = scene
    folder_ = base / where
    link = folder_ / "report.html"
    plant(users, link, home / "precious.txt")
    got = resel_as(users.owner, "report", "1", "--db", str(home / "resel.db"), "--html", str(link), home=home)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert (f"--html {link} is a symbolic link (to {home / 'precious.txt'}): resel does not write through links"
            in got.stderr), got.stderr
    assert unchanged(home) and link.is_symlink() and not list(folder_.glob(".*.tmp"))


def test_report_plot_through_another_users_links_is_refused(users, scene):
    base, home, drop, plain = scene
    figs = plain / "figs"
    assert as_user(users.other, os.mkdir, str(figs), 0o777)[0] == "ok"
    for fmt in ("png", "svg"):
        plant(users, figs / f"gantt.{fmt}", home / "precious.txt")
    got = resel_as(users.owner, "report", "1", "--db", str(home / "resel.db"), "--plot", str(figs), home=home)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert f"--plot {figs / 'gantt.png'} is a symbolic link" in got.stderr, got.stderr
    assert unchanged(home)
    # the folder itself a link of theirs, to the owner's home
    link = drop / "figs"
    plant(users, link, home)
    got = resel_as(users.owner, "report", "1", "--db", str(home / "resel.db"), "--plot", str(link), home=home)
    assert got.returncode == 1
    assert f"--plot {link} is a symbolic link owned by user {users.other.name}" in got.stderr, got.stderr
    assert sorted(p.name for p in home.iterdir() if p.suffix in (".png", ".svg")) == []


def test_simulate_plot_through_another_users_link_is_refused(users, scene):
    base, home, drop, _ = scene
    figs = drop / "sizes"
    assert as_user(users.other, os.mkdir, str(figs), 0o777)[0] == "ok"
    plant(users, figs / "workload_by_size.png", home / "precious.txt")
    got = resel_as(users.owner, "simulate", "--sizes", "4,8", "--repeat", "1", "--strategies", "model",
                   "--db", str(home / "resel.db"), "--plot", str(figs), home=home)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert f"{figs / 'workload_by_size.png'} is a symbolic link" in got.stderr, got.stderr
    assert unchanged(home)


@pytest.mark.parametrize("where", ["drop", "open"])
def test_replay_output_through_another_users_link_is_refused(users, scene, where):
    base, home, *_ = scene
    link = base / where / "schedule.swf"
    plant(users, link, home / "precious.txt")
    got = resel_as(users.owner, "replay", str(home / "trace.swf"), "--policy", "fcfs", "--output", str(link),
                   home=home)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert f"--output {link} is a symbolic link (to {home / 'precious.txt'})" in got.stderr, got.stderr
    assert unchanged(home)
    # a path of their own choosing is fine: the schedule lands there, the owner's alone
    mine = base / where / "mine.swf"
    got = resel_as(users.owner, "replay", str(home / "trace.swf"), "--policy", "fcfs", "--output", str(mine),
                   home=home)
    assert got.returncode == 0, got.stderr
    st = mine.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == users.owner.uid and stat.S_IMODE(st.st_mode) == 0o600


def test_a_link_planted_while_writing_is_replaced_not_followed(tmp_path):
    """The check at the start is not what protects: the write goes to a fresh file and is renamed
    over the target, which replaces whatever link is there by then."""
    precious = tmp_path / "precious.txt"
    precious.write_text(PRECIOUS)
    target = tmp_path / "report.html"
    out = create(target, "w", option="--html")
    out.write("<html>report</html>\n")
    os.symlink(precious, target)                       # planted after the check, before the rename
    out.close()
    assert precious.read_text() == PRECIOUS
    assert not target.is_symlink() and target.read_text() == "<html>report</html>\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and not list(tmp_path.glob(".*.tmp"))


def test_a_failed_write_leaves_the_old_file_as_it_was(tmp_path):
    target = tmp_path / "out.swf"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with create(target, "w") as f:
            f.write("half")
            raise RuntimeError("the replay failed")
    assert target.read_text() == "old\n" and not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(ReselError, match="is a folder"):
        create(tmp_path, "w")


def test_a_failed_replay_leaves_its_output_file_as_it_was(tmp_path):
    import subprocess
    import sys
    trace, out = tmp_path / "bad.swf", tmp_path / "out.swf"
    trace.write_text("; MaxProcs: 4\n1 0 5 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\nnot a job line\n")
    out.write_text("the last good schedule\n")
    got = subprocess.run([sys.executable, "-m", "resel.cli", "replay", str(trace), "--policy", "fcfs", "--output",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert out.read_text() == "the last good schedule\n" and not list(tmp_path.glob(".*.tmp"))
