"""The coordinator's main thread kept from holding up the sites' threads: a shorter thread
switch interval, and what it built before its loop frozen out of the garbage collections.

Why: the main thread runs the engine and the store, pure Python most of the time, while each
site's reads and scheduler calls run on threads of their own (:mod:`resel.live.sites`). Those
threads wait for the GIL twice over:

- **At each SFTP answer.** A read over SSH is a few round trips, and each answer wakes a
  thread (paramiko's, then the reader) that must take the GIL back from the busy main thread,
  which lets go only when its switch interval (5 ms by default) runs out. At 1 ms, a read of
  four pilots beside a busy main thread took 0.44–0.68 of its median time and 0.09–0.10 s at
  most instead of 0.20–0.37 s, in three runs, for a cost to the main thread within their noise
  (0.92–1.01 of its work; benchmarks/bench_read_beside_busy.py, docs/benchmarks.md).
- **During a full collection**, which walks every tracked object with the GIL held. Most of
  what it walks lives as long as the run: the imported modules, the bag's tasks, the sites, the
  engine's books replayed on a resume. :func:`gc.freeze` moves those to the permanent
  generation, which collections skip; what the loop makes later is collected as before. At
  100,000 tasks live, the full collections took 1.25–1.85 s in all instead of 3.9–4.1
  (benchmarks/bench_scale.py's ``gc`` figures). Frozen objects are still freed by reference
  counting when the run lets go of them; only a cycle among them would wait for
  :func:`gc.unfreeze` at the loop's end, and they are the run's own state, kept to the end
  anyway.

Both are the process's settings: they are put back when the loop ends."""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Iterator

#: the coordinator's thread switch interval (Python's default is 0.005 s)
SWITCH_INTERVAL = 0.001


@contextlib.contextmanager
def responsive_threads() -> Iterator[None]:
    """For the loop's duration: the shorter switch interval, and what exists now collected once
    and frozen; both undone after it."""
    was = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        sys.setswitchinterval(was)
