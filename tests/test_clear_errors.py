"""Tracebacks and wrong exits on hostile values and damaged stores (issue 24, "Seen" 8).

Each case runs the real ``resel`` command group (click's runner) and asserts a clear one-line error
(exit 1, no traceback, the exception a SystemExit) or the right result. A store's rows are written
with sqlite3 directly — a string, a blob, an infinity where a number belongs — as whoever can write
the file could. (``--dask`` is the other half of issue 24; SWF MaxProcs and a blank command are in
test_linear_inputs.py.)
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.selection import Strategy
from resel.store import open_store


@pytest.fixture(autouse=True)
def private_default_store(tmp_path, monkeypatch):
    """Commands that read the default store (simulate's --model auto) read a fresh one, not the
    user's (which another resel version may have written)."""
    monkeypatch.setenv("RESEL_DB", str(tmp_path / "default.db"))


def run(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


def clear_error(result, *expected: str, code: int = 1) -> None:
    """Exit 1 (2: a usage error, click's) with a message naming the problem, and no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    for text in expected:
        assert text in result.output, result.output


@pytest.fixture
def bag(tmp_path) -> Path:
    path = tmp_path / "bag.toml"
    path.write_text('[bag]\nname = "b"\ncommand = "gmx mdrun"\ncount = 4\n[bag.profile]\ninstructions = 1e12\n')
    return path


# ------------------------------------------------------------------ option values


def test_simulate_risk_nan_refused():
    """`simulate --risk nan` ended in a ValueError traceback; FloatRange lets NaN through (every
    comparison with it is false)."""
    clear_error(run("simulate", "--risk", "nan", "--sizes", "4", "--repeat", "1", "--no-store"),
                "--risk", "not a finite number", code=2)
    for value in ("inf", "-inf", "0.3"):
        clear_error(run("simulate", "--risk", value, "--sizes", "4", "--no-store"), "--risk", code=2)


@pytest.mark.parametrize("command", ["run", "plan"])
def test_run_and_plan_risk_nan_refused(command, bag, tmp_path):
    """`run` and `plan` took --risk nan silently (and planned with it)."""
    result = run(command, bag, "--risk", "nan", "--db", tmp_path / "s.db")
    assert result.exit_code == 2 and "--risk" in result.output and "not a finite number" in result.output


def test_model_predict_level_nan_refused(bag, tmp_path):
    result = run("model", "predict", bag, "--level", "nan", "--db", tmp_path / "s.db")
    assert result.exit_code == 2 and "not a finite number" in result.output


@pytest.mark.parametrize("seconds", ["1000000", "10000000", "2500000.5", "1e6"])
def test_strategy_failover_1000000_accepted(seconds):
    """`--strategies failover:1000000` was refused as "takes no +06": the strategy's name printed
    the timeout as 1e+06, whose '+' was read as a flag when parsed again. Every timeout the help
    allows (1 to 10,000,000 s) now survives its own name."""
    strategy = Strategy.parse(f"failover:{seconds}")
    assert Strategy.parse(strategy.name) == strategy
    assert "e+" not in strategy.name
    result = run("simulate", "--strategies", f"failover:{seconds}", "--sizes", "4", "--repeat", "1", "--no-store",
                 "--json")
    assert result.exit_code == 0, result.output


def test_strategy_failover_above_ten_million_refused():
    clear_error(run("simulate", "--strategies", "failover:10000001", "--sizes", "4", "--no-store"),
                "from 1 to 10,000,000", code=2)


@pytest.mark.parametrize("runs", ["99999999999999999999999", "0", "-1", ",", "1,x"])
def test_model_fit_runs_out_of_range_refused(runs, tmp_path):
    """`model fit --runs 99999999999999999999999` ended in OverflowError at SQLite."""
    result = run("model", "fit", "--runs", runs, "--db", tmp_path / "s.db")
    assert result.exit_code == 2 and "run ids" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("spec", [":8", "a:8:1:easy:x", "a", "a:nan"])
def test_grid_cluster_spec_malformed_refused(spec):
    result = run("grid", Path(__file__).parents[2] / "shared" / "data" / "swf" / "jaros1.swf",
                 "--cluster", spec, "--cluster", "b:8", "--dry-run")
    assert result.exit_code == 2 and ("NAME:CORES" in result.output or "cores from 1" in result.output), result.output


# ------------------------------------------------------------------ damaged stores


SITES = [{"name": "s", "kind": "slurm", "cores": 8, "clock": {"base": 2.0, "avg": None}, "kappa": 1.0}]
BAG = {"name": "gmx", "command": "gmx mdrun", "count": 3, "cores_per_task": 1,
       "profile": {"instructions": 1e12, "cycles": None, "ipc": None, "baseline": "x"}}


def live_store(path: Path, *, times=((0.0, 100.0), (0.0, 110.0), (0.0, 90.0)), site="s", sites=None, bag=None) -> Path:
    """A store with one live run of three finished attempts, written as given."""
    open_store(path).conn.close()
    con = sqlite3.connect(path)
    rid = con.execute("insert into runs (created, mode, bag, strategy, size, status, bag_spec, sites) values "
                      "('2024-01-01T00:00:00', 'live', 'gmx', 'model', 3, 'done', ?, ?)",
                      (json.dumps(bag or BAG), sites if sites is not None else json.dumps(SITES))).lastrowid
    for task, (start, end) in enumerate(times):
        con.execute("insert into attempts (run_id, task, attempt, site, pilot, start, end, outcome) "
                    "values (?, ?, 1, ?, 1, ?, ?, 'done')", (rid, task, site, start, end))
    con.commit()
    con.close()
    return path


def test_model_fit_on_a_sound_store_fits(tmp_path):
    result = run("model", "fit", "--db", live_store(tmp_path / "s.db"), "--json")
    assert result.exit_code == 0, result.output
    fit = json.loads(result.output)["fits"][0]["fit"]["s"]
    assert fit["rate_s_per_instr"] == pytest.approx(100.0 / 1e12)


@pytest.mark.parametrize("start, end, shown", [
    ("abc", "xyz", "'abc'"), (0.0, math.inf, "inf"), (-math.inf, 5.0, "-inf"), (0.0, 1e300, "1e+300"),
    (0.0, 2 ** 62, "e+18"), (0.0, b"\x00\x01", "b'\\x00\\x01'"), (-5.0, 10.0, "-5.0"),
])
def test_model_fit_on_attempts_with_strings_inf_or_huge_times(tmp_path, start, end, shown):
    """Attempts holding strings, infinities or times past the year 9999 ended `model fit` in
    TypeError or OverflowError: now the store is named as damaged, with the row and the value."""
    path = live_store(tmp_path / "s.db", times=[(start, end)] * 3)
    clear_error(run("model", "fit", "--db", path), "the run store is damaged", "attempts of run 1, task 0", shown)


@pytest.mark.parametrize("site", [b"\xff\x00", None, ""])
def test_model_fit_on_attempts_with_blob_sites(tmp_path, site):
    clear_error(run("model", "fit", "--db", live_store(tmp_path / "s.db", site=site)), "is not a site name")


@pytest.mark.parametrize("sites, problem", [
    ("not json", "is not JSON"), ("5", "not a list of sites"), ("[1, 2]", "is not a site"),
    ('{"a": 1}', "not a list of sites"), ('[{"name": 5, "clock": {"base": 2}}]', "is not a site name"),
    ('[{"clock": {"base": 2}}]', "is not a site name"), ('[{"name": "s", "clock": "fast"}]', "not a table of GHz"),
    ('[{"name": "s", "clock": {"base": NaN}}]', "not a positive number"),
    ('[{"name": "s", "clock": {"base": 2}, "kappa": "x"}]', "not a positive number"),
])
def test_model_fit_on_bad_sites_json(tmp_path, sites, problem):
    """The sites stored with a run (LIM's clocks for the held-out comparison) as anything but a
    list of sites ended in AttributeError or KeyError."""
    path = live_store(tmp_path / "s.db", sites=sites, times=[(0.0, 100.0 + i) for i in range(8)])
    clear_error(run("model", "fit", "--db", path), "runs.sites of run 1", problem)


def fitted_store(tmp_path: Path) -> Path:
    path = live_store(tmp_path / "s.db", times=[(0.0, 100.0 + i) for i in range(8)])
    assert run("model", "fit", "--db", path).exit_code == 0
    return path


@pytest.mark.parametrize("sql, problem", [
    ("update model_fits set fit = '[1]'", "is not a table of sites"),
    ("update model_fits set fit = '{\"s\": 5}'", "is not a site's fit"),
    ("update model_fits set fit = json_set(fit, '$.s.kappa', 'x')", "kappa 'x'"),
    ("update model_fits set fit = json_set(fit, '$.s.residuals', json('[\"a\"]'))", "residuals"),
    ("update model_fits set fit = json_set(fit, '$.s.residuals', json('[1e999]'))", "residuals"),
    ("update model_fits set runs = '{\"a\": 1}'", "runs"),
    ("update model_fits set application = X'ff00'", "application b'\\xff\\x00' is not text"),
    ("update model_fits set baseline_label = X'ff00'", "baseline_label"),
    ("update model_fits set created = X'ff00'", "created"),
    ("update model_fits set n_evidence = 'x'", "n_evidence"),
    ("update model_fits set evaluation = '{\"n\": 1}'", "evaluation"),
    ("update model_fits set lim = '[1]'", "lim"),
])
@pytest.mark.parametrize("command", [["model", "show"], ["model", "show", "--json"]])
def test_model_show_on_damaged_fits_and_blob_labels(tmp_path, sql, problem, command):
    """A stored fit whose documents or labels are not what resel wrote (a blob label, a list for
    the fit, strings for numbers) ended `model show` in tracebacks, or printed it (exit 0)."""
    path = fitted_store(tmp_path)
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    clear_error(run(*command, "--db", path), "the run store is damaged", "model_fits row 1", problem)


def test_model_predict_on_a_damaged_fit(tmp_path, bag):
    path = fitted_store(tmp_path)
    con = sqlite3.connect(path)
    con.execute("update model_fits set fit = json_set(fit, '$.s.residuals', json('[\"a\"]'))")
    con.commit()
    con.close()
    clear_error(run("model", "predict", bag, "--db", path), "the run store is damaged", "residuals")


@pytest.mark.parametrize("sql, problem, commands", [
    ("update runs set ttc_wkd = 'x'", "ttc_wkd 'x' is not a number", ("runs", "runs --json", "report 1")),
    ("update runs set size = 9e999", "size inf is not a number", ("runs", "runs --json", "report 1")),
    ("update runs set audit = '5'", "audit 5 is not a table", ("report 1",)),     # (runs lists no audit)
])
def test_runs_and_report_on_damaged_run_rows(tmp_path, sql, problem, commands):
    path = tmp_path / "s.db"
    assert run("simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db", path).exit_code == 0
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    for command in commands:
        clear_error(run(*command.split(), "--db", path), "the run store is damaged: runs row 1", problem)
