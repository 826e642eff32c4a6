"""Profile a command N times and store one row per run: what LIM is calibrated from.

Each run goes through perf (:mod:`resel.probes.perf`) while the clock is sampled
(:class:`resel.probes.cpu.MhzSampler`); figures perf could not count are filled by the fallback
chain (:mod:`resel.probes.fallback`). Callgrind runs once per profile, not per repetition:
the instruction count of a deterministic command hardly varies, and callgrind is ~50× slower.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
import socket
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlite_utils import Database

from resel.errors import ReselError
from resel.probes import fallback
from resel.probes.cpu import CpuInfo, MhzSampler, discover
from resel.probes.perf import PerfRun, perf_available, run_perf


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (None for fewer than two values) of one figure."""

    mean: float | None
    std: float | None
    n: int
    method: str | None


@dataclass(frozen=True)
class ProfileSummary:
    label: str
    argv: list[str]
    host: str
    cpu: CpuInfo
    runs: list[PerfRun]
    stats: dict[str, Stat] = field(default_factory=dict)
    scale: float | None = None
    reduced_argv: list[str] | None = None

    def to_dict(self) -> dict:
        return {"label": self.label, "argv": self.argv, "host": self.host, "cpu": asdict(self.cpu),
                "scale": self.scale, "reduced_argv": self.reduced_argv,
                "runs": [asdict(r) for r in self.runs],
                "stats": {k: asdict(v) for k, v in self.stats.items()}}


def summarize(runs: list[PerfRun]) -> dict[str, Stat]:
    """Per figure: mean and sample std over the runs that have it, and its (most common) method."""
    out: dict[str, Stat] = {}
    for name in PerfRun.FIGURES:
        values = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        values = [v for v in values if math.isfinite(v)]
        methods = [r.methods[name] for r in runs if name in r.methods]
        method = max(set(methods), key=methods.count) if methods else None
        mean = statistics.fmean(values) if values else None
        std = statistics.stdev(values) if len(values) >= 2 else None
        out[name] = Stat(mean, std, len(values), method)
    return out


def profile(argv: list[str], repeat: int = 1, label: str | None = None, reduced_argv: list[str] | None = None,
            scale: float | None = None, *, callgrind: bool = True, app_log: str | Path | None = None,
            cwd: str | Path | None = None, timeout: float | None = None) -> ProfileSummary:
    """Run ``argv`` ``repeat`` times under perf and fill what perf could not count.

    ``reduced_argv`` (with ``scale``) is the smaller problem callgrind runs on when perf has no
    instruction counter; its count is multiplied by ``scale`` (default 1 — then ``reduced_argv``
    should be the same problem). Without ``reduced_argv`` callgrind runs ``argv`` itself.
    ``app_log`` is an md.log the command writes: the last resort for wall time.

    Raises:
        ReselError: empty command, bad repeat/scale, or a probe failed outright.
    """
    if not argv:
        raise ReselError("no command to profile: give it after --")
    _check_runnable(argv[0], cwd)
    if repeat < 1:
        raise ReselError(f"--repeat must be >= 1, got {repeat}")
    if scale is not None and not (scale > 0 and math.isfinite(scale)):
        raise ReselError(f"--scale must be a positive number, got {scale}")
    cpu = discover()
    measured: list[tuple[PerfRun, float | None, str | None]] = []   # run, sampled GHz, its method
    use_perf = perf_available()
    for _ in range(repeat):
        with MhzSampler() as sampler:
            run = run_perf(argv, cwd=cwd, timeout=timeout) if use_perf else \
                fallback.run_timed(argv, cwd=cwd, timeout=timeout)
        measured.append((run, sampler.mean_ghz, sampler.method))
    instr = instr_method = None
    if callgrind and any(r.instructions is None for r, _, _ in measured):
        target = reduced_argv or argv
        try:
            counted = fallback.run_callgrind(target, cwd=cwd, timeout=timeout)
        except ReselError as exc:
            raise ReselError(f"perf cannot count instructions on this machine, and callgrind could not either: {exc}",
                             hint="--no-callgrind measures the times and the clock without an instruction count; "
                                  "--reduced CMD --scale S gives callgrind a smaller problem") from None
        factor = scale if scale is not None else 1.0
        instr = counted * factor
        instr_method = "callgrind:Ir" if factor == 1.0 and not reduced_argv else f"callgrind:Ir*{factor:g}"
    filled: list[PerfRun] = []
    for run, ghz, method in measured:
        if ghz is None and cpu.cur_ghz is not None:
            ghz, method = cpu.cur_ghz, cpu.methods.get("cur_ghz")
        filled.append(fallback.fill(run, instructions=instr, instructions_method=instr_method,
                                    sampled_ghz=ghz, clock_method=method, app_log=app_log))
    return ProfileSummary(label=label or " ".join(argv)[:80], argv=list(argv), host=socket.gethostname(),
                          cpu=cpu, runs=filled, stats=summarize(filled), scale=scale,
                          reduced_argv=list(reduced_argv) if reduced_argv else None)


def _check_runnable(program: str, cwd: str | Path | None) -> None:
    """Refuse a program that cannot run, before perf is started: perf reports a missing one as
    a run without counters ("no counter lines"), which sent users looking at perf, not at
    their command.

    Raises:
        ReselError: ``command not found`` (not on PATH), or found but not executable.
    """
    if os.sep in program:
        path = Path(cwd or ".") / program if not os.path.isabs(program) else Path(program)
        if not path.exists():
            raise ReselError(f"command not found: {program} (no such file)")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise ReselError(f"command cannot run: {program} is not an executable file")
        return
    if shutil.which(program) is None:
        raise ReselError(f"command not found: {program} (not on PATH)")


def ensure_tables(db: Database) -> None:
    """Create the ``profiles`` table (one row per measured run); the lead turns this into a migration."""
    db["profiles"].create({
        "id": int, "created": str, "label": str, "argv": str, "host": str, "cpu_model": str,
        "base_ghz": float, "max_ghz": float, "run": int, "instructions": float, "cycles": float,
        "ipc": float, "avg_ghz": float, "task_clock_s": float, "wall_s": float, "exit_status": int,
        "methods": str, "scale": float, "reduced_argv": str,
    }, pk="id", if_not_exists=True)
    db["profiles"].create_index(["label"], if_not_exists=True)


def save(db: Database, summary: ProfileSummary) -> list[int]:
    """Write one ``profiles`` row per run; returns their ids."""
    ensure_tables(db)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    ids = []
    for i, r in enumerate(summary.runs, start=1):
        row = {"created": created, "label": summary.label, "argv": json.dumps(summary.argv),
               "host": summary.host, "cpu_model": summary.cpu.model, "base_ghz": summary.cpu.base_ghz,
               "max_ghz": summary.cpu.max_ghz, "run": i, "instructions": r.instructions,
               "cycles": r.cycles, "ipc": r.ipc, "avg_ghz": r.avg_ghz, "task_clock_s": r.task_clock_s,
               "wall_s": r.wall_s, "exit_status": r.exit_status,
               "methods": json.dumps({**r.methods, **{f"cpu.{k}": v for k, v in summary.cpu.methods.items()}},
                                     sort_keys=True),
               "scale": summary.scale,
               "reduced_argv": json.dumps(summary.reduced_argv) if summary.reduced_argv else None}
        ids.append(db["profiles"].insert(row, alter=True).last_pk)
    return ids
