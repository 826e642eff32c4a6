"""The files resel ships to compute nodes (the pilot agent, the chirp wrapper) must run on the
old Pythons of compute nodes (3.6+) with nothing but the standard library."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHIPPED = [REPO / "resel" / "shipped" / "agent.py", REPO / "resel" / "shipped" / "chirp_sync.py"]


@pytest.mark.parametrize("script", SHIPPED, ids=lambda p: p.name)
def test_python36_compatible(script):
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    assert vermin, "vermin is not installed: pip install -e '.[test]'"
    out = subprocess.run([vermin, "-t=3.6-", "--no-tips", "--violations", str(script)],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("script", SHIPPED, ids=lambda p: p.name)
def test_standard_library_only(script):
    imported = set()
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module != "__future__", ast.dump(node)
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_the_verifying_launcher_is_python36_too(tmp_path):
    """The one-line program every pilot starts the agent with runs where the agent runs."""
    from resel.backends.verified import VERIFY
    program = tmp_path / "verify.py"
    program.write_text(VERIFY + "\n")
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    out = subprocess.run([vermin, "-t=3.6-", "--no-tips", "--violations", str(program)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\n" not in VERIFY                          # one line: the exec line and HTCondor need it


def test_the_verifying_launcher_runs_the_checked_bytes_with_their_arguments(tmp_path):
    from resel.backends.verified import digest, verified_argv
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], __file__ == sys.argv[0])\n")
    good = subprocess.run(verified_argv(sys.executable, str(script), digest(script.read_text()), ["a", "b c"]),
                          capture_output=True, text=True, cwd=tmp_path)
    assert good.returncode == 0 and good.stdout == "__main__ ['a', 'b c'] True\n", good.stderr
    bad = subprocess.run(verified_argv(sys.executable, str(script), "0" * 64, []), capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stdout == "" and f"refusing to run {script}: its sha256 is" in bad.stderr
