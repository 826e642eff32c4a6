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
SHIPPED = [REPO / "resel" / "agent.py", REPO / "resel" / "chirp_sync.py"]


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
