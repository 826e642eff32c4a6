"""A damaged run store is said to be damaged, never a traceback (issue 24's independent review).

The review's harness found five: `report --json` of a run whose `created` (or a task's `site`)
is a blob (bytes are not JSON), `report --html` of a live run whose stored sites are a list of
non-sites, and `fetch` of a live run whose stored sites, bag or outputs are not what resel
wrote (JSONDecodeError, KeyError, AttributeError, ValueError)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.json_safe import clean
from test_results_folder_private import _live_run

SIM_SITES = ('[[site]]\nname="a"\nkind="simulated"\ncores=8\nclock={base=2.0}\n'
             'pilot={mode="single", walltime=3600}\nwait=60\n')
BAG = '[bag]\nname="b"\ncommand="true"\ncount=2\n[bag.profile]\ninstructions=4e9\n'


def _damage(db, *sql):
    con = sqlite3.connect(db)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()


@pytest.fixture
def sim_store(tmp_path):
    (tmp_path / "s.toml").write_text(SIM_SITES)
    (tmp_path / "b.toml").write_text(BAG)
    db = tmp_path / "sim.db"
    r = CliRunner().invoke(cli, ["simulate", str(tmp_path / "b.toml"), "--sites", str(tmp_path / "s.toml"),
                                 "--sizes", "2", "--strategies", "model", "--repeat", "1", "--workers", "1",
                                 "--db", str(db)])
    assert r.exit_code == 0, r.output
    return db


@pytest.mark.parametrize("sql", ["update runs set created = x'00ff'", "update tasks set site = x'ff'"])
def test_report_json_of_a_blob_is_json(sim_store, sql):
    _damage(sim_store, sql)
    r = CliRunner().invoke(cli, ["report", "1", "--db", str(sim_store), "--json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    json.loads(r.stdout)


def test_clean_makes_bytes_text():
    assert clean({"a": b"x\xff"}) == {"a": "x\ufffd"}


def test_report_html_of_stored_sites_that_are_not_sites(tmp_path):
    db, run_id = _live_run(tmp_path, tmp_path / "res")
    _damage(db, "update runs set sites = '[{\"name\": 5}, 7, null]'")
    r = CliRunner().invoke(cli, ["report", str(run_id), "--db", str(db), "--html", str(tmp_path / "r.html")])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception


@pytest.mark.parametrize("sql, said", [
    ("update runs set sites = 'garbage'", "stored sites cannot be read"),
    ("update runs set sites = '[{\"name\": 5}]'", "stored sites cannot be read"),
    ("update runs set bag_spec = '{\"count\": -1}'", "stored bag cannot be read"),
    ("update runs set options = '[]'", "stored options cannot be read"),
    ("update attempts set outputs = '[1, \"x\"]'", "the store is damaged"),
    ("update attempts set outputs = json_array(json_object('name', 'out.txt', 'size', 'nan', 'sha256', 'x'))",
     "the store is damaged"),
])
def test_fetch_of_a_damaged_live_run_says_so(tmp_path, sql, said):
    db, run_id = _live_run(tmp_path, tmp_path / "res")
    _damage(db, sql)
    r = CliRunner().invoke(cli, ["fetch", str(run_id), "--db", str(db), "--json"])
    assert r.exit_code == 1, (r.exception, r.output)
    assert said in r.stdout
    assert not (tmp_path / "res" / str(run_id) / "task-0" / "out.txt").exists()
