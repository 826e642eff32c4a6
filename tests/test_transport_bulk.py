"""Many files at once (the transports' put_files/get_files): each file by put_file/get_file's
rules — atomic, hashed, never through a link — with its own result, on this machine and
through the test bed's real sshd (where the requests of all files are in flight together).

Expected digests come from hashlib over the bytes the tests wrote, not from the code under test.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import uuid
from pathlib import Path

import paramiko
import pytest

from resel.backends import sftp_pipeline
from resel.backends.files import ContentMismatch, Moved, NotRegularFile
from site_folders import site_folder
from resel.backends.transport import LocalTransport, SSHTransport
from resel.errors import TransportError

# sizes around the request size (255 KiB on OpenSSH), empty, and a file of several requests
SIZES = [0, 1, 1000, (255 << 10) - 1, 255 << 10, (255 << 10) + 1, (3 << 20) + 17]


@pytest.fixture(params=["local", "ssh"])
def site(request, testbed, tmp_path):
    """(transport, a folder on the site it may write in)."""
    with site_folder(request.param, testbed, tmp_path, "bulk") as found:
        yield found


@pytest.fixture
def ssh(testbed):
    t = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    work = f"{testbed.work_b}/test-bulk-{uuid.uuid4().hex[:8]}"
    t.makedirs(work)
    yield t, work
    t.run(["rm", "-rf", "--", work], idempotent=True)
    t.close()


def files(folder: Path, sizes: list[int]) -> list[tuple[Path, bytes]]:
    folder.mkdir(exist_ok=True)
    made = []
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        path = folder / f"f{i:04d}.bin"
        path.write_bytes(data)
        made.append((path, data))
    return made


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hidden(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(".")]


def test_many_files_go_and_come_back_whole(site, tmp_path):
    transport, folder = site
    made = files(tmp_path / "src", SIZES * 20)          # 140 files, their requests interleaved
    sent = transport.put_files([(str(p), f"{folder}/{p.name}", len(d), digest(d)) for p, d in made])
    assert sent == [Moved(len(d), digest(d)) for _, d in made]
    assert hidden(transport.listdir(folder)) == []      # no temporary file left on the site
    back = tmp_path / "back"
    back.mkdir()
    got = transport.get_files([(f"{folder}/{p.name}", str(back / p.name), len(d), digest(d))
                               for p, d in made])
    assert got == sent
    for p, d in made:
        assert (back / p.name).read_bytes() == d
        assert stat.S_IMODE((back / p.name).stat().st_mode) == 0o600
    assert hidden(os.listdir(back)) == []


def test_the_mode_is_every_new_files(site, tmp_path):
    """The task-data cache keeps its files 0400."""
    transport, folder = site
    (p, d), = files(tmp_path / "src", [100])
    transport.put_files([(str(p), f"{folder}/ro", None, None)], mode=0o400)
    assert stat.S_IMODE(transport.stat(f"{folder}/ro").mode) == 0o400


def test_an_empty_batch_is_an_empty_list(site):
    transport, _ = site
    assert transport.put_files([]) == [] and transport.get_files([]) == []


def test_each_upload_fails_alone(site, tmp_path):
    transport, folder = site
    (good, data), (other, _) = files(tmp_path / "src", [5000, 300])
    results = transport.put_files([
        (str(good), f"{folder}/good", len(data), digest(data)),
        (str(tmp_path / "missing"), f"{folder}/a", None, None),           # no such local file
        (str(other), f"{folder}/wrong", None, "0" * 64),                   # not the content named
        (str(other), f"{folder}/short", 299, None),                       # nor the size
        (str(other), f"{folder}/no/such/folder/x", None, None),           # its folder is missing
    ])
    assert results[0] == Moved(len(data), digest(data))
    assert isinstance(results[1], FileNotFoundError) and "missing" in str(results[1])
    assert isinstance(results[2], ContentMismatch) and results[2].what == "its sha256"
    assert isinstance(results[3], ContentMismatch) and results[3].what == "its size"
    assert isinstance(results[4], FileNotFoundError)
    assert transport.listdir(folder) == ["good"]                          # nothing else, no temporary
    assert transport.read_file(f"{folder}/good") == data


def test_each_download_fails_alone_and_nothing_is_read_through_a_link(site, tmp_path):
    """A link (to /etc/passwd), a folder, a FIFO (opening one would hang the server: it is
    never opened), a missing file and a wrong size each fail alone; the good file arrives,
    and a wrong one leaves the old local file as it was."""
    transport, folder = site
    (good, data), = files(tmp_path / "src", [70000])
    transport.put_file(str(good), f"{folder}/good")
    transport.put_file(str(good), f"{folder}/sized")
    transport.run(["ln", "-s", "/etc/passwd", f"{folder}/link"])
    transport.makedirs(f"{folder}/dir")
    transport.run(["mkfifo", f"{folder}/fifo"])
    back = tmp_path / "back"
    back.mkdir()
    (back / "sized").write_bytes(b"old")
    results = transport.get_files([
        (f"{folder}/link", str(back / "link"), None, None),
        (f"{folder}/dir", str(back / "dir"), None, None),
        (f"{folder}/fifo", str(back / "fifo"), None, None),
        (f"{folder}/missing", str(back / "missing"), None, None),
        (f"{folder}/sized", str(back / "sized"), len(data) - 1, None),
        (f"{folder}/good", str(back / "good"), len(data), digest(data)),
        (f"{folder}/good", str(tmp_path / "no" / "folder" / "good"), None, None),   # local folder
    ])
    assert isinstance(results[0], NotRegularFile) and results[0].kind == "a symbolic link"
    assert isinstance(results[1], NotRegularFile) and results[1].kind == "a folder"
    assert isinstance(results[2], NotRegularFile) and results[2].kind == "a device, pipe or socket"
    assert isinstance(results[3], FileNotFoundError)
    assert isinstance(results[4], ContentMismatch) and results[4].what == "its size"
    assert results[5] == Moved(len(data), digest(data))
    assert isinstance(results[6], FileNotFoundError)
    assert sorted(os.listdir(back)) == ["good", "sized"]
    assert (back / "sized").read_bytes() == b"old" and (back / "good").read_bytes() == data


def test_the_sftp_session_uses_the_servers_request_size(ssh):
    """OpenSSH announces its limits (limits@openssh.com): reads and writes of 255 KiB, eight
    times paramiko's 32 KiB, are what make one big file fast."""
    transport, folder = ssh
    transport.exists(folder)                    # opens the SFTP session
    limits = transport._connection().sftp.limits
    assert (limits.read, limits.write) == (255 << 10, 255 << 10)
    assert limits.files == sftp_pipeline.MAX_FILES


def test_aes_gcm_is_negotiated_when_paramiko_offers_it(ssh):
    transport, _ = ssh
    transport.run(["true"])
    link = transport._connection().transport
    if "aes128-gcm@openssh.com" not in paramiko.Transport._preferred_ciphers:
        pytest.skip(f"paramiko {paramiko.__version__} has no AES-GCM")
    assert (link.local_cipher, link.remote_cipher) == ("aes128-gcm@openssh.com",) * 2


def test_a_batch_rides_through_a_drop(ssh, tmp_path, monkeypatch):
    """The link is cut in the middle of a batch: the files finished before keep their results,
    the others go again on a new connection, and every file arrives whole, once, with no
    temporary file left under a real name."""
    transport, folder = ssh
    made = files(tmp_path / "src", [20000] * 200)
    replies = 0
    real = paramiko.SFTPClient._read_response

    def read_response(self, *args, **kw):
        nonlocal replies
        replies += 1
        if replies == 300:                      # some files renamed, some in flight
            transport.drop()
        return real(self, *args, **kw)

    monkeypatch.setattr(paramiko.SFTPClient, "_read_response", read_response)
    before = transport.connections_opened
    sent = transport.put_files([(str(p), f"{folder}/{p.name}", None, digest(d)) for p, d in made])
    assert replies > 300 and transport.connections_opened == before + 1
    assert sent == [Moved(len(d), digest(d)) for _, d in made]
    back = tmp_path / "back"
    back.mkdir()
    replies = 0
    got = transport.get_files([(f"{folder}/{p.name}", str(back / p.name), None, digest(d)) for p, d in made])
    assert got == sent and transport.connections_opened == before + 2
    assert sorted(os.listdir(back)) == sorted(p.name for p, _ in made)
    assert all((back / p.name).read_bytes() == d for p, d in made)
    real_names = [n for n in transport.listdir(folder) if not n.startswith(".")]
    assert sorted(real_names) == sorted(p.name for p, _ in made)


def test_a_server_refusal_without_errno_is_a_transport_error(ssh, tmp_path):
    """OpenSSH answers a bare "Failure" (no errno) when the rename over a folder fails; the
    file's result names the step, the path and the site, and its temporary file is gone."""
    transport, folder = ssh
    (p, d), = files(tmp_path / "src", [10])
    transport.write_file(f"{folder}/sub/dir/x", b"x")
    result, = transport.put_files([(str(p), f"{folder}/sub/dir", None, None)])
    assert isinstance(result, TransportError)
    assert str(result) == f"ssh:tb-ssh: rename {folder}/sub/dir failed: Failure"
    assert transport.listdir(f"{folder}/sub") == ["dir"]


def test_concurrent_batches_and_commands_share_the_connection(ssh, tmp_path):
    """A batch holds the SFTP session; commands and another batch from other threads wait for
    it or use their own channels — one connection, every file right."""
    transport, folder = ssh
    made = files(tmp_path / "src", [3000] * 60)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            sub = f"{folder}/w{k}"
            transport.makedirs(sub)
            sent = transport.put_files([(str(p), f"{sub}/{p.name}", None, digest(d)) for p, d in made])
            assert all(isinstance(r, Moved) for r in sent)
            assert transport.run(["ls", sub]).stdout.split() == [p.name for p, _ in made]
        except BaseException as e:      # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and transport.connections_opened == 1


def test_a_site_that_stays_away_leaves_what_is_known(testbed, tmp_path, monkeypatch):
    """The link is cut mid-batch and the site cannot be reached again: the batch raises, and
    its ``results`` say which files are on the site (whole, under their names) and which are
    unknown (None) — never a file reported sent that is not there."""
    transport = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config, retries=1, backoff=0.01)
    folder = f"{testbed.work_b}/test-bulk-{uuid.uuid4().hex[:8]}"
    transport.makedirs(folder)
    made = files(tmp_path / "src", [20000] * 100)
    replies = 0
    real = paramiko.SFTPClient._read_response

    def gone(*args, **kw):
        raise TransportError("ssh:tb-ssh: cannot connect to 127.0.0.1:2222: Connection refused")

    def read_response(self, *args, **kw):
        nonlocal replies
        replies += 1
        if replies == 300:                      # some files renamed, others not yet
            monkeypatch.setattr(transport, "_open", gone)
            transport.drop()
        return real(self, *args, **kw)

    monkeypatch.setattr(paramiko.SFTPClient, "_read_response", read_response)
    try:
        with pytest.raises(TransportError) as caught:
            transport.put_files([(str(p), f"{folder}/{p.name}", None, digest(d)) for p, d in made])
        results = caught.value.results
        sent = [i for i, r in enumerate(results) if r is not None]
        assert 0 < len(sent) < len(made) and all(isinstance(results[i], Moved) for i in sent)
    finally:
        monkeypatch.undo()
        transport.close()
    with SSHTransport("tb-ssh", ssh_config=testbed.ssh_config) as look:
        for i in sent:
            p, d = made[i]
            assert look.read_file(f"{folder}/{p.name}") == d
        look.run(["rm", "-rf", "--", folder])


# ---------------------------------------------------------------- write_files: inbox files


def test_many_small_writes_land_whole_private_and_in_their_own_files(site):
    """write_files (a turn's inbox files at once): each file has its own bytes under its own name,
    mode 0600, no temporary file left; a file whose folder is missing gets its folder (as
    write_file makes it); and one file the site refuses fails alone."""
    transport, folder = site
    items = [(f"{folder}/inbox/t{i:05d}.json", f'{{"task": {i}}}'.encode() * (i % 7 + 1)) for i in range(300)]
    transport.makedirs(f"{folder}/inbox")
    items.append((f"{folder}/new/deeper/t.json", b"made with its folders"))
    transport.makedirs(f"{folder}/inbox/occupied.json")          # a folder where a file should go
    items.append((f"{folder}/inbox/occupied.json", b"never lands"))
    results = transport.write_files(items)
    assert results[:-1] == [None] * (len(items) - 1)
    assert isinstance(results[-1], (OSError, TransportError))      # as write_file raises for it
    for path, data in items[:-1]:
        assert transport.read_file(path) == data
        assert stat.S_IMODE(transport.stat(path).mode) == 0o600
    assert stat.S_IMODE(transport.stat(f"{folder}/new/deeper").mode) == 0o700
    assert hidden(transport.listdir(f"{folder}/inbox")) == []
    assert transport.write_files([]) == []


def test_a_written_file_replaces_a_planted_link_without_following_it(site, tmp_path):
    """As write_file: the rename replaces whatever is at the name, a symlink included; the link's
    target is never written."""
    transport, folder = site
    target = f"{folder}/target"
    transport.write_file(target, b"theirs")
    transport.run(["ln", "-s", target, f"{folder}/t.json"], idempotent=True)
    assert transport.write_files([(f"{folder}/t.json", b"ours")]) == [None]
    assert transport.read_file(target) == b"theirs"
    assert stat.S_ISREG(transport.stat(f"{folder}/t.json").mode)
    assert transport.read_file(f"{folder}/t.json") == b"ours"
    # written again (a resumed coordinator re-sends an action): the same bytes, still one file
    assert transport.write_files([(f"{folder}/t.json", b"ours")]) == [None]
    assert transport.read_file(f"{folder}/t.json") == b"ours"


# ---------------------------------------------------------------- read_files: agents' records


def test_many_small_reads_each_give_their_own_bytes_or_their_own_error(site):
    """read_files (a pilot's new records at once): each file's bytes, in order, whatever its size
    against the server's request size; a missing file is FileNotFoundError and one over its
    limit FileTooLarge, the others unharmed; no limit reads all."""
    from resel.backends.transport import FileTooLarge
    transport, folder = site
    sizes = [0, 1, 300, (255 << 10) - 1, 255 << 10, (255 << 10) + 1, (600 << 10) + 5]
    made = []
    for i, size in enumerate(sizes * 5):
        data = os.urandom(size)
        transport.write_file(f"{folder}/r{i:03d}", data)
        made.append((f"{folder}/r{i:03d}", data))
    items = [(path, 1 << 20) for path, _ in made]
    items.insert(3, (f"{folder}/absent", 100))
    items.append((made[6][0], (600 << 10) + 4))        # one byte over its limit
    items.append((made[6][0], (600 << 10) + 5))        # exactly its limit
    items.append((made[6][0], None))
    got = transport.read_files(items)
    assert len(got) == len(items)
    expect = [d for _, d in made]
    assert got[:3] + got[4:len(made) + 1] == expect
    assert isinstance(got[3], FileNotFoundError)
    assert isinstance(got[-3], FileTooLarge) and got[-3].limit == (600 << 10) + 4
    assert got[-2] == made[6][1] and got[-1] == made[6][1]
    assert transport.read_files([]) == []
