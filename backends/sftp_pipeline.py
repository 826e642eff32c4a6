"""Whole files over one SFTP session with many requests in flight: task data at full speed.

paramiko's own ``SFTPFile`` asks for 32 KiB per request and, for a download, waits for each
reply in turn unless told to prefetch (from a thread of its own); a file moved by its calls
costs four or five round trips however small it is. This module drives the SFTP protocol
itself, over the session the transport already holds, as a small event loop:

* **big requests**: as large as the server allows (OpenSSH's ``limits@openssh.com``: 255 KiB
  reads and writes), 32 KiB where a server does not say;
* **many requests in flight**: up to :data:`MAX_REQUESTS` requests and :data:`MAX_BYTES` bytes
  outstanding, across the files of a batch — a small file's OPEN, WRITE, CLOSE and RENAME
  wait for their own replies only, never for another file's;
* **each file's rules kept** (resel.backends.files): an upload is written to a fresh name
  (``O_CREAT|O_EXCL``, mode sent with the OPEN), hashed as its bytes are read from the local
  disk, and renamed over its name only once every write and the CLOSE succeeded and its size
  and SHA-256 are the expected ones; a download is ``lstat``-ed first (a link, a folder, a
  device or a pipe is refused, and never opened: a FIFO would hang the server), read into a
  local :class:`~resel.backends.files.Sink` and committed only once complete and checked
  (on one of :data:`COMMITTERS` threads: fsync and rename wait for the disk's journal, and
  a few files at a time share its commits).

SFTP has no ``O_NOFOLLOW``: a link put in a file's place between its ``lstat`` and its OPEN
would be followed for that read (as by any SFTP client). The window is one round trip, and
only a process of the site's user can make it — a task's outputs are fetched after it ended.
What such a read brings is not kept: an output is fetched with the size and SHA-256 the agent
recorded, and other bytes are refused, their temporary file removed (tried through the testbed's
sshd: ``test_an_output_swapped_for_a_link_after_its_lstat_delivers_nothing``). A FIFO put there
instead would hold the server's OPEN (and the session) until something writes to it.

A file's failure (missing, refused, mismatched, a permission) is that file's result; the
others go on. A connection that dies raises out of :func:`put`/:func:`get` (paramiko's
``SSHException``/``EOFError``/``OSError``) once every local temporary file is removed or
committed; the items finished before it keep their results in ``results``, so the caller
can retry the rest.

paramiko's request bookkeeping is used as it is (``_async_request`` with a reply object,
``_read_response`` to dispatch one reply): the session stays usable by paramiko's own calls
before and after. The caller holds the session alone while a batch runs.
"""

from __future__ import annotations

import errno
from abc import ABC, abstractmethod
import functools
import hashlib
import io
import posixpath
import stat as stat_mod
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from typing import BinaryIO

import paramiko
from paramiko.sftp import (CMD_ATTRS, CMD_CLOSE, CMD_DATA, CMD_EXTENDED, CMD_EXTENDED_REPLY, CMD_HANDLE,
                           CMD_LSTAT, CMD_OPEN, CMD_READ, CMD_REMOVE, CMD_STATUS, CMD_WRITE, SFTP_EOF,
                           SFTP_FLAG_CREATE, SFTP_FLAG_EXCL, SFTP_FLAG_READ, SFTP_FLAG_WRITE,
                           SFTP_NO_SUCH_FILE, SFTP_OK, SFTP_PERMISSION_DENIED)
from paramiko.sftp_client import int64

from resel.backends.files import ContentMismatch, Moved, NotRegularFile, Sink, check, kind_of, open_source
from resel.errors import TransportError

#: requests outstanding at once (a reply is ~30 bytes for a write, a request as much for a read)
MAX_REQUESTS = 64
#: bytes outstanding at once: reads asked for plus writes sent and not yet acknowledged. Twice
#: OpenSSH sftp's own (64 x 32 KiB): enough for 80 MB/s at 50 ms of round trip; more costs a
#: download CPU (16 MiB: +25 %: every copy of the data misses the cache; docs/benchmarks.md)
#: and buys nothing on an upload, which the server's 2 MiB window holds back anyway
MAX_BYTES = 4 << 20
#: files open at once on the server (OpenSSH allows thousands; others ~100)
MAX_FILES = 64
#: threads finishing downloads (fsync, rename) at once
COMMITTERS = 8
#: request size when the server does not announce its limits (the SFTP draft's safe size)
SAFE_REQUEST = 32768
#: the SFTP session's receive window (over MAX_BYTES, so the server never waits for our window
#: adjustments) and largest packet (OpenSSH sends ~32 KiB ones anyway)
SFTP_WINDOW = 8 << 20
SFTP_PACKET = 1 << 18


@dataclass(frozen=True)
class Limits:
    """What the server accepts: bytes per READ and WRITE, files open at once."""

    read: int = SAFE_REQUEST
    write: int = SAFE_REQUEST
    files: int = MAX_FILES


def server_limits(sftp: paramiko.SFTPClient) -> Limits:
    """The server's own limits (OpenSSH 8.7+'s ``limits@openssh.com``), else the safe ones.

    A limit of 0 means "none"; reads and writes are kept at 255 KiB at most anyway (OpenSSH's
    value: bigger requests buy nothing and cost memory), and a batch keeps at most half the
    handles the server allows open (the rest for paramiko's own calls and other clients)."""
    try:
        kind, msg = sftp._request(CMD_EXTENDED, "limits@openssh.com")
    except (OSError, paramiko.SFTPError):   # the server said "unsupported": a status
        return Limits()
    if kind != CMD_EXTENDED_REPLY:
        return Limits()
    _packet, read, write, handles = (msg.get_int64() for _ in range(4))
    cap = 255 << 10
    return Limits(read=min(read, cap) if read > 0 else cap, write=min(write, cap) if write > 0 else cap,
                  files=min(handles // 2, MAX_FILES) if handles > 1 else MAX_FILES)


@dataclass
class _Request:
    cmd: int
    args: tuple
    nbytes: int
    reply: Callable[[int, paramiko.Message], None]


class _Reply:
    """What paramiko calls back with one reply (its ``fileobj`` interface). paramiko holds it
    weakly; the loop keeps it (``in_flight``) until it is answered."""

    __slots__ = ("loop", "request", "__weakref__")

    def __init__(self, loop: _Loop, request: _Request):
        self.loop, self.request = loop, request

    def _async_response(self, kind: int, msg: paramiko.Message, num: int) -> None:
        self.loop.in_flight.discard(self)
        self.loop.bytes_out -= self.request.nbytes
        self.request.reply(kind, msg)


class _Job(ABC):
    """One file's transfer: gives the requests it may send now, hears their replies (a put, a
    get or a remove: each subclass says what its next request is)."""

    loop: _Loop
    finished = False
    queued = False

    @abstractmethod
    def next_request(self) -> _Request | None:
        """The next request this file wants sent, or None while it waits for replies."""

    def abort(self) -> None:
        """Release what is held on this machine (the connection died under the batch)."""

    def status(self, kind: int, msg: paramiko.Message, what: str, path: str) -> Exception | None:
        """None for an OK status, else the error this reply means for the file."""
        if kind != CMD_STATUS:
            return OSError(f"{what} {path}: unexpected SFTP reply (type {kind}) from {self.loop.name}")
        return self.loop.error(msg.get_int(), msg.get_text(), what, path)


class _Loop:
    """Send what the jobs ask for while there is room; dispatch one reply at a time."""

    def __init__(self, sftp: paramiko.SFTPClient, limits: Limits, name: str):
        self.sftp, self.limits, self.name = sftp, limits, name
        self.in_flight: set[_Reply] = set()   # requests sent and not answered
        self.bytes_out = 0        # their bytes (reads asked for, writes sent)
        self.open_jobs = 0        # files admitted and not finished
        self.ready: deque[_Job] = deque()
        self.committers: ThreadPoolExecutor | None = None

    def wake(self, job: _Job) -> None:
        """``job`` has something to send (a reply moved it on)."""
        if not job.finished and not job.queued:
            job.queued = True
            self.ready.append(job)

    def urgent(self, job: _Job) -> None:
        """A request to send before the others (a failed upload's clean-up)."""
        job.queued = True
        self.ready.appendleft(job)

    def finished(self, job: _Job) -> None:
        job.finished = True
        self.open_jobs -= 1

    def commit(self, sink: Sink, size: int | None, sha256: str | None,
               done: Callable[[Moved | Exception], None]) -> None:
        """Finish a download on a committer thread: fsync, check, rename (resel.backends.files).
        fsync and rename wait for the file system's journal; done one file after the other
        they cap a batch of small files at ~100-250 files/s on a busy disk, where a few at a
        time share each journal commit (docs/benchmarks.md, "Task data transfers")."""
        if self.committers is None:
            self.committers = ThreadPoolExecutor(COMMITTERS, thread_name_prefix="resel-commit")
        self.committers.submit(_commit, sink, size, sha256, done)

    def run(self, jobs: Sequence[_Job]) -> None:
        waiting = deque(jobs)
        admitted: list[_Job] = []
        try:
            while True:
                while len(self.in_flight) < MAX_REQUESTS and self.bytes_out < MAX_BYTES:
                    if not self.ready:
                        if not waiting or self.open_jobs >= self.limits.files:
                            break
                        job = waiting.popleft()
                        admitted.append(job)
                        self.open_jobs += 1
                        self.wake(job)
                        continue
                    job = self.ready[0]
                    request = None if job.finished else job.next_request()
                    if request is None:
                        self.ready.popleft().queued = False
                        continue
                    reply = _Reply(self, request)
                    self.in_flight.add(reply)
                    self.bytes_out += request.nbytes
                    self.sftp._async_request(reply, request.cmd, *request.args)
                if self.in_flight:
                    self.sftp._read_response()
                    continue
                if waiting or self.open_jobs:
                    raise AssertionError(f"{self.name}: SFTP batch stalled: {self.open_jobs} files "
                                         f"open, {len(waiting)} waiting, nothing in flight")
                return
        except BaseException:
            for job in admitted:
                with suppress(Exception):
                    job.abort()
            raise
        finally:
            if self.committers is not None:   # files complete before a drop are kept
                self.committers.shutdown(wait=True)

    def error(self, code: int, text: str, what: str, path: str) -> Exception | None:
        """None for SFTP_OK, else the exception a file's result carries — FileNotFoundError or
        PermissionError where the status says so (paramiko's mapping), else
        a TransportError with the server's message (as the transport's other file operations)."""
        if code == SFTP_OK:
            return None
        where = f"({self.name})"
        if code == SFTP_NO_SUCH_FILE:
            return FileNotFoundError(errno.ENOENT, f"{text or 'No such file'} {where}", path)
        if code == SFTP_PERMISSION_DENIED:
            return PermissionError(errno.EACCES, f"{text or 'Permission denied'} {where}", path)
        return TransportError(f"{self.name}: {what} {path} failed: {text or f'SFTP status {code}'}")


def _commit(sink: Sink, size: int | None, sha256: str | None,
            done: Callable[[Moved | Exception], None]) -> None:
    try:
        result: Moved | Exception = sink.commit(size, sha256)
    except (OSError, ContentMismatch) as e:
        result = e
    finally:
        sink.__exit__(None, None, None)
    done(result)


# --------------------------------------------------------------------------- uploads


class _Put(_Job):
    """local → a fresh ``.NAME.part-XXXXXXXX`` → checked → posix-rename over ``path``.
    ``local`` is a file of this machine, or the bytes themselves (an agent's inbox files: a
    few hundred bytes each, many at once — resel.backends.transport's ``write_files``)."""

    def __init__(self, loop: _Loop, local: str | bytes, path: str, mode: int, size: int | None,
                 sha256: str | None, done: Callable[[Moved | Exception], None]):
        self.loop, self.local, self.path, self.mode = loop, local, path, mode
        self.size, self.sha256, self.done = size, sha256, done
        parent, base = posixpath.split(path)
        self.tmp = posixpath.join(parent, f".{base}.part-{uuid.uuid4().hex[:8]}")
        self.src: BinaryIO | None = None
        self.handle = b""
        self.state = "open"       # open → opening → writing → closing → rename → renaming
        self.offset = 0
        self.digest = hashlib.sha256()
        self.writes = 0           # WRITEs not yet answered
        self.closed = False       # the CLOSE was answered
        self.created = False      # the temporary file exists on the site
        self.error: Exception | None = None

    def next_request(self) -> _Request | None:
        if self.state == "open":
            try:
                self.src = io.BytesIO(self.local) if isinstance(self.local, bytes) \
                    else open_source(self.local, buffering=0)
            except (OSError, NotRegularFile) as e:
                self._finish(e)
                return None
            attrs = paramiko.SFTPAttributes()
            attrs.st_mode = self.mode   # applied by the server under its umask: never more open
            self.state = "opening"
            flags = SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_EXCL
            return _Request(CMD_OPEN, (self.tmp, flags, attrs), 0, self._opened)
        if self.state == "rename":
            self.state = "renaming"
            return _Request(CMD_EXTENDED, ("posix-rename@openssh.com", self.tmp, self.path), 0,
                            self._renamed)
        if self.state != "writing":
            return None
        block = b""
        if self.error is None:
            try:
                block = self.src.read(self.loop.limits.write)
            except OSError as e:
                self.error = e
        if block:
            self.digest.update(block)
            offset, self.offset = self.offset, self.offset + len(block)
            self.writes += 1
            return _Request(CMD_WRITE, (self.handle, int64(offset), block), len(block), self._written)
        self.state = "closing"
        return _Request(CMD_CLOSE, (self.handle,), 0, self._closed)

    def _opened(self, kind: int, msg: paramiko.Message) -> None:
        if kind == CMD_HANDLE:
            self.handle, self.created, self.state = msg.get_binary(), True, "writing"
            self.loop.wake(self)
        else:
            self._finish(self.status(kind, msg, "create", self.tmp))

    def _written(self, kind: int, msg: paramiko.Message) -> None:
        self.writes -= 1
        error = self.status(kind, msg, "write", self.tmp)
        self.error = self.error or error      # (no more WRITEs are sent: the CLOSE comes next)
        self._settle()

    def _closed(self, kind: int, msg: paramiko.Message) -> None:
        self.closed = True
        self.error = self.error or self.status(kind, msg, "close", self.tmp)
        self._settle()

    def _settle(self) -> None:
        """Once every WRITE and the CLOSE are answered: check the bytes, then rename or clean up."""
        if not self.closed or self.writes:
            return
        if self.error is None:
            self.moved = Moved(self.offset, self.digest.hexdigest())
            try:
                check(self.path, self.moved, self.size, self.sha256)
            except ContentMismatch as e:
                self.error = e
            else:
                self.state = "rename"
                self.loop.wake(self)
                return
        self._finish(self.error)

    def _renamed(self, kind: int, msg: paramiko.Message) -> None:
        error = self.status(kind, msg, "rename", self.path)
        if error is None:
            self.created = False
        self._finish(error or self.moved)

    def _finish(self, result: Moved | Exception) -> None:
        self.state = "finished"
        self.loop.finished(self)
        if self.src is not None:
            self.src.close()
        if isinstance(result, Exception) and self.created:   # its reply is read and ignored
            self.loop.urgent(_Remove(self.loop, self.tmp))
        self.done(result)

    def abort(self) -> None:
        if self.src is not None:
            self.src.close()


class _Remove(_Job):
    """Remove a failed upload's temporary file; whatever the reply, that is all."""

    def __init__(self, loop: _Loop, path: str):
        self.loop, self.path, self.sent = loop, path, False
        self.finished = False

    def next_request(self) -> _Request | None:
        if self.sent:
            return None
        self.sent = True
        return _Request(CMD_REMOVE, (self.path,), 0, lambda kind, msg: None)


# --------------------------------------------------------------------------- downloads


class _Get(_Job):
    """``lstat`` (a regular file only) → OPEN → READs in flight → a local Sink, committed once
    the server said where the file ends and every byte before it arrived and was checked."""

    def __init__(self, loop: _Loop, path: str, local: str, size: int | None, sha256: str | None,
                 done: Callable[[Moved | Exception], None]):
        self.loop, self.path, self.local = loop, path, local
        self.size, self.sha256, self.done = size, sha256, done
        self.state = "lstat"      # lstat → stating → open → opening → reading → close → closing
        self.handle = b""
        self.sink: Sink | None = None
        self.length = 0           # read up to here (lstat's size; further if the file grew)
        self.asked = 0            # reads asked for cover [0, asked)
        self.eof: int | None = None
        self.written = 0          # bytes handed to the sink, in order
        self.chunks: dict[int, bytes] = {}
        self.again: deque[tuple[int, int]] = deque()   # what short reads left to ask again
        self.reads = 0            # READs in flight
        self.probing = False      # a READ at `length` asks whether the file ends there
        self.result: Moved | Exception | None = None
        self.committing = False

    def next_request(self) -> _Request | None:
        if self.state == "lstat":
            self.state = "stating"
            return _Request(CMD_LSTAT, (self.path,), 0, self._stated)
        if self.state == "open":
            self.state = "opening"
            return _Request(CMD_OPEN, (self.path, SFTP_FLAG_READ, paramiko.SFTPAttributes()), 0,
                            self._opened)
        if self.state == "close":
            self.state = "closing"
            return _Request(CMD_CLOSE, (self.handle,), 0, self._closed)
        if self.state != "reading":
            return None
        if self.again:
            offset, length = self.again.popleft()
        elif self.asked < self.length:
            offset, length = self.asked, min(self.loop.limits.read, self.length - self.asked)
            self.asked += length
        elif self.eof is None and not self.probing:
            self.probing = True   # normally answered "end of file": lstat's size was right
            offset, length = self.asked, self.loop.limits.read
            self.asked += length
        else:
            return None
        self.reads += 1
        return _Request(CMD_READ, (self.handle, int64(offset), length), length,
                        lambda kind, msg: self._read(offset, length, kind, msg))

    def _stated(self, kind: int, msg: paramiko.Message) -> None:
        if kind != CMD_ATTRS:
            self._finish(self.status(kind, msg, "lstat", self.path))
            return
        attrs = paramiko.SFTPAttributes._from_msg(msg)
        mode = attrs.st_mode or 0
        if not stat_mod.S_ISREG(mode):
            self._finish(NotRegularFile(self.path, kind_of(mode)))
            return
        if self.size is not None and (attrs.st_size or 0) > self.size:   # never read more than recorded
            self._finish(ContentMismatch(self.path, "its size", f"{self.size:,} bytes", f"{attrs.st_size:,} bytes"))
            return
        self.length = attrs.st_size or 0
        self.state = "open"
        self.loop.wake(self)

    def _opened(self, kind: int, msg: paramiko.Message) -> None:
        if kind != CMD_HANDLE:
            self._finish(self.status(kind, msg, "open", self.path))
            return
        self.handle = msg.get_binary()
        try:
            self.sink = Sink(self.local, limit=self.size)
            self.state = "reading"
        except OSError as e:
            self.result, self.state = e, "close"
        self.loop.wake(self)

    def _read(self, offset: int, length: int, kind: int, msg: paramiko.Message) -> None:
        self.reads -= 1
        if self.state != "reading":
            return                # the file already failed: a late reply is dropped
        if kind == CMD_DATA:
            data = msg.get_binary()
            if len(data) > length:
                self._fail(OSError(f"read {self.path}: {self.loop.name} sent {len(data):,} bytes "
                                   f"for a request of {length:,}"))
                return
            if data:
                self.chunks[offset] = data
            if len(data) < length:        # a short read: ask for the rest (or hear EOF there)
                self.again.append((offset + len(data), length - len(data)))
            elif self.probing and offset + length == self.asked:
                self.probing = False      # the file grew since its lstat: read on
                self.length = self.asked + self.loop.limits.read
        elif kind == CMD_STATUS and (code := msg.get_int()) == SFTP_EOF:
            self.eof = offset if self.eof is None else min(self.eof, offset)
        else:
            self._fail(self.status(kind, msg, "read", self.path) if kind != CMD_STATUS
                       else self.loop.error(code, msg.get_text(), "read", self.path))
            return
        try:
            while self.written in self.chunks:
                data = self.chunks.pop(self.written)
                self.sink.write(data)
                self.written += len(data)
        except (OSError, ContentMismatch) as e:   # this machine's disk (full, or gone); the file grew past its size
            self._fail(e)
            return
        if self.eof is not None and self.written >= self.eof and not self.reads:
            self._commit()
        else:
            self.loop.wake(self)

    def _commit(self) -> None:
        if self.chunks or self.written != self.eof or any(o < self.eof for o, _ in self.again):
            self._fail(OSError(f"read {self.path}: {self.loop.name} answered end of file at "
                               f"{self.eof:,} bytes but sent bytes past it"))
            return
        sink, self.sink = self.sink, None
        self.loop.commit(sink, self.size, self.sha256, self.done)
        self.committing = True    # the committer gives the result
        self.state = "close"
        self.loop.wake(self)

    def _fail(self, error: Exception | None) -> None:
        self.result = error
        self._drop_sink()
        self.chunks.clear()
        self.again.clear()
        self.state = "close"
        self.loop.wake(self)

    def _closed(self, kind: int, msg: paramiko.Message) -> None:
        self._finish(self.result)

    def _finish(self, result: Moved | Exception | None) -> None:
        self.state = "finished"
        self.loop.finished(self)
        self._drop_sink()
        if not self.committing:
            self.done(result)

    def _drop_sink(self) -> None:
        """Leave the local temporary file's context: removed unless committed."""
        if self.sink is not None:
            self.sink.__exit__(None, None, None)
            self.sink = None

    abort = _drop_sink


# --------------------------------------------------------------------------- small reads


class _Read(_Job):
    """A small file's bytes into memory (an agent's records): OPEN → READs one after the other
    (each the server's size) to end of file → CLOSE. More than ``limit`` bytes: FileTooLarge
    (resel.backends.transport's, given as ``too_large``), once the limit is passed — never
    more than ``limit`` + one request held."""

    def __init__(self, loop: _Loop, path: str, limit: int | None,
                 too_large: Callable[[str, int], Exception], done: Callable[[bytes | Exception], None]):
        self.loop, self.path, self.limit, self.too_large, self.done = loop, path, limit, too_large, done
        self.state = "open"       # open → opening → read → reading → close → closing
        self.handle = b""
        self.data = bytearray()
        self.result: bytes | Exception | None = None

    def next_request(self) -> _Request | None:
        if self.state == "open":
            self.state = "opening"
            return _Request(CMD_OPEN, (self.path, SFTP_FLAG_READ, paramiko.SFTPAttributes()), 0, self._opened)
        if self.state == "read":
            self.state = "reading"
            length = self.loop.limits.read
            return _Request(CMD_READ, (self.handle, int64(len(self.data)), length), length,
                            lambda kind, msg: self._read(length, kind, msg))
        if self.state == "close":
            self.state = "closing"
            return _Request(CMD_CLOSE, (self.handle,), 0, lambda kind, msg: self._finish(self.result))
        return None

    def _opened(self, kind: int, msg: paramiko.Message) -> None:
        if kind != CMD_HANDLE:
            self._finish(self.status(kind, msg, "open", self.path))
            return
        self.handle, self.state = msg.get_binary(), "read"
        self.loop.wake(self)

    def _read(self, length: int, kind: int, msg: paramiko.Message) -> None:
        if kind == CMD_DATA:
            data = msg.get_binary()
            if len(data) > length:
                self.result = OSError(f"read {self.path}: {self.loop.name} sent {len(data):,} bytes "
                                      f"for a request of {length:,}")
            else:
                self.data += data
                if self.limit is not None and len(self.data) > self.limit:
                    self.result = self.too_large(self.path, self.limit)
            self.state = "read" if self.result is None else "close"
        elif kind == CMD_STATUS and (code := msg.get_int()) == SFTP_EOF:
            self.result, self.state = bytes(self.data), "close"
        else:
            self.result = (self.status(kind, msg, "read", self.path) if kind != CMD_STATUS
                           else self.loop.error(code, msg.get_text(), "read", self.path))
            self.state = "close"
        self.loop.wake(self)

    def _finish(self, result: bytes | Exception | None) -> None:
        self.state = "finished"
        self.loop.finished(self)
        self.done(result if result is not None else OSError(f"read {self.path}: no answer"))


class _Lstat(_Job):
    """One LSTAT: a file's attributes (not following a link), or its error."""

    def __init__(self, loop: _Loop, path: str, done: Callable[[paramiko.SFTPAttributes | Exception], None]):
        self.loop, self.path, self.done, self.sent = loop, path, done, False

    def next_request(self) -> _Request | None:
        if self.sent:
            return None
        self.sent = True
        return _Request(CMD_LSTAT, (self.path,), 0, self._stated)

    def _stated(self, kind: int, msg: paramiko.Message) -> None:
        self.loop.finished(self)
        if kind == CMD_ATTRS:
            self.done(paramiko.SFTPAttributes._from_msg(msg))
        else:
            self.done(self.status(kind, msg, "lstat", self.path) or OSError(f"lstat {self.path}: no attributes"))


# --------------------------------------------------------------------------- entry points

#: an upload: (local path or the bytes, site path, mode, expected size or None, expected sha256 or None)
PutItem = tuple["str | bytes", str, int, "int | None", "str | None"]
#: a download: (site path, local path, expected size or None, expected sha256 or None)
GetItem = tuple[str, str, "int | None", "str | None"]


def put(sftp: paramiko.SFTPClient, limits: Limits, items: Sequence[PutItem],
        results: list[Moved | Exception | None], name: str) -> None:
    """Upload ``items``; ``results[i]`` becomes item i's :class:`Moved` or exception as it
    finishes. Items whose result is not None already are skipped (a retry after a drop)."""
    loop = _Loop(sftp, limits, name)
    jobs = [_Put(loop, *item, done=functools.partial(results.__setitem__, i))
            for i, item in enumerate(items) if results[i] is None]
    loop.run(jobs)


def get(sftp: paramiko.SFTPClient, limits: Limits, items: Sequence[GetItem],
        results: list[Moved | Exception | None], name: str) -> None:
    """Download ``items``, as :func:`put` does."""
    loop = _Loop(sftp, limits, name)
    jobs = [_Get(loop, *item, done=functools.partial(results.__setitem__, i))
            for i, item in enumerate(items) if results[i] is None]
    loop.run(jobs)


def read(sftp: paramiko.SFTPClient, limits: Limits, items: Sequence[tuple[str, int | None]],
         results: list[bytes | Exception | None], name: str,
         too_large: Callable[[str, int], Exception]) -> None:
    """Read small files ``items`` (path, limit or None) into memory, their requests in flight
    together; ``results[i]`` becomes item i's bytes or exception (FileNotFoundError for a file
    gone, ``too_large(path, limit)`` for one over its limit). Items whose result is set are
    skipped (a retry after a drop)."""
    loop = _Loop(sftp, limits, name)
    jobs = [_Read(loop, path, limit, too_large, done=functools.partial(results.__setitem__, i))
            for i, (path, limit) in enumerate(items) if results[i] is None]
    loop.run(jobs)


def lstat(sftp: paramiko.SFTPClient, limits: Limits, items: Sequence[str],
          results: list[paramiko.SFTPAttributes | Exception | None], name: str) -> None:
    """LSTAT every path of ``items``, the requests in flight together; ``results[i]`` becomes
    item i's attributes or exception (FileNotFoundError for a path that is not there)."""
    loop = _Loop(sftp, limits, name)
    jobs = [_Lstat(loop, path, done=functools.partial(results.__setitem__, i))
            for i, path in enumerate(items) if results[i] is None]
    loop.run(jobs)
