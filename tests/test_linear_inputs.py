"""Linear work on any input (issue 24, "Seen" 5): bounded lines in SWF traces, ``--first`` bounding
what is read, bounded bag commands and a linear reading of them.

No test here times anything: each asserts on the work bounded — how many bytes the reader took
from the file before it stopped, which line and limit the error names — so a regression to reading
a whole hostile file (or to quadratic splitting) fails them on any machine, busy or not.
"""

from __future__ import annotations

import gzip
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import resel.sim.swf as swf
from resel.cli import cli
from resel.config import MAX_COMMAND_BYTES, load_bag
from resel.errors import InputError
from resel.models.calibration import application_of, shell_words
from resel.sim.replay import replay
from resel.sim.swf import MAX_HEADER, MAX_LINE, read_jobs, read_machines, read_swf

JOB = b"%d %d 5 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 1 -1 -1\n"


def jobs(n: int, start: int = 1) -> bytes:
    return b"".join(JOB % (i, i) for i in range(start, start + n))


@pytest.fixture
def bytes_read(monkeypatch) -> list[int]:
    """Counts every byte the SWF reader takes from its files (through ``swf._open``)."""
    taken = [0]
    real = swf._open

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, size: int = -1) -> bytes:
            data = self.f.read(size)
            taken[0] += len(data)
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def close(self):
            self.f.close()

    monkeypatch.setattr(swf, "_open", lambda path: Counting(real(path)))
    return taken


def replay_cli(*args) -> object:
    return CliRunner().invoke(cli, ["replay", *map(str, args)])


# ------------------------------------------------------------------ SWF lines


@pytest.mark.parametrize("how", ["header", "iterate", "replay", "machines"])
def test_swf_line_without_newline_is_linear(tmp_path, bytes_read, how):
    """A 16 MiB line without a newline (once 16 MB took 1.4 s and 2 GB more than 200 s, the buffer
    scanned again at every read): every reader stops with the line's number and the limit once
    the line passes MAX_LINE, having read at most the limit and two blocks."""
    path = tmp_path / "t.swf"
    head = b"; MaxProcs: 8\n" + jobs(3)
    path.write_bytes((b"; " + b"x" * (16 << 20)) if how == "header" else head + b"7 " * (8 << 20))
    with pytest.raises(InputError) as info:
        if how == "header":
            read_swf(path)
        elif how == "iterate":
            list(read_swf(path))
        elif how == "replay":
            replay(read_swf(path), "fcfs", 8)
        else:
            read_machines(path)
    line = 1 if how == "header" else 5
    assert info.value.where == f"line {line}" and f"longer than {MAX_LINE:,} bytes" in str(info.value)
    assert bytes_read[0] <= MAX_LINE + 2 * swf._BLOCK + (0 if how in ("header", "machines") else len(head) + 2 * swf._BLOCK)


def test_swf_line_at_the_limit_is_read_and_one_more_byte_refused(tmp_path):
    """The bound is exact, the same in the block reader and line by line: a job line of MAX_LINE
    bytes (its extra columns padded) is a job; one byte more is refused, with its line."""
    base = JOB % (2, 2)
    pad = MAX_LINE - len(base)            # the line without its newline is MAX_LINE bytes
    at_limit = base[:-1] + b" " + b"x" * pad + b"\n"
    assert len(at_limit) - 1 == MAX_LINE
    path = tmp_path / "t.swf"
    path.write_bytes(jobs(1) + at_limit + jobs(1, 3))
    assert [j.id for j in read_swf(path)] == [1, 2, 3]
    assert list(read_swf(path).replay_rows())[1][4] == 2
    path.write_bytes(jobs(1) + at_limit[:-1] + b"y\n" + jobs(1, 3))
    for read in (lambda: list(read_swf(path)), lambda: list(read_swf(path).replay_rows()),
                 lambda: list(read_swf(path, skip_bad=True))):
        with pytest.raises(InputError, match=f"line 2: is longer than {MAX_LINE:,} bytes"):
            read()


def test_swf_line_limit_holds_for_compressed_traces_and_crlf(tmp_path, bytes_read):
    path = tmp_path / "t.swf.gz"
    path.write_bytes(gzip.compress(jobs(2).replace(b"\n", b"\r\n") + b"1" * (MAX_LINE + 10)))
    with pytest.raises(InputError, match="line 3: is longer than"):
        list(read_swf(path))
    assert bytes_read[0] <= MAX_LINE + 3 * swf._BLOCK


def test_replay_first_bounds_what_is_read(tmp_path, bytes_read):
    """`--first 3` of a trace whose fourth line is 32 MiB without a newline: the three jobs are
    replayed, and no more than a block past them is read, on every path (the kernels of fcfs
    and easy, the queue of conservative, the status filter's line-by-line path)."""
    path = tmp_path / "t.swf"
    path.write_bytes(b"; MaxProcs: 8\n" + jobs(3) + b"9 " * (16 << 20))
    for policy in ("fcfs", "easy", "conservative"):
        bytes_read[0] = 0
        result = replay(read_swf(path), policy, 8, first=3)
        assert len(result.stats.wait) == 3
        assert bytes_read[0] <= 2 * swf._BLOCK, (policy, bytes_read[0])
    bytes_read[0] = 0
    done = replay_cli(path, "--policy", "easy", "--first", "3", "--status", "1", "--json")
    assert done.exit_code == 0, done.output
    assert '"jobs": 3' in done.output
    assert bytes_read[0] <= 3 * swf._BLOCK                   # the header's read and the jobs'


def test_swf_header_is_bounded(tmp_path, bytes_read):
    """A header (';' lines before the first job) beyond MAX_HEADER is refused at the line that
    passes it; one key repeated on many lines keeps every value (joined once, not a line at a
    time: that was quadratic in the lines)."""
    path = tmp_path / "t.swf"
    line = b"; Queue: " + b"q" * 990 + b"\n"
    path.write_bytes(line * (MAX_HEADER // len(line) + 5) + jobs(1))
    with pytest.raises(InputError, match=r"line \d+: the header .* longer than"):
        read_swf(path)
    assert bytes_read[0] <= MAX_HEADER + 2 * swf._BLOCK
    path.write_bytes(b"".join(b"; Queue: q%d\n" % i for i in range(20_000)) + jobs(1))
    header = read_swf(path).header
    assert header.fields["Queue"].split("\n") == [f"q{i}" for i in range(20_000)]
    assert len(header.comments) == 20_000


@pytest.mark.parametrize("value, problem", [("-5", "'-5'"), ("0", "'0'"), ("+0", "'+0'")])
def test_swf_maxprocs_not_positive_is_refused(tmp_path, value, problem):
    """`; MaxProcs: -5` replayed "0 jobs on -5 cores" and exited 0: now an error naming the label;
    -1, SWF's "unknown", is a header without MaxProcs (so --cores is asked for)."""
    path = tmp_path / "t.swf"
    path.write_bytes(f"; MaxProcs: {value}\n".encode() + jobs(3))
    done = replay_cli(path)
    assert done.exit_code == 1
    assert f"header MaxProcs: value is {problem}" in done.output and "from 1 to" in done.output
    assert replay_cli(path, "--cores", "8").exit_code == 0
    path.write_bytes(b"; MaxProcs: -1\n" + jobs(3))
    done = replay_cli(path)
    assert done.exit_code == 1 and "gives no MaxProcs" in done.output and "--cores" in done.output


def test_swf_reading_is_unchanged_on_the_real_traces():
    """The line reader under both paths gives the jobs the old text reader gave: every job of
    the real traces read by iteration equals its replay row."""
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"
    for name in ("hpc2n.swf", "wagap-2013.swf", "jaros3.swf"):
        trace = read_swf(data / name)
        rows = [(j.submit, j.run, j.size, j.req_time, j.id) for j in read_jobs(data / name)]
        assert [r[:5] for r in trace.replay_rows()] == rows


# ------------------------------------------------------------------ bag commands


def bag(tmp_path: Path, command: str, name: str = "b.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'[bag]\nname = "b"\ncommand = """{command}"""\ncount = 2\n\n'
                    "[bag.profile]\ninstructions = 1e9\n")
    return path


def test_bag_command_longer_than_one_argument_is_refused(tmp_path):
    """A command is run as `/bin/sh -c COMMAND`, one argument, which Linux bounds (MAX_ARG_STRLEN):
    a longer one could never run, and a 10 MB one cost minutes at reading. The error names the
    key, line and the limit; the limit itself is accepted."""
    assert load_bag(bag(tmp_path, "a" * MAX_COMMAND_BYTES)).command == "a" * MAX_COMMAND_BYTES
    with pytest.raises(InputError) as info:
        load_bag(bag(tmp_path, "é" * (MAX_COMMAND_BYTES // 2 + 1)))      # bytes, not characters
    assert "bag.command (line 3)" in str(info.value) and f"{MAX_COMMAND_BYTES:,} bytes" in str(info.value)
    path = tmp_path / "s.toml"
    path.write_text('[bag]\nname = "b"\ncommand = "true"\ncount = 2\n[bag.site_commands]\n'
                    f'x = "{"a" * (MAX_COMMAND_BYTES + 1)}"\n[bag.profile]\ninstructions = 1e9\n')
    with pytest.raises(InputError, match=r"bag\.site_commands\.x .*bytes"):
        load_bag(path)


@pytest.mark.parametrize("command", ["   ", "\t\n", ""])
def test_bag_command_blank_is_refused(tmp_path, command):
    """`command = "   "` was accepted: every task would run an empty shell command."""
    with pytest.raises(InputError, match="bag.command"):
        load_bag(bag(tmp_path, command))


def test_bag_command_format_width_is_bounded(tmp_path):
    """`{index:999999999}` made every task's command a gigabyte (at reading, 1 GB was allocated to
    check it): a placeholder's width beyond the command limit is refused."""
    with pytest.raises(InputError, match="width"):
        load_bag(bag(tmp_path, "echo {index:999999999}"))
    with pytest.raises(InputError, match="width"):
        load_bag(bag(tmp_path, "echo {name:>200000}"))
    assert load_bag(bag(tmp_path, "echo {index:06d} {name:>20}")).command


def python_lines(function, *args) -> int:
    """How many lines of Python ``function`` (its own frame, not what it calls) runs for ``args``:
    the work done a step at a time in the interpreter, not in C."""
    import sys
    count = [0]
    code = function.__code__

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None
        if event == "line":
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        function(*args)
    except ValueError:                  # (an unbalanced quote: counted up to the refusal)
        pass
    finally:
        sys.settrace(None)
    return count[0]


def test_application_of_is_linear_on_a_huge_word():
    """`shlex.split` appended a character at a time in Python (1 MB: 12 s, 10 MB: > 600 s); the
    splitter resel uses steps once per piece of a word (a run of plain characters, a quoted
    string), each piece matched in C: the Python steps for a 4 MiB word are those for a 4-byte
    one — counted, not timed."""
    word = "a" * (4 << 20)
    assert application_of(word) == word
    assert application_of('"' + "b" * (1 << 20)) == '"' + "b" * (1 << 20)       # unbalanced: split()
    for short, long in [("abcd", word), ("'ab' \"c\\\"d\"", f"'{word}' \"{word}\\\"{word}\""),
                        ('"ab', '"' + word)]:
        assert python_lines(shell_words, long) == python_lines(shell_words, short)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=" \t\n\r'\"\\ab$;#=-/", max_size=30))
def test_shell_words_agree_with_shlex(text):
    """The linear splitter is shlex.split in POSIX mode without comments, checked on random
    strings of the characters that matter (second implementation)."""
    try:
        expected = shlex.split(text, comments=False)
    except ValueError:
        with pytest.raises(ValueError):
            shell_words(text)
        return
    assert shell_words(text) == expected
