"""The checkout works wherever it is cloned: CI (and scripts/fresh-check.sh) clones it anywhere,
with the shared folder beside it as ``../shared``. A path of the machine the code was written on
(its ``/work`` tree) passes there and fails everywhere else, so no source may name one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("resel", "backends", "probes", "models", "tests", "benchmarks", "examples", "scripts", ".ci")
#: an absolute path into the authors' /work tree (not e.g. "/ap/work/..."); built in two parts
#: so that this file does not match itself
AUTHORS_TREE = re.compile(r"(?<![\w.~/-])/" + r"work/")


def _sources() -> list[Path]:
    found = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and (path.suffix in {".py", ".sh", ".toml"} or path.parent.name == ".ci"):
                found.append(path)
    return found


def test_the_sources_are_found():
    names = {p.relative_to(REPO).as_posix() for p in _sources()}
    assert {"tests/htcondor_samples.py", "scripts/test.sh", ".ci/run", "resel/cli/__init__.py"} <= names


def test_no_source_names_a_path_of_the_authors_machine():
    offenders = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
                 for path in _sources()
                 for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                 if AUTHORS_TREE.search(line)]
    assert offenders == [], "use Path(__file__).resolve().parents[...] / 'shared' instead:\n" + "\n".join(offenders)


def test_venv_script_repairs_a_venv_left_without_pip(tmp_path):
    """`python3 -m venv` on a Debian without python3-venv leaves bin/python without pip (what
    the README's main-job command leaves when tried first on a bare Debian); scripts/test.sh
    took such a .venv as made and failed with "No module named pip"."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--version"]
    assert subprocess.run(pip, capture_output=True).returncode != 0

    out = subprocess.run(["bash", str(REPO / "scripts" / "venv.sh"), str(venv)], capture_output=True,
                         text=True, env={**os.environ, "PYTHON": base}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert subprocess.run(pip, capture_output=True).returncode == 0
    # a working one is left as it is
    marker = venv / "bin" / "python"
    before = marker.lstat().st_mtime_ns
    subprocess.run(["bash", str(REPO / "scripts" / "venv.sh"), str(venv)], check=True,
                   env={**os.environ, "PYTHON": base}, timeout=300)
    assert marker.lstat().st_mtime_ns == before


def _package_dir(name: str, mapping: dict[str, str]) -> Path:
    """Where setuptools looks for package ``name`` given ``package-dir`` (the longest prefix)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in mapping:
            return REPO.joinpath(mapping[prefix], *parts[cut:])
    return REPO.joinpath(*parts)


def test_every_package_folder_is_installed():
    """pyproject's explicit ``packages`` list is what a plain ``pip install .`` installs: a new
    folder of modules (resel/cli/, resel/report/) missing from it works in the editable checkout
    and is absent from every real installation."""
    import tomllib
    setup = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapping, listed = setup["package-dir"], setup["packages"]
    folders = {init.parent.resolve() for top in ("resel", "backends", "models", "probes")
               for init in (REPO / top).rglob("__init__.py")}
    installed = {_package_dir(name, mapping).resolve() for name in listed}
    missing = sorted(str(f.relative_to(REPO)) for f in folders - installed)
    assert missing == [], f"add these folders' packages to [tool.setuptools] packages in pyproject.toml: {missing}"
    absent = sorted(name for name in listed if not _package_dir(name, mapping).is_dir())
    assert absent == [], f"pyproject.toml lists packages without a folder: {absent}"
