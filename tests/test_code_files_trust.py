"""A sites file, a bag and a bag's CSV task table are code: nobody else may be able to change them.

A sites file's ``access.env`` chooses which ``squeue`` and ``sbatch`` run as you (``PATH``), a
bag holds the tasks' commands, a task table their arguments. Before, resel read them from
wherever they were: a group member who could write the project's ``proj/sites.toml`` (0664, in
a 2775 folder) put ``PATH`` on a folder of theirs, and the owner's ``resel sites check`` ran their
``sinfo``/``squeue`` as the owner. The store had the same attack refused (test_store_trust.py);
these files are where its sites come from. Real users, real files, the owner's commands run
as real processes under the owner's uid, gid, groups and umask 002.
"""

from __future__ import annotations

import encodings.utf_8_sig  # noqa: F401 - imported here: the test's Python may be unreadable to the users
import os
from pathlib import Path

import pytest

from resel.config import load_bag, load_sites

from test_other_users import Users, as_user, users  # noqa: F401 - the module's fixture, reused
from test_store_trust import base, folder, hostile_bin, owned, resel_as  # noqa: F401 - fixtures reused

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two real users")


def sites_text(workdir: Path, bin_dir: Path | None = None) -> str:
    env = f'PATH = "{bin_dir}", ' if bin_dir else ""
    return ('[[site]]\nname = "here"\nkind = "slurm"\ncores = 2\nclock = { base = 2.0 }\n'
            'pilot = { mode = "single", max_cores = 2, walltime = 300 }\n'
            f'access = {{ transport = "local", workdir = "{workdir}", env = {{ {env}SLURM_CONF = "/dev/null" }} }}\n')


BAG = '[bag]\nname = "b"\ncommand = "/bin/true"\n{count}\n[bag.profile]\ninstructions = 1e9\n'


def made(path: Path, user, mode: int, text: str, gid: int | None = None) -> Path:
    path.write_text(text)
    return owned(path, user, mode, gid)


def _load_sites(path: str):
    return [s.name for s in load_sites(path)]


def _load_bag(path: str):
    return load_bag(path).name


def test_a_group_members_edit_of_the_project_sites_file_runs_nothing_as_the_owner(users: Users, base: Path):
    """The attack: the owner's sites file in the group's 2775 folder, 0664 (umask 002); the other
    member points its ``PATH`` at their commands; the owner's ``resel sites check`` refuses it."""
    owner, other = users.owner, users.other
    home = folder(base / "home", owner)
    bin_dir, pwned = hostile_bin(base, other)
    proj = folder(base / "proj", owner, 0o2775, users.group)
    sites = made(proj / "sites.toml", owner, 0o664, sites_text(home / "work"), users.group)   # umask 002
    assert as_user(other, sites.write_text, sites_text(home / "work", bin_dir))[0] == "ok"   # the member's edit
    got = resel_as(owner, "sites", "check", "--sites", str(sites), home=home)
    assert not pwned.exists(), f"the other user's commands ran as the owner: {pwned.read_text()}"
    assert got.returncode != 0
    assert "writable by its group" in got.stderr and "chmod go-w" in got.stderr, got.stderr
    # the control: the same file, once the owner's own and private, does run what it names
    private = made(home / "sites.toml", owner, 0o600, sites.read_text())
    resel_as(owner, "sites", "check", "--sites", str(private), home=home)
    assert pwned.exists() and owner.name in pwned.read_text()


def test_a_sites_file_of_another_user_is_refused_even_in_a_sticky_folder(users: Users, base: Path):
    owner, other = users.owner, users.other
    drop = base / "shared"
    drop.mkdir()
    drop.chmod(0o1777)
    sites = made(drop / "sites.toml", other, 0o644, sites_text(base / "work"))
    status, message = as_user(owner, _load_sites, str(sites))
    assert status == "error" and f"belongs to user {other.name}" in message, message


def test_a_sites_file_the_group_can_replace_is_refused(users: Users, base: Path):
    """The file is the owner's 0644, but its folder is the group's 2775: a member can ``mv`` it."""
    owner = users.owner
    proj = folder(base / "proj", owner, 0o2775, users.group)
    sites = made(proj / "sites.toml", owner, 0o644, sites_text(base / "work"))
    status, message = as_user(owner, _load_sites, str(sites))
    assert status == "error" and str(proj) in message and "rename" in message, message
    proj.chmod(0o755)                                      # fixed as the error says: read as before
    assert as_user(owner, _load_sites, str(sites)) == ("ok", ["here"])


def test_a_sites_file_reached_through_another_users_link_is_refused(users: Users, base: Path):
    owner, other = users.owner, users.other
    home = folder(base / "home", owner, 0o755)
    sites = made(home / "sites.toml", owner, 0o644, sites_text(base / "work"))
    drop = base / "shared"
    drop.mkdir()
    drop.chmod(0o1777)
    link = drop / "sites.toml"
    assert as_user(other, os.symlink, str(sites), str(link))[0] == "ok"
    status, message = as_user(owner, _load_sites, str(link))
    assert status == "error" and "symbolic link" in message and other.name in message, message
    assert as_user(owner, _load_sites, str(sites)) == ("ok", ["here"])   # the real path is the owner's


def test_a_bag_and_its_task_table_are_checked_as_a_sites_file_is(users: Users, base: Path):
    owner, other = users.owner, users.other
    home = folder(base / "home", owner, 0o755)
    bag = made(home / "bag.toml", owner, 0o666, BAG.replace("{count}", "count = 2"))
    status, message = as_user(owner, _load_bag, str(bag))
    assert status == "error" and "writable by its group and by other users" in message, message
    bag.chmod(0o644)
    assert as_user(owner, _load_bag, str(bag)) == ("ok", "b")
    drop = base / "shared"
    drop.mkdir()
    drop.chmod(0o1777)
    table = made(drop / "tasks.csv", other, 0o644, "name,args\nt1,--steps 10\n")
    bag.write_text(BAG.replace("{count}", f'tasks = "{table}"'))
    status, message = as_user(owner, _load_bag, str(bag))
    assert status == "error" and f"belongs to user {other.name}" in message, message


def test_an_ssh_config_a_group_member_can_write_runs_nothing_as_the_owner(users: Users, base: Path):
    """The owner's own ~/.ssh/config, 0664 under umask 002 (OpenSSH's ssh refuses it: "Bad owner
    or permissions"): a member of the group adds ``Match exec``, which resel honours in the
    user's own config; before, resel looked the host up through it and paramiko ran the command
    as the owner."""
    import subprocess
    import sys
    owner, other = users.owner, users.other
    home = folder(base / "home", owner, 0o750, users.group)
    ssh = folder(home / ".ssh", owner, 0o750, users.group)
    config = made(ssh / "config", owner, 0o664, "Host h\n    User me\n", users.group)
    drop = base / "drop"
    drop.mkdir()
    drop.chmod(0o1777)
    marker = drop / "ran"
    hostile = f'Match exec "/usr/bin/id -un > {marker}"\n    User them\n' + config.read_text()
    assert as_user(other, config.write_text, hostile)[0] == "ok"
    code = "from resel.backends.transport import SSHTransport as T; print(T('h')._target.user)"
    argv = ["setpriv", f"--reuid={owner.uid}", f"--regid={owner.gid}", "--init-groups", "--", sys.executable,
            "-c", code]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, cwd="/",
                          timeout=120)
    assert not marker.exists(), f"the other user's Match exec ran as {marker.read_text()}"
    assert done.returncode != 0 and "writable by its group" in done.stderr, done.stderr
    config.chmod(0o644)                     # fixed as the error says (and the Match exec is the owner's own now)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, cwd="/",
                          timeout=120)
    assert done.stdout.strip() == "them", done.stderr


def test_accept_new_appends_through_no_link_of_another_user(testbed, users: Users, base: Path):
    """A sites file's ``known_hosts`` in a shared sticky folder, with ``accept_new_host_keys``:
    the other user plants a link there to a file of the owner's before the first connection.
    Before, resel appended the host key line through it, to the owner's file."""
    from resel.backends.transport import SSHTransport
    from resel.errors import HostKeyError
    victim = base / "victim.txt"
    victim.write_text("the owner's file\n")
    victim.chmod(0o600)
    drop = base / "shared"
    drop.mkdir()
    drop.chmod(0o1777)
    known = drop / "known_hosts"
    assert as_user(users.other, os.symlink, str(victim), str(known))[0] == "ok"
    empty = base / "ssh_config"
    empty.write_text("")
    t = SSHTransport(testbed.ssh_host, port=testbed.ssh_port, user=testbed.user, key_filename=testbed.ssh_key,
                     known_hosts=str(known), ssh_config=str(empty), accept_new=True)
    try:
        with pytest.raises(HostKeyError, match="symbolic link"):
            t.run(["true"])
    finally:
        t.close()
    assert victim.read_text() == "the owner's file\n"


def _connect(testbed, known: Path, base: Path) -> None:
    """One command over SSH to the testbed's sshd, checking its key against ``known`` only."""
    from resel.backends.transport import SSHTransport
    empty = base / "ssh_config"
    empty.write_text("")
    t = SSHTransport(testbed.ssh_host, port=testbed.ssh_port, user=testbed.user, key_filename=testbed.ssh_key,
                     known_hosts=str(known), ssh_config=str(empty))
    try:
        t.run(["true"])
    finally:
        t.close()


def test_a_known_hosts_file_of_another_user_is_not_trusted(testbed, users: Users, base: Path):
    """A sites file's ``known_hosts`` in a shared sticky folder, written by the other user: they
    choose which key stands for the site (their own, for a host of theirs in its place), so
    resel's whole SSH session — the commands it runs, the files it sends — would go to them.
    Before, resel read it and connected. Here the file holds the site's real key, so only the
    refusal can stop the connection."""
    from resel.errors import HostKeyError
    drop = base / "shared"
    drop.mkdir()
    drop.chmod(0o1777)
    known = drop / "known_hosts"
    line = Path(testbed.known_hosts).read_text()
    assert as_user(users.other, Path.write_text, known, line)[0] == "ok"
    assert known.stat().st_uid == users.other.uid
    with pytest.raises(HostKeyError, match=rf"known_hosts file {known}: belongs to user {users.other.name} .*copy it"):
        _connect(testbed, known, base)


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_a_known_hosts_file_others_can_write_is_not_trusted(testbed, users: Users, base: Path, mode: int):
    """The owner's own known_hosts, but writable by their group or by everybody: refused with the
    ``chmod go-w`` that fixes it (as OpenSSH's ssh refuses such an ssh config)."""
    from resel.errors import HostKeyError
    known = base / "known_hosts"
    known.write_text(Path(testbed.known_hosts).read_text())
    known.chmod(mode)
    with pytest.raises(HostKeyError, match=rf"known_hosts file {known}: is writable by .*chmod go-w {known}"):
        _connect(testbed, known, base)
    known.chmod(0o644)
    _connect(testbed, known, base)                # the same file, writable by its owner only


def test_a_known_hosts_file_in_a_folder_another_user_owns_is_not_trusted(testbed, users: Users, base: Path):
    """The owner's own known_hosts (0644), in a folder of the other user's: they can rename it
    and put theirs in its place."""
    from resel.errors import HostKeyError
    theirs = folder(base / "theirs", users.other, 0o755)
    known = theirs / "known_hosts"
    known.write_text(Path(testbed.known_hosts).read_text())
    known.chmod(0o644)
    with pytest.raises(HostKeyError, match=rf"known_hosts file {known}: its folder {theirs} belongs to user {users.other.name}"):
        _connect(testbed, known, base)


@pytest.mark.parametrize("where", ["key", "IdentityFile", "~/.ssh"])
def test_a_private_key_others_can_read_is_refused_as_ssh_refuses_it(testbed, base: Path, where: str, monkeypatch):
    """The owner's private key, readable by their group and everybody (0644): OpenSSH's ssh
    ignores it ("UNPROTECTED PRIVATE KEY FILE!", permissions too open); before, resel logged in
    with it. Named by the sites file's ``key`` or an ssh config's ``IdentityFile``, resel refuses
    it, naming the file and `chmod 600`; found by paramiko in ~/.ssh, it is ignored as ssh
    ignores it, and the authentication error then names it and `chmod 600`."""
    from resel.backends.transport import SSHTransport, TransportError
    monkeypatch.setenv("HOME", str(base))
    (base / ".ssh").mkdir(mode=0o700)
    key = base / (".ssh" if where == "~/.ssh" else "") / "id_ed25519"
    key.write_bytes(Path(testbed.ssh_key).read_bytes())
    key.chmod(0o644)
    config = base / "ssh_config"
    identity = f"  IdentityFile {key}\n  IdentitiesOnly yes\n" if where == "IdentityFile" else ""
    config.write_text(f"Host tb\n  HostName {testbed.ssh_host}\n  Port {testbed.ssh_port}\n  User {testbed.user}\n"
                      + identity)
    config.chmod(0o644)

    def connect() -> None:
        t = SSHTransport("tb", key_filename=str(key) if where == "key" else None, known_hosts=testbed.known_hosts,
                         ssh_config=str(config))
        try:
            t.run(["true"])
        finally:
            t.close()
    if where == "~/.ssh":   # found, not named: ignored as ssh ignores it (the agent could still log in)
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        with pytest.raises(TransportError, match=rf"not {key}, ignored as ssh ignores them.*chmod 600 {key}"):
            connect()
    else:
        with pytest.raises(TransportError, match=rf"private key {key} .*0644.*chmod 600 {key}"):
            connect()
    key.chmod(0o600)
    connect()                                        # fixed as the error says
