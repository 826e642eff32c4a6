"""Read task bags and site files (TOML) into domain objects, with errors a user can act on.

A malformed file never produces a traceback: every problem becomes an
:class:`~resel.errors.InputError` naming the file, the key path (and its line where the
text shows it) and what was expected. The schema is data — one table of allowed keys per
section — so the error for an unknown key can list what *is* allowed.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from resel import site_options
from resel.command_template import problems as template_problems
from resel.domain import (
    Access, Bag, Bandwidth, Clock, DataSpec, HTCondorOptions, InputSpec, OutputSpec, PBSOptions, PilotPolicy, Profile,
    QueueModel, Site, SlurmOptions, TaskSpec, TransportSpec, Truth, WaitModel,
)
from resel.errors import InputError
from resel.url_inputs import is_url, url_file_name, url_problem
from resel.models.distributions import KINDS, Dist

#: kinds of site this version can drive: the offline simulator, and live schedulers
SITE_KINDS = ("simulated", "slurm", "pbs", "htcondor")
LIVE_KINDS = ("slurm", "pbs", "htcondor")
TRANSPORTS = ("local", "ssh")
#: how resel talks to each kind of scheduler (the first is the default)
APIS = {"slurm": ("cli", "rest", "pyslurm"), "pbs": ("cli",), "htcondor": ("cli", "bindings")}
SLURM_APIS = tuple(dict.fromkeys(a for apis in APIS.values() for a in apis))
PBS_DIALECTS = ("auto", "pro", "torque")
PILOT_MODES = ("single", "per-task")


@dataclass(frozen=True)
class _Key:
    """One allowed key: its type check, a phrase for errors, and whether it is required."""

    check: Callable[[Any], bool]
    expected: str
    required: bool = False


def _num(positive: bool = False, integer: bool = False, allow_zero: bool = True,
         low: float | None = None, high: float | None = None) -> Callable[[Any], bool]:
    """A number check; ``low``/``high`` (inclusive) keep the simulator's arithmetic finite."""
    def check(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if integer and not isinstance(v, int):
            return False
        if isinstance(v, float) and not math.isfinite(v):    # (math.isfinite overflows on a huge int)
            return False
        if positive and (v < 0 or (v == 0 and not allow_zero)):
            return False
        if (low is not None and v < low) or (high is not None and v > high):
            return False
        return True

    return check


# Bounds far beyond any real machine or task, but small enough that the simulator's products
# and powers of them (T_x = instructions · κ / (IPC · clock), waits × nodes^size_exponent) stay
# finite floats: sigma = 1e10 or kappa = 1e308 used to end a simulation in OverflowError.
MAX_INSTRUCTIONS = 1e20
MAX_KAPPA = 1e6
CLOCK_GHZ = (1e-3, 1e3)
MAX_CORES = 10**9
MAX_SECONDS = 1e12
MAX_FACTOR = 1e6
MAX_SIZE_EXPONENT = 10.0
MAX_SIGMA = 10.0
MAX_COUNT = 10**9
#: a bag or sites file is a few kilobytes; this bounds the memory and time a hostile one can take
#: (tomllib reads ~2 MB a second here: 16 MiB took 7 s and more on a busy machine)
MAX_FILE_BYTES = 4 * 1024 * 1024
#: the longest command (in UTF-8 bytes) a bag may give: a task runs as ``/bin/sh -c COMMAND``,
#: one argument, which Linux bounds at MAX_ARG_STRLEN (32 pages, 131,072 bytes with its final
#: NUL), so a longer one could never run
MAX_COMMAND_BYTES = 32 * 4096 - 1
#: control characters in a name would be printed raw to a terminal
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


_STR = _Key(lambda v: isinstance(v, str) and v != "", "a non-empty string")
_LABEL = _Key(lambda v: isinstance(v, str) and v != "" and not _CONTROL.search(v),
              "a non-empty name without control characters", True)
_TABLE = lambda: _Key(lambda v: isinstance(v, dict), "a table")  # noqa: E731

BAG_KEYS = {
    "name": _LABEL,
    "command": _Key(_STR.check, _STR.expected, True),
    "count": _Key(_num(True, True, False, high=MAX_COUNT),
                  f"a whole number > 0 and <= {MAX_COUNT:,} (a bag with a task table: its number of rows)"),
    "cores_per_task": _Key(_num(True, True, False, high=MAX_CORES), f"a whole number > 0 and <= {MAX_CORES:,}"),
    "isa": _STR,
    "perf_every": _Key(_num(True, True, high=MAX_COUNT),
                       "a whole number >= 0: every Nth task runs under perf (0 none, 1 all)"),
    "profile": _Key(lambda v: isinstance(v, dict), "a table [bag.profile]", True),
    "site_commands": _Key(lambda v: isinstance(v, dict) and all(isinstance(x, str) and x for x in v.values()),
                          'a table [bag.site_commands] of SITE = "command" (the command on that site)'),
    "inputs": _Key(lambda v: isinstance(v, list),
                   'a list of files or globs relative to the bag file: ["in/{index}/topol.tpr", '
                   '{ path = "md-{index}.mdp", as = "md.mdp" }]'),
    "outputs": _Key(lambda v: isinstance(v, list),
                    'a list of globs relative to the task\'s folder: ["md.log", { glob = "*.xtc", optional = true }]'),
    "results": _Key(_STR.check, "a folder for the results (relative to the bag file)"),
    "data": _Key(lambda v: isinstance(v, dict), "a table [bag.data] { input_mb, shared_mb, output_mb }"),
    "tasks": _Key(lambda v: (isinstance(v, str) and v != "") or (isinstance(v, list) and v != []),
                  'a CSV file beside the bag file (tasks = "tasks.csv") or [[bag.tasks]] tables, '
                  'each with name, and size, cores, args, class as needed'),
    "classes": _Key(lambda v: isinstance(v, dict) and v != {} and all(isinstance(x, dict) for x in v.values()),
                    "tables [bag.classes.NAME] each with instructions (and per_size)"),
    "order": _Key(lambda v: v in ORDERS, 'how tasks wait at a site: "auto" (the default: largest first unless a '
                  'site is a per-task pool), "given" (the table\'s order) or "largest" (most instructions first)'),
}
#: the orders a bag's tasks may wait in at each site (docs/peers.md: largest-first measured)
ORDERS = ("auto", "given", "largest")
#: the most rows a task table may have (one TaskSpec each, a few hundred bytes)
MAX_TASKS = 1_000_000
#: the columns of a task table (a CSV file's header, or an inline [[bag.tasks]] table's keys)
TASK_COLUMNS = ("name", "size", "cores", "args", "class")
#: a task's size: atoms, MD steps; far beyond any, small enough to stay exact in a float
MAX_SIZE = 1e15
#: megabytes a task may move: far beyond any real task, small enough to stay exact in a float
MAX_MB = 1e9
DATA_KEYS = {
    key: _Key(_num(True, high=MAX_MB), f"megabytes >= 0 and <= {MAX_MB:g} ({what})")
    for key, what in (("input_mb", "each task's own inputs, for a bag whose inputs are not files here"),
                      ("shared_mb", "the inputs every task shares, idem"),
                      ("output_mb", "each task's outputs, expected before any is seen"))
}
INPUT_KEYS = {"path": _Key(_STR.check, "a file or glob relative to the bag file, or a URL the site fetches", True),
              "as": _Key(_STR.check, "the file's name in the task's folder")}
OUTPUT_KEYS = {"glob": _Key(_STR.check, "a glob relative to the task's folder", True),
               "optional": _Key(lambda v: isinstance(v, bool), "true or false (a missing optional output is no error)")}
#: the longest input or output pattern, and the most entries in either list
MAX_PATTERN = 4096
MAX_ENTRIES = 1000
#: MB/s: from a slow campus link to a fast local disk, and far beyond
BANDWIDTH_MBPS = (1e-3, 1e6)
PROFILE_KEYS = {
    "instructions": _Key(_num(True, False, False, high=MAX_INSTRUCTIONS),
                         f"a number of instructions > 0 and <= {MAX_INSTRUCTIONS:g}", True),
    "cycles": _Key(_num(True, False, False, high=MAX_INSTRUCTIONS), f"a number of cycles > 0 and <= {MAX_INSTRUCTIONS:g}"),
    "per_size": _Key(_num(True, high=MAX_INSTRUCTIONS),
                     "instructions per unit of a task's size, >= 0 (a bag with a task table: I(size) = "
                     "instructions + per_size * size, instructions then being the cost at size 0)"),
    "ipc": _Key(_num(True, False, False, high=MAX_FACTOR), f"instructions per cycle > 0 and <= {MAX_FACTOR:g}"),
    "baseline": _STR,
}
SITE_KEYS = {
    "name": _LABEL,
    "kind": _Key(_STR.check, f"one of {', '.join(SITE_KINDS)}", True),
    "cores": _Key(_num(True, True, False, high=MAX_CORES), f"a whole number of cores > 0 and <= {MAX_CORES:,}", True),
    "clock": _Key(lambda v: isinstance(v, dict), "a table {base = GHz, avg = GHz}", True),
    "kappa": _Key(_num(True, False, False, high=MAX_KAPPA), f"an instruction factor > 0 and <= {MAX_KAPPA:g}"),
    "isa": _STR,
    "reselect_target": _Key(lambda v: isinstance(v, bool), "true or false"),
    "notes": _Key(lambda v: isinstance(v, str), "a string"),
    "pilot": _TABLE(),
    "wait": _Key(lambda v: isinstance(v, dict) or _num(True, high=MAX_SECONDS)(v),
                 f"seconds (<= {MAX_SECONDS:g}), or a distribution table"),
    "queue": _TABLE(),
    "truth": _TABLE(),
    "access": _TABLE(),
    "bandwidth": _Key(lambda v: isinstance(v, dict) or _num(low=BANDWIDTH_MBPS[0], high=BANDWIDTH_MBPS[1])(v),
                      f"MB/s both ways ({BANDWIDTH_MBPS[0]:g} to {BANDWIDTH_MBPS[1]:g}), or a table "
                      "{ in = MB/s to the site, out = MB/s from it }"),
}
BANDWIDTH_KEYS = {
    "in": _Key(_num(low=BANDWIDTH_MBPS[0], high=BANDWIDTH_MBPS[1]),
               f"MB/s to the site, {BANDWIDTH_MBPS[0]:g} to {BANDWIDTH_MBPS[1]:g}", True),
    "out": _Key(_num(low=BANDWIDTH_MBPS[0], high=BANDWIDTH_MBPS[1]),
                f"MB/s from the site, {BANDWIDTH_MBPS[0]:g} to {BANDWIDTH_MBPS[1]:g}", True),
}
_NAME = _Key(lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_.@+-]+", v) is not None,
             "a name of letters, digits and _ . @ + -")
ACCESS_KEYS = {
    "transport": _Key(lambda v: v in TRANSPORTS, f"one of {', '.join(TRANSPORTS)}"),
    "host": _STR,
    "user": _NAME,
    "port": _Key(lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536, "a TCP port"),
    "key": _STR,
    "ssh_config": _STR,
    "known_hosts": _STR,
    "accept_new_host_keys": _Key(lambda v: isinstance(v, bool), "true or false"),
    "workdir": _Key(_STR.check, "a directory on the site's shared filesystem", True),
    "python": _STR,
    "env": _Key(lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and isinstance(x, str)
        for k, x in v.items()), "a table of NAME = \"value\" strings"),
    "api": _Key(lambda v: v in SLURM_APIS, f"one of {', '.join(SLURM_APIS)}"),
    "partition": _NAME,
    "queue": _NAME,
    "dialect": _Key(lambda v: v in PBS_DIALECTS, f"one of {', '.join(PBS_DIALECTS)} (PBS sites)"),
    "project": _NAME,
    "accounting_group": _NAME,
    "account": _NAME,
    "qos": _NAME,
    "submit_args": _Key(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                        "a list of strings passed to the submit command (sbatch_options or qsub_options)"),
    "sbatch_options": _Key(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                           'a list of sbatch options, one word each: ["--mem=8G", "--constraint=avx2"]'),
    "qsub_options": _Key(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                         'a list of qsub options, one word each: ["-l", "mem=4gb"]'),
    "submit_lines": _Key(lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                         'a table of HTCondor submit commands: { request_memory = "4GB" }'),
    "setup": _Key(lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                  'a list of shell lines the pilot runs before the agent: ["module load gromacs/2024"]'),
    "requeue": _Key(lambda v: isinstance(v, bool), "true or false (let the scheduler requeue a pilot; default false)"),
    "rest_url": _Key(lambda v: isinstance(v, str) and v.startswith(("http://", "https://")), "an http(s) URL"),
    "rest_user": _NAME,
    "rest_token_file": _STR,
}
QUEUE_POLICIES = ("fcfs", "easy", "easy-sjbf", "conservative")
QUEUE_KEYS = {
    "policy": _Key(lambda v: v in QUEUE_POLICIES, f"one of {', '.join(QUEUE_POLICIES)}", True),
    "trace": _Key(_STR.check, "the path of an SWF trace (relative to the sites file)", True),
    "offset": _Key(_num(True, high=MAX_SECONDS), "seconds >= 0 into the trace at which the bag is submitted"),
    "load": _Key(_num(low=1 / MAX_FACTOR, high=MAX_FACTOR), f"a factor dividing submit times, {1 / MAX_FACTOR:g} to {MAX_FACTOR:g}"),
    "speed": _Key(_num(low=1 / MAX_FACTOR, high=MAX_FACTOR), f"a factor dividing run times, {1 / MAX_FACTOR:g} to {MAX_FACTOR:g}"),
}
CLOCK_KEYS = {
    "base": _Key(_num(low=CLOCK_GHZ[0], high=CLOCK_GHZ[1]), f"a clock in GHz, {CLOCK_GHZ[0]:g} to {CLOCK_GHZ[1]:g}", True),
    "avg": _Key(_num(low=CLOCK_GHZ[0], high=CLOCK_GHZ[1]), f"a clock in GHz, {CLOCK_GHZ[0]:g} to {CLOCK_GHZ[1]:g}"),
}
PILOT_KEYS = {
    "mode": _Key(lambda v: v in PILOT_MODES, f"one of {', '.join(PILOT_MODES)}"),
    "max_cores": _Key(_num(True, True, False, high=MAX_CORES), f"a whole number of cores > 0 and <= {MAX_CORES:,}"),
    "walltime": _Key(_num(True, False, False, high=MAX_SECONDS), f"seconds > 0 and <= {MAX_SECONDS:g}"),
    "max_pilots": _Key(_num(True, True, False, high=MAX_CORES), f"a whole number > 0 and <= {MAX_CORES:,}"),
}
WAIT_EXTRA_KEYS = {
    "size_exponent": _Key(_num(True, high=MAX_SIZE_EXPONENT), f"a number from 0 to {MAX_SIZE_EXPONENT:g}"),
    "cores_per_node": _Key(_num(True, True, False, high=MAX_CORES), f"a whole number > 0 and <= {MAX_CORES:,}"),
}
TRUTH_KEYS = {
    "kappa": _Key(_num(True, False, False, high=MAX_KAPPA), f"an instruction factor > 0 and <= {MAX_KAPPA:g}"),
    "ipc": _Key(lambda v: isinstance(v, (dict, int, float)) and not isinstance(v, bool), "a number or a distribution table"),
    "clock": _Key(lambda v: isinstance(v, (dict, int, float)) and not isinstance(v, bool), "GHz or a distribution table"),
    "fail": _Key(_num(True, low=0.0, high=1.0), "a probability from 0 to 1 that an attempt fails there"),
    "fail_after": _Key(_num(True, high=MAX_SECONDS), f"seconds >= 0 and <= {MAX_SECONDS:g} until a failing attempt ends"),
    "bandwidth": SITE_KEYS["bandwidth"],
}


class _Reader:
    """Reads one file; knows its path and text so every error can point into it."""

    def __init__(self, path: Path):
        self.path = path
        self.text = read_text(path, MAX_FILE_BYTES, "a bag or sites file")
        try:
            self.data = tomllib.loads(self.text)
        except RecursionError:
            raise InputError(str(path), None, "tables or arrays are nested too deeply to read",
                             "a few levels of [tables] and arrays, see examples/") from None
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
            where = f"line {match.group(1)}, column {match.group(2)}" if match else None
            if where is None and "end of document" in str(exc):
                where = f"line {len(self.text.splitlines()) or 1} (end of file)"
            problem = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
            raise InputError(str(path), where, f"TOML syntax error: {problem}", "valid TOML, see examples/") from None

    def fail(self, key_path: str, problem: str, expected: str | None = None) -> InputError:
        line = self._line_of(key_path)
        where = f"{key_path} (line {line})" if line else key_path
        return InputError(str(self.path), where, problem, expected)

    def _line_of(self, key_path: str) -> int | None:
        """Best-effort line of the last key of ``key_path`` (TOML keeps no positions)."""
        leaf = re.sub(r"\[\d+\]", "", key_path.split(".")[-1])
        lines = self.text.splitlines()
        first, last = 0, len(lines)
        block = re.match(r"([\w.]+)\[(\d+)\]", key_path)
        if block:   # search only inside the i-th [[name]] table (a dotted name too: [[bag.tasks]])
            dotted = r"\s*\.\s*".join(re.escape(part) for part in block.group(1).split("."))
            header = re.compile(rf"^\s*\[\[\s*{dotted}\s*\]\]")
            starts = [n for n, line in enumerate(lines) if header.match(line)]
            index = int(block.group(2))
            if index < len(starts):
                first = starts[index]
                last = starts[index + 1] if index + 1 < len(starts) else len(lines)
        key = re.escape(leaf)
        patterns = (re.compile(rf"^\s*(\[+\s*)?([\w.]*\.)?{key}\s*(=|\]|\.)"),   # key = / [table]
                    re.compile(rf"(^|[\s{{,.]){key}\s*="))                            # inside { ... }
        for pattern in patterns:
            for number in range(first, last):
                if pattern.search(lines[number].split("#", 1)[0]):
                    return number + 1
        return None

    def check(self, table: Any, schema: dict[str, _Key], key_path: str) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.fail(key_path, f"is {type(table).__name__}", "a table")
        for key in table:
            if key not in schema:
                raise self.fail(f"{key_path}.{key}", unknown_key(key, schema), f"one of {', '.join(schema)}")
        for key, spec in schema.items():
            if key not in table:
                if spec.required:
                    raise self.fail(key_path, f"missing required key {key!r}", spec.expected)
                continue
            if not spec.check(table[key]):
                raise self.fail(f"{key_path}.{key}", f"bad value {table[key]!r}", spec.expected)
        return table

    def dist(self, value: Any, key_path: str, extra: dict[str, _Key] | None = None,
             positive: bool = False) -> tuple[Dist, dict[str, Any]]:
        """A number (fixed) or a ``{dist = KIND, ...}`` table; returns the Dist and extra keys.

        With ``positive`` (a clock, an IPC) the distribution's centre must be > 0.
        """
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = {"dist": "fixed", "value": value}
        if not isinstance(value, dict) or "dist" not in value:
            raise self.fail(key_path, "missing 'dist'", f"a table with dist = one of {', '.join(KINDS)}")
        params = {k: v for k, v in value.items() if k != "dist" and k not in (extra or {})}
        extras = {k: v for k, v in value.items() if k in (extra or {})}
        for key, val in extras.items():
            if not extra[key].check(val):
                raise self.fail(f"{key_path}.{key}", f"bad value {val!r}", extra[key].expected)
        try:
            dist = Dist.of(str(value["dist"]), **params)
        except ValueError as exc:
            raise self.fail(key_path, str(exc), "see docs/configuration.md") from None
        for name, param in dist.params:
            values = param if isinstance(param, tuple) else (param,)
            if any(abs(v) > MAX_SECONDS for v in values):
                raise self.fail(f"{key_path}.{name}", f"{name} is beyond {MAX_SECONDS:g}",
                                f"a value from {-MAX_SECONDS:g} to {MAX_SECONDS:g}")
        if dist.kind == "lognormal" and dist.param("sigma") > MAX_SIGMA:
            raise self.fail(f"{key_path}.sigma", f"sigma {dist.param('sigma'):g} spreads the draws over more "
                            "orders of magnitude than a float holds", f"sigma <= {MAX_SIGMA:g}")
        if positive and not _centre(dist) > 0:
            raise self.fail(key_path, f"{dist.describe()} is not > 0", "a positive value (GHz, instructions per cycle)")
        return dist, extras


def open_nonblocking(path: str | Path):
    """``open(path, "rb")`` that does not wait for a writer: a FIFO nobody writes to opened the
    plain way blocked the command for ever (the review's harness: `resel sites show --sites FIFO`
    hung); opened ``O_NONBLOCK`` it reads as empty. A pipe with a writer (``<(…)``) is read as
    before: blocking is turned back on once it is open."""
    import fcntl
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: Path, limit: int, what: str) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark is dropped), at most ``limit`` bytes.

    The bound keeps a hostile file (2 GB without a newline) from taking memory without end;
    the size is checked by reading, so a pipe or /dev/zero is bounded too. Every such file can
    carry commands (a sites file's ``access.env``, a bag's command, a task's ``args``), so it is
    read only if nobody else can change it (:func:`resel.trust.code_file_problem`).

    Raises:
        InputError: missing, unreadable, another user's or changeable by others, too large, or
            not UTF-8.
    """
    from resel.trust import code_file_problem
    try:
        with open_nonblocking(path) as f:
            unsafe = code_file_problem(path, os.fstat(f.fileno()))
            if unsafe is not None:
                raise InputError(str(path), None, unsafe)
            raw = f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(str(path), None, "file not found") from None
    except IsADirectoryError:
        raise InputError(str(path), None, "is a folder", f"{what} (TOML)") from None
    except OSError as exc:
        raise InputError(str(path), None, f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(str(path), None, f"is larger than {limit // (1024 * 1024)} MiB",
                         f"{what} of a few kilobytes")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InputError(str(path), f"line {line}", f"byte 0x{raw[exc.start]:02x} is not UTF-8",
                         "a UTF-8 text file") from None


def load_bag(path: str | Path) -> Bag:
    """Read a bag file: a ``[bag]`` table with ``[bag.profile]`` (see examples/gromacs-bag.toml).

    Raises:
        InputError: naming the file, key (and line) and what is expected.
    """
    reader = _Reader(Path(path))
    if "bag" not in reader.data:
        raise reader.fail("bag", "missing table [bag]", "a [bag] table with name, command, count, profile")
    extra = [k for k in reader.data if k != "bag"]
    if extra:
        raise reader.fail(extra[0], f"unknown top-level key {extra[0]!r}", "only [bag]")
    raw = reader.check(reader.data["bag"], BAG_KEYS, "bag")
    table = "tasks" in raw
    if not table:
        for key in ("count", "classes", "order"):
            if key not in raw and key == "count":
                raise reader.fail("bag", "missing required key 'count'", BAG_KEYS["count"].expected)
            if key in raw and key != "count":
                raise reader.fail(f"bag.{key}", f"'{key}' needs a task table",
                                  'tasks = "tasks.csv" or [[bag.tasks]] (docs/configuration.md#bags-of-unequal-tasks)')
    site_commands = raw.get("site_commands", {})
    for key, command in [("bag.command", raw["command"]),
                         *((f"bag.site_commands.{site}", command) for site, command in site_commands.items())]:
        _check_command(reader, key, command, table)
    prof = reader.check(raw["profile"], PROFILE_KEYS, "bag.profile")
    if "per_size" in prof and not table:
        raise reader.fail("bag.profile.per_size", "a size law needs tasks with sizes",
                          'a task table (tasks = "tasks.csv" or [[bag.tasks]]), or no per_size')
    profile = Profile(float(prof["instructions"]), prof.get("cycles"), prof.get("ipc"), prof.get("baseline"))
    cores = int(raw.get("cores_per_task", 1))
    data = _data(reader, raw)
    if not table:
        return Bag(raw["name"], raw["command"], int(raw["count"]), cores, profile, raw.get("isa", "x86"),
                   str(path), int(raw.get("perf_every", 0)), tuple(site_commands.items()), data)
    tasks = _tasks(reader, raw, prof, cores)
    if "count" in raw and int(raw["count"]) != len(tasks):
        raise reader.fail("bag.count", f"count = {raw['count']:,} but the task table has {len(tasks):,} rows",
                          "no count (the table's rows are the bag), or the number of rows")
    templates = [raw["command"], *site_commands.values()]
    if any("{size:" in t for t in templates):   # a format spec a row's size may not fit ({size:d}, 2.5)
        from resel.command_template import fill
        for i, task in enumerate(tasks):
            for template in templates:
                try:
                    fill(template, i, raw["name"], (task.name, task.size, task.args))
                except (ValueError, TypeError) as exc:
                    raise InputError(task.source, task.where, f"task {task.name!r}: size {task.size:g} does not "
                                     f"fit the command's {{size:…}} ({exc})",
                                     "a whole size, or a format spec for any number (e.g. {size:g})") from None
    mean = sum(t.instructions for t in tasks) / len(tasks)
    return Bag(raw["name"], raw["command"], len(tasks), max(t.cores for t in tasks),
               Profile(mean, None, None, profile.baseline), raw.get("isa", "x86"), str(path),
               int(raw.get("perf_every", 0)), tuple(site_commands.items()), data, tasks, raw.get("order", "auto"))


def _classes(reader: _Reader, raw: dict[str, Any], prof: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each class's size law (I(0), instructions per unit of size): ``[bag.profile]`` is the
    class of a row that names none (``""``), ``[bag.classes.NAME]`` the others."""
    laws = {"": (float(prof["instructions"]), float(prof.get("per_size", 0.0)))}
    for name, table in raw.get("classes", {}).items():
        where = f"bag.classes.{name}"
        if _CONTROL.search(name) or not name.strip():
            raise reader.fail(where, f"bad class name {name!r}", "a name without control characters")
        cls = reader.check(table, CLASS_KEYS, where)
        laws[name] = (float(cls["instructions"]), float(cls.get("per_size", 0.0)))
    return laws


def _tasks(reader: _Reader, raw: dict[str, Any], prof: dict[str, Any], cores: int) -> tuple[TaskSpec, ...]:
    """The bag's task table: ``tasks = "FILE.csv"`` (beside the bag file) or ``[[bag.tasks]]``.

    Every row is checked as it is read; an error names the file and line of the row, the
    column and the fix (a duplicate name also the row that had it first)."""
    laws = _classes(reader, raw, prof)
    spec = raw["tasks"]
    if isinstance(spec, str):
        rows = _csv_rows(reader, spec)
    else:
        rows = []
        for i, entry in enumerate(spec):
            where = f"bag.tasks[{i}]"
            line = reader._line_of(where + ".name")
            label = f"{where} (line {line})" if line else where
            if not isinstance(entry, dict):
                raise reader.fail(where, f"is {type(entry).__name__}", "a [[bag.tasks]] table with name = \"…\"")
            rows.append((str(reader.path), label, entry))
    if len(rows) > MAX_TASKS:
        raise InputError(rows[0][0], None, f"{len(rows):,} tasks", f"at most {MAX_TASKS:,}")
    seen: dict[str, str] = {}
    out = []
    for path, where, row in rows:
        task = _task(path, where, row, laws, cores)
        if task.name in seen:
            raise InputError(path, where, f"task name {task.name!r} is already used by {seen[task.name]}",
                             "a name of its own for each task (`resel results` shows it beside the task's index)")
        seen[task.name] = where
        out.append(task)
    return tuple(out)


def _csv_rows(reader: _Reader, name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The rows of a task table's CSV file, relative to the bag file: (file, ``line N``, row)."""
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = reader.path.parent / path
    text = read_text(path, MAX_FILE_BYTES * 16, "a CSV task table")
    records = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(records, None)
    except csv.Error as exc:
        raise InputError(str(path), "line 1", f"not CSV: {exc}", "a header row: name,size,cores,args,class") from None
    if not header or not any(h.strip() for h in header):
        raise InputError(str(path), "line 1", "no header row", "a first line naming the columns: name,size,cores,args,class")
    columns = [h.strip().lower() for h in header]
    for column in columns:
        if column not in TASK_COLUMNS:
            raise InputError(str(path), "line 1", f"unknown column {column!r}", f"columns among {', '.join(TASK_COLUMNS)}")
    if "name" not in columns:
        raise InputError(str(path), "line 1", "no 'name' column", "a header with name (and size, cores, args, class)")
    if len(set(columns)) != len(columns):
        raise InputError(str(path), "line 1", "a column named twice", "each column once")
    rows = []
    try:
        for values in records:
            line = records.line_num
            if not values or not any(v.strip() for v in values):
                continue   # a blank line
            if len(values) != len(columns):
                raise InputError(str(path), f"line {line}", f"{len(values)} fields for {len(columns)} columns "
                                 f"({','.join(columns)})", "one field per column; quote a field holding a comma")
            rows.append((str(path), f"line {line}", {c: v for c, v in zip(columns, values) if v.strip() != "" or c == "args"}))
            if len(rows) > MAX_TASKS:
                break
    except csv.Error as exc:
        raise InputError(str(path), f"line {records.line_num}", f"not CSV: {exc}", "one task per line") from None
    if not rows:
        raise InputError(str(path), None, "no task rows", "one line per task under the header")
    return rows


def unknown_key(key: str, known: Any) -> str:
    """"unknown key 'cores_per_tsak' (did you mean 'cores_per_task'?)": a typo is the usual
    cause, and the list of every allowed key (the error's "expected") hides the one meant."""
    import difflib
    close = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.75)
    return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def _task(path: str, where: str, row: dict[str, Any], laws: dict[str, tuple[float, float]], cores: int) -> TaskSpec:
    """One row of a task table, checked: a CSV row's fields are text, an inline one's TOML values."""
    for key in row:
        if key not in TASK_COLUMNS:
            raise InputError(path, where, unknown_key(key, TASK_COLUMNS), f"keys among {', '.join(TASK_COLUMNS)}")
    name = row.get("name")
    name = name.strip() if isinstance(name, str) else name
    if not isinstance(name, str) or not name or _CONTROL.search(name):
        raise InputError(path, where, "missing task name" if not name else f"bad task name {name!r}",
                         "name: a non-empty name without control characters")
    size = _field(path, where, name, "size", row.get("size", 0), False)
    if not 0 <= size <= MAX_SIZE:
        raise InputError(path, where, f"task {name!r}: size {size:g} is out of range", f"a size from 0 to {MAX_SIZE:g}")
    ncores = _field(path, where, name, "cores", row.get("cores", cores), True)
    if not 1 <= ncores <= MAX_CORES:
        raise InputError(path, where, f"task {name!r}: cores {ncores:g} is out of range",
                         f"a whole number of cores from 1 to {MAX_CORES:,}")
    args = row.get("args", "")
    if not isinstance(args, str) or _CONTROL.search(args.replace("\t", " ")):
        raise InputError(path, where, f"task {name!r}: bad args {args!r}", "args: shell words on one line")
    cls = row.get("class", "")
    cls = cls.strip() if isinstance(cls, str) else cls
    if cls not in laws:
        known = ", ".join(repr(c) for c in laws if c) or "none: add [bag.classes.NAME]"
        raise InputError(path, where, f"task {name!r}: unknown class {cls!r}", f"a class of the bag file ({known})")
    setup, per_size = laws[cls]
    return TaskSpec(name, setup + per_size * size, size, int(ncores), args, cls, path, where)


def _field(path: str, where: str, name: str, column: str, value: Any, integer: bool) -> float:
    """A number column of a row: a TOML number, or a CSV field that reads as one."""
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            what = "a whole number" if integer else "a number"
            raise InputError(path, where, f"task {name!r}: {column} {text!r} is not {what}",
                             f"{column}: {what}, e.g. {'8' if integer else '50000'}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise InputError(path, where, f"task {name!r}: bad {column} {value!r}",
                         f"{column}: {'a whole number' if integer else 'a number'}")
    if not math.isfinite(value):
        raise InputError(path, where, f"task {name!r}: {column} {value!r} is not finite", f"{column}: a finite number")
    return value


def _data(reader: _Reader, raw: dict[str, Any]) -> DataSpec | None:
    """The bag's ``inputs``, ``outputs``, ``results`` and ``[bag.data]`` (docs/data.md), each
    entry checked here so a pattern that can never match is an error before any work."""
    if not any(k in raw for k in ("inputs", "outputs", "results", "data")):
        return None
    inputs: list[InputSpec] = []
    for i, entry in enumerate(raw.get("inputs", [])):
        where = f"bag.inputs[{i}]"
        if isinstance(entry, dict):
            entry = reader.check(entry, INPUT_KEYS, where)
            pattern, name = entry["path"], entry.get("as")
        elif isinstance(entry, str) and entry:
            pattern, name = entry, None
        else:
            raise reader.fail(where, f"bad value {entry!r}", INPUT_KEYS["path"].expected + ', or { path = ..., as = ... }')
        if is_url(pattern):
            why = url_problem(pattern)
            if why:
                raise reader.fail(where, f"bad URL {pattern!r}: {why}",
                                  "a URL the site fetches, such as osdf:///ospool/PROJECT/data/ff.itp (docs/data.md)")
        else:
            _pattern_problem(reader, where, pattern, relative=False)
        if name is not None:
            why = relative_path_problem(name, glob=False)
            if why:
                raise reader.fail(f"{where}.as", f"bad name {name!r}: {why}", "a file name in the task's folder")
        inputs.append(InputSpec(pattern, name))
    _url_names_differ(reader, inputs)
    outputs: list[OutputSpec] = []
    for i, entry in enumerate(raw.get("outputs", [])):
        where = f"bag.outputs[{i}]"
        if isinstance(entry, dict):
            entry = reader.check(entry, OUTPUT_KEYS, where)
            pattern, optional = entry["glob"], bool(entry.get("optional", False))
        elif isinstance(entry, str) and entry:
            pattern, optional = entry, False
        else:
            raise reader.fail(where, f"bad value {entry!r}", OUTPUT_KEYS["glob"].expected + ', or { glob = ..., optional = true }')
        _pattern_problem(reader, where, pattern, relative=True)
        outputs.append(OutputSpec(pattern, optional))
    for key, entries in (("inputs", inputs), ("outputs", outputs)):
        if len(entries) > MAX_ENTRIES:
            raise reader.fail(f"bag.{key}", f"{len(entries):,} entries", f"at most {MAX_ENTRIES:,} (a glob names many files)")
    sizes = reader.check(raw.get("data", {}), DATA_KEYS, "bag.data")
    return DataSpec(tuple(inputs), tuple(outputs), raw.get("results"), str(reader.path.parent.resolve()),
                    *(None if sizes.get(k) is None else float(sizes[k]) for k in ("input_mb", "shared_mb", "output_mb")))


def _url_names_differ(reader: _Reader, inputs: list[InputSpec]) -> None:
    """Two URL inputs must arrive in an HTCondor slot under different file names (the pool's
    transfer saves each under its own), and take different names in the task's folder."""
    arrive: dict[str, int] = {}
    named: dict[str, int] = {}
    for i, spec in enumerate(inputs):
        if not spec.is_url:
            continue
        for seen, name, what in ((arrive, url_file_name(spec.pattern), "arrive in a slot as"),
                                 (named, spec.file_name, "are named")):
            if name in seen:
                raise reader.fail(f"bag.inputs[{i}]", f"URL inputs {seen[name]} and {i} both {what} {name!r}",
                                  "URLs whose last path parts differ (HTCondor saves each file under it)")
            seen[name] = i


def _pattern_problem(reader: _Reader, where: str, pattern: str, *, relative: bool) -> None:
    """Refuse an input or output pattern that cannot be what its author meant."""
    if len(pattern) > MAX_PATTERN:
        raise reader.fail(where, f"a pattern of {len(pattern):,} characters", f"at most {MAX_PATTERN:,}")
    for problem in template_problems(pattern):
        raise reader.fail(where, problem, "a path with {index} or {name} where the task's own file differs")
    if relative:
        why = relative_path_problem(pattern, glob=True)
        if why:
            raise reader.fail(where, f"bad output {pattern!r}: {why}",
                              "a glob relative to the task's folder, such as md.log or traj/*.xtc")
    elif _CONTROL.search(pattern):
        raise reader.fail(where, f"bad input {pattern!r}: control characters", "a path")


def relative_path_problem(path: str, *, glob: bool) -> str | None:
    """Why ``path`` cannot name a file inside a task's folder (None: it can). Absolute paths,
    ``..``, empty or ``.`` components, backslashes and control characters are refused: the
    agent resolves such names inside the task's folder and nowhere else (docs/data.md)."""
    if _CONTROL.search(path):
        return "control characters"
    if path.startswith("/"):
        return "an absolute path"
    if "\\" in path:
        return "a backslash (paths use /)"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "an empty, '.' or '..' part (it must stay inside the task's folder)"
    if not glob and any(ch in path for ch in "*?["):
        return "glob characters (* ? [) in a name"
    return None


def _check_command(reader: _Reader, key: str, command: str, table: bool = False) -> None:
    """A bag's command (or a site's): not blank, short enough to run (:data:`MAX_COMMAND_BYTES`),
    and a template that fills in as its author meant (resel/command_template.py)."""
    if not command.strip():
        raise reader.fail(key, "is blank", "a shell command, e.g. command = \"gmx mdrun -deffnm md{index}\"")
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        raise reader.fail(key, f"is {size:,} bytes long",
                          f"at most {MAX_COMMAND_BYTES:,} bytes: a task runs as `/bin/sh -c COMMAND`, one "
                          "argument, which Linux bounds; put a long command in a script and run that")
    for problem in template_problems(command, table):
        raise reader.fail(key, problem, "a shell command; see docs/configuration.md#command")


def check_site_commands(bag: Bag, sites: list[Site]) -> None:
    """A bag's ``[bag.site_commands]`` must name sites of the sites file in use: a misspelt name
    would silently run the default command there.

    Raises:
        InputError: naming the bag file, the key and the sites it may name.
    """
    names = {s.name for s in sites}
    for site, _ in bag.site_commands:
        if site not in names:
            raise InputError(bag.source, f"bag.site_commands.{site}", f"no site named {site!r} in the sites file",
                             f"one of {', '.join(sorted(names))}")
    check_task_cores(bag, sites)


def check_task_cores(bag: Bag, sites: list[Site]) -> None:
    """Every task of a task table must fit some site of the sites file in use: a task of 8
    cores on sites of at most 4 could never run (the table's row and the widest site named).

    Raises:
        InputError: naming the row (file and line), its cores and the widest site.
    """
    if not bag.tasks or not sites:
        return
    widest = max(sites, key=lambda s: min(s.pilot.max_cores or s.cores, s.cores))
    most = min(widest.pilot.max_cores or widest.cores, widest.cores)
    for task in bag.tasks:
        if task.cores > most:
            raise InputError(task.source or bag.source, task.where or None,
                             f"task {task.name!r} asks for {task.cores} cores, more than any site gives "
                             f"(the most: {widest.name}, {most})", f"cores <= {most}, or a site with more cores")


CLASS_KEYS = {key: PROFILE_KEYS[key] for key in ("instructions", "per_size")}


def load_sites(path: str | Path) -> list[Site]:
    """Read a sites file: one ``[[site]]`` table per site (see examples/sites-thesis.toml).

    Raises:
        InputError: naming the file, key (and line) and what is expected.
    """
    reader = _Reader(Path(path))
    extra = [k for k in reader.data if k != "site"]
    if extra:
        raise reader.fail(extra[0], f"unknown top-level key {extra[0]!r}", "only [[site]] tables")
    raw_sites = reader.data.get("site")
    if not isinstance(raw_sites, list) or not raw_sites:
        raise reader.fail("site", "no sites defined", "one or more [[site]] tables")
    sites = [_site(reader, raw, f"site[{i}]") for i, raw in enumerate(raw_sites)]
    seen: set[str] = set()
    for i, site in enumerate(sites):
        if site.name in seen:
            raise reader.fail(f"site[{i}].name", f"site name {site.name!r} is used twice", "unique site names")
        seen.add(site.name)
    return sites


def _site(reader: _Reader, raw: Any, key_path: str) -> Site:
    raw = reader.check(raw, SITE_KEYS, key_path)
    if raw["kind"] not in SITE_KINDS:
        raise reader.fail(f"{key_path}.kind", f"unknown site kind {raw['kind']!r}", f"one of {', '.join(SITE_KINDS)}")
    clock = reader.check(raw["clock"], CLOCK_KEYS, f"{key_path}.clock")
    pilot_raw = reader.check(raw.get("pilot", {}), PILOT_KEYS, f"{key_path}.pilot")
    pilot = PilotPolicy(
        mode=pilot_raw.get("mode", "single"),
        max_cores=pilot_raw.get("max_cores"),
        walltime=float(pilot_raw.get("walltime", 48 * 3600)),
        max_pilots=int(pilot_raw.get("max_pilots", 1 if pilot_raw.get("mode", "single") == "single" else 100_000)),
    )
    wait = queue = None
    if raw["kind"] == "simulated":
        if ("wait" in raw) == ("queue" in raw):
            raise reader.fail(key_path, "a simulated site needs exactly one of 'wait' and 'queue'",
                              "wait = {dist = 'lognormal', median = 600, sigma = 1} or "
                              "queue = {policy = 'easy', trace = 'hpc2n.swf'}")
        if "wait" in raw:
            dist, extras = reader.dist(raw["wait"], f"{key_path}.wait", WAIT_EXTRA_KEYS)
            wait = WaitModel(dist, float(extras.get("size_exponent", 0.0)), int(extras.get("cores_per_node", 1)))
        else:
            q = reader.check(raw["queue"], QUEUE_KEYS, f"{key_path}.queue")
            trace = Path(q["trace"])
            if not trace.is_absolute():
                trace = reader.path.parent / trace
            if not trace.is_file():
                raise reader.fail(f"{key_path}.queue.trace", f"trace {str(trace)!r} not found",
                                  "an SWF file, relative to the sites file")
            queue = QueueModel(q["policy"], str(trace), float(q.get("offset", 86400.0)),
                               float(q.get("load", 1.0)), float(q.get("speed", 1.0)))
    access = None
    if raw["kind"] in LIVE_KINDS:
        if "access" not in raw:
            raise reader.fail(key_path, f"a {raw['kind']} site needs an [site.access] table",
                              'access = {transport = "local", workdir = "~/resel-work"}')
        access = _access(reader, raw["access"], f"{key_path}.access", raw["kind"])
    elif "access" in raw:
        raise reader.fail(f"{key_path}.access", "only live sites have an access table",
                          f"kind = one of {', '.join(LIVE_KINDS)}, or no access table")
    truth = None
    if "truth" in raw:
        t = reader.check(raw["truth"], TRUTH_KEYS, f"{key_path}.truth")
        ipc, _ = reader.dist(t.get("ipc", 1.0), f"{key_path}.truth.ipc", positive=True)
        tclock, _ = reader.dist(t.get("clock", clock.get("avg", clock["base"])), f"{key_path}.truth.clock", positive=True)
        truth = Truth(float(t.get("kappa", raw.get("kappa", 1.0))), ipc, tclock,
                      float(t.get("fail", 0.0)), float(t.get("fail_after", 60.0)),
                      _bandwidth(reader, t["bandwidth"], f"{key_path}.truth.bandwidth") if "bandwidth" in t else None)
    return Site(
        name=raw["name"], kind=raw["kind"], cores=int(raw["cores"]),
        clock=Clock(float(clock["base"]), clock.get("avg")), kappa=float(raw.get("kappa", 1.0)),
        pilot=pilot, isa=raw.get("isa", "x86"), reselect_target=raw.get("reselect_target", True),
        wait=wait, queue=queue, truth=truth, access=access, notes=raw.get("notes", ""),
        bandwidth=_bandwidth(reader, raw["bandwidth"], f"{key_path}.bandwidth") if "bandwidth" in raw else None,
    )


def _bandwidth(reader: _Reader, value: Any, key_path: str) -> Bandwidth:
    """``bandwidth = 100`` (MB/s both ways) or ``{ in = 100, out = 40 }``."""
    if isinstance(value, dict):
        b = reader.check(value, BANDWIDTH_KEYS, key_path)
        return Bandwidth(float(b["in"]), float(b["out"]))
    return Bandwidth(float(value), float(value))


def _access(reader: _Reader, raw: Any, key_path: str, kind: str) -> Access:
    a = reader.check(raw, ACCESS_KEYS, key_path)
    if "api" in a and a["api"] not in APIS[kind]:
        raise reader.fail(f"{key_path}.api", f"a {kind} site cannot use api {a['api']!r}", f"one of {', '.join(APIS[kind])}")
    if kind != "pbs" and "dialect" in a:
        raise reader.fail(f"{key_path}.dialect", "only PBS sites have a dialect", "no dialect key")
    if kind != "htcondor" and ("project" in a or "accounting_group" in a):
        key = "project" if "project" in a else "accounting_group"
        raise reader.fail(f"{key_path}.{key}", "only HTCondor sites have a project / accounting group",
                          "account = ... for batch sites")
    if "queue" in a and "partition" in a:
        raise reader.fail(f"{key_path}.queue", "give either queue or partition (they are the same thing)",
                          "one of them")
    submit_args = _submit_options(reader, a, key_path, kind)
    submit_lines = dict(a.get("submit_lines", {}))
    if submit_lines and kind != "htcondor":
        raise reader.fail(f"{key_path}.submit_lines", f"a {kind} site takes "
                          f"{'sbatch_options' if kind == 'slurm' else 'qsub_options'}, not HTCondor submit lines",
                          f"{'sbatch_options' if kind == 'slurm' else 'qsub_options'} = [...]")
    for key, why in site_options.check_condor_lines(submit_lines):
        raise reader.fail(f"{key_path}.submit_lines.{key}", why, "see docs/configuration.md#site-options-and-setup")
    setup = list(a.get("setup", ()))
    for index, why in site_options.check_setup(setup):
        raise reader.fail(f"{key_path}.setup[{index}]", why, "one shell command per list item")
    transport = a.get("transport", "local")
    if transport == "ssh" and "host" not in a:
        raise reader.fail(key_path, "an ssh transport needs a host", 'host = "login.cluster.org" (or a ~/.ssh/config alias)')
    if a.get("api") == "rest" and not {"rest_url", "rest_user", "rest_token_file"} <= set(a):
        raise reader.fail(key_path, "api = 'rest' needs rest_url, rest_user and rest_token_file",
                          'rest_url = "https://host:6820", rest_user = "me", rest_token_file = "~/.slurm-token"')
    here = reader.path.parent
    def local_path(key: str) -> str | None:   # files on this machine, relative to the sites file
        value = a.get(key)
        if value is None:
            return None
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else here / p)
    if kind != "slurm":   # (dialect, project, accounting_group and submit_lines are checked above)
        for key in ("qos", "rest_url", "rest_user", "rest_token_file"):
            if key in a:
                raise reader.fail(f"{key_path}.{key}", f"only Slurm sites have {key}: a {kind} site would ignore it",
                                  f"no {key} key")
    if kind == "htcondor":
        for key in ("partition", "queue", "account"):
            if key in a:
                raise reader.fail(f"{key_path}.{key}", f"an HTCondor pool has no {key}: a pool site would ignore it",
                                  "project = ... (OSG) or accounting_group = ...")
    if kind == "slurm":
        scheduler: Any = SlurmOptions(partition=a.get("partition") or a.get("queue"), account=a.get("account"),
                                      qos=a.get("qos"), sbatch_options=submit_args, rest_url=a.get("rest_url"),
                                      rest_user=a.get("rest_user"), rest_token_file=local_path("rest_token_file"))
    elif kind == "pbs":
        scheduler = PBSOptions(queue=a.get("queue") or a.get("partition"), account=a.get("account"),
                               qsub_options=submit_args, dialect=a.get("dialect", "auto"))
    else:
        scheduler = HTCondorOptions(project=a.get("project"), accounting_group=a.get("accounting_group"),
                                    submit_lines=submit_lines)
    transport_spec = TransportSpec(
        kind=transport, host=a.get("host"), user=a.get("user"), port=a.get("port"), key=local_path("key"),
        ssh_config=local_path("ssh_config"), known_hosts=local_path("known_hosts"),
        accept_new_host_keys=bool(a.get("accept_new_host_keys", False)))
    return Access(transport=transport_spec, workdir=a["workdir"], python=a.get("python", "python3"),
                  env=dict(a.get("env", {})), api=a.get("api", APIS[kind][0]), scheduler=scheduler,
                  setup=tuple(setup), requeue=a.get("requeue", False))


def _submit_options(reader: _Reader, a: dict[str, Any], key_path: str, kind: str) -> tuple[str, ...]:
    """The site's extra submit options (``sbatch_options``, ``qsub_options`` or the older
    ``submit_args``), each refused if it would override what resel sets itself."""
    own = {"slurm": "sbatch_options", "pbs": "qsub_options"}.get(kind)
    for key in ("sbatch_options", "qsub_options"):
        if key in a and key != own:
            raise reader.fail(f"{key_path}.{key}", f"a {kind} site takes "
                              f"{own or 'submit_lines (a table of HTCondor submit commands)'}, not {key}",
                              own or 'submit_lines = { request_memory = "4GB" }')
    if "submit_args" in a and own is None:
        raise reader.fail(f"{key_path}.submit_args", "an HTCondor site takes submit_lines, not submit_args",
                          'submit_lines = { request_memory = "4GB" }')
    if "submit_args" in a and own in a:
        raise reader.fail(f"{key_path}.submit_args", f"give either submit_args or {own} (the same thing)", own)
    key = own if own in a else "submit_args"
    options = list(a.get(key, ()))
    if kind == "slurm":
        problems = site_options.check_sbatch_options(options)
    elif kind == "pbs":
        problems = site_options.check_qsub_options(options, dialect=a.get("dialect", "auto"))
    else:
        problems = []
    for index, why in problems:
        raise reader.fail(f"{key_path}.{key}[{index}]", why, "see docs/configuration.md#site-options-and-setup")
    return tuple(options)


def _centre(dist: Dist) -> float:
    """The value a positive quantity's distribution is centred on (its floor, if it has one)."""
    if dist.kind == "uniform":
        return dist.param("low")
    if dist.kind == "empirical":
        return min(dist.param("samples"))
    floor = dist.param("min")
    return floor if floor is not None and dist.kind == "normal" else dist.mean()
