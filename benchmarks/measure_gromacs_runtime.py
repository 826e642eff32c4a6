"""Measure real GROMACS run times on this machine for the runtime-model evaluation (issue 16).

    nice .venv/bin/python benchmarks/measure_gromacs_runtime.py --out benchmarks/data/gromacs-runtime.jsonl --runs 50

Records raw measurements only; ``benchmarks/eval_gromacs_runtime.py`` turns them into the
calibration and its held-out scores with resel's own model code. Kept apart because the runs
take hours on a shared machine and must survive interruptions: every run is appended to the
JSONL file as it finishes, and a rerun skips what is already there (``--runs`` may grow later:
the plan of run ``i`` never depends on ``--runs``).

What is recorded, per line (``kind``):

* ``host`` — CPU model and base clock (:func:`resel.probes.cpu.discover`), GROMACS version;
* ``callgrind`` — instructions (callgrind ``Ir``, exact user-space count; this VM has no
  hardware counters) of ``gmx``/``gmx_d`` at 20, 40, 80 and 160 steps, from which the
  evaluation fits I(n) = setup + per_step · n;
* ``run`` — one timed ``mdrun``: config, nsteps, perf ``task-clock`` (CPU seconds), wall time,
  the 1-minute load average before and after (the machine is shared: the load is part of the
  measurement), a UTC timestamp.

Which runs: run ``i`` of each config has nsteps = 10^(3 + 2·frac(0.5 + i·φ)) rounded to a
multiple of 10 (GROMACS's nstlist) — a golden-ratio sequence, so any prefix of the plan covers
10^3–10^5 evenly on a log scale. Configs alternate, so both see the same load over time.

The runs are ``mdrun`` without ``-reprod``, as the record in benchmarks/data was made (2026-11-26),
so a rerun that extends it measures the same command. Its callgrind counts therefore carry
FFTW_MEASURE's timed planning (±1 % between runs; docs/experiment1.md), small next to the
run-to-run spread of the timed runs it is compared with.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
try:                                    # an installed resel first (pip install .): the checkout's
    import resel  # noqa: F401          # resel/ lacks resel.probes/models/backends, which an
except ImportError:                     # install maps from probes/, models/, backends/
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))

from reproduce_experiment1 import CONFIGS, build, gromacs_version, mdrun_argv  # noqa: E402

from resel.probes.cpu import discover  # noqa: E402
from resel.probes.fallback import run_callgrind  # noqa: E402
from resel.probes.perf import run_perf  # noqa: E402

PHI = (math.sqrt(5) - 1) / 2
CALLGRIND_STEPS = (20, 40, 80, 160)


def planned_nsteps(i: int, lo: float = 3.0, hi: float = 5.0) -> int:
    """nsteps of run ``i``: log-uniform over 10^lo–10^hi by a golden-ratio sequence, a multiple of 10."""
    u = (0.5 + i * PHI) % 1.0
    return max(10, int(round(10 ** (lo + (hi - lo) * u) / 10.0)) * 10)


def loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_done(path: Path) -> tuple[set[tuple[str, int]], set[tuple[str, int]], bool]:
    runs, counts, host = set(), set(), False
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec["kind"] == "run":
                runs.add((rec["config"], rec["index"]))
            elif rec["kind"] == "callgrind":
                counts.add((rec["config"], rec["nsteps"]))
            elif rec["kind"] == "host":
                host = True
    return runs, counts, host


def append(path: Path, rec: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSONL file to append to (resumed if present)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per config (indices 0..N-1)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/resel-gmx-runtime"),
                    help="where the water box is built and the runs write their files")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    water = args.workdir / "water"
    if not (water / "topol_d.tpr").exists():
        build(water)
    done_runs, done_counts, have_host = read_done(args.out)
    if not have_host:
        cpu = discover()
        append(args.out, {"kind": "host", "model": cpu.model, "base_ghz": cpu.base_ghz or cpu.cur_ghz,
                          "base_method": cpu.methods.get("base_ghz", cpu.methods.get("cur_ghz")),
                          "gromacs": gromacs_version(), "cpus": os.cpu_count(), "at": now(),
                          "atoms": int((water / "conf.gro").read_text().splitlines()[1])})
    for cfg, tpr in CONFIGS.items():
        for n in CALLGRIND_STEPS:
            if (cfg, n) in done_counts:
                continue
            instr = run_callgrind(mdrun_argv(cfg, tpr, n, f"cg_{cfg}_{n}", reprod=False), cwd=water, timeout=1800)
            append(args.out, {"kind": "callgrind", "config": cfg, "nsteps": n, "instructions": instr, "at": now()})
            print(f"callgrind {cfg} {n}: {instr / 1e6:.1f} M", flush=True)
    for i in range(args.runs):
        for cfg, tpr in CONFIGS.items():
            if (cfg, i) in done_runs:
                continue
            n = planned_nsteps(i)
            name = f"t_{cfg}_{i}"
            before, t0 = loadavg(), time.time()
            run = run_perf(mdrun_argv(cfg, tpr, n, name, reprod=False), cwd=water, timeout=7200)
            after = loadavg()
            for f in water.glob(f"{name}.*"):
                f.unlink()
            if run.exit_status != 0 or run.task_clock_s is None:
                print(f"{cfg} -nsteps {n} failed (exit {run.exit_status}); not recorded", flush=True)
                continue
            append(args.out, {"kind": "run", "config": cfg, "index": i, "nsteps": n,
                              "task_clock_s": run.task_clock_s, "wall_s": run.wall_s,
                              "load_before": before, "load_after": after, "started": t0, "at": now()})
            print(f"{cfg} #{i} nsteps {n}: task-clock {run.task_clock_s:.2f} s, wall {run.wall_s:.2f} s, "
                  f"load {before}->{after}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
