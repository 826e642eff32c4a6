"""The house in layers (issue 27 items 1 and 6): every import resel makes goes down the layers
drawn in docs/architecture.md ("Layers"), never up, never sideways between two rooms of one
floor, and never in a cycle.

The layers are data (``FLOORS`` below), the diagram in docs/architecture.md is drawn from them
and compared here, and the imports are read with :mod:`ast` from every ``.py`` file of the four
installed folders, named as pyproject's package mapping installs them (``backends/`` is
``resel.backends``, ``models/`` ``resel.models``, ``probes/`` ``resel.probes``). An import inside a
function, or under ``if TYPE_CHECKING:``, counts as much as one at the top: a lazy import is
still a dependency, only a cheaper one.

A package's ``__init__`` is not a room: Python loads it with any module under it, and the layout
tests hold every ``__init__`` to importing nothing at run time (the root's names are loaded
lazily), so an import of a package itself (``from resel import __version__``) is no edge.
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: the floors, lowest first; each floor holds rooms, and a room is its modules' patterns
#: (fnmatch on the dotted name, the first room whose pattern matches wins, so a module named
#: alone outranks its folder's ``*``). A module may import a module of its own room or of any
#: floor below; two rooms of one floor know nothing of each other.
FLOORS: list[list[tuple[str, tuple[str, ...]]]] = [
    [("vocabulary and parsers", (
        "resel.errors", "resel.json_safe", "resel.safe_text", "resel.units", "resel.trust", "resel.outputs",
        "resel.limits", "resel.command_template", "resel.url_inputs", "resel.site_options", "resel.domain",
        "resel.config", "resel.events", "resel.states", "resel.task_data",
        # the distributions a site's truth is written in: the domain's own type (Dist)
        "resel.models.distributions",
        "resel.backends.jobs", "resel.backends.*.formats", "resel.backends.limit_formats",
        "resel.backends.known_hosts", "resel.backends.files", "resel.backends.verified", "resel.sim.swf")),
     # the programs shipped to the sites (standard library, Python 3.6+): they import no resel
     # module (checked below), and what ships them reads their text and protocol version
     ("shipped to the sites", ("resel.shipped.*",))],
    # the batch queues' machinery: the queue twin (a model) runs the same queues as the simulator
    [("event core and batch queues", ("resel.sim.core", "resel.sim.queue", "resel.sim.policies", "resel.sim.closed"))],
    [("models and probes", ("resel.models.*", "resel.probes.*", "resel.formalism", "resel.learning", "resel.metrics",
                            "resel.transfer", "resel.walltime", "resel.blackhole"))],
    # the store with the engine: it saves a simulated run's results and events
    [("engine and store", ("resel.engine", "resel.engine_*", "resel.selection", "resel.planning",
                           "resel.planning_explain", "resel.store", "resel.store_common", "resel.store_migrations",
                           "resel.store_prune", "resel.store_rows", "resel.journal", "resel.journal_tail")),
     ("site clients", ("resel.backends.*",))],
    [("sim", ("resel.sim.*",)), ("live", ("resel.live.*",))],
    [("report", ("resel.report.*",))],
    [("cli and api", ("resel.cli", "resel.cli.*", "resel.api", "resel"))],
]

#: imports that go against the layers and are known, each with why it stays for now; this list
#: may only shrink (a test fails on an entry that no longer happens)
KNOWN: dict[tuple[str, str], str] = {
}
#: import cycles known, each with why it stays for now (may only shrink)
KNOWN_CYCLES: dict[tuple[str, ...], str] = {
}


def _package_dirs() -> dict[str, Path]:
    """pyproject's ``package-dir``: installed package name -> folder."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return {name: REPO / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def modules() -> dict[str, Path]:
    """Every module of the installed folders, by the dotted name it is imported as."""
    dirs = _package_dirs()
    found: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(folder).parts):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if dirs.get(".".join(name.split(".")[:2]), folder) != folder:
                continue          # a folder mapped elsewhere (none today): its own package's walk names it
            found[name] = path
    return found


MODULES = modules()
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def imports_of(name: str, path: Path) -> set[tuple[int, str]]:
    """(line, resel module) of every import in ``path`` at any depth, relative ones resolved;
    ``from P import X`` names ``P.X`` when that is a module, else ``P``."""
    found: set[tuple[int, str]] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:     # an attribute path: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add((node.lineno, target))
    return found


def _where(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def room_of(module: str) -> tuple[int, str]:
    for floor, rooms in enumerate(FLOORS):
        for room, patterns in rooms:
            if module in patterns:
                return floor, room
    for floor, rooms in enumerate(FLOORS):
        for room, patterns in rooms:
            if any(fnmatch.fnmatchcase(module, p) for p in patterns):
                return floor, room
    raise LookupError(f"{module} is in no room of tests/test_layers.py's FLOORS")


def graph() -> dict[str, set[tuple[int, str]]]:
    """module -> (line, module) it imports; imports of a package's ``__init__`` left out."""
    return {name: {(line, t) for line, t in imports_of(name, path) if t not in PACKAGES}
            for name, path in MODULES.items()}


def against_the_layers(edges: dict[str, set[tuple[int, str]]]) -> dict[tuple[str, str], str]:
    """(importer, imported) -> why it goes against the layers, for every edge up or sideways."""
    bad: dict[tuple[str, str], str] = {}
    for source, targets in edges.items():
        if not targets:
            continue
        s_floor, s_room = room_of(source)
        for line, target in sorted(targets):
            t_floor, t_room = room_of(target)
            if t_floor > s_floor or (t_floor == s_floor and t_room != s_room):
                bad.setdefault((source, target), f"{_where(MODULES[source])}:{line}: "
                                                 f"{s_room} imports {t_room} ({target})")
    return bad


def cycles(edges: dict[str, set[tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    succ = {m: sorted({t for _, t in ts}) for m, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def diagram() -> str:
    """The layer diagram docs/architecture.md shows, highest floor first."""
    lines = []
    for rooms in reversed(FLOORS):
        lines.append("  |  ".join(room for room, _ in rooms))
    width = max(len(line) for line in lines)
    out = []
    for n, line in enumerate(lines):
        out.append(line.center(width).rstrip())
        if n < len(lines) - 1:
            out.append("↓".center(width).rstrip())
    return "\n".join(out)


def test_every_module_is_in_a_room():
    """A package's ``__init__`` that imports nothing needs no room."""
    homeless = []
    for name in MODULES:
        if name in PACKAGES and not imports_of(name, MODULES[name]):
            continue
        try:
            room_of(name)
        except LookupError as exc:
            homeless.append(str(exc))
    assert homeless == []


def test_no_import_goes_against_the_layers():
    bad = against_the_layers(graph())
    assert sorted(v for k, v in bad.items() if k not in KNOWN) == []


def test_the_known_exceptions_only_shrink():
    bad = against_the_layers(graph())
    gone = sorted(f"{s} -> {t}" for s, t in KNOWN if (s, t) not in bad)
    assert gone == [], "no longer imported: delete from KNOWN"


def test_no_import_cycle():
    found = {tuple(c) for c in cycles(graph())}
    assert sorted(found - set(KNOWN_CYCLES)) == []
    assert sorted(set(KNOWN_CYCLES) - found) == [], "no longer a cycle: delete from KNOWN_CYCLES"


def test_what_is_shipped_to_the_sites_imports_nothing_of_resel():
    shipped = [m for m in MODULES if m.startswith("resel.shipped.")]
    assert shipped and all(room_of(m)[1] == "shipped to the sites" for m in shipped)
    assert {m: sorted(t for _, t in imports_of(m, MODULES[m])) for m in shipped} == {m: [] for m in shipped}


def test_the_architecture_page_draws_these_layers():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"```\n{diagram()}\n```" in text, "docs/architecture.md's layer diagram:\n" + diagram()


def test_the_checks_see_what_they_are_for(tmp_path):
    """An upward import inside a function, a sideways one and a cycle are all caught; a relative
    import is resolved against its package."""
    global MODULES
    saved = MODULES
    files = {"resel.errors": "from resel import engine\n",
             "resel.engine": "def f():\n    from resel.live.coordinator import run\n",
             "resel.sim.plan": "from ..live import plan\n",
             "resel.live.plan": "from resel.errors import X\n",
             "resel.live.coordinator": "from . import plan\n"}
    fake = {}
    for name, code in files.items():
        path = tmp_path / (name.replace(".", "_") + ".py")
        path.write_text(code, encoding="utf-8")
        fake[name] = path
    try:
        MODULES = fake
        edges = {n: imports_of(n, p) for n, p in fake.items()}
        assert edges["resel.live.coordinator"] == {(1, "resel.live.plan")}
        assert edges["resel.sim.plan"] == {(1, "resel.live.plan")}
        bad = against_the_layers(edges)
        assert set(bad) == {("resel.errors", "resel.engine"), ("resel.engine", "resel.live.coordinator"),
                            ("resel.sim.plan", "resel.live.plan")}
        assert cycles(edges) == [["resel.engine", "resel.errors", "resel.live.coordinator", "resel.live.plan"]]
    finally:
        MODULES = saved


@pytest.mark.parametrize("name", ["resel.backends.slurm.formats", "resel.models.twin", "resel.shipped.agent"])
def test_the_mapping_names_modules_as_they_are_installed(name):
    assert name in MODULES
