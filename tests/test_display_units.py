"""What a newcomer reads (issue 15, "small frictions"): times in a unit that fits them, named in
every header; a Gantt chart of a pool-sized run that fits a screen; a long scenario that shows its
progress and explains its table; a plan whose legend is whole sentences; help examples whose
trace paths exist from the checkout.

Expected values come from the definitions (the unit rule, slot counts by brute force over the
stored attempts and pilots) or from the same command's ``--json``, never from the code under test.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

import resel
from resel.report import plots
from resel import units
from resel.cli import cli
from resel.report.html import html_report
from resel.store import open_store, save_run

REPO = Path(__file__).resolve().parent.parent

FAST_SITES = """\
[[site]]
name = "alpha"
kind = "simulated"
cores = 8
clock = { base = 2.0 }
wait = { dist = "lognormal", median = 3, sigma = 0.2 }

[[site]]
name = "beta"
kind = "simulated"
cores = 4
clock = { base = 2.5 }
reselect_target = true
pilot = { mode = "per-task", max_pilots = 16 }
wait = { dist = "lognormal", median = 2, sigma = 0.2 }
"""

FAST_BAG = """\
[bag]
name = "fast"
command = "sleep 2"
count = 16

[bag.profile]
instructions = 4e9
"""


def unit_of(largest: float) -> str:
    """The rule, restated: seconds below 10 minutes, minutes below 2 hours, else hours."""
    return "s" if largest < 600 else "min" if largest < 7200 else "h"


def flat(text: str) -> str:
    return " ".join(text.split())


def invoke(*args, **kwargs):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kwargs)


def as_json(*args):
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# ------------------------------------------------------------------------------- the unit rule
@pytest.mark.parametrize("largest, name", [(0, "s"), (59.9, "s"), (599.9, "s"), (600, "min"), (7199, "min"),
                                           (7200, "h"), (86400 * 30, "h"), (-7200, "h")])
def test_the_largest_magnitude_picks_the_unit(largest, name):
    assert units.pick([1.0, largest, None, math.nan]).name == name == unit_of(abs(largest))


def test_nothing_to_show_is_seconds_and_unknown_times_are_a_dash():
    assert units.pick([]) is units.SECOND and units.pick([None, math.inf]) is units.SECOND
    assert units.HOUR.fmt(None) == units.HOUR.fmt(math.nan) == "—"
    assert units.SECOND.fmt(2.345) == "2.3" and units.MINUTE.fmt(90) == "1.5" and units.HOUR.fmt(5400) == "1.50"
    assert units.HOUR.fmt(3600 * 1234.5) == "1,234.50"
    assert units.MINUTE.header("T_x") == "T_x [min]" and units.SECOND.with_name(3) == "3.0 s"


# ------------------------------------------------------------------------- runs, report, sites show
@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    """A 16-task bag of ~2 s tasks on two sites whose queues wait seconds: a testbed-sized run."""
    d = tmp_path_factory.mktemp("fast")
    (d / "sites.toml").write_text(FAST_SITES, encoding="utf-8")
    (d / "bag.toml").write_text(FAST_BAG, encoding="utf-8")
    db = d / "r.db"
    r = invoke("simulate", d / "bag.toml", "--sites", d / "sites.toml", "--sizes", "16", "--repeat", "1",
               "--strategies", "reselect", "--db", db)
    assert r.exit_code == 0, r.output
    return {"dir": d, "db": db, "table": r.stdout}


def test_a_run_of_seconds_reads_in_seconds_everywhere(fast):
    db = fast["db"]
    [run] = as_json("runs", "--json", "--db", db)
    assert run["ttc_wkd"] < 600                      # the premise: a testbed-sized run
    assert "TTC_wkd [s]" in fast["table"] and "T_q,wkd [s]" in fast["table"] and "times in seconds" in fast["table"]

    listing = invoke("runs", "--db", db).stdout
    assert "TTC_wkd [s]" in listing and f" {run['ttc_wkd']:.1f} " in listing

    report = invoke("report", run["id"], "--db", db, "--decisions", "3").stdout
    rep = as_json("report", run["id"], "--json", "--db", db)
    r = rep["run"]
    assert f"TTC_wkd {r['ttc_wkd']:.1f} s = T_q,wkd {r['tq_wkd']:.1f} s + T_x,wkd {r['tx_wkd']:.1f} s" in report
    # "where tasks ran": every time column names its unit, each cell in it
    unit = unit_of(max(v for row in rep["per_site"] for v in (row["tq"], row["tx"], row["ttc"]) if v is not None))
    assert unit == "s"
    for header in ("mean T_q [s]", "mean T_x [s]", "last end [s]"):
        assert header in report, header
    for row in rep["per_site"]:
        cells = f"{row['tasks']} {row['tq']:.1f} {row['tx']:.1f} {row['ttc']:.1f}"
        assert cells in flat(report), cells
    assert "time [s]" in report and "Ŵ [s]" in report                # the decisions table


def test_sites_show_names_the_unit_of_the_predicted_run_time(fast):
    d = fast["dir"]
    doc = as_json("sites", "show", "--sites", d / "sites.toml", "--bag", d / "bag.toml", "--json")
    text = invoke("sites", "show", "--sites", d / "sites.toml", "--bag", d / "bag.toml").stdout
    assert unit_of(max(s["tx_pred"] for s in doc["sites"])) == "s" and "T̂x [s]" in text
    for s in doc["sites"]:
        assert re.search(rf"^{s['name']} .* {s['tx_pred']:.1f} ", text, re.M), s
    # the thesis sites' tasks run for hours: the same column in hours
    assert "T̂x [h]" in invoke("sites", "show").stdout


def test_the_html_report_and_the_figures_of_a_run_of_seconds(fast):
    db = open_store(fast["db"], write=False)
    page = html_report(db, 1)
    for header in ("mean T_q [s]", "median TTC [s]", "measured mean T_x [s]", "TTC_wkd [s]"):
        assert header in page, header
    assert "[h]" not in page
    for fn in (plots.gantt, plots.cdfs, plots.predictions):
        fig, _ = fn(db, 1)
        labels = [ax.get_xlabel() + ax.get_ylabel() for ax in fig.axes]
        assert any("[s]" in label for label in labels) and not any("[h]" in label for label in labels), labels


# ---------------------------------------------------------------------------------- Gantt
def brute_counts(pils, segs, end, t):
    """Slots queued, running and busy at time t, each interval [from, to) counted directly."""
    queued = running = busy = 0
    for p in pils:
        stop = p["end"] if p["end"] is not None else end
        sub = p["submitted"] or 0.0
        queue_end = p["start"] if p["start"] is not None else stop
        queued += p["cores"] * (sub <= t < queue_end)
        running += p["cores"] * (p["start"] is not None and p["start"] <= t < stop)
    for a in segs:
        busy += a["start"] <= t < (a["end"] if a["end"] is not None else end)
    return queued, running, busy


def test_slot_counts_at_a_slot_handed_on_in_the_same_second():
    """Pilot 1 ends at 10 exactly when pilot 2 starts: at 10 one slot runs, not two; its task
    ends at 10 as the next starts: one busy slot, never two, never none."""
    pils = [{"pilot": 1, "cores": 1, "submitted": 0.0, "start": 0.0, "end": 10.0},
            {"pilot": 2, "cores": 1, "submitted": 0.0, "start": 10.0, "end": 20.0}]
    segs = [{"start": 0.0, "end": 10.0}, {"start": 10.0, "end": 20.0}]
    c = plots.slot_counts(pils, segs, 20.0)
    assert c == {"times": [0.0, 10.0, 20.0], "queued": [1, 0, 0], "running": [1, 1, 0], "busy": [1, 1, 0]}


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    """The issue's case: 1,024 tasks, random, on the thesis sites: the OSG gets hundreds of
    single-core pilots, one per task."""
    db = open_store(tmp_path_factory.mktemp("gantt") / "r.db")
    result = resel.simulate(resel.default_bag(), resel.default_sites(), "random", seed=0)
    return db, save_run(db, result)


def test_a_pool_of_single_core_pilots_is_one_band_that_fits_a_screen(pool_run):
    db, run_id = pool_run
    fig, data = plots.gantt(db, run_id)
    osg = [p for p in data["pilots"] if p["site"] == "osg"]
    assert len(osg) > 200 and {p["cores"] for p in osg} == {1}
    width, height = fig.get_size_inches() * 110           # the dpi figures are written with
    assert height <= 1080 and width <= 1920, (width, height)
    band = data["bands"]["osg"]
    assert band["pilots"] == len(osg) and set(data["bands"]) == {"osg"}   # the clusters keep their rows
    # the band is the slot counts, checked at every step and between steps
    segs = [s for s in data["segments"] if s["site"] == "osg"]
    end = max([s["end"] for s in data["segments"]] + [p["end"] or 0 for p in data["pilots"]])
    for i, t in enumerate(band["times"]):
        expected = brute_counts(osg, segs, end, t)
        assert (band["queued"][i], band["running"][i], band["busy"][i]) == expected, t
        if i + 1 < len(band["times"]):
            mid = (t + band["times"][i + 1]) / 2
            assert brute_counts(osg, segs, end, mid) == expected, mid
    assert band["peak"] == max(q + r for q, r in zip(band["queued"], band["running"]))
    # every attempt is still in the data, banded or not
    assert len(data["segments"]) == sum(1 for _ in db.query("select 1 from tasks where run_id = ?", [run_id]))


# ----------------------------------------------------------------------------- resel scenario seed004
def test_seed004_reports_each_run_as_it_ends():
    from resel.sim.scenarios import run_seed004
    heard = []
    doc = run_seed004(load=1.0, limit=200, workers=1, on_done=lambda *a: heard.append(a))
    labels = [r["variant"] for r in doc["rows"]]
    assert [d for _, d, _ in heard] == list(range(1, len(labels) + 1))
    assert {t for _, _, t in heard} == {len(labels)} and sorted(lb for lb, _, _ in heard) == sorted(labels)


def test_seed004_progress_on_a_terminal_none_with_json(monkeypatch):
    from resel.cli import common as cli_common
    tty = io.StringIO()
    monkeypatch.setattr(cli_common, "err", Console(file=tty, force_terminal=True, width=120,
                                                     _environ={"TERM": "xterm-256color"}))  # not dumb: CI has no TERM)
    r = invoke("scenario", "seed004", "--first", "200", "--workers", "1")
    assert r.exit_code == 0, r.output
    assert "seed 004 runs" in tty.getvalue() and "19/19" in tty.getvalue()
    # the table: every variant name whole, and a legend that explains the columns
    doc = as_json("scenario", "seed004", "--first", "200", "--workers", "1", "--json")
    for row in doc["rows"]:
        assert re.search(rf"^{re.escape(row['variant'])}  ", r.stdout, re.M), row["variant"]
    from resel.cli.grid import SEED004_LEGEND
    for line in SEED004_LEGEND:
        assert flat(line) in flat(r.stdout)
    for word in ("rel. resp.", "impacted %", "earlier %", "bounded slowdown", "all-cancel/H", "isis/D"):
        assert word in flat(r.stdout)
    # --json on a terminal: nothing on stderr
    tty.truncate(0)
    tty.seek(0)
    assert invoke("scenario", "seed004", "--first", "200", "--workers", "1", "--json").exit_code == 0
    assert tty.getvalue() == ""


# --------------------------------------------------------------------------------------- resel plan
def test_plan_legend_is_whole_sentences_under_the_table(tmp_path):
    r = invoke("plan", REPO / "examples" / "gromacs-bag.toml", "--sites", REPO / "examples" / "sites-thesis.toml",
               "--db", tmp_path / "r.db")
    assert r.exit_code == 0, r.output
    from resel.cli.plan import PLAN_LEGEND
    lines = r.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("site ") and "start [" in line)
    last_row = max(i for i, line in enumerate(lines) if line.startswith(("bridges", "comet", "supermic", "osg")))
    after = "\n".join(lines[last_row + 1:])
    for line in PLAN_LEGEND:
        assert line.endswith(".") and flat(line) in flat(after), line
    assert "P50 / P90:" not in "\n".join(lines[:header])            # no legend in the title
    # numbers only in the cells, the unit once, in the headers
    unit = re.search(r"start \[(s|min|h)\]", lines[header]).group(1)
    for col in ("T̂x", "P50", "P90"):
        assert f"{col} [{unit}]" in lines[header]
    for line in lines[header + 2:last_row + 1]:
        assert not re.search(r"\d (s|min|h)\b", line), line


# ------------------------------------------------------------------------------- help examples
def all_help():
    """Every command's --help text, by walking the click tree with contexts as click makes them
    (parent chain and context settings: click caches each command's help option, so a context
    without the group's ``-h`` would take ``-h`` away from later tests)."""
    def walk(cmd: click.Command, path: list[str], parent: click.Context | None):
        ctx = click.Context(cmd, info_name=path[-1], parent=parent, **cmd.context_settings)
        yield " ".join(path), cmd.get_help(ctx)
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, path + [name], ctx)
    return list(walk(cli, ["resel"], None))


def test_every_trace_a_help_example_reads_exists_from_the_checkout():
    seen = 0
    for name, text in all_help():
        for line in re.findall(r"^\s*resel .*$", text.replace("\\\n", " "), flags=re.M):
            words = line.split()
            for prev, word in zip(words, words[1:]):
                if word.endswith(".swf") and prev not in ("--output", "-o"):
                    seen += 1
                    assert (REPO / word).is_file(), f"`{name} --help` reads {word}, which is not there from the checkout"
    assert seen >= 5
