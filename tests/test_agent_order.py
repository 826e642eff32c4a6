"""The agent takes inbox files in the coordinator's order (protocol 7, an inbox file's
``order``), not in the order their modification times or names give.

The coordinator writes a turn's inbox files together — on threads locally, pipelined over SFTP
— so their modification times are out of order, or equal to the file system's clock tick and
then ordered by name (a CI run saw ``t2-a1`` start before ``t6-a1`` on a bag handed out largest
first: tests/test_unequal_live.py). Here every file gets the same modification time, set by
hand, and orders that run against the names: only ``order`` can say which goes first. A
one-slot agent runs them one at a time, so its start records give the order it took them in.
"""

from __future__ import annotations

import json
import os

from agent_files import records
from test_agent import Pilot, pilot, write_atomic  # noqa: F401 - the fixture


def inbox(p: Pilot, task: int, order: object = None, *, stamp_ns: int) -> None:
    doc = {"task": task, "attempt": 0, "command": "true", "env": {}, "perf": False, "timeout": None}
    if order is not None:
        doc["order"] = order
    path = p.dir / "inbox" / f"t{task}-a0.json"
    write_atomic(path, json.dumps(doc))
    os.utime(path, ns=(stamp_ns, stamp_ns))


def taken_order(p: Pilot) -> list[int]:
    return [rec["task"] for rec in sorted(records(p.dir / "started"), key=lambda r: r["time"])]


def test_files_of_one_instant_are_taken_in_their_order_not_their_names(tmp_path):
    p = Pilot(tmp_path, slots=1)
    stamp = 1_700_000_000 * 10**9
    # by name: t11 < t2 < t3 < t6 < t9; by order, the coordinator's: 6, 9, 2, 11, 3
    for task, order in ((2, 12), (3, 30), (6, 10), (9, 11), (11, 29)):
        inbox(p, task, order, stamp_ns=stamp)
    # an older coordinator's files (no order) come after, by mtime then name: 5 (older), then 1, 4
    inbox(p, 4, stamp_ns=stamp)
    inbox(p, 1, stamp_ns=stamp)
    inbox(p, 5, stamp_ns=stamp - 10**9)
    try:
        p.start()
        for key in ("t2-a0", "t3-a0", "t6-a0", "t9-a0", "t11-a0", "t1-a0", "t4-a0", "t5-a0"):
            assert p.result(key)["outcome"] == "done"
        assert taken_order(p) == [6, 9, 2, 11, 3, 5, 1, 4]
    finally:
        p.close()


def test_a_bad_order_fails_the_file_and_the_rest_still_run(pilot):
    p = pilot(slots=1)
    p.went_round()
    stamp = 1_700_000_000 * 10**9
    for task, order in ((1, -1), (2, "3"), (3, True), (4, 2.5), (5, 7)):
        inbox(p, task, order, stamp_ns=stamp)
    for task in (1, 2, 3, 4):
        got = p.result(f"t{task}-a0")
        assert got["outcome"] == "failed" and "'order' must be a non-negative integer" in got["reason"], got
    assert p.result("t5-a0")["outcome"] == "done"
