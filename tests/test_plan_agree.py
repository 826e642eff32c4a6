"""``resel plan``'s table, ``--explain`` and ``--json`` come from one computation and agree
field by field, on every example sites file (issue 26 item 4).

Each file is planned once, in a process of its own, by ``resel plan --explain --wide`` as a user types
it; the document :func:`resel.planning.plan` returned for it is kept, and ``--json`` is then
printed from that same document. The test reads the printed table and explanation back and
holds every cell and every number of every sentence to the document's row for that site — the
pilot the plan asks for (its cores, walltime, the three estimates of *that* pilot, the one
used), the tasks, the pilots (``1,024 × 1``, never a list of 1,024 ones), the share's finish,
the role, and why a site with no tasks holds pilots — and each row to itself: its pilot is the
one the engine submits, its wait that pilot's estimate, its slots those pilots' slots, its finish
that wait plus its waves of T̂x.

The simulated files run on the simulator; sites-testbed.toml and sites-mixed.toml ask the live
testbed (nothing is submitted; an unreachable site there is a row that says so, and is held to
the same rules).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from resel.config import LIVE_KINDS, load_sites
from resel.planning_explain import pilots_text, pilots_words
from resel.selection import predicted_ttc
from resel.transfer import DataTimes

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
FILES = sorted(p.name for p in EXAMPLES.glob("sites-*.toml"))
LIVE = {n for n in FILES if any(s.kind in LIVE_KINDS for s in load_sites(EXAMPLES / n))}

#: the process that plans: ``resel plan --explain`` with the plan's computation (live or
#: simulated sites alike) wrapped to keep its document, then ``resel plan --json`` printing that
#: document (the CLI's own code paths both times)
DRIVER = r"""
import copy, io, json, sys, contextlib
import resel.live.plan as lp
import resel.planning as planning
from resel.cli import cli
kept = {}
def main(argv):
    cli.main(argv, prog_name="resel", standalone_mode=True)
real = planning.plan
def keep(*a, **k):
    kept["doc"] = real(*a, **k)
    return copy.deepcopy(kept["doc"])
planning.plan = keep
args = sys.argv[1:]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["plan", *args, "--explain", "--wide"])
    except SystemExit as e:
        assert not e.code, e.code
lp.plan = planning.plan = lambda *a, **k: copy.deepcopy(kept["doc"])
js = io.StringIO()
with contextlib.redirect_stdout(js):
    try:
        main(["plan", *args, "--json"])
    except SystemExit as e:
        assert not e.code, e.code
print(json.dumps({"text": out.getvalue(), "doc": kept["doc"], "json": json.loads(js.getvalue())}))
"""


def _bag(name: str) -> Path:
    if name in LIVE:
        return EXAMPLES / "sleep-bag.toml"
    return EXAMPLES / ("gromacs-data-bag.toml" if name == "sites-data.toml" else "gromacs-bag.toml")


def _planned(name: str, tmp_path: Path) -> dict:
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1", "RESEL_DB": str(tmp_path / "db")}
    res = subprocess.run([sys.executable, "-c", DRIVER, str(_bag(name)), "--sites", str(EXAMPLES / name),
                          "--db", str(tmp_path / "db")],
                         cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def _table(text: str, sites: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The header and each site's cells, read back from the printed table (squeue-style:
    columns two spaces apart or more, a rule under the header; the terminal is wide enough that
    nothing wraps)."""
    lines = text.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("───"))
    split = lambda ln: [c for c in re.split(r"\s{2,}", ln.strip())]   # noqa: E731
    cols = split(lines[rule - 1])
    rows: dict[str, list[str]] = {}
    for ln in lines[rule + 1:]:
        if ln.startswith("  ") or not ln.strip():
            break
        cells = split(ln)
        cells += [""] * (len(cols) - len(cells))        # an empty role at the end
        rows[cells[0]] = cells
    assert set(rows) == set(sites), f"table rows {sorted(rows)} != sites {sites}"
    return cols, rows


def _explained(text: str, sites: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Per site, the verdict and the lines of ``--explain``'s 'why:' block."""
    block = text.split("\n  why:\n", 1)[1].splitlines()
    out: dict[str, tuple[str, list[str]]] = {}
    current = None
    for ln in block:
        if ln.startswith("    ") and not ln.startswith("      "):
            name, verdict = ln.strip().split(": ", 1)
            current = name
            out[name] = (verdict, [])
        elif ln.startswith("      ") and current:
            out[current][1].append(ln.strip())
        elif ln and not ln.startswith(" ") and current and out[current][1]:   # a long line wrapped
            out[current][1][-1] += " " + ln.strip()
    assert set(out) == set(sites)
    return out


def _bare(text: str) -> str:
    return "".join(text.split())


def _row_adds_up(r: dict, doc: dict, cores_per_task: int) -> None:
    """A row agrees with itself: its pilot is the one submitted, its numbers that pilot's."""
    if r["pilots"]:
        assert r["pilot_cores"] == r["pilots"][0]
        entry = next(e for e in r["menu"] if e["cores"] == r["pilots"][0])
        assert r["wait_s"] == entry["wait_s"] and r["used"] == entry["used"]
        for name in ("history", "twin", "scheduler"):
            assert r[f"{name}_s"] == entry[f"{name}_s"]
        assert r["slots"] == sum(max(1, c // cores_per_task) for c in r["pilots"])
    if r["tasks"] and r["pilots"]:
        data = DataTimes(r["data"]["own_in_s"], r["data"]["shared_in_s"], r["data"]["out_s"]) if r["data"] else None
        want = predicted_ttc(r["wait_s"], r["tx"], r["tasks"], r["slots"], data)
        assert r["finish_s"] == (None if want == math.inf else pytest.approx(want, rel=1e-12))


@pytest.mark.parametrize("name", FILES)
def test_table_explain_and_json_agree(name, tmp_path, request):
    if name in LIVE:
        request.getfixturevalue("testbed")
    got = _planned(name, tmp_path)
    doc, text = got["doc"], got["text"]
    assert got["json"] == {**doc, "sites_kind": got["json"]["sites_kind"]}       # --json is that document
    sites = [r["site"] for r in doc["sites"]]
    cols, table = _table(text, sites)
    why = _explained(text, sites)
    from resel.config import load_bag
    from resel.planning_explain import plan_unit
    unit = plan_unit(doc["sites"])                 # the one unit of the table and the sentences
    f, _s = unit.cell, unit.say
    u = f" [{unit.name}]"
    cpt = load_bag(_bag(name)).cores_per_task
    col = {c: i for i, c in enumerate(cols)}
    for r in doc["sites"]:
        _row_adds_up(r, doc, cpt)
        cells = table[r["site"]]
        cell = lambda head: cells[col[head]]         # noqa: E731
        assert cell("tasks") == f"{r['tasks']:,}"
        assert cell("pilots") == pilots_text(r["pilots"])
        assert "1, 1" not in cell("pilots")
        assert cell("role") == (r["role"] or ("unreachable" if r["error"] else ""))
        assert cell("pilot [cores]") == str(r["pilot_cores"])
        assert cell(f"walltime{u}") == f(r["walltime"])
        for est in ("history", "twin", "scheduler"):
            assert cell(f"{est}{u}") == f(r[f"{est}_s"]) + ("*" if r["used"] == est else "")
        assert cell(f"bag alone{u}") == f(r["ttc_s"])
        assert cell(f"T̂x{u}") == f(r["tx"])
        if r["tasks"]:
            assert cell(f"share done{u}") == f(r["finish_s"])
            if r["finish_p50"] is not None:
                assert cell(f"P50{u}") == f(r["finish_p50"])
                assert cell(f"P90{u}") in (f(r["finish_p90"]), "no spread")
        else:
            assert cell(f"share done{u}") == cell(f"P50{u}") == cell(f"P90{u}") == "—"
        verdict, lines = why[r["site"]]
        ex = r["explain"]
        # a line longer than the terminal wraps, at a space or inside a long word: compared without spaces
        assert verdict == ex["verdict"] and [_bare(x) for x in lines] == [_bare(x) for x in ex["why"]]
        lines = ex["why"]
        nums = ex["numbers"]
        assert (nums["wait_s"], nums["wait_from"], nums["tasks"], nums["pilots"], nums["pilot_cores"], nums["slots"]) == (
            r["wait_s"], r["used"], r["tasks"], r["pilots"], r["pilot_cores"], r["slots"])
        if verdict == "chosen":
            assert nums["finish_s"] == r["finish_s"]
            assert f"{r['tasks']:,} task(s) on {pilots_words(r['pilots'])}, {r['slots']:,} at a time" in lines[0]
            assert f"wait {_s(r['wait_s'])} ({r['used']})" in lines[0]
            assert lines[0].endswith(f"its share done at {_s(r['finish_s'])}")
        elif verdict == "extra pilots":
            assert lines[0].startswith(f"no tasks of its own; {pilots_words(r['pilots'])} for tasks waiting elsewhere")
            assert f"wait {_s(r['wait_s'])}" in lines[0]
            # why it holds pilots: the sites file's flag, or the queue-aware strategy's own rule
            assert ("its reselect_target is true" in lines[0]) == bool(r["reselect_target"])
        elif verdict == "not chosen: too slow" and r["ttc_s"] is not None and doc["predicted_ttc_s"] is not None:
            assert f"the bag alone would take {_s(r['ttc_s'])} here (wait {_s(r['wait_s'])}" in lines[0]
    finishes = [r["finish_s"] for r in doc["sites"] if r["tasks"]]
    if finishes and None not in finishes:
        assert doc["predicted_ttc_s"] == max(finishes)
        assert f"predicted TTC of this plan: {unit.say(doc['predicted_ttc_s'])} " in text


def test_a_pool_of_one_task_pilots_runs_side_by_side():
    """The issue's own case: 1,024 tasks on the pool of examples/sites-traces.toml. Its 1,024
    one-core pilots are 1,024 slots — one wave, not 1,024 in a row (which the plan said before:
    "predicted TTC 2,776.20 h")."""
    from resel.config import load_bag
    from resel.live.plan import plan
    from resel.planning import SitePlan
    sites = [s for s in load_sites(EXAMPLES / "sites-traces.toml") if s.name == "osg"]
    bag = load_bag(EXAMPLES / "gromacs-bag.toml")
    row = SitePlan("osg", "simulated", 1, 172800.0, 0.0, total_cores=2000)
    row.menu = [{"slots": 2000, "cores": 1, "history_s": None, "history_note": "none", "twin_s": 60.0,
                 "twin_note": None, "scheduler_s": None, "scheduler_note": "none"}]
    row.twin_s = 60.0
    doc = plan(bag, sites, strategy="queue+reselect", rows=[row], limits={})
    r = doc["sites"][0]
    assert r["tasks"] == 1024 and len(r["pilots"]) == 1024 and r["slots"] == 1024
    assert r["finish_s"] == pytest.approx(60.0 + r["tx"]) == doc["predicted_ttc_s"]
    assert pilots_text(r["pilots"]) == "1,024 × 1"
    assert "1,024 pilots of 1 core, 1,024 at a time" in r["explain"]["why"][0]
