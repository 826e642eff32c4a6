"""How a live run ends: done (its pilots' batch jobs cancelled, the last read of what their
agents wrote) or cancelled (``resel cancel``: the pilots told to stop, their records
collected), then each task's T_q, T_x and TTC from the agents' clocks and the run's summary."""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from resel.backends.pilotsite import job_phase
from resel.engine import Engine
from resel.events import BagCancelled, Event
from resel.json_safe import clean as json_clean
from resel.live.errors import describe
from resel.live.pilot_views import PilotView
from resel.metrics import task_times, workload_metrics
from resel.states import AttemptOutcome, PilotState
from resel.store import to_json


class Ending:
    """The end of the run: cleanup, the last read, cancelling, the results."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord

    def cleanup(self, wait: float = 30.0, every_cache: bool = False) -> list[str]:
        """Cancel every batch job of this run still listed anywhere; returns what is left.

        Each site is asked on its own thread; a site that does not answer within ``wait``
        seconds is reported as left, it does not hold up the others. The run's input cache goes
        from each site this coordinator staged files on — from every site with ``every_cache``
        (``resel cancel``: a coordinator killed mid-upload left a half-sent file that this one
        never staged).
        """
        names = [s.name for s in self.coord.sites
                 if not (s.name in self.coord.engine.lost_sites and self.coord.health.views[s.name].error)]

        if every_cache and self.coord.manifest is not None:
            for name in names:
                self.coord.task_data.site_data(name)        # on this thread: it reads the store
        caches = {n: d for n, d in self.coord.task_data.by_site.items() if not self.coord.options.keep_remote}

        def clean(name: str) -> list[str]:
            ps = self.coord.site(name)
            deadline = time.monotonic() + wait
            while True:
                jobs = ps.run_jobs(self.coord.run_key)
                live = [j for j, i in jobs.items() if job_phase(i.state) in ("running", "pending", "unknown")]
                if not live:
                    if name in caches:     # no pilot reads the run's inputs any more
                        ps.transport.remove_tree(caches[name].cache_dir)
                    return []
                ps.scheduler.cancel(live)
                if time.monotonic() > deadline:
                    return [f"{name}:{j}" for j in live]
                time.sleep(1.0)

        answers = self.coord.polls.each_site("cleanup", clean, wait + 10.0, names)
        left: list[str] = []
        for name in names:
            report = answers.get(name)
            if report is None:
                left.append(f"{name}: no answer within {wait + 10.0:g} s")
            elif report.error is not None:
                left.append(f"{name}: {describe(report.error)}")
            else:
                left += report.result
        return left

    def last_read(self, wait: float = 30.0) -> None:
        """The bag is done and its pilots are stopped: what their agents wrote since the last
        read — an attempt that ended as the bag did, a moved task's duplicate, the attempts of a
        pilot seen back in the queue while its agent still ran — goes into the store's attempts,
        so the store holds every result the agents wrote. No event: the engine is done. A site
        that does not answer within ``wait`` seconds is left (logged)."""
        by_site: dict[str, list[PilotView]] = {}
        for v in self.coord.pilots.values():
            if v.job_id and not (v.site in self.coord.engine.lost_sites and self.coord.health.views[v.site].error):
                by_site.setdefault(v.site, []).append(v)
        t = self.coord.now()
        for v, found in self.coord.polls.read_pilots("last-read", by_site, wait):
            self.coord.findings.file_events(t, v, found)                         # the rows; the events are moot
        self.unread_reports(t)
        # an agent stopped with its pilot writes its running attempts' results (``lost``) as it
        # exits, which may be after the read above: read again, briefly, while an attempt of the
        # run has no outcome yet (an agent killed outright never writes one: its row stays open)
        deadline = time.monotonic() + min(wait, 10.0)
        while self.open_attempts() and time.monotonic() < deadline:
            time.sleep(0.5)
            for v, found in self.coord.polls.read_pilots("last-read", by_site, wait):
                self.coord.findings.file_events(self.coord.now(), v, found)
        self.give_up_torn(by_site)

    def give_up_torn(self, by_site: dict[str, list[PilotView]]) -> None:
        """No read comes after this one: a pool's wave still held half written
        (backends/waves.py) is a bad record now, counted and shown, not dropped unreported."""
        t = self.coord.now()
        for views in by_site.values():
            for v in views:
                self.coord.findings.torn_at_end(t, v)

    def unread_reports(self, t: float) -> None:
        """The reads that ended while the bag did, their reports still queued: their records
        into the store's rows. A read moves its pilots' wave cursors past what it found, so a
        later read does not find those records again — left in the queue, an attempt they end
        kept no outcome (a moved task's cancelled first attempt, read as the bag's last task
        ended: the full suite, 2026-11-29). ``read_pilots`` above ran after every read already
        under way, so all of them are in the queue now. The engine is done: their events are
        moot; the other reports stay held, as before."""
        keep = []
        for report in self.coord.take_reports():
            if report.kind in ("read", "settle") and report.error is None:
                self.coord.on_report(report, t)
            else:
                keep.append(report)
        self.coord.held.extend(keep)

    def open_attempts(self) -> int:
        """How many of the run's attempts the store holds without an outcome."""
        return next(iter(self.coord.db.query(
            "select count(*) as n from attempts where run_id = ? and outcome is null", [self.coord.run_id])))["n"]

    def cancel_everything(self, wait: float = 30.0) -> list[str]:
        """Stop every pilot and task of the run (``resel cancel``); returns what could not be.

        The pilots are told to stop (a ``stop`` file, then the scheduler's cancel), the agents
        get up to ``wait`` seconds to write what their attempts came to, and those records are
        read: the store then agrees with the agents' files (an attempt that finished before
        the stop is done). The bag is then recorded as cancelled, so ``resel status`` shows no
        pilot and no task running.
        """
        if not self.coord.engine.started:   # stopped while its sites were first checked: no pilot was recorded,
            return self._cancel_unstarted()  # so none was submitted (record, then act)
        live = [v for v in self.coord.pilots.values() if not v.state.final and v.job_id]
        by_site: dict[str, list[PilotView]] = {}
        for v in self.coord.pilots.values():
            if v.job_id:
                by_site.setdefault(v.site, []).append(v)

        def stop_and_wait(name: str) -> None:
            ps = self.coord.site(name)
            mine = [v for v in live if v.site == name]
            for v in mine:
                ps.stop_pilot(self.coord.run_key, v.pilot, v.job_id)
            deadline = time.monotonic() + wait
            while mine and time.monotonic() < deadline:
                jobs = ps.pilot_jobs([v.job_id for v in mine])
                mine = [v for v in mine if v.job_id in jobs and job_phase(jobs[v.job_id].state) != "final"
                        and not ps.transport.exists(f"{ps.pilot_dir(self.coord.run_key, v.pilot)}/exit.json")]
                if mine:
                    time.sleep(0.5)

        self.coord.polls.each_site("drain", stop_and_wait, wait + 30.0, list(by_site))
        # the records are read on the file workers, after any read already under way there,
        # whose findings come first (whatever the scheduler did with the stop)
        collected = self.coord.polls.read_pilots("collect", by_site, 30.0)
        t = self.coord.now()
        events: list[Event] = []
        for report in self.coord.take_reports():
            if report.kind in ("read", "settle"):
                events.extend(self.coord.on_report(report, t))
        for v, found in collected:
            events.extend(self.coord.findings.file_events(t, v, found))
        for v in live:
            v.state = PilotState.CANCELLED
            self.coord.pilot_row(v, ended=t, reason="run cancelled")
        self.give_up_torn(by_site)
        self.coord.feed(events + [BagCancelled(time=t)], execute=False)
        self.coord.cancelled = True
        left = self.cleanup(every_cache=True)
        self.write_results("cancelled")
        self.coord.lease(force=True, state="released")
        return left

    def _cancel_unstarted(self) -> list[str]:
        """Cancel a run whose bag's submission was never recorded: the engine has nothing to
        stop (and refuses any event before that one); every site is still asked that no job of
        the run is left, and the run is recorded as cancelled."""
        self.coord.cancelled = True
        left = self.cleanup(every_cache=True)
        self.coord.db["runs"].update(self.coord.run_id, {"status": "cancelled", "steps": self.coord.seq})
        self.coord.lease(force=True, state="released")
        return left

    def write_results(self, status: str) -> None:
        """Per-task T_q/T_x/TTC (from the agents' clocks where known) and the run's summary."""
        tasks = measured_tasks(self.coord.engine, self.coord.db, self.coord.run_id, self.coord.t0)
        names = [s.name for s in self.coord.sites]
        m = workload_metrics(tasks, names, self.coord.bag.task_cores or self.coord.bag.cores_per_task)
        with self.coord.db.atomic():
            self.coord.db["tasks"].delete_where("run_id = ?", [self.coord.run_id])
            self.coord.db["tasks"].insert_all(({"run_id": self.coord.run_id, **json_clean(dataclasses.asdict(tt))}
                                               for tt in task_times(tasks, names)), batch_size=1000)
            self.coord.db["runs"].update(self.coord.run_id, {
                "status": status, "ttc_wkd": m.ttc_wkd, "tx_wkd": m.tx_wkd, "tq_wkd": m.tq_wkd, "done": m.done,
                "failed": m.failed, "reassigned": m.reassigned, "restarts": m.restarts,
                "wasted_core_s": m.wasted_core_s, "per_site": to_json(m.per_site), "steps": self.coord.seq})


@dataclass
class _MeasuredTask:
    id: int
    first_origin: int
    state: Any
    attempts: list


def measured_tasks(engine: Engine, db: Database, run_id: int, t0: float) -> list[_MeasuredTask]:
    """The engine's task records with each attempt's start/end replaced by the agent's clock."""
    stamps = {(r["task"], r["attempt"]): r for r in db.query(
        "select task, attempt, start, end, outcome from attempts where run_id = ?", [run_id])}
    out = []
    for task in engine.tasks:
        attempts = []
        for n, a in enumerate(task.attempts, start=1):
            row = stamps.get((task.id, n))
            measured = copy.copy(a)
            if row and row["start"] is not None:
                measured.start = row["start"] - t0
            if row and row["end"] is not None and a.end is not None:
                measured.end = row["end"] - t0
            elif row and row["end"] is not None and row["outcome"] in ("cancelled", "lost", "failed") \
                    and row["start"] is not None:
                # the engine never saw it end (taken back as unstarted, its pilot released under it)
                # but the agent ran it: its seconds are thrown away, and counted as such
                measured.end = row["end"] - t0
                measured.outcome = AttemptOutcome(row["outcome"])
            attempts.append(measured)
        out.append(_MeasuredTask(task.id, task.first_origin, task.state, attempts))
    return out
