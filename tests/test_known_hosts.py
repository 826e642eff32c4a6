"""known_hosts read as OpenSSH reads it (issue 24, "Seen" 6): ``@revoked`` keys refused,
``@cert-authority`` lines skipped with a warning, unreadable lines never failing every site.

Every case connects for real to the testbed's sshd (127.0.0.1:2222) through resel's SSH transport
*and* through the real OpenSSH client (``ssh``) with the same known_hosts file, and asserts that both
decide alike — besides the verdict the format's definition (sshd(8)) gives, so that the test cannot
pass on an agreement that is wrong.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from resel.backends import known_hosts
from resel.backends.transport import SSHTransport
from resel.errors import HostKeyError


def server_key(testbed) -> str:
    """``TYPE BASE64`` of the testbed sshd's host key."""
    for line in Path(testbed.known_hosts).read_text().splitlines():
        name, rest = line.split(" ", 1)
        if name == f"[{testbed.ssh_host}]:{testbed.ssh_port}":
            return rest.strip()
    raise AssertionError("the testbed's known_hosts has no entry for its sshd")


@pytest.fixture
def keys(testbed, tmp_path) -> dict[str, str]:
    """S: the server's key; O: another ed25519 key; R: an RSA key (another type)."""
    out = {"S": server_key(testbed)}
    for name, kind in (("O", "ed25519"), ("R", "rsa")):
        path = tmp_path / f"key-{name}"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
        out[name] = " ".join(path.with_suffix(".pub").read_text().split()[:2])
    return out


def resel_verdict(testbed, known: Path, accept_new: bool = False) -> str:
    empty = known.with_name("ssh_config")
    empty.write_text("")
    t = SSHTransport(testbed.ssh_host, port=testbed.ssh_port, user=testbed.user, key_filename=testbed.ssh_key,
                     known_hosts=str(known), ssh_config=str(empty), accept_new=accept_new)
    try:
        assert t.run(["true"]).returncode == 0
        return "connects"
    except HostKeyError as exc:
        return f"refused: {exc}"
    finally:
        t.close()


def openssh_verdict(testbed, known: Path, accept_new: bool = False) -> str:
    done = subprocess.run(
        ["ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
         "-o", f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}", "-o", "BatchMode=yes",
         "-o", "IdentitiesOnly=yes", "-o", "UpdateHostKeys=no", "-o", "ConnectTimeout=10",
         "-i", testbed.ssh_key, "-p", str(testbed.ssh_port), f"{testbed.user}@{testbed.ssh_host}", "true"],
        capture_output=True, text=True, timeout=60)
    return "connects" if done.returncode == 0 else f"refused: {done.stderr.strip()}"


HOST = "[127.0.0.1]:2222"
#: (name, known_hosts lines with S/O/R for the keys, what sshd(8)'s format says ssh does)
CASES = [
    ("plain key", [f"{HOST} S"], "connects"),
    ("@revoked the server's key, listed too", [f"{HOST} S", "@revoked * S"], "REVOKED"),
    ("@revoked the server's key by its host name", [f"@revoked {HOST} S", f"{HOST} S"], "REVOKED"),
    ("@revoked another key", ["@revoked * O", f"{HOST} S"], "connects"),
    ("@revoked for other hosts only", ["@revoked [10.*]:2222 S", f"{HOST} S"], "connects"),
    ("@cert-authority beside the key", ["@cert-authority * O", f"{HOST} S"], "connects"),
    ("@cert-authority alone", [f"@cert-authority {HOST} O"], "not known"),
    ("unreadable lines before the key", ["@bogus * S", "oneword", f"{HOST} ssh-ed25519 !!notbase64!!",
                                         f"{HOST} ssh-unheard-of AAAAB3Nz", "|1|bad|hash ssh-ed25519 AAAA",
                                         f"{HOST} S"], "connects"),
    ("two keys of one type, the server's second", [f"{HOST} O", f"{HOST} S"], "connects"),
    ("another type and the server's key", [f"{HOST} R", f"{HOST} S"], "connects"),
    ("another key only", [f"{HOST} O"], "CHANGED"),
    ("wildcards", ["[127.0.0.?]:2222 S"], "connects"),
    ("a negation excludes the line", ["[127.0.0.*]:2222,![127.0.0.1]:2222 S"], "not known"),
]


def write(tmp_path: Path, lines: list[str], keys: dict[str, str]) -> Path:
    text = "\n".join(" ".join(keys.get(w, w) for w in line.split(" ")) for line in lines) + "\n"
    path = tmp_path / "known_hosts"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, lines, expected", CASES, ids=[c[0] for c in CASES])
def test_known_hosts_read_as_openssh_reads_it(testbed, tmp_path, keys, name, lines, expected):
    known = write(tmp_path, lines, keys)
    ours, theirs = resel_verdict(testbed, known), openssh_verdict(testbed, known)
    assert ours.split(":")[0] == theirs.split(":")[0], (ours, theirs)
    if expected == "connects":
        assert ours == "connects"
    else:
        assert expected in ours, ours


def test_known_hosts_revoked_key_refused(testbed, tmp_path, keys):
    """A revoked key is refused even with accept-new (as ssh refuses it), the message names the
    line that revokes it, and nothing is written to the file."""
    known = write(tmp_path, ["@revoked * S"], keys)
    before = known.read_text()
    ours = resel_verdict(testbed, known, accept_new=True)
    assert "REVOKED" in ours and f"{known}, line 1: @revoked" in ours, ours
    assert known.read_text() == before
    assert openssh_verdict(testbed, known, accept_new=True).startswith("refused")
    assert known.read_text() == before


def test_known_hosts_cert_authority_skipped_with_a_warning(testbed, tmp_path, keys, caplog):
    """A @cert-authority line broke every SSH site (paramiko read '@cert-authority' as a host and
    the host names as the key: 'Incorrect padding'). Now the site connects by its own key line, a
    warning says the line is not used and why; alone, the line makes the host unknown, and the
    error says why the line did not help."""
    known = write(tmp_path, ["@cert-authority * O", f"{HOST} S"], keys)
    with caplog.at_level(logging.WARNING, logger="resel.backends.known_hosts"):
        assert resel_verdict(testbed, known) == "connects"
    assert any("@cert-authority line" in r.getMessage() and "checks no host certificates" in r.getMessage()
               for r in caplog.records), caplog.text
    known = write(tmp_path, [f"@cert-authority {HOST} O"], keys)
    ours = resel_verdict(testbed, known)
    assert "not known" in ours and "@cert-authority line at" in ours, ours


def test_known_hosts_accept_new_records_past_unreadable_lines(testbed, tmp_path, keys):
    """accept-new on a file whose lines resel cannot use (markers, garbage) records the key and
    the next connection checks it, as ssh does."""
    known = write(tmp_path, ["@cert-authority * O", "@bogus x y z", "garbage"], keys)
    assert resel_verdict(testbed, known, accept_new=True) == "connects"
    assert known.read_text().splitlines()[-1] == f"{HOST} {keys['S']}"
    assert resel_verdict(testbed, known) == "connects"
    assert openssh_verdict(testbed, known) == "connects"


@pytest.mark.parametrize("name, pattern, hit", [
    ("star", "*", True), ("question", "h?st", True), ("literal brackets", "[h]:22", True),
    ("no partial", "hos", False), ("star inside", "h*t", True), ("many stars", "*" * 50 + "x", False),
])
def test_wildcard_match(name, pattern, hit):
    subject = "[h]:22" if "[" in pattern else "host"
    assert known_hosts.wildcard_match(subject, pattern) is hit


def test_wildcard_match_is_not_exponential():
    """A pattern of many stars against a long name that fails at its end: OpenSSH's recursive
    matcher is exponential there; this one backtracks to the last star only (counted steps are
    bounded by len(name) * len(pattern), checked by the result on a case that would never end)."""
    assert known_hosts.wildcard_match("a" * 3000, "*a" * 40 + "b") is False
