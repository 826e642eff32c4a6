"""The live coordinator: the pure engine driven by real schedulers, crash-safe through SQLite.

One loop, as docs/architecture.md draws it: poll every site (concurrently: a slow site does
not hold up the others), turn what changed into engine events, **record each event and the
actions it produced in the store before carrying any of them out**, then carry them out. The
engine is deterministic given its seed and the events it saw, so a coordinator killed at any
instant resumes (:meth:`Coordinator.resume`) by replaying the recorded events into a fresh
engine and finishing the actions still marked undone; each action is idempotent or checked
first (a pilot is found again by its job name before it is submitted twice; an inbox file is
written atomically with the same content).

Times fed to the engine are seconds since the run started (``t0``) at the poll that saw the
change; the agents' own start/end stamps go to the ``attempts`` table and give the stored
T_q, T_x and TTC of each task.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlite_utils import Database

from resel.backends.pilotsite import NEVER_REASONS, PENDING_STATES, RUNNING_STATES, PilotFiles, PilotSite, task_key
from resel.domain import Bag, Site
from resel.engine import Engine
from resel.errors import ReselError, SchedulerError, SchedulerReplyError
from resel.events import (
    Action, BagDone, BagSubmitted, CancelPilot, CancelTask, Decision, DispatchTask, Event, PilotEnded,
    PilotStarted, SetTimer, SiteLost, SubmitPilot, TaskFailed, TaskFinished, TaskStarted, TimerFired,
)
from resel.metrics import task_times, workload_metrics
from resel.selection import Strategy
from resel.store import _clean, _now, to_json

EVENT_TYPES = {cls.__name__: cls for cls in (BagSubmitted, PilotStarted, PilotEnded, SiteLost, TaskStarted,
                                             TaskFinished, TaskFailed, TimerFired)}
ACTION_TYPES = {cls.__name__: cls for cls in (SubmitPilot, CancelPilot, DispatchTask, CancelTask, SetTimer,
                                              Decision, BagDone)}


@dataclass
class LiveOptions:
    """How a live run behaves; stored with the run so ``--resume`` behaves the same."""

    strategy: str = "model+reselect"
    seed: int = 0
    clock: str = "base"
    poll: float = 1.0
    perf: bool = False
    task_timeout: float | None = None
    #: a site whose scheduler cannot be reached for this long is given up (SiteLost)
    site_timeout: float = 600.0
    #: a pilot the scheduler stops listing is taken as ended after this many polls
    missing_polls: int = 2
    #: queue-aware strategy: which start estimate ranks the sites (resel.plan.SOURCES)
    estimate: str = "auto"
    quantile: float = 0.95
    confidence: float = 0.95
    #: the engine's T̂x rates (:meth:`resel.models.runtime.EngineRates.to_json`), stored so a
    #: resumed run decides with the same numbers; None: LIM with ``clock``
    rates: dict | None = None
    #: queue-aware split: minimise the P50 (point estimates) or the P90 finish (resel.plan.menu_waits)
    objective: str = "p50"

    def engine_rates(self):
        """The stored rates as the engine takes them (None: LIM)."""
        from resel.models.runtime import EngineRates
        return EngineRates.from_json(self.rates) if self.rates else None


@dataclass
class PilotView:
    """The coordinator's view of one pilot (the engine has its own)."""

    pilot: int
    site: str
    cores: int = 0
    walltime: float = 0.0
    job_id: str | None = None
    state: str = "pending"          # pending, running, ended, cancelled, failed
    missing: int = 0
    seen: set = field(default_factory=set)
    job_state: str = ""


@dataclass
class SiteView:
    """What the display shows per site besides the engine's counts."""

    error: str | None = None
    failing_since: float | None = None
    last_poll: float = 0.0


class Coordinator:
    """Drives one live run. Build it with :meth:`start` or :meth:`resume`, then :meth:`run`."""

    def __init__(self, db: Database, run_id: int, bag: Bag, sites: list[Site], options: LiveOptions,
                 run_key: str, t0: float, open_site: Callable[[Site], PilotSite], *,
                 clock: Callable[[], float] = time.time):
        self.db, self.run_id, self.bag, self.sites, self.options = db, run_id, bag, sites, options
        self.run_key, self.t0, self.clock = run_key, t0, clock
        self.engine = Engine(bag, sites, options.strategy, seed=options.seed, clock=options.clock,
                             rates=options.engine_rates())
        self._open_site = open_site
        self.psites: dict[str, PilotSite] = {}
        self.views = {s.name: SiteView() for s in sites}
        self.pilots: dict[int, PilotView] = {}
        self.timers: list[tuple[float, int, int]] = []
        self.consumed: set[tuple[str, int, int]] = set()
        self.undone: list[tuple[int, Action]] = []      # (seq, action) to retry
        self.seq = 0
        self.finished = False
        self.cancelled = False
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(sites)), thread_name_prefix="resel-site")

    # ------------------------------------------------------------------ construction
    @classmethod
    def start(cls, db: Database, bag: Bag, sites: list[Site], options: LiveOptions,
              open_site: Callable[[Site], PilotSite], *, bag_file: str = "", sites_file: str = "",
              clock: Callable[[], float] = time.time) -> "Coordinator":
        """Create the run in the store, check every site, and submit the bag to the engine."""
        t0 = clock()
        with db.atomic():
            run_id = db["runs"].insert({
                "created": _now(), "mode": "live", "bag": bag.name, "strategy": Strategy.parse(options.strategy).name,
                "size": bag.count, "seed": options.seed, "clock": options.clock, "status": "running", "t0": t0,
                "options": to_json(options), "sites": to_json(sites), "bag_spec": to_json(bag),
                "bag_file": bag_file, "sites_file": sites_file,
            }).last_pk
            run_key = f"r{run_id}-{secrets.token_hex(3)}"
            db["runs"].update(run_id, {"run_key": run_key})
        coord = cls(db, run_id, bag, sites, options, run_key, t0, open_site, clock=clock)
        failures, estimates, wait_menu = coord._preflight()
        coord.feed([BagSubmitted(time=0.0, wait_estimates=estimates or None, wait_menu=wait_menu)]
                   + [SiteLost(time=0.0, site=name, reason=why) for name, why in failures.items()])
        return coord

    @classmethod
    def resume(cls, db: Database, run_id: int, open_site: Callable[[Site], PilotSite], *,
               clock: Callable[[], float] = time.time, to_cancel: bool = False) -> "Coordinator":
        """Rebuild a run's engine from its recorded events and carry on where it stopped.

        With ``to_cancel`` (``resel cancel``) the run's status is left alone, so a coordinator
        still running it sees the cancel request.
        """
        run, bag, sites, options = load_live_run(db, run_id)
        if run["status"] in ("done", "cancelled") and not to_cancel:
            raise ReselError(f"run {run_id} is {run['status']}; nothing to resume")
        if run["status"] == "cancelling" and not to_cancel:
            raise ReselError(f"run {run_id} is being cancelled (`resel cancel {run_id}`); it cannot be resumed")
        coord = cls(db, run_id, bag, sites, options, run["run_key"], run["t0"], open_site, clock=clock)
        coord._replay()
        if not to_cancel:
            db["runs"].update(run_id, {"status": "running"})
        return coord

    def _replay(self) -> None:
        for row in self.db.query("select * from live_pilots where run_id = ?", [self.run_id]):
            self.pilots[row["pilot"]] = PilotView(row["pilot"], row["site"], row["cores"] or 0,
                                                  row["walltime"] or 0.0, row["job_id"], row["state"] or "pending")
        for row in self.db.query("select seq, kind, time, data, done from events where run_id = ? order by seq",
                                 [self.run_id]):
            self.seq = row["seq"] + 1
            data = json.loads(row["data"])
            if row["kind"] in EVENT_TYPES:
                event = EVENT_TYPES[row["kind"]](time=row["time"], **data)
                self.engine.handle(event)   # the actions it returns were recorded with it
                if isinstance(event, (TaskStarted, TaskFinished, TaskFailed)):
                    self.consumed.add((row["kind"], event.task, event.attempt))
            elif row["kind"] in ACTION_TYPES:
                action = _action_from(row["kind"], row["time"], data)
                if isinstance(action, SetTimer):
                    heapq.heappush(self.timers, (action.at, action.task, action.attempt))
                elif isinstance(action, SubmitPilot) and action.pilot not in self.pilots:
                    self.pilots[action.pilot] = PilotView(action.pilot, action.site, action.cores, action.walltime)
                elif isinstance(action, BagDone):
                    self.finished = True
                if row["done"] == 0:
                    self.undone.append((row["seq"], action))
        # results already read became events; mark their files seen so they are not re-read
        for (kind, task, attempt) in self.consumed:
            sub = "started" if kind == "TaskStarted" else "results"
            for view in self.pilots.values():
                view.seen.add(f"{sub}/{task_key(task, attempt)}.json")
        fired = {(r["data"]) for r in self.db.query(
            "select data from events where run_id = ? and kind = 'TimerFired'", [self.run_id])}
        self.timers = [t for t in self.timers
                       if json.dumps({"task": t[1], "attempt": t[2]}) not in fired]
        heapq.heapify(self.timers)

    # ------------------------------------------------------------------ sites
    def site(self, name: str) -> PilotSite:
        """The site's connection, opened on first use (SSH connects here)."""
        with self._lock:
            if name not in self.psites:
                spec = next(s for s in self.sites if s.name == name)
                self.psites[name] = self._open_site(spec)
            return self.psites[name]

    def _preflight(self) -> tuple[dict[str, str], dict[str, float], dict[str, list[float | None]] | None]:
        """Ask every site for its availability and, for the queue-aware strategy, when each of
        its pilot sizes would start (twin, history bound or the scheduler's answer: resel.plan).

        Returns the sites that failed (with why), the full pilot's start estimate per site, and
        the estimates of every size of :meth:`Engine.probe_menu` (None without queue-awareness).
        """
        want_estimates = Strategy.parse(self.options.strategy).base == "queue"
        history = wait_errors = None
        if want_estimates:
            from resel.models.conditioned import load_wait_errors
            from resel.models.history import load_history
            history = load_history(self.db)
            wait_errors = load_wait_errors(self.db) if self.options.objective == "p90" else None
        menu = self.engine.probe_menu()

        def check(i: int, site: Site) -> tuple[str, str | None, list[float | None] | None]:
            try:
                ps = self.site(site.name)
                ps.scheduler.availability()
                ps.ship_agent()
                if not (want_estimates and menu[i]):
                    return site.name, None, None
                from resel.plan import menu_waits, site_estimates
                opts = self.options
                row = site_estimates(ps.scheduler, site, menu[i], self.engine.tx[i], history,
                                     quantile=opts.quantile, confidence=opts.confidence)
                return site.name, None, menu_waits(row, opts.estimate, opts.objective, wait_errors)
            except Exception as exc:   # noqa: BLE001 - any failure disables this site only
                return site.name, _describe(exc), None

        failures, estimates, waits = {}, {}, {}
        for name, error, sizes in self._pool.map(lambda p: check(*p), enumerate(self.sites)):
            if error:
                failures[name] = error
                self.views[name].error = error
            elif sizes is not None:
                waits[name] = sizes
                if sizes[0] is not None:      # the full pilot comes first
                    estimates[name] = sizes[0]
        return failures, estimates, (waits if want_estimates else None)

    # ------------------------------------------------------------------ the loop
    def now(self) -> float:
        return self.clock() - self.t0

    def run(self, on_cycle: Callable[["Coordinator"], None] | None = None,
            max_time: float | None = None) -> None:
        """Poll until the bag is done (or cancelled); ``on_cycle`` refreshes a display."""
        try:
            while not self.finished:
                began = self.clock()
                self.step()
                if on_cycle:
                    on_cycle(self)
                if self.finished or self._cancel_requested():
                    break
                if max_time is not None and self.now() > max_time:
                    left = self.cancel_everything()
                    raise ReselError(f"run {self.run_id} did not finish within {max_time:g} s; cancelled it"
                                     + (f" (could not cancel: {', '.join(left)})" if left else ""))
                time.sleep(max(0.0, self.options.poll - (self.clock() - began)))
            if self.finished:
                self._cleanup()
                self._write_results("done")
            else:
                self.cancel_everything()
        finally:
            self._pool.shutdown(wait=False)

    def step(self) -> list[Event]:
        """One poll cycle: collect changes from every site, feed them, retry undone actions."""
        if self._cancel_requested():
            return []
        self._retry_undone()
        by_site: dict[str, list[PilotView]] = {}
        for view in self.pilots.values():
            if view.state in ("pending", "running") and view.job_id:
                by_site.setdefault(view.site, []).append(view)
        polled = list(self._pool.map(lambda item: self._poll_site(*item), by_site.items()))
        t = self.now()
        events: list[Event] = []
        for name, result in polled:
            view = self.views[name]
            if isinstance(result, Exception):
                view.error = _describe(result)
                view.failing_since = view.failing_since or t
                if t - view.failing_since > self.options.site_timeout and name not in self.engine.lost_sites:
                    events.append(SiteLost(time=t, site=name, reason=f"unreachable for "
                                           f"{self.options.site_timeout:g} s: {view.error}"))
                continue
            view.error, view.failing_since, view.last_poll = None, None, t
            events.extend(self._site_events(t, result))
        while self.timers and self.timers[0][0] <= t:
            _at, task, attempt = heapq.heappop(self.timers)
            events.append(TimerFired(time=t, task=task, attempt=attempt))
        self.feed(events)
        return events

    def _poll_site(self, name: str, views: list[PilotView]) -> tuple[str, Any]:
        """Runs in a worker thread: scheduler states first, then the pilots' files."""
        try:
            ps = self.site(name)
            jobs = ps.pilot_jobs([v.job_id for v in views])
            files: dict[int, PilotFiles] = {}
            for v in views:
                info = jobs.get(v.job_id)
                state = info.state if info is not None else "MISSING"
                if v.state == "running" or state not in PENDING_STATES:
                    files[v.pilot] = ps.collect(self.run_key, v.pilot, v.seen)
            return name, (views, jobs, files)
        except Exception as exc:   # noqa: BLE001 - reported per site; the others go on
            return name, exc

    def _site_events(self, t: float, result: tuple) -> list[Event]:
        views, jobs, files = result
        out: list[Event] = []
        for v in sorted(views, key=lambda v: v.pilot):
            info = jobs.get(v.job_id)
            state = info.state if info is not None else "MISSING"
            v.job_state = state
            if state in RUNNING_STATES and v.state == "pending":
                v.state = "running"
                out.append(PilotStarted(time=t, pilot=v.pilot))
                self._pilot_row(v, started=t)
            found = files.get(v.pilot)
            if found is not None:
                if v.state == "pending" and (found.started or found.results or found.agent):
                    v.state = "running"     # it ran and maybe ended between two polls
                    out.append(PilotStarted(time=t, pilot=v.pilot))
                    self._pilot_row(v, started=t)
                if found.agent:
                    self._pilot_row(v, host=found.agent.get("host"), cpu_model=found.agent.get("cpu_model"),
                                    cpu_mhz=_number(found.agent.get("cpu_mhz")),
                                    agent_started=_number(found.agent.get("started")))
                out.extend(self._file_events(t, v, found))
            ended = state not in RUNNING_STATES and state not in PENDING_STATES
            if state in PENDING_STATES and info is not None and info.reason in NEVER_REASONS:
                why = (f"the scheduler will never start pilot {v.pilot} ({v.cores} cores, {v.walltime:g} s): "
                       f"job {v.job_id} pending with reason {info.reason}")
                try:
                    self.site(v.site).stop_pilot(self.run_key, v.pilot, v.job_id)
                except Exception:   # noqa: BLE001 - cleanup at the end retries
                    pass
                v.state = "ended"
                out.append(PilotEnded(time=t, pilot=v.pilot, reason=info.reason))
                out.append(SiteLost(time=t, site=v.site, reason=why))
                self._pilot_row(v, ended=t, reason=info.reason)
                self.views[v.site].error = why
                continue
            if state == "MISSING":
                v.missing += 1
                ended = v.missing >= self.options.missing_polls
            else:
                v.missing = 0
            if ended:
                v.state = "ended"
                out.append(PilotEnded(time=t, pilot=v.pilot, reason=state.lower()))
                self._pilot_row(v, ended=t, reason=state)
        return out

    def _file_events(self, t: float, v: PilotView, found: PilotFiles) -> list[Event]:
        out: list[Event] = []
        for rec in found.started:
            task, attempt = int(rec["task"]), int(rec["attempt"])
            self._attempt_row(task, attempt, v, {"start": rec.get("time"), "host": rec.get("host")})
            if ("TaskStarted", task, attempt) not in self.consumed:
                self.consumed.add(("TaskStarted", task, attempt))
                out.append(TaskStarted(time=t, task=task, attempt=attempt))
        for rec in found.results:
            task, attempt = int(rec["task"]), int(rec["attempt"])
            outcome = rec.get("outcome")
            self._attempt_row(task, attempt, v, {
                "start": rec.get("start"), "end": rec.get("end"), "host": rec.get("host"),
                "exit_code": rec.get("exit_code"), "outcome": outcome, "reason": rec.get("reason"),
                "perf": json.dumps(rec.get("perf")) if rec.get("perf") is not None else None,
                "stdout_tail": rec.get("stdout_tail"), "stderr_tail": rec.get("stderr_tail")})
            if outcome == "done":
                kind, event = "TaskFinished", TaskFinished(time=t, task=task, attempt=attempt)
            elif outcome == "failed":
                kind, event = "TaskFailed", TaskFailed(time=t, task=task, attempt=attempt,
                                                       reason=str(rec.get("reason") or f"exit {rec.get('exit_code')}"))
            else:
                continue   # cancelled: the engine asked for it; lost: PilotEnded says so
            if (kind, task, attempt) not in self.consumed:
                self.consumed.add((kind, task, attempt))
                out.append(event)
        return out

    # ------------------------------------------------------------------ record, then act
    def feed(self, events: list[Event]) -> None:
        """Record each event and its actions, then carry the actions out, in order.

        All events of one poll are applied before any action runs, so an action that a later
        event made moot (a pilot withdrawn because its site was lost) is skipped, not done.
        """
        todo: list[tuple[int, Action]] = []
        for event in events:
            with self.db.atomic():
                self._record(type(event).__name__, event.time, event, None)
                actions = self.engine.handle(event)
                seqs = [self._record(type(a).__name__, _action_time(a, event.time), a,
                                     None if isinstance(a, Decision) else 0) for a in actions]
                for seq, a in zip(seqs, actions):
                    if isinstance(a, Decision):
                        self.db["decisions"].insert({"run_id": self.run_id, "seq": seq, **_clean(
                            dataclasses.asdict(a))}, replace=True)
            todo += [(seq, a) for seq, a in zip(seqs, actions) if not isinstance(a, Decision)]
        for seq, action in todo:
            self._execute(seq, action)

    def _record(self, kind: str, time_: float, record: Any, done: int | None) -> int:
        data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "time"}
        seq = self.seq
        self.seq += 1
        self.db["events"].insert({"run_id": self.run_id, "seq": seq, "time": time_, "kind": kind,
                                  "data": json.dumps(_clean(data)), "done": done})
        return seq

    def _mark(self, seq: int, error: str | None = None) -> None:
        self.db["events"].update((self.run_id, seq), {"done": 0 if error else 1, "error": error})

    def _execute(self, seq: int, action: Action) -> None:
        try:
            self._act(action)
        except Exception as exc:   # noqa: BLE001 - kept for a retry; the site may be back next poll
            self._mark(seq, _describe(exc))
            self.undone.append((seq, action))
            self._note_failure(action, exc)
            return
        self._mark(seq)

    def _act(self, action: Action) -> None:
        if isinstance(action, SubmitPilot):
            view = self.pilots.setdefault(action.pilot, PilotView(action.pilot, action.site, action.cores,
                                                                 action.walltime))
            if view.state in ("cancelled", "failed"):
                return
            if self.engine.pilots[action.pilot].state.final:   # withdrawn before we got to it
                view.state = "cancelled"
                self._pilot_row(view, ended=self.now(), reason="withdrawn before submission")
                return
            ps = self.site(action.site)
            if view.job_id is None:
                view.job_id = ps.find_pilot_job(self.run_key, action.pilot)   # submitted before a crash?
            if view.job_id is None:
                view.job_id = ps.submit_pilot(self.run_key, action.pilot, action.cores, action.walltime,
                                              self.bag.cores_per_task)
            self._pilot_row(view, submitted=self.now())
        elif isinstance(action, DispatchTask):
            self.site(action.site).dispatch(
                self.run_key, action.pilot, action.task, action.attempt, self.bag.command_for(action.task),
                env={"RESEL_RUN": str(self.run_id), "RESEL_SITE": action.site}, perf=self.options.perf or self.bag.measured(action.task),
                timeout=self.options.task_timeout)
        elif isinstance(action, CancelTask):
            self.site(action.site).cancel_task(self.run_key, action.pilot, action.task, action.attempt)
        elif isinstance(action, CancelPilot):
            view = self.pilots.get(action.pilot)
            if view is None or view.state in ("ended", "cancelled", "failed"):
                return
            if view.job_id is None:   # never submitted (or the submission failed)
                view.state = "cancelled"
                self._pilot_row(view, ended=self.now(), reason="cancelled before submission")
                return
            self.site(action.site).stop_pilot(self.run_key, action.pilot, view.job_id)
            view.state = "cancelled"
            self._pilot_row(view, ended=self.now(), reason="cancelled")
        elif isinstance(action, SetTimer):
            heapq.heappush(self.timers, (action.at, action.task, action.attempt))
        elif isinstance(action, BagDone):
            self.finished = True

    def _note_failure(self, action: Action, exc: Exception) -> None:
        """A submission the scheduler *rejected* disables the site; other failures are retried."""
        if isinstance(action, SubmitPilot) and isinstance(exc, SchedulerError) \
                and not isinstance(exc, SchedulerReplyError):
            view = self.pilots[action.pilot]
            view.state = "failed"
            self._pilot_row(view, ended=self.now(), reason=_describe(exc))
            self.undone = [(s, a) for s, a in self.undone if a is not action]
            self._mark_done_quietly(action)
            self.views[action.site].error = _describe(exc)
            self.feed([SiteLost(time=self.now(), site=action.site, reason=_describe(exc))])

    def _mark_done_quietly(self, action: Action) -> None:
        for row in self.db.query("select seq from events where run_id = ? and done = 0 and kind = ? and data = ?",
                                 [self.run_id, type(action).__name__, json.dumps(_clean(
                                     {f.name: getattr(action, f.name) for f in dataclasses.fields(action)
                                      if f.name != "time"}))]):
            self.db["events"].update((self.run_id, row["seq"]), {"done": 1})

    def _retry_undone(self) -> None:
        pending, self.undone = self.undone, []
        for seq, action in pending:
            self._execute(seq, action)
        # a site that keeps refusing for too long is given up
        t = self.now()
        for seq, action in self.undone:
            site = getattr(action, "site", None)
            view = self.views.get(site) if site else None
            if view is not None:
                view.failing_since = view.failing_since or t
                if t - view.failing_since > self.options.site_timeout and site not in self.engine.lost_sites:
                    self.feed([SiteLost(time=t, site=site, reason=view.error or "actions keep failing")])

    # ------------------------------------------------------------------ rows
    def _pilot_row(self, view: PilotView, **cols: Any) -> None:
        row = {"run_id": self.run_id, "pilot": view.pilot, "site": view.site, "job_id": view.job_id,
               "cores": view.cores, "walltime": view.walltime, "state": view.state}
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

    def _cleanup(self, wait: float = 30.0) -> list[str]:
        """Cancel every batch job of this run still listed anywhere; returns what is left."""
        deadline = self.clock() + wait
        left: list[str] = []
        while True:
            left = []
            for s in self.sites:
                if s.name in self.engine.lost_sites and self.views[s.name].error:
                    continue
                try:
                    ps = self.site(s.name)
                    jobs = ps.run_jobs(self.run_key)
                    live = [j for j, i in jobs.items() if i.state in RUNNING_STATES or i.state in PENDING_STATES]
                    if live:
                        ps.scheduler.cancel(live)
                        left += [f"{s.name}:{j}" for j in live]
                except Exception as exc:   # noqa: BLE001
                    left.append(f"{s.name}: {_describe(exc)}")
            if not left or self.clock() > deadline:
                return left
            time.sleep(1.0)

    def cancel_everything(self) -> list[str]:
        """Stop every pilot and task of the run (``resel cancel``); returns what could not be."""
        for view in self.pilots.values():
            if view.state in ("pending", "running") and view.job_id:
                try:
                    self.site(view.site).stop_pilot(self.run_key, view.pilot, view.job_id)
                    view.state = "cancelled"
                    self._pilot_row(view, ended=self.now(), reason="run cancelled")
                except Exception:   # noqa: BLE001 - _cleanup retries and reports
                    pass
        left = self._cleanup()
        self._write_results("cancelled")
        return left

    def _write_results(self, status: str) -> None:
        """Per-task T_q/T_x/TTC (from the agents' clocks where known) and the run's summary."""
        tasks = measured_tasks(self.engine, self.db, self.run_id, self.t0)
        names = [s.name for s in self.sites]
        m = workload_metrics(tasks, names, self.bag.cores_per_task)
        with self.db.atomic():
            self.db["tasks"].delete_where("run_id = ?", [self.run_id])
            self.db["tasks"].insert_all(({"run_id": self.run_id, **_clean(dataclasses.asdict(tt))}
                                         for tt in task_times(tasks, names)), batch_size=1000)
            self.db["runs"].update(self.run_id, {
                "status": status, "ttc_wkd": m.ttc_wkd, "tx_wkd": m.tx_wkd, "tq_wkd": m.tq_wkd, "done": m.done,
                "failed": m.failed, "reassigned": m.reassigned, "restarts": m.restarts,
                "wasted_core_s": m.wasted_core_s, "per_site": to_json(m.per_site), "steps": self.seq})

    def close(self) -> None:
        for ps in self.psites.values():
            try:
                ps.transport.close()
            except Exception:   # noqa: BLE001
                pass


# ---------------------------------------------------------------------- helpers
def load_live_run(db: Database, run_id: int) -> tuple[dict, Bag, list[Site], LiveOptions]:
    """A live run's row, bag, sites and options, as stored when it started.

    Raises:
        ReselError: no such run, or it is a simulated one.
    """
    rows = list(db.query("select * from runs where id = ?", [run_id]))
    if not rows:
        raise ReselError(f"no run {run_id} in the store (list them with `resel runs`)")
    run = rows[0]
    if run["mode"] != "live":
        raise ReselError(f"run {run_id} is a {run['mode']} run, not a live one: use `resel report {run_id}`")
    return (run, bag_from_json(json.loads(run["bag_spec"])), sites_from_json(json.loads(run["sites"])),
            LiveOptions(**json.loads(run["options"])))


@dataclass
class _MeasuredTask:
    id: int
    first_origin: int
    state: Any
    attempts: list


def measured_tasks(engine: Engine, db: Database, run_id: int, t0: float) -> list[_MeasuredTask]:
    """The engine's task records with each attempt's start/end replaced by the agent's clock."""
    stamps = {(r["task"], r["attempt"]): r for r in db.query(
        "select task, attempt, start, end from attempts where run_id = ?", [run_id])}
    out = []
    for task in engine.tasks:
        attempts = []
        for n, (site, pilot, start, end, outcome) in enumerate(task.attempts, start=1):
            row = stamps.get((task.id, n))
            if row and row["start"] is not None:
                start = row["start"] - t0
            if row and row["end"] is not None and end is not None:
                end = row["end"] - t0
            attempts.append([site, pilot, start, end, outcome])
        out.append(_MeasuredTask(task.id, task.first_origin, task.state, attempts))
    return out


def _number(value: Any) -> float | None:
    """A float from an agent's JSON, or None (agents on old Pythons may write strings)."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _action_time(action: Action, default: float) -> float:
    return getattr(action, "time", default) if isinstance(getattr(action, "time", None), float) else default


def _action_from(kind: str, time_: float, data: dict) -> Action:
    cls = ACTION_TYPES[kind]
    if "time" in {f.name for f in dataclasses.fields(cls)}:
        return cls(time=time_, **data)
    return cls(**data)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 300 else text


def bag_from_json(d: dict) -> Bag:
    from resel.domain import Profile
    return Bag(d["name"], d["command"], d["count"], d["cores_per_task"], Profile(**d["profile"]),
               d.get("isa", "x86"), d.get("source", "<store>"), d.get("perf_every", 0))


def sites_from_json(items: list[dict]) -> list[Site]:
    """Live sites back from their stored JSON (simulation-only fields are not needed live)."""
    from resel.domain import Access, Clock, PilotPolicy
    out = []
    for d in items:
        acc = d.get("access")
        access = None
        if acc:
            acc = dict(acc)
            acc["submit_args"] = tuple(acc.get("submit_args") or ())
            access = Access(**acc)
        out.append(Site(name=d["name"], kind=d["kind"], cores=d["cores"], clock=Clock(**d["clock"]),
                        kappa=d.get("kappa", 1.0), pilot=PilotPolicy(**d["pilot"]), isa=d.get("isa", "x86"),
                        reselect_target=d.get("reselect_target", True), access=access, notes=d.get("notes", "")))
    return out
