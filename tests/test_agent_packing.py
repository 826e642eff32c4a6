"""The pilot agent packs attempts of different widths into its slots (protocol 5, an inbox
file's ``slots``): a bag of tasks of several core counts, each pilot slot one core.

The case worked by hand (docs/configuration.md, "Bags of unequal tasks"): an 8-slot agent
handed, in this order, attempts taking 2, 1, 1, 4 and 2 slots. Taken in order while they fit,
2 + 1 + 1 + 4 = 8: the first four start and the last (2) waits. One 1-slot attempt ending
frees 1 — still too few; the second ending frees 2: the last starts then. Each attempt holds
its gate (a file this test creates), so the order of events is the test's, not the clock's.
"""

from __future__ import annotations

import json
import time

from agent_files import records
from test_agent import Pilot, pilot, wait_for, write_atomic  # noqa: F401 - the fixture

WIDTHS = [2, 1, 1, 4, 2]


def gated(p: Pilot, task: int, width: int, gates) -> str:
    """An inbox file whose attempt runs until ``gates / str(task)`` exists."""
    doc = {"task": task, "attempt": 0, "command": f'while [ ! -e "{gates}/{task}" ]; do sleep 0.05; done',
           "env": {}, "perf": False, "timeout": None, "slots": width}
    write_atomic(p.dir / "inbox" / f"t{task}-a0.json", json.dumps(doc))
    return f"t{task}-a0"


def started(p: Pilot) -> set[int]:
    return {rec["task"] for rec in records(p.dir / "started")}


def test_attempts_take_their_slots_and_a_narrow_one_waits_for_room(tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    p = Pilot(tmp_path, slots=8)
    (p.dir / "inbox").mkdir(parents=True, exist_ok=True)
    for task, width in enumerate(WIDTHS):   # all there before the agent looks: one claim pass
        gated(p, task, width, gates)
        time.sleep(0.02)                    # (mtimes apart: the order is theirs)
    try:
        p.start()
        wait_for(lambda: started(p) == {0, 1, 2, 3}, 10, "the first four")
        p.went_round()
        assert started(p) == {0, 1, 2, 3}   # 8 of 8 slots taken: task 4 (2 slots) waits
        assert p.read("heartbeat.json")["free"] == 0

        (gates / "1").touch()               # a 1-slot attempt ends: 1 free, task 4 needs 2
        p.result("t1-a0")
        p.went_round()
        assert started(p) == {0, 1, 2, 3} and p.read("heartbeat.json")["free"] == 1

        (gates / "2").touch()               # the other: 2 free, task 4 starts
        p.result("t2-a0")
        wait_for(lambda: 4 in started(p), 10, "task 4")
        p.went_round()
        assert p.read("heartbeat.json")["free"] == 0
        for task in (0, 3, 4):
            (gates / str(task)).touch()
        assert all(p.result(f"t{t}-a0")["outcome"] == "done" for t in range(5))
    finally:
        p.close()


def test_a_later_narrow_attempt_takes_room_a_wide_one_cannot(pilot, tmp_path):
    """A 4-slot agent running 3 slots' worth: a 2-slot file first in the inbox waits, a
    1-slot file behind it starts."""
    gates = tmp_path / "gates"
    gates.mkdir()
    p = pilot(slots=4)
    gated(p, 0, 3, gates)
    p.started("t0-a0")
    gated(p, 1, 2, gates)
    time.sleep(0.02)
    gated(p, 2, 1, gates)
    p.started("t2-a0")
    p.went_round()
    assert started(p) == {0, 2}
    for task in (0, 1, 2):
        (gates / str(task)).touch()
    assert p.result("t1-a0")["outcome"] == "done"


def test_more_slots_than_the_pilot_has_is_a_bad_task_file(pilot, tmp_path):
    p = pilot(slots=2)
    key = gated(p, 7, 3, tmp_path)
    r = p.result(key)
    assert (r["outcome"], r["reason"]) == ("failed", "bad task file: 'slots' 3 is more than this pilot's 2")
    bad = p.submit(8, "true")
    write_atomic(p.dir / "inbox" / "t9-a0.json", json.dumps(
        {"task": 9, "attempt": 0, "command": "true", "env": {}, "perf": False, "timeout": None, "slots": 0}))
    assert p.result(bad)["outcome"] == "done"   # (no slots: one, as before)
    assert p.result("t9-a0")["reason"] == "bad task file: 'slots' must be a positive integer, not 0"
