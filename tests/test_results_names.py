"""`resel results` names a table bag's tasks (docs/configuration.md, "Bags of unequal tasks").

A task of a table is known to its user by its row's name (``lysozyme-2``), while its outputs
come home to ``task-NN`` (its index) and the store keys it by index: the listing and its JSON
give the name beside the index, so a user finds a task's files without counting rows. A bag of
equal tasks has no names, and shows none.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from resel.cli import cli
from test_results_folder_private import _live_run

TABLE_BAG = ('[bag]\nname="t"\ncommand="true {args}"\noutputs=["out.txt"]\n'
             '[bag.profile]\ninstructions=1e9\n'
             '[[bag.tasks]]\nname="lysozyme-2"\nsize=0\n'
             '[[bag.tasks]]\nname="membrane [b]/1"\nsize=0\n')


def _results(db, run_id: int, *extra: str):
    return CliRunner().invoke(cli, ["results", str(run_id), "--db", str(db), *extra])


def test_results_give_each_task_of_a_table_its_row_s_name(tmp_path):
    db, run_id = _live_run(tmp_path, tmp_path / "res", TABLE_BAG)
    assert CliRunner().invoke(cli, ["fetch", str(run_id), "--db", str(db)]).exit_code == 0
    doc = json.loads(_results(db, run_id, "--json").stdout)
    assert [(o["task"], o["task_name"], o["name"]) for o in doc["outputs"]] == \
        [(0, "lysozyme-2", "out.txt"), (1, "membrane [b]/1", "out.txt")]
    text = _results(db, run_id).stdout
    assert "task name" in text and "lysozyme-2" in text
    assert "membrane [b]/1" in text                 # a name with markup's brackets, shown as written


def test_a_task_not_home_is_named_too_and_a_bag_of_equal_tasks_shows_no_names(tmp_path):
    db, run_id = _live_run(tmp_path, tmp_path / "res", TABLE_BAG)
    r = _results(db, run_id, "--json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert [(x["task"], x["task_name"]) for x in doc["not_home"]] == [(0, "lysozyme-2"), (1, "membrane [b]/1")]
    plain = tmp_path / "plain"
    plain.mkdir()
    db, run_id = _live_run(plain, plain / "res")
    assert CliRunner().invoke(cli, ["fetch", str(run_id), "--db", str(db)]).exit_code == 0
    doc = json.loads(_results(db, run_id, "--json").stdout)
    assert [o["task_name"] for o in doc["outputs"]] == [None, None]
    assert "task name" not in _results(db, run_id).stdout
