"""Waiting in tests on what is meant, with a deadline (issue 27 item 5).

A test that needs something to have happened — a file to appear, a process to start, a job to
reach a state, a port to answer — waits for exactly that with :func:`wait_until`: it returns
as soon as the condition holds (no fixed sleep to guess on a busy machine) and, at the
deadline, fails naming what it waited for. :func:`poll` is the same loop for a caller that
asserts on the last value itself, or for whom the deadline is no failure.

The only sleeps left in tests/ outside this module are the thing a test is about (time that
must pass for a timer or a walltime to fire, or "nothing else happens within N s"); each says
so in a comment.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T], timeout: float, every: float = 0.05) -> T:
    """``check()``'s first truthy value, or its last value once ``timeout`` s have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str = "the condition",
               every: float = 0.05) -> T:
    """``predicate()``'s first truthy value; an AssertionError naming ``what`` if it is still
    falsy after ``timeout`` s (the predicate is asked once more at the deadline)."""
    value = poll(predicate, timeout, every)
    if not value:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r})")
    return value
