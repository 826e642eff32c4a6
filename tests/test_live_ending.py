"""The end of a live run on the testbed (tba local, tbb over SSH): the store keeps every record
the agents wrote, including those of a read whose report was still queued when the bag was done.

A read moves its pilots' wave cursors (agent protocol 6) past what it found, so no later read
finds those records again: the full suite of 2026-11-29 had a moved task's cancelled first
attempt, read on tbb as the bag's last task ended on tba, left with no outcome in the store
while the agent's results wave said ``cancelled`` (tests/test_learning_live.py's item 5).
"""

from __future__ import annotations

import pytest

from live_helpers import bag_toml, cancel_leftovers, sites_toml, start
from resel.live.sites import Report
from resel.backends.waves import WaveCursor


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_a_read_still_queued_when_the_bag_is_done_reaches_the_store(tmp_path, testbed):
    coord = start(tmp_path, sites_toml(testbed), bag_toml(4, "true"), strategy="model")
    coord.run(max_time=120)
    db = coord.db
    row = next(iter(db.query("select task, attempt, pilot, site, outcome, end from attempts "
                             "where run_id = ? and outcome = 'done' order by task limit 1", [coord.run_id])))
    # The race, made to happen: this attempt's result was found by a read whose report the
    # coordinator never took (the bag was done first). Its row has no outcome yet, the pilot's
    # cursor is past the wave, and the report with the records waits in the queue.
    db.execute("update attempts set outcome = null, end = null where run_id = ? and task = ? and attempt = ?",
               [coord.run_id, row["task"], row["attempt"]])
    db.conn.commit()
    view = coord.pilots[row["pilot"]]
    found = coord.site(row["site"]).collect(coord.run_key, view.pilot, set(), cursor=WaveCursor())
    assert any(r["task"] == row["task"] and r["outcome"] == "done" for r in found.results), found
    assert not coord.site(row["site"]).collect(coord.run_key, view.pilot, set(view.seen), cursor=view.cursor).results
    coord.reports.put(Report(site=row["site"], kind="read", tag=[view], result={view.pilot: found}))

    coord.ending.last_read(wait=1.0)
    after = next(iter(db.query("select outcome, end from attempts where run_id = ? and task = ? and attempt = ?",
                               [coord.run_id, row["task"], row["attempt"]])))
    assert (after["outcome"], after["end"]) == ("done", row["end"]), after
    coord.close()
