"""A task with many outputs ends and brings them home (docs/data.md, protocol: `outputs`).

The coordinator accepts a result listing up to 100,000 outputs (pilotsite.MAX_OUTPUTS), but
read a results wave of at most 2 MiB: a task that wrote 25,000 small files matched by `f/*`
(about 100 bytes each to list) had its whole result skipped as "longer than 2,097,152 bytes",
and the attempt never ended — running, with no outcome, until its pilot's walltime (seen live
on tba with 30,000). Now the wave limit holds a result of that size, and the agent fails a
result it could not list with that reason instead of writing one the coordinator skips.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from live_helpers import cancel_leftovers, run_with_data, sites_toml


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_a_task_with_25000_outputs_is_delivered(tmp_path, testbed):
    n = 25_000
    command = f"mkdir f && cd f && seq -w 1 {n} | xargs touch && cd .. && echo ok > md.log"
    coord, run = run_with_data(tmp_path, f'[bag]\nname = "many"\ncommand = {json.dumps(command)}\ncount = 1\n'
                                         'outputs = ["md.log", "f/*"]\n[bag.profile]\ninstructions = 4e9\n',
                               "[[site]]" + sites_toml(testbed).split("[[site]]")[1], 240, strategy="model")   # tba
    db = coord.db
    assert (run["status"], run["done"], run["failed"]) == ("done", 1, 0)
    home = Path(run["results"]) / "task-0"
    assert len(list((home / "f").iterdir())) == n
    assert db.execute("select count(*) from task_outputs where run_id = ?", [coord.run_id]).fetchone()[0] == n + 1
