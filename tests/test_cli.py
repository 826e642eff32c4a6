"""Tests of the ``resel`` command line (resel/cli/), driven through click's CliRunner.

Every invocation writes to a store under ``tmp_path`` (``--db`` or ``$RESEL_DB``) so nothing
touches the user's home directory. Sizes and repetitions are kept tiny: the whole file runs in
a few seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import pytest
import sqlite_utils
from click.testing import CliRunner

import resel
from resel.cli import cli
from resel.config import load_sites

STRATEGIES = ("random", "model", "reselect")
EMBEDDED_SITES = {"bridges", "comet", "supermic", "osg"}

TWO_SITES = """\
[[site]]
name = "alpha"
kind = "simulated"
cores = 64
clock = { base = 2.5 }
wait = { dist = "lognormal", median = 300, sigma = 0.5 }

[[site]]
name = "beta"
kind = "simulated"
cores = 32
clock = { base = 3.0, avg = 3.2 }
reselect_target = true
pilot = { mode = "per-task", max_pilots = 32 }
wait = { dist = "lognormal", median = 60, sigma = 0.5 }
"""


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Belt and braces: even a command run without --db lands under tmp_path."""
    path = tmp_path / "env-default.db"
    monkeypatch.setenv("RESEL_DB", str(path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return path


def invoke(*args: str, **kwargs):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kwargs)


def run_json(*args: str) -> object:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_clean_failure(result, code: int) -> str:
    """A deliberate failure: the given exit status, no traceback, a message on stderr."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.output


def stored_run_count(db: Path) -> int:
    if not db.exists():
        return 0
    database = sqlite_utils.Database(db)
    return database["runs"].count if "runs" in database.table_names() else 0


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One small stored experiment shared by the read-only tests: 3 strategies x 2 sizes x 2."""
    db = tmp_path_factory.mktemp("exp") / "r.db"
    result = CliRunner().invoke(cli, ["simulate", "--sites", str(resel.default_sites_path()), "--strategies",
                                      ",".join(STRATEGIES), "--sizes", "16,32", "--repeat", "2", "--json",
                                      "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return db, json.loads(result.stdout)


# --- simulate ---------------------------------------------------------------------------------


def test_simulate_json_has_one_result_per_strategy_and_size(experiment):
    _, doc = experiment
    results = doc["results"]
    assert len(results) == len(STRATEGIES) * 2
    assert {(r["strategy"], r["size"]) for r in results} == {(s, n) for s in STRATEGIES for n in (16, 32)}
    assert doc["strategies"] == list(STRATEGIES)
    assert doc["sizes"] == [16, 32]
    assert doc["repeat"] == 2
    assert set(doc["sites"]) == EMBEDDED_SITES


def test_simulate_json_metrics_are_mean_std_seconds(experiment):
    _, doc = experiment
    for r in doc["results"]:
        assert r["repeat"] == 2
        for metric in ("ttc_wkd", "tx_wkd", "tq_wkd"):
            summary = r[metric]
            assert set(summary) == {"mean", "std"}, (r["strategy"], r["size"], metric)
            for key in ("mean", "std"):
                value = summary[key]
                assert isinstance(value, (int, float)) and not isinstance(value, bool)
                assert math.isfinite(value) and value >= 0
        # seconds, not hours: a GROMACS-style task takes about an hour, so a bag takes > 600 s
        assert r["tx_wkd"]["mean"] > 600
        assert r["ttc_wkd"]["mean"] >= r["tx_wkd"]["mean"]
        assert r["ttc_wkd"]["mean"] == pytest.approx(r["tq_wkd"]["mean"] + r["tx_wkd"]["mean"], rel=1e-9)


def test_simulate_stores_every_run(experiment):
    db, doc = experiment
    assert stored_run_count(db) == 12
    listed = run_json("runs", "--json", "--db", db)
    assert len(listed) == 12
    run_ids = [i for r in doc["results"] for i in r["run_ids"]]
    assert sorted(run_ids) == sorted(r["id"] for r in listed)
    assert doc["experiment_id"] is not None
    assert {r["experiment_id"] for r in listed} == {doc["experiment_id"]}
    assert doc["db"] == str(db)


MAIN_JOB = ("auto", "model", "earliest", "race", "failover", "oracle")


def test_simulate_table_output(tmp_path):
    """The main job's shape (issue 26 item 7): resel's default against what a user would do
    instead and the oracle's bound, on the embedded queue sites, and the line saying how much
    sooner resel finishes; the oracle's rows are bounds, not stored runs."""
    result = invoke("simulate", "--sizes", "8,12", "--repeat", "1", "--db", tmp_path / "r.db")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for name in MAIN_JOB:
        assert name in out
    for size in ("8", "12"):
        assert size in out
    assert "seth-a, seth-b, seth-c" in out and "TTC vs auto" in out
    assert "resel (auto) against the best of the others (mean TTC_wkd): 8 tasks in" in " ".join(out.split())
    assert "auto ran as queue+reselect+learn" in " ".join(out.split())
    assert stored_run_count(tmp_path / "r.db") == 10


def test_simulate_json_of_the_main_job(tmp_path):
    doc = run_json("simulate", "--sizes", "8", "--repeat", "2", "--json", "--db", tmp_path / "r.db")
    assert doc["strategies"] == list(MAIN_JOB) and doc["shift_days"] == 3
    by = {r["strategy"]: r for r in doc["results"]}
    oracle = by["oracle"]
    assert oracle["tx_wkd"] is None and len(oracle["bounds"]) == 2 and oracle["run_ids"] == []
    for name in MAIN_JOB[:-1]:     # no run beats the bound on its seed
        assert by[name]["ttc_wkd"]["mean"] >= oracle["ttc_wkd"]["mean"] - 1e-6
    assert [a["ran_as"] for a in by["auto"]["auto"]] == ["queue+reselect+learn"]
    sooner = doc["sooner"]["8"]
    best = min(MAIN_JOB[1:-1], key=lambda n: (by[n]["ttc_wkd"]["mean"], n))
    assert sooner["best_other"] == best
    assert sooner["percent_sooner"] == pytest.approx(
        100 * (1 - by["auto"]["ttc_wkd"]["mean"] / by[best]["ttc_wkd"]["mean"]))


def test_simulate_no_store_writes_nothing(tmp_path, _isolated_store):
    db = tmp_path / "r.db"
    result = invoke("simulate", "--sizes", "8", "--repeat", "1", "--no-store", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["results"]) == len(MAIN_JOB)
    assert doc["db"] is None
    assert all(r["run_ids"] == [] for r in doc["results"])
    assert stored_run_count(db) == 0
    assert not db.exists()
    assert not _isolated_store.exists()


def test_simulate_no_store_without_db_option_leaves_default_store_alone(_isolated_store):
    result = invoke("simulate", "--sizes", "8", "--repeat", "1", "--no-store")
    assert result.exit_code == 0, result.output
    assert not _isolated_store.exists()


def test_simulate_uses_resel_db_env_when_no_db_option(_isolated_store):
    result = invoke("simulate", "--sizes", "8", "--repeat", "1", "--strategies", "model", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["db"] == str(_isolated_store)
    assert stored_run_count(_isolated_store) == 1


def test_simulate_custom_sites_file(tmp_path):
    sites = tmp_path / "two.toml"
    sites.write_text(TWO_SITES, encoding="utf-8")
    db = tmp_path / "r.db"
    doc = run_json("simulate", "--sites", sites, "--strategies", ",".join(STRATEGIES), "--sizes", "8", "--repeat",
                   "1", "--json", "--db", db)
    assert doc["sites"] == ["alpha", "beta"] and doc["shift_days"] == 0
    assert len(doc["results"]) == 3
    for r in doc["results"]:
        assert r["ttc_wkd"]["mean"] >= r["tx_wkd"]["mean"] > 0
    assert stored_run_count(db) == 3
    # the stored runs are on the custom sites only
    ran_on = {row["site"] for row in sqlite_utils.Database(db).query("select distinct site from tasks")}
    assert ran_on <= {"alpha", "beta"}
    # and the table form works too
    table = invoke("simulate", "--sites", sites, "--sizes", "8", "--repeat", "1", "--no-store")
    assert table.exit_code == 0, table.output
    assert "alpha" in table.stdout and "beta" in table.stdout


def test_simulate_repeat_uses_paired_seeds(tmp_path):
    doc = run_json("simulate", "--sizes", "8", "--repeat", "2", "--seed", "7", "--strategies", "random",
                   "--json", "--db", tmp_path / "r.db")
    seeds = sorted(r["seed"] for r in run_json("runs", "--json", "--db", tmp_path / "r.db"))
    assert seeds == [7, 8]
    assert doc["seed"] == 7


# --- bad input: never a traceback -------------------------------------------------------------


def test_malformed_bag_file(tmp_path):
    bag = tmp_path / "bad-bag.toml"
    bag.write_text('[bag]\nname = "x"\ncount = = 3\n', encoding="utf-8")
    out = assert_clean_failure(invoke("simulate", bag, "--db", tmp_path / "r.db"), 1)
    assert str(bag) in out
    assert "line" in out
    assert len(out.strip().splitlines()) == 1


def test_malformed_bag_file_bad_value_names_key_and_line(tmp_path):
    bag = tmp_path / "bag.toml"
    bag.write_text('[bag]\nname = "x"\ncommand = "true"\ncount = -4\n\n[bag.profile]\ninstructions = 1e12\n',
                   encoding="utf-8")
    out = assert_clean_failure(invoke("simulate", bag, "--no-store"), 1)
    assert str(bag) in out
    assert "count" in out and "line 4" in out


def test_malformed_sites_file(tmp_path):
    sites = tmp_path / "sites.toml"
    sites.write_text('[[site]]\nname = "a"\nkind = "simulated"\ncores = "many"\n', encoding="utf-8")
    out = assert_clean_failure(invoke("simulate", "--sites", sites, "--no-store"), 1)
    assert str(sites) in out and "cores" in out


def test_unknown_strategy(tmp_path):
    out = assert_clean_failure(invoke("simulate", "--strategies", "foo", "--db", tmp_path / "r.db"), 2)
    assert "--strategies" in out
    assert "foo" in out
    for name in STRATEGIES:  # says what *is* allowed
        assert name in out
    assert stored_run_count(tmp_path / "r.db") == 0


@pytest.mark.parametrize("sizes", ["0", "16,0", "-3", "abc", ","])
def test_bad_sizes(tmp_path, sizes):
    out = assert_clean_failure(invoke("simulate", f"--sizes={sizes}", "--db", tmp_path / "r.db"), 2)
    assert "--sizes" in out
    assert stored_run_count(tmp_path / "r.db") == 0


def test_bad_repeat(tmp_path):
    assert_clean_failure(invoke("simulate", "--repeat", "0", "--db", tmp_path / "r.db"), 2)


def test_missing_sites_file(tmp_path):
    missing = tmp_path / "nope.toml"
    out = assert_clean_failure(invoke("simulate", "--sites", missing, "--db", tmp_path / "r.db"), 1)
    assert "file not found" in out
    assert str(missing) in out


def test_missing_bag_file(tmp_path):
    missing = tmp_path / "no-bag.toml"
    out = assert_clean_failure(invoke("simulate", missing, "--no-store"), 1)
    assert "file not found" in out and str(missing) in out


def test_store_that_is_not_a_database(tmp_path):
    db = tmp_path / "garbage.db"
    db.write_text("this is not sqlite\n" * 10, encoding="utf-8")
    out = assert_clean_failure(invoke("runs", "--db", db), 1)
    assert str(db) in out


@pytest.mark.parametrize("value", ["", ","])
def test_empty_strategies_is_a_usage_error(tmp_path, value):
    result = invoke("simulate", f"--strategies={value}", "--sizes", "8", "--repeat", "1", "--json",
                    "--db", tmp_path / "r.db")
    assert_clean_failure(result, 2)


@pytest.mark.parametrize("args", [("--strategies", "random,random", "--sizes", "8"),
                                  ("--strategies", "random", "--sizes", "8,8")])
def test_duplicate_strategies_or_sizes(tmp_path, args):
    result = invoke("simulate", *args, "--repeat", "1", "--json", "--db", tmp_path / "r.db")
    assert result.exit_code == 0, result.output   # duplicates are merged
    doc = json.loads(result.stdout)
    keys = [(r["strategy"], r["size"]) for r in doc["results"]]
    assert len(keys) == len(set(keys))
    assert all(r["repeat"] == 1 for r in doc["results"])


# --- runs and report --------------------------------------------------------------------------


def test_runs_json_newest_first(tmp_path):
    db = tmp_path / "r.db"
    run_json("simulate", "--sizes", "8", "--repeat", "1", "--strategies", "random", "--json", "--db", db)
    run_json("simulate", "--sizes", "8", "--repeat", "1", "--strategies", "model,reselect", "--json", "--db", db)
    rows = run_json("runs", "--json", "--db", db)
    ids = [r["id"] for r in rows]
    assert len(ids) == 3
    assert ids == sorted(ids, reverse=True)
    assert [r["strategy"] for r in rows][-1] == "random"  # the oldest run is last
    exps = [r["experiment_id"] for r in rows]
    assert exps == sorted(exps, reverse=True)
    assert [r["id"] for r in run_json("runs", "--json", "--limit", "2", "--db", db)] == ids[:2]


def test_runs_on_empty_store(tmp_path):
    db = tmp_path / "r.db"
    assert run_json("runs", "--json", "--db", db) == []
    result = invoke("runs", "--db", db)
    assert result.exit_code == 0
    assert "no runs" in result.stdout


def test_runs_table(experiment):
    db, _ = experiment
    result = invoke("runs", "--db", db)
    assert result.exit_code == 0, result.output
    for name in STRATEGIES:
        assert name in result.stdout


def test_report_json(experiment):
    db, doc = experiment
    cell = next(r for r in doc["results"] if r["strategy"] == "reselect" and r["size"] == 32)
    run_id = cell["run_ids"][0]
    rep = run_json("report", run_id, "--json", "--db", db)
    assert {"run", "per_site", "decisions"} <= set(rep)
    assert rep["run"]["id"] == run_id
    assert rep["run"]["strategy"] == "reselect"
    assert rep["run"]["size"] == 32
    assert isinstance(rep["run"]["per_site"], dict)
    assert isinstance(rep["run"]["audit"], dict)
    assert sum(row["tasks"] for row in rep["per_site"]) == 32
    assert {row["site"] for row in rep["per_site"]} <= EMBEDDED_SITES | {None}
    assert isinstance(rep["decisions"], dict)
    stored = sqlite_utils.Database(db)["decisions"].count_where("run_id = ?", [run_id])
    assert sum(rep["decisions"].values()) == stored


def test_report_decision_log(experiment):
    db, doc = experiment
    cell = next(r for r in doc["results"] if r["strategy"] == "reselect" and r["size"] == 32)
    run_id = cell["run_ids"][0]
    rep = run_json("report", run_id, "--json", "--decisions", "3", "--db", db)
    assert len(rep["decision_log"]) <= 3
    assert all(d["kind"] != "assign" for d in rep["decision_log"])
    text = invoke("report", run_id, "--decisions", "3", "--db", db)
    assert text.exit_code == 0, text.output
    assert f"run {run_id}" in text.stdout
    assert "TTC_wkd" in text.stdout


def test_report_missing_run(tmp_path):
    out = assert_clean_failure(invoke("report", "99999", "--db", tmp_path / "r.db"), 1)
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert "99999" in lines[0]


def test_report_missing_run_json(experiment):
    """--json: the error is a JSON object on stdout, naming the run and what to type next."""
    db, _ = experiment
    result = invoke("report", "99999", "--json", "--db", db)
    assert_clean_failure(result, 1)
    doc = json.loads(result.stdout)
    assert set(doc) == {"error", "hint"} and "99999" in doc["error"] and "resel runs" in doc["hint"]


# --- sites ------------------------------------------------------------------------------------


def test_sites_show_json():
    doc = run_json("sites", "show", "--json")
    rows = doc["sites"]
    assert {r["name"] for r in rows} == EMBEDDED_SITES
    assert len(rows) == 4
    preds = {r["name"]: r["tx_pred"] for r in rows}
    assert all(isinstance(v, (int, float)) and v > 0 for v in preds.values())
    assert min(preds, key=preds.get) == "supermic"
    assert doc["clock"] == "base"


def test_sites_show_table_and_avg_clock():
    result = invoke("sites", "show", "--clock", "avg")
    assert result.exit_code == 0, result.output
    for name in EMBEDDED_SITES:
        assert name in result.stdout
    assert run_json("sites", "show", "--clock", "avg", "--json")["clock"] == "avg"


def test_sites_show_says_a_table_bags_instructions_are_the_mean(tmp_path):
    """A task table's T̂x column is the mean task's: the title and --json say so, with the spread."""
    bag = tmp_path / "bag.toml"
    bag.write_text('[bag]\nname = "t"\ncommand = "sim {task}"\n[bag.profile]\ninstructions = 1e10\n'
                   'per_size = 1e10\n[[bag.tasks]]\nname = "a"\nsize = 1\n[[bag.tasks]]\nname = "b"\nsize = 3\n')
    doc = run_json("sites", "show", "--bag", str(bag), "--json")
    # I(n) = 1e10 + 1e10 n: 2e10 and 4e10, mean 3e10
    assert doc["instructions"] == pytest.approx(3e10)
    assert doc["instructions_of"] == {"kind": "mean of the task table", "tasks": 2, "min": 2e10, "max": 4e10}
    result = invoke("sites", "show", "--bag", str(bag))
    assert result.exit_code == 0 and "the mean of 2 tasks, 2e+10–4e+10 each" in result.stdout
    assert run_json("sites", "show", "--json")["instructions_of"] == {"kind": "every task"}


def test_sites_show_custom_file(tmp_path):
    sites = tmp_path / "two.toml"
    sites.write_text(TWO_SITES, encoding="utf-8")
    doc = run_json("sites", "show", "--sites", sites, "--json")
    preds = {r["name"]: r["tx_pred"] for r in doc["sites"]}
    assert set(preds) == {"alpha", "beta"}
    assert preds["beta"] < preds["alpha"]  # same kappa, higher clock


def test_sites_defaults_round_trips(tmp_path):
    result = invoke("sites", "defaults")
    assert result.exit_code == 0, result.output
    path = tmp_path / "my-sites.toml"
    path.write_text(result.stdout, encoding="utf-8")
    sites = load_sites(path)
    assert {s.name for s in sites} == EMBEDDED_SITES
    assert [s.name for s in sites] == [s.name for s in resel.default_sites()]


# --- version and help -------------------------------------------------------------------------


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert resel.__version__ in result.stdout


def _command_paths(group=cli, prefix=()):
    yield prefix
    if isinstance(group, click.Group):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):   # the lazy groups' commands too
            yield from _command_paths(group.get_command(ctx, name), prefix + (name,))


@pytest.mark.parametrize("path", list(_command_paths()), ids=lambda p: " ".join(p) or "resel")
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_everywhere(path, flag):
    result = invoke(*path, flag)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout
    assert "Traceback" not in result.output


def test_every_command_reachable():
    paths = {" ".join(p) for p in _command_paths()}
    assert {"simulate", "runs", "report", "sites", "sites show", "sites defaults"} <= paths
