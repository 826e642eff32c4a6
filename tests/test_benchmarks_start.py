"""Every script in benchmarks/ still starts: ``--help`` prints its usage and exits 0; a module
the scripts share (no ``__main__``: soak_audit, soak_faults, poll_cycle) imports.

Why: the benchmarks run by hand, most of them on the testbed and for minutes, so one broken by
a change elsewhere (an import moved, an option renamed) went unnoticed until someone ran it
(`bench_status.py`, 2026-11-29). This does not check their figures — tests of their own
(test_bench_scale, test_status_summary, …) do that where a figure can be checked — only that
each one's options and the imports made before it reads them still hold together (a script
that imports resel inside its ``main`` is checked that far only). New scripts are picked up
by the glob."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


def is_script(path: Path) -> bool:
    return 'if __name__ == "__main__":' in path.read_text()


def start(script: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """The script's ``--help``, or a shared module's import (with benchmarks/ and tests/ on the
    path, as the scripts put them)."""
    if is_script(script):
        argv = [sys.executable, str(script), "--help"]
    else:
        argv = [sys.executable, "-c", f"import sys; sys.path[:0] = ['benchmarks', 'tests']; "
                                      f"import {script.stem}; print('usage: imported')"]
    return script, subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_there_are_benchmarks_to_start():
    assert sum(map(is_script, SCRIPTS)) >= 30


def test_every_benchmark_prints_its_usage():
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(start, SCRIPTS))
    broken = [f"{script.name}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}"
              for script, p in done if p.returncode != 0 or "usage" not in p.stdout.lower()]
    assert not broken, "\n".join(broken)
