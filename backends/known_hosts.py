"""known_hosts files read as OpenSSH reads them, for the SSH transport's host key check.

paramiko's own reader takes the first three words of a line as name, type and key, so one
``@cert-authority`` or ``@revoked`` line (a marker first) raised ``Incorrect padding`` and broke
every SSH site; it also knows no wildcards or negations and keeps one key per type and host. This
module reads the format of sshd(8) ("SSH_KNOWN_HOSTS FILE FORMAT") and OpenSSH's hostfile.c:

* ``[@marker] patterns keytype base64 [comment]``, fields separated by blanks, ``#`` comments
  and blank lines skipped;
* ``patterns``: a comma list of host names, ``[host]:port`` for a port other than 22, ``*`` and
  ``?`` wildcards, ``!`` negations (a negated match excludes the line), compared without regard
  to case; a hashed name ``|1|salt|hmac`` is compared by its HMAC-SHA1;
* ``@revoked``: the key must never be accepted for the hosts the line matches — not even with
  accept-new, not even if another line lists it as the host's key;
* ``@cert-authority``: the key signs host certificates. paramiko negotiates no certificate host
  key algorithms, so such a line can never vouch for a host here: it is reported (a warning, and
  in the error for an unknown host) and otherwise left out, and the host needs its own key line;
* a line that cannot be read (an unknown marker, too few fields, a key paramiko does not know or
  cannot decode) is skipped with a warning, as OpenSSH skips it: it never stops another host.

The decision itself (:func:`verdict`) is OpenSSH's: a revoked key is refused; a key listed for the
host is accepted (any of several of one type); another key of a known host is a changed key; a
host with no key is unknown.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
from dataclasses import dataclass, field
from typing import Iterable

import paramiko

log = logging.getLogger("resel.backends.known_hosts")

MARKERS = ("@cert-authority", "@revoked")
#: lines already warned about in this process (a site reconnects many times in a run)
_warned: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class Entry:
    """One usable line: where it is, its marker ("" for a plain key line) and its key."""

    path: str
    line: int
    marker: str
    key: paramiko.PKey

    @property
    def where(self) -> str:
        return f"{self.path}, line {self.line}"


@dataclass
class HostEntries:
    """What the files say about one host name: its keys, the keys revoked for it, the
    certificate authorities named for it (unused), and the lines skipped on the way."""

    known: list[Entry] = field(default_factory=list)
    revoked: list[Entry] = field(default_factory=list)
    authorities: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def key_types(self) -> list[str]:
        """The types of the host's own keys, in file order (to be offered first, as ssh does)."""
        return list(dict.fromkeys(e.key.get_name() for e in self.known))


def host_name(hostname: str, port: int) -> str:
    """The name known_hosts files use for a host: ``host``, or ``[host]:port`` off port 22."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


def wildcard_match(name: str, pattern: str) -> bool:
    """OpenSSH's match_pattern: ``*`` any run of characters, ``?`` one, all else literal
    (brackets too); greedy with one backtrack point, so never exponential."""
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            n, p = n + 1, p + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, n, p + 1
        elif star >= 0:
            mark += 1
            n, p = mark, star + 1
        else:
            return False
    return all(c == "*" for c in pattern[p:])


def _hashed_match(name: str, hashed: str) -> bool | None:
    """Whether ``|1|salt|hmac`` is ``name`` hashed; None if it is not a readable hash."""
    parts = hashed.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return None
    try:
        salt, digest = base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(salt) != hashlib.sha1().digest_size:
        return None
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def names_match(name: str, patterns: str) -> bool | None:
    """Whether a line's host field covers ``name`` (OpenSSH's match_hostname: a negated match
    excludes the line, else any plain match takes it); None if the field cannot be read."""
    lowered = name.lower()
    found = False
    for pattern in patterns.split(","):
        if pattern.startswith("|"):
            hit = _hashed_match(name, pattern)
            if hit is None:
                return None
            found = found or hit
            continue
        negated = pattern.startswith("!")
        if wildcard_match(lowered, pattern[negated:].lower()):
            if negated:
                return False
            found = True
    return found


def _decode_key(key_type: str, blob: str) -> paramiko.PKey | str:
    """The key of a line, or why it cannot be used."""
    try:
        data = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return "its key is not base64"
    try:
        return paramiko.PKey.from_type_string(key_type, data)
    except paramiko.UnknownKeyType:
        return f"key type {key_type[:40]!r} is not one resel's SSH library (paramiko) knows"
    except (paramiko.SSHException, ValueError, TypeError, IndexError, OverflowError) as exc:
        return f"its {key_type[:40]} key cannot be decoded ({exc})"


class UntrustedFile(Exception):
    """A known_hosts file someone else can change: they choose which key stands for a host."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"known_hosts file {path}: {problem}")
        self.path, self.problem = path, problem


def read_entries(paths: Iterable[str], name: str) -> HostEntries:
    """Every line of the files at ``paths`` that applies to the host ``name`` (as
    :func:`host_name` gives it). Missing files are skipped, as ssh skips them.

    A file is read only if nobody else can change it (the rules of a sites file,
    :func:`resel.trust.code_file_problem`, checked on the opened file): whoever can write a
    known_hosts file chooses the key resel takes for the site, so a host of theirs in its place
    would be sent every command and file. Before, another user's file was read as the user's own.

    Raises:
        OSError: a file exists but cannot be read.
        UntrustedFile: a file someone else can change.
    """
    from resel.trust import code_file_problem
    out = HostEntries()
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        with f:
            problem = code_file_problem(path, os.fstat(f.fileno()), "which host key resel takes for a site")
            if problem is not None:
                raise UntrustedFile(path, problem)
            for number, raw in enumerate(f, 1):
                _read_line(out, path, number, raw, name)
    return out


def _read_line(out: HostEntries, path: str, number: int, raw: str, name: str) -> None:
    words = raw.split()
    if not words or words[0].startswith("#"):
        return
    marker = ""
    if words[0].startswith("@"):
        marker = words.pop(0)
        if marker not in MARKERS:
            _skip(out, path, number, f"unknown marker {marker[:40]!r} (OpenSSH knows {' and '.join(MARKERS)})")
            return
    if len(words) < 3:
        # a line for another host that ssh cannot read either: not this host's business
        _skip(out, path, number, "fewer than three fields (host names, key type, key)")
        return
    match = names_match(name, words[0])
    if match is None:
        _skip(out, path, number, "its hashed host name cannot be read")
        return
    if not match:
        return
    key = _decode_key(words[1], words[2])
    if isinstance(key, str):
        _skip(out, path, number, key)
        return
    entry = Entry(path, number, marker, key)
    if marker == "@revoked":
        out.revoked.append(entry)
    elif marker == "@cert-authority":
        out.authorities.append(entry)
        _warn(path, number, f"a @cert-authority line for {name} is not used: resel's SSH library "
                            "(paramiko) checks no host certificates, so the host needs a line with its own key "
                            f"(`ssh-keyscan` prints it)")
    else:
        out.known.append(entry)


def _skip(out: HostEntries, path: str, number: int, why: str) -> None:
    out.skipped.append(f"{path}, line {number}: {why}")
    _warn(path, number, f"skipped: {why}")


def _warn(path: str, number: int, text: str) -> None:
    if (path, number) not in _warned:
        _warned.add((path, number))
        log.warning("%s, line %d: %s", path, number, text)


@dataclass(frozen=True)
class Verdict:
    """What OpenSSH would do with the server's key: "ok", "revoked", "changed" or "unknown";
    ``entry`` is the line behind it (the revoking line, or a known key of a changed host)."""

    status: str
    entry: Entry | None = None


def verdict(entries: HostEntries, key: paramiko.PKey) -> Verdict:
    """OpenSSH's check of the key a server offered (hostfile.c, check_key_in_hostkeys)."""
    blob = key.asbytes()
    for e in entries.revoked:
        if e.key.asbytes() == blob:
            return Verdict("revoked", e)
    for e in entries.known:
        if e.key.asbytes() == blob:
            return Verdict("ok", e)
    if entries.known:
        same_type = [e for e in entries.known if e.key.get_name() == key.get_name()]
        return Verdict("changed", (same_type or entries.known)[0])
    return Verdict("unknown")
