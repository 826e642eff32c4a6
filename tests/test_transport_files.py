"""Whole files to and from a site (resel.backends.files, the transports' put_file/get_file):
atomic, hashed, never through a link — on this machine and through the test bed's real sshd.

Expected digests come from hashlib over the bytes the test wrote, not from the code under test.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest

from resel.backends.files import ContentMismatch, NotRegularFile, Sink, sha256_file
from site_folders import site_folder
from resel.backends.transport import LocalTransport, SSHTransport


@pytest.fixture(params=["local", "ssh"])
def site(request, testbed, tmp_path):
    """(transport, a folder on the site it may write in)."""
    with site_folder(request.param, testbed, tmp_path, "files") as found:
        yield found


def payload(tmp_path: Path, size: int, name: str = "in.bin") -> tuple[Path, str]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 3 << 20])
def test_put_then_get_round_trips_the_bytes(site, tmp_path, size):
    transport, folder = site
    src, digest = payload(tmp_path, size)
    moved = transport.put_file(str(src), f"{folder}/x", size=size, sha256=digest)
    assert (moved.size, moved.sha256) == (size, digest)
    back = tmp_path / "back.bin"
    moved = transport.get_file(f"{folder}/x", str(back), size=size, sha256=digest)
    assert (moved.size, moved.sha256) == (size, digest)
    assert back.read_bytes() == src.read_bytes()
    assert oct(back.stat().st_mode & 0o777) == "0o600"
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []     # no temporary file left


def test_put_with_a_wrong_digest_leaves_nothing_under_the_name(site, tmp_path):
    transport, folder = site
    src, _ = payload(tmp_path, 1000)
    with pytest.raises(ContentMismatch, match="sha256"):
        transport.put_file(str(src), f"{folder}/x", sha256="0" * 64)
    assert transport.listdir(folder) == []


def test_get_with_a_wrong_size_keeps_the_old_file(site, tmp_path):
    transport, folder = site
    src, _ = payload(tmp_path, 1000)
    transport.put_file(str(src), f"{folder}/x")
    dest = tmp_path / "dest"
    dest.write_bytes(b"old")
    with pytest.raises(ContentMismatch, match="size"):
        transport.get_file(f"{folder}/x", str(dest), size=999)
    assert dest.read_bytes() == b"old"
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def test_get_refuses_a_link_on_the_site(site, tmp_path):
    """A symbolic link where an output should be (to /etc/passwd, say) is never fetched."""
    transport, folder = site
    link = f"{folder}/evil"
    transport.run(["ln", "-s", "/etc/passwd", link])
    with pytest.raises(NotRegularFile, match="symbolic link"):
        transport.get_file(link, str(tmp_path / "got"))
    assert not (tmp_path / "got").exists()


def test_remove_tree_never_follows_a_link(site, tmp_path):
    """A link inside the tree to a folder outside it: the link goes, the folder and its file stay."""
    transport, folder = site
    outside = f"{folder}/outside"
    transport.makedirs(outside)
    transport.write_file(f"{outside}/keep", b"keep")
    tree = f"{folder}/tree"
    transport.makedirs(f"{tree}/a/b")
    transport.write_file(f"{tree}/a/b/f", b"f")
    transport.run(["ln", "-s", outside, f"{tree}/a/link"])
    transport.remove_tree(tree)
    assert not transport.exists(tree)
    assert transport.read_file(f"{outside}/keep") == b"keep"
    transport.remove_tree(tree)          # missing: fine


def test_rename_is_atomic_over_the_target(site, tmp_path):
    transport, folder = site
    transport.write_file(f"{folder}/a", b"new")
    transport.write_file(f"{folder}/b", b"old")
    transport.rename(f"{folder}/a", f"{folder}/b")
    assert transport.read_file(f"{folder}/b") == b"new" and not transport.exists(f"{folder}/a")


def test_a_sink_left_without_commit_leaves_no_file(tmp_path):
    dest = tmp_path / "out"
    with Sink(str(dest)) as sink:
        sink.write(b"partial")
    assert os.listdir(tmp_path) == []


def test_a_sink_never_writes_through_a_planted_link(tmp_path):
    """The temporary name is new (O_EXCL|O_NOFOLLOW) and the rename replaces a link at the
    destination instead of writing where it points."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"mine")
    dest = tmp_path / "out"
    dest.symlink_to(victim)
    with Sink(str(dest)) as sink:
        sink.write(b"data")
        sink.commit()
    assert victim.read_bytes() == b"mine"
    assert not dest.is_symlink() and dest.read_bytes() == b"data"


def test_sha256_file_is_hashlib_of_the_bytes(tmp_path):
    src, digest = payload(tmp_path, (1 << 20) + 17)
    moved = sha256_file(str(src))
    assert (moved.size, moved.sha256) == ((1 << 20) + 17, digest)


def test_an_output_swapped_for_a_link_after_its_lstat_delivers_nothing(testbed, tmp_path, monkeypatch):
    """SFTP has no O_NOFOLLOW: a link put in a checked output's place between its ``lstat`` and
    its OPEN is followed by the real sshd (only a process of the site's user can do it: the
    task's folder is 0700). What holds is the content check: the file read is not the bytes the
    agent recorded, so nothing is kept under the output's name and no temporary file stays."""
    import pwd
    from resel.backends import sftp_pipeline
    owner = pwd.getpwnam(testbed.user)
    with site_folder("ssh", testbed, tmp_path, "swap") as (t, work):
        out, secret = f"{work}/out.txt", f"{work}/secret"
        data = b"the task's output\n"
        for path, body in ((out, data), (secret, b"a private file of the site's user, never an output\n")):
            Path(path).write_bytes(body)
            os.chown(path, owner.pw_uid, owner.pw_gid)
            os.chmod(path, 0o600)
        checked = sftp_pipeline._Get._stated

        def swap_after_lstat(job, kind, msg):
            os.unlink(out)
            os.symlink(secret, out)
            os.lchown(out, owner.pw_uid, owner.pw_gid)
            return checked(job, kind, msg)
        monkeypatch.setattr(sftp_pipeline._Get, "_stated", swap_after_lstat)
        local = tmp_path / "home" / "out.txt"
        local.parent.mkdir()
        (result,) = t.get_files([(out, str(local), len(data), hashlib.sha256(data).hexdigest())])
        assert isinstance(result, ContentMismatch), result
        assert list(local.parent.iterdir()) == []


def test_a_fifo_to_send_is_refused_not_waited_on(site, tmp_path):
    """A local file to send that is a FIFO (an input another user swapped after the run's check)
    is refused at once by both transports; before, the open waited for a writer forever."""
    import threading
    t, folder = site
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    done, fired = threading.Event(), threading.Event()

    def unblock():                                   # a hung open must end the test, not the session
        if not done.wait(20):
            fired.set()
            with open(fifo, "wb"):
                pass
    threading.Thread(target=unblock, daemon=True).start()
    try:
        (result,) = t.put_files([(str(fifo), f"{folder}/in.bin", None, None)])
    finally:
        done.set()
    assert not fired.is_set(), "the open waited for a writer until the test opened the FIFO"
    assert isinstance(result, NotRegularFile) and "pipe" in str(result), result
    assert not t.exists(f"{folder}/in.bin")
