"""The event core: a virtual clock and one heap of ``(time, priority, seq, callback, payload)``
(the callback stored by index, so that the heap holds only numbers and payloads).

Modelled on simpy's ``Environment`` (``core.py``: ``schedule``, ``step``, ``run(until)``,
``peek``), without its process and event objects: an event here is a callback with one
payload, which is all the batch queues and the bag simulator need, and several times cheaper
per event. ``seq`` is a counter, so events of equal time and priority run in the order they
were scheduled and the heap never compares callbacks or payloads: runs are deterministic.

**Priorities order what happens at one instant.** Every simulation in resel uses the same
ordering (:data:`TASK_END` … :data:`STARTED`): whatever frees cores first, then new work, then
*one* scheduling pass per batch queue, then the notifications of what that pass started. A
batch queue asks for its pass with :meth:`Environment.schedule` at ``(now, SCHEDULE)`` once
per instant, so jobs ending together are all seen before the scheduler decides anything —
the textbook reading of "the scheduler runs when the state changes".

:meth:`Environment.run` can be called again with a later ``until``: a simulation is resumable
(the wait-bound evaluation and the bag simulator step through time this way).
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator

#: a task of resel's bag ends (the bag simulator): its pilot slot is free again
TASK_END = 0
#: a job ends in a batch queue: its cores are free again
JOB_END = 1
#: a pilot ends (walltime) or is withdrawn by the simulator
PILOT_END = 2
#: a re-selection window closes (the engine's timer)
TIMER = 3
#: a job arrives at a batch queue (a trace's next job)
ARRIVE = 4
#: one scheduling pass of a batch queue (after every end and arrival of the instant)
SCHEDULE = 5
#: what a pass started is reported (a pilot's start to the engine)
STARTED = 6
#: the grid's meta-scheduler reallocates waiting jobs (after every queue's pass)
REALLOCATE = 7

Callback = Callable[[float, Any], None]
_push = heapq.heappush


class EmptySchedule(Exception):
    """:meth:`Environment.step` was called with no event left."""


class Environment:
    """A virtual clock and its event heap.

    ``now`` starts at ``initial`` (``-inf`` by default: simulated time may start below zero,
    e.g. a trace's warm-up before a bag arrives at 0).
    """

    __slots__ = ("now", "_heap", "_seq", "_stopped", "_callbacks", "_index")

    def __init__(self, initial: float = -math.inf):
        self.now = initial
        self._stopped = False
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = itertools.count()
        # callbacks are kept here and the heap holds their index: a heap entry of numbers (and
        # a payload of numbers) is not tracked by the garbage collector, whose full passes over
        # a large heap of bound methods cost more than the events themselves
        self._callbacks: list[Callback] = []
        self._index: dict[Callback, int] = {}

    def schedule(self, time: float, priority: int, callback: Callback, payload: Any = None) -> None:
        """Call ``callback(time, payload)`` when the clock reaches ``time`` (never in the past)."""
        if time < self.now:
            raise ValueError(f"cannot schedule an event at {time} before now ({self.now})")
        index = self._index.get(callback)
        if index is None:
            index = self._index[callback] = len(self._callbacks)
            self._callbacks.append(callback)
        _push(self._heap, (time, priority, next(self._seq), index, payload))

    def idle_after(self, time: float, priority: int) -> bool:
        """True if no event is scheduled at or before ``(time, priority)``: what a callback
        running at ``time`` would schedule there would run next, so it may run it at once."""
        heap = self._heap
        return not heap or heap[0][0] > time or (heap[0][0] == time and heap[0][1] > priority)

    def peek(self) -> float:
        """The time of the next event (``inf`` if there is none)."""
        return self._heap[0][0] if self._heap else math.inf

    def peek_priority(self) -> tuple[float, int]:
        """(time, priority) of the next event (``(inf, 0)`` if there is none)."""
        return (self._heap[0][0], self._heap[0][1]) if self._heap else (math.inf, 0)

    def step(self) -> None:
        """Process the next event."""
        try:
            time, _, _, index, payload = heapq.heappop(self._heap)
        except IndexError:
            raise EmptySchedule() from None
        self.now = time
        self._callbacks[index](time, payload)

    def run(self, until: float = math.inf) -> None:
        """Process every event at or before ``until``; the clock then reads ``until`` (if finite).

        Can be called again with a later ``until`` to go on. A callback may :meth:`stop` the
        run after its event (the bag simulator does when the bag is done).
        """
        heap, pop, callbacks = self._heap, heapq.heappop, self._callbacks
        self._stopped = False
        while heap and heap[0][0] <= until:
            time, _, _, index, payload = pop(heap)
            self.now = time
            callbacks[index](time, payload)
            if self._stopped:
                return
        if until != math.inf and until > self.now:
            self.now = until

    def stop(self) -> None:
        """End the current :meth:`run` after the event being processed."""
        self._stopped = True

    def __len__(self) -> int:
        return len(self._heap)

    def pending(self) -> list[tuple[float, int, Any]]:
        """The scheduled events as (time, priority, payload), in the order they will run."""
        return [(t, p, x) for t, p, _, _, x in sorted(self._heap)]

    def clear(self) -> None:
        """Drop every scheduled event (the clock stays where it is)."""
        self._heap.clear()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a simulation or a trace replay runs.

    Why: a run allocates records by the million (tasks, attempts, pilots, heap entries, a
    replay's tuples and queued jobs) and almost no cycles (a few hundred objects in a
    200,000-task run); the collector's passes over them cost about 10 % of a 1,000,000-task
    run and ~2 % of a replay (issue 15). Reference counting still frees everything else at
    once, and the collector runs again — as it was — when the block ends. No decision
    depends on it. (It is the whole process's collector: another thread's garbage waits too.)
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
