"""The coordinator's loop runs with a short switch interval and what it built before frozen
out of the garbage collections; both are the process's, so both are put back after the loop,
whether it ends or raises (resel/live/main_thread.py)."""

from __future__ import annotations

import gc
import sys

import pytest

from resel.live.main_thread import SWITCH_INTERVAL, responsive_threads


class Built:
    """An object made before the loop, as the bag's tasks are."""


def test_the_loop_runs_with_the_short_interval_and_the_built_state_frozen():
    assert gc.get_freeze_count() == 0
    was = sys.getswitchinterval()
    before = Built()
    with responsive_threads():
        assert sys.getswitchinterval() == SWITCH_INTERVAL < was
        assert gc.get_freeze_count() > 0
        made_in_the_loop = [Built()]
        assert gc.is_tracked(made_in_the_loop)
    assert sys.getswitchinterval() == was
    assert gc.get_freeze_count() == 0
    assert isinstance(before, Built)


def test_both_are_put_back_when_the_loop_raises():
    was = sys.getswitchinterval()
    with pytest.raises(RuntimeError):
        with responsive_threads():
            raise RuntimeError("a turn failed")
    assert sys.getswitchinterval() == was
    assert gc.get_freeze_count() == 0


def test_a_cycle_made_and_dropped_in_the_loop_is_still_collected():
    """Only what existed before the loop is frozen: the loop's own garbage is collected as
    before, so a run of days does not keep its cycles."""
    with responsive_threads():
        a, b = Built(), Built()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() >= 2
