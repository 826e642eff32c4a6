"""The simulation side lives in ``resel/sim/`` (issue 15 item 3): the map docs/architecture.md
draws ("Folders", "Modules"), no module left flat in ``resel/`` or ``backends/`` (no
compatibility shims), an ``__init__`` that imports nothing, and a pure core that never imports
the simulation.

Read with :mod:`ast` and the file system, and one fresh interpreter for what an import loads:
the test process has long imported everything."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SIM = REPO / "resel" / "sim"
#: resel/sim/'s modules: the event core and queue, and what moved in from resel/ and backends/
SIM_MODULES = {"core", "queue", "closed", "policies", "swf", "replay", "jobstats", "grid", "scenarios", "experiment",
               "oracle", "plan", "plan_check", "wait_eval", "finish_eval", "hit_eval", "start_eval", "runtime_eval",
               "dask_access", "simulation", "queuesite", "estimates", "probe_cache"}
#: where each moved module used to be (repository path) -> its module in resel/sim/
MOVED = {"resel/swf.py": "swf", "resel/replay.py": "replay", "resel/jobstats.py": "jobstats",
         "resel/grid.py": "grid", "resel/scenarios.py": "scenarios", "resel/experiment.py": "experiment",
         "resel/wait_eval.py": "wait_eval", "resel/finish_eval.py": "finish_eval",
         "resel/runtime_eval.py": "runtime_eval", "resel/sim_plan.py": "plan", "resel/oracle.py": "oracle",
         "backends/batch.py": "policies", "backends/simulated/simulation.py": "simulation",
         "backends/simulated/queuesite.py": "queuesite", "backends/simulated/estimates.py": "estimates"}
#: the pure core (docs/architecture.md, "Start-up"): it runs the same decisions live and simulated
PURE_CORE = ("engine", "selection", "domain", "events", "states", "formalism", "metrics")


def test_resel_sim_holds_its_map():
    assert {p.stem for p in SIM.glob("*.py")} == SIM_MODULES | {"__init__"}
    assert not [p.name for p in SIM.iterdir() if p.is_dir() and p.name != "__pycache__"]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_is_gone_from_where_it_was(old):
    assert not (REPO / old).exists(), f"{old} is back; it lives in resel/sim/{MOVED[old]}.py"
    assert (SIM / f"{MOVED[old]}.py").is_file()


def test_the_init_imports_nothing():
    tree = ast.parse((SIM / "__init__.py").read_text(encoding="utf-8"))
    assert [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] == []
    assert ast.get_docstring(tree), "resel/sim/__init__.py: a docstring only"


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (a lazy import inside a function counts)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


@pytest.mark.parametrize("module", PURE_CORE)
def test_the_pure_core_never_imports_the_simulation(module):
    sim = sorted(m for m in _imported(REPO / "resel" / f"{module}.py") if m == "resel.sim" or m.startswith("resel.sim."))
    assert sim == [], f"resel/{module}.py imports {sim}"


def test_docs_name_the_new_paths():
    """architecture.md has a row for every module of resel/sim/ and names no old path."""
    arch = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert [m for m in sorted(SIM_MODULES) if f"`resel/sim/{m}.py`" not in arch] == []
    assert [old for old in sorted(MOVED) if old in arch] == []


def test_importing_a_sim_module_loads_only_what_it_imports():
    """``resel.sim`` itself loads nothing; ``resel.sim.swf`` (what ``resel replay`` reads traces
    with) loads no other simulation module, no store and no rich."""
    code = ("import json, sys\nimport resel.sim\nbare = sorted(m for m in sys.modules if m.startswith('resel'))\n"
            "import resel.sim.swf\nprint(json.dumps([bare, sorted(sys.modules)]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    bare, loaded = json.loads(proc.stdout.splitlines()[-1])
    assert bare == ["resel", "resel.sim"]
    assert sorted(m for m in loaded if m.startswith("resel.sim.")) == ["resel.sim.swf"]
    heavy = sorted(m for m in ("sqlite_utils", "rich", "resel.store", "resel.backends") if m in loaded)
    assert heavy == []
