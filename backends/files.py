"""Whole files moved between this machine and a site: atomic, hashed, never through a link.

Task data (docs/data.md) crosses here: a task's inputs to the site's cache, its outputs home.
Both directions follow one rule — **a file appears under its name only once its content is
known to be right**: it is written under a fresh temporary name in the destination folder
(created ``O_CREAT|O_EXCL|O_NOFOLLOW``, so a link planted there is never followed), hashed
(SHA-256) as its bytes go by, fsync'ed, compared with what it must be, and only then renamed
over its name. A coordinator killed mid-transfer leaves a temporary file, never a partial
file under the real name; a file whose bytes differ from the expected digest is removed and
reported (:class:`ContentMismatch`), never kept.

The transports (:mod:`resel.backends.transport`) provide ``put_file``/``get_file`` over
this module; what happens on the far side of SSH is SFTP's, on this side it is :class:`Sink`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat as stat_mod
from contextlib import suppress
from dataclasses import dataclass
from typing import BinaryIO, Iterator

#: read and write in pieces this large: big enough for the disks, small enough for memory
CHUNK = 1 << 20


class ContentMismatch(ValueError):
    """A file's bytes are not the ones expected (their size or SHA-256 differ)."""

    def __init__(self, path: str, what: str, expected: object, got: object):
        super().__init__(f"{path}: {what} is {got}, not the expected {expected}")
        self.path, self.what, self.expected, self.got = path, what, expected, got


class NotRegularFile(ValueError):
    """Only regular files are moved: a link, a folder, a device or a pipe is refused (a
    symlink planted in a task's folder must not deliver /etc/shadow). A refusal, not an I/O
    error: no retry makes it right."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file; refused")
        self.path, self.kind = path, kind


@dataclass(frozen=True)
class Moved:
    """What one transfer moved: bytes and their SHA-256 (hex)."""

    size: int
    sha256: str


def kind_of(mode: int) -> str:
    """A file type in words, for refusals."""
    if stat_mod.S_ISLNK(mode):
        return "a symbolic link"
    if stat_mod.S_ISDIR(mode):
        return "a folder"
    if stat_mod.S_ISREG(mode):
        return "a regular file"
    return "a device, pipe or socket"


#: the longest name of one file most file systems take (NAME_MAX), in bytes
NAME_MAX = 255
#: bytes a temporary name adds to the name it stands for: ``.`` + ``.part-`` + 8 hex digits
_PART_EXTRA = 15


def temporary_prefix(base: str) -> str:
    """What the temporary names of a file named ``base`` start with: ``.BASE.part-``, BASE
    cut short (whole characters) where the name would pass :data:`NAME_MAX` — an output may be
    named up to 255 bytes, and its temporary name is 15 longer (ENAMETOOLONG, before)."""
    while len(os.fsencode(base)) > NAME_MAX - _PART_EXTRA:
        base = base[:-1]
    return f".{base}.part-"


def temporary_name(path: str) -> str:
    """A fresh name beside ``path`` (``.NAME.part-XXXXXXXX``): dot-files, which neither the
    agent nor ``resel results`` take for a file of the run."""
    folder, base = os.path.split(path)
    return os.path.join(folder, f"{temporary_prefix(base)}{secrets.token_hex(4)}")


def check(path: str, moved: Moved, size: int | None, sha256: str | None) -> None:
    """Raise :class:`ContentMismatch` when ``moved`` is not what was expected."""
    if size is not None and moved.size != size:
        raise ContentMismatch(path, "its size", f"{size:,} bytes", f"{moved.size:,} bytes")
    if sha256 is not None and moved.sha256 != sha256:
        raise ContentMismatch(path, "its sha256", sha256, moved.sha256)


def read_chunks(f: BinaryIO) -> Iterator[bytes]:
    while True:
        block = f.read(CHUNK)
        if not block:
            return
        yield block


class Sink:
    """A local file being received: a temporary file in the destination's folder that becomes
    the destination only by :meth:`commit`, once its bytes were checked.

    Use as a context manager; leaving it without a commit removes the temporary file. The
    destination's folder must exist (the caller made it private).
    """

    def __init__(self, dest: str, mode: int = 0o600, limit: int | None = None):
        self.dest = dest
        #: the size the file must have, if known: a byte past it is refused at once
        #: (:class:`ContentMismatch`), so a source larger than its record never fills the disk
        self.limit = limit
        self.tmp = temporary_name(dest)
        self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        self._file = os.fdopen(self._fd, "wb")
        self._hash = hashlib.sha256()
        self.size = 0
        self.committed = False

    def write(self, block: bytes) -> None:
        if self.limit is not None and self.size + len(block) > self.limit:
            raise ContentMismatch(self.dest, "its size", f"{self.limit:,} bytes",
                                  f"more than {self.limit:,} bytes")
        self._file.write(block)
        self._hash.update(block)
        self.size += len(block)

    def moved(self) -> Moved:
        return Moved(self.size, self._hash.hexdigest())

    def commit(self, size: int | None = None, sha256: str | None = None) -> Moved:
        """fsync, compare with the expected size and digest, then rename over the destination
        (which replaces a link there, never follows it). Raises ContentMismatch (and removes
        the temporary file) when the bytes are not the expected ones."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        moved = self.moved()
        check(self.dest, moved, size, sha256)
        os.replace(self.tmp, self.dest)
        self.committed = True
        return moved

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._file.closed:
            self._file.close()
        if not self.committed:
            with suppress(OSError):
                os.unlink(self.tmp)


def open_regular(path: str, *, follow: bool = False, buffering: int = -1) -> tuple[BinaryIO, os.stat_result]:
    """Open a local file for reading only if it is a regular file, with its stat taken on the
    opened file, without waiting (``O_NONBLOCK``: a FIFO is refused, not waited on for a writer
    that never comes). A link is refused (``O_NOFOLLOW``) unless ``follow``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise NotRegularFile(path, "a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise NotRegularFile(path, kind_of(st.st_mode))
        return os.fdopen(fd, "rb", buffering=buffering), st
    except BaseException:
        os.close(fd)
        raise


def open_source(path: str, buffering: int = -1) -> BinaryIO:
    """Open a local file to send (a task's input): :func:`open_regular`, a link followed (the
    user's own inputs may be links) — a FIFO put in its place (an input in a folder another
    user may write) is refused; before, it hung the site's thread, and the run."""
    return open_regular(path, follow=True, buffering=buffering)[0]


def sha256_file(path: str) -> Moved:
    """Size and SHA-256 of a local file (followed if a link: the user's own inputs may be)."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for block in read_chunks(f):
            h.update(block)
            size += len(block)
    return Moved(size, h.hexdigest())
