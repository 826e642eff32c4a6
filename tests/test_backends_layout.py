"""The backends folder split by scheduler (issue 15 item 3): each scheduler's subpackage holds its
clients and parsers, the flat modules are gone (no compatibility shims), and a subpackage's
``__init__`` imports nothing, so reading one scheduler's recorded replies loads only its parsers.

The import checks run a fresh interpreter: the test process has long imported everything."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

BACKENDS = Path(__file__).resolve().parents[1] / "backends"
#: the layout docs/architecture.md draws ("The backends folder"): subpackage → its modules
SUBPACKAGES = {"slurm": {"cli", "rest", "pyslurm", "formats"}, "pbs": {"cli", "formats"},
               "htcondor": {"client", "formats"}}
#: the flat modules the subpackages replaced, and the batch policies and the simulated sites that
#: moved to the simulation side (resel/sim/, tests/test_sim_layout.py); none may come back as a shim
FLAT = ("slurm", "slurm_formats", "slurm_pyslurm", "slurmrest", "pbs", "pbs_formats", "htcondor",
        "htcondor_formats", "simulated", "simqueue", "sim_estimates", "batch")
#: subpackages that moved out: a simulated site is the simulator, not a scheduler client
#: (resel/sim/simulation.py, queuesite.py, estimates.py)
MOVED_OUT = ("simulated",)
#: what reading replies never needs: the transports, HTTP, the HTCondor bindings, the store, the CLI,
#: the models and the simulator (the queue snapshot a parser builds is the job vocabulary's)
NOT_FOR_PARSERS = ("resel.backends.transport", "paramiko", "requests", "htcondor2", "sqlite_utils", "click", "rich",
                   "resel.models", "resel.sim")


@pytest.mark.parametrize("name", sorted(SUBPACKAGES))
def test_each_subpackage_holds_its_modules_and_its_init_imports_nothing(name):
    folder = BACKENDS / name
    assert {p.stem for p in folder.glob("*.py")} == SUBPACKAGES[name] | {"__init__"}
    tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    imports = [ast.dump(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports == [] and ast.get_docstring(tree), f"backends/{name}/__init__.py: a docstring only"


def test_no_flat_module_is_left_behind():
    assert sorted(m for m in FLAT if (BACKENDS / f"{m}.py").exists()) == []
    assert sorted(m for m in MOVED_OUT if (BACKENDS / m).exists()) == []


@pytest.mark.parametrize("module", ["resel.backends.slurm.formats", "resel.backends.pbs.formats",
                                    "resel.backends.htcondor.formats"])
def test_a_scheduler_s_parsers_load_no_client(module):
    code = f"import json, sys\nimport {module}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(proc.stdout.splitlines()[-1]))
    heavy = sorted(m for m in NOT_FOR_PARSERS if m in loaded or any(x.startswith(m + ".") for x in loaded))
    assert heavy == [], f"import {module} loads {heavy}"
    others = {f"resel.backends.{s}" for s in SUBPACKAGES} - {module.rsplit(".", 1)[0]}
    # PBS's parsers build the queue snapshot (backends/jobs.py), which needs no other scheduler either
    assert not others & loaded, sorted(others & loaded)
