"""The live folder (issue 15 item 3): what drives real sites lives in ``resel/live/`` as
docs/architecture.md draws it ("The live folder"), the flat modules it replaced are gone (no
compatibility shims), its ``__init__`` imports nothing, and the files shipped to the sites are
found where the pilot site and the HTCondor client read them from.

The import checks run a fresh interpreter: the test process has long imported everything."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIVE = REPO / "resel" / "live"
#: the map in docs/architecture.md
MODULES = {"coordinator", "sites", "errors", "notes", "stored", "view", "plan", "site_limits", "site_probe",
           "staging", "pilot_views", "site_health", "findings", "polling", "run_data", "actions", "ending",
           "preflight", "resume", "summary", "takeback", "inbox_writes", "main_thread"}
#: modules that left resel/live/ for a lower floor (tests/test_layers.py); none may come back
MOVED_OUT = ("agent", "chirp_sync", "plan_explain", "journal")
#: the programs shipped to the sites, in resel/shipped/ (standard library only; tests/test_layers.py)
SHIPPED = REPO / "resel" / "shipped"
#: the flat modules resel/live/ replaced; none may come back as a shim
FLAT = ("live", "live_errors", "live_notes", "live_sites", "live_stored", "live_view", "agent", "chirp_sync",
        "plan", "plan_explain", "site_limits", "site_probe")


def test_the_live_folder_holds_its_modules_and_its_init_imports_nothing():
    assert {p.stem for p in LIVE.glob("*.py")} == MODULES | {"__init__"}
    tree = ast.parse((LIVE / "__init__.py").read_text(encoding="utf-8"))
    assert [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] == []
    assert ast.get_docstring(tree)


def test_no_flat_module_is_left_behind():
    assert sorted(m for m in FLAT if (REPO / "resel" / f"{m}.py").exists()) == []
    # moved out of resel/live/ (issue 27): the shipped programs to resel/shipped/, the plan's
    # words to resel/planning_explain.py beside the plan's computation (resel/planning.py)
    assert sorted(m for m in MOVED_OUT if (LIVE / f"{m}.py").exists()) == []


def test_the_architecture_page_draws_the_folder_as_it_is():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("### The live folder", 1)[1].split("```", 2)[1]
    assert set(re.findall(r"(\w+)\.py", block)) == MODULES
    for name in MODULES:
        assert f"`resel/live/{name}.py`" in text, f"docs/architecture.md has no row for resel/live/{name}.py"


def test_no_source_names_an_old_module():
    """Every import, string and path in the code, tests, benchmarks, scripts and docs names the
    new places (the logger keeps its name "resel.live", which is not a module path)."""
    old = re.compile(r"\bresel[./](?:live_\w+|agent|chirp_sync|plan|plan_explain|site_limits|site_probe)\b"
                     r"|\bfrom resel import [^\n]*\b(?:live_\w+|agent|chirp_sync|plan|plan_explain|site_limits|"
                     r"site_probe)\b|\bresel/live\.py\b|\bfrom resel\.live import (?!journal\b|notes\b)")
    hits = []
    for folder in ("resel", "backends", "models", "probes", "tests", "benchmarks", "examples", "scripts", "docs"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".md", ".sh", ".toml") and path.is_file() and path != Path(__file__):
                for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                    if old.search(line):
                        hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    for name in ("README.md", "pyproject.toml"):
        for n, line in enumerate((REPO / name).read_text(encoding="utf-8").splitlines(), 1):
            if old.search(line):
                hits.append(f"{name}:{n}: {line.strip()}")
    assert hits == []


def test_pyproject_installs_the_live_package():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"resel.live"' in text


def test_the_shipped_files_are_read_from_the_shipped_folder():
    """The pilot site ships the agent and the HTCondor client the chirp wrapper: their text (and
    so the sha256 the pilot checks) is the file in resel/shipped/, read through the module."""
    code = ("import json, sys\nfrom resel.backends import pilotsite\nfrom resel.backends.htcondor import client\n"
            "print(json.dumps([pilotsite.agent_module.__file__, client.chirp_sync.__file__,"
            " pilotsite.agent_module.source() == open(pilotsite.agent_module.__file__).read(), sorted(sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    agent, chirp, same, loaded = json.loads(proc.stdout.splitlines()[-1])
    assert Path(agent).resolve() == SHIPPED / "agent.py" and Path(chirp).resolve() == SHIPPED / "chirp_sync.py"
    assert not (LIVE / "agent.py").exists() and not (LIVE / "chirp_sync.py").exists()
    assert same
    # shipping the agent loads nothing of the live side, the coordinator least of all
    assert [m for m in loaded if m.startswith("resel.live")] == []
    assert "resel.live.coordinator" not in loaded
