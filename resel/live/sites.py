"""Worker threads per live site: a slow or dead site never holds up another.

Everything the coordinator asks of a site runs on that site's own threads, in the order asked,
and reports back through one queue the coordinator's loop reads. Each site has two workers:
one for its scheduler's commands (pilots' states, submissions, cancels) and one for the file
exchange with its pilots' agents (reading what they started and finished, writing their inbox
and cancel files), so a scheduler that hangs (a stopped controller) never stops running pilots
from being fed. The coordinator's thread alone touches the engine and the store; a worker only
talks to its site. A site whose command hangs (a stopped controller, a stalled SSH connection)
keeps that worker busy, and the coordinator sees for how long (:attr:`SiteWorker.busy`) and
says so.

Jobs that say they can be run together (the same ``batch_key``: a turn's inbox writes,
resel.live.inbox_writes) and are queued one behind the other run as one batch, in their
order, each with its own report; a job of another kind behind them waits for the batch.

The threads are daemons: a command that never returns does not keep the process alive.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable


#: the most jobs run as one batch (a turn's inbox writes for one site: resel.live.inbox_writes)
MAX_BATCH = 256


@dataclass
class Report:
    """What one job on a site came to: its result, or the exception it raised."""

    site: str
    kind: str            # "poll", "act", "check", "drain", ...
    tag: Any             # the caller's: e.g. (seq, action) for an action
    result: Any = None
    error: BaseException | None = None
    seconds: float = 0.0


class SiteWorker:
    """Runs one site's jobs one after the other on a daemon thread.

    Args:
        site: the site's name (for reports and the thread's name).
        reports: where every finished job is put, as a :class:`Report`.
        clock: for :attr:`busy` (monotonic seconds).
        role: what the worker does for its site (in the thread's name): ``scheduler`` or ``files``.
    """

    def __init__(self, site: str, reports: "queue.Queue[Report]", clock: Callable[[], float] = time.monotonic,
                 role: str = "scheduler"):
        self.site = site
        self.reports = reports
        self.clock = clock
        self.role = role
        self._jobs: "queue.Queue[tuple[str, Any, Callable[[], Any]] | None]" = queue.Queue()
        self._current: tuple[str, float] | None = None
        self._queued = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"resel-site-{site}-{role}", daemon=True)
        self._thread.start()

    def submit(self, kind: str, tag: Any, job: Callable[[], Any]) -> None:
        """Queue a job; its :class:`Report` arrives on the reports queue when it is done."""
        with self._lock:
            self._queued += 1
        self._jobs.put((kind, tag, job))

    @property
    def busy(self) -> tuple[str, float] | None:
        """(kind, seconds) of the job running now, or None when idle."""
        current = self._current
        if current is None:
            return None
        return current[0], self.clock() - current[1]

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        return self._queued

    def stop(self) -> None:
        """No more jobs: the thread ends after the one it runs (or at once when idle)."""
        self._jobs.put(None)

    def _loop(self) -> None:
        held: list = []      # a job taken from the queue behind a batch: it runs next
        while True:
            item = held.pop() if held else self._jobs.get()
            if item is None:
                return
            items = [item]
            key = getattr(item[2], "batch_key", None)
            while key is not None and len(items) < MAX_BATCH:
                try:
                    following = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if following is None or getattr(following[2], "batch_key", None) != key:
                    held.append(following)
                    break
                items.append(following)
            self._run(items)

    def _run(self, items: list[tuple[str, Any, Callable[[], Any]]]) -> None:
        """Run one job, or a batch of jobs with one ``batch_key`` together (their
        ``run_batch``: each job's (result, error)); one report per job, in order."""
        began = self.clock()
        self._current = (items[0][0], began)
        reports = [Report(self.site, kind, tag) for kind, tag, _job in items]
        try:
            if len(items) == 1:
                reports[0].result = items[0][2]()
            else:
                for report, (result, error) in zip(reports, items[0][2].run_batch([job for _k, _t, job in items])):
                    report.result, report.error = result, error
        except BaseException as exc:   # noqa: BLE001 - handed to the coordinator as is
            for report in reports:
                report.result, report.error = None, exc
        finally:
            self._current = None
            for report in reports:
                report.seconds = self.clock() - began
            with self._lock:
                self._queued -= len(items)
        for report in reports:
            self.reports.put(report)
