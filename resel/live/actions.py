"""Carrying out the recorded actions (the journal holds each before it runs): what a site must
do for one — submit a pilot (found again first after a crash), write an inbox, cancel or
withdraw file, stop a pilot — run on the site's threads; its answer recorded done, or retried
next poll if transient, or acted on (a refused pilot gives its site up, a task that cannot be
dispatched fails). The choice of thread is here: inbox and cancel files on the file worker."""

from __future__ import annotations

import heapq
import logging
import queue
import time
from typing import Any, Callable

from resel.events import (
    DISPATCH_FAILED, Action, BagDone, CancelPilot, CancelTask, DispatchTask, Event, SetTimer, SiteLost, SubmitPilot, TaskFailed,
    TaskWithdrawn, WithdrawTask,
)
from resel.live.errors import is_transient, describe
from resel.live.inbox_writes import InboxWrite
from resel.live.pilot_views import PilotView
from resel.live.sites import Report
from resel.states import PilotState


log = logging.getLogger("resel.live")


class Actions:
    """The recorded actions still to carry out, and what their answers mean."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord
        self.undone: list[tuple[int, Action, float]] = []      # (seq, action, not before) to retry
        #: (event, seq): an action whose outcome is an event is marked done in the transaction
        #: that records the event (:meth:`marks_for`), so a crash between the two leaves the
        #: action undone — redone on resume, where it answers the same (a withdrawal finds its
        #: marker) — never done with its event lost (an attempt the engine would wait on for ever)
        self.done_with: list[tuple[Event, int]] = []

    def finish(self, wait: float = 10.0) -> None:
        """The bag is done: let the last actions (the pilots' cancels) reach their sites and
        record them, for at most ``wait`` seconds (a dead site's are left undone)."""
        deadline = time.monotonic() + wait
        while any(w.pending for w in self.coord.all_workers()) and time.monotonic() < deadline:
            try:
                self.coord.held.append(self.coord.reports.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            for report in self.coord.take_reports():
                if report.kind == "act":
                    self.acted(*report.tag, report)
        for report in self.coord.take_reports():
            if report.kind == "act":
                self.acted(*report.tag, report)
        self.mark_left()

    def execute(self, seq: int, action: Action) -> None:
        """Carry out one recorded action: at once if it needs no site, else on its site's thread."""
        if isinstance(action, SetTimer):
            heapq.heappush(self.coord.timers, (action.at, action.task, action.attempt, action.site or ""))
            self.coord.mark(seq)
            return
        if isinstance(action, BagDone):
            self.coord.finished = True
            self.coord.mark(seq)
            return
        if isinstance(action, DispatchTask) and self.coord.takebacks.holds(action.task):
            self.coord.takebacks.park(seq, action)   # an attempt may still run on a withdrawn pilot
            return
        if isinstance(action, WithdrawTask) and self.coord.takebacks.holds(action.task):
            never_sent = self.coord.takebacks.unpark(action.task, action.attempt)
            if never_sent:   # asked back while parked: withdrawn for sure, at once (no agent will answer)
                with self.coord.turn():
                    for parked in never_sent:
                        self.coord.mark(parked)
                    self.coord.feed(self.acted(seq, action, Report(action.site, "act", (seq, action),
                                                                   result="withdrawn")))
                return
        try:
            job = self.prepare(action, seq)
        except Exception as exc:   # noqa: BLE001 - e.g. a command template that cannot be filled
            self.coord.feed(self.failed(seq, action, exc))
            return
        if job is None:
            self.coord.mark(seq)
            return
        # an inbox or cancel file goes on the file worker, so it never waits for a scheduler
        # call — unless its pilot's submission (which makes the pilot's directory) is not over:
        # then after it, on the scheduler's worker (a pending pilot gets its first tasks at once)
        workers = self.coord.workers
        if isinstance(action, (DispatchTask, CancelTask, WithdrawTask)):
            view = self.coord.pilots.get(action.pilot)
            workers = self.coord.exchange if view is not None and view.job_id is not None else self.coord.workers
        workers[action.site].submit("act", (seq, action), job)

    def prepare(self, action: Action, seq: int) -> Callable[[], Any] | None:
        """What the site must do for an action (run on its thread), or None if nothing."""
        if isinstance(action, SubmitPilot):
            view = self.coord.pilots.setdefault(action.pilot, PilotView(action.pilot, action.site, action.cores,
                                                                        action.walltime))
            if view.state is PilotState.CANCELLED:
                return None
            if self.coord.engine.pilots[action.pilot].state.final:   # withdrawn before we got to it
                view.state = PilotState.CANCELLED
                self.coord.pilot_row(view, ended=self.coord.now(), reason="withdrawn before submission")
                return None

            shared = self.coord.task_data.pilot_inputs(action.site)
            data = self.coord.task_data.site_data(action.site) if shared else None
            urls = self.coord.task_data.pilot_urls(action.site)

            def submit() -> list:
                ps = self.coord.site(action.site)
                sent = []
                if view.job_id is None:
                    view.job_id = ps.find_pilot_job(self.coord.run_key, action.pilot)   # submitted before a crash?
                if view.job_id is None:
                    inputs: tuple[str, ...] = urls      # a pool's pilot carries the bag's URL inputs
                    if data is not None:       # and its shared inputs
                        sent = data.stage(shared)
                        inputs = tuple(data.cache_path(f.sha256) for f in shared) + urls
                    view.job_id = ps.submit_pilot(self.coord.run_key, action.pilot, action.cores, action.walltime,
                                                  self.coord.engine.pilot_slot_cores(action.site), inputs=inputs)
                return sent
            return submit
        if isinstance(action, DispatchTask):
            rec = self.coord.engine.tasks[action.task] if 0 <= action.task < len(self.coord.engine.tasks) else None
            if rec is None or rec.attempt != action.attempt or rec.pilot != action.pilot:
                return None   # taken back (withdrawn) or moved before it was carried out: never sent
            command = self.coord.bag.command_for(action.task, action.site)
            env = {"RESEL_RUN": str(self.coord.run_id), "RESEL_SITE": action.site}
            perf = self.coord.options.perf or self.coord.bag.measured(action.task)
            files = self.coord.manifest.inputs(action.task) if self.coord.manifest is not None else ()
            data = self.coord.task_data.site_data(action.site) if files else None
            outputs = self.coord.output_specs
            slots = self.coord.engine.inbox_slots(action.site, action.task)   # (several widths: its cores' share)

            def stage() -> list:
                # the task's inputs go to the site now that it is bound there (docs/data.md)
                return data.stage(files) if data is not None else []

            def inbox_file() -> tuple[str, bytes]:
                ps = self.coord.site(action.site)
                return ps.inbox_file(
                    self.coord.run_key, action.pilot, action.task, action.attempt, command, env=env, perf=perf,
                    timeout=self.coord.options.task_timeout,
                    inputs=[{"name": f.name, "sha256": f.sha256, "size": f.size} for f in files]
                    + ps.url_inbox_inputs(self.coord.bag.data.urls if self.coord.bag.data else ()), outputs=outputs,
                    slots=slots, order=seq)
            def write(many: list[tuple[str, bytes]]) -> list[Exception | None]:
                return self.coord.site(action.site).dispatch_many(many)
            # batched by the site's worker with the inbox writes queued behind it
            return InboxWrite(action.site, stage, inbox_file, write)
        if isinstance(action, CancelTask):
            return lambda: self.coord.site(action.site).cancel_task(self.coord.run_key, action.pilot, action.task,
                                                                    action.attempt)
        if isinstance(action, WithdrawTask):
            return lambda: self.coord.site(action.site).withdraw_task(self.coord.run_key, action.pilot, action.task,
                                                                      action.attempt)
        if isinstance(action, CancelPilot):
            return self._stop(action)
        return None

    def _stop(self, action: CancelPilot) -> Callable[[], tuple[str | None, dict]] | None:
        """A pilot's stop, and the take-back of the tasks the engine handed ahead to it and gave
        back (:mod:`resel.live.takeback`): its answer is the reason stored with the pilot and
        how each was taken back. A pilot already stopped only has them taken back (a resumed
        coordinator whose CancelPilot was left undone for them): no reason, its row stays."""
        view = self.coord.pilots.get(action.pilot)
        if view is None:
            return None
        stopped = view.state.final
        if stopped and self.coord.takebacks.watched(action.pilot):
            return None               # stopped already (a repeated CancelPilot): its take-back is under way
        keys = self.coord.takebacks.take(action.pilot, view)
        if stopped and not keys:
            return None

        def stop() -> tuple[str | None, dict]:
            if view.job_id is None:   # never submitted (or the submission failed): nothing ran
                return "cancelled before submission", {key: "withdrawn" for key in keys}
            ps = self.coord.site(action.site)
            if not stopped:
                ps.stop_pilot(self.coord.run_key, action.pilot, view.job_id)
            # after the stop (its agent claims no more): each inbox file renamed away, or claimed
            return None if stopped else "cancelled", {
                (task, attempt): ps.withdraw_task(self.coord.run_key, action.pilot, task, attempt)
                for task, attempt in keys}
        return stop

    def acted(self, seq: int, action: Action, report: Report) -> list[Event]:
        """An action's site work is over: record it done, or decide what its failure means."""
        if report.error is not None:
            return self.failed(seq, action, report.error)
        events: list[Event] = []
        if isinstance(action, (SubmitPilot, DispatchTask)) and report.result:
            self.coord.task_data.sent(action.site, report.result)
            events = self.coord.task_data.measured(action.site, "in", [(x.size, x.seconds) for x in report.result])
        if isinstance(action, WithdrawTask) and report.result == "withdrawn" \
                and ("TaskWithdrawn", action.task, action.attempt) not in self.coord.consumed:
            # the inbox file was renamed away before the agent claimed it: it can never start
            self.coord.consumed.add(("TaskWithdrawn", action.task, action.attempt))
            withdrawn = TaskWithdrawn(time=self.coord.now(), task=action.task, attempt=action.attempt)
            events.append(withdrawn)
            self.done_with.append((withdrawn, seq))
        if isinstance(action, SubmitPilot):
            view = self.coord.pilots[action.pilot]
            self.coord.pilot_row(view, submitted=self.coord.now())
        elif isinstance(action, CancelPilot):
            view = self.coord.pilots[action.pilot]
            reason, answers = report.result
            if not view.state.final:
                view.state = PilotState.CANCELLED
            if reason is not None:
                self.coord.pilot_row(view, ended=self.coord.now(), reason=reason)
            if not self.coord.takebacks.answered(action.pilot, seq, answers):
                return events               # marked done once its tasks' attempts are settled
        if not any(s == seq for _, s in self.done_with):
            self.coord.mark_soon(seq)       # with the turn's other rows (redone if a crash loses it)
        return events

    def marks_for(self, event: Event) -> list[int]:
        """The actions to mark done with ``event`` (taken: each is marked once)."""
        if not self.done_with:
            return []
        seqs = [seq for e, seq in self.done_with if e is event]
        if seqs:
            self.done_with = [(e, seq) for e, seq in self.done_with if e is not event]
        return seqs

    def mark_left(self) -> None:
        """The run is over and the events above will not be fed: their actions are done."""
        for _, seq in self.done_with:
            self.coord.mark(seq)
        self.done_with = []
        self.coord.flush_marks()

    def failed(self, seq: int, action: Action, exc: BaseException) -> list[Event]:
        """A transient failure is retried next poll; any other is acted on now: a refused
        pilot gives its site up, a task that cannot be dispatched fails with the reason."""
        why = describe(exc)
        site = getattr(action, "site", None)
        if is_transient(exc):
            self.coord.mark(seq, why)
            self.undone.append((seq, action, self.coord.now() + self.coord.options.poll))
            if site in self.coord.health.views:
                self.coord.health.views[site].error = why
            return []
        log.warning("run %s: %s failed for good: %s", self.coord.run_id, type(action).__name__, why)
        self.coord.mark(seq, why, done=True)
        if isinstance(action, SubmitPilot):
            view = self.coord.pilots[action.pilot]
            view.state, view.refused = PilotState.CANCELLED, True
            self.coord.pilot_row(view, ended=self.coord.now(), reason=why)
            self.coord.health.views[action.site].error = why
            return [SiteLost(time=self.coord.now(), site=action.site, reason=why)]
        if isinstance(action, DispatchTask):
            if ("TaskFailed", action.task, action.attempt) in self.coord.consumed:
                return []
            self.coord.consumed.add(("TaskFailed", action.task, action.attempt))
            self.coord.attempt_row(action.task, action.attempt, self.coord.pilots.get(action.pilot) or
                                   PilotView(action.pilot, action.site),
                                   {"outcome": "failed", "reason": DISPATCH_FAILED + why})
            return [TaskFailed(time=self.coord.now(), task=action.task, attempt=action.attempt,
                               reason=DISPATCH_FAILED + why)]
        if isinstance(action, CancelPilot):      # how its tasks were taken back is not known: their ends
            self.coord.takebacks.answered(action.pilot, None, None)    # (or the job's) are waited for
        return []   # a cancel that cannot be written: the stop at the end still ends everything

    def retry(self, t: float) -> None:
        due = [(s, a) for s, a, at in self.undone if at <= t]
        self.undone = [(s, a, at) for s, a, at in self.undone if at > t]
        for seq, action in due:
            self.execute(seq, action)
        # a site that keeps refusing for too long is given up
        for seq, action, _at in self.undone:
            site = getattr(action, "site", None)
            view = self.coord.health.views.get(site) if site else None
            if view is not None:
                view.failing_since = view.failing_since or t
                if t - view.failing_since > self.coord.options.site_timeout \
                        and site not in self.coord.engine.lost_sites:
                    self.coord.feed([SiteLost(time=t, site=site, reason=view.error or "actions keep failing")])
