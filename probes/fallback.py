"""The fallback chain for machines without hardware counters (VMs, most OSG nodes).

The thesis could use perf on only ~1.2 % of OSG runs. Where ``perf stat`` says
``<not supported>``, each missing figure is filled from the next-best source, and the method
says so:

* **instructions** — valgrind callgrind's ``Ir`` (instructions executed, exact but ~50× slower).
  Because of the slowdown it is usually run on a *reduced* problem and scaled:
  ``instructions_full = instructions_reduced × scale``. For GROMACS, ``scale`` is the ratio of
  MD steps, ``nsteps_full / nsteps_reduced`` (:func:`nsteps_scale`). That linear rule
  over-counts the fixed setup cost (reading the .tpr, domain setup — ~600 M instructions for a
  small water box), so when two reduced sizes were measured, :func:`affine_extrapolate` fits
  setup + per-step cost and is the better estimate.
* **clock** — task-clock (CPU seconds) times the clock sampled from cpufreq or /proc/cpuinfo
  while the command ran gives an *estimated* cycle count, and IPC = instructions / cycles.
* **wall time** — the application's own log as the last resort (GROMACS md.log ``Time:`` line),
  for runs whose process resel could not time itself (e.g. results brought back from a site).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from resel.errors import InputError, ReselError
from resel.probes.perf import PerfRun

# ---------------------------------------------------------------- callgrind


def parse_callgrind_out(text: str, path: str = "<callgrind.out>") -> int:
    """The ``Ir`` total of one callgrind output file: its ``totals:`` line, else ``summary:``.

    ``totals:`` is the sum of all cost lines in the file and equals what valgrind prints as
    ``Collected :``; ``summary:`` can be slightly lower for a process that exec'd.

    Raises:
        InputError: neither line is present or its first number is not an integer.
    """
    found: dict[str, int] = {}
    events = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith("events:"):
            events = line.split(":", 1)[1].split()
        for key in ("totals", "summary"):
            if line.startswith(key + ":"):
                fields = line.split(":", 1)[1].split()
                try:
                    found[key] = int(fields[0])
                except (IndexError, ValueError):
                    raise InputError(path, f"line {lineno}", f"bad {key} line {line[:80]!r}",
                                     f"'{key}: <Ir count>'") from None
    if events is not None and events[:1] != ["Ir"]:
        raise InputError(path, "events:", f"first event is {events[:1]}", "Ir (callgrind default)")
    for key in ("totals", "summary"):
        if key in found:
            return found[key]
    raise InputError(path, None, "no 'totals:' or 'summary:' line", "a callgrind output file")


def parse_callgrind_stderr(text: str) -> int | None:
    """Sum of ``Collected : N`` (else ``I refs: N,NNN``) over all processes valgrind reported."""
    try:
        collected = [int(m) for m in re.findall(r"^==\d+== Collected\s*:\s*(\d+)", text, re.MULTILINE)]
        if collected:
            return sum(collected)
        refs = [int(m.replace(",", "")) for m in re.findall(r"^==\d+== I\s+refs:\s*([\d,]+)", text, re.MULTILINE)]
    except ValueError:      # over int()'s 4300-digit limit: not a count valgrind printed
        return None
    return sum(refs) if refs else None


def run_callgrind(argv: list[str], *, cwd: str | Path | None = None, timeout: float | None = None) -> int:
    """Instructions executed by ``argv`` and all its child processes, counted by callgrind.

    Children are traced (``--trace-children=yes``, one output file per pid, summed) because
    perf stat counts them too and wrapper scripts (pyenv shims, ``gmx`` wrappers) exec the real
    program.

    Raises:
        ReselError: valgrind missing, or no count could be read.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise ReselError("valgrind is not installed (apt-get install valgrind): cannot count instructions")
    with tempfile.TemporaryDirectory(prefix="resel-callgrind-") as tmp:
        cmd = [valgrind, "--tool=callgrind", "--trace-children=yes",
               f"--callgrind-out-file={os.path.join(tmp, 'callgrind.%p.out')}", "--", *argv]
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, cwd=cwd, timeout=timeout,
                                  env=dict(os.environ, LC_ALL="C"))
        except subprocess.TimeoutExpired:
            raise ReselError(f"{argv[0]}: did not finish within {timeout} s under callgrind "
                             "(give a smaller --reduced problem)") from None
        stderr = proc.stderr.decode("utf-8", "replace")
        files = sorted(glob.glob(os.path.join(tmp, "callgrind.*.out")))
        if files:
            return sum(parse_callgrind_out(Path(f).read_text(encoding="utf-8", errors="replace"), f)
                       for f in files)
        total = parse_callgrind_stderr(stderr)
        if total is None:
            raise ReselError(f"callgrind counted nothing for {argv[0]} (exit {proc.returncode}): "
                             f"{stderr[-400:].strip()}")
        return total


# ---------------------------------------------------------------- scaling


def nsteps_scale(nsteps_full: int, nsteps_reduced: int) -> float:
    """Scale factor for a reduced GROMACS run: the ratio of MD steps (linear rule, see module doc)."""
    if nsteps_full <= 0 or nsteps_reduced <= 0:
        raise ReselError(f"nsteps must be positive, got full={nsteps_full} reduced={nsteps_reduced}")
    return nsteps_full / nsteps_reduced


def affine_extrapolate(n1: float, i1: float, n2: float, i2: float, n_full: float) -> float:
    """Instructions at size ``n_full`` from two reduced runs, as setup + per-unit cost.

    ``I(n) = a + b·n`` through (n1, i1) and (n2, i2); unlike the linear rule it does not
    multiply the setup cost ``a`` by the scale factor.
    """
    if n1 == n2:
        raise ReselError("affine extrapolation needs two different reduced sizes")
    b = (i2 - i1) / (n2 - n1)
    a = i1 - b * n1
    return a + b * n_full


# ---------------------------------------------------------------- application logs


@dataclass(frozen=True)
class GromacsTiming:
    """The timing block at the end of a GROMACS md.log."""

    core_s: float
    wall_s: float
    percent: float | None
    ns_per_day: float | None
    hour_per_ns: float | None


_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"


def parse_gromacs_log(text: str, path: str = "md.log") -> GromacsTiming:
    """Read ``Time:`` (core s, wall s, %) and ``Performance:`` (ns/day, hour/ns) from md.log.

    The real format (GROMACS 2022)::

                       Core t (s)   Wall t (s)        (%)
               Time:        0.674        0.674      100.0
                         (ns/day)    (hour/ns)
        Performance:       51.558        0.465

    Raises:
        InputError: no ``Time:`` line (the run did not finish, or this is not an md.log).
    """
    time_m = None
    perf_m = None
    for m in re.finditer(rf"^\s*Time:\s+{_NUM}\s+{_NUM}(?:\s+{_NUM})?\s*$", text, re.MULTILINE):
        time_m = m                                          # the last block wins (appended logs)
    for m in re.finditer(rf"^\s*Performance:\s+{_NUM}(?:\s+{_NUM})?\s*$", text, re.MULTILINE):
        perf_m = m
    if time_m is None:
        raise InputError(path, None, "no 'Time:' line with core and wall seconds",
                         "a finished GROMACS md.log ('Time:  <core s>  <wall s>  <%>')")
    pct = float(time_m.group(3)) if time_m.group(3) else None
    nsd = float(perf_m.group(1)) if perf_m else None
    hpn = float(perf_m.group(2)) if perf_m and perf_m.group(2) else None
    return GromacsTiming(float(time_m.group(1)), float(time_m.group(2)), pct, nsd, hpn)


def from_app_log(path: str | Path, exit_status: int | None = None) -> PerfRun:
    """A PerfRun from a GROMACS md.log alone: wall and CPU time, nothing else measured."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(p), None, f"cannot read application log: {exc.strerror}") from None
    t = parse_gromacs_log(text, str(p))
    return PerfRun(instructions=None, cycles=None, ipc=None, task_clock_s=t.core_s, avg_ghz=None,
                   wall_s=t.wall_s, exit_status=exit_status,
                   methods={"wall_s": "app-log:gromacs", "task_clock_s": "app-log:gromacs"})


# ---------------------------------------------------------------- filling a run


def fill(run: PerfRun, *, instructions: float | None = None, instructions_method: str | None = None,
         sampled_ghz: float | None = None, clock_method: str | None = None,
         app_log: str | Path | None = None) -> PerfRun:
    """Fill the figures perf could not measure, best source first; measured figures are kept.

    ``instructions`` is a callgrind count (already scaled); ``sampled_ghz`` the clock sampled
    during this run. Cycles are then *estimated* as task-clock × clock, and IPC derived.
    """
    changes: dict = {}
    methods: dict[str, str] = {}
    instr = run.instructions
    if instr is None and instructions is not None:
        instr = changes["instructions"] = float(instructions)
        methods["instructions"] = instructions_method or "callgrind:Ir"
    wall, tc = run.wall_s, run.task_clock_s
    if (wall is None or tc is None) and app_log is not None:
        log = from_app_log(app_log)
        if wall is None:
            wall = changes["wall_s"] = log.wall_s
            methods["wall_s"] = "app-log:gromacs"
        if tc is None:
            tc = changes["task_clock_s"] = log.task_clock_s
            methods["task_clock_s"] = "app-log:gromacs"
    ghz = run.avg_ghz
    if ghz is None and sampled_ghz:
        ghz = changes["avg_ghz"] = sampled_ghz
        methods["avg_ghz"] = clock_method or "cpuinfo:sampled"
    cycles = run.cycles
    if cycles is None and ghz and tc:
        cycles = changes["cycles"] = ghz * 1e9 * tc
        methods["cycles"] = f"task-clock*{methods.get('avg_ghz', run.methods.get('avg_ghz', 'clock'))}"
    if run.ipc is None and instr is not None and cycles:
        changes["ipc"] = instr / cycles
        methods["ipc"] = f"{methods.get('instructions', run.methods.get('instructions'))}/estimated-cycles" \
            if "cycles" in methods else "instructions/cycles"
    return run.replace(methods=methods, **changes)


def run_timed(argv: list[str], *, cwd: str | Path | None = None, timeout: float | None = None) -> PerfRun:
    """Run ``argv`` without perf: wall time and CPU time of the children (rusage) only.

    The figure a machine without ``perf`` installed still offers; CPU time from
    ``getrusage(RUSAGE_CHILDREN)`` is the same quantity as perf's task-clock.
    """
    import resource
    import time

    if not argv:
        raise ReselError("no command to profile")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=cwd, timeout=timeout)
    except FileNotFoundError:
        raise ReselError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise ReselError(f"{argv[0]}: did not finish within {timeout} s") from None
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return PerfRun(instructions=None, cycles=None, ipc=None, task_clock_s=cpu, avg_ghz=None,
                   wall_s=wall, exit_status=proc.returncode,
                   methods={"wall_s": "wall", "task_clock_s": "rusage"})
