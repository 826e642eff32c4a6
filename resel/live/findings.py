"""What a poll means: the scheduler's answer about a site's pilots and what their agents wrote
(:class:`~resel.backends.pilotsite.PilotFiles`), turned into engine events pilot by pilot —
started, requeued, ended, relaunched agents, attempts started, done, failed, lost, withdrawn —
with the ``live_pilots`` and ``attempts`` rows they fill in. Runs on the coordinator's thread,
on what the site threads read."""

from __future__ import annotations

import json
import logging
from typing import Any

from resel.backends.jobs import Pending
from resel.backends.pilotsite import PilotFiles, job_phase, task_key
from resel.events import (
    Event, PilotEnded, PilotRequeued, PilotStarted, SiteLost, TaskFailed, TaskFetching, TaskFinished, TaskLost,
    TaskStarted, TaskMeasured, TaskWithdrawn,
)
from resel.live.pilot_views import PilotView
from resel.states import PilotState


log = logging.getLogger("resel.live")


#: lost results that say the attempt died with an agent that is gone while its pilot lives on
#: ("evicted": written by the HTCondor wrapper of a rerun for the run before)
LOST_WITH_AGENT = ("agent restarted", "superseded", "evicted")


def starts_first(events: list[Event]) -> list[Event]:
    """One turn's findings in the order the engine must hear them: every pilot's start and every
    attempt's start before anything else, each group in its own order (a pilot's start still
    before its attempts', an attempt's start before its end).

    Why: the engine decides at each event. Fed pilot by pilot, a read that shows pilot A's task
    done and pilot B started with the task handed ahead to it, A's end came first: B, still
    pending as far as the engine knew, was surplus and withdrawn, and the task it had in fact
    started was handed to A's free slot — run twice (the crash soak with 16 tasks handed ahead
    per slot, issue 29). The resumed coordinator's catch-up orders its first read the same way.

    A pilot back in the queue (PilotRequeued) is a wall no start moves across: a later report of
    the same turn may show it started again, which must follow its requeue."""
    out: list[Event] = []
    first: list[Event] = []
    rest: list[Event] = []
    for e in events:
        if isinstance(e, PilotRequeued):
            out += first + rest + [e]
            first, rest = [], []
        elif isinstance(e, (PilotStarted, TaskStarted)):
            first.append(e)
        else:
            rest.append(e)
    return out + first + rest


class Findings:
    """Turns a site's poll (its jobs' states, its agents' files) into events, each once."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord

    def changes(self, v: PilotView, jobs: dict) -> bool:
        """Whether the scheduler's answer moves this pilot on (it started, ended or went back
        to the queue), i.e. its files must be read before the answer is acted on."""
        info = jobs.get(v.job_id)
        if info is not None and info.name and not f"resel-{self.coord.run_key}-p{v.pilot}".startswith(info.name):
            info = None          # the id is someone else's job now (site_events says so)
        phase = job_phase(info.state) if info is not None else None        # None: not in the reply
        if v.state is PilotState.ACTIVE:
            return phase in ("pending", "final", None)
        return phase != "pending"

    def site_events(self, t: float, result: tuple) -> list[Event]:
        """One poll's findings as events, pilot by pilot: what its agent wrote first (results
        read in the same poll as a requeue or an end count before it), then what its job's
        state means — nothing, for a read of the files alone (``jobs`` None)."""
        views, jobs, files = result
        out: list[Event] = []
        for v in sorted(views, key=lambda v: v.pilot):
            if self.coord.takebacks.watched(v.pilot):    # withdrawn while its agent may run a task
                self.coord.takebacks.seen(t, v, jobs, files.get(v.pilot))
            if v.state.final:        # ended or cancelled while the poll ran: no events, but what
                found = files.get(v.pilot)      # its agent wrote goes into the rows — the read moved the
                if found is not None:           # pilot's wave cursor past it, no later read finds it again
                    self.file_events(t, v, found)   # (a cancelled attempt's result, written as the stop came)
                if not self.coord.takebacks.watched(v.pilot):   # else read on (polling.start)
                    self.torn_at_end(t, v)
                continue
            info, state, phase = None, "", "unknown"
            if jobs is not None:
                info = jobs.get(v.job_id)
                if info is not None and info.name \
                        and not f"resel-{self.coord.run_key}-p{v.pilot}".startswith(info.name):
                    # the job id was given to another job (a controller that lost its state reuses ids)
                    self.coord.health.note(v.site, f"reused:p{v.pilot}", "job-state", t,
                                           f"pilot {v.pilot}: job {v.job_id} is now someone else's job ({info.name})")
                    info = None
                state = info.shown if info is not None else "MISSING"     # the scheduler's word
                phase = job_phase(info.state) if info is not None else None      # None: missing
                v.job_state = state
                self.coord.health.state_note(v, state, phase, t)
                self.coord.health.pending_note(v, info, phase, t)
                if phase == "running" and v.state is PilotState.PENDING:
                    v.state = PilotState.ACTIVE
                    out.append(PilotStarted(time=t, pilot=v.pilot))
                    self.coord.pilot_row(v, started=t)
            found = files.get(v.pilot)
            if found is not None:
                out.extend(self.agent_wrote(t, v, found))
            if jobs is None:
                continue
            if phase == "pending" and v.state is PilotState.ACTIVE:
                # back in the queue (scontrol requeue, a node failure with requeue on, a
                # controller that lost the job's start): its agent is gone, what it ran and
                # did not report is lost; it may start again as a new incarnation
                v.state, v.missing = PilotState.PENDING, 0
                v.parked.clear()
                out.append(PilotRequeued(time=t, pilot=v.pilot, reason=f"job {v.job_id} {state}"))
                self.coord.pilot_row(v, reason=f"requeued ({state})")
                self.coord.health.note(v.site, f"requeue:p{v.pilot}", "requeue", t,
                                       f"pilot {v.pilot}: job {v.job_id} went back to the queue ({state})")
                log.warning("run %s: pilot %s (job %s on %s) went back to the queue (%s); its attempts are lost",
                            self.coord.run_id, v.pilot, v.job_id, v.site, state)
                continue
            if phase == "pending" and info is not None and info.pending is Pending.NEVER:
                why = (f"the scheduler will never start pilot {v.pilot} ({v.cores} cores, {v.walltime:g} s): "
                       f"job {v.job_id} pending with reason {info.reason}")
                self.coord.workers[v.site].submit("stop", None, lambda v=v: self.coord.site(v.site).stop_pilot(
                    self.coord.run_key, v.pilot, v.job_id))
                v.state = PilotState.ENDED
                out.append(PilotEnded(time=t, pilot=v.pilot, reason=info.reason))
                out.append(SiteLost(time=t, site=v.site, reason=why))
                self.coord.pilot_row(v, ended=t, reason=info.reason)
                self.coord.health.views[v.site].error = why
                continue
            if phase is None:
                v.missing += 1
                ended = v.missing >= self.coord.options.missing_polls
            else:
                v.missing = 0
                ended = phase == "final"
            if ended:
                v.state = PilotState.ENDED
                v.parked.clear()
                out.append(PilotEnded(time=t, pilot=v.pilot,
                                      reason=info.state.value if info is not None else "missing"))
                self.coord.pilot_row(v, ended=t, reason=state)
                self.torn_at_end(t, v)
        return out

    def torn_at_end(self, t: float, v: PilotView) -> None:
        """A pool's pilot ended with waves its cursor held half written (backends/waves.py): no
        read will find them whole now, so each is a bad record, counted and shown like any."""
        for wave in v.cursor.give_up():
            self.coord.health.bad_record(v.site, f"p{v.pilot}/{wave}",
                                         "not JSON when its pilot ended (read half written)", t)

    def agent_wrote(self, t: float, v: PilotView, found: PilotFiles) -> list[Event]:
        """What one pilot's agent wrote since the last read: a pending pilot that turns out to
        run, its registration and heartbeat (a relaunched agent, refused files), bad records,
        then its attempts' records (:meth:`file_events`)."""
        out: list[Event] = []
        if v.state is PilotState.PENDING and self.runs(v, found):
            v.state = PilotState.ACTIVE     # it ran and maybe ended between two polls
            out.append(PilotStarted(time=t, pilot=v.pilot))
            self.coord.pilot_row(v, started=t)
        if found.agent:
            self.coord.pilot_row(v, host=found.agent.get("host"), cpu_model=found.agent.get("cpu_model"),
                                 cpu_mhz=_number(found.agent.get("cpu_mhz")),
                                 agent_started=_number(found.agent.get("started")))
        if found.heartbeat and v.state is PilotState.ACTIVE:
            out.extend(self.incarnation(t, v, found.heartbeat))
            self.coord.health.rejected(t, v, found.heartbeat)
        for path, why in found.bad:
            self.coord.health.bad_record(v.site, path, why, t)
        out.extend(self.file_events(t, v, found))
        return out

    def runs(self, v: PilotView, found: PilotFiles) -> bool:
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

    def incarnation(self, t: float, v: PilotView, beat: dict) -> list[Event]:
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
            self.coord.health.note(v.site, f"relaunch:p{v.pilot}:{inc}", "relaunch", t,
                                   f"pilot {v.pilot}: agent relaunched under job {v.job_id} at {t:.0f} s")
            log.warning("run %s: pilot %s (job %s on %s) runs a new agent (incarnation %s): what the previous one "
                        "ran is lost", self.coord.run_id, v.pilot, v.job_id, v.site, inc)
            for (task, attempt), by in list(v.parked.items()):
                if by != inc:
                    out.extend(self.lost(t, task, attempt, "agent relaunched"))
                    del v.parked[(task, attempt)]
            v.seen.discard("agent.json")       # read the new agent's registration next poll
        v.incarnation = inc
        if started is not None and started != v.agent_started:
            v.agent_started = started
            self.coord.pilot_row(v, agent_started=started)
        return out

    def lost(self, t: float, task: int, attempt: int, reason: str) -> list[Event]:
        if ("TaskLost", task, attempt) in self.coord.consumed:
            return []
        self.coord.consumed.add(("TaskLost", task, attempt))
        return [TaskLost(time=t, task=task, attempt=attempt, reason=reason)]

    def file_events(self, t: float, v: PilotView, found: PilotFiles) -> list[Event]:
        """The agent's records in the order its clock saw them (a slot freed, then taken)."""
        records = [(float(r["time"]), 1, "started", r) for r in found.started]
        records += [(float(r["end"] if r.get("end") is not None else r.get("start") or 0.0), 0, "results", r)
                    for r in found.results]
        records.sort(key=lambda item: item[:2])
        out: list[Event] = []
        for _stamp, _order, sub, rec in records:
            task, attempt = rec["task"], rec["attempt"]
            why = self.foreign(task, attempt)
            if why:
                self.coord.health.bad_record(v.site, f"p{v.pilot}/{sub}/{task_key(task, attempt)}.json", why, t)
                continue
            if sub == "started":
                self.coord.attempt_row(task, attempt, v, {"start": rec.get("time"), "host": rec.get("host")})
                if ("TaskStarted", task, attempt) not in self.coord.consumed:
                    self.coord.consumed.add(("TaskStarted", task, attempt))
                    out.append(TaskStarted(time=t, task=task, attempt=attempt))
                continue
            outcome = rec["outcome"]
            outputs = rec.get("outputs") if self.coord.output_specs else None
            self.coord.attempt_row(task, attempt, v, {
                "start": rec.get("start"), "end": rec.get("end"), "host": rec.get("host"),
                "exit_code": rec.get("exit_code"), "outcome": outcome, "reason": rec.get("reason"),
                "perf": json.dumps(rec.get("perf")) if rec.get("perf") is not None else None,
                "stdout_tail": rec.get("stdout_tail"), "stderr_tail": rec.get("stderr_tail"),
                "outputs": json.dumps(outputs) if outputs is not None else None})
            if rec.get("refused"):
                self.coord.health.note(v.site, f"refused:{task_key(task, attempt)}", "refused-output", t,
                                       f"task {task} attempt {attempt}: refused to send "
                                       + ", ".join(f"{r['name']} ({r['why']})" for r in rec["refused"][:5]))
            if outcome == "failed" and str(rec.get("reason") or "").startswith("input ") and self.coord.manifest:
                # the site's copy was missing or wrong: send the task's inputs again next time
                self.coord.task_data.site_data(v.site).forget(f.sha256 for f in self.coord.manifest.inputs(task))
            if outcome == "done" and self.coord.engine.learning:   # the agent's own clock, for the learning
                seconds = _number(rec.get("end")) is not None and _number(rec.get("start")) is not None
                if seconds and ("TaskMeasured", task, attempt) not in self.coord.consumed:
                    self.coord.consumed.add(("TaskMeasured", task, attempt))
                    out.append(TaskMeasured(time=t, task=task, attempt=attempt,
                                            seconds=max(0.0, float(rec["end"]) - float(rec["start"]))))
            if outcome == "done" and self.coord.output_specs:
                kind, event = "TaskFetching", TaskFetching(time=t, task=task, attempt=attempt)
                self.coord.task_data.deliveries[(task, attempt)] = (v.pilot, v.site, list(outputs or []))
            elif outcome == "done":
                kind, event = "TaskFinished", TaskFinished(time=t, task=task, attempt=attempt)
            elif outcome == "failed":
                kind, event = "TaskFailed", TaskFailed(time=t, task=task, attempt=attempt,
                                                       reason=str(rec.get("reason") or f"exit {rec.get('exit_code')}"))
            elif outcome == "lost":
                by = rec.get("incarnation")
                if rec.get("reason") in LOST_WITH_AGENT or (by and v.incarnation and by != v.incarnation):
                    out.extend(self.lost(t, task, attempt, str(rec.get("reason") or "lost")))
                else:   # its agent is ending (walltime, signal): PilotEnded or PilotRequeued says so
                    v.parked[(task, attempt)] = by
                continue
            elif outcome == "cancelled" and rec.get("reason") == "withdrawn":
                # the agent gave a handed-ahead attempt back unstarted (agent protocol 4)
                kind, event = "TaskWithdrawn", TaskWithdrawn(time=t, task=task, attempt=attempt)
            else:
                continue   # cancelled: the engine asked for it
            if (kind, task, attempt) not in self.coord.consumed:
                self.coord.consumed.add((kind, task, attempt))
                out.append(event)
        return out

    def foreign(self, task: int, attempt: int) -> str | None:
        """Why a well-formed record names no attempt of this run, or None."""
        if task >= len(self.coord.engine.tasks):
            return f"no task {task} in this run (it has {len(self.coord.engine.tasks)})"
        if not 1 <= attempt <= self.coord.engine.tasks[task].attempt:
            return f"task {task} has no attempt {attempt} (attempts so far: {self.coord.engine.tasks[task].attempt})"
        return None


def _number(value: Any) -> float | None:
    """A float from an agent's JSON, or None (agents on old Pythons may write strings)."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
