"""An attempt's inbox write as a job that a site's file worker batches with the writes queued
behind it (issue 29 §2).

At hundreds of tasks a second a turn of the coordinator hands a site dozens of attempts at
once. Written one after the other, each inbox file costs its own five SFTP round trips
(the folder's stat, open, write, close, rename) and as many wake-ups of the worker's thread;
taken together, their requests are in flight at once over the one SFTP session
(resel.backends.sftp_pipeline). Nothing else changes: each attempt still has its own inbox
file (the agent's protocol is the same), each is the same atomic write (so the batch is as
idempotent on resume), and each action gets its own report — a file that fails fails only
its action, a site that cannot be reached fails them all as transient, to be retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class InboxWrite:
    """One DispatchTask's site work: stage the task's inputs, then write its inbox file.

    Called alone it does exactly that; :class:`~resel.live.sites.SiteWorker` runs consecutive
    jobs with the same :attr:`batch_key` through :meth:`run_batch` instead.

    Args:
        site: the site (the batch key: one worker's jobs are one site's anyway).
        stage: sends the task's inputs to the site; returns what it sent (its report's result).
        inbox_file: the attempt's (path, bytes) on the site.
        write: writes many such files at once (resel.backends.pilotsite ``dispatch_many``).
    """

    def __init__(self, site: str, stage: Callable[[], list], inbox_file: Callable[[], tuple[str, bytes]],
                 write: Callable[[Sequence[tuple[str, bytes]]], list[Exception | None]]):
        self.batch_key = ("inbox", site)
        self.stage, self.inbox_file, self.write = stage, inbox_file, write

    def __call__(self) -> list:
        outcome, = self.run_batch([self])
        result, error = outcome
        if error is not None:
            raise error
        return result

    def run_batch(self, jobs: Sequence["InboxWrite"]) -> list[tuple[Any, BaseException | None]]:
        """Each job's (result, error), in order: its inputs staged one job after the other (a
        job whose staging fails is not written), then every file written in one batch."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        files: list[tuple[str, bytes]] = []
        writing: list[int] = []
        for job in jobs:
            try:
                sent = job.stage()
                files.append(job.inbox_file())
            except Exception as e:   # noqa: BLE001 - that action's own failure
                outcomes.append((None, e))
                continue
            writing.append(len(outcomes))
            outcomes.append((sent, None))
        if files:
            for index, error in zip(writing, self.write(files)):
                if error is not None:
                    outcomes[index] = (None, error)
        return outcomes
