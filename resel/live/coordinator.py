"""The live coordinator: the pure engine driven by real schedulers, crash-safe through SQLite.

One loop, as docs/architecture.md draws it: each site is polled on worker threads of its own
(:mod:`resel.live.sites`: a slow or dead site never holds up another; its scheduler's commands
and the file exchange with its agents on two, so a hanging scheduler never starves a running
pilot), what changed becomes engine events, **each event and the actions it produced are
recorded in the store before any of them is carried out**, then the actions run, each on its
site's threads. The engine is
deterministic given its seed and the events it saw, so a coordinator killed at any instant
resumes (:meth:`Coordinator.resume`) by replaying the recorded events into a fresh engine and
finishing the actions still marked undone; each action is idempotent or checked first (a
pilot is found again by its job name before it is submitted twice; an inbox file is written
atomically with the same content). A run killed before its bag was recorded is started afresh
by ``--resume``.

Faults in the middle of a run (docs/live.md): a job state resel does not know concludes
nothing; a running pilot back in the queue is :class:`~resel.events.PilotRequeued`; an agent
relaunched under the same job is told by its heartbeat, and what its predecessor left
unfinished comes back as :class:`~resel.events.TaskLost`; a record that breaks the agent's
protocol is logged, counted and skipped; a failure is retried only if it is transient
(:mod:`resel.live.errors`).

Times fed to the engine are seconds since the run started (``t0``) when the coordinator
handles the change; the agents' own start/end stamps go to the ``attempts`` table and give the
stored T_q, T_x and TTC of each task."""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import logging
import os
import queue
import secrets
import threading
import time
from typing import Any, Callable, Iterator

from sqlite_utils import Database

from resel import journal, store_rows
from resel.backends.pilotsite import PilotSite
from resel.domain import Bag, Site
from resel.engine import Engine
from resel.errors import ReselError
from resel.events import (
    Action, BagSubmitted, Decision, Event, SiteLost, SiteQuarantined, SiteReleased, TaskFetching, TaskOverdue, TimerFired,
    RateLearned, StrategyChosen,
)
from resel.json_safe import clean as json_clean
from resel.live import notes as live_notes
from resel.live.actions import Actions
from resel.live.ending import Ending
from resel.live.errors import describe
from resel.live.findings import Findings, starts_first
from resel.live.main_thread import responsive_threads
from resel.live.pilot_views import STORED_STATES, PilotView, SiteView, stored_view  # noqa: F401 - imported from here
from resel.live.polling import Polling
from resel.live.preflight import preflight
from resel.live.resume import replay, catch_up
from resel.live.run_data import RunData, data_model
from resel.live.site_health import SiteHealth
from resel.live.sites import Report, SiteWorker
from resel.live.stored import LiveOptions, load_live_run
from resel.live.summary import Summary
from resel.live.takeback import TakeBacks
from resel.selection import Strategy
from resel.store import to_json, utc_now
from resel.task_data import Manifest

log = logging.getLogger("resel.live")

#: actions that are only recorded (nothing to carry out): choices and quarantines
RECORD_ONLY = (Decision, SiteQuarantined, SiteReleased, RateLearned, StrategyChosen, TaskOverdue)


class StoppedWhileStarting(KeyboardInterrupt):
    """Ctrl-C while a new run, already stored as ``run_id``, first checked its
    sites: the caller says which run it left, as for a Ctrl-C later on."""

    def __init__(self, run_id: int) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class Coordinator:
    """Drives one live run. Build it with :meth:`start` or :meth:`resume`, then :meth:`run`.

    It records, then acts, and owns one object per concern beside it: :attr:`health`
    (:mod:`resel.live.site_health`), :attr:`findings` (:mod:`resel.live.findings`),
    :attr:`polls` (:mod:`resel.live.polling`), :attr:`task_data` (:mod:`resel.live.run_data`),
    :attr:`acts` (:mod:`resel.live.actions`), :attr:`ending` (:mod:`resel.live.ending`) and
    :attr:`takebacks` (:mod:`resel.live.takeback`);
    each holds its state and reaches the run's through the coordinator. Everything but the
    site jobs runs on the thread that calls :meth:`run` (or :meth:`step`)."""

    def __init__(self, db: Database, run_id: int, bag: Bag, sites: list[Site], options: LiveOptions,
                 run_key: str, t0: float, open_site: Callable[[Site], PilotSite], *,
                 clock: Callable[[], float] = time.time, manifest: Manifest | None = None,
                 results: str | None = None):
        self.db, self.run_id, self.bag, self.sites, self.options = db, run_id, bag, sites, options
        #: task data (docs/data.md): each task's inputs, the run's results folder, the output globs
        self.manifest = manifest
        self.results = results
        self.output_specs = [{"glob": o.pattern, "optional": o.optional}
                             for o in (bag.data.outputs if bag.data is not None else ())]
        self.run_key, self.t0, self.clock = run_key, t0, clock
        self.engine = Engine(bag, sites, options.strategy, **options.engine_options())
        self._open_site = open_site
        self.psites: dict[str, PilotSite] = {}
        self.pilots: dict[int, PilotView] = {}
        #: (at, task, attempt, site): re-selection windows (site "") and quarantine back-offs
        self.timers: list[tuple[float, int, int, str]] = []
        #: (event kind, task, attempt) already fed: what the agents wrote becomes an event once
        self.consumed: set[tuple[str, int, int]] = set()
        self.seq = 0
        self.finished = False
        self.cancelled = False
        self._lock = threading.Lock()
        self.reports: "queue.Queue[Report]" = queue.Queue()
        self.held: list[Report] = []                    # reports taken while waiting
        #: per site: a worker for the scheduler's commands, one for the file exchange with the
        #: agents (reading their records, writing inbox and cancel files), so that a scheduler
        #: call that hangs never holds up the pilots that run
        self.workers = {s.name: SiteWorker(s.name, self.reports) for s in sites}
        self.exchange = {s.name: SiteWorker(s.name, self.reports, role="files") for s in sites}
        self._last_lease = 0.0
        #: the recorded actions of the turn under way, carried out when it commits (:meth:`turn`)
        self._turn: list[tuple[int, Any]] | None = None
        #: answered actions whose done marks wait for a turn that writes anyway (:meth:`mark_soon`)
        self._marks_due: list[int] = []
        self._marks_since = 0.0
        #: the concerns it owns, each in a module of its own (docs/architecture.md)
        self.health = SiteHealth(self)          # each site's view and the notes about it
        self.findings = Findings(self)          # what a poll and the agents' files mean
        self.polls = Polling(self)              # what is polled and read, and when next
        self.task_data = RunData(self)          # task data: caches, deliveries, measured transfers
        self.acts = Actions(self)               # recorded actions carried out on the sites' threads
        self.ending = Ending(self)              # cleanup, the last read, cancelling, the results
        self.takebacks = TakeBacks(self)        # a withdrawn pilot's handed-ahead tasks, taken back first
        #: the counts `resel status` shows, stored in each transaction that records an event
        self.summary = Summary()

    @property
    def views(self) -> dict[str, SiteView]:
        """Each site's view (:class:`SiteView`), as the display shows it."""
        return self.health.views

    @classmethod
    def start(cls, db: Database, bag: Bag, sites: list[Site], options: LiveOptions,
              open_site: Callable[[Site], PilotSite], *, bag_file: str = "", sites_file: str = "",
              clock: Callable[[], float] = time.time, manifest: Manifest | None = None,
              results: str | None = None) -> "Coordinator":
        """Create the run in the store, check every site, and submit the bag to the engine.

        A crash between the run's row and its first event leaves a run that ``--resume``
        starts afresh (:meth:`resume`), so no window strands it. With task data, ``manifest``
        is the bag's checked inputs (stored with the run) and ``results`` the folder the run's
        outputs go to (the run's own folder is made in it: ``RESULTS/RUN``).
        """
        t0 = clock()
        options.data = data_model(bag, sites, manifest)
        with db.atomic():
            run_id = db["runs"].insert({
                "created": utc_now(), "mode": "live", "bag": bag.name,
                "strategy": Strategy.parse(options.strategy).name,
                "size": bag.count, "seed": options.seed, "clock": options.clock, "status": "running", "t0": t0,
                "options": to_json(options), "sites": to_json(sites), "bag_spec": to_json(bag),
                "bag_file": bag_file, "sites_file": sites_file,
            }).last_pk
            run_key = f"r{run_id}-{secrets.token_hex(3)}"
            run_results = None if results is None else os.path.join(results, str(run_id))
            db["runs"].update(run_id, {"run_key": run_key, "results": run_results})
            if manifest is not None:
                db["task_inputs"].insert_all(manifest.rows(run_id), batch_size=1000)
        if run_results is not None:
            from resel.live.staging import private_folders
            os.makedirs(results, mode=0o700, exist_ok=True)
            private_folders(run_results, [])      # RESULTS/RUN: ours, 0700, not a link (docs/data.md)
        coord = cls(db, run_id, bag, sites, options, run_key, t0, open_site, clock=clock, manifest=manifest,
                    results=run_results)
        try:
            coord.lease(force=True)
            coord._begin()
        except KeyboardInterrupt:
            coord.close()
            raise StoppedWhileStarting(run_id) from None
        return coord


    def _begin(self) -> None:
        """Check every site, then record the bag's submission (and the sites that failed)."""
        failures, estimates, wait_menu = preflight(self)
        self.task_data.url_notes(0.0)
        if self.task_data.probed:     # the bandwidths measured before any decision: stored, and priced from the first
            from resel.transfer import TransferModel
            model = TransferModel.from_json(self.options.data)
            for name, (inbound, outbound) in self.task_data.probed.items():
                model = model.with_bandwidth(name, inbound, outbound)
                log.info("run %s: %s moves %.1f MB/s in, %.1f MB/s out (probe)", self.run_id, name, inbound, outbound)
            self.options.data = model.to_json()
            self.db["runs"].update(self.run_id, {"options": to_json(self.options)})
            self.engine = Engine(self.bag, self.sites, self.options.strategy, **self.options.engine_options())
        self.feed([BagSubmitted(time=0.0, wait_estimates=estimates or None, wait_menu=wait_menu)]
                  + [SiteLost(time=0.0, site=name, reason=why) for name, why in failures.items()])


    @classmethod
    def resume(cls, db: Database, run_id: int, open_site: Callable[[Site], PilotSite], *,
               clock: Callable[[], float] = time.time, to_cancel: bool = False) -> "Coordinator":
        """Rebuild a run's engine from its recorded events and carry on where it stopped.

        A run with no recorded submission (killed while its sites were first checked) starts
        afresh: nothing was submitted for it yet. With ``to_cancel`` (``resel cancel``) the
        run's status is left alone, so a coordinator still running it sees the cancel request.
        """
        run, bag, sites, options = load_live_run(db, run_id, to_run=not to_cancel)
        if run["status"] in ("done", "cancelled") and not to_cancel:
            raise ReselError(f"run {run_id} is {run['status']}; nothing to resume")
        if run["status"] == "cancelling" and not to_cancel:
            raise ReselError(f"run {run_id} is being cancelled (`resel cancel {run_id}`); it cannot be resumed")
        manifest = None
        if bag.data is not None and bag.data.files:       # URL inputs are not in the manifest
            manifest = Manifest.from_rows(db.query("select * from task_inputs where run_id = ? order by task, rowid",
                                                   [run_id]), bag.count)
        coord = cls(db, run_id, bag, sites, options, run["run_key"], run["t0"], open_site, clock=clock,
                    manifest=manifest, results=run.get("results"))
        replay(coord)
        if not to_cancel:
            db["runs"].update(run_id, {"status": "running"})
            coord.lease(force=True)
            if not coord.engine.started:
                log.warning("run %s: its bag was never recorded (a crash while the sites were first checked); "
                            "starting it afresh", run_id)
                coord._begin()
            else:
                catch_up(coord)
        return coord


    def site(self, name: str) -> PilotSite:
        """The site's connection, opened on first use (SSH connects here)."""
        with self._lock:
            if name not in self.psites:
                spec = next(s for s in self.sites if s.name == name)
                self.psites[name] = self._open_site(spec)
            return self.psites[name]


    def now(self) -> float:
        return self.clock() - self.t0


    def run(self, on_cycle: Callable[["Coordinator"], None] | None = None,
            max_time: float | None = None) -> None:
        """Poll until the bag is done (or cancelled); ``on_cycle`` refreshes a display.

        When ``resel cancel`` asks for the run, this coordinator lets go of it (the cancel
        command stops the pilots and collects what the agents wrote) and returns.
        """
        with responsive_threads():
            self._run(on_cycle, max_time)


    def _run(self, on_cycle: Callable[["Coordinator"], None] | None, max_time: float | None) -> None:
        """:meth:`run`'s loop, the sites' threads kept responsive (:mod:`resel.live.main_thread`)."""
        try:
            while not self.finished:
                self.step(wait=True)
                if on_cycle:
                    on_cycle(self)
                if self.finished:
                    break
                if self.cancelled or self._cancel_requested():
                    self.cancelled = True
                    self.lease(force=True, state="released")
                    return
                if max_time is not None and self.now() > max_time:
                    left = self.ending.cancel_everything()
                    raise ReselError(f"run {self.run_id} did not finish within {max_time:g} s; cancelled it"
                                     + (f" (could not cancel: {', '.join(left)})" if left else ""))
            self.acts.finish()
            self.ending.cleanup()
            self.ending.last_read()
            self.ending.write_results("done")
            self.lease(force=True, state="released")
        finally:
            try:
                if not self.db.conn.in_transaction:
                    self.flush_marks()
            except Exception as exc:   # noqa: BLE001 - stopping anyway: unmarked actions are redone on resume
                log.warning("run %s: could not mark the last answered actions done: %s", self.run_id, exc)
            self._stop_workers()


    def step(self, wait: bool = False) -> list[Event]:
        """One turn of the loop: take what the sites reported, feed it, start the polls due.

        With ``wait``, first sleep until a site reports or the next poll, timer or retry is
        due (at most one poll period). Never waits for a site: each site's poll and actions
        run on its own thread.
        """
        self.lease()
        if self._cancel_requested():
            self.cancelled = True
            return []
        if wait:
            self._wait()
        t = self.now()
        events: list[Event] = []
        with self.turn():
            for report in self.take_reports():
                events.extend(self.on_report(report, t))
            events.extend(self.health.watch(t))
            while self.timers and self.timers[0][0] <= t:
                _at, task, attempt, site = heapq.heappop(self.timers)
                events.append(TimerFired(time=t, task=task, attempt=attempt, site=site or None))
            self.feed(starts_first(events))   # a start read in this turn counts before any end
        self.acts.retry(t)
        self.task_data.retry(t)
        self.polls.start(t)
        return events


    def _wait(self) -> None:
        t = self.now()
        due = [t + self.options.poll]
        due += [at for name, at in self.polls.next_poll.items() if name not in self.polls.polling]
        due += [at for name, at in self.polls.next_read.items() if name not in self.polls.reading]
        if self.timers:
            due.append(self.timers[0][0])
        due += [at for _s, _a, at in self.acts.undone]
        due += [at for at, _task, _attempt in self.task_data.fetch_retry]
        timeout = max(0.0, min(due) - t)
        if self.held or not timeout:
            return
        try:
            self.held.append(self.reports.get(timeout=timeout))
        except queue.Empty:
            pass


    def take_reports(self) -> list[Report]:
        out, self.held = self.held, []
        while True:
            try:
                out.append(self.reports.get_nowait())
            except queue.Empty:
                return out


    def on_report(self, report: Report, t: float) -> list[Event]:
        if report.kind == "poll":
            return self.polls.polled(report, t)
        if report.kind == "settle":
            self.polls.polling.discard(report.site)
            if report.error is not None:
                return self.health.files_failed(report.site, t, report.error)
            views, jobs = report.tag
            return self.findings.site_events(t, (views, jobs, report.result))
        if report.kind == "read":
            self.polls.reading.discard(report.site)
            if report.error is not None:
                return self.health.files_failed(report.site, t, report.error)
            self.health.views[report.site].files_failing_since = None
            return self.findings.site_events(t, (report.tag, None, report.result))
        if report.kind == "act":
            seq, action = report.tag
            return self.acts.acted(seq, action, report)
        if report.kind == "fetch":
            return self.task_data.fetched(report, t)
        if report.kind == "clean" and report.error is not None:
            log.warning("run %s: could not remove %s's files of task %s attempt %s: %s", self.run_id, report.site,
                        *report.tag, describe(report.error))
        return []       # a late answer to a check or a drain that was given up on


    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """One transaction for all a turn of the loop records — the ``attempts`` and
        ``live_pilots`` rows of what the sites reported, the done marks of the actions they
        answered, each event fed with its decisions and actions — and the actions carried out
        only once it has committed (issue 29 §2: one WAL ``fdatasync`` per turn instead of ~5
        per task). The write-ahead rule holds per turn: an action's row is durable before the
        action runs. A crash before the commit leaves the store as it was before the turn;
        resumed, the coordinator reads the agents' files again and feeds the same events
        (tests/test_live_parts.py kills one mid-turn)."""
        if self._turn is not None:      # already in one: the outer turn carries the actions out
            yield
            return
        if self.db.conn.in_transaction:     # its commit would not be the one the actions wait for
            raise RuntimeError("a turn of the coordinator began inside another transaction")
        self._turn = []
        try:
            with self.db.atomic():
                changes = self.db.conn.total_changes
                yield
                if self._marks_due and (self.db.conn.total_changes != changes
                                        or time.monotonic() - self._marks_since >= self.options.poll):
                    self._flush_marks()
            todo = self._turn
        finally:
            self._turn = None
        self._carry_out(todo)

    def feed(self, events: list[Event], *, execute: bool = True) -> None:
        """Record each event and its actions, then carry the actions out, in order.

        All events of one poll are recorded in one transaction and applied before any action
        runs, so an action that a later event made moot (a pilot withdrawn because its site was
        lost) is skipped, not done. Without ``execute`` (a run being cancelled) the actions are
        recorded as done. Within a :meth:`turn` the actions wait for the turn's commit.
        """
        with self.turn():
            for event in events:
                self.record(event.time, event, None)
                for seq in self.acts.marks_for(event):
                    self.mark(seq)
                actions = self.engine.handle(event)
                seqs = [self.record(journal.row_time(a, event.time), a,
                                    None if isinstance(a, RECORD_ONLY) or not execute else 0) for a in actions]
                for seq, a in zip(seqs, actions):
                    if isinstance(a, Decision):
                        store_rows.insert(self.db, "decisions", {"run_id": self.run_id, "seq": seq, **json_clean(
                            dataclasses.asdict(a))}, replace=True)
                    elif not execute:
                        journal.mark(self.db, self.run_id, seq, done=True, error="run cancelled")
                if not execute:
                    continue
                if isinstance(event, TaskFetching):
                    self._turn.append((-1, event))
                self._turn += [(seq, a) for seq, a in zip(seqs, actions) if not isinstance(a, RECORD_ONLY)]
            if events:
                self.summary.save(self.db, self.run_id, self.engine)   # what status shows, with its rows

    def after_commit(self, job: Callable[[], None]) -> None:
        """Run ``job`` (site work that needs what this turn records, e.g. removing a site's copy
        of outputs recorded home) once the turn has committed; at once outside a turn."""
        if self._turn is None:
            job()
        else:
            self._turn.append((-1, job))

    def _carry_out(self, todo: list[tuple[int, Any]]) -> None:
        """What a committed turn recorded: outputs to fetch and the site work that waited for
        the commit first (in order), then the actions in order."""
        for _seq, item in todo:
            if isinstance(item, TaskFetching):
                self.task_data.fetch(item.task, item.attempt)
            elif not isinstance(item, Action):
                item()
        for seq, action in todo:
            if isinstance(action, Action):
                self.acts.execute(seq, action)


    def record(self, time_: float, record: Event | Action, done: int | None) -> int:
        """Journal one event or action as the run's next row; its seq is the key it is marked
        done by (:mod:`resel.journal`)."""
        seq = self.seq
        self.seq += 1
        journal.append(self.db, self.run_id, seq, time_, record, done)
        return seq


    def mark(self, seq: int, error: str | None = None, *, done: bool | None = None) -> None:
        journal.mark(self.db, self.run_id, seq, done=(error is None) if done is None else done, error=error)


    def mark_soon(self, seq: int) -> None:
        """Mark an answered action done in the next turn that writes anything else, or within a
        poll period: a turn that only marks would cost a commit (an ``fdatasync``) of its own,
        and an action left undone by a crash is redone on resume, which every action allows
        (a pilot found again by its job name, an inbox file rewritten alike)."""
        if not self._marks_due:
            self._marks_since = time.monotonic()
        self._marks_due.append(seq)

    def _flush_marks(self) -> None:
        for seq in self._marks_due:
            self.mark(seq)
        self._marks_due = []

    def flush_marks(self) -> None:
        """The marks still waiting (:meth:`mark_soon`), written now: the run stops here."""
        if self._marks_due:
            with self.db.atomic():
                self._flush_marks()

    def pilot_row(self, view: PilotView, **cols: Any) -> None:
        row = {"run_id": self.run_id, "pilot": view.pilot, "site": view.site, "job_id": view.job_id,
               "cores": view.cores, "walltime": view.walltime, "state": view.stored}
        row.update({k: v for k, v in cols.items() if v is not None})
        self.db["live_pilots"].upsert(row, pk=("run_id", "pilot"), alter=False)


    def attempt_row(self, task: int, attempt: int, v: PilotView, cols: dict) -> None:
        row = {"run_id": self.run_id, "task": task, "attempt": attempt, "site": v.site, "pilot": v.pilot}
        row.update({k: val for k, val in cols.items() if val is not None})
        store_rows.upsert(self.db, "attempts", row, pk=("run_id", "task", "attempt"))


    def _cancel_requested(self) -> bool:
        rows = list(self.db.query("select status from runs where id = ?", [self.run_id]))
        return bool(rows) and rows[0]["status"] == "cancelling"


    def lease(self, force: bool = False, state: str = "running") -> None:
        """Tell ``resel cancel`` (another process) that this coordinator drives the run."""
        now = time.monotonic()
        if force or now - self._last_lease >= 1.0:
            self._last_lease = now
            live_notes.hold(self.db, self.run_id, self.now(), state)


    def all_workers(self) -> list[SiteWorker]:
        return [*self.workers.values(), *self.exchange.values()]


    def _stop_workers(self) -> None:
        for worker in self.all_workers():
            worker.stop()


    def close(self) -> None:
        self._stop_workers()
        for ps in self.psites.values():
            try:
                ps.transport.close()
            except Exception:   # noqa: BLE001
                pass

    def cancel_everything(self, wait: float = 30.0) -> list[str]:
        """Stop every pilot and task of the run (``resel cancel``); returns what could not be
        (:meth:`resel.live.ending.Ending.cancel_everything`)."""
        return self.ending.cancel_everything(wait)

    def site_notes(self) -> dict[str, "live_notes.SiteNotes"]:
        """What this coordinator noticed per site, as the live table shows it."""
        return self.health.site_notes()
