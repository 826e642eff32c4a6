"""One vocabulary per concept, one reader of the journal (issue 27 items 2 and 3), as layering
tests read the code with ``ast``:

* no module of resel outside ``backends/slurm/`` names one of Slurm's pending-reason words or its
  placeholders for none (``None``, ``(null)``) in a string: each backend turns its reasons into
  :class:`~resel.backends.jobs.Pending` in its own table, and the coordinator tests that
  (PSI/J keeps each scheduler's words inside its executor, shared/STYLE.md §9);
* no module outside ``resel/journal.py`` reads the ``events`` table or parses its JSON:
  every reader of stored events goes through the journal's decoding, as every writer does.

Docstrings are prose, not code, and are not held to it. The modules are those installed as
resel (resel/, backends/, models/, probes/); tests and benchmarks may read a store any way.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from resel.backends.slurm.formats import SLURM_REASONS

REPO = Path(__file__).resolve().parents[1]
PACKAGE = ("resel", "backends", "models", "probes")
SLURM = REPO / "backends" / "slurm"
JOURNAL = REPO / "resel" / "journal.py"
#: the journal's own modules: it, and the questions about its end asked without its record classes
JOURNAL_MODULES = (JOURNAL, REPO / "resel" / "journal_tail.py")

#: Slurm's words for "no reason", which its parsers read as None
SLURM_PLACEHOLDERS = {"None", "(null)"}
#: words of Slurm's table that are also another scheduler's or resel's own, in their own sense:
#: PBS's job attribute ``Priority`` (the order of its queue)
SHARED_WORDS = {"Priority": {REPO / "backends" / "pbs" / "formats.py"}}


def modules() -> list[Path]:
    return sorted(p for folder in PACKAGE for p in (REPO / folder).rglob("*.py") if ".venv" not in p.parts)


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (a module's, a class's, a function's)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module but its docstrings, with its line (f-strings' parts too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = docstrings(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def test_the_tests_see_every_module():
    found = modules()
    assert REPO / "resel" / "live" / "coordinator.py" in found and JOURNAL in found
    assert any(p.is_relative_to(SLURM) for p in found)


def test_no_module_outside_backends_slurm_names_slurms_reason_words():
    words = set(SLURM_REASONS) | SLURM_PLACEHOLDERS
    hits = []
    for path in modules():
        if path.is_relative_to(SLURM):
            continue
        for line, text in strings(path):
            if text.strip() in words and path not in SHARED_WORDS.get(text.strip(), ()):
                hits.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
    assert hits == []


#: SQL that reads the events table, or JSON taken out of its data column
_EVENTS_SQL = re.compile(r"\bfrom\s+events\b|\bjson_extract\s*\(\s*data\b", re.IGNORECASE)


def test_no_module_outside_the_journal_reads_the_events_table():
    hits = []
    for path in modules():
        if path in JOURNAL_MODULES:
            continue
        for line, text in strings(path):
            if _EVENTS_SQL.search(text):
                hits.append(f"{path.relative_to(REPO)}:{line}: {text[:80]!r}")
    assert hits == []


def _loads_of_data(tree: ast.AST) -> list[int]:
    """Lines where ``json.loads`` (or ``loads``) is given something subscripted by ``"data"`` or
    an attribute ``data``: an event row's JSON parsed by hand."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "loads")
                or (isinstance(node.func, ast.Name) and node.func.id == "loads")):
            arg = node.args[0]
            if (isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and arg.slice.value == "data") \
                    or (isinstance(arg, ast.Attribute) and arg.attr == "data"):
                out.append(node.lineno)
    return out


def test_no_module_outside_the_journal_parses_event_json():
    hits = []
    for path in modules():
        if path == JOURNAL:
            continue
        for line in _loads_of_data(ast.parse(path.read_text(encoding="utf-8"))):
            hits.append(f"{path.relative_to(REPO)}:{line}")
    assert hits == []


def test_the_checks_catch_what_they_are_for():
    """The checks fail on the code they replaced (the report's reader and the coordinator's
    never-start test, as they were)."""
    old = ('for row in db.query("select time, kind, data from events where run_id = ?", [1]):\n'
           '    d = json.loads(row["data"])\n'
           'never = info.reason in ("PartitionConfig", "None", "(null)")\n')
    tree = ast.parse(old)
    assert _loads_of_data(tree) == [2]
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any(_EVENTS_SQL.search(t) for t in found)
    assert {"PartitionConfig", "None", "(null)"} <= set(found) & (set(SLURM_REASONS) | SLURM_PLACEHOLDERS)
