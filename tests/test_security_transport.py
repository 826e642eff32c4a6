"""What resel creates on a site is private, whatever the umask; a work directory another user
owns or may write is refused; a sites file cannot make resel run local commands through an
ssh config; the slurmrestd token never follows a redirect, and is read only from a private file.

Both transports run for real: the local one in this process, the SSH one through the testbed's
sshd as user ``reseltb`` (on this same machine, so the test, as root, can set up what another
user would have left there: a folder it owns, a group-writable one, a planted link).
"""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest

from resel.backends.slurm.rest import InsecureTokenWarning, SlurmREST
from resel.backends.transport import LocalTransport, SSHTransport, TransportError
from resel.backends.workdir import WorkdirError, prepare_workdir
from resel.errors import SchedulerError

NOBODY = 65534


@pytest.fixture(params=["local", "ssh"])
def site(request, testbed, tmp_path):
    """(transport, a fresh folder of the transport's user, that user's uid)."""
    if request.param == "local":
        yield LocalTransport(), str(tmp_path), os.geteuid()
        return
    t = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    base = f"{testbed.work_b}/test-security-{uuid.uuid4().hex[:8]}"
    t.makedirs(base)
    try:
        yield t, base, Path(base).stat().st_uid
    finally:
        t.run(["rm", "-rf", "--", base])
        t.close()


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --------------------------------------------------------------------------- private by default


def test_folders_and_files_resel_makes_are_private_whatever_the_umask(site):
    """Before: makedirs and write_file took the umask's modes (0775/0664 under umask 002, the
    server's 0755/0644 over SFTP), so another user could read, and under 002 add, files."""
    transport, base, _ = site
    old = os.umask(0o002)           # the local transport's umask; sshd's is the server's own
    try:
        transport.makedirs(f"{base}/a/b/c")
        transport.write_file(f"{base}/x/y/task.json", b"{}")
        transport.write_file(f"{base}/x/y/script", b"#!/bin/sh\n", mode=0o700)
    finally:
        os.umask(old)
    for d in ("a", "a/b", "a/b/c", "x", "x/y"):
        assert mode(f"{base}/{d}") == 0o700, d
    assert mode(f"{base}/x/y/task.json") == 0o600
    assert mode(f"{base}/x/y/script") == 0o700
    assert mode(base) == 0o700 or isinstance(transport, LocalTransport)


def test_a_planted_link_at_a_written_path_is_replaced_never_followed(site):
    transport, base, uid = site
    victim = Path(base, "victim")
    victim.write_text("precious")
    os.chown(victim, uid, -1)
    transport.makedirs(f"{base}/d")
    os.symlink(victim, f"{base}/d/result.json")
    transport.write_file(f"{base}/d/result.json", b"new")
    assert victim.read_text() == "precious"
    assert not os.path.islink(f"{base}/d/result.json") and Path(base, "d/result.json").read_text() == "new"


def test_stat_and_uid(site):
    transport, base, uid = site
    assert transport.uid() == uid
    os.symlink("/", f"{base}/link")
    os.lchown(f"{base}/link", NOBODY, -1)
    assert transport.stat(f"{base}/link").is_link and transport.stat(f"{base}/link").uid == NOBODY
    assert transport.stat(f"{base}/link", follow=True).is_dir and transport.stat(f"{base}/link", follow=True).uid == 0
    with pytest.raises(FileNotFoundError):
        transport.stat(f"{base}/missing")


# --------------------------------------------------------------------------- the work directory


def test_a_new_work_directory_and_the_folders_made_above_it_are_0700(site):
    transport, base, uid = site
    old = os.umask(0o002)
    try:
        prepare_workdir(transport, f"{base}/new/deeper/work", site="s")
    finally:
        os.umask(old)
    for d in ("new", "new/deeper", "new/deeper/work"):
        assert mode(f"{base}/{d}") == 0o700 and os.stat(f"{base}/{d}").st_uid == uid


def test_a_group_writable_work_directory_is_refused_with_the_fix(site):
    """Before: adopted as it was, and the agent shipped into it."""
    transport, base, uid = site
    work = f"{base}/work"
    os.mkdir(work)
    os.chown(work, uid, -1)
    os.chmod(work, 0o775)
    with pytest.raises(WorkdirError, match=rf"work directory {work} is writable by its group \(mode 0775\).*"
                                           rf"chmod go-w {work}"):
        prepare_workdir(transport, work, site="s")
    os.chmod(work, 0o757)
    with pytest.raises(WorkdirError, match="writable by other users"):
        prepare_workdir(transport, work, site="s")
    os.chmod(work, 0o755)                      # readable by others is the user's choice
    prepare_workdir(transport, work, site="s")


def test_a_work_directory_of_another_user_is_refused(site):
    """The issue's second reproduction: another user creates the configured workdir first."""
    transport, base, _ = site
    work = f"{base}/work"
    os.mkdir(work, 0o700)
    os.chown(work, NOBODY, -1)
    with pytest.raises(WorkdirError, match=rf"{work} belongs to uid {NOBODY}, not to you.*choose a workdir of your own"
                                           .replace("choose", "Choose")):
        prepare_workdir(transport, work, site="s")
    assert os.listdir(work) == []              # nothing shipped into it


def test_a_symlinked_work_directory_must_be_a_link_of_ours(site):
    transport, base, uid = site
    real = f"{base}/real"
    transport.makedirs(real)
    os.symlink(real, f"{base}/mine")
    os.lchown(f"{base}/mine", uid, -1)
    prepare_workdir(transport, f"{base}/mine", site="s")       # e.g. ~/scratch -> /scratch/me
    os.symlink(real, f"{base}/theirs")
    os.lchown(f"{base}/theirs", NOBODY, -1)
    with pytest.raises(WorkdirError, match=f"symbolic link owned by uid {NOBODY}"):
        prepare_workdir(transport, f"{base}/theirs", site="s")


def test_a_shared_parent_folder_is_fine_when_sticky_or_group_only(site):
    """/tmp-like (world-writable, sticky) and group project folders are legitimate parents;
    a world-writable folder without the sticky bit is not (anyone could swap the workdir)."""
    transport, base, uid = site
    gid = os.stat(base).st_gid                    # the user's group: a project folder of root's
    for name, bits in (("tmp-like", 0o1777), ("project", 0o2775)):
        os.mkdir(f"{base}/{name}")
        os.chown(f"{base}/{name}", 0, gid)
        os.chmod(f"{base}/{name}", bits)
        prepare_workdir(transport, f"{base}/{name}/work", site="s")
        assert mode(f"{base}/{name}/work") == 0o700 and os.stat(f"{base}/{name}/work").st_uid == uid
    os.mkdir(f"{base}/open")
    os.chmod(f"{base}/open", 0o777)
    with pytest.raises(WorkdirError, match=rf"{base}/open, a folder above the work directory .* no sticky bit.*chmod \+t"):
        prepare_workdir(transport, f"{base}/open/work", site="s")
    assert not os.path.exists(f"{base}/open/work")       # refused before anything was made


def test_sites_check_reports_a_foreign_workdir(testbed, tmp_path):
    """Through `resel sites check` (connect.check_site) on the live cluster tba: the row names
    the problem instead of shipping the agent into another user's folder."""
    from live_helpers import sites_toml
    from resel.backends.connect import check_site
    from resel.config import load_sites

    work = tmp_path / "theirs"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    path = tmp_path / "sites.toml"
    path.write_text(sites_toml(testbed, a={"workdir": str(work)}))
    tba = load_sites(path)[0]
    row = check_site(tba)
    assert row["reachable"] and "belongs to uid 65534" in row["error"], row
    assert list(work.iterdir()) == []


# --------------------------------------------------------------------------- ssh config: Match exec


def test_match_exec_in_a_config_file_named_by_a_sites_file_is_refused(tmp_path):
    """Before: paramiko ran the command when it looked the host up."""
    marker = tmp_path / "ran"
    config = tmp_path / "ssh_config"
    config.write_text(f"Host a\n    User x\n\n  match host b !Exec \"touch {marker}\"\n    User y\n")
    with pytest.raises(TransportError, match=rf"{config}, line 4: `Match exec` runs a local command.*~/.ssh/config"):
        SSHTransport("b", ssh_config=str(config))
    assert not marker.exists()
    config.write_text(f"Match=exec \"touch {marker}\"\n    User y\n")
    with pytest.raises(TransportError, match="line 1"):
        SSHTransport("b", ssh_config=str(config))
    config.write_text("Match host exec-node\n    User y\n")        # a host named exec-node is fine
    assert SSHTransport("exec-node", ssh_config=str(config))._target.user == "y"


def test_match_exec_hidden_from_the_line_check_is_refused_too(tmp_path):
    """Before, the check read a Match line otherwise than paramiko does: ``#`` as a comment
    (paramiko reads ``#x`` as a host pattern, then ``exec``) and a vertical tab as the end of a
    line (paramiko ends lines at newlines only), and paramiko ran the command."""
    marker = tmp_path / "ran"
    config = tmp_path / "ssh_config"
    for line in (f'Match !host #x exec "touch {marker}"', f'Match !host "a\x0b" exec "touch {marker}"'):
        config.write_text(f"{line}\n    User y\n")
        with pytest.raises(TransportError, match="`Match exec` runs a local command"):
            SSHTransport("b", ssh_config=str(config))
        assert not marker.exists(), line


def test_match_exec_in_the_users_own_config_is_honoured(tmp_path):
    """The user's own ~/.ssh/config is what their ssh runs anyway: its Match exec works. (In a
    child process: paramiko runs the command with invoke, which reads stdin.)"""
    marker = tmp_path / "ran"
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text(f"Match exec \"touch {marker}\"\n    User matched\n")
    code = ("import sys; from resel.backends.transport import SSHTransport as T; "
            "print(T('h', ssh_config=sys.argv[1] or None)._target.user)")
    for given in ("", "~/.ssh/config", str(tmp_path / ".ssh" / "config")):
        done = subprocess.run([sys.executable, "-c", code, given], env={**os.environ, "HOME": str(tmp_path)},
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        assert done.stdout.strip() == "matched", done.stderr
        assert marker.exists()
        marker.unlink()


# --------------------------------------------------------------------------- slurmrestd token


PING = {"meta": {"Slurm": {"release": "22.05.8"}}, "errors": []}


class _Server:
    """A real HTTP server on 127.0.0.1 that records each request's path and headers and answers
    with ``reply(path) -> (status, headers, body)``."""

    def __init__(self, reply):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                seen.append((self.command, self.path, dict(self.headers)))
                status, headers, body = reply(self.path)
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made = []

    def make(reply):
        made.append(_Server(reply))
        return made[-1]

    yield make
    for s in made:
        s.close()


class _Listener:
    """A bare TCP listener on 127.0.0.1 that records every connection and what it was sent."""

    def __init__(self):
        import socket
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        import socket
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(1.0)
            try:
                self.received.append(conn.recv(65536))
            except OSError:
                self.received.append(b"")
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def listener():
    got = _Listener()
    yield got
    got.close()


def test_the_token_never_follows_a_redirect_to_another_server(servers):
    """Before: requests followed the 307 and the second server received X-SLURM-USER-TOKEN."""
    other = servers(lambda path: (200, {}, PING))
    first = servers(lambda path: (307, {"Location": other.url + path}, None))
    rest = SlurmREST(first.url, "alice", "SECRET-TOKEN")
    with pytest.raises(SchedulerError, match=rf"answered GET {first.url}/slurm/v0.0.38/ping with a redirect "
                                             rf"\(HTTP 307, Location {other.url}/slurm/v0.0.38/ping\)"):
        rest.version()
    assert first.seen and first.seen[0][2].get("X-SLURM-USER-TOKEN") == "SECRET-TOKEN"
    assert other.seen == []                   # not even asked


@pytest.mark.parametrize("crafted", ["http://127.0.0.1:{other}\\@127.0.0.1:{first}/slurm/v0.0.38/ping",
                                     "//127.0.0.1:{other}\\@127.0.0.1:{first}/slurm/v0.0.38/ping"])
def test_the_token_never_follows_a_crafted_redirect(servers, listener, crafted):
    """Issue 24 Seen 2: ``urlsplit`` reads these as host 127.0.0.1 and the first server's port
    (the origin check passed), urllib3 as the other port — where the token went. Now no
    redirect is followed: the listener on the other port receives nothing, not even a connection."""
    box = {}
    first = servers(lambda path: (302, {"Location": box["location"]}, None))
    box["location"] = crafted.format(other=listener.port, first=first.url.rsplit(":", 1)[1])
    rest = SlurmREST(first.url, "alice", "SECRET-TOKEN")
    with pytest.raises(SchedulerError, match="with a redirect") as err:
        rest.version()
    assert box["location"] in str(err.value) and f"{first.url}/slurm/v0.0.38/ping" in str(err.value)
    assert "never sends the token anywhere but rest_url" in str(err.value)
    time.sleep(0.3)         # kept: the test is that nothing reaches the listener, not even late
    assert listener.received == []
    assert len(first.seen) == 1


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_within_the_same_server_is_refused_too(servers, status):
    """slurmrestd never redirects: a redirect even to the same server is an error, not followed."""
    def reply(path):
        if path.startswith("/api/"):
            return 200, {}, PING
        return status, {"Location": "/api" + path}, None
    server = servers(reply)
    with pytest.raises(SchedulerError, match=rf"with a redirect \(HTTP {status}, Location /api/slurm/v0.0.38/ping\)"):
        SlurmREST(server.url, "alice", "SECRET-TOKEN").version()
    assert [p for _, p, _ in server.seen] == ["/slurm/v0.0.38/ping"]


def test_the_http_client_is_never_asked_to_follow_a_redirect(servers, monkeypatch):
    """Every request resel sends to slurmrestd says allow_redirects=False (the library's own
    following would send the token on)."""
    server = servers(lambda path: (200, {}, PING))
    rest = SlurmREST(server.url, "alice", "SECRET-TOKEN")
    asked = []
    real = rest.session.request

    def request(method, url, **kw):
        asked.append(kw.get("allow_redirects"))
        return real(method, url, **kw)
    monkeypatch.setattr(rest.session, "request", request)
    rest.version()
    rest.api_version = "auto"
    rest.api()
    assert asked and set(asked) == {False}


def _rest_site(tmp_path, token_file):
    from resel.config import load_sites
    sites = tmp_path / "rest-sites.toml"
    sites.write_text('[[site]]\nname = "r"\nkind = "slurm"\ncores = 2\nclock = { base = 2.0 }\n'
                     'pilot = { mode = "single", max_cores = 2, walltime = 300 }\n'
                     'access = { workdir = "/w", api = "rest", rest_url = "http://127.0.0.1:9", rest_user = "me", '
                     f'rest_token_file = "{token_file}" }}\n')
    return load_sites(sites)[0]


def test_a_token_file_readable_by_others_is_refused(tmp_path):
    from resel.backends.connect import open_scheduler
    from resel.errors import ReselError
    token = tmp_path / "token"
    token.write_text("SLURM_JWT=SECRET\n")
    for mode in (0o644, 0o640, 0o604, 0o660):
        token.chmod(mode)
        with pytest.raises(ReselError, match=rf"site 'r': rest_token_file {token} can be read or written by other "
                                             rf"users \(mode 0{mode:o}\): it is a password; run `chmod 600 {token}`"):
            open_scheduler(_rest_site(tmp_path, token), None)
    token.chmod(0o600)
    assert open_scheduler(_rest_site(tmp_path, token), None)._auth["X-SLURM-USER-TOKEN"] == "SECRET"


def test_a_token_file_of_another_user_is_refused(tmp_path):
    from resel.backends.connect import open_scheduler
    from resel.errors import ReselError
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    token = tmp_path / "token"
    token.write_text("SECRET\n")
    token.chmod(0o600)
    os.chown(token, NOBODY, -1)
    with pytest.raises(ReselError, match=rf"rest_token_file {token} belongs to user nobody \(uid {NOBODY}\), not to you"):
        open_scheduler(_rest_site(tmp_path, token), None)
    link = tmp_path / "link"
    os.symlink(tmp_path / "elsewhere", link)
    os.lchown(link, NOBODY, -1)
    with pytest.raises(ReselError, match="is a symbolic link owned by user nobody"):
        open_scheduler(_rest_site(tmp_path, link), None)


def test_a_missing_token_file_says_how_to_make_one(tmp_path):
    from resel.backends.connect import open_scheduler
    from resel.errors import ReselError
    with pytest.raises(ReselError, match=r"cannot read site 'r': rest_token_file .*No such file.*umask 077; "
                                         r"scontrol token > FILE"):
        open_scheduler(_rest_site(tmp_path, tmp_path / "none"), None)


def test_plain_http_to_another_machine_is_warned_about():
    with pytest.warns(InsecureTokenWarning, match="unencrypted"):
        SlurmREST("http://slurm.example.org:6820", "alice", "t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for url in ("http://127.0.0.1:6820", "http://localhost:6820", "http://[::1]:6820",
                    "https://slurm.example.org:6820"):
            SlurmREST(url, "alice", "t")


def test_a_read_with_a_limit_never_reads_a_longer_file(site):
    """Agent records are read with a limit (backends/pilotsite.RECORD_LIMIT): a file grown past
    it is refused from its size, locally and over SFTP, and one within it reads whole."""
    from resel.backends.transport import FileTooLarge
    t, base, _ = site
    big, small = f"{base}/big.json", f"{base}/small.json"
    assert t.run(["truncate", "-s", "2G", big]).returncode == 0       # sparse: nothing to read in
    t.write_file(small, b"x" * 1024)
    with pytest.raises(FileTooLarge, match="longer than 1,024 bytes"):
        t.read_file(big, limit=1024)
    with pytest.raises(FileTooLarge):
        t.read_file(small, limit=1023)
    assert t.read_file(small, limit=1024) == b"x" * 1024
    assert t.read_file(small) == b"x" * 1024
