"""Read, filter, fuse and write workload traces in the Standard Workload Format (SWF).

SWF (notes/seed-000-002 §1.1) is one job per line, 18 whitespace-separated numeric fields,
``-1`` for unknown, and header comments starting with ``;``. Real traces bend the format, and
this reader accepts the variants we ship rather than asking users to clean them first:

* extra columns after the 18 (wagap: per-core speeds, queue name, node spec; jaros: DAG
  name and task id) are kept verbatim in :attr:`Job.extra`, so a round trip loses nothing;
* a line of column names instead of a ``;`` header (jaros), tabs, CRLF, blank lines and
  ``;`` comments anywhere;
* numeric fields written as floats (hpc2n's CPU times such as ``552.21``);
* several preceding jobs joined by ``&`` in field 17 (Alea's DAG traces, jaros2/3:
  ``1&2&3&4&5``), read as a tuple of job numbers.

Traces can be large (the Parallel Workloads Archive has logs with millions of jobs), so a
:class:`Trace` streams: only the header is read up front, and iterating re-reads the file
line by line. The filters are generator functions over ``Iterable[Job]`` for the same
reason: they compose without materialising the trace.
"""

from __future__ import annotations

import heapq
import importlib
import itertools
import math
import os
import re
import stat
from dataclasses import dataclass, field, replace
from json import loads as _json_loads
from typing import BinaryIO, Callable, Collection, Iterable, Iterator, Mapping, TextIO

from resel.errors import InputError

Number = int | float

#: the 18 standard SWF fields, in file order, as :class:`Job` attribute names
FIELDS: tuple[str, ...] = (
    "id", "submit", "wait", "run", "procs", "cpu_time", "mem_used", "req_procs", "req_time",
    "req_mem", "status", "user", "group", "app", "queue", "partition", "prev_job", "think_time",
)
UNKNOWN = -1

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_KEY_VALUE = re.compile(r";\s*([A-Za-z][\w-]*)\s*:\s?(.*)")
_NUMBER_EXPECTED = "a number (-1 if unknown)"
_PREV_JOB = FIELDS.index("prev_job")
_PROCS, _REQ_PROCS, _REQ_TIME, _ID = (FIELDS.index(f) for f in ("procs", "req_procs", "req_time", "id"))
_STATUS = FIELDS.index("status")
#: every field fits a signed 64-bit integer (SQLite's, for ``history import``), and as a float
#: stays far from overflow in the schedulers' sums: a 400-digit submit time used to end a
#: replay in OverflowError
LIMIT = 2**63 - 1
_RANGE_EXPECTED = f"a number from {-LIMIT} to {LIMIT} (-1 if unknown)"


@dataclass(slots=True)
class Job:
    """One SWF job: the 18 standard fields plus what fused and extended traces add.

    Numbers are ints where the value is whole and floats otherwise, so integral traces stay
    exact and printable without decimals; -1 means unknown and is kept as -1 rather than
    turned into None, because every SWF tool expects it.
    """

    id: Number
    submit: Number
    wait: Number
    run: Number
    procs: Number
    cpu_time: Number
    mem_used: Number
    req_procs: Number
    req_time: Number
    req_mem: Number
    status: Number
    user: Number
    group: Number
    app: Number
    queue: Number
    partition: Number
    #: preceding job number, or a tuple of them (2 or more) for a DAG task with several
    prev_job: Number | tuple[int, ...]
    think_time: Number
    #: columns after the 18th, verbatim (extended traces such as wagap and jaros)
    extra: tuple[str, ...] = ()
    #: site of origin, set by :func:`fuse`; not written to SWF
    site: str | None = None
    #: the job's id in its own trace before :func:`fuse` renumbered it; not written to SWF
    orig_id: Number | None = None

    @property
    def size(self) -> Number:
        """Processors a scheduler must find: the request, else (request unknown) the allocation."""
        return self.req_procs if self.req_procs > 0 else self.procs

    @property
    def estimate(self) -> Number:
        """Runtime a scheduler may plan with: the user's request, else the actual runtime."""
        return self.req_time if self.req_time > 0 else self.run


@dataclass
class Header:
    """The ``;`` lines at the top of a trace.

    ``comments`` keeps every raw line so a rewrite reproduces the header exactly;
    ``fields`` is the ``; Key: value`` subset for lookups. A key that repeats (SWF writes one
    ``Queue:`` or ``Partition:`` line per queue) keeps all values, joined by newlines, since
    a dict holding only the last would silently drop queues.
    """

    fields: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    #: column names from a non-SWF title line (jaros traces), else empty; never written
    columns: tuple[str, ...] = ()
    #: the file the header came from, for error messages only
    path: str = field(default="<header>", compare=False)

    @property
    def max_procs(self) -> int | None:
        """The ``MaxProcs`` label: processors of the machine, None if not given."""
        return self._int("MaxProcs")

    @property
    def max_nodes(self) -> int | None:
        """The ``MaxNodes`` label: nodes of the machine, None if not given."""
        return self._int("MaxNodes")

    @property
    def unix_start_time(self) -> int | None:
        """The ``UnixStartTime`` label: epoch seconds of submit time 0, None if not given."""
        return self._int("UnixStartTime")

    def _int(self, key: str) -> int | None:
        """The label as a count of processors or nodes: None if absent or -1 (SWF's "unknown");
        anything else not from 1 to :data:`LIMIT` is an error (a MaxProcs of -5 used to replay
        "0 jobs on -5 cores" and exit 0)."""
        value = self.fields.get(key)
        if value is None:
            return None
        text = value.split("\n")[0].strip()
        if text == "-1":
            return None
        if not _INT.fullmatch(text) or len(text.lstrip("+-")) > 19 or not 0 < int(text) <= LIMIT:
            raise InputError(self.path, f"header {key}", f"value is {_shown(text)}",
                             f"a whole number from 1 to {LIMIT} (-1 if unknown)")
        return int(text)


def _add_comment(header: Header, values: dict[str, list[str]], line: str) -> None:
    """One ``;`` line of the header: kept in ``comments``, and a ``Key: value`` one's value
    added to ``values`` (joined into :attr:`Header.fields` once the header is read: joining a
    line at a time was quadratic in the lines of one key)."""
    header.comments.append(line)
    match = _KEY_VALUE.fullmatch(line.strip())
    if match:
        values.setdefault(match.group(1), []).append(match.group(2).strip())


def _parse_number(token: str) -> Number | None:
    """The token as int (whole values) or float, or None if it is not a finite number
    (within :data:`LIMIT`)."""
    if _INT.fullmatch(token):
        digits = token.lstrip("+-").lstrip("0")
        if len(digits) > 19:          # int() would refuse beyond 4,300 digits anyway
            return None
        value = int(token[0] + (digits or "0")) if token[0] in "+-" else int(digits or "0")
        return value if -LIMIT <= value <= LIMIT else None
    if not _FLOAT.fullmatch(token):
        return None
    value = float(token)
    if not -LIMIT <= value <= LIMIT:        # also false for inf and nan
        return None
    return int(value) if value.is_integer() else value


def _in_range(values: list) -> bool:
    """True if every value is within :data:`LIMIT` (and, for floats, finite)."""
    return -LIMIT <= min(values) and max(values) <= LIMIT


def _shown(token: str) -> str:
    """A token for an error message: its repr, cut short (a hostile field may be huge)."""
    return repr(token) if len(token) <= 40 else f"{token[:20]!r}… ({len(token)} characters)"


def _exact(token: str, value: float) -> Number:
    """A number ``float()`` read from ``token`` as :func:`_parse_number` gives it: an int
    (exact, from the token itself where it is an integer literal) if whole, else the float."""
    if not value.is_integer():
        return value
    try:
        return int(token)
    except ValueError:
        return int(value)


#: the fields :meth:`Trace.replay_rows` returns, by index: submit, run, procs, req_procs, req_time, id
_REPLAY_FIELDS = tuple(FIELDS.index(f) for f in ("submit", "run", "procs", "req_procs", "req_time", "id"))
#: bytes of trace read at once by :meth:`Trace.replay_rows` (a block of whole lines is parsed at once);
#: 64 KiB read wagap and hpc2n fastest of 16–256 KiB here (a block's tokens still fit the caches:
#: 21.3 ms for wagap against 22.9 ms at 128 KiB and 24.4 ms at 256 KiB)
_BLOCK = 1 << 16
#: the longest line a trace may hold, in bytes without its line end: real traces' lines are
#: short (wagap's longest, a header note, 1,375 bytes; a job line ~100), and the bound keeps
#: the work and memory a line costs bounded whatever the file (a 2 GB file without a newline
#: was read whole, in time quadratic in its length); a longer line is an error, even with
#: ``skip_bad`` (the file is not a trace)
MAX_LINE = 1 << 20
#: the most bytes of ``;`` lines before the first job (the header, kept in
#: :attr:`Header.comments`): archive headers are a few kilobytes
MAX_HEADER = 1 << 22
#: bytes.translate tables of the block reader: digits to '0' (a run of 19 is too long for
#: :data:`LIMIT`), and '&' to ',' (field 17's predecessor lists are numbers joined by '&')
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"0" * 9)
_AMP_AS_COMMA = bytes.maketrans(b"&", b",")
_BOM = b"\xef\xbb\xbf"
#: a block of jobs as :meth:`Trace.replay_columns` gives it: lists of submit, run, size,
#: req_time and id (the values of :meth:`Trace.replay_rows`, column by column)
Columns = tuple[list, list, list, list, list]


def _plain_numbers(text: bytes, ints: bool, separators: int | None = None,
                   columns: list[bytes] | None = None) -> bool:
    """True if ``text`` (tokens joined by ',', none empty) is only numbers ``_parse_number``
    reads exactly as ``json.loads`` does, all within :data:`LIMIT`: ``-?D`` or (unless
    ``ints``) ``-?D.D``, each D 1 to 18 ASCII digits. Anything else (``+5``, ``.5``, ``5.``,
    ``1-2``, exponents, ``_``, non-ASCII digits, a 19-digit number) is False: the block is
    read line by line, where the careful parser accepts it or names the line and field.
    ``separators``: how many ',' the text must hold (one fewer than its tokens: a ',' inside
    a token would make two numbers of one). ``columns``: the parts ``text`` is joined from by
    ',' (the columns of a block), if it is; then the signs and dots are checked only in the
    parts that have any (wagap has '-' in one column of 18: a third of this check's time).

    A few passes over the text at C speed, with the digits read as '0': the bytes allowed,
    every '-' after a separator and before a digit, every '.' between digits (and one a
    token: '0.0' occurrences never overlap within a token, so two dots in one count once),
    no run of 19 digits.
    """
    zeros = text.translate(_DIGITS_AS_ZERO)
    rest = zeros.translate(None, b"0-" if ints else b"0-.")      # the separators, if all is well
    if rest.count(b",") != len(rest) or (separators is not None and len(rest) != separators):
        return False                        # a letter, '+', 'e', '_', a non-ASCII byte, ...
    if b"0" * 19 in zeros:
        return False
    if columns is None:
        return _signs_and_dots(zeros, ints)
    # a token of a part is a token of the text (the parts are joined by the separator)
    return all(_signs_and_dots(part.translate(_DIGITS_AS_ZERO), ints)
               for part in columns if b"-" in part or b"." in part)


def _signs_and_dots(zeros: bytes, ints: bool) -> bool:
    """For :func:`_plain_numbers`, on tokens joined by ',' with their digits read as '0'
    (bytes already checked): every '-' begins a token and precedes a digit; every '.' (none
    if ``ints``) is between digits, at most one a token."""
    minus = zeros.count(b"-")
    if minus and minus != zeros.count(b",-0") + zeros.startswith(b"-0"):
        return False
    if not ints:
        dots = zeros.count(b".")
        if dots and dots != zeros.count(b"0.0"):
            return False
    return True


def _block_columns(block: bytes, lines: int, status: bool = False) -> Columns | None:
    """The replay's columns of ``block`` — complete job lines, each ending in ``\\n``, no
    comment, blank or title line, ``lines`` of them — as ``(submits, runs, sizes, req_times,
    ids)``, the last two converted when first read (:class:`_LazyColumn`), or None if
    it is anything else: then it is read line by line (:meth:`Trace._line_rows`), which
    gives the same values and reports a bad line with its number. With ``status``, a sixth
    column holds each job's status (field 11), for ``resel replay --status``.

    At C speed (no Python code per line): the lines are split into tokens at once, with a
    marker token at each line end, so the tokens are columns if every line has as many of
    them as the first (extra columns included: wagap's three, jaros' two), which one count
    of the markers' positions proves. The 18 fields are then checked as text
    (:func:`_plain_numbers`: field 17 may also be a list joined by '&') and the five a
    replay needs are converted by one ``json.loads`` each (leading zeros and such, which
    JSON refuses, send the block line by line); a whole float becomes an int, as
    :func:`_parse_number` gives it. Blank lines at the end of the block (hpc2n's last line is
    one) are dropped first: they give no job.
    """
    n = len(FIELDS)
    if block[-2:-1].isspace():              # the last line blank, or ending in blanks
        body = block.rstrip()
        lines -= block.count(b"\n", len(body)) - 1
        block = body + b"\n"
    if not lines or b"\x00" in block or len(block) == 1:
        return None
    width = len(block[:block.index(b"\n")].split()) + 1          # the first line's tokens, and the marker
    if width <= n:
        return None
    tokens = block.replace(b"\n", b" \x00 ").split()
    if len(tokens) != lines * width or tokens[width - 1::width].count(b"\x00") != lines:
        return None
    joined = [b",".join(tokens[k::width]) for k in range(n)]
    prev = joined[_PREV_JOB]
    separators = n * lines - 1              # in the 18 columns joined: one fewer than tokens
    if b"&" in prev:        # predecessor lists: whole numbers only, none empty
        if prev.count(b",") != lines - 1:
            return None
        prev = prev.translate(_AMP_AS_COMMA)
        if b",," in prev or prev[:1] == b"," or prev[-1:] == b"," or not _plain_numbers(prev, True):
            return None
        joined[_PREV_JOB] = b"0"            # checked: one token in its place
        separators -= lines - 1
    if not _plain_numbers(b",".join(joined), False, separators, joined):
        return None
    # every request of processors > 0 (no '-', no token 0): the sizes are the requests
    requests = joined[_REQ_PROCS]
    all_requested = b"-" not in requests and b"." not in requests and b",0," not in b"," + requests + b","
    try:
        columns = [None if all_requested and k == _PROCS else _json_loads(b"[" + joined[k] + b"]")
                   for k in _REPLAY_FIELDS[:4]]
    except ValueError:      # not JSON numbers (a leading zero): read line by line
        return None
    for i, k in enumerate(_REPLAY_FIELDS[:4]):
        if columns[i] is not None and b"." in joined[k]:    # (no exponents here: '.' marks a float)
            columns[i] = list(map(_whole, columns[i]))
    submits, runs, procs, req_procs = columns
    sizes = req_procs if all_requested else [r if r > 0 else p for p, r in zip(procs, req_procs)]
    if status:
        return (submits, runs, sizes, _LazyColumn(joined[_REQ_TIME]), _LazyColumn(joined[_ID]),  # type: ignore[return-value]
                _LazyColumn(joined[_STATUS]))
    return submits, runs, sizes, _LazyColumn(joined[_REQ_TIME]), _LazyColumn(joined[_ID])


class _LazyColumn:
    """A column of :func:`_block_columns` kept as its checked text (numbers joined by ',') and
    converted the first time it is read: a replay under FCFS reads neither the requests nor
    the ids (those only name a job out of order), and ~0.5 µs a job is 5 % of its time.

    The text passed :func:`_plain_numbers`, so ``json.loads`` (or, for a leading zero it
    refuses, ``int()``) takes each whole number as :func:`_parse_number` does, and ``float()``
    each other one.
    """

    __slots__ = ("text", "values")

    def __init__(self, text: bytes):
        self.text = text
        self.values: list | None = None

    def _list(self) -> list:
        if self.values is None:
            if b"." in self.text:
                self.values = list(map(_whole, map(float, self.text.split(b","))))
            else:
                try:        # whole numbers: ints from JSON, a third faster than int() each
                    self.values = _json_loads(b"[" + self.text + b"]")
                except ValueError:      # a leading zero, which JSON refuses and int() reads
                    self.values = list(map(int, self.text.split(b",")))
        return self.values

    def __len__(self) -> int:
        return self.text.count(b",") + 1

    def __iter__(self) -> Iterator[Number]:
        return iter(self._list())

    def __getitem__(self, index):
        return self._list()[index]

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, _LazyColumn)) else NotImplemented

    __hash__ = None     # type: ignore[assignment]  (a mutable sequence's)

    def __repr__(self) -> str:
        return f"_LazyColumn({self._list()!r})"


def _whole(value: Number) -> Number:
    """A float that is a whole number as an int, as :func:`_parse_number` returns it."""
    return int(value) if type(value) is float and value.is_integer() else value


def _parse_prev_job(token: str) -> Number | tuple[int, ...] | None:
    """Field 17: one number as usual, or job numbers joined by '&' (Alea DAG traces)."""
    if "&" not in token:
        return _parse_number(token)
    parts = token.split("&")
    if not all(_INT.fullmatch(part) and len(part) < 20 and abs(int(part)) <= LIMIT for part in parts):
        return None
    return tuple(int(part) for part in parts)


def _is_title_line(tokens: list[str]) -> bool:
    """True for a line of column names (jaros: ``id submit wait ...``) instead of a job."""
    return _parse_number(tokens[0]) is None and any("submit" in t.lower() for t in tokens)


#: compressed traces (the Parallel Workloads Archive ships .swf.gz) by their first bytes
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma"))


def _open(path: str) -> BinaryIO:
    """The trace's bytes: gzip, bzip2 and xz files decompressed (by their magic bytes, whatever
    their name); line ends and a byte-order mark as they are, for :func:`_line_blocks`, which
    decodes the text (UTF-8, a stray byte replaced: it becomes a non-numeric field, reported
    with its line).
    """
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):     # opened twice below, which a pipe cannot be (and
            raise InputError(path, None, "is a pipe", "an SWF trace file")   # one no one writes to hung)
        with open(path, "rb") as f:
            head = f.read(6)
        for magic, module in _COMPRESSED:
            if head.startswith(magic):
                return _Decompressed(importlib.import_module(module).open(path, "rb"), path)
        if head.startswith(b"\x28\xb5\x2f\xfd"):
            raise InputError(path, None, "is zstd-compressed", "an SWF text file, or one compressed with "
                             "gzip, bzip2 or xz (decompress it first: zstd -d)")
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, None, "is a folder", "an SWF trace file") from None
    except OSError as exc:
        raise InputError(path, None, f"cannot be read: {exc.strerror or exc}") from None


def _line_blocks(f, path: str) -> Iterator[tuple[int, bytes, int]]:
    """The bytes of ``f`` (``path`` opened by :func:`_open`) as blocks of whole lines:
    ``(number of the block's first line, block, lines in it)``, every line ending in ``\\n``.

    Decoded as :func:`_open` decodes the text: the byte-order mark dropped, ``\\r\\n`` and a
    lone ``\\r`` read as a line end (a ``\\r`` at the end of a read waits for the next
    byte), a last line without one completed. A block is what one read of :data:`_BLOCK`
    bytes completes, so the work is linear in the file and what is read is bounded by the
    lines taken: a line longer than :data:`MAX_LINE` is an error as soon as that much of it
    has been read (a partial line is at most that long, so each read scans a bounded
    buffer), with its number.
    """
    line_no = 1                 # the number of the next block's first line
    buf = b""
    started = False
    while True:
        chunk = f.read(_BLOCK)
        eof = not chunk
        buf += chunk
        if not started:                     # the byte-order mark, once 3 bytes are in
            if len(buf) < len(_BOM) and not eof:
                continue
            started = True
            if buf.startswith(_BOM):
                buf = buf[len(_BOM):]
        work = buf if eof or not buf.endswith(b"\r") else buf[:-1]
        rest = buf[len(work):]
        if b"\r" in work:
            work = work.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        # only the first line can be long: it holds what was left of the last read, every
        # later one lies in this read's chunk (at most _BLOCK bytes, well under MAX_LINE)
        end = work.find(b"\n")
        if (end if end >= 0 else len(work)) > MAX_LINE:
            raise InputError(path, f"line {line_no}", f"is longer than {MAX_LINE:,} bytes",
                             "an SWF trace: one job a line, 18 numbers and a few extra columns")
        if eof:
            if work:
                block = work if work.endswith(b"\n") else work + b"\n"
                yield line_no, block, block.count(b"\n")
            return
        cut = work.rfind(b"\n") + 1
        if not cut:                         # no whole line yet
            buf = work + rest
            continue
        block, buf = work[:cut], work[cut:] + rest
        lines = block.count(b"\n")
        yield line_no, block, lines
        line_no += lines


def _text_lines(f, path: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of every line of ``f`` (as :func:`_line_blocks` reads it), without
    its line end, decoded as :func:`_open` decodes the text (invalid UTF-8 replaced)."""
    for line_no, block, _ in _line_blocks(f, path):
        yield from enumerate(block.decode("utf-8", "replace").split("\n")[:-1], line_no)


class _Decompressed:
    """A compressed trace's byte stream whose damage (cut short, bad data) is an InputError."""

    def __init__(self, stream: BinaryIO, path: str):
        self.stream, self.path = stream, path
        # what a damaged stream raises (imported here: an uncompressed trace needs neither)
        self.damage = (EOFError, OSError, importlib.import_module("lzma").LZMAError,
                       importlib.import_module("zlib").error)

    def _fail(self, exc: Exception) -> InputError:
        return InputError(self.path, None, f"cannot be decompressed: {exc or type(exc).__name__}",
                          "a complete gzip, bzip2 or xz file")

    def __enter__(self) -> "_Decompressed":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stream.close()

    def read(self, size: int = -1) -> bytes:
        try:
            return self.stream.read(size)
        except self.damage as exc:
            raise self._fail(exc) from None

    def close(self) -> None:
        self.stream.close()


class Trace:
    """A trace file: its header, read at once, and its jobs, read lazily on each iteration.

    Iterating twice re-reads the file, so memory stays flat in the trace length and a second
    pass sees the same jobs. :attr:`skipped` counts the bad lines dropped by the latest
    iteration (only with ``skip_bad``); it is final once that iteration has finished.
    """

    def __init__(self, path: str | os.PathLike[str], *, skip_bad: bool = False,
                 on_skip: Callable[[int, str], None] | None = None):
        self.path = os.fspath(path)
        self.skip_bad = skip_bad
        self.on_skip = on_skip
        self.skipped = 0
        self._title_line: int | None = None
        self.header = self._read_header()

    def _read_header(self) -> Header:
        header = Header(path=self.path)
        values: dict[str, list[str]] = {}
        size = 0
        for line_no, line in self._lines():
            text = line.strip()
            if not text:
                continue
            if text.startswith(";"):
                size += len(line)
                if size > MAX_HEADER:
                    raise InputError(self.path, f"line {line_no}", f"the header (the ';' lines before the "
                                     f"first job) is longer than {MAX_HEADER:,} characters",
                                     "an SWF header of a few kilobytes")
                _add_comment(header, values, line)
                continue
            tokens = text.split()
            if _is_title_line(tokens):
                header.columns = tuple(tokens)
                self._title_line = line_no
            break
        header.fields.update((key, "\n".join(found)) for key, found in values.items())
        return header

    def _lines(self) -> Iterator[tuple[int, str]]:
        """``(line number, line)`` of every line of the file, without its line end, decoded as
        :func:`_open` decodes the text; read a block at a time (:func:`_line_blocks`), so no more
        of the file is read than the lines taken need."""
        with _open(self.path) as f:
            yield from _text_lines(f, self.path)

    def __iter__(self) -> Iterator[Job]:
        self.skipped = 0
        for line_no, line in self._lines():
            text = line.strip()
            if not text or text.startswith(";") or line_no == self._title_line:
                continue
            job = self._parse(line_no, text.split())
            if job is not None:
                yield job

    def replay_rows(self) -> Iterator[tuple[Number, Number, Number, Number, Number, None]]:
        """``(submit, run, size, req_time, id, None)`` of each job, in file order: what a
        replay reads (``size`` as :attr:`Job.size`; None stands for the :class:`Job`, not built).

        Resets :attr:`skipped` when called. The same jobs, values and errors as iterating
        the trace, faster: no :class:`Job` is built, and the file is read in blocks of
        bytes whose job lines are parsed at once (:func:`_block_columns`). A block with
        anything else in it (a comment, a ``+5``, ``.5``, ``1&2.5``, a bad field, lines
        of unequal width) is read line by line instead, by ``int()``/``float()`` and, for a
        line they do not take, by the careful parser, which reports the line with its
        number (or skips and counts it with ``skip_bad``) as iterating does.
        """
        self.skipped = 0
        none = itertools.repeat(None)
        return itertools.chain.from_iterable(
            zip(*block, none) if type(block) is tuple else block for block in self._blocks())

    def replay_rows_with_status(self, statuses: Collection[int]) -> Iterator[tuple]:
        """:meth:`replay_rows` of the jobs whose status (field 11) is in ``statuses``: what
        :func:`only_status` keeps of iterating the trace, read by the block reader."""
        self.skipped = 0
        keep = frozenset(statuses)
        for block in self._blocks(status=True):
            if type(block) is tuple:
                block = zip(*block)
            for row in block:
                if row[5] in keep:
                    yield (*row[:5], None)

    def replay_columns(self, statuses: Collection[int] | None = None) -> Iterator[Columns]:
        """:meth:`replay_rows` a block at a time, as :data:`Columns` (lists of submit, run,
        size, req_time and id): what the replay loop reads without a tuple per job.

        A bad line ends the iteration with its InputError after the block of the jobs read
        before it, so what a consumer sees before the error is what it would see of
        :meth:`replay_rows` (an unsorted job earlier in the same block is found first).
        """
        self.skipped = 0
        keep = None if statuses is None else frozenset(statuses)
        for block in self._blocks(status=keep is not None):
            if type(block) is tuple:
                if keep is not None:
                    mask = [s in keep for s in block[5]]
                    block = block[:5] if all(mask) else tuple(list(itertools.compress(c, mask)) for c in block[:5])
                    if not block[0]:
                        continue
                yield block
                continue
            rows: list[tuple] = []
            error = None
            try:
                rows.extend(block if keep is None else (r for r in block if r[5] in keep))
            except InputError as exc:
                error = exc
            if rows:
                submits, runs, sizes, req_times, ids, _ = map(list, zip(*rows))
                yield submits, runs, sizes, req_times, ids
            if error is not None:
                raise error

    def _blocks(self, status: bool = False) -> Iterator[Columns | Iterator[tuple]]:
        """The trace's job lines a block at a time (:func:`_line_blocks`): :data:`Columns`, or
        (a block :func:`_block_columns` does not take) an iterator of :meth:`replay_rows`' rows
        (with ``status``, each job's status column too).

        Invalid UTF-8 is replaced in the line-by-line path (the fast one takes ASCII fields
        only). The header's lines (comments, blank lines, a title line) before the first job
        are skipped here, so that the first block is not read line by line for them.
        """
        title = self._title_line
        in_header = True
        with _open(self.path) as f:
            for line_no, block, lines in _line_blocks(f, self.path):
                if in_header:                       # comments, blank and title lines
                    at = 0
                    while at < len(block):
                        end = block.index(b"\n", at)
                        head = block[at:end].decode("utf-8", "replace").split(None, 1)
                        if head and head[0][0] != ";" and line_no != title:
                            in_header = False
                            break
                        at, line_no, lines = end + 1, line_no + 1, lines - 1
                    block = block[at:]
                    if not block:
                        continue
                columns = _block_columns(block, lines, status)
                if columns is not None:
                    yield columns
                else:
                    yield self._line_rows(line_no, block.decode("utf-8", "replace").split("\n")[:-1], status)

    def _line_rows(self, line_no: int, lines: list[str], status: bool = False) -> Iterator[tuple]:
        """:meth:`replay_rows` of ``lines``, the first being line ``line_no``, one at a time
        (with ``status``, each job's status in place of the last None)."""
        n = len(FIELDS)
        title = self._title_line
        exact = _exact
        for line_no, line in enumerate(lines, line_no):
            head = line.split(None, n)
            if not head or head[0][0] == ";" or line_no == title:
                continue
            if len(head) > n:
                cut = len(line) - len(head.pop())   # where the extra columns begin
            else:
                cut = len(line)
            under = line.find("_")
            # int() and float() also take '_' and non-ASCII digits, which SWF fields may not
            if len(head) == n and line.isascii() and not 0 <= under < cut:
                try:
                    ints = list(map(int, head))
                except ValueError:
                    pass
                else:
                    if _in_range(ints):
                        (id_, submit, _, run, procs, _, _, req_procs, req_time,
                         _, _, _, _, _, _, _, _, _) = ints
                        yield (submit, run, (req_procs if req_procs > 0 else procs), req_time, id_,
                               ints[_STATUS] if status else None)
                        continue
                try:   # ascii, no '_': float() takes what _FLOAT does, and inf/nan (not finite)
                    values = list(map(float, head))
                except ValueError:
                    values = None
                if values is not None and math.isfinite(sum(values)) and _in_range(values):
                    procs, req_procs = exact(head[4], values[4]), exact(head[7], values[7])
                    yield (exact(head[1], values[1]), exact(head[3], values[3]),
                           req_procs if req_procs > 0 else procs, exact(head[8], values[8]),
                           exact(head[0], values[0]), exact(head[_STATUS], values[_STATUS]) if status else None)
                    continue
            job = self._parse(line_no, line.split())
            if job is not None:
                yield job.submit, job.run, job.size, job.req_time, job.id, job.status if status else None

    def _parse(self, line_no: int, tokens: list[str]) -> Job | None:
        if len(tokens) < len(FIELDS):
            return self._bad(line_no, f"has {len(tokens)} fields",
                             f"{len(FIELDS)} SWF fields separated by spaces or tabs")
        head = tokens[:len(FIELDS)]
        joined = " ".join(head)
        if joined.isascii() and "_" not in joined:
            try:   # the common case: 18 plain integers (ASCII, no '_', so int() takes only [+-]digits)
                ints = list(map(int, head))
            except ValueError:
                pass   # a float or a malformed field: the careful path below says which
            else:
                if _in_range(ints):
                    return Job(*ints, extra=tuple(tokens[len(FIELDS):]))
        values = []
        for index, token in enumerate(head):
            if token.isascii() and token.isdigit() and len(token) < 19:
                values.append(int(token))
                continue
            if token == "-1":
                values.append(-1)
                continue
            if index == _PREV_JOB:
                value = _parse_prev_job(token)
                expected = f"{_NUMBER_EXPECTED}, or job numbers joined by '&'"
            else:
                value, expected = _parse_number(token), _NUMBER_EXPECTED
            if value is None:
                if _FLOAT.fullmatch(token) or _INT.fullmatch(token):
                    expected = _RANGE_EXPECTED       # a number, but too large (or inf)
                return self._bad(line_no, f"field {index + 1} ({FIELDS[index]}) is {_shown(token)}",
                                 expected)
            values.append(value)
        return Job(*values, extra=tuple(tokens[len(FIELDS):]))

    def _bad(self, line_no: int, problem: str, expected: str) -> None:
        if not self.skip_bad:
            raise InputError(self.path, f"line {line_no}", problem, expected)
        self.skipped += 1
        if self.on_skip is not None:
            self.on_skip(line_no, problem)
        return None

    def __repr__(self) -> str:
        return f"Trace({self.path!r})"


def read_swf(path: str | os.PathLike[str], *, skip_bad: bool = False,
             on_skip: Callable[[int, str], None] | None = None) -> Trace:
    """Open an SWF trace: the header now, the jobs lazily as the result is iterated.

    A malformed job line (fewer than 18 fields, a field that is not a finite number) raises
    :class:`~resel.errors.InputError` naming the file and line, so the user can fix the
    trace; with ``skip_bad`` it is dropped instead, counted in ``Trace.skipped`` and passed
    to ``on_skip(line_no, reason)``, because some archive logs carry a few broken lines
    that are not worth failing a whole experiment over.
    """
    return Trace(path, skip_bad=skip_bad, on_skip=on_skip)


def read_jobs(path: str | os.PathLike[str], **kw) -> list[Job]:
    """All jobs of a trace as a list, for traces small enough to hold (tests, toy runs)."""
    return list(read_swf(path, **kw))


# ------------------------------------------------------------------ filters


def only_status(jobs: Iterable[Job], statuses: Collection[int] = frozenset({1}), *,
                include_unknown: bool = False) -> Iterator[Job]:
    """Jobs whose status is in ``statuses`` (default 1 = completed).

    ``include_unknown`` also keeps status -1: hpc2n marks jobs it could not classify that
    way, and whether they belong in a replay is the experimenter's call.
    """
    for job in jobs:
        if job.status in statuses or (include_unknown and job.status == UNKNOWN):
            yield job


def drop_zero_runtime(jobs: Iterable[Job]) -> Iterator[Job]:
    """Jobs with a positive runtime: zero, unknown (-1) or negative ones cannot be replayed.

    Negative runtimes other than -1 do occur (wagap has two, minus their submit time).
    """
    return (job for job in jobs if job.run > 0)


def drop_over_request(jobs: Iterable[Job]) -> Iterator[Job]:
    """Jobs that stayed within their requested time (when one is known).

    A real scheduler kills a job at its limit, so a recorded overrun is a logging artefact
    (or a grace period) that would make a replayed backfill schedule impossible.
    """
    return (job for job in jobs if not (job.req_time > 0 and job.run > job.req_time))


def cap_to_request(jobs: Iterable[Job]) -> Iterator[Job]:
    """Jobs with runtime capped at the requested time: keeps overrunning jobs, unlike
    :func:`drop_over_request`, so the load is preserved. Input jobs are not modified."""
    for job in jobs:
        if job.req_time > 0 and job.run > job.req_time:
            yield replace(job, run=job.req_time)
        else:
            yield job


def first(jobs: Iterable[Job], n: int) -> Iterator[Job]:
    """The first ``n`` jobs, reading no further (e.g. Guim's first 10,000 jobs)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return itertools.islice(jobs, n)


def unsorted_error(path: str, job_id: Number, submit: Number, previous: Number) -> InputError:
    """The one error for a trace whose submit times go backwards (``replay``, ``grid``, queue
    sites): schedulers and the fusion of traces read jobs in submit order, and silently
    re-sorting would change which job an SWF ``prev_job`` or a line number refers to."""
    return InputError(path, f"job {job_id}", f"submitted at {submit}, before the previous job ({previous})",
                      "a trace sorted by submit time (field 2); sort it with "
                      "`sort -n -k2 -s` (keeping the ';' header first)")


def in_submit_order(jobs: Iterable[Job], path: str) -> Iterator[Job]:
    """``jobs`` unchanged, raising :func:`unsorted_error` at the first one submitted before the
    one before it (equal submit times are in order)."""
    previous = -math.inf
    for job in jobs:
        if job.submit < previous:
            raise unsorted_error(path, job.id, job.submit, previous)
        previous = job.submit
        yield job


def time_window(jobs: Iterable[Job], start: Number, end: Number) -> Iterator[Job]:
    """Jobs submitted in ``[start, end)``, e.g. the first four months of a log.

    The whole input is scanned: traces are not guaranteed to be sorted by submit time.
    """
    return (job for job in jobs if start <= job.submit < end)


def rebase(jobs: Iterable[Job]) -> Iterator[Job]:
    """Jobs shifted in time so that the first one submits at 0 (SWF's convention).

    Needed after :func:`time_window` or for traces with epoch submit times (wagap). The
    shift is taken from the first job of the stream, which is the earliest for a sorted
    trace; later jobs keep their offsets from it.
    """
    iterator = iter(jobs)
    head = next(iterator, None)
    if head is None:
        return
    shift = head.submit
    yield replace(head, submit=head.submit - shift)
    for job in iterator:
        yield replace(job, submit=job.submit - shift)


def fuse(traces: Mapping[str, Iterable[Job]]) -> Iterator[Job]:
    """Merge several job streams by submit time into one multi-site workload (Guim's FUSION).

    Each input must be sorted by submit time. Ties keep the mapping's order, then each
    stream's own order (the merge is stable). Jobs are tagged with their site (the mapping
    key) and renumbered 1..N, as SWF ids must be unique; the old id stays in ``orig_id``.
    ``prev_job`` is rewritten to the new number of the job it points to, or -1 when that
    job has not been seen (filtered away), since an old id would point to a stranger; in a
    tuple of predecessors the unseen ones are dropped. That rewrite keeps one id pair per
    job in memory.
    """
    tagged = [_tag(site, jobs) for site, jobs in traces.items()]
    renumbered: dict[tuple[str | None, Number], int] = {}
    for new_id, job in enumerate(heapq.merge(*tagged, key=lambda j: j.submit), 1):
        renumbered[(job.site, job.orig_id)] = new_id
        job.id, job.prev_job = new_id, _renumber_prev(job.prev_job, job.site, renumbered)
        yield job


def _tag(site: str, jobs: Iterable[Job]) -> Iterator[Job]:
    # a function, not a generator expression, so each stream binds its own site
    for job in jobs:
        yield replace(job, site=site, orig_id=job.id)


def _renumber_prev(prev: Number | tuple[int, ...], site: str | None,
                   renumbered: Mapping[tuple[str | None, Number], int]) -> Number | tuple[int, ...]:
    if isinstance(prev, tuple):
        seen = tuple(renumbered[(site, p)] for p in prev if (site, p) in renumbered)
        return seen if len(seen) > 1 else (seen[0] if seen else UNKNOWN)
    if prev == UNKNOWN:
        return prev
    return renumbered.get((site, prev), UNKNOWN)


# ------------------------------------------------------------------ writing


def _format(value: Number | tuple[int, ...]) -> str:
    """A field as SWF text: no decimals for whole values, never an exponent.

    Floats use the shortest repr that reads back to the same value, so a round trip is
    exact; exponents are expanded because some SWF tools parse fields as plain decimals.
    A tuple (several preceding jobs) is joined by '&', as Alea writes it.
    """
    if isinstance(value, tuple):
        return "&".join(_format(v) for v in value)
    if isinstance(value, int):
        return str(int(value))  # int() turns a bool into 0/1
    if not math.isfinite(value):
        raise ValueError(f"cannot write {value!r} to SWF")
    if value.is_integer():
        return str(int(value))
    text = repr(value)
    if "e" not in text:
        return text
    from decimal import Decimal      # (rare: imported when needed, not with every replay)
    return format(Decimal(text), "f")


def _header_lines(header: Header | Mapping[str, object] | None) -> list[str]:
    if header is None:
        return []
    if isinstance(header, Header):
        lines = [c if c.lstrip().startswith(";") else f"; {c}" for c in header.comments]
        written = {m.group(1) for m in map(_KEY_VALUE.fullmatch, map(str.strip, lines)) if m}
        pairs = [(k, v) for k, v in header.fields.items() if k not in written]
    else:
        pairs = list(header.items())
        lines = []
    for key, value in pairs:
        lines.extend(f"; {key}: {part}" for part in str(value).split("\n"))
    return lines


def write_swf(path_or_file: str | os.PathLike[str] | TextIO, jobs: Iterable[Job],
              header: Header | Mapping[str, object] | None = None) -> int:
    """Write jobs as SWF, streaming, and return how many were written.

    A :class:`Header` is written as its raw comments, followed by any ``fields`` entry
    whose key those comments lack (so a label added in code is not lost); a mapping is
    written as ``; Key: value`` lines. Jobs follow, the 18 fields space-separated and then
    the extra columns; ``site`` and ``orig_id`` are not SWF fields and are not written.
    """
    if isinstance(path_or_file, (str, os.PathLike)):
        from resel.outputs import create      # a fresh private file renamed into place, never through a link
        with create(path_or_file, "w") as f:
            return write_swf(f, jobs, header)
    out = path_or_file
    for line in _header_lines(header):
        out.write(line + "\n")
    count = 0
    for job in jobs:
        parts = [_format(getattr(job, name)) for name in FIELDS]
        parts.extend(job.extra)
        out.write(" ".join(parts) + "\n")
        count += 1
    return count


def schedule_line(job: Job, wait: Number, run: Number) -> str:
    """``job`` as one SWF line (no newline) with fields 3 (wait) and 4 (run) replaced: a
    simulated schedule, as :func:`write_swf` would write ``dataclasses.replace(job, wait=…,
    run=…)`` (whole numbers without decimals, others to the millisecond), without the copy."""
    parts = [_format(getattr(job, name)) for name in FIELDS]
    parts[2], parts[3] = _format(_schedule_number(wait)), _format(_schedule_number(run))
    parts.extend(job.extra)
    return " ".join(parts)


def _schedule_number(value: float) -> Number:
    return int(value) if float(value).is_integer() else round(value, 3)


def _schedule_text(value: Number) -> str:
    """:func:`schedule_line`'s text of a simulated wait or run (``_format(_schedule_number(v))``)."""
    if type(value) is int or float(value).is_integer():
        return str(int(value))
    return _format(round(value, 3))


def write_schedule(trace: Trace, out: TextIO, schedule: list, statuses: Collection[int] | None = None) -> int:
    """Write the jobs a replay scheduled, in trace order, each as its trace line with fields 3
    (wait) and 4 (run) replaced by the simulated ones; return how many were written.

    ``schedule`` is :func:`resel.sim.replay.replay`'s, each job read's ``(wait, run)`` or None
    (not replayed) by position; ``statuses`` the filter that replay read through. The trace
    is read a second time and each replayed job's line copied: fields 1 and 2 and a space
    each, the simulated wait and run as :func:`schedule_line` writes them, then the rest of
    the line as the trace has it — so the schedule diffs line by line against the trace, and
    no :class:`Job` is built per line (``resel replay --output`` on wagap: a tenth of what a
    record per job cost; docs/benchmarks.md).
    """
    title = trace._title_line
    keep = None if statuses is None else frozenset(statuses)
    kept = [slot for slot in schedule if slot is not None]
    pairs = iter(map("{} {}".format, _schedule_texts([w for w, _ in kept]), _schedule_texts([r for _, r in kept])))
    position, written, last = 0, 0, len(schedule)
    with _open(trace.path) as f:
        for first, raw, _count in _line_blocks(f, trace.path):    # bounded lines, as the replay read them
            if position >= last:
                break
            # every line of a block ends in "\n" (str.splitlines would also cut at \f, \x1c, ...)
            rows = [(line + "\n").split(None, 4) for line in raw.decode("utf-8", "replace").split("\n")[:-1]]
            line_no = first + len(rows) - 1
            if keep is None and all(rows) and not (title is not None and first <= title <= line_no) \
                    and not any(row[0][0] == ";" for row in rows) and position + len(rows) <= last:
                # a block of job lines only (the common case): written by one comprehension
                slots = schedule[position:position + len(rows)]
                position += len(rows)
                block = [f"{row[0]} {row[1]} {next(pairs)} {row[4]}" for row, slot in zip(rows, slots)
                         if slot is not None]
            else:
                block = []
                for number, row in enumerate(rows, first):
                    if position >= last:
                        break
                    if not row or row[0][0] == ";" or number == title:
                        continue
                    if keep is not None and _parse_number(row[4].split(None, 7)[6]) not in keep:
                        continue             # field 11 is the 7th token of field 5 on
                    slot = schedule[position]
                    position += 1
                    if slot is not None:
                        block.append(f"{row[0]} {row[1]} {next(pairs)} {row[4]}")
            if block and not block[-1].endswith("\n"):
                block[-1] += "\n"           # a last line without its line end
            out.write("".join(block))
            written += len(block)
    return written


def _schedule_texts(values: list) -> list[str]:
    """:func:`_schedule_text` of many values; whole ones (every one, in most replays) by C-level maps."""
    if all(map(float.is_integer, map(float, values))):
        return list(map(str, map(int, values)))
    return list(map(_schedule_text, values))


# ------------------------------------------------------------------ machines


@dataclass(frozen=True, slots=True)
class Machine:
    """One cluster of an Alea ``.machines`` file: identical nodes at one speed."""

    id: int
    name: str
    nodes: int
    cpus_per_node: int
    speed: Number
    memory: Number

    @property
    def cores(self) -> int:
        """Total processors of the cluster, the capacity a scheduler allocates from."""
        return self.nodes * self.cpus_per_node


def read_machines(path: str | os.PathLike[str]) -> list[Machine]:
    """Read an Alea ``.machines`` file: ``id name nodes cpus_per_node speed memory`` a line.

    Columns after the sixth (jaros files have one) are ignored, as Alea does; blank lines
    and ``;`` or ``#`` comments are skipped.
    """
    path = os.fspath(path)
    machines = []
    with _open(path) as f:
        for line_no, line in _text_lines(f, path):
            tokens = line.split()
            if not tokens or tokens[0].startswith((";", "#")):
                continue
            where = f"line {line_no}"
            if len(tokens) < 6:
                raise InputError(path, where, f"has {len(tokens)} fields",
                                 "id name nodes cpus_per_node speed memory")
            numbers: list[Number] = []
            for column, token in zip(("id", "nodes", "cpus_per_node", "speed", "memory"),
                                      tokens[:1] + tokens[2:6]):
                value = _parse_number(token)
                whole = column in ("id", "nodes", "cpus_per_node")
                if value is None or (whole and not isinstance(value, int)):
                    raise InputError(path, where, f"{column} is {token!r}",
                                     "a whole number" if whole else "a number")
                if column in ("nodes", "cpus_per_node") and value <= 0:
                    raise InputError(path, where, f"{column} is {token!r}", "a positive number")
                numbers.append(value)
            machine_id, nodes, cpus, speed, memory = numbers
            machines.append(Machine(int(machine_id), tokens[1], int(nodes), int(cpus),
                                    speed, memory))
    return machines


def site_cores(trace: str | os.PathLike[str], header: Header) -> tuple[int | None, str]:
    """The cores a trace's site had, and where that came from: the header's ``MaxProcs``, else
    the Alea ``.machines`` file beside the trace (``TRACE.machines``: the sum of its clusters'
    nodes × cpus, wagap's 2,176), else None — then the user says with ``--cores``.

    Raises:
        InputError: the ``.machines`` file is malformed.
    """
    if header.max_procs:
        return header.max_procs, "the header's MaxProcs"
    machines = f"{os.fspath(trace)}.machines"
    if os.path.isfile(machines):
        total = sum(m.cores for m in read_machines(machines))
        if total > 0:
            return total, f"{os.path.basename(machines)}"
    return None, ""
