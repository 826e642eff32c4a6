"""The layout of the command line (issue 15 item 3): ``resel/cli/`` is one package without an
import cycle.

The package root (``resel/cli/__init__.py``) names every command module in its lazy map, so a
module that imported the root back would close a cycle — the one ``cli_grid``/``cli_trace``
had with ``resel/cli.py``. Read with :mod:`ast`, not by importing: an import inside a function
(the lazy ones the commands use to keep start-up light) counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parent.parent / "resel" / "cli"
#: the modules of the package, by dotted name
MODULES = {f"resel.cli.{p.stem}": p for p in sorted(CLI.glob("*.py")) if p.stem not in ("__init__", "__main__")}
ROOT = "resel.cli"


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, at any depth; ``from resel.cli import X``
    gives ``resel.cli.X`` when X is a module of the package, else ``resel.cli`` itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "resel" and any(a.name == "cli" for a in node.names):
                found.append((node.lineno, ROOT))
            elif node.module == ROOT:
                found += [(node.lineno, f"{ROOT}.{a.name}" if f"{ROOT}.{a.name}" in MODULES else ROOT)
                          for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path.name}:{node.lineno}: a relative import; write resel.cli.NAME")
    return found


def graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports."""
    return {name: {mod for _, mod in imports_of(path) if mod in MODULES} for name, path in MODULES.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, colouring nodes)."""
    state: dict[str, int] = {}          # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_holds_the_command_modules():
    assert {"resel.cli.common", "resel.cli.simulate", "resel.cli.stored", "resel.cli.sites",
            "resel.cli.live"} <= set(MODULES)
    old = sorted(p.name for p in CLI.parent.glob("cli_*.py")) + sorted(p.name for p in CLI.parent.glob("cli.py"))
    assert old == [], f"old CLI modules left beside the package: {old}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_command_module_imports_the_package_root(name):
    bad = [line for line, mod in imports_of(MODULES[name]) if mod == ROOT]
    assert bad == [], (f"{MODULES[name].name}, line(s) {bad}: imports resel.cli, the package root; take "
                       "the shared name from resel.cli.common instead")


def test_no_import_cycle_between_the_command_modules():
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()))


def test_common_imports_no_other_command_module():
    """Every command module may import common; common, at the bottom, imports none of them."""
    assert graph()["resel.cli.common"] == set()


def test_the_checks_see_a_root_import_and_a_cycle(tmp_path):
    """The detectors themselves, on made-up modules: each way of naming the root, and a cycle
    through an import inside a function."""
    src = tmp_path / "m.py"
    for line in ("import resel.cli", "from resel import cli", "from resel.cli import out",
                 "def f():\n    from resel.cli import main"):
        src.write_text(line + "\n", encoding="utf-8")
        assert ROOT in {mod for _, mod in imports_of(src)}, line
    src.write_text("from resel.cli import common\nfrom resel.cli.live import x\n", encoding="utf-8")
    assert {mod for _, mod in imports_of(src)} == {"resel.cli.common", "resel.cli.live"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
