"""Polling the live sites on their threads: which site's scheduler and which pilots' files are
due (each on its own worker, :mod:`resel.live.sites`, on its own schedule), a poll's answer
settled by a read of the files of the pilots it moves on, and jobs run on every site at once
with a time limit (checks, reads, cleanup). Decided on the coordinator's thread; the
scheduler's commands and the file reads run on the sites'."""

from __future__ import annotations

import logging
import queue
import time
from typing import Any, Callable

from resel.backends.pilotsite import PilotFiles
from resel.events import Event
from resel.live import notes as live_notes
from resel.live.errors import describe
from resel.live.pilot_views import PilotView
from resel.live.sites import Report, SiteWorker
from resel.states import PilotState


log = logging.getLogger("resel.live")


class Polling:
    """What is being polled and read on each site, and when each is due next."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord
        self.polling: set[str] = set()                 # a scheduler poll (and its settling read) under way
        self.reading: set[str] = set()                 # a read of the running pilots' files under way
        self.next_poll: dict[str, float] = {}
        self.next_read: dict[str, float] = {}

    def on_sites(self, kind: str, jobs: dict[str, Callable[[], Any]], timeout: float,
                 workers: dict[str, SiteWorker] | None = None) -> dict[str, Report]:
        """Run one job per site on the sites' workers (the scheduler's, unless ``workers``) and
        wait for them all, at most ``timeout`` seconds; a site that has not answered by then is
        absent from the answer."""
        for name, job in jobs.items():
            (workers or self.coord.workers)[name].submit(kind, None, job)
        got: dict[str, Report] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(jobs):
            try:
                report = self.coord.reports.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if report.kind == kind and report.site in jobs and report.site not in got:
                got[report.site] = report
            else:
                self.coord.held.append(report)       # a poll or an action: handled by the loop
        return got

    def start(self, t: float) -> None:
        """Every site whose last poll is over and whose next is due is polled: its scheduler on
        one worker, its running pilots' files on the other, each on its own schedule (a
        scheduler that hangs does not stop the files from being read every poll period)."""
        by_site: dict[str, list[PilotView]] = {}
        for view in self.coord.pilots.values():
            if not view.state.final and view.job_id:
                by_site.setdefault(view.site, []).append(view)
        for view in self.coord.takebacks.watched_views():   # withdrawn, until an attempt's end is read
            if view.state.final:
                by_site.setdefault(view.site, []).append(view)
        for gone in (set(self.next_poll) | set(self.next_read)) - set(by_site):   # no pilot left: not due
            self.next_poll.pop(gone, None)
            self.next_read.pop(gone, None)
        for name, views in by_site.items():
            if name not in self.polling and self.next_poll.get(name, 0.0) <= t:
                self.polling.add(name)
                self.next_poll[name] = t + self.coord.options.poll
                ids = [v.job_id for v in views]
                self.coord.workers[name].submit("poll", views, lambda n=name, i=ids: self.coord.site(n).pilot_jobs(i))
            # a pending pilot's files are read while its scheduler does not answer, if it never
            # ran (it may have started meanwhile); otherwise — and for one back in the queue,
            # whose old agent may still be finishing attempts that the engine has taken for
            # lost — the scheduler's answer says when to look, and the read at the end of the
            # bag takes what is left; a withdrawn pilot whose agent may still run a task given
            # back is read every poll until that task's end is read (resel/live/takeback.py)
            quiet = self.coord.health.views[name].failing_since is not None
            readable = [v for v in views if v.state is PilotState.ACTIVE
                        or (v.state.final and self.coord.takebacks.watched(v.pilot))
                        or (quiet and v.agent_started is None and v.incarnation is None)]
            if not readable:
                self.next_read.pop(name, None)       # nothing to read: not due (the loop sleeps)
            elif name not in self.reading and self.next_read.get(name, 0.0) <= t:
                self.reading.add(name)
                self.next_read[name] = t + self.coord.options.poll
                self.coord.exchange[name].submit("read", readable, lambda n=name, v=readable: self.read(n, v))

    def polled(self, report: Report, t: float) -> list[Event]:
        """The scheduler's answer about a site's pilots. A pilot whose state it changes
        (started, ended, back in the queue) has its files read first, on the site's file worker
        after any read already under way there, so that what its agent wrote counts before the
        change; the poll is over when that read is."""
        name, view = report.site, self.coord.health.views[report.site]
        if report.error is not None:
            # the scheduler (or the whole site) did not answer: nothing is concluded from
            # silence; the running pilots' files are read meanwhile on the other worker
            self.polling.discard(name)
            why = describe(report.error)
            return self.coord.health.not_answering(name, t, why, f"no answer: {why}")
        if view.files_failing_since is None:
            if view.failing_since is not None:
                log.warning("site %s answers again after %.0f s", name, t - view.failing_since)
                live_notes.drop(self.coord.db, self.coord.run_id, name, "unreachable")
            view.error, view.failing_since = None, None
        view.last_poll = t
        views, jobs = report.tag, report.result
        changing = [v for v in views if self.coord.findings.changes(v, jobs)]
        if not changing:
            self.polling.discard(name)
            return self.coord.findings.site_events(t, (views, jobs, {}))
        self.coord.exchange[name].submit("settle", (views, jobs), lambda: self.read(name, changing, whole=True))
        return []

    def read(self, name: str, views: list[PilotView], heartbeat: bool = True, whole: bool = False
             ) -> dict[int, PilotFiles]:
        """Runs on the site's file worker: what these pilots' agents wrote since the last read.
        ``whole``: a read that must miss nothing the folders hold (a pilot whose state changed,
        the last read, a resume's catch-up), which lists a pool's pilot even where its wave
        cursor would do. Every pilot of the site in one exchange (PilotSite.collect_many), all
        or nothing."""
        ps = self.coord.site(name)
        return ps.collect_many(self.coord.run_key, [(v.pilot, v.seen, v.cursor) for v in views],
                               heartbeat=heartbeat, whole=whole)

    def each_site(self, kind: str, job: Callable[[str], Any], timeout: float,
                  names: list[str] | None = None) -> dict[str, Report]:
        names = [s.name for s in self.coord.sites] if names is None else names
        return self.on_sites(kind, {n: (lambda n=n: job(n)) for n in names}, timeout)

    def read_pilots(self, kind: str, by_site: dict[str, list[PilotView]], wait: float, heartbeat: bool = False
                    ) -> list[tuple[PilotView, PilotFiles]]:
        """These pilots' new records, read on their sites' file workers (after any read already
        under way there), bad records noted; a site that does not answer within ``wait``
        seconds is logged and left out. Every such read is whole (:meth:`read`): the last
        read, the ending's collection and a resume's catch-up must miss nothing."""
        answers = self.on_sites(kind, {name: (lambda name=name: self.read(name, by_site[name], heartbeat, whole=True))
                                       for name in by_site}, wait, self.coord.exchange)
        out = []
        for name in by_site:
            report = answers.get(name)
            if report is None or report.error is not None:
                log.warning("run %s: could not read what the agents on %s wrote: %s", self.coord.run_id, name,
                            "no answer" if report is None else describe(report.error))
                continue
            for pilot, found in sorted(report.result.items()):
                for path, why in found.bad:
                    self.coord.health.bad_record(name, path, why, self.coord.now())
                out.append((self.coord.pilots[pilot], found))
        return out
