"""How resel runs commands and moves files on a site: locally, or over one SSH connection.

Backends (Slurm, PBS, HTCondor) never spawn ``ssh`` or build shell strings themselves: they get
a :class:`Transport` from :func:`make_transport` (the site file's ``access`` table) and call
``run`` with an argv list and the file operations. Why it is built this way:

* **One connection per site.** Batch front ends rate-limit and log every login, and a
  handshake costs ~100 ms; so :class:`SSHTransport` opens one paramiko connection lazily and
  reuses it for every command (one channel each) and every file operation (one SFTP session).
  ``connections_opened`` counts SSH connections actually opened: one per hop, so a site
  behind a ``ProxyJump`` host costs 2 per (re)connection.
* **No shell injection.** A remote command is always ``shlex.join(argv)``, environment
  variables go in as a leading ``env K=V`` argv and the working directory as a quoted
  ``cd DIR &&``; the remote login shell must be POSIX (sh, bash, dash, zsh — not csh).
  :class:`LocalTransport` never uses a shell at all.
* **At-most-once commands.** A dead connection found *before* a command is sent is reopened
  (exponential backoff) and the command sent on the new one. If it dies *after* sending,
  :class:`ConnectionLost` is raised: the command may or may not have run, and ``sbatch`` is
  not idempotent. Callers that know better pass ``run(..., idempotent=True)``. File
  operations are idempotent by construction (writes go to a fresh temporary name, then
  ``rename``) and are always retried after a reconnect.
* **Task data at the wire's speed.** ``put_file``/``get_file`` and their batch forms
  ``put_files``/``get_files`` (many files, one result each) drive the SFTP protocol themselves
  (:mod:`resel.backends.sftp_pipeline`): requests as large as the server allows, many in
  flight across the files of a batch, AES-GCM offered first, an 8 MiB window on the SFTP
  session — within 80 % of OpenSSH's scp for one big file and hundreds of small files a
  second (docs/benchmarks.md, "Task data transfers"), each file still atomic and hashed.
* **Host keys are checked like OpenSSH does** (``known_hosts`` read by backends/known_hosts.py:
  ``[host]:port``, hashed entries, wildcards and negations, ``@revoked`` keys refused,
  ``@cert-authority`` lines reported and unused, an unreadable line skipped with a warning);
  an unknown host is refused unless ``accept_new`` (OpenSSH's ``StrictHostKeyChecking
  accept-new``), and a changed or revoked key is always refused.

``~/.ssh/config`` is honoured through :class:`paramiko.SSHConfig`: Host aliases, HostName,
User, Port, IdentityFile, IdentitiesOnly, UserKnownHostsFile, GlobalKnownHostsFile,
StrictHostKeyChecking, HashKnownHosts and ProxyJump (a comma list of hops; each hop uses its
own config entry, but that entry's own ProxyJump is not followed). ProxyCommand is refused with
a message rather than silently ignored. ``Match exec`` (a local command paramiko runs when it
looks a host up) is honoured only in the user's own ``~/.ssh/config``: another file, named by a
sites file, holding one is refused with its name and line. Arguments given to
:class:`SSHTransport` (the site file) win over the config file.

Paths given to the file operations and ``cwd`` may start with ``~/``, expanded to the (remote)
user's home directory; argv words are never expanded.

**Private by default, whatever the umask.** Other users share a site's filesystem, and a
folder resel leaves group-writable (umask 002 in a group project folder is common on HPC)
would let them put files where the agent runs as you. So every directory ``makedirs`` (or
``write_file``) creates is 0700 and every file ``write_file`` writes is 0600 unless a mode is
given; both are set explicitly after creation, because mkdir and open pass their mode through
the umask. Existing directories are left as they are: backends.workdir checks the ones resel
relies on. ``stat`` and ``uid`` give that check what it needs on either transport.
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import functools
import io
import itertools
import logging
import os
import posixpath
import re
import select
import shlex
import socket
import stat as stat_mod
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import paramiko

from resel.backends import known_hosts, sftp_pipeline
from resel.backends.files import (ContentMismatch, Moved, NotRegularFile, Sink, open_regular, open_source,
                                  read_chunks)
from resel.errors import AuthError, ConnectionLost, HostKeyError, TransportError

__all__ = [
    "AuthError", "Completed", "ConnectionLost", "FileStat", "HostKeyError", "LocalTransport",
    "PRIVATE_DIR", "PRIVATE_FILE", "SSHTransport", "Transport", "TransportError", "make_transport",
    "shell_command",
]

T = TypeVar("T")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CHUNK = 1 << 16
#: OpenSSH's sshd allows 10 sessions per connection (MaxSessions); SFTP holds one.
_MAX_SESSIONS = 8
#: Files larger than this are read with paramiko's prefetch (parallel requests).
_PREFETCH_OVER = 1 << 20
#: ciphers tried first: AES-GCM is one AES pass with its own MAC (AES-NI, in OpenSSL), where
#: aes*-ctr adds an HMAC-SHA2 over every packet — on a 200 MB transfer the difference is a
#: third of paramiko's CPU time (docs/benchmarks.md, "Task data transfers")
_PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
#: what one file operation's failure is, as opposed to a dead connection: stays that file's
_FILE_ERRORS = (OSError, ContentMismatch, NotRegularFile, TransportError)
#: the modes of what resel creates on a site: nobody else may read, add or change anything
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


@dataclass(frozen=True)
class Completed:
    """A finished command: what ran, its exit status and its whole output (UTF-8, lenient).

    ``returncode`` follows the shell's conventions on both transports: 127 when the program
    is not found, 126 when it cannot be executed, non-zero when ``cwd`` does not exist;
    -1 over SSH when the remote process was killed by a signal.
    """

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class FileStat:
    """What the ownership checks need of a file: its mode bits (type included) and owner."""

    mode: int
    uid: int

    @property
    def is_dir(self) -> bool:
        return stat_mod.S_ISDIR(self.mode)

    @property
    def is_link(self) -> bool:
        return stat_mod.S_ISLNK(self.mode)


class FileTooLarge(ValueError):
    """A file longer than its reader allows (an agent record is a few hundred bytes)."""

    def __init__(self, path: str, limit: int):
        super().__init__(f"{path}: longer than {limit:,} bytes")
        self.path, self.limit = path, limit


#: every command run on a site, at DEBUG: where, argv, exit code, seconds (``RESEL_LOG=debug``)
log = logging.getLogger("resel.backends.transport")
# paramiko logs from its transport thread when a handshake dies (a site that never sends an SSH
# banner: "Exception (client): …" and a traceback), which Python's last-resort handler would
# print on the user's stderr; the site's error says what went wrong instead. A handler the
# application configures (RESEL_LOG=debug) still receives it.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def _logged(run: Callable) -> Callable:
    """Log each command a transport runs — the scheduler's argv as sent, its exit code (or the
    error) and how long it took — so a user can see what resel asked of a site and when.
    Neither the environment nor standard input is logged (a job script may carry secrets)."""
    @functools.wraps(run)
    def wrapper(self, argv: Sequence[str], **kw):
        if not log.isEnabledFor(logging.DEBUG):
            return run(self, argv, **kw)
        t0 = time.monotonic()
        where = getattr(self, "name", None) or "local"
        try:
            done = run(self, argv, **kw)
        except Exception as exc:
            log.debug("%s: %s -> %s after %.3f s", where, shlex.join(map(str, argv)), type(exc).__name__,
                      time.monotonic() - t0)
            raise
        log.debug("%s: %s -> exit %d in %.3f s", where, shlex.join(map(str, argv)), done.returncode,
                  time.monotonic() - t0)
        return done
    return wrapper


@runtime_checkable
class Transport(Protocol):
    """Run commands and move files on one site; both implementations are thread-safe."""

    name: str
    connections_opened: int

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            input: str | None = None, timeout: float | None = 60.0, cwd: str | None = None,
            idempotent: bool = False) -> Completed: ...

    def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None: ...

    def write_files(self, items: Sequence[tuple[str, bytes]], *, mode: int | None = None
                    ) -> list[Exception | None]: ...

    def read_files(self, items: Sequence[tuple[str, int | None]]) -> list[bytes | Exception]: ...

    def stat_files(self, paths: Sequence[str]) -> list[FileStat | Exception]: ...

    def read_file(self, path: str, *, limit: int | None = None) -> bytes: ...

    def listdir(self, path: str) -> list[str]: ...

    def entries(self, path: str) -> dict[str, FileStat]: ...

    def makedirs(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def exists(self, path: str) -> bool: ...

    def stat(self, path: str, *, follow: bool = False) -> FileStat: ...

    def uid(self) -> int: ...

    def home(self) -> str: ...

    def close(self) -> None: ...

    # task data (docs/data.md): whole files, atomic and hashed (resel.backends.files)
    def put_file(self, local: str, path: str, *, mode: int = PRIVATE_FILE, size: int | None = None,
                 sha256: str | None = None) -> Moved: ...

    def get_file(self, path: str, local: str, *, size: int | None = None, sha256: str | None = None) -> Moved: ...

    def put_files(self, items: Sequence[tuple[str, str, int | None, str | None]], *,
                  mode: int = PRIVATE_FILE) -> list[Moved | Exception]: ...

    def get_files(self, items: Sequence[tuple[str, str, int | None, str | None]]
                  ) -> list[Moved | Exception]: ...

    def rename(self, src: str, dst: str) -> None: ...

    def remove_tree(self, path: str) -> None: ...


# --------------------------------------------------------------------------- command building


def _check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """Refuse what cannot be passed through exec verbatim (a bare string would be split!)."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of words, not a string: no shell parses it")
    words = tuple(argv)
    if not words:
        raise ValueError("argv is empty")
    for word in words:
        if not isinstance(word, str):
            raise TypeError(f"argv words must be str, not {type(word).__name__}: {word!r}")
        if "\0" in word:
            raise ValueError(f"argv word contains a NUL byte: {word!r}")
    return words


def _check_env(env: Mapping[str, str] | None) -> None:
    """Names are checked because a remote ``env`` would take ``A;B=x`` as a command."""
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise TransportError(f"environment variable name {key!r} is not valid "
                                 "(letters, digits and _, not starting with a digit)")
        if not isinstance(value, str) or "\0" in value:
            raise TransportError(f"environment variable {key} must be a string without NUL")


def shell_command(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                  cwd: str | None = None) -> str:
    """The one string sent to a remote POSIX shell: every user string is quoted.

    >>> shell_command(["printf", "%s\\n", "$(id)"], env={"A": "1 2"}, cwd="/tmp/x y")
    "cd '/tmp/x y' && env 'A=1 2' printf '%s\\n' '$(id)'"
    """
    words = _check_argv(argv)
    _check_env(env)
    if env:
        words = ("env", *(f"{k}={v}" for k, v in env.items()), *words)
    command = shlex.join(words)
    if cwd is not None:
        if cwd.startswith("-"):
            cwd = "./" + cwd  # so that cd never reads it as an option or as "cd -"
        command = f"cd {shlex.quote(cwd)} && {command}"
    return command


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- local


def _local_makedirs(path: str) -> None:
    """mkdir -p whose new directories are 0700 whatever the umask; existing ones are left
    alone, and one another writer creates meanwhile is taken as it is (the workdir check of
    backends.workdir decides whether resel may use it)."""
    try:
        if stat_mod.S_ISDIR(os.stat(path).st_mode):
            return
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", path)
    except FileNotFoundError:
        pass
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path:
        _local_makedirs(parent)
    try:
        os.mkdir(path, PRIVATE_DIR)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    # mkdir's mode went through the umask; set it exactly, on the directory just made
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, PRIVATE_DIR)
    finally:
        os.close(fd)


class LocalTransport:
    """The machine resel runs on: for sites whose scheduler commands work right here."""

    def __init__(self) -> None:
        self.name = "local"
        self.connections_opened = 0

    def __repr__(self) -> str:
        return "LocalTransport()"

    @_logged
    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            input: str | None = None, timeout: float | None = 60.0, cwd: str | None = None,
            idempotent: bool = False) -> Completed:
        """Run argv without a shell; ``env`` is merged over this process's environment."""
        words = _check_argv(argv)
        _check_env(env)
        cwd = os.path.expanduser(cwd) if cwd is not None else None
        if cwd is not None and not os.path.isdir(cwd):
            return Completed(words, 1, "", f"cd: {cwd}: No such file or directory\n")
        kwargs: dict = {"input": input.encode()} if input is not None else {
            "stdin": subprocess.DEVNULL}
        try:
            proc = subprocess.run(list(words), check=False, capture_output=True, timeout=timeout,
                                  cwd=cwd, env={**os.environ, **env} if env else None, **kwargs)
        except subprocess.TimeoutExpired as e:
            raise TransportError(f"local: {words[0]} did not finish within {timeout} s and "
                                 "was killed") from e
        except FileNotFoundError:
            return Completed(words, 127, "", f"{words[0]}: command not found\n")
        except PermissionError as e:
            return Completed(words, 126, "", f"{words[0]}: {e.strerror}\n")
        return Completed(words, proc.returncode, _decode(proc.stdout), _decode(proc.stderr))

    def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        """Atomic: a reader sees the old content or the new, never a partial file.

        The temporary file is new (random name, O_EXCL|O_NOFOLLOW: mkstemp) and ``rename``
        replaces whatever is at ``path``, a planted symlink included, without following it.
        """
        path = os.path.expanduser(path)
        parent = os.path.dirname(path) or "."
        _local_makedirs(parent)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(path)}.",
                                   suffix=".tmp")
        try:
            os.fchmod(fd, mode if mode is not None else PRIVATE_FILE)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise

    def write_files(self, items: Sequence[tuple[str, bytes]], *, mode: int | None = None
                    ) -> list[Exception | None]:
        """Many :meth:`write_file` at once, ``items`` (path, bytes): each one's exception or
        None, in order. A few at a time, each on a thread: their fsyncs then share the file
        system's journal commits instead of waiting for one each (an agent's inbox files, a
        wave of them per coordinator turn)."""
        def write(path: str, data: bytes) -> None:
            self.write_file(path, data, mode=mode)
        return [None if isinstance(r, Moved) else r for r in _each_on_threads(
            [functools.partial(_moved_after, write, path, data) for path, data in items])]

    def read_files(self, items: Sequence[tuple[str, int | None]]) -> list[bytes | Exception]:
        """Many :meth:`read_file` (``items``: path, limit or None): each one's bytes or its
        exception (FileNotFoundError, FileTooLarge, ...), in order."""
        return [_read_one(self, path, limit) for path, limit in items]

    def stat_files(self, paths: Sequence[str]) -> list[FileStat | Exception]:
        """Many :meth:`stat` (of the path itself, not a link's target): each one's
        :class:`FileStat` or its exception (FileNotFoundError), in order."""
        return [_stat_one(self, path) for path in paths]

    def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        """The file's bytes; with ``limit``, :class:`FileTooLarge` for a file longer than that,
        before it is read (a record someone grew to gigabytes never fills our memory)."""
        with open(os.path.expanduser(path), "rb") as f:
            if limit is None:
                return f.read()
            data = f.read(limit + 1)
            if len(data) > limit:
                raise FileTooLarge(path, limit)
            return data

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(os.path.expanduser(path)))

    def entries(self, path: str) -> dict[str, FileStat]:
        """The names in a directory with each one's mode and owner (of a symlink itself)."""
        out = {}
        with os.scandir(os.path.expanduser(path)) as found:
            for entry in found:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:          # removed while listed
                    continue
                out[entry.name] = FileStat(st.st_mode, st.st_uid)
        return out

    def makedirs(self, path: str) -> None:
        """mkdir -p; what it creates is 0700 (see the module docstring)."""
        _local_makedirs(os.path.expanduser(path))

    def stat(self, path: str, *, follow: bool = False) -> FileStat:
        """Mode and owner of path (of a symlink itself unless ``follow``)."""
        path = os.path.expanduser(path)
        st = os.stat(path) if follow else os.lstat(path)
        return FileStat(st.st_mode, st.st_uid)

    def uid(self) -> int:
        return os.geteuid()

    def remove(self, path: str) -> None:
        """Remove a file or an empty directory; a missing path is fine."""
        path = os.path.expanduser(path)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.remove(path)
        except FileNotFoundError:
            pass

    def exists(self, path: str) -> bool:
        return os.path.lexists(os.path.expanduser(path))

    def home(self) -> str:
        return os.path.expanduser("~")

    def close(self) -> None:
        pass

    def put_file(self, local: str, path: str, *, mode: int = PRIVATE_FILE, size: int | None = None,
                 sha256: str | None = None) -> Moved:
        """Copy a file of this machine to ``path``: under a fresh name, hashed as it is read,
        renamed over ``path`` only if its size and SHA-256 are the expected ones
        (:class:`~resel.backends.files.ContentMismatch` otherwise; resel.backends.files)."""
        with open_source(local) as src, Sink(os.path.expanduser(path), mode) as sink:
            for block in read_chunks(src):
                sink.write(block)
            return sink.commit(size, sha256)

    def get_file(self, path: str, local: str, *, size: int | None = None, sha256: str | None = None) -> Moved:
        """Copy the regular file ``path`` (a link is refused: :class:`NotRegularFile`) to
        ``local``, atomically and checked as :meth:`put_file` does."""
        src, st = open_regular(os.path.expanduser(path))
        if size is not None and st.st_size > size:
            src.close()
            raise ContentMismatch(path, "its size", f"{size:,} bytes", f"{st.st_size:,} bytes")
        with src, Sink(local, limit=size) as sink:
            for block in read_chunks(src):
                sink.write(block)
            return sink.commit(size, sha256)

    def put_files(self, items: Sequence[tuple[str, str, int | None, str | None]], *,
                  mode: int = PRIVATE_FILE) -> list[Moved | Exception]:
        """Many :meth:`put_file` at once: ``items`` are (local, path, size, sha256), the result
        is each file's :class:`Moved` or exception, in order (:meth:`SSHTransport.put_files`
        says which). A few files at a time, each on a thread: their fsyncs and renames then
        share the file system's journal commits instead of waiting for one each."""
        return _each_on_threads([functools.partial(self.put_file, local, path, mode=mode, size=size,
                                                   sha256=sha256) for local, path, size, sha256 in items])

    def get_files(self, items: Sequence[tuple[str, str, int | None, str | None]]
                  ) -> list[Moved | Exception]:
        """Many :meth:`get_file` at once: ``items`` are (path, local, size, sha256); results as
        :meth:`put_files` gives them."""
        return _each_on_threads([functools.partial(self.get_file, path, local, size=size, sha256=sha256)
                                 for path, local, size, sha256 in items])

    def rename(self, src: str, dst: str) -> None:
        """Atomic rename over ``dst`` (replacing a link there, never following it)."""
        os.replace(os.path.expanduser(src), os.path.expanduser(dst))

    def remove_tree(self, path: str) -> None:
        """Remove a folder and everything in it without following a link (a link is removed,
        never what it points to); a missing path is fine."""
        _remove_tree_local(os.path.expanduser(path))


def _each(move: Callable[[], Moved]) -> Moved | Exception:
    """One file of a batch: its failure is its result, the batch goes on."""
    try:
        return move()
    except _FILE_ERRORS as e:
        return e


def _each_on_threads(moves: list[Callable[[], Moved]]) -> list[Moved | Exception]:
    if len(moves) <= 1:
        return [_each(move) for move in moves]
    with ThreadPoolExecutor(min(len(moves), sftp_pipeline.COMMITTERS)) as pool:
        return list(pool.map(_each, moves))


def _read_batch(sftp: paramiko.SFTPClient, limits: sftp_pipeline.Limits, jobs: list, results: list,
                name: str, *, too_large: Callable[[str, int], Exception]) -> None:
    """sftp_pipeline.read in the shape :meth:`SSHTransport._batch` calls a move."""
    sftp_pipeline.read(sftp, limits, jobs, results, name, too_large)


def _lstat_batch(sftp: paramiko.SFTPClient, limits: sftp_pipeline.Limits, jobs: list, results: list,
                 name: str) -> None:
    sftp_pipeline.lstat(sftp, limits, jobs, results, name)


def _stat_one(transport: "LocalTransport", path: str) -> FileStat | Exception:
    try:
        return transport.stat(path)
    except OSError as e:
        return e


def _read_one(transport: "LocalTransport", path: str, limit: int | None) -> bytes | Exception:
    """One file of a batch of reads: its failure is its result, the batch goes on."""
    try:
        return transport.read_file(path, limit=limit)
    except (OSError, FileTooLarge) as e:
        return e


def _moved_after(write: Callable[[str, bytes], None], path: str, data: bytes) -> Moved:
    """``write(path, data)``, as a batch of moves reports it (its size; no hash computed)."""
    write(path, data)
    return Moved(len(data), "")


def _one(result: Moved | Exception) -> Moved:
    """A batch of one's result, raised if it is an error."""
    if isinstance(result, Exception):
        raise result
    return result


def _remove_tree_local(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat_mod.S_ISDIR(st.st_mode):
        with suppress(FileNotFoundError):
            os.unlink(path)
        return
    with os.scandir(path) as entries:
        names = [(e.path, e.is_dir(follow_symlinks=False)) for e in entries]
    for child, is_dir in names:
        if is_dir:
            _remove_tree_local(child)
        else:
            with suppress(FileNotFoundError):
                os.unlink(child)
    with suppress(FileNotFoundError):
        os.rmdir(path)


# --------------------------------------------------------------------------- ssh: settings


@dataclass(frozen=True)
class _Endpoint:
    """One SSH hop with everything resolved from the arguments and ~/.ssh/config."""

    alias: str
    hostname: str
    port: int
    user: str
    keys: tuple[str, ...]          # key files offered, in order (empty: ~/.ssh/id_* defaults)
    use_agent: bool
    known_hosts: tuple[str, ...]   # user files; accept-new appends to the first
    global_known_hosts: tuple[str, ...]
    accept_new: bool
    hash_known_hosts: bool
    #: with no key named: None, paramiko tries the ~/.ssh/id_* defaults itself; a tuple, some
    #: of them are open to others and ignored (as ssh ignores them), the others offered here
    defaults: tuple[str, ...] | None = None
    ignored_keys: tuple[str, ...] = ()     # those ignored, for the error if none works

    @property
    def where(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def key_name(self) -> str:
        """The name known_hosts files use for this host."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _paths(value: str | list[str] | None) -> list[str]:
    if not value:
        return []
    items = value if isinstance(value, list) else value.split()
    return [os.path.expanduser(p) for p in items]


_MATCH_LINE = re.compile(r"\s*match(?:\s*=\s*|\s+)(.*)", re.IGNORECASE)


def _own_config(path: str) -> bool:
    """Whether path is the user's own ~/.ssh/config (the file their ssh reads anyway)."""
    own = os.path.expanduser("~/.ssh/config")
    try:
        return os.path.samefile(path, own)
    except OSError:
        return os.path.realpath(path) == os.path.realpath(own)


def _refuse_match_exec(path: str, text: str) -> None:
    """A ``Match exec`` line runs a local command when a host is looked up (paramiko runs it
    through a shell); a sites file naming a config file must not be a way to run commands, so
    only the user's own ~/.ssh/config may hold one. ``text`` is read as paramiko reads it."""
    for number, line in enumerate(io.StringIO(text), 1):   # ended by newlines only, as paramiko's
        m = _MATCH_LINE.match(line.strip())
        if not m:
            continue
        try:
            words = shlex.split(m.group(1))      # as paramiko splits it: a '#' there is no comment
        except ValueError:
            words = m.group(1).split()
        if any(w.lower().lstrip("!") == "exec" for w in words):
            raise TransportError(
                f"{path}, line {number}: `Match exec` runs a local command, and resel runs it only "
                "from your own ~/.ssh/config: move that block there, or remove it from the ssh_config "
                "file the sites file names")


def _load_config(path: str | None) -> paramiko.SSHConfig | None:
    """The ssh config (``path``, else ~/.ssh/config if there is one), read once and parsed from
    that text: refused, as OpenSSH's ssh refuses it, if someone else can change it (its
    ``Match exec`` runs as you), and any other file than ~/.ssh/config holding ``Match exec``."""
    from resel.trust import code_file_problem
    if path is None:
        default = os.path.expanduser("~/.ssh/config")
        if not os.path.isfile(default):
            return None
        path = default
    full = os.path.expanduser(path)
    try:
        with open(full, encoding="utf-8", errors="replace") as f:
            problem = code_file_problem(full, os.fstat(f.fileno()))
            text = f.read()
    except OSError as e:
        raise TransportError(f"cannot read SSH config file {path}: {e.strerror or e}") from e
    if problem is not None:
        raise TransportError(f"SSH config file {full} {problem}")
    own = _own_config(full)
    if not own:
        _refuse_match_exec(full, text)          # names the line
    try:
        config = paramiko.SSHConfig.from_text(text)
    except (paramiko.SSHException, ValueError) as e:
        raise TransportError(f"cannot read SSH config file {path}: {e}") from e
    # and what paramiko itself read: a line the check read otherwise must not run either
    if not own and any(str(m.get("type", "")).lower() == "exec"
                       for block in getattr(config, "_config", []) for m in block.get("matches", [])):
        raise TransportError(f"{full}: `Match exec` runs a local command, and resel runs it only from your own "
                             "~/.ssh/config: move that block there, or remove it from the ssh_config file the "
                             "sites file names")
    return config


def _open_key(path: str) -> str | None:
    """OpenSSH's check of a private key (sshkey_perm_ok): why a key of the user's that others
    may read or write is not to be used ("UNPROTECTED PRIVATE KEY FILE!"), else None; paramiko
    loads it without a word, so resel logged in with a key anyone on the machine could copy."""
    try:
        st = os.stat(path)
    except OSError:
        return None                               # paramiko says why it cannot be read
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        return (f"private key {path} is accessible by others (mode {stat_mod.S_IMODE(st.st_mode):04o}), so anyone "
                f"who read it can log in as you; run `chmod 600 {shlex.quote(path)}` (and replace the key if "
                "others may have copied it)")
    return None


def _refuse_open_key(alias: str, path: str) -> None:
    """A key named (the site's ``key``, an ``IdentityFile``) that others may read is refused:
    the user asked for it, and ssh would ignore it and fail later with a vaguer word."""
    problem = _open_key(path)
    if problem is not None:
        raise TransportError(f"ssh:{alias}: {problem}; ssh ignores such a key, and resel refuses it")


def _default_keys(alias: str) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """With no key named, the ~/.ssh/id_* keys paramiko would try, and those ignored: (None,
    ()) if none is open to others (paramiko looks for them itself), else the others and the
    open ones — ignored with a warning, as ssh ignores them ("This private key will be
    ignored") and goes on with the agent and the rest; refusing the connection for them
    stopped a user whose agent holds the key that works."""
    found = [os.path.expanduser(f"~/{d}/id_{t}") for t in ("rsa", "ecdsa", "ed25519") for d in (".ssh", "ssh")]
    found = [k for k in found if os.path.isfile(k)]
    open_ones = {k: p for k in found if (p := _open_key(k)) is not None}
    for problem in open_ones.values():
        log.warning("ssh:%s: %s; ignored, as ssh ignores it", alias, problem)
    if not open_ones:
        return None, ()
    return tuple(k for k in found if k not in open_ones), tuple(open_ones)


def _resolve(alias: str, config: paramiko.SSHConfig | None, *, user: str | None = None,
             port: int | None = None, keys: Sequence[str] = (), known_hosts: str | None = None,
             accept_new: bool = False) -> tuple[_Endpoint, dict]:
    """Arguments (the site file) first, then the config entry, then OpenSSH's defaults."""
    entry = dict(config.lookup(alias)) if config is not None else {}
    if keys:
        key_files = [os.path.expanduser(k) for k in keys]
        for k in key_files:
            if not os.path.isfile(k):
                raise TransportError(f"ssh:{alias}: key file {k} does not exist")
        use_agent = False  # an explicit key means that key: no surprises from an agent
    else:
        key_files = [k for k in _paths(entry.get("identityfile")) if os.path.isfile(k)]
        use_agent = entry.get("identitiesonly", "no").lower() != "yes" or not key_files
    for k in key_files:
        _refuse_open_key(alias, k)
    # with no key named, paramiko tries ~/.ssh/id_{rsa,ecdsa,ed25519} itself (look_for_keys)
    defaults, ignored = (None, ()) if key_files else _default_keys(alias)
    if known_hosts:
        files, global_files = [os.path.expanduser(known_hosts)], []
    else:
        files = _paths(entry.get("userknownhostsfile")) or [
            os.path.expanduser("~/.ssh/known_hosts")]
        global_files = _paths(entry.get("globalknownhostsfile")) or [
            "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]
    strict = entry.get("stricthostkeychecking", "ask").lower()
    try:
        port_number = int(port if port is not None else entry.get("port", 22))
    except ValueError as e:
        raise TransportError(f"ssh:{alias}: port {entry.get('port')!r} is not a number") from e
    endpoint = _Endpoint(
        alias=alias, hostname=entry.get("hostname", alias), port=port_number,
        user=user or entry.get("user") or getpass.getuser(), keys=tuple(key_files),
        use_agent=use_agent, known_hosts=tuple(files), global_known_hosts=tuple(global_files),
        accept_new=accept_new or strict in ("accept-new", "no", "off"),
        hash_known_hosts=entry.get("hashknownhosts", "no").lower() == "yes", defaults=defaults,
        ignored_keys=ignored)
    return endpoint, entry


def _parse_hop(hop: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]`` → (user, host, port)."""
    hop = hop.strip().removeprefix("ssh://")
    user, _, hostport = hop.rpartition("@")
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest.removeprefix(":") or None
    else:
        host, _, port = hostport.partition(":")
    return user or None, host, int(port) if port else None


def _fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's host key check, made by resel on every connection (paramiko is given no host
    keys of its own, so it always asks here): a revoked key is refused, a listed one accepted, a
    changed one refused, an unknown host refused or, with accept-new, recorded
    (backends/known_hosts.py reads the files)."""

    def __init__(self, site: str, endpoint: _Endpoint, entries: known_hosts.HostEntries):
        self.site = site
        self.endpoint = endpoint
        self.entries = entries

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        ep = self.endpoint
        found = known_hosts.verdict(self.entries, key)
        if found.status == "ok":
            return
        if found.status == "revoked":
            raise HostKeyError(
                f"{self.site}: the host key {ep.hostname}:{ep.port} offers ({key.get_name()} "
                f"{_fingerprint(key)}) is REVOKED ({found.entry.where}: @revoked): resel never accepts "
                "it, nor does ssh. The server may be an impostor, or the site still uses a key it "
                "withdrew: ask the site for its current key")
        if found.status == "changed":
            raise HostKeyError(
                f"{self.site}: the host key of {ep.key_name} has CHANGED: the server offers "
                f"{key.get_name()} {_fingerprint(key)} but known_hosts ({found.entry.where}) has "
                f"{_fingerprint(found.entry.key)}. This may be an attack; if the site announced a new "
                f"key, remove the old one with `ssh-keygen -R '{ep.key_name}' -f {found.entry.path}` "
                "and connect again")
        if not ep.accept_new:
            port_opt = f"-p {ep.port} " if ep.port != 22 else ""
            authorities = ""
            if self.entries.authorities:
                authorities = (f" (the @cert-authority line at {self.entries.authorities[0].where} is not "
                               "used: resel's SSH library checks no host certificates)")
            raise HostKeyError(
                f"{self.site}: the host key of {hostname} is not known ({key.get_name()} "
                f"{_fingerprint(key)}; looked in {', '.join(ep.known_hosts) or 'no file'}){authorities}. "
                f"Check that fingerprint with the site's documentation, then either connect "
                f"once with `ssh {port_opt}{ep.user}@{ep.hostname}` and accept it, or run "
                f"`ssh-keyscan {port_opt}{ep.hostname} >> {ep.known_hosts[0]}`, or set "
                f"accept_new_host_keys = true in the site file's access table")
        self._append(hostname, key)

    def _append(self, hostname: str, key: paramiko.PKey) -> None:
        path = self.endpoint.known_hosts[0]
        name = paramiko.HostKeys.hash_host(hostname) if self.endpoint.hash_known_hosts \
            else hostname
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        try:
            os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
            fd = _open_known_hosts(path)
            with os.fdopen(fd, "r+b") as f:
                size = f.seek(0, os.SEEK_END)
                if size:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        line = "\n" + line
                f.write(line.encode())
        except OSError as e:
            raise HostKeyError(f"{self.site}: cannot record the new host key of {hostname} "
                               f"in {path}: {e}") from e


def _open_known_hosts(path: str) -> int:
    """``path`` opened to append a host key, never through another user's link (one planted in a
    shared folder before the first connection had the line appended to a file of the user's).
    A link of the user's (or root's) is followed; a new file is made ``O_EXCL|O_NOFOLLOW``.

    Raises:
        OSError: it cannot be opened, or is a link or a file of another user's.
    """
    from resel.trust import trusted_owner, who
    me = os.geteuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat_mod.S_ISLNK(st.st_mode) and not trusted_owner(st.st_uid, me):
        raise OSError(errno.EPERM, f"it is a symbolic link owned by {who(st.st_uid)}; resel does not write "
                                   "through it")
    flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    if st is None:
        flags |= os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    elif not stat_mod.S_ISLNK(st.st_mode):
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags, 0o600)
    owner = os.fstat(fd).st_uid
    if not trusted_owner(owner, me):
        os.close(fd)
        raise OSError(errno.EPERM, f"it belongs to {who(owner)}")
    return fd


#: the host key algorithms of each key type a known_hosts line can hold
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}


def _offering_first(key_types: Sequence[str]) -> Callable[..., paramiko.Transport]:
    """A paramiko transport that asks first for the host key algorithms of the types known for
    the host (OpenSSH's order_hostkeyalgs): a server with several host keys then offers one
    known_hosts can vouch for. paramiko does this itself only from the host keys it was given,
    and resel gives it none (the check is resel's)."""
    wanted = [a for k in key_types for a in _ALGORITHMS.get(k, (k,))]

    def make(sock, **kwargs) -> paramiko.Transport:
        transport = _prefer_aead(sock, **kwargs)     # AES-GCM first too (task data's speed)
        if wanted:
            options = transport.get_security_options()
            offered = list(options.key_types)
            options.key_types = [a for a in offered if a in wanted] + [a for a in offered if a not in wanted]
        return transport
    return make


# --------------------------------------------------------------------------- ssh: connection


class _SFTP(paramiko.SFTPClient):
    """The connection's SFTP session, with the server's limits (resel.backends.sftp_pipeline).

    Its receive window is sftp_pipeline.SFTP_WINDOW, over the bytes a download keeps in flight
    (with paramiko's 2 MiB the server would wait for our window adjustments)."""

    limits: sftp_pipeline.Limits
    _inbox: bytearray

    def _read_packet(self) -> tuple[int, bytes]:
        """paramiko's, but taking everything the channel holds at once: paramiko's channel
        buffer shifts all it still holds on each partial read (an ``array`` sliced from the
        front), which costs a download with megabytes in flight more than its crypto; a
        ``bytearray`` drops its front in place."""
        inbox = self.__dict__.setdefault("_inbox", bytearray())
        while True:
            if len(inbox) >= 4:
                if inbox[0]:   # > 16 MB: garbage, as paramiko says
                    raise paramiko.SFTPError("Garbage packet received")
                size = int.from_bytes(inbox[:4], "big")
                if len(inbox) >= 4 + size:
                    kind, body = (inbox[4], bytes(inbox[5:4 + size])) if size else (0, b"")
                    del inbox[:4 + size]
                    return kind, body
            data = self.sock.recv(sftp_pipeline.SFTP_WINDOW)
            if not data:
                raise EOFError()
            inbox += data

    def _write_all(self, out: bytes) -> None:
        """paramiko's, without its copy of the rest of the message after each channel packet
        (a 255 KiB write goes out as eight 32 KiB packets: each copied once, not the rest)."""
        view = memoryview(out)
        most = getattr(self.sock, "out_max_packet_size", 0) or len(out)
        while view:
            n = self.sock.send(bytes(view[:most]))
            if n <= 0:
                raise EOFError()
            view = view[n:]

    @classmethod
    def start(cls, client: paramiko.SSHClient) -> _SFTP:
        sftp = cls.from_transport(client.get_transport(), window_size=sftp_pipeline.SFTP_WINDOW,
                                  max_packet_size=sftp_pipeline.SFTP_PACKET)
        if sftp is None:
            raise paramiko.SSHException("the server refused an SFTP session")
        try:
            sftp.limits = sftp_pipeline.server_limits(sftp)
        except BaseException:
            sftp.close()
            raise
        return sftp


def _prefer_aead(sock: object, **kw: object) -> paramiko.Transport:
    """paramiko's Transport, offering AES-GCM first (see _PREFERRED_CIPHERS); the rest of its
    list, and so what an older server gets, is unchanged."""
    transport = paramiko.Transport(sock, **kw)
    options = transport.get_security_options()
    first = [c for c in _PREFERRED_CIPHERS if c in options.ciphers]
    options.ciphers = (*first, *(c for c in options.ciphers if c not in first))
    return transport



class _Connection:
    """One live SSH connection to a site, with its jump hosts and (lazily) its SFTP session."""

    def __init__(self, clients: list[paramiko.SSHClient], sockets: list[socket.socket]):
        self.clients = clients        # jump hosts first, the site last
        self.sockets = sockets        # the raw TCP socket(s) this side opened
        self.transport: paramiko.Transport = clients[-1].get_transport()
        self.sftp: _SFTP | None = None

    def alive(self) -> bool:
        return all(c.get_transport() is not None and c.get_transport().is_active()
                   for c in self.clients)

    def sftp_broken(self) -> bool:
        return self.sftp is not None and self.sftp.get_channel().closed

    def close(self) -> None:
        if self.sftp is not None:
            with suppress(Exception):
                self.sftp.close()
        for client in reversed(self.clients):
            with suppress(Exception):
                client.close()
        for sock in self.sockets:
            with suppress(OSError):
                sock.close()


class _Lost(Exception):
    """Internal: the connection died while a command was in flight."""


_CONNECTION_ERRORS = (paramiko.SSHException, EOFError, OSError)


class SSHTransport:
    """A site reached over SSH: one persistent paramiko connection, opened on first use.

    ``retries`` is the number of attempts to reopen a connection found dead, ``backoff`` the
    first pause between them (doubling). The very first connection is tried once: a wrong
    host name or port is not worth waiting for. Thread-safe: commands run concurrently on
    separate channels (at most 8 at once, under OpenSSH's MaxSessions of 10); SFTP calls are
    serialised.
    """

    def __init__(self, host: str, *, user: str | None = None, port: int | None = None,
                 key_filename: str | Sequence[str] | None = None, ssh_config: str | None = None,
                 known_hosts: str | None = None, accept_new: bool = False,
                 keepalive: float = 15.0, connect_timeout: float = 10.0, retries: int = 3,
                 backoff: float = 1.0):
        self.host = host
        self.name = f"ssh:{host}"
        self.connections_opened = 0
        self.keepalive = keepalive
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.backoff = backoff
        keys = [key_filename] if isinstance(key_filename, str) else list(key_filename or [])
        config = _load_config(ssh_config)
        self._target, entry = _resolve(host, config, user=user, port=port, keys=keys,
                                       known_hosts=known_hosts, accept_new=accept_new)
        jumps = entry.get("proxyjump", "")
        if entry.get("proxycommand") and not jumps and entry["proxycommand"] != "none":
            raise TransportError(f"{self.name}: ProxyCommand in the SSH config is not "
                                 "supported; use ProxyJump")
        self._jumps: list[_Endpoint] = []
        if jumps and jumps.lower() != "none":
            for hop in jumps.split(","):
                hop_user, hop_host, hop_port = _parse_hop(hop)
                hop_ep, hop_entry = _resolve(hop_host, config, user=hop_user, port=hop_port,
                                             known_hosts=known_hosts, accept_new=accept_new)
                if not hop_ep.keys and keys and not hop_entry.get("identityfile"):
                    hop_ep = _resolve(hop_host, config, user=hop_user, port=hop_port, keys=keys,
                                      known_hosts=known_hosts, accept_new=accept_new)[0]
                self._jumps.append(hop_ep)
        self._lock = threading.RLock()          # guards connecting and self._conn
        self._sftp_lock = threading.Lock()      # paramiko's SFTPClient is not thread-safe
        self._sessions = threading.BoundedSemaphore(_MAX_SESSIONS)
        self._conn: _Connection | None = None
        self._ever_connected = False
        self._home: str | None = None
        self._uid: int | None = None

    def __repr__(self) -> str:
        via = f" via {','.join(j.where for j in self._jumps)}" if self._jumps else ""
        return f"SSHTransport({self._target.where}{via})"

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- connecting

    def _tcp(self, ep: _Endpoint) -> socket.socket:
        try:
            sock = socket.create_connection((ep.hostname, ep.port), timeout=self.connect_timeout)
        except TimeoutError as e:
            raise TransportError(
                f"{self.name}: {ep.hostname}:{ep.port} did not answer within "
                f"{self.connect_timeout:g} s; check the host name and port, and that the site "
                "is reachable from here (VPN, firewall)") from e
        except OSError as e:
            raise TransportError(
                f"{self.name}: cannot connect to {ep.hostname}:{ep.port}: "
                f"{e.strerror or e}; check the host name and port in the site file or "
                "~/.ssh/config") from e
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as OpenSSH: no 40 ms stalls
        return sock

    def _tunnel(self, via: paramiko.SSHClient, via_ep: _Endpoint,
                ep: _Endpoint) -> paramiko.Channel:
        try:
            return via.get_transport().open_channel(
                "direct-tcpip", (ep.hostname, ep.port), ("127.0.0.1", 0),
                timeout=self.connect_timeout)
        except _CONNECTION_ERRORS as e:
            raise TransportError(f"{self.name}: jump host {via_ep.where} could not connect to "
                                 f"{ep.hostname}:{ep.port}: {e}") from e

    def _auth_error(self, ep: _Endpoint, e: Exception) -> AuthError:
        """The site refused every key tried (or there was none to try): which, and what to do."""
        tried = ", ".join(ep.keys) if ep.keys else "the ssh agent and ~/.ssh/id_rsa, id_ecdsa, id_ed25519"
        if ep.ignored_keys:
            tried += (f" — not {', '.join(ep.ignored_keys)}, ignored as ssh ignores them: others may read "
                      f"them (`chmod 600 {' '.join(shlex.quote(k) for k in ep.ignored_keys)}`)")
        return AuthError(
            f"{self.name}: {ep.where} refused authentication ({e}); keys tried: {tried}. "
            "Check that the public key is in ~/.ssh/authorized_keys on the site, or set "
            "`key` in the site's access table (or IdentityFile in ~/.ssh/config)")

    def _handshake(self, ep: _Endpoint,
                   sock: socket.socket | paramiko.Channel) -> paramiko.SSHClient:
        try:
            entries = known_hosts.read_entries([*ep.known_hosts, *ep.global_known_hosts], ep.key_name)
        except OSError as e:
            raise HostKeyError(f"{self.name}: cannot read known_hosts file {e.filename}: "
                               f"{e.strerror or e}") from e
        except known_hosts.UntrustedFile as e:
            raise HostKeyError(f"{self.name}: {e}") from e
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_KnownHostsPolicy(self.name, ep, entries))
        t = self.connect_timeout
        try:
            client.connect(ep.hostname, ep.port, username=ep.user, key_filename=list(ep.keys or ep.defaults or ()),
                           look_for_keys=not ep.keys and ep.defaults is None, allow_agent=ep.use_agent, sock=sock,
                           timeout=t, banner_timeout=t, auth_timeout=t, channel_timeout=t,
                           transport_factory=_offering_first(entries.key_types()))
            return client
        except HostKeyError:
            client.close()
            raise
        except paramiko.AuthenticationException as e:
            client.close()
            raise self._auth_error(ep, e) from e
        except TimeoutError as e:
            client.close()
            raise TransportError(f"{self.name}: SSH handshake with {ep.hostname}:{ep.port} "
                                 f"timed out after {t:g} s") from e
        except _CONNECTION_ERRORS as e:
            transport = client.get_transport()
            greeted = transport is None or bool(transport.remote_version)
            client.close()
            if "No authentication methods available" in str(e):   # no key and no agent at all
                raise self._auth_error(ep, e) from e
            if not greeted:     # paramiko then says only "No existing session"
                raise TransportError(f"{self.name}: {ep.hostname}:{ep.port} took the connection but sent no SSH "
                                     f"greeting within {t:g} s; check that an SSH server listens on that port "
                                     "and answers (the site file's host and port, or ~/.ssh/config)") from e
            raise TransportError(f"{self.name}: SSH handshake with {ep.hostname}:{ep.port} "
                                 f"failed: {e}") from e
        except BaseException:
            client.close()
            raise

    def _open(self) -> _Connection:
        clients: list[paramiko.SSHClient] = []
        sockets: list[socket.socket] = []
        try:
            hops = [*self._jumps, self._target]
            for i, ep in enumerate(hops):
                if i == 0:
                    sock: socket.socket | paramiko.Channel = self._tcp(ep)
                    sockets.append(sock)
                else:
                    sock = self._tunnel(clients[-1], hops[i - 1], ep)
                self.connections_opened += 1
                clients.append(self._handshake(ep, sock))
                if self.keepalive > 0:
                    clients[-1].get_transport().set_keepalive(max(1, round(self.keepalive)))
            return _Connection(clients, sockets)
        except BaseException:
            for client in reversed(clients):
                client.close()
            for s in sockets:
                s.close()
            raise

    def _connection(self) -> _Connection:
        """The live connection, opened or reopened (with backoff) as needed."""
        with self._lock:
            conn = self._conn
            if conn is not None and conn.alive():
                return conn
            if conn is not None:
                conn.close()
                self._conn = None
            if not self._ever_connected:
                conn = self._open()
            else:
                conn = self._reopen()
            self._conn, self._ever_connected = conn, True
            return conn

    def _reopen(self) -> _Connection:
        attempts = max(1, self.retries)
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                return self._open()
            except (HostKeyError, AuthError):
                raise  # retrying cannot fix these
            except TransportError as e:
                last = e
        raise TransportError(f"{last} (gave up after {attempts} reconnection attempts)") from last

    def _discard(self, conn: _Connection) -> None:
        """Forget a dead connection (unless another thread already replaced it)."""
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.close()

    def drop(self) -> None:
        """Cut the TCP link under the connection, as a network failure would (for tests)."""
        with self._lock:
            conn = self._conn
        if conn is not None:
            for sock in conn.sockets:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the connection; a later call opens a new one."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ---- commands

    @_logged
    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            input: str | None = None, timeout: float | None = 60.0, cwd: str | None = None,
            idempotent: bool = False) -> Completed:
        """Run argv remotely; see the module docstring for when it is re-sent."""
        words = _check_argv(argv)
        if cwd is not None:
            cwd = self._expand(cwd)
        command = shell_command(words, env=env, cwd=cwd)
        stdin = input.encode() if input is not None else None
        if stdin is None:
            # No input: the remote shell gives the command /dev/null instead of a channel EOF.
            # paramiko builds an EOF under the channel's lock and sends it after releasing it;
            # a fast command's CLOSE handled in between put our EOF after our CLOSE, and sshd
            # then dropped the whole connection ("ieof packet referred to nonexistent channel").
            command += " </dev/null"
        for attempt in itertools.count():
            conn = self._connection()
            with self._sessions:
                try:
                    chan = conn.transport.open_session(timeout=self.connect_timeout)
                except _CONNECTION_ERRORS as e:
                    if isinstance(e, paramiko.ChannelException) and conn.alive():
                        raise TransportError(f"{self.name}: {self._target.where} refused a new "
                                             f"session: {e}") from e
                    self._discard(conn)  # dead before anything was sent: safe to go again
                    if attempt >= self.retries:
                        raise TransportError(f"{self.name}: connection to "
                                             f"{self._target.where} keeps dying: {e}") from e
                    continue
                try:
                    return self._exchange(chan, conn, words, command, stdin, timeout)
                except _Lost as e:
                    self._discard(conn)
                    if idempotent and attempt < self.retries:
                        continue
                    then = f"it was sent {attempt + 1} times" if idempotent else \
                        "it may or may not have taken effect, so it was not sent again"
                    raise ConnectionLost(
                        f"{self.name}: connection to {self._target.where} lost while "
                        f"{words[0]!r} was running; {then}") from e.__cause__
                finally:
                    _close(chan)
        raise AssertionError("unreachable")

    def _exchange(self, chan: paramiko.Channel, conn: _Connection, words: tuple[str, ...],
                  command: str, stdin: bytes | None, timeout: float | None) -> Completed:
        try:
            chan.exec_command(command)
        except _CONNECTION_ERRORS as e:
            # EOFError/OSError: the link died under the request (a drop the transport's thread
            # has not noticed yet looks alive); an SSHException on a live link is sshd's refusal
            if conn.alive() and not chan.closed and not isinstance(e, (EOFError, OSError)):
                raise TransportError(f"{self.name}: could not start {words[0]!r}: {e}") from e
            raise _Lost() from e
        writer = None
        if stdin is not None:   # (without input the command reads /dev/null: see run)
            writer = threading.Thread(target=_feed, args=(chan, stdin), daemon=True)
            writer.start()
        out, err = bytearray(), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            while chan.recv_ready():
                out += chan.recv(_CHUNK)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(_CHUNK)
            ended = chan.closed or (chan.eof_received and chan.exit_status_ready())
            if ended and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if wait <= 0:
                _kill(chan)
                raise TransportError(f"{self.name}: {words[0]!r} did not finish within "
                                     f"{timeout:g} s on {self._target.hostname}; sshd was asked "
                                     "to kill it and its channel was closed")
            if chan.eof_received:
                chan.status_event.wait(wait)  # the pipe stays readable after EOF
            else:
                select.select([chan], [], [], wait)
        if writer is not None and writer.is_alive():  # the command left input unread
            _close(chan)
            writer.join(timeout=1.0)
        if chan.exit_status == -1 and (not chan.eof_received or not conn.alive()):
            raise _Lost()
        return Completed(words, chan.exit_status, _decode(bytes(out)), _decode(bytes(err)))

    # ---- files

    def _expand(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return self.home() + path[1:]
        return path

    def _sftp(self, what: str, path: str, op: Callable[[paramiko.SFTPClient], T]) -> T:
        """Run an idempotent SFTP operation, again on a new connection if this one died."""
        last: BaseException | None = None
        for _ in range(self.retries + 1):
            conn = self._connection()
            try:
                with self._sftp_lock:
                    if conn.sftp is None:
                        # Failing here is a dead link or a server without SFTP; the retries
                        # tell them apart, and the final message names both.
                        try:
                            conn.sftp = _SFTP.start(conn.clients[-1])
                        except AttributeError as e:
                            # another thread closed this connection after we took it (a drop):
                            # paramiko's client has no transport any more — a dead link
                            raise EOFError("the connection was closed while opening SFTP") from e
                    return op(conn.sftp)
            except OSError as e:
                if e.errno is not None:  # the server answered: a genuine file error
                    raise type(e)(e.errno, f"{e.strerror} ({self.name})", path) from e
                if conn.alive() and not conn.sftp_broken() and conn.sftp is not None:
                    raise TransportError(f"{self.name}: {what} {path} failed: {e}") from e
                last = e
            except (paramiko.SSHException, EOFError) as e:
                last = e
            self._discard(conn)
        hint = " (does the server offer the sftp subsystem?)" if conn.sftp is None else ""
        raise ConnectionLost(f"{self.name}: connection to {self._target.where} kept failing "
                             f"during {what} {path}: {last!r}{hint}") from last

    def write_file(self, path: str, data: bytes, *, mode: int | None = None) -> None:
        """Atomic: written to a fresh name in the same directory, then renamed over path."""
        path = self._expand(path)
        parent, base = posixpath.split(path)

        def op(sftp: paramiko.SFTPClient) -> None:
            if parent:
                _sftp_makedirs(sftp, parent)
            tmp = posixpath.join(parent, f".{base}.{uuid.uuid4().hex[:12]}.tmp")
            try:
                with _sftp_create(sftp, tmp, mode if mode is not None else PRIVATE_FILE) as f:
                    f.set_pipelined(True)
                    f.write(data)
                try:
                    sftp.posix_rename(tmp, path)
                except OSError as e:  # servers without the OpenSSH extension
                    if e.errno is not None:
                        raise
                    with suppress(FileNotFoundError):
                        sftp.remove(path)
                    sftp.rename(tmp, path)
            except BaseException:
                with suppress(Exception):
                    sftp.remove(tmp)
                raise

        self._sftp("write", path, op)

    def write_files(self, items: Sequence[tuple[str, bytes]], *, mode: int | None = None
                    ) -> list[Exception | None]:
        """Many :meth:`write_file` at once, ``items`` (path, bytes), their requests in flight
        together over the one SFTP session (sftp_pipeline): an agent's inbox files, a wave per
        coordinator turn, cost a round trip for the wave instead of five per file. Each file is
        atomic as :meth:`write_file` makes it (a fresh name, O_EXCL, the mode sent with the
        OPEN, posix-rename over its name). A file whose folder is missing is written again by
        :meth:`write_file`, which makes the folders. Returns each one's exception or None, in
        order; only a site that cannot be reached again raises (as :meth:`put_files`)."""
        chosen = mode if mode is not None else PRIVATE_FILE
        jobs = [(bytes(data), self._expand(path), chosen, None, None) for path, data in items]
        results: list[Exception | None] = []
        for (data, path, _m, _s, _h), result in zip(jobs, self._batch("put", sftp_pipeline.put, jobs)):
            if isinstance(result, FileNotFoundError):     # its folder is not there yet
                try:
                    self.write_file(path, data, mode=mode)
                    result = None
                except Exception as e:   # noqa: BLE001 - that file's own result
                    result = e
            results.append(None if isinstance(result, Moved) else result)
        return results

    def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        """The file's bytes; with ``limit``, :class:`FileTooLarge` for a longer file, known from
        its size before any byte is read."""
        def op(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(path, "rb") as f:
                size = f.stat().st_size or 0
                if limit is not None and size > limit:
                    raise FileTooLarge(path, limit)
                if size > _PREFETCH_OVER:  # pipelined reads, but from a thread of paramiko's
                    f.prefetch(size)      # own that a drop would leave complaining on stderr
                data = f.read()
            if len(data) < size:   # paramiko reports a link dropped mid-read as end of file
                raise EOFError(f"short read: {len(data)} of {size} bytes")
            return data

        path = self._expand(path)
        return self._sftp("read", path, op)

    def read_files(self, items: Sequence[tuple[str, int | None]]) -> list[bytes | Exception]:
        """Many small :meth:`read_file` at once (``items``: path, limit or None), their requests
        in flight together over the one SFTP session (sftp_pipeline): a pilot's new records cost
        about one round trip instead of five each. Each one's bytes or its exception
        (FileNotFoundError for a file gone, :class:`FileTooLarge` over its limit, found as the
        bytes pass it), in order; only a site that cannot be reached again raises."""
        jobs = [(self._expand(path), limit) for path, limit in items]
        move = functools.partial(_read_batch, too_large=FileTooLarge)
        return self._batch("read", move, jobs)    # type: ignore[return-value]

    def stat_files(self, paths: Sequence[str]) -> list[FileStat | Exception]:
        """Many :meth:`stat` (``lstat``: a link is a link) at once, their requests in flight
        together: each one's :class:`FileStat` or its exception (FileNotFoundError for a path
        that is not there), in order; only a site that cannot be reached again raises."""
        jobs = [self._expand(path) for path in paths]
        return [FileStat(r.st_mode or 0, r.st_uid if r.st_uid is not None else -1)
                if isinstance(r, paramiko.SFTPAttributes) else r
                for r in self._batch("lstat", _lstat_batch, jobs)]

    def listdir(self, path: str) -> list[str]:
        path = self._expand(path)
        return sorted(self._sftp("list", path, lambda sftp: sftp.listdir(path)))

    def entries(self, path: str) -> dict[str, FileStat]:
        """The names in a directory with each one's mode and owner: one SFTP listing, as
        :meth:`listdir` (which is paramiko's listdir_attr without the attributes)."""
        path = self._expand(path)
        found = self._sftp("list", path, lambda sftp: sftp.listdir_attr(path))
        return {a.filename: FileStat(a.st_mode or 0, a.st_uid if a.st_uid is not None else -1) for a in found}

    def makedirs(self, path: str) -> None:
        """mkdir -p; what it creates is 0700 (see the module docstring)."""
        path = self._expand(path)
        self._sftp("makedirs", path, lambda sftp: _sftp_makedirs(sftp, path))

    def stat(self, path: str, *, follow: bool = False) -> FileStat:
        """Mode and owner of path (of a symlink itself unless ``follow``)."""
        path = self._expand(path)
        st = self._sftp("stat", path, lambda sftp: sftp.stat(path) if follow else sftp.lstat(path))
        return FileStat(st.st_mode or 0, st.st_uid if st.st_uid is not None else -1)

    def uid(self) -> int:
        """The remote user's numeric id (``id -u``, asked once): SFTP reports owners by number."""
        if self._uid is None:
            done = self.run(["id", "-u"], idempotent=True)
            if done.returncode != 0 or not done.stdout.strip().isdigit():
                raise TransportError(f"{self.name}: `id -u` did not give a user id: "
                                     f"{(done.stderr or done.stdout).strip()[:200]!r}")
            self._uid = int(done.stdout.strip())
        return self._uid

    def remove(self, path: str) -> None:
        """Remove a file or an empty directory; a missing path is fine."""
        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                st = sftp.lstat(path)
            except FileNotFoundError:
                return
            if stat_mod.S_ISDIR(st.st_mode or 0):
                sftp.rmdir(path)
            else:
                with suppress(FileNotFoundError):
                    sftp.remove(path)

        path = self._expand(path)
        self._sftp("remove", path, op)

    def exists(self, path: str) -> bool:
        def op(sftp: paramiko.SFTPClient) -> bool:
            try:
                sftp.lstat(path)
                return True
            except FileNotFoundError:
                return False

        path = self._expand(path)
        return self._sftp("stat", path, op)

    def home(self) -> str:
        """The remote user's home directory (where SFTP starts), asked once."""
        if self._home is None:
            self._home = self._sftp("normalize", ".", lambda sftp: sftp.normalize("."))
        return self._home

    def put_file(self, local: str, path: str, *, mode: int = PRIVATE_FILE, size: int | None = None,
                 sha256: str | None = None) -> Moved:
        """Copy a file of this machine to ``path`` on the site over SFTP (many large writes in
        flight: resel.backends.sftp_pipeline): under a fresh name (O_EXCL), hashed as it is
        read, renamed over ``path`` only if its size and SHA-256 are the expected ones
        (ContentMismatch otherwise: resel.backends.files). The folder must exist."""
        return _one(self.put_files([(local, path, size, sha256)], mode=mode)[0])

    def get_file(self, path: str, local: str, *, size: int | None = None, sha256: str | None = None) -> Moved:
        """Copy the regular file ``path`` of the site (``lstat`` first: a link, folder or device
        is refused with :class:`NotRegularFile`) to ``local`` (many large reads in flight),
        atomically and checked as :meth:`put_file` does. The local folder must exist."""
        return _one(self.get_files([(path, local, size, sha256)])[0])

    def put_files(self, items: Sequence[tuple[str, str, int | None, str | None]], *,
                  mode: int = PRIVATE_FILE) -> list[Moved | Exception]:
        """Upload many files at once, each by :meth:`put_file`'s rules, all over the one SFTP
        session with their requests in flight together (a small file costs no round trip of
        its own: 1,000 inputs of 10 KB take about a second, not one after the other).

        ``items`` are ``(local, path, size, sha256)``: a file of this machine, where it goes on
        the site (``~/`` expanded; its folder must exist), and what it must be (None: not
        checked). ``mode`` is every new file's (0600; the task-data cache uses 0400).

        Returns one result per item, in order: its :class:`~resel.backends.files.Moved` (size
        and SHA-256 of what was sent), or the exception :meth:`put_file` would have raised for
        it — ``ContentMismatch`` (nothing is left under its name), ``FileNotFoundError`` or
        ``PermissionError`` (local or on the site, the message says which), a
        :class:`TransportError` for another refusal of the server — while the other files go
        on. Only a site that cannot be reached again raises (:class:`ConnectionLost`, or the
        :class:`TransportError` of the failed reconnection); the exception's ``results``
        attribute then holds what was known (None for the files whose fate is unknown:
        sending them again is safe)."""
        jobs = [(local, self._expand(path), mode, size, sha256) for local, path, size, sha256 in items]
        return self._batch("put", sftp_pipeline.put, jobs)

    def get_files(self, items: Sequence[tuple[str, str, int | None, str | None]]
                  ) -> list[Moved | Exception]:
        """Download many files at once, each by :meth:`get_file`'s rules (a regular file only,
        read into a fresh local name, fsync'ed, checked, renamed), their requests in flight
        together over the one SFTP session.

        ``items`` are ``(path, local, size, sha256)``: the file on the site, where it goes here
        (its folder must exist), and what it must be (None: not checked). Results as
        :meth:`put_files` gives them, with :class:`NotRegularFile` for a link, folder, device
        or pipe on the site (never opened) and ``OSError`` for this machine's disk (ENOSPC)."""
        jobs = [(self._expand(path), local, size, sha256) for path, local, size, sha256 in items]
        return self._batch("get", sftp_pipeline.get, jobs)

    def _batch(self, what: str, move: Callable, jobs: list[tuple]) -> list[Moved | Exception]:
        """Run a batch over the SFTP session; after a drop, again on a new connection for the
        files not finished (each file is idempotent: a fresh temporary name, then rename)."""
        results: list[Moved | Exception | None] = [None] * len(jobs)
        if not jobs:
            return []
        first = jobs[0] if isinstance(jobs[0], str) else jobs[0][1 if what == "put" else 0]
        label = first if len(jobs) == 1 else f"{len(jobs)} files"
        try:
            self._sftp(what, label, lambda sftp: move(sftp, sftp.limits, jobs, results, self.name))
        except TransportError as e:    # the site could not be reached again (ConnectionLost, ...)
            e.results = results
            raise
        return results   # type: ignore[return-value]   (every one is set once the batch ends)

    def rename(self, src: str, dst: str) -> None:
        """Atomic rename over ``dst`` (OpenSSH's posix-rename)."""
        src, dst = self._expand(src), self._expand(dst)
        self._sftp("rename", src, lambda sftp: sftp.posix_rename(src, dst))

    def remove_tree(self, path: str) -> None:
        """Remove a folder and everything in it without following a link; missing is fine."""
        path = self._expand(path)

        def op(sftp: paramiko.SFTPClient) -> None:
            def walk(p: str) -> None:
                try:
                    st = sftp.lstat(p)
                except FileNotFoundError:
                    return
                if not stat_mod.S_ISDIR(st.st_mode or 0):
                    with suppress(FileNotFoundError):
                        sftp.remove(p)
                    return
                for entry in sftp.listdir_attr(p):
                    child = posixpath.join(p, entry.filename)
                    if stat_mod.S_ISDIR(entry.st_mode or 0):
                        walk(child)
                    else:
                        with suppress(FileNotFoundError):
                            sftp.remove(child)
                with suppress(FileNotFoundError):
                    sftp.rmdir(p)
            walk(path)

        self._sftp("remove", path, op)


def _feed(chan: paramiko.Channel, data: bytes) -> None:
    """Write stdin from its own thread, so a command that talks back cannot deadlock us."""
    with suppress(*_CONNECTION_ERRORS):  # the command may exit without reading it all
        chan.sendall(data)
        chan.shutdown_write()


def _close(chan: paramiko.Channel) -> None:
    """Close a channel whose link may be dead: paramiko then raises EOFError (or OSError) from
    the close message it cannot send, which would replace the command's result — or the
    ConnectionLost that says what happened — with a bare EOFError."""
    with suppress(*_CONNECTION_ERRORS):
        chan.close()


def _kill(chan: paramiko.Channel) -> None:
    """Ask sshd to SIGKILL the command (RFC 4254 "signal"), then close its channel."""
    with suppress(Exception):
        msg = paramiko.Message()
        msg.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
        msg.add_int(chan.remote_chanid)
        msg.add_string("signal")
        msg.add_boolean(False)
        msg.add_string("KILL")
        chan.transport._send_user_message(msg)
    _close(chan)


def _sftp_create(sftp: paramiko.SFTPClient, path: str, mode: int) -> paramiko.SFTPFile:
    """A new file (O_CREAT|O_EXCL: never through a planted link) that never has more than
    ``mode``: the permissions go with the SFTP OPEN request itself, which the server applies
    under its umask (so never more open), instead of a chmod that would cost a round trip per
    task file. paramiko's public ``open`` sends no attributes, so the request is made the way
    ``open`` makes it; without that internal, open then chmod."""
    request = getattr(sftp, "_request", None)
    if request is None:
        f = sftp.open(path, "wbx")
        f.chmod(mode)
        return f
    attrs = paramiko.SFTPAttributes()
    attrs.st_mode = mode
    flags = paramiko.sftp.SFTP_FLAG_WRITE | paramiko.sftp.SFTP_FLAG_CREATE | paramiko.sftp.SFTP_FLAG_EXCL
    kind, msg = request(paramiko.sftp.CMD_OPEN, path, flags, attrs)
    if kind != paramiko.sftp.CMD_HANDLE:
        raise paramiko.SFTPError(f"expected a handle opening {path}")
    return paramiko.SFTPFile(sftp, msg.get_binary(), "wb")


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """mkdir -p over SFTP, new directories 0700, tolerant of another writer creating the same
    directories."""
    try:
        if stat_mod.S_ISDIR(sftp.stat(path).st_mode or 0):
            return
        raise FileExistsError(17, "exists and is not a directory", path)
    except FileNotFoundError:
        pass
    parent = posixpath.dirname(path.rstrip("/"))
    if parent and parent != path:
        _sftp_makedirs(sftp, parent)
    try:
        sftp.mkdir(path, PRIVATE_DIR)
    except OSError as e:
        try:
            made = stat_mod.S_ISDIR(sftp.stat(path).st_mode or 0)
        except OSError:
            made = False
        if not made:
            raise e     # mkdir's own reason (permission denied, ...), not the stat's
        return     # another writer made it: taken as it is (see _local_makedirs)
    sftp.chmod(path, PRIVATE_DIR)   # the server's umask applied to mkdir's mode


# --------------------------------------------------------------------------- factory


def make_transport(spec: Mapping[str, object]) -> Transport:
    """A transport from a site file's ``access`` table.

    ``{"transport": "local"}`` or ``{"transport": "ssh", "host": ALIAS}`` with optional
    ``user``, ``port``, ``key`` (a path or a list), ``ssh_config``, ``known_hosts``,
    ``accept_new_host_keys``, ``connect_timeout``, ``keepalive``, ``retries``. Other keys are
    left to the backends sharing the table. Without ``transport``, a ``host`` means ssh.
    """
    kind = spec.get("transport", "ssh" if "host" in spec else "local")

    def get(key: str, types: tuple[type, ...], what: str) -> object:
        value = spec.get(key)
        if value is not None and not (isinstance(value, types)
                                      and (bool in types or not isinstance(value, bool))):
            raise TransportError(f"access.{key} must be {what}, not {value!r}")
        return value

    if kind == "local":
        return LocalTransport()
    if kind != "ssh":
        raise TransportError(f"access.transport must be \"local\" or \"ssh\", not {kind!r}")
    host = get("host", (str,), "a host name or ~/.ssh/config alias")
    if not host:
        raise TransportError("access.host is required when access.transport is \"ssh\"")
    port = get("port", (int,), "a port number")
    if port is not None and not 0 < port < 65536:
        raise TransportError(f"access.port must be between 1 and 65535, not {port}")
    key = get("key", (str, list), "a key file path or a list of them")
    if isinstance(key, list) and not all(isinstance(k, str) for k in key):
        raise TransportError(f"access.key must list file paths, not {key!r}")
    options: dict = {}
    for name, types, what in (("connect_timeout", (int, float), "a number of seconds"),
                              ("keepalive", (int, float), "a number of seconds"),
                              ("retries", (int,), "a whole number")):
        value = get(name, types, what)
        if value is not None:
            options[name] = value
    return SSHTransport(
        host, user=get("user", (str,), "a user name"), port=port, key_filename=key,
        ssh_config=get("ssh_config", (str,), "a file path"),
        known_hosts=get("known_hosts", (str,), "a file path"),
        accept_new=bool(get("accept_new_host_keys", (bool,), "true or false")), **options)
