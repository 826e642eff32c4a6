"""Run a command under ``perf stat`` and read its machine-readable (``-x,``) output.

LIM needs a task's instruction count and the clock it ran at; ``perf stat`` gives both where the
machine exposes hardware counters. Where it does not (VMs such as the CI machine print
``<not supported>`` for cycles and instructions) the figures come back as ``None`` and the
fallback chain (:mod:`resel.probes.fallback`) fills them — so every figure carries the method that
produced it in :attr:`PerfRun.methods`, and the model can decide how far to trust it.

The CSV format (perf-stat(1), "CSV FORMAT"): ``value,unit,event,run-time,percent,metric,metric-unit``;
lines starting with ``#`` are comments; ``value`` is a number, ``<not supported>`` or
``<not counted>``. perf is run with ``LC_ALL=C`` so numbers never use a decimal comma, which
would be indistinguishable from the field separator.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from resel.errors import InputError, ReselError

#: Events asked for: task-clock always works (it is a software counter); the ``:u`` variants count
#: user space only, which is what a task's own code does and is stable across kernels.
EVENTS = ("task-clock", "cycles", "instructions", "cycles:u", "instructions:u")

_TIME_UNITS = {"msec": 1e-3, "ms": 1e-3, "usec": 1e-6, "us": 1e-6, "nsec": 1e-9, "ns": 1e-9,
               "sec": 1.0, "s": 1.0, "": 1e-3}   # perf prints task-clock in msec; no unit = msec


@dataclass(frozen=True)
class Counter:
    """One line of perf's CSV: the value (None when not supported/counted) and why."""

    event: str
    value: float | None
    unit: str
    status: str          # "counted", "not supported", "not counted"
    line: int


@dataclass(frozen=True)
class PerfRun:
    """One measured run. ``None`` means "not measured"; ``methods`` says how each figure was got.

    ``methods`` keys are the field names (``instructions``, ``cycles``, ``ipc``, ``task_clock_s``,
    ``avg_ghz``, ``wall_s``); values such as ``perf:instructions:u``, ``callgrind:Ir``,
    ``cpuinfo:sampled``, ``wall``, ``app-log:gromacs``.
    """

    instructions: float | None
    cycles: float | None
    ipc: float | None
    task_clock_s: float | None
    avg_ghz: float | None
    wall_s: float | None
    exit_status: int | None
    methods: dict[str, str] = field(default_factory=dict)

    FIGURES = ("instructions", "cycles", "ipc", "task_clock_s", "avg_ghz", "wall_s")

    def replace(self, **changes) -> "PerfRun":
        """A copy with some figures changed (methods merged, not replaced)."""
        methods = dict(self.methods)
        methods.update(changes.pop("methods", {}))
        return dataclasses.replace(self, methods=methods, **changes)


def _event_name(raw: str) -> str:
    """Normalise hybrid-PMU names (``cpu_core/instructions/u``) to ``instructions:u``."""
    name = raw.strip()
    if "/" in name:
        parts = [p for p in name.split("/") if p]
        if len(parts) >= 2:
            name = parts[1] + (":" + parts[2] if len(parts) > 2 and parts[2] else "")
    return name


def parse_perf_csv(text: str, path: str = "<perf output>") -> dict[str, Counter]:
    """Parse ``perf stat -x,`` output into ``{event: Counter}``.

    Raises:
        InputError: a line that is neither a comment nor a counter line (naming file and line),
            or no counter line at all — so a broken perf is reported, not silently read as zeros.
    """
    counters: dict[str, Counter] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(",")
        if len(parts) < 3 or not parts[2].strip():
            raise InputError(path, f"line {lineno}", f"not a perf counter line: {line[:80]!r}",
                             "value,unit,event,... (perf stat -x, format)")
        value_s, unit, event = parts[0].strip(), parts[1].strip(), _event_name(parts[2])
        if value_s.startswith("<"):
            status = value_s.strip("<>").strip()
            if status not in ("not supported", "not counted"):
                raise InputError(path, f"line {lineno}", f"unknown counter status {value_s!r}",
                                 "<not supported> or <not counted>")
            value = None
        else:
            try:
                value = float(value_s)
            except ValueError:
                raise InputError(path, f"line {lineno}", f"counter value {value_s!r} is not a number",
                                 "a number, <not supported> or <not counted>") from None
            if not math.isfinite(value) or value < 0:
                raise InputError(path, f"line {lineno}", f"counter value {value_s!r} is out of range",
                                 "a finite number >= 0")
            status = "counted"
        if event.split(":")[0] in ("task-clock", "cpu-clock") and value is not None \
                and unit not in _TIME_UNITS:
            raise InputError(path, f"line {lineno}", f"unknown time unit {unit!r}", "msec, usec, nsec or sec")
        counters.setdefault(event, Counter(event, value, unit, status, lineno))
    if not counters:
        raise InputError(path, None, "no counter lines", "perf stat -x, output with at least one event")
    return counters


def _value(counters: dict[str, Counter], *names: str) -> tuple[float | None, str | None]:
    """The first of ``names`` that was counted, with its method name."""
    for name in names:
        c = counters.get(name)
        if c is not None and c.value is not None:
            return c.value, f"perf:{name}"
    return None, None


def figures_from_counters(counters: dict[str, Counter]) -> dict:
    """Derive PerfRun figures (except wall/exit) from parsed counters.

    Instructions prefer ``:u`` (the task's own code, not kernel noise). The clock pairs *all-mode*
    cycles with task-clock, since task-clock also includes kernel time; IPC pairs counters of the
    same mode so user instructions are not divided by all cycles.
    """
    methods: dict[str, str] = {}
    tc = None
    for name in ("task-clock", "cpu-clock"):
        c = counters.get(name)
        if c is not None and c.value is not None:
            tc = c.value * _TIME_UNITS[c.unit]
            methods["task_clock_s"] = f"perf:{name}"
            break
    instr, m = _value(counters, "instructions:u", "instructions")
    if m:
        methods["instructions"] = m
    cycles, m = _value(counters, "cycles", "cycles:u")
    if m:
        methods["cycles"] = m
    ipc = None
    for i_name, c_name in (("instructions:u", "cycles:u"), ("instructions", "cycles")):
        i_v, _ = _value(counters, i_name)
        c_v, _ = _value(counters, c_name)
        if i_v is not None and c_v:
            ipc = i_v / c_v
            methods["ipc"] = f"perf:{i_name}/{c_name}"
            break
    avg_ghz = None
    if cycles is not None and tc:
        avg_ghz = cycles / tc / 1e9
        methods["avg_ghz"] = f"{methods['cycles']}/task-clock"
    return {"instructions": instr, "cycles": cycles, "ipc": ipc, "task_clock_s": tc,
            "avg_ghz": avg_ghz, "methods": methods}


def perf_available() -> bool:
    return shutil.which("perf") is not None


def run_perf(argv: list[str], *, cwd: str | Path | None = None, events: tuple[str, ...] = EVENTS,
             timeout: float | None = None) -> PerfRun:
    """Run ``argv`` (a list, never a shell string) under ``perf stat`` and return its figures.

    The command's own output is discarded (it would mix with ``--json``); its exit status is kept.

    Raises:
        ReselError: perf is missing, or produced no readable output (its stderr is quoted).
        InputError: perf's output file is malformed.
    """
    if not argv:
        raise ReselError("no command to profile: give it after --, e.g. resel profile -- gmx mdrun ...")
    perf = shutil.which("perf")
    if perf is None:
        raise ReselError("perf is not installed (apt-get install linux-perf); use the fallback chain")
    control = _control_pipe(perf)
    try:
        for _ in range(_TRIES):
            run, lost = _run_perf_once(perf, argv, cwd=cwd, events=events, timeout=timeout,
                                       control=control)
            if control is not None or not lost:
                return run
    finally:
        if control is not None:
            os.close(control[0])
            os.close(control[1])
    return dataclasses.replace(run, exit_status=None)   # lost every time: its status is unknown, not 0


#: runs of perf stat for one measurement when perf loses the command's end (below)
_TRIES = 3

#: perf versions (path -> bool) known to take ``--control fd:N`` (perf 5.9 and later)
_CONTROL_WORKS: dict[str, bool] = {}


def _control_pipe(perf: str) -> tuple[int, int] | None:
    """A pipe whose read end is handed to ``perf stat --control fd:N``, or None where perf is too
    old to take it.

    Why: ``perf stat`` without a control fd waits for its command only if the command has not
    already ended. Its SIGCHLD handler sets the child's pid to -1, and the wait that follows is
    skipped when it finds -1 (tools/perf/builtin-stat.c, ``skip_signal`` and ``__run_perf_stat``).
    A command that ends within a few milliseconds, or under load, is then never waited for: perf
    reports exit status 0 whatever the command returned, and an elapsed time of microseconds.
    That happened to `/bin/false` 1.5 % of the time here when idle, 4 % when loaded, and on the CI
    machine often enough that three tries all failed. With a control fd perf waits in its event
    loop instead, by ``waitpid`` on that same pid (-1 once the handler has run), which reaps the
    command whatever the order. Its elapsed time can still come out as microseconds (a command that
    ended before perf read its start clock), so with a control fd that is no sign of a lost status
    and the run is not repeated; resel takes a run's wall time from its own clock anyway. The pipe
    is never written to; its write end is held open so that perf's poll does not see it hang up."""
    works = _CONTROL_WORKS.get(perf)
    if works is None:
        read_end, write_end = os.pipe()
        try:
            probe = subprocess.run([perf, "stat", "-x,", "-o", os.devnull, "--control", f"fd:{read_end}",
                                    "-e", "task-clock", "--", "/bin/true"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, pass_fds=(read_end,), timeout=30)
            works = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            works = False
        finally:
            os.close(read_end)
            os.close(write_end)
        _CONTROL_WORKS[perf] = works
    return os.pipe() if works else None


def _lost_the_end(text: str) -> bool:
    """Without a control fd (perf older than 5.9, :func:`_control_pipe`) perf stat sometimes
    loses the end of a short command: it reports exit status 0 whatever the command returned
    (`/bin/false` included) and an elapsed time of microseconds — task-clock over it, "CPUs
    utilized", comes out far above the CPUs there are, which no run can reach. Such a run is
    measured again."""
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 6 and _event_name(parts[2]) == "task-clock" and parts[6].strip() == "CPUs utilized":
            try:
                return float(parts[5]) > (os.cpu_count() or 1) + 0.5
            except ValueError:
                return False
    return False


def _run_perf_once(perf: str, argv: list[str], *, cwd: str | Path | None, events: tuple[str, ...],
                   timeout: float | None, control: tuple[int, int] | None = None) -> tuple[PerfRun, bool]:
    """One ``perf stat`` of ``argv``, and whether perf lost its end (:func:`_lost_the_end`)."""
    env = dict(os.environ, LC_ALL="C")
    with tempfile.TemporaryDirectory(prefix="resel-perf-") as tmp:
        out = os.path.join(tmp, "perf.csv")
        err = os.path.join(tmp, "stderr")
        ctl = ["--control", f"fd:{control[0]}"] if control is not None else []
        cmd = [perf, "stat", "-x,", "-o", out, *ctl, "-e", ",".join(events), "--", *argv]
        start = time.monotonic()
        with open(err, "wb") as err_f:
            try:
                proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=err_f, cwd=cwd, env=env, timeout=timeout,
                                      pass_fds=control[:1] if control is not None else ())
            except subprocess.TimeoutExpired:
                raise ReselError(f"{argv[0]}: did not finish within {timeout} s under perf") from None
        wall = time.monotonic() - start
        try:
            text = Path(out).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        if not text.strip():
            tail = Path(err).read_text(encoding="utf-8", errors="replace")[-500:]
            raise ReselError(f"perf stat wrote no counts for {argv[0]} (exit {proc.returncode}): {tail.strip()}")
        counters = parse_perf_csv(text, path=f"perf stat output for {argv[0]}")
    figs = figures_from_counters(counters)
    methods = figs.pop("methods")
    methods["wall_s"] = "wall"
    return PerfRun(wall_s=wall, exit_status=proc.returncode, methods=methods, **figs), _lost_the_end(text)
