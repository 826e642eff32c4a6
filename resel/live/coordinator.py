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
stored T_q, T_x and TTC of each task.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import json
import logging
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlite_utils import Database

from resel import journal
from resel.live import notes as live_notes
from resel.backends.jobs import Pending
from resel.backends.pilotsite import PilotFiles, PilotSite, job_phase, task_key, url_inputs_note
from resel.domain import Bag, Site
from resel.engine import Engine
from resel.errors import IllegalTransition, ReselError
from resel.events import (
    Action, BagCancelled, BagDone, BagSubmitted, CancelPilot, CancelTask, Decision, DispatchTask, Event,
    PilotEnded, PilotRequeued, PilotStarted, SetTimer, SiteLost, SiteQuarantined, SiteReleased, SubmitPilot,
    TaskDelivered, TaskFailed, TaskFetching, TaskFinished, TaskLost, TaskStarted, TaskUndelivered, TimerFired,
    BandwidthMeasured, OutputsMeasured, RateLearned, StrategyChosen, TaskMeasured, TaskWithdrawn, WithdrawTask,
)
from resel.live.errors import is_transient
from resel.live.sites import Report, SiteWorker
from resel.live.staging import OutputsNotDelivered, ResultsDiskFull, ResultsFolderRefused, SiteData
from resel.states import AttemptOutcome, PilotState, TaskState
from resel.task_data import Manifest, task_folder
from resel.metrics import task_times, workload_metrics
from resel.selection import Strategy
from resel.json_safe import clean as json_clean
from resel.live.stored import LiveOptions, load_live_run
from resel.store import to_json, utc_now

log = logging.getLogger("resel.live")

#: bytes a site must move one way (since its last figure) before the run's own transfers
#: re-price its bandwidth
MEASURE_BYTES = 32e6
#: actions that are only recorded (nothing to carry out): choices and quarantines
RECORD_ONLY = (Decision, SiteQuarantined, SiteReleased, RateLearned, StrategyChosen)
#: lost results that say the attempt died with an agent that is gone while its pilot lives on
#: ("evicted": written by the HTCondor wrapper of a rerun for the run before)
LOST_WITH_AGENT = ("agent restarted", "superseded", "evicted")


@dataclass
class PilotView:
    """The coordinator's view of one pilot: its batch job and its agent. Its state is in the
    engine's vocabulary (:class:`~resel.states.PilotState`), moved on by what the site says
    before the engine is told; the engine keeps its own pilot, the same words."""

    pilot: int
    site: str
    cores: int = 0
    walltime: float = 0.0
    job_id: str | None = None
    state: PilotState = PilotState.PENDING
    missing: int = 0
    seen: set = field(default_factory=set)
    job_state: str = ""
    #: the agent now running it (heartbeat.json), and when it started (live_pilots.agent_started)
    incarnation: str | None = None
    agent_started: float | None = None
    #: lost results its current agent wrote (walltime, terminated): PilotEnded or PilotRequeued
    #: settles them, unless that agent turns out to be replaced — then they are TaskLost
    parked: dict = field(default_factory=dict)
    unknown_state: str | None = None
    #: the site refused its submission for good: cancelled for the engine, ``failed`` as stored
    refused: bool = False

    @property
    def stored(self) -> str:
        """Its state as ``live_pilots.state`` holds it (and ``resel status --json`` shows it)."""
        return "failed" if self.refused else STORED_STATES[self.state]


#: the engine's pilot states as ``live_pilots.state`` stores them, in the words the table has
#: always held: an active pilot is ``running`` there, and a cancelled one whose submission the
#: site refused ``failed`` (:attr:`PilotView.refused`)
STORED_STATES = {PilotState.PENDING: "pending", PilotState.ACTIVE: "running", PilotState.ENDED: "ended",
                 PilotState.CANCELLED: "cancelled"}


def stored_view(row: dict) -> PilotView:
    """A pilot's ``live_pilots`` row read back on resume; a state word no resel writes is taken
    as ended (the pilot is not polled again)."""
    word = row["state"] or "pending"
    state = {w: s for s, w in STORED_STATES.items()}.get(word, PilotState.CANCELLED if word == "failed"
                                                          else PilotState.ENDED)
    return PilotView(row["pilot"], row["site"], row["cores"] or 0, row["walltime"] or 0.0, row["job_id"], state,
                     agent_started=row.get("agent_started"), refused=word == "failed")


@dataclass
class SiteView:
    """What the display shows per site besides the engine's counts."""

    error: str | None = None
    failing_since: float | None = None
    #: since when reading the pilots' files fails (a scheduler that answers does not clear it)
    files_failing_since: float | None = None
    last_poll: float = 0.0
    bad_records: int = 0
    notes: dict = field(default_factory=dict)      # key -> words (unknown states, relaunches)


class Coordinator:
    """Drives one live run. Build it with :meth:`start` or :meth:`resume`, then :meth:`run`."""

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
        self.data: dict[str, SiteData] = {}
        #: (task, attempt) -> (pilot, site, outputs) of attempts whose outputs are on their way home
        self._deliveries: dict[tuple[int, int], tuple[int, str, list[dict]]] = {}
        self._fetch_retry: list[tuple[float, int, int]] = []
        #: bytes of each delivered task's outputs (OutputsMeasured)
        self._delivered_bytes: list[int] = []
        #: site -> (MB/s in, MB/s out) the probe measured before the run (task data)
        self._probed: dict[str, tuple[float, float]] = {}
        #: site -> [bytes, seconds] moved each way since the engine last heard the site's figure
        self._moved: dict[tuple[str, str], list[float]] = {}
        self.run_key, self.t0, self.clock = run_key, t0, clock
        self.engine = Engine(bag, sites, options.strategy, **options.engine_options())
        self._open_site = open_site
        self.psites: dict[str, PilotSite] = {}
        self.views = {s.name: SiteView() for s in sites}
        self.pilots: dict[int, PilotView] = {}
        #: (at, task, attempt, site): re-selection windows (site "") and quarantine back-offs
        self.timers: list[tuple[float, int, int, str]] = []
        self.consumed: set[tuple[str, int, int]] = set()
        self.undone: list[tuple[int, Action, float]] = []      # (seq, action, not before) to retry
        self.seq = 0
        self.finished = False
        self.cancelled = False
        self._lock = threading.Lock()
        self._reports: "queue.Queue[Report]" = queue.Queue()
        #: per site: a worker for the scheduler's commands, one for the file exchange with the
        #: agents (reading their records, writing inbox and cancel files), so that a scheduler
        #: call that hangs never holds up the pilots that run
        self.workers = {s.name: SiteWorker(s.name, self._reports) for s in sites}
        self.exchange = {s.name: SiteWorker(s.name, self._reports, role="files") for s in sites}
        self._polling: set[str] = set()                 # a scheduler poll (and its settling read) under way
        self._reading: set[str] = set()                 # a read of the running pilots' files under way
        self._next_poll: dict[str, float] = {}
        self._next_read: dict[str, float] = {}
        self._held: list[Report] = []                   # reports taken while waiting
        self._last_lease = 0.0
        #: pilot → the pending reason last noted (resel status shows it)
        self._pending_reasons: dict[int, str] = {}

    # ------------------------------------------------------------------ construction
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
        options.data = _data_model(bag, sites, manifest)
        with db.atomic():
            run_id = db["runs"].insert({
                "created": utc_now(), "mode": "live", "bag": bag.name, "strategy": Strategy.parse(options.strategy).name,
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
        coord._lease(force=True)
        coord._begin()
        return coord

    def _begin(self) -> None:
        """Check every site, then record the bag's submission (and the sites that failed)."""
        failures, estimates, wait_menu = self._preflight()
        self._url_notes(0.0)
        if self._probed:     # the bandwidths measured before any decision: stored, and priced from the first
            from resel.transfer import TransferModel
            model = TransferModel.from_json(self.options.data)
            for name, (inbound, outbound) in self._probed.items():
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
        coord._replay()
        if not to_cancel:
            db["runs"].update(run_id, {"status": "running"})
            coord._lease(force=True)
            if not coord.engine.started:
                log.warning("run %s: its bag was never recorded (a crash while the sites were first checked); "
                            "starting it afresh", run_id)
                coord._begin()
            else:
                coord._catch_up()
        return coord

    def _catch_up(self) -> None:
        """Resumed: read what every running pilot's agent did while no coordinator watched — on
        every site before any decision — and feed it with every site's starts before any site's
        ends. A task one site's agent took from its inbox meanwhile is then running, not
        waiting, when another site's freed slot asks for work; before, the faster site's first
        read came first and re-selection moved that task, which ran twice. A site that does not
        answer within ``slow_after`` seconds is caught up by its polls."""
        by_site: dict[str, list[PilotView]] = {}
        for v in self.pilots.values():
            if v.state is PilotState.ACTIVE and v.job_id:
                by_site.setdefault(v.site, []).append(v)
        t = self.now()
        events: list[Event] = []
        for v, found in self._read_pilots("catch-up", by_site, self.options.slow_after, heartbeat=True):
            events += self._site_events(t, ([v], None, {v.pilot: found}))
        first = [e for e in events if isinstance(e, (PilotStarted, TaskStarted))]
        self.feed(first + [e for e in events if not isinstance(e, (PilotStarted, TaskStarted))])

    def _replay(self) -> None:
        for row in self.db.query("select * from live_pilots where run_id = ?", [self.run_id]):
            self.pilots[row["pilot"]] = stored_view(row)
        fired = set()
        for row in journal.rows(self.db, self.run_id):
            self.seq = row["seq"] + 1
            try:
                record = journal.decode(row["kind"], row["time"], row["data"])
            except journal.BadRecord as exc:
                if exc.why == "json":
                    log.warning("run %s: event %s (%s) is not readable JSON; skipped", self.run_id, row["seq"],
                                row["kind"])
                elif exc.why == "fields":   # a record an older resel wrote: see below
                    log.warning("run %s: recorded %s %s skipped on replay: %s", self.run_id, row["kind"], row["data"],
                                exc)
                continue   # "kind": not a record this version knows (as before: not replayed)
            if isinstance(record, Event):
                if isinstance(record, TimerFired):
                    fired.add((record.task, record.attempt, record.site or ""))
                try:
                    self.engine.handle(record)   # the actions it returns were recorded with it
                except (IllegalTransition, TypeError) as exc:
                    # a record an older resel let through (a result for a task that does not
                    # exist): the engine refused it then too, so skipping it changes nothing
                    log.warning("run %s: recorded %s %s skipped on replay: %s", self.run_id, row["kind"], row["data"],
                                exc)
                    continue
                if isinstance(record, (TaskStarted, TaskFinished, TaskFailed, TaskLost, TaskFetching, TaskWithdrawn,
                                       TaskMeasured)):
                    self.consumed.add((row["kind"], record.task, record.attempt))
            else:
                action = record
                if isinstance(action, SetTimer):
                    heapq.heappush(self.timers, (action.at, action.task, action.attempt, action.site or ""))
                elif isinstance(action, SubmitPilot) and action.pilot not in self.pilots:
                    self.pilots[action.pilot] = PilotView(action.pilot, action.site, action.cores, action.walltime)
                elif isinstance(action, BagDone):
                    self.finished = True
                if row["done"] == 0:
                    self.undone.append((row["seq"], action, 0.0))
        # results already read became events; mark their files seen so they are not re-read
        for (kind, task, attempt) in self.consumed:
            sub = "started" if kind == "TaskStarted" else "results"
            for view in self.pilots.values():
                view.seen.add(f"{sub}/{task_key(task, attempt)}.json")
        self.timers = [t for t in self.timers if (t[1], t[2], t[3]) not in fired]
        heapq.heapify(self.timers)
        # outputs a crash left on their way home: fetched again (what is home and right is kept)
        for task in self.engine.tasks:
            if task.state is TaskState.FETCHING:
                rows = list(self.db.query("select pilot, site, outputs from attempts where run_id = ? and task = ? "
                                          "and attempt = ?", [self.run_id, task.id, task.attempt]))
                if rows and rows[0]["outputs"]:
                    self._deliveries[(task.id, task.attempt)] = (rows[0]["pilot"], rows[0]["site"],
                                                                 json.loads(rows[0]["outputs"]))
                    self._fetch_retry.append((0.0, task.id, task.attempt))

    # ------------------------------------------------------------------ sites
    def site(self, name: str) -> PilotSite:
        """The site's connection, opened on first use (SSH connects here)."""
        with self._lock:
            if name not in self.psites:
                spec = next(s for s in self.sites if s.name == name)
                self.psites[name] = self._open_site(spec)
            return self.psites[name]

    def site_data(self, name: str) -> SiteData:
        """The site's task data for this run, its cache as the store knows it. Made on the
        coordinator's thread (it reads the store); the site itself is opened on first use, on
        the site's thread."""
        if name not in self.data:
            held = [r["sha256"] for r in self.db.query(
                "select sha256 from site_files where run_id = ? and site = ?", [self.run_id, name])]
            self.data[name] = SiteData(lambda: self.site(name), self.run_key, held)
        return self.data[name]

    def _on_sites(self, kind: str, jobs: dict[str, Callable[[], Any]], timeout: float,
                  workers: dict[str, SiteWorker] | None = None) -> dict[str, Report]:
        """Run one job per site on the sites' workers (the scheduler's, unless ``workers``) and
        wait for them all, at most ``timeout`` seconds; a site that has not answered by then is
        absent from the answer."""
        for name, job in jobs.items():
            (workers or self.workers)[name].submit(kind, None, job)
        got: dict[str, Report] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(jobs):
            try:
                report = self._reports.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if report.kind == kind and report.site in jobs and report.site not in got:
                got[report.site] = report
            else:
                self._held.append(report)       # a poll or an action: handled by the loop
        return got

    def _preflight(self) -> tuple[dict[str, str], dict[str, float], dict[str, list[float | None]] | None]:
        """Ask every site for its availability and, for the queue-aware strategy, when each of
        its pilot sizes would start (twin, history bound or the scheduler's answer: resel.live.plan).

        Returns the sites that failed (with why), the full pilot's start estimate per site, and
        the estimates of every size of :meth:`Engine.probe_menu` (None without queue-awareness).
        A site that does not answer within ``check_timeout`` is one that failed.
        """
        strat = Strategy.parse(self.options.strategy)
        want_estimates = strat.asks_waits or strat.base == "earliest"
        history = wait_errors = None
        if want_estimates:
            from resel.models.conditioned import load_wait_errors
            from resel.models.history import load_history
            history = load_history(self.db)
            wait_errors = load_wait_errors(self.db) if self.options.objective == "p90" else None
        menu = self.engine.probe_menu()
        # task data: a site whose bandwidth the sites file does not state is measured first
        unmeasured = {s.name for s in self.sites if s.bandwidth is None} if self.options.data else set()
        datas = {name: self.site_data(name) for name in unmeasured}

        def check(i: int, site: Site) -> tuple[list[float | None] | None, tuple[float, float] | None]:
            ps = self.site(site.name)
            ps.scheduler.availability()
            ps.ship_agent()
            probe = datas[site.name].probe() if site.name in datas else None
            if not (want_estimates and menu[i]):
                return None, probe
            from resel.live.plan import site_estimates
            from resel.planning import menu_waits
            opts = self.options
            row = site_estimates(ps.scheduler, site, menu[i], self.engine.tx[i], history,
                                 quantile=opts.quantile, confidence=opts.confidence)
            return menu_waits(row, opts.estimate, opts.objective, wait_errors), probe

        answers = self._on_sites("check", {s.name: (lambda i=i, s=s: check(i, s)) for i, s in enumerate(self.sites)},
                                 self.options.check_timeout)
        failures, estimates, waits = {}, {}, {}
        for site in self.sites:
            report = answers.get(site.name)
            if report is None:
                failures[site.name] = f"no answer within {self.options.check_timeout:g} s"
            elif report.error is not None:
                failures[site.name] = _describe(report.error)
            else:
                menu_waits, probe = report.result
                if probe is not None:
                    self._probed[site.name] = probe
                if menu_waits is not None:
                    waits[site.name] = menu_waits
                    if menu_waits[0] is not None:      # the full pilot comes first
                        estimates[site.name] = menu_waits[0]
            if site.name in failures:
                self.views[site.name].error = failures[site.name]
        return failures, estimates, (waits if want_estimates else None)

    # ------------------------------------------------------------------ the loop
    def now(self) -> float:
        return self.clock() - self.t0

    def run(self, on_cycle: Callable[["Coordinator"], None] | None = None,
            max_time: float | None = None) -> None:
        """Poll until the bag is done (or cancelled); ``on_cycle`` refreshes a display.

        When ``resel cancel`` asks for the run, this coordinator lets go of it (the cancel
        command stops the pilots and collects what the agents wrote) and returns.
        """
        try:
            while not self.finished:
                self.step(wait=True)
                if on_cycle:
                    on_cycle(self)
                if self.finished:
                    break
                if self.cancelled or self._cancel_requested():
                    self.cancelled = True
                    self._lease(force=True, state="released")
                    return
                if max_time is not None and self.now() > max_time:
                    left = self.cancel_everything()
                    raise ReselError(f"run {self.run_id} did not finish within {max_time:g} s; cancelled it"
                                     + (f" (could not cancel: {', '.join(left)})" if left else ""))
            self._finish_actions()
            self._cleanup()
            self._last_read()
            self._write_results("done")
            self._lease(force=True, state="released")
        finally:
            self._stop_workers()

    def _finish_actions(self, wait: float = 10.0) -> None:
        """The bag is done: let the last actions (the pilots' cancels) reach their sites and
        record them, for at most ``wait`` seconds (a dead site's are left undone)."""
        deadline = time.monotonic() + wait
        while any(w.pending for w in self._all_workers()) and time.monotonic() < deadline:
            try:
                self._held.append(self._reports.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            for report in self._take_reports():
                if report.kind == "act":
                    self._acted(*report.tag, report)
        for report in self._take_reports():
            if report.kind == "act":
                self._acted(*report.tag, report)

    def step(self, wait: bool = False) -> list[Event]:
        """One turn of the loop: take what the sites reported, feed it, start the polls due.

        With ``wait``, first sleep until a site reports or the next poll, timer or retry is
        due (at most one poll period). Never waits for a site: each site's poll and actions
        run on its own thread.
        """
        self._lease()
        if self._cancel_requested():
            self.cancelled = True
            return []
        if wait:
            self._wait()
        t = self.now()
        events: list[Event] = []
        for report in self._take_reports():
            events.extend(self._on_report(report, t))
        events.extend(self._watch_sites(t))
        while self.timers and self.timers[0][0] <= t:
            _at, task, attempt, site = heapq.heappop(self.timers)
            events.append(TimerFired(time=t, task=task, attempt=attempt, site=site or None))
        self.feed(events)
        self._retry_undone(t)
        self._retry_fetches(t)
        self._start_polls(t)
        return events

    def _wait(self) -> None:
        t = self.now()
        due = [t + self.options.poll]
        due += [at for name, at in self._next_poll.items() if name not in self._polling]
        due += [at for name, at in self._next_read.items() if name not in self._reading]
        if self.timers:
            due.append(self.timers[0][0])
        due += [at for _s, _a, at in self.undone]
        due += [at for at, _task, _attempt in self._fetch_retry]
        timeout = max(0.0, min(due) - t)
        if self._held or not timeout:
            return
        try:
            self._held.append(self._reports.get(timeout=timeout))
        except queue.Empty:
            pass

    def _take_reports(self) -> list[Report]:
        out, self._held = self._held, []
        while True:
            try:
                out.append(self._reports.get_nowait())
            except queue.Empty:
                return out

    def _start_polls(self, t: float) -> None:
        """Every site whose last poll is over and whose next is due is polled: its scheduler on
        one worker, its running pilots' files on the other, each on its own schedule (a
        scheduler that hangs does not stop the files from being read every poll period)."""
        by_site: dict[str, list[PilotView]] = {}
        for view in self.pilots.values():
            if not view.state.final and view.job_id:
                by_site.setdefault(view.site, []).append(view)
        for gone in (set(self._next_poll) | set(self._next_read)) - set(by_site):   # no pilot left: not due
            self._next_poll.pop(gone, None)
            self._next_read.pop(gone, None)
        for name, views in by_site.items():
            if name not in self._polling and self._next_poll.get(name, 0.0) <= t:
                self._polling.add(name)
                self._next_poll[name] = t + self.options.poll
                ids = [v.job_id for v in views]
                self.workers[name].submit("poll", views, lambda n=name, i=ids: self.site(n).pilot_jobs(i))
            # a pending pilot's files are read while its scheduler does not answer, if it never
            # ran (it may have started meanwhile); otherwise — and for one back in the queue,
            # whose old agent may still be finishing attempts that the engine has taken for
            # lost — the scheduler's answer says when to look, and the read at the end of the
            # bag takes what is left
            quiet = self.views[name].failing_since is not None
            readable = [v for v in views if v.state is PilotState.ACTIVE
                        or (quiet and v.agent_started is None and v.incarnation is None)]
            if not readable:
                self._next_read.pop(name, None)       # nothing to read: not due (the loop sleeps)
            elif name not in self._reading and self._next_read.get(name, 0.0) <= t:
                self._reading.add(name)
                self._next_read[name] = t + self.options.poll
                self.exchange[name].submit("read", readable, lambda n=name, v=readable: self._read(n, v))

    def _watch_sites(self, t: float) -> list[Event]:
        """A site whose command has run for ``slow_after`` seconds is not answering: say so,
        and give it up after ``site_timeout``."""
        events: list[Event] = []
        for name, worker in self.workers.items():
            busy = max((b for b in (worker.busy, self.exchange[name].busy) if b is not None), key=lambda b: b[1],
                       default=None)
            view = self.views[name]
            if busy is None or busy[1] < self.options.slow_after:
                continue
            since = t - busy[1]
            view.failing_since = min(view.failing_since or since, since)
            view.error = f"not answering ({busy[0]} running for {busy[1]:.0f} s)"
            live_notes.put(self.db, self.run_id, name, "unreachable", "unreachable", view.failing_since, view.error)
            if t - view.failing_since > self.options.site_timeout and name not in self.engine.lost_sites:
                events.append(SiteLost(time=t, site=name, reason=f"unreachable for {self.options.site_timeout:g} s: "
                                                                   f"{view.error}"))
        return events

    def _on_report(self, report: Report, t: float) -> list[Event]:
        if report.kind == "poll":
            return self._polled(report, t)
        if report.kind == "settle":
            self._polling.discard(report.site)
            if report.error is not None:
                return self._files_failed(report.site, t, report.error)
            views, jobs = report.tag
            return self._site_events(t, (views, jobs, report.result))
        if report.kind == "read":
            self._reading.discard(report.site)
            if report.error is not None:
                return self._files_failed(report.site, t, report.error)
            self.views[report.site].files_failing_since = None
            return self._site_events(t, (report.tag, None, report.result))
        if report.kind == "act":
            seq, action = report.tag
            return self._acted(seq, action, report)
        if report.kind == "fetch":
            return self._fetched(report, t)
        if report.kind == "clean" and report.error is not None:
            log.warning("run %s: could not remove %s's files of task %s attempt %s: %s", self.run_id, report.site,
                        *report.tag, _describe(report.error))
        return []       # a late answer to a check or a drain that was given up on

    def _polled(self, report: Report, t: float) -> list[Event]:
        """The scheduler's answer about a site's pilots. A pilot whose state it changes
        (started, ended, back in the queue) has its files read first, on the site's file worker
        after any read already under way there, so that what its agent wrote counts before the
        change; the poll is over when that read is."""
        name, view = report.site, self.views[report.site]
        if report.error is not None:
            # the scheduler (or the whole site) did not answer: nothing is concluded from
            # silence; the running pilots' files are read meanwhile on the other worker
            self._polling.discard(name)
            return self._not_answering(name, t, _describe(report.error), f"no answer: {_describe(report.error)}")
        if view.files_failing_since is None:
            if view.failing_since is not None:
                log.warning("site %s answers again after %.0f s", name, t - view.failing_since)
                live_notes.drop(self.db, self.run_id, name, "unreachable")
            view.error, view.failing_since = None, None
        view.last_poll = t
        views, jobs = report.tag, report.result
        changing = [v for v in views if self._changes(v, jobs)]
        if not changing:
            self._polling.discard(name)
            return self._site_events(t, (views, jobs, {}))
        self.exchange[name].submit("settle", (views, jobs), lambda: self._read(name, changing))
        return []

    def _changes(self, v: PilotView, jobs: dict) -> bool:
        """Whether the scheduler's answer moves this pilot on (it started, ended or went back
        to the queue), i.e. its files must be read before the answer is acted on."""
        info = jobs.get(v.job_id)
        if info is not None and info.name and not f"resel-{self.run_key}-p{v.pilot}".startswith(info.name):
            info = None          # the id is someone else's job now (_site_events says so)
        phase = job_phase(info.state) if info is not None else None        # None: not in the reply
        if v.state is PilotState.ACTIVE:
            return phase in ("pending", "final", None)
        return phase != "pending"

    def _read(self, name: str, views: list[PilotView], heartbeat: bool = True) -> dict[int, PilotFiles]:
        """Runs on the site's file worker: what these pilots' agents wrote since the last read."""
        ps = self.site(name)
        return {v.pilot: ps.collect(self.run_key, v.pilot, v.seen, heartbeat=heartbeat) for v in views}

    def _files_failed(self, name: str, t: float, exc: BaseException) -> list[Event]:
        """The pilots' files could not be read: shown, and the site given up if it lasts (an
        answering scheduler does not clear it)."""
        view = self.views[name]
        view.files_failing_since = view.files_failing_since or t
        view.failing_since = min(view.failing_since or t, view.files_failing_since)
        why = f"reading the pilots' files: {_describe(exc)}"
        return self._not_answering(name, t, why, why)

    def _not_answering(self, name: str, t: float, error: str, words: str) -> list[Event]:
        """Note a site that does not answer (since when, why); give it up after ``site_timeout``."""
        view = self.views[name]
        view.error = error
        view.failing_since = view.failing_since or t
        live_notes.put(self.db, self.run_id, name, "unreachable", "unreachable", view.failing_since, words)
        if t - view.failing_since > self.options.site_timeout and name not in self.engine.lost_sites:
            return [SiteLost(time=t, site=name, reason=f"unreachable for {self.options.site_timeout:g} s: {error}")]
        return []

    # ------------------------------------------------------------------ what a poll means
    def _site_events(self, t: float, result: tuple) -> list[Event]:
        """One poll's findings as events, pilot by pilot: what its agent wrote first (results
        read in the same poll as a requeue or an end count before it), then what its job's
        state means — nothing, for a read of the files alone (``jobs`` None)."""
        views, jobs, files = result
        out: list[Event] = []
        for v in sorted(views, key=lambda v: v.pilot):
            if v.state.final:
                continue             # ended or cancelled while the poll ran
            info, state, phase = None, "", "unknown"
            if jobs is not None:
                info = jobs.get(v.job_id)
                if info is not None and info.name and not f"resel-{self.run_key}-p{v.pilot}".startswith(info.name):
                    # the job id was given to another job (a controller that lost its state reuses ids)
                    self._note(v.site, f"reused:p{v.pilot}", "job-state", t,
                               f"pilot {v.pilot}: job {v.job_id} is now someone else's job ({info.name})")
                    info = None
                state = info.shown if info is not None else "MISSING"     # the scheduler's word
                phase = job_phase(info.state) if info is not None else None      # None: missing
                v.job_state = state
                self._state_note(v, state, phase, t)
                self._pending_note(v, info, phase, t)
                if phase == "running" and v.state is PilotState.PENDING:
                    v.state = PilotState.ACTIVE
                    out.append(PilotStarted(time=t, pilot=v.pilot))
                    self._pilot_row(v, started=t)
            found = files.get(v.pilot)
            if found is not None:
                if v.state is PilotState.PENDING and self._runs(v, found):
                    v.state = PilotState.ACTIVE     # it ran and maybe ended between two polls
                    out.append(PilotStarted(time=t, pilot=v.pilot))
                    self._pilot_row(v, started=t)
                if found.agent:
                    self._pilot_row(v, host=found.agent.get("host"), cpu_model=found.agent.get("cpu_model"),
                                    cpu_mhz=_number(found.agent.get("cpu_mhz")),
                                    agent_started=_number(found.agent.get("started")))
                if found.heartbeat and v.state is PilotState.ACTIVE:
                    out.extend(self._incarnation(t, v, found.heartbeat))
                    self._rejected(t, v, found.heartbeat)
                for path, why in found.bad:
                    self._bad_record(v.site, path, why, t)
                out.extend(self._file_events(t, v, found))
            if jobs is None:
                continue
            if phase == "pending" and v.state is PilotState.ACTIVE:
                # back in the queue (scontrol requeue, a node failure with requeue on, a
                # controller that lost the job's start): its agent is gone, what it ran and
                # did not report is lost; it may start again as a new incarnation
                v.state, v.missing = PilotState.PENDING, 0
                v.parked.clear()
                out.append(PilotRequeued(time=t, pilot=v.pilot, reason=f"job {v.job_id} {state}"))
                self._pilot_row(v, reason=f"requeued ({state})")
                self._note(v.site, f"requeue:p{v.pilot}", "requeue", t,
                           f"pilot {v.pilot}: job {v.job_id} went back to the queue ({state})")
                log.warning("run %s: pilot %s (job %s on %s) went back to the queue (%s); its attempts are lost",
                            self.run_id, v.pilot, v.job_id, v.site, state)
                continue
            if phase == "pending" and info is not None and info.pending is Pending.NEVER:
                why = (f"the scheduler will never start pilot {v.pilot} ({v.cores} cores, {v.walltime:g} s): "
                       f"job {v.job_id} pending with reason {info.reason}")
                self.workers[v.site].submit("stop", None, lambda v=v: self.site(v.site).stop_pilot(
                    self.run_key, v.pilot, v.job_id))
                v.state = PilotState.ENDED
                out.append(PilotEnded(time=t, pilot=v.pilot, reason=info.reason))
                out.append(SiteLost(time=t, site=v.site, reason=why))
                self._pilot_row(v, ended=t, reason=info.reason)
                self.views[v.site].error = why
                continue
            if phase is None:
                v.missing += 1
                ended = v.missing >= self.options.missing_polls
            else:
                v.missing = 0
                ended = phase == "final"
            if ended:
                v.state = PilotState.ENDED
                v.parked.clear()
                out.append(PilotEnded(time=t, pilot=v.pilot,
                                      reason=info.state.value if info is not None else "missing"))
                self._pilot_row(v, ended=t, reason=state)
        return out

    def _runs(self, v: PilotView, found: PilotFiles) -> bool:
        """Whether a pending pilot's files say it runs: anything its agent wrote, if it never ran
        before; an agent other than the one it had, if it did — back in the queue, its old agent
        may still be finishing attempts, which is no new start (taken for one, the pilot went
        back and forth between requeued and started at every poll after a controller restart,
        its attempts cancelled and handed to it again each time)."""
        if v.incarnation is None and v.agent_started is None:
            return bool(found.started or found.results or found.agent)
        beat = found.heartbeat or found.agent
        if not beat:
            return False
        inc, started = beat.get("incarnation"), _number(beat.get("started"))
        if v.incarnation is not None and inc:
            return inc != v.incarnation
        return started is not None and v.agent_started is not None and abs(started - v.agent_started) > 1e-6

    def _state_note(self, v: PilotView, state: str, phase: str, t: float) -> None:
        """A job state in none of resel's tables concludes nothing: keep polling, say so."""
        key = f"state:p{v.pilot}"
        if phase == "unknown":
            if v.unknown_state != state:
                log.warning("run %s: pilot %s (job %s on %s) is in job state %s, which resel does not know; "
                            "it is not taken as ended, and polled on", self.run_id, v.pilot, v.job_id, v.site, state)
            v.unknown_state = state
            self._note(v.site, key, "job-state", t, f"pilot {v.pilot}: job {v.job_id} in state {state}, "
                                                    "which resel does not know: still polled")
        elif v.unknown_state is not None:
            v.unknown_state = None
            self.views[v.site].notes.pop(key, None)
            live_notes.drop(self.db, self.run_id, v.site, key)

    def _pending_note(self, v: PilotView, info: Any, phase: str, t: float) -> None:
        """Why the scheduler keeps a pilot waiting, in its own words (its backend reads a
        placeholder for none as no reason), for the live table and ``resel status``; written
        when it changes, dropped once the pilot leaves the queue."""
        key = f"pending:p{v.pilot}"
        reason = info.reason if phase == "pending" and info is not None else None
        if not reason:
            if self._pending_reasons.pop(v.pilot, None) is not None:
                self.views[v.site].notes.pop(key, None)
                live_notes.drop(self.db, self.run_id, v.site, key)
            return
        if self._pending_reasons.get(v.pilot) != reason:
            self._pending_reasons[v.pilot] = reason
            self._note(v.site, key, "pending-reason", t, f"pilot {v.pilot}: job {v.job_id} pending ({reason})")

    def _incarnation(self, t: float, v: PilotView, beat: dict) -> list[Event]:
        """The heartbeat names the agent running the pilot: a new one means it was relaunched
        under the same job (Slurm relaunching a batch script, a requeue seen too late)."""
        inc = beat.get("incarnation") or f"{beat.get('pid')}@{beat.get('started')}"
        started = _number(beat.get("started"))
        if v.incarnation is None:
            relaunched = (v.agent_started is not None and started is not None
                          and abs(started - v.agent_started) > 1e-6)
        else:
            relaunched = inc != v.incarnation
        out: list[Event] = []
        if relaunched:
            self._note(v.site, f"relaunch:p{v.pilot}:{inc}", "relaunch", t,
                       f"pilot {v.pilot}: agent relaunched under job {v.job_id} at {t:.0f} s")
            log.warning("run %s: pilot %s (job %s on %s) runs a new agent (incarnation %s): what the previous one "
                        "ran is lost", self.run_id, v.pilot, v.job_id, v.site, inc)
            for (task, attempt), by in list(v.parked.items()):
                if by != inc:
                    out.extend(self._lost(t, task, attempt, "agent relaunched"))
                    del v.parked[(task, attempt)]
            v.seen.discard("agent.json")       # read the new agent's registration next poll
        v.incarnation = inc
        if started is not None and started != v.agent_started:
            v.agent_started = started
            self._pilot_row(v, agent_started=started)
        return out

    def _rejected(self, t: float, v: PilotView, beat: dict) -> None:
        """Files the agent refused to act on (not a regular file of its user: someone else's
        inbox file, a planted link; resel/shipped/agent.py) are shown per site, never run: someone may
        be trying to run code as you, or the work directory was open before."""
        count = beat.get("rejected")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            return
        key = f"rejected:p{v.pilot}"
        words = (f"pilot {v.pilot}: the agent refused {count} file(s) that are not your own "
                 f"(listed in p{v.pilot}/rejected.json; see docs/security.md)")
        if self.views[v.site].notes.get(key) != words:
            log.warning("run %s, site %s: %s", self.run_id, v.site, words)
            self._note(v.site, key, "rejected", t, words)

    def _lost(self, t: float, task: int, attempt: int, reason: str) -> list[Event]:
        if ("TaskLost", task, attempt) in self.consumed:
            return []
        self.consumed.add(("TaskLost", task, attempt))
        return [TaskLost(time=t, task=task, attempt=attempt, reason=reason)]

    def _file_events(self, t: float, v: PilotView, found: PilotFiles) -> list[Event]:
        """The agent's records in the order its clock saw them (a slot freed, then taken)."""
        records = [(float(r["time"]), 1, "started", r) for r in found.started]
        records += [(float(r["end"] if r.get("end") is not None else r.get("start") or 0.0), 0, "results", r)
                    for r in found.results]
        records.sort(key=lambda item: item[:2])
        out: list[Event] = []
        for _stamp, _order, sub, rec in records:
            task, attempt = rec["task"], rec["attempt"]
            why = self._foreign(task, attempt)
            if why:
                self._bad_record(v.site, f"p{v.pilot}/{sub}/{task_key(task, attempt)}.json", why, t)
                continue
            if sub == "started":
                self._attempt_row(task, attempt, v, {"start": rec.get("time"), "host": rec.get("host")})
                if ("TaskStarted", task, attempt) not in self.consumed:
                    self.consumed.add(("TaskStarted", task, attempt))
                    out.append(TaskStarted(time=t, task=task, attempt=attempt))
                continue
            outcome = rec["outcome"]
            outputs = rec.get("outputs") if self.output_specs else None
            self._attempt_row(task, attempt, v, {
                "start": rec.get("start"), "end": rec.get("end"), "host": rec.get("host"),
                "exit_code": rec.get("exit_code"), "outcome": outcome, "reason": rec.get("reason"),
                "perf": json.dumps(rec.get("perf")) if rec.get("perf") is not None else None,
                "stdout_tail": rec.get("stdout_tail"), "stderr_tail": rec.get("stderr_tail"),
                "outputs": json.dumps(outputs) if outputs is not None else None})
            if rec.get("refused"):
                self._note(v.site, f"refused:{task_key(task, attempt)}", "refused-output", t,
                           f"task {task} attempt {attempt}: refused to send "
                           + ", ".join(f"{r['name']} ({r['why']})" for r in rec["refused"][:5]))
            if outcome == "failed" and str(rec.get("reason") or "").startswith("input ") and self.manifest:
                # the site's copy was missing or wrong: send the task's inputs again next time
                self.site_data(v.site).forget(f.sha256 for f in self.manifest.inputs(task))
            if outcome == "done" and self.engine.learning:   # the agent's own clock, for the learning
                seconds = _number(rec.get("end")) is not None and _number(rec.get("start")) is not None
                if seconds and ("TaskMeasured", task, attempt) not in self.consumed:
                    self.consumed.add(("TaskMeasured", task, attempt))
                    out.append(TaskMeasured(time=t, task=task, attempt=attempt,
                                            seconds=max(0.0, float(rec["end"]) - float(rec["start"]))))
            if outcome == "done" and self.output_specs:
                kind, event = "TaskFetching", TaskFetching(time=t, task=task, attempt=attempt)
                self._deliveries[(task, attempt)] = (v.pilot, v.site, list(outputs or []))
            elif outcome == "done":
                kind, event = "TaskFinished", TaskFinished(time=t, task=task, attempt=attempt)
            elif outcome == "failed":
                kind, event = "TaskFailed", TaskFailed(time=t, task=task, attempt=attempt,
                                                       reason=str(rec.get("reason") or f"exit {rec.get('exit_code')}"))
            elif outcome == "lost":
                by = rec.get("incarnation")
                if rec.get("reason") in LOST_WITH_AGENT or (by and v.incarnation and by != v.incarnation):
                    out.extend(self._lost(t, task, attempt, str(rec.get("reason") or "lost")))
                else:   # its agent is ending (walltime, signal): PilotEnded or PilotRequeued says so
                    v.parked[(task, attempt)] = by
                continue
            elif outcome == "cancelled" and rec.get("reason") == "withdrawn":
                # the agent gave a handed-ahead attempt back unstarted (agent protocol 4)
                kind, event = "TaskWithdrawn", TaskWithdrawn(time=t, task=task, attempt=attempt)
            else:
                continue   # cancelled: the engine asked for it
            if (kind, task, attempt) not in self.consumed:
                self.consumed.add((kind, task, attempt))
                out.append(event)
        return out

    def _foreign(self, task: int, attempt: int) -> str | None:
        """Why a well-formed record names no attempt of this run, or None."""
        if task >= len(self.engine.tasks):
            return f"no task {task} in this run (it has {len(self.engine.tasks)})"
        if not 1 <= attempt <= self.engine.tasks[task].attempt:
            return f"task {task} has no attempt {attempt} (attempts so far: {self.engine.tasks[task].attempt})"
        return None

    def _bad_record(self, site: str, path: str, why: str, t: float) -> None:
        key = f"bad:{path}"
        if key not in self.views[site].notes:
            self.views[site].notes[key] = why
            self.views[site].bad_records += 1
            log.warning("run %s, site %s: skipped %s: %s", self.run_id, site, path, why)
        live_notes.put(self.db, self.run_id, site, key, "bad-record", t, f"{path}: {why}")

    def _note(self, site: str, key: str, kind: str, t: float, words: str) -> None:
        self.views[site].notes[key] = words
        live_notes.put(self.db, self.run_id, site, key, kind, t, words)

    # ------------------------------------------------------------------ record, then act
    def feed(self, events: list[Event], *, execute: bool = True) -> None:
        """Record each event and its actions, then carry the actions out, in order.

        All events of one poll are applied before any action runs, so an action that a later
        event made moot (a pilot withdrawn because its site was lost) is skipped, not done.
        Without ``execute`` (a run being cancelled) the actions are recorded as done.
        """
        todo: list[tuple[int, Action]] = []
        for event in events:
            with self.db.atomic():
                self._record(event.time, event, None)
                actions = self.engine.handle(event)
                seqs = [self._record(journal.row_time(a, event.time), a,
                                     None if isinstance(a, RECORD_ONLY) or not execute else 0) for a in actions]
                for seq, a in zip(seqs, actions):
                    if isinstance(a, Decision):
                        self.db["decisions"].insert({"run_id": self.run_id, "seq": seq, **json_clean(
                            dataclasses.asdict(a))}, replace=True)
                    elif not execute:
                        journal.mark(self.db, self.run_id, seq, done=True, error="run cancelled")
            if execute:
                todo += [(seq, a) for seq, a in zip(seqs, actions) if not isinstance(a, RECORD_ONLY)]
            if isinstance(event, TaskFetching) and execute:
                self._fetch(event.task, event.attempt)
        for seq, action in todo:
            self._execute(seq, action)

    def _record(self, time_: float, record: Event | Action, done: int | None) -> int:
        """Journal one event or action as the run's next row; its seq is the key it is marked
        done by (:mod:`resel.journal`)."""
        seq = self.seq
        self.seq += 1
        journal.append(self.db, self.run_id, seq, time_, record, done)
        return seq

    def _mark(self, seq: int, error: str | None = None, *, done: bool | None = None) -> None:
        journal.mark(self.db, self.run_id, seq, done=(error is None) if done is None else done, error=error)

    def _execute(self, seq: int, action: Action) -> None:
        """Carry out one recorded action: at once if it needs no site, else on its site's thread."""
        if isinstance(action, SetTimer):
            heapq.heappush(self.timers, (action.at, action.task, action.attempt, action.site or ""))
            self._mark(seq)
            return
        if isinstance(action, BagDone):
            self.finished = True
            self._mark(seq)
            return
        try:
            job = self._prepare(action)
        except Exception as exc:   # noqa: BLE001 - e.g. a command template that cannot be filled
            self.feed(self._failed_action(seq, action, exc))
            return
        if job is None:
            self._mark(seq)
            return
        # an inbox or cancel file goes on the file worker, so it never waits for a scheduler
        # call — unless its pilot's submission (which makes the pilot's directory) is not over:
        # then after it, on the scheduler's worker (a pending pilot gets its first tasks at once)
        workers = self.workers
        if isinstance(action, (DispatchTask, CancelTask, WithdrawTask)):
            view = self.pilots.get(action.pilot)
            workers = self.exchange if view is not None and view.job_id is not None else self.workers
        workers[action.site].submit("act", (seq, action), job)

    def _prepare(self, action: Action) -> Callable[[], Any] | None:
        """What the site must do for an action (run on its thread), or None if nothing."""
        if isinstance(action, SubmitPilot):
            view = self.pilots.setdefault(action.pilot, PilotView(action.pilot, action.site, action.cores,
                                                                 action.walltime))
            if view.state is PilotState.CANCELLED:
                return None
            if self.engine.pilots[action.pilot].state.final:   # withdrawn before we got to it
                view.state = PilotState.CANCELLED
                self._pilot_row(view, ended=self.now(), reason="withdrawn before submission")
                return None

            shared = self._pilot_inputs(action.site)
            data = self.site_data(action.site) if shared else None
            urls = self._pilot_urls(action.site)

            def submit() -> list:
                ps = self.site(action.site)
                sent = []
                if view.job_id is None:
                    view.job_id = ps.find_pilot_job(self.run_key, action.pilot)   # submitted before a crash?
                if view.job_id is None:
                    inputs: tuple[str, ...] = urls      # a pool's pilot carries the bag's URL inputs
                    if data is not None:       # and its shared inputs
                        sent = data.stage(shared)
                        inputs = tuple(data.cache_path(f.sha256) for f in shared) + urls
                    view.job_id = ps.submit_pilot(self.run_key, action.pilot, action.cores, action.walltime,
                                                  self.bag.cores_per_task, inputs=inputs)
                return sent
            return submit
        if isinstance(action, DispatchTask):
            rec = self.engine.tasks[action.task] if 0 <= action.task < len(self.engine.tasks) else None
            if rec is None or rec.attempt != action.attempt or rec.pilot != action.pilot:
                return None   # taken back (withdrawn) or moved before it was carried out: never sent
            command = self.bag.command_for(action.task, action.site)
            env = {"RESEL_RUN": str(self.run_id), "RESEL_SITE": action.site}
            perf = self.options.perf or self.bag.measured(action.task)
            files = self.manifest.inputs(action.task) if self.manifest is not None else ()
            data = self.site_data(action.site) if files else None
            outputs = self.output_specs

            def dispatch() -> list:
                # the task's inputs go to the site now that it is bound there (docs/data.md)
                sent = data.stage(files) if data is not None else []
                ps = self.site(action.site)
                ps.dispatch(
                    self.run_key, action.pilot, action.task, action.attempt, command, env=env, perf=perf,
                    timeout=self.options.task_timeout,
                    inputs=[{"name": f.name, "sha256": f.sha256, "size": f.size} for f in files]
                    + ps.url_inbox_inputs(self.bag.data.urls if self.bag.data else ()), outputs=outputs)
                return sent
            return dispatch
        if isinstance(action, CancelTask):
            return lambda: self.site(action.site).cancel_task(self.run_key, action.pilot, action.task, action.attempt)
        if isinstance(action, WithdrawTask):
            return lambda: self.site(action.site).withdraw_task(self.run_key, action.pilot, action.task, action.attempt)
        if isinstance(action, CancelPilot):
            view = self.pilots.get(action.pilot)
            if view is None or view.state.final:
                return None

            def stop() -> str:
                if view.job_id is None:   # never submitted (or the submission failed)
                    return "cancelled before submission"
                self.site(action.site).stop_pilot(self.run_key, action.pilot, view.job_id)
                return "cancelled"
            return stop
        return None

    def _acted(self, seq: int, action: Action, report: Report) -> list[Event]:
        """An action's site work is over: record it done, or decide what its failure means."""
        if report.error is not None:
            return self._failed_action(seq, action, report.error)
        events: list[Event] = []
        if isinstance(action, (SubmitPilot, DispatchTask)) and report.result:
            self._sent(action.site, report.result)
            events = self._measured(action.site, "in", [(x.size, x.seconds) for x in report.result])
        if isinstance(action, WithdrawTask) and report.result == "withdrawn" \
                and ("TaskWithdrawn", action.task, action.attempt) not in self.consumed:
            # the inbox file was renamed away before the agent claimed it: it can never start
            self.consumed.add(("TaskWithdrawn", action.task, action.attempt))
            events.append(TaskWithdrawn(time=self.now(), task=action.task, attempt=action.attempt))
        if isinstance(action, SubmitPilot):
            view = self.pilots[action.pilot]
            self._pilot_row(view, submitted=self.now())
        elif isinstance(action, CancelPilot):
            view = self.pilots[action.pilot]
            if not view.state.final:
                view.state = PilotState.CANCELLED
            self._pilot_row(view, ended=self.now(), reason=report.result)
        self._mark(seq)
        return events

    def _failed_action(self, seq: int, action: Action, exc: BaseException) -> list[Event]:
        """A transient failure is retried next poll; any other is acted on now: a refused
        pilot gives its site up, a task that cannot be dispatched fails with the reason."""
        why = _describe(exc)
        site = getattr(action, "site", None)
        if is_transient(exc):
            self._mark(seq, why)
            self.undone.append((seq, action, self.now() + self.options.poll))
            if site in self.views:
                self.views[site].error = why
            return []
        log.warning("run %s: %s failed for good: %s", self.run_id, type(action).__name__, why)
        self._mark(seq, why, done=True)
        if isinstance(action, SubmitPilot):
            view = self.pilots[action.pilot]
            view.state, view.refused = PilotState.CANCELLED, True
            self._pilot_row(view, ended=self.now(), reason=why)
            self.views[action.site].error = why
            return [SiteLost(time=self.now(), site=action.site, reason=why)]
        if isinstance(action, DispatchTask):
            if ("TaskFailed", action.task, action.attempt) in self.consumed:
                return []
            self.consumed.add(("TaskFailed", action.task, action.attempt))
            self._attempt_row(action.task, action.attempt, self.pilots.get(action.pilot) or
                              PilotView(action.pilot, action.site),
                              {"outcome": "failed", "reason": f"dispatch failed: {why}"})
            return [TaskFailed(time=self.now(), task=action.task, attempt=action.attempt,
                               reason=f"dispatch failed: {why}")]
        return []   # a cancel that cannot be written: the stop at the end still ends everything

    def _retry_undone(self, t: float) -> None:
        due = [(s, a) for s, a, at in self.undone if at <= t]
        self.undone = [(s, a, at) for s, a, at in self.undone if at > t]
        for seq, action in due:
            self._execute(seq, action)
        # a site that keeps refusing for too long is given up
        for seq, action, _at in self.undone:
            site = getattr(action, "site", None)
            view = self.views.get(site) if site else None
            if view is not None:
                view.failing_since = view.failing_since or t
                if t - view.failing_since > self.options.site_timeout and site not in self.engine.lost_sites:
                    self.feed([SiteLost(time=t, site=site, reason=view.error or "actions keep failing")])

    # ------------------------------------------------------------------ task data (docs/data.md)
    def _pilot_inputs(self, site: str) -> tuple:
        """The bag's shared inputs, which a pool's pilot carries (a shared filesystem needs none)."""
        spec = next((s for s in self.sites if s.name == site), None)
        if self.manifest is None or spec is None or spec.kind != "htcondor":
            return ()
        return self.manifest.shared_files

    def _pilot_urls(self, site: str) -> tuple[str, ...]:
        """The bag's URL inputs, which a pool's pilot carries for the pool's transfer plugins to
        fetch; elsewhere resel fetches none (the note at the run's start says so)."""
        spec = next((s for s in self.sites if s.name == site), None)
        if self.bag.data is None or spec is None or spec.kind != "htcondor":
            return ()
        return tuple(i.pattern for i in self.bag.data.urls)

    def _url_notes(self, t: float) -> None:
        """Say, per site, what becomes of the bag's URL inputs there (resel status shows it)."""
        urls = [i.pattern for i in self.bag.data.urls] if self.bag.data else []
        for spec in self.sites:
            words = url_inputs_note(spec, urls) if spec.access is not None else None
            if words:
                self._note(spec.name, "url-inputs", "data", t, words)

    def _sent(self, site: str, sent: list) -> None:
        """Record the inputs a site's cache received (each once per site and run)."""
        now = self.now()
        self.db["site_files"].upsert_all(
            [{"run_id": self.run_id, "site": site, "sha256": x.sha256, "size": x.size, "sent": now,
              "seconds": x.seconds} for x in sent], pk=("run_id", "site", "sha256"))

    def _fetch(self, task: int, attempt: int) -> None:
        """Bring an attempt's outputs home, on its site's thread — if the engine still wants
        them (a superseded or duplicate attempt's outputs are never fetched)."""
        rec = self.engine.tasks[task] if 0 <= task < len(self.engine.tasks) else None
        entry = self._deliveries.get((task, attempt))
        if rec is None or entry is None or rec.attempt != attempt or rec.state is not TaskState.FETCHING:
            self._deliveries.pop((task, attempt), None)
            return
        pilot, site, outputs = entry
        dest = os.path.join(self.results, task_folder(task, self.bag.count)) if self.results else None
        if dest is None:
            raise ReselError(f"run {self.run_id} has outputs to fetch but no results folder (stored before task data?)")
        data = self.site_data(site)
        self.exchange[site].submit("fetch", (task, attempt), lambda: data.fetch(pilot, task, attempt, outputs, dest))

    def _fetched(self, report: Report, t: float) -> list[Event]:
        task, attempt = report.tag
        pilot, site, outputs = self._deliveries.get((task, attempt), (None, report.site, []))
        if report.error is not None:
            exc = report.error
            if isinstance(exc, (ResultsDiskFull, ResultsFolderRefused)):
                raise exc                       # the coordinator stops; nothing is lost (docs/data.md)
            if isinstance(exc, OutputsNotDelivered) or not is_transient(exc):
                self._deliveries.pop((task, attempt), None)
                log.warning("run %s: %s", self.run_id, _describe(exc))
                return [TaskUndelivered(time=t, task=task, attempt=attempt, reason=_describe(exc))]
            self.views[site].error = _describe(exc)       # the link dropped: try again next poll
            self._fetch_retry.append((t + self.options.poll, task, attempt))
            return []
        with self.db.atomic():
            self.db["task_outputs"].upsert_all(
                [{"run_id": self.run_id, "task": task, "attempt": attempt, "site": site, "name": f.name,
                  "size": f.size, "sha256": f.sha256, "path": f.path, "fetched": t, "seconds": f.seconds}
                 for f in report.result], pk=("run_id", "task", "name"))
        self._deliveries.pop((task, attempt), None)
        if not self.options.keep_remote and pilot is not None:
            data = self.site_data(site)
            self.exchange[site].submit("clean", (task, attempt),
                                      lambda: data.clean(pilot, task, attempt, len(outputs)))
        self._delivered_bytes.append(sum(f.size for f in report.result))
        return ([TaskDelivered(time=t, task=task, attempt=attempt)] + self._outputs_measured(t)
                + self._measured(site, "out", [(f.size, f.seconds) for f in report.result if f.seconds > 0]))

    def _outputs_measured(self, t: float) -> list[Event]:
        """The mean size of a task's outputs, from its deliveries: an OutputsMeasured event once
        three tasks are home and whenever the mean drifts by more than a quarter from the
        engine's figure (the bag's ``output_mb`` at first, or nothing)."""
        model = self.engine.data_model
        if model is None or len(self._delivered_bytes) < 3:
            return []
        mean = sum(self._delivered_bytes) / len(self._delivered_bytes)
        if model.out_bytes and abs(mean - model.out_bytes) <= 0.25 * model.out_bytes:
            return []
        if not model.out_bytes and not mean:
            return []
        return [OutputsMeasured(time=t, out_bytes=mean)]

    def _measured(self, site: str, way: str, moved: list[tuple[int, float]]) -> list[Event]:
        """The run's own transfers measure a site's bandwidth (docs/data.md): all bytes moved
        one way over all the seconds they took, since the run began (one copy's figure swings
        with the caches; the run's total settles). Once ``MEASURE_BYTES`` more moved since the
        engine last heard of it, a figure that differs from the engine's by more than a quarter
        becomes a BandwidthMeasured event (journaled, so a resumed run prices alike)."""
        if self.engine.data_model is None or not moved:
            return []
        acc = self._moved.setdefault((site, way), [0.0, 0.0, 0.0])   # bytes, seconds, bytes at the last event
        acc[0] += sum(b for b, _ in moved)
        acc[1] += sum(s for _, s in moved)
        if acc[0] - acc[2] < MEASURE_BYTES or acc[1] <= 0:
            return []
        mbps = acc[0] / 1e6 / acc[1]
        bw = self.engine.data_model.bandwidth_of(site)
        now = bw.inbound if way == "in" else bw.outbound
        if abs(mbps - now) <= 0.25 * now:
            return []
        acc[2] = acc[0]
        log.info("run %s: %s moves %.1f MB/s %s (was priced at %.1f)", self.run_id, site, mbps, way, now)
        return [BandwidthMeasured(time=self.now(), site=site, **({"inbound": mbps} if way == "in" else {"outbound": mbps}))]

    def _retry_fetches(self, t: float) -> None:
        due = [(task, attempt) for at, task, attempt in self._fetch_retry if at <= t]
        self._fetch_retry = [x for x in self._fetch_retry if x[0] > t]
        for task, attempt in due:
            self._fetch(task, attempt)

    # ------------------------------------------------------------------ rows
    def _pilot_row(self, view: PilotView, **cols: Any) -> None:
        row = {"run_id": self.run_id, "pilot": view.pilot, "site": view.site, "job_id": view.job_id,
               "cores": view.cores, "walltime": view.walltime, "state": view.stored}
        row.update({k: v for k, v in cols.items() if v is not None})
        self.db["live_pilots"].upsert(row, pk=("run_id", "pilot"), alter=False)

    def _attempt_row(self, task: int, attempt: int, v: PilotView, cols: dict) -> None:
        row = {"run_id": self.run_id, "task": task, "attempt": attempt, "site": v.site, "pilot": v.pilot}
        row.update({k: val for k, val in cols.items() if val is not None})
        self.db["attempts"].upsert(row, pk=("run_id", "task", "attempt"))

    # ------------------------------------------------------------------ ending
    def _cancel_requested(self) -> bool:
        rows = list(self.db.query("select status from runs where id = ?", [self.run_id]))
        return bool(rows) and rows[0]["status"] == "cancelling"

    def _lease(self, force: bool = False, state: str = "running") -> None:
        """Tell ``resel cancel`` (another process) that this coordinator drives the run."""
        now = time.monotonic()
        if force or now - self._last_lease >= 1.0:
            self._last_lease = now
            live_notes.hold(self.db, self.run_id, self.now(), state)

    def _each_site(self, kind: str, job: Callable[[str], Any], timeout: float,
                   names: list[str] | None = None) -> dict[str, Report]:
        names = [s.name for s in self.sites] if names is None else names
        return self._on_sites(kind, {n: (lambda n=n: job(n)) for n in names}, timeout)

    def _cleanup(self, wait: float = 30.0) -> list[str]:
        """Cancel every batch job of this run still listed anywhere; returns what is left.

        Each site is asked on its own thread; a site that does not answer within ``wait``
        seconds is reported as left, it does not hold up the others.
        """
        names = [s.name for s in self.sites
                 if not (s.name in self.engine.lost_sites and self.views[s.name].error)]

        caches = {n: d for n, d in self.data.items() if not self.options.keep_remote}

        def clean(name: str) -> list[str]:
            ps = self.site(name)
            deadline = time.monotonic() + wait
            while True:
                jobs = ps.run_jobs(self.run_key)
                live = [j for j, i in jobs.items() if job_phase(i.state) in ("running", "pending", "unknown")]
                if not live:
                    if name in caches:     # no pilot reads the run's inputs any more
                        ps.transport.remove_tree(caches[name].cache_dir)
                    return []
                ps.scheduler.cancel(live)
                if time.monotonic() > deadline:
                    return [f"{name}:{j}" for j in live]
                time.sleep(1.0)

        answers = self._each_site("cleanup", clean, wait + 10.0, names)
        left: list[str] = []
        for name in names:
            report = answers.get(name)
            if report is None:
                left.append(f"{name}: no answer within {wait + 10.0:g} s")
            elif report.error is not None:
                left.append(f"{name}: {_describe(report.error)}")
            else:
                left += report.result
        return left

    def _last_read(self, wait: float = 30.0) -> None:
        """The bag is done and its pilots are stopped: what their agents wrote since the last
        read — an attempt that ended as the bag did, a moved task's duplicate, the attempts of a
        pilot seen back in the queue while its agent still ran — goes into the store's attempts,
        so the store holds every result the agents wrote. No event: the engine is done. A site
        that does not answer within ``wait`` seconds is left (logged)."""
        by_site: dict[str, list[PilotView]] = {}
        for v in self.pilots.values():
            if v.job_id and not (v.site in self.engine.lost_sites and self.views[v.site].error):
                by_site.setdefault(v.site, []).append(v)
        t = self.now()
        for v, found in self._read_pilots("last-read", by_site, wait):
            self._file_events(t, v, found)                         # the rows; the events are moot
        # an agent stopped with its pilot writes its running attempts' results (``lost``) as it
        # exits, which may be after the read above: read again, briefly, while an attempt of the
        # run has no outcome yet (an agent killed outright never writes one: its row stays open)
        deadline = time.monotonic() + min(wait, 10.0)
        while self._open_attempts() and time.monotonic() < deadline:
            time.sleep(0.5)
            for v, found in self._read_pilots("last-read", by_site, wait):
                self._file_events(self.now(), v, found)

    def _open_attempts(self) -> int:
        """How many of the run's attempts the store holds without an outcome."""
        return next(iter(self.db.query("select count(*) as n from attempts where run_id = ? and outcome is null",
                                       [self.run_id])))["n"]

    def _read_pilots(self, kind: str, by_site: dict[str, list[PilotView]], wait: float, heartbeat: bool = False
                     ) -> list[tuple[PilotView, PilotFiles]]:
        """These pilots' new records, read on their sites' file workers (after any read already
        under way there), bad records noted; a site that does not answer within ``wait``
        seconds is logged and left out."""
        answers = self._on_sites(kind, {name: (lambda name=name: self._read(name, by_site[name], heartbeat))
                                        for name in by_site}, wait, self.exchange)
        out = []
        for name in by_site:
            report = answers.get(name)
            if report is None or report.error is not None:
                log.warning("run %s: could not read what the agents on %s wrote: %s", self.run_id, name,
                            "no answer" if report is None else _describe(report.error))
                continue
            for pilot, found in sorted(report.result.items()):
                for path, why in found.bad:
                    self._bad_record(name, path, why, self.now())
                out.append((self.pilots[pilot], found))
        return out

    def cancel_everything(self, wait: float = 30.0) -> list[str]:
        """Stop every pilot and task of the run (``resel cancel``); returns what could not be.

        The pilots are told to stop (a ``stop`` file, then the scheduler's cancel), the agents
        get up to ``wait`` seconds to write what their attempts came to, and those records are
        read: the store then agrees with the agents' files (an attempt that finished before
        the stop is done). The bag is then recorded as cancelled, so ``resel status`` shows no
        pilot and no task running.
        """
        live = [v for v in self.pilots.values() if not v.state.final and v.job_id]
        by_site: dict[str, list[PilotView]] = {}
        for v in self.pilots.values():
            if v.job_id:
                by_site.setdefault(v.site, []).append(v)

        def stop_and_wait(name: str) -> None:
            ps = self.site(name)
            mine = [v for v in live if v.site == name]
            for v in mine:
                ps.stop_pilot(self.run_key, v.pilot, v.job_id)
            deadline = time.monotonic() + wait
            while mine and time.monotonic() < deadline:
                jobs = ps.pilot_jobs([v.job_id for v in mine])
                mine = [v for v in mine if v.job_id in jobs and job_phase(jobs[v.job_id].state) != "final"
                        and not ps.transport.exists(f"{ps.pilot_dir(self.run_key, v.pilot)}/exit.json")]
                if mine:
                    time.sleep(0.5)

        self._each_site("drain", stop_and_wait, wait + 30.0, list(by_site))
        # the records are read on the file workers, after any read already under way there,
        # whose findings come first (whatever the scheduler did with the stop)
        collected = self._read_pilots("collect", by_site, 30.0)
        t = self.now()
        events: list[Event] = []
        for report in self._take_reports():
            if report.kind in ("read", "settle"):
                events.extend(self._on_report(report, t))
        for v, found in collected:
            events.extend(self._file_events(t, v, found))
        for v in live:
            v.state = PilotState.CANCELLED
            self._pilot_row(v, ended=t, reason="run cancelled")
        self.feed(events + [BagCancelled(time=t)], execute=False)
        self.cancelled = True
        left = self._cleanup()
        self._write_results("cancelled")
        self._lease(force=True, state="released")
        return left

    def _write_results(self, status: str) -> None:
        """Per-task T_q/T_x/TTC (from the agents' clocks where known) and the run's summary."""
        tasks = measured_tasks(self.engine, self.db, self.run_id, self.t0)
        names = [s.name for s in self.sites]
        m = workload_metrics(tasks, names, self.bag.cores_per_task)
        with self.db.atomic():
            self.db["tasks"].delete_where("run_id = ?", [self.run_id])
            self.db["tasks"].insert_all(({"run_id": self.run_id, **json_clean(dataclasses.asdict(tt))}
                                         for tt in task_times(tasks, names)), batch_size=1000)
            self.db["runs"].update(self.run_id, {
                "status": status, "ttc_wkd": m.ttc_wkd, "tx_wkd": m.tx_wkd, "tq_wkd": m.tq_wkd, "done": m.done,
                "failed": m.failed, "reassigned": m.reassigned, "restarts": m.restarts,
                "wasted_core_s": m.wasted_core_s, "per_site": to_json(m.per_site), "steps": self.seq})

    def site_notes(self) -> dict[str, "live_notes.SiteNotes"]:
        """What this coordinator noticed per site, as the live table shows it."""
        out = {}
        for name, view in self.views.items():
            out[name] = live_notes.SiteNotes(
                not_answering_since=view.failing_since, not_answering=view.error, bad_records=view.bad_records,
                lines=[words for key, words in view.notes.items() if not key.startswith("bad:")])
        return out

    def _all_workers(self) -> list[SiteWorker]:
        return [*self.workers.values(), *self.exchange.values()]

    def _stop_workers(self) -> None:
        for worker in self._all_workers():
            worker.stop()

    def close(self) -> None:
        self._stop_workers()
        for ps in self.psites.values():
            try:
                ps.transport.close()
            except Exception:   # noqa: BLE001
                pass


# ---------------------------------------------------------------------- helpers
def _data_model(bag: Bag, sites: list[Site], manifest: Manifest | None) -> dict | None:
    """What the engine prices for a run's task data (docs/engine.md, "Selection sees the data"):
    each task's own input bytes and the shared ones from the manifest, ``output_mb`` until
    outputs are seen, the sites file's bandwidths (the probe adds the missing ones)."""
    from resel.transfer import TransferModel, site_bandwidths
    if bag.data is None or not bag.data.moves_files:
        return None
    own = [sum(f.size for f in files if not manifest.is_shared(f)) for files in manifest.tasks] if manifest else []
    model = TransferModel.measured(sites, own_input_bytes=own, shared_bytes=manifest.shared_bytes if manifest else 0,
                                   output_bytes=(bag.data.output_mb or 0.0) * 1e6)
    if model is None:   # nothing priced yet (outputs of a size still unknown): the deliveries will say
        model = TransferModel(0.0, 0.0, 0.0, bandwidth=site_bandwidths(sites))
    return model.to_json()


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


def _number(value: Any) -> float | None:
    """A float from an agent's JSON, or None (agents on old Pythons may write strings)."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 300 else text
