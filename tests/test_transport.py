"""The transports against the real thing: subprocesses, and the test bed's sshd on 127.0.0.1.

The ``testbed`` fixture (tests/conftest.py) runs an sshd for user ``reseltb`` with a key, a
known_hosts file and an ssh config holding ``tb-ssh``, ``tb-jump`` and ``tb-via-jump``
(ProxyJump tb-jump). The server is on this machine, so side effects of an injection attempt
would show up in this machine's /tmp.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import paramiko
import pytest
from resel.backends.transport import (
    AuthError,
    Completed,
    ConnectionLost,
    HostKeyError,
    LocalTransport,
    SSHTransport,
    Transport,
    TransportError,
    make_transport,
    shell_command,
)

from resel.errors import ReselError
from waiting import wait_until  # tests/ is on sys.path (rootdir conftest)

HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "; touch {marker}",
    "| touch {marker}",
    "&& touch {marker} &&",
    "a'b\"c\\d",
    "line1\nline2\n; touch {marker}",
    "  spaces  and\ttabs ",
    "*",
    "~",
    "$HOME ${{PATH}} %s %d",
    "-n",
    "",
    "ünïcødé ✓",
]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def empty_config(tmp_path: Path) -> str:
    """An empty ssh config, so the developer's ~/.ssh/config cannot change a test."""
    path = tmp_path / "ssh_config"
    path.write_text("")
    return str(path)


@pytest.fixture
def ssh(testbed):
    """The test bed through its ssh config alias, as a site file would name it."""
    t = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config, backoff=0.05)
    yield t
    t.close()


@pytest.fixture
def remote_dir(testbed, ssh) -> str:
    """A fresh directory in the remote user's work dir, removed afterwards."""
    path = f"{testbed.work_b}/test-transport-{uuid.uuid4().hex[:8]}"
    ssh.makedirs(path)
    yield path
    ssh.run(["rm", "-rf", "--", path], idempotent=True)


@pytest.fixture(params=["local", "ssh"])
def any_transport(request, testbed, tmp_path):
    """Both transports, each with a directory it may write in."""
    if request.param == "local":
        yield LocalTransport(), str(tmp_path)
    else:
        t = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
        work = f"{testbed.work_b}/test-transport-{uuid.uuid4().hex[:8]}"
        t.makedirs(work)
        yield t, work
        t.run(["rm", "-rf", "--", work])
        t.close()


def direct(testbed, known_hosts: str, config: str, **kwargs) -> SSHTransport:
    """The test bed by address, key and a chosen known_hosts file: no config entry helps."""
    kwargs.setdefault("key_filename", testbed.ssh_key)
    return SSHTransport(testbed.ssh_host, port=testbed.ssh_port, user=testbed.user,
                        known_hosts=known_hosts, ssh_config=config, **kwargs)


def server_key_line(testbed) -> str:
    """``TYPE BASE64`` of the test bed's host key, from its known_hosts file."""
    for line in Path(testbed.known_hosts).read_text().splitlines():
        name, rest = line.split(" ", 1)
        if name == f"[{testbed.ssh_host}]:{testbed.ssh_port}":
            return rest.strip()
    raise AssertionError("the test bed's known_hosts has no entry for its sshd")


# --------------------------------------------------------------------------- command building


def test_shell_command_quotes_every_word():
    assert shell_command(["echo", "a b"]) == "echo 'a b'"
    assert shell_command(["printf", "%s", "$(x)"], env={"A": "1 2"}, cwd="/d x") == \
        "cd '/d x' && env 'A=1 2' printf %s '$(x)'"
    assert shell_command(["ls"], cwd="-rf") == "cd ./-rf && ls"


@pytest.mark.parametrize("name", ["A;B", "1A", "A-B", "", "A B", "$(x)"])
def test_bad_environment_names_are_refused(name):
    with pytest.raises(TransportError, match="not valid"):
        shell_command(["true"], env={name: "v"})
    with pytest.raises(TransportError, match="not valid"):
        LocalTransport().run(["true"], env={name: "v"})


def test_argv_must_be_a_list_of_strings():
    with pytest.raises(TypeError):
        shell_command("echo hi")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        shell_command([])
    with pytest.raises(ValueError):
        shell_command(["echo", "a\0b"])


# --------------------------------------------------------------------------- both transports


def test_both_implement_the_protocol(testbed):
    assert isinstance(LocalTransport(), Transport)
    assert isinstance(SSHTransport("tb-ssh", ssh_config=testbed.ssh_config), Transport)


def test_hostile_arguments_arrive_verbatim_and_run_nothing(any_transport):
    transport, work = any_transport
    marker = f"/tmp/resel-pwned-{uuid.uuid4().hex}"
    words = [w.format(marker=marker) for w in HOSTILE]
    result = transport.run(["printf", "%s\\n", *words])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(f"{w}\n" for w in words)
    # the same strings as environment values and as a working directory
    hostile_dir = f"{work}/$(touch {marker}) ; a'b"
    transport.makedirs(hostile_dir)
    env = {f"V{i}": w for i, w in enumerate(words)}
    result = transport.run(["env"], env=env, cwd=hostile_dir)
    assert result.returncode == 0, result.stderr
    for key, value in env.items():
        assert f"{key}={value}\n" in result.stdout
    result = transport.run(["pwd"], cwd=hostile_dir)
    assert result.stdout == hostile_dir + "\n"
    # and as file names
    name = "; touch pwned `id` $(id) 'q\"\n"
    transport.write_file(f"{hostile_dir}/{name}", b"x")
    assert transport.listdir(hostile_dir) == [name]
    assert transport.read_file(f"{hostile_dir}/{name}") == b"x"
    assert not os.path.exists(marker)


def test_run_basics(any_transport):
    transport, work = any_transport
    result = transport.run(["sh", "-c", 'echo "out $A"; echo err >&2; pwd; exit 3'],
                           env={"A": "x y"}, cwd=work)
    assert result == Completed(("sh", "-c", 'echo "out $A"; echo err >&2; pwd; exit 3'), 3,
                               f"out x y\n{work}\n", "err\n")
    assert transport.run(["cat"], input="line 1\nline 2").stdout == "line 1\nline 2"
    assert transport.run(["cat"]).stdout == ""  # stdin is closed, not inherited
    start = time.monotonic()
    assert transport.run(["true"], input="x" * 5_000_000).returncode == 0  # unread input
    assert time.monotonic() - start < 5
    assert transport.run(["no-such-program-resel"]).returncode == 127
    assert transport.run(["pwd"], cwd=f"{work}/missing").returncode != 0


def test_large_output_on_both_streams_does_not_deadlock(any_transport):
    transport, _ = any_transport
    size = 5_000_000
    script = f"head -c {size} /dev/zero | tr '\\0' o; head -c {size} /dev/zero | tr '\\0' e >&2"
    start = time.monotonic()
    result = transport.run(["sh", "-c", script], timeout=20)
    assert (len(result.stdout), len(result.stderr)) == (size, size)
    assert set(result.stdout) == {"o"} and set(result.stderr) == {"e"}
    data = "x" * 2_000_000
    assert transport.run(["cat"], input=data, timeout=20).stdout == data
    assert time.monotonic() - start < 15


def test_timeout_raises_and_stops_the_command(any_transport):
    transport, _ = any_transport
    seconds = f"{100 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 1000}"  # unique
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"within 0\.5 s"):
        transport.run(["sleep", seconds], timeout=0.5)
    assert time.monotonic() - start < 3
    # the kill is delivered asynchronously
    wait_until(lambda: transport.run(["pgrep", "-f", f"[s]leep {seconds}"]).stdout == "", 5,
               f"`sleep {seconds}` to be killed", every=0.1)


def test_file_operations(any_transport):
    transport, work = any_transport
    path = f"{work}/a/b/c.bin"
    data = bytes(range(256)) * 1000
    transport.write_file(path, data, mode=0o600)
    assert transport.read_file(path) == data
    assert transport.exists(path) and transport.exists(f"{work}/a/b")
    assert transport.listdir(f"{work}/a/b") == ["c.bin"]
    assert transport.run(["stat", "-c", "%a", path]).stdout.strip() == "600"
    transport.write_file(path, b"new")
    assert transport.read_file(path) == b"new"
    transport.write_file(path, b"")
    assert transport.read_file(path) == b""
    transport.makedirs(f"{work}/a/b")  # exists: fine
    transport.makedirs(f"{work}/x/y/z")
    assert transport.listdir(work) == ["a", "x"]
    transport.remove(path)
    transport.remove(path)  # missing: fine
    assert not transport.exists(path)
    transport.remove(f"{work}/x/y/z")  # an empty directory
    assert transport.listdir(f"{work}/x/y") == []
    with pytest.raises(FileNotFoundError):
        transport.read_file(f"{work}/missing")
    with pytest.raises(FileNotFoundError):
        transport.listdir(f"{work}/missing")
    transport.write_file(f"{work}/a/b/c", b"")
    with pytest.raises(FileExistsError):
        transport.makedirs(f"{work}/a/b/c")  # a file is in the way


def test_home_and_tilde(any_transport):
    transport, _ = any_transport
    home = transport.home()
    assert home.startswith("/") and transport.run(["sh", "-c", 'echo "$HOME"']).stdout == \
        home + "\n"
    assert transport.run(["pwd"], cwd="~").stdout == home + "\n"
    assert transport.exists("~") and transport.listdir("~") == transport.listdir(home)


# --------------------------------------------------------------------------- atomic writes


def test_local_write_is_atomic(tmp_path, monkeypatch):
    renames = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append((a, b)), real(a, b)))
    target = tmp_path / "d" / "f"
    LocalTransport().write_file(str(target), b"data")
    [(tmp, final)] = renames
    assert final == str(target) and tmp != final and os.path.dirname(tmp) == str(target.parent)
    assert os.listdir(target.parent) == ["f"]


def test_ssh_write_goes_through_a_temporary_name(ssh, remote_dir, monkeypatch):
    renames = []
    real = paramiko.SFTPClient.posix_rename
    monkeypatch.setattr(paramiko.SFTPClient, "posix_rename",
                        lambda self, a, b: (renames.append((a, b)), real(self, a, b)))
    path = f"{remote_dir}/sub/f.txt"
    ssh.write_file(path, b"one")
    ssh.write_file(path, b"two")
    assert len(renames) == 2 and all(b == path for _, b in renames)
    tmps = {a for a, _ in renames}
    assert len(tmps) == 2 and path not in tmps
    assert all(os.path.dirname(a) == f"{remote_dir}/sub" for a in tmps)
    assert ssh.listdir(f"{remote_dir}/sub") == ["f.txt"]  # no temporary left behind


def test_ssh_reader_never_sees_a_partial_file(testbed, ssh, remote_dir):
    path = f"{remote_dir}/big"
    size = 3_000_000
    ssh.write_file(path, b"a" * size)
    reader = SSHTransport("tb-ssh", ssh_config=testbed.ssh_config)
    seen: list[bytes] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            data = reader.read_file(path)
            whole = data in (b"a" * size, b"b" * size)
            seen.append(data[:1] if whole else b"partial: %d bytes" % len(data))

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for letter in b"babab":
            ssh.write_file(path, bytes([letter]) * size)
    finally:
        done.set()
        thread.join()
        reader.close()
    assert seen and all(s in (b"a", b"b") for s in seen), seen


# --------------------------------------------------------------------------- one connection


def test_one_connection_for_many_operations(ssh, remote_dir):
    for i in range(50):
        assert ssh.run(["echo", str(i)]).stdout == f"{i}\n"
    for i in range(5):
        ssh.write_file(f"{remote_dir}/f{i}", str(i).encode())
        assert ssh.read_file(f"{remote_dir}/f{i}") == str(i).encode()
        assert ssh.exists(f"{remote_dir}/f{i}")
        assert f"f{i}" in ssh.listdir(remote_dir)
    assert ssh.connections_opened == 1


def test_concurrent_commands_share_the_connection(ssh, remote_dir):
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(5):
                assert ssh.run(["sh", "-c", f"sleep 0.05; echo {n}-{i}"]).stdout == f"{n}-{i}\n"
                ssh.write_file(f"{remote_dir}/t{n}", str(i).encode())
                assert ssh.read_file(f"{remote_dir}/t{n}") == str(i).encode()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert ssh.connections_opened == 1


# --------------------------------------------------------------------------- dropped links


def test_reconnects_after_a_drop_for_files_and_commands(ssh, remote_dir):
    ssh.write_file(f"{remote_dir}/f", b"x")
    assert ssh.connections_opened == 1
    ssh.drop()
    assert ssh.read_file(f"{remote_dir}/f") == b"x"
    assert ssh.connections_opened == 2
    ssh.drop()
    ssh.write_file(f"{remote_dir}/g", b"y")
    assert ssh.listdir(remote_dir) == ["f", "g"]
    assert ssh.connections_opened == 3
    ssh.drop()  # dropped before the command is sent: sending it on a new link is safe
    assert ssh.run(["echo", "ok"]).stdout == "ok\n"
    assert ssh.connections_opened == 4


def test_threads_ride_through_drops(ssh, remote_dir):
    """Each drop is noticed by every thread, and one new connection serves them all."""
    errors: list[BaseException] = []
    stop = threading.Event()
    rounds = [0] * 6                                   # each thread's finished rounds

    def work(n: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                ssh.write_file(f"{remote_dir}/t{n}", str(i).encode())
                assert ssh.read_file(f"{remote_dir}/t{n}") == str(i).encode()
                assert ssh.run(["echo", str(i)], idempotent=True).stdout == f"{i}\n"
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return
            i += 1
            rounds[n] = i

    def every_thread_went_round(what: str) -> None:
        """Wait until each thread has finished a round more (or failed: reported below)."""
        before = list(rounds)
        wait_until(lambda: errors or all(r > b for r, b in zip(rounds, before)), 20, f"every thread to {what}",
                   every=0.01)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    try:
        for drops in range(1, 4):
            every_thread_went_round("work on the connection before the drop")
            ssh.drop()
            wait_until(lambda: ssh.connections_opened >= 1 + drops, 5, f"connection {1 + drops}", every=0.01)
        every_thread_went_round("work on the last connection")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert ssh.connections_opened == 4


def test_many_fast_commands_at_once_keep_one_connection(ssh):
    """Eight threads of fast commands and no drop: one connection throughout. Each command used
    to get a channel EOF right after its start; when the command's CLOSE was handled between
    paramiko building that EOF and sending it, the EOF followed our CLOSE and sshd dropped the
    whole connection ("ieof packet referred to nonexistent channel"), mostly under load."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for i in range(40):
                assert ssh.run(["echo", str(i)]).stdout == f"{i}\n"
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert ssh.connections_opened == 1


def test_a_start_request_lost_with_the_link_is_a_lost_connection(ssh, monkeypatch):
    """A drop between opening a session and the exec request: paramiko raises EOFError from the
    request while the transport still looks alive (its thread has not seen the drop yet). That
    is the link, not sshd refusing the command: an idempotent command goes again, another one
    says it may or may not have run (it was "could not start" TransportError, under load)."""
    import paramiko

    real = paramiko.Channel.exec_command
    failures = [1]                                   # the next exec request fails once

    def exec_command(chan, command):
        if failures:
            failures.pop()
            raise EOFError()
        return real(chan, command)

    monkeypatch.setattr(paramiko.Channel, "exec_command", exec_command)
    assert ssh.run(["echo", "x"], idempotent=True).stdout == "x\n"
    assert not failures
    failures.append(1)
    with pytest.raises(ConnectionLost, match="may or may not"):
        ssh.run(["echo", "y"])
    assert ssh.run(["echo", "z"]).stdout == "z\n"


def test_a_close_failing_on_a_dying_link_does_not_replace_the_result(ssh, monkeypatch):
    """paramiko's Channel.close() raises EOFError when the link died under it between the
    command's end and the close (Packetizer.write_all cannot send the close message). run()
    closes its channel in a finally: that EOFError replaced the command's result in a thread
    caught by a drop (test_threads_ride_through_drops, CI under load). The fault is injected at
    that one call; the command runs on the real sshd."""
    import paramiko

    assert ssh.run(["true"]).returncode == 0

    def close(chan):
        raise EOFError()

    monkeypatch.setattr(paramiko.Channel, "close", close)
    assert ssh.run(["echo", "x"]).stdout == "x\n"
    assert ssh.run(["sh", "-c", "cat"], input="fed\n").stdout == "fed\n"


def _drop_during(ssh: SSHTransport, argv: list[str], started: str, **kwargs) -> Completed | BaseException:
    """Run ``argv`` in a thread and drop the connection once the remote file ``started`` exists
    (the command has begun: a fixed sleep dropped it before the exec on a loaded machine)."""
    result: list[Completed | BaseException] = []

    def call() -> None:
        try:
            result.append(ssh.run(argv, **kwargs))
        except BaseException as e:  # noqa: BLE001 - returned to the test
            result.append(e)

    ssh.run(["true"])
    thread = threading.Thread(target=call)
    thread.start()
    wait_until(lambda: ssh.run(["test", "-e", started]).returncode == 0, 20, f"{argv} to start")
    ssh.drop()
    thread.join(timeout=10)
    return result[0]


def test_a_drop_during_a_command_is_not_resent(ssh, remote_dir):
    counter = f"{remote_dir}/count"
    start = time.monotonic()
    outcome = _drop_during(ssh, ["sh", "-c", f"echo x >> {counter}; sleep 5"], counter)
    assert isinstance(outcome, ConnectionLost), outcome
    assert "may or may not" in str(outcome) and "127.0.0.1:2222" in str(outcome)
    assert time.monotonic() - start < 4.5      # told at the drop, not after the command's 5 s
    assert ssh.read_file(counter) == b"x\n"  # ran once, and the transport works again


def test_an_idempotent_command_is_resent_after_a_drop(ssh, remote_dir):
    started = f"{remote_dir}/started"
    outcome = _drop_during(ssh, ["sh", "-c", f"touch {started}; sleep 2; echo done"], started, idempotent=True)
    assert isinstance(outcome, Completed) and outcome.stdout == "done\n"
    assert ssh.connections_opened == 2


# --------------------------------------------------------------------------- config, jumps


def test_ssh_config_alias_resolves_host_user_port_key(testbed):
    with SSHTransport("tb-ssh", ssh_config=testbed.ssh_config) as t:
        assert t.name == "ssh:tb-ssh"
        assert t.run(["id", "-un"]).stdout.strip() == testbed.user
        assert t.home() == f"/home/{testbed.user}"


def test_proxyjump_goes_through_the_jump_host(testbed):
    with SSHTransport("tb-via-jump", ssh_config=testbed.ssh_config) as t:
        assert t.run(["id", "-un"]).stdout.strip() == testbed.user
        assert t.read_file(f"{t.home()}/.profile")
        assert t.connections_opened == 2  # the jump host and the site


def test_config_entry_with_accept_new(testbed, tmp_path):
    known = tmp_path / "kh"
    config = tmp_path / "config"
    config.write_text(
        f"Host site\n  HostName {testbed.ssh_host}\n  Port {testbed.ssh_port}\n"
        f"  User {testbed.user}\n  IdentityFile {testbed.ssh_key}\n"
        f"  UserKnownHostsFile {known}\n  StrictHostKeyChecking accept-new\n")
    with SSHTransport("site", ssh_config=str(config)) as t:
        assert t.run(["true"]).returncode == 0
    assert server_key_line(testbed) in known.read_text()


# --------------------------------------------------------------------------- host keys


def test_unknown_host_is_refused_with_advice(testbed, tmp_path, empty_config):
    known = tmp_path / "known_hosts"
    known.write_text("")
    t = direct(testbed, str(known), empty_config)
    with pytest.raises(HostKeyError) as info:
        t.run(["true"])
    message = str(info.value)
    assert "[127.0.0.1]:2222" in message and "not known" in message
    assert "ssh-keyscan -p 2222 127.0.0.1" in message and "accept_new_host_keys" in message
    assert known.read_text() == ""
    assert isinstance(info.value, ReselError)


def test_accept_new_records_the_key_then_it_is_checked(testbed, tmp_path, empty_config):
    known = tmp_path / "new" / "known_hosts"  # the directory does not exist yet
    with direct(testbed, str(known), empty_config, accept_new=True) as t:
        assert t.run(["true"]).returncode == 0
    lines = known.read_text().splitlines()
    assert lines == [f"[127.0.0.1]:2222 {server_key_line(testbed)}"]
    with direct(testbed, str(known), empty_config) as t:  # now known: no accept_new needed
        assert t.run(["true"]).returncode == 0
    assert known.read_text().splitlines() == lines


def test_hashed_known_hosts_entries_are_understood(testbed, tmp_path, empty_config):
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:2222 {server_key_line(testbed)}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().startswith("|1|")
    with direct(testbed, str(known), empty_config) as t:
        assert t.run(["true"]).returncode == 0


def _other_key(tmp_path: Path) -> Path:
    path = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.mark.parametrize("accept_new", [False, True])
def test_a_changed_host_key_is_always_refused(testbed, tmp_path, empty_config, accept_new):
    other = _other_key(tmp_path).with_suffix(".pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:2222 {' '.join(other)}\n")
    t = direct(testbed, str(known), empty_config, accept_new=accept_new)
    with pytest.raises(HostKeyError, match="CHANGED") as info:
        t.run(["true"])
    assert "ssh-keygen -R '[127.0.0.1]:2222'" in str(info.value)
    assert known.read_text() == f"[127.0.0.1]:2222 {' '.join(other)}\n"


# --------------------------------------------------------------------------- failures


def test_wrong_key_is_an_auth_error(testbed, tmp_path, empty_config):
    key = _other_key(tmp_path)
    t = direct(testbed, testbed.known_hosts, empty_config, key_filename=str(key))
    with pytest.raises(AuthError) as info:
        t.run(["true"])
    assert f"{testbed.user}@127.0.0.1:2222" in str(info.value)
    assert str(key) in str(info.value)


def test_missing_key_file_is_reported(testbed, tmp_path, empty_config):
    with pytest.raises(TransportError, match="does not exist"):
        direct(testbed, testbed.known_hosts, empty_config, key_filename=str(tmp_path / "nope"))


def test_closed_port_fails_fast(tmp_path, empty_config):
    t = SSHTransport("127.0.0.1", port=1, ssh_config=empty_config,
                     known_hosts=str(tmp_path / "kh"), connect_timeout=2)
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"127\.0\.0\.1:1\b"):
        t.run(["true"])
    assert time.monotonic() - start < 2
    assert t.connections_opened == 0


def test_unanswered_connect_gives_up_within_connect_timeout(tmp_path, empty_config):
    # 10.255.255.1 is unrouted: either no answer (timeout) or "unreachable" at once
    t = SSHTransport("10.255.255.1", port=22, ssh_config=empty_config,
                     known_hosts=str(tmp_path / "kh"), connect_timeout=0.5)
    start = time.monotonic()
    with pytest.raises(TransportError, match=r"10\.255\.255\.1:22"):
        t.exists("/")
    assert time.monotonic() - start < 2


# --------------------------------------------------------------------------- factory


def test_make_transport(testbed):
    assert isinstance(make_transport({"transport": "local"}), LocalTransport)
    t = make_transport({"transport": "ssh", "host": "tb-ssh", "ssh_config": testbed.ssh_config,
                        "workdir": "~/resel"})  # keys for other modules are left alone
    assert isinstance(t, SSHTransport) and t.name == "ssh:tb-ssh"
    t = make_transport({"host": testbed.ssh_host, "port": testbed.ssh_port, "user": testbed.user,
                        "key": [testbed.ssh_key], "known_hosts": testbed.known_hosts,
                        "accept_new_host_keys": False, "connect_timeout": 5})
    with t:
        assert t.run(["id", "-un"]).stdout.strip() == testbed.user


@pytest.mark.parametrize("spec, problem", [
    ({"transport": "telnet"}, "access.transport"),
    ({"transport": "ssh"}, "access.host is required"),
    ({"transport": "ssh", "host": "h", "port": "22"}, "access.port"),
    ({"transport": "ssh", "host": "h", "port": 0}, "access.port"),
    ({"transport": "ssh", "host": "h", "port": True}, "access.port"),
    ({"transport": "ssh", "host": "h", "key": [1]}, "access.key"),
    ({"transport": "ssh", "host": "h", "accept_new_host_keys": "yes"},
     "access.accept_new_host_keys"),
])
def test_make_transport_refuses_bad_tables(spec, problem):
    with pytest.raises(TransportError, match=problem):
        make_transport(spec)
