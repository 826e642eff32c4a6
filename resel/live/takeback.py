"""A withdrawn pilot's handed-ahead tasks, taken back before they run anywhere else (issue 29 §1).

The engine gives a withdrawn pilot's handed-ahead tasks back at once and may hand them to a
free slot elsewhere in the same decision (a later event may never come to fill that slot:
tests/test_engine.py pins it). But it hears of a pilot's start a read late: a pilot it withdrew
as pending may have started since the coordinator's last read, and its agent claimed an inbox
file — that task then runs there until the stop reaches the agent, and the new attempt
elsewhere would run beside it, twice at once (the crash soak saw the window open once).

So the stop of such a pilot (its ``CancelPilot``) also takes back the inbox file of each attempt
the engine gave back (:attr:`~resel.engine_books.PilotRecord.given_back`), by the rename of
:meth:`~resel.backends.pilotsite.PilotSite.withdraw_task`, atomic against the agent's claim;
and while it is not settled, every dispatch of those tasks waits here (parked, recorded but not
sent):

* taken back (``withdrawn``): that attempt can never run — the dispatches go at once, so a
  pilot that had not started (the usual case) costs no wait;
* not there (``asked``: claimed by the agent — started, or about to —, or its inbox write not
  done yet): the attempt is bound to that pilot until its end is read — its result in the
  agent's files, or the pilot's job over as its scheduler says, or its site given up. The
  withdrawn pilot's job and files are polled meanwhile; then the dispatches go.

A parked attempt the engine asks back meanwhile (``WithdrawTask``: re-selection, a quarantine)
was never sent: it is answered withdrawn at once, and never sent.

Its ``CancelPilot`` is marked done only once all of them are settled, so a coordinator killed
meanwhile takes them back again on resume (the engine replays the same ``given_back``) and
waits as before. The engine is not told: for it the task left the pilot at once; only the
sending of its next attempt waits (docs/live.md, "Withdrawn with its tasks")."""

from __future__ import annotations

import logging
from typing import Any

from resel.backends.pilotsite import PilotFiles, job_phase, task_key
from resel.events import DispatchTask
from resel.live.pilot_views import PilotView
from resel.states import PilotState

log = logging.getLogger("resel.live")

#: (task, attempt)
Key = tuple[int, int]
#: the events a result becomes (resel/live/findings.py): any of them means the attempt ended
ENDED_BY = ("TaskFinished", "TaskFailed", "TaskLost", "TaskWithdrawn")


class TakeBacks:
    """The given-back attempts not yet settled, per withdrawn pilot, and the dispatches they hold."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord
        #: pilot -> its given-back attempts not yet known never to run, or not yet ended
        self.by_pilot: dict[int, set[Key]] = {}
        #: task -> how many of its attempts hold it (on one pilot or several)
        self.held: dict[int, int] = {}
        #: task -> its dispatches that wait, (seq, action) in the order they were recorded
        self.parked: dict[int, list[tuple[int, DispatchTask]]] = {}
        #: pilot -> the seqs of its CancelPilot, marked done once its attempts are settled
        self.cancels: dict[int, list[int]] = {}
        #: pilots whose take-back is over (a repeated CancelPilot takes nothing back again)
        self.over: set[int] = set()
        #: pilot -> when its take-back began (a pilot watched for longer than ``site_timeout``
        #: is given up, as a site that does not answer is)
        self.since: dict[int, float] = {}

    # ------------------------------------------------------------------ the stop
    def take(self, pilot: int, view: PilotView) -> list[Key]:
        """The attempts the stop of ``pilot`` must take back (registered as holding their
        tasks from now on): what the engine gave back, less what was never sent (its dispatch
        still parked here) — none for a pilot whose job is known to be over."""
        if pilot in self.by_pilot:
            return sorted(self.by_pilot[pilot])    # a stop tried again: the same attempts
        if pilot in self.over or view.state is PilotState.ENDED:
            return []
        keys = []
        for task, attempt in self.coord.engine.pilots[pilot].given_back:
            if any(a.attempt == attempt and a.pilot == pilot for _s, a in self.parked.get(task, ())):
                continue                           # never sent: it cannot run
            keys.append((task, attempt))
            self.held[task] = self.held.get(task, 0) + 1
        if keys:
            self.by_pilot[pilot] = set(keys)
            self.since[pilot] = self.coord.now()
        else:
            self.over.add(pilot)
        return keys

    def answered(self, pilot: int, seq: int | None, answers: dict[Key, str] | None) -> bool:
        """The stop's answer (None: it failed for good — marked done then —, so nothing is
        known): an attempt taken back is settled, one claimed waits for its end. Whether the
        CancelPilot ``seq`` may be marked done now (else it is, once the last of its attempts is
        settled)."""
        keys = self.by_pilot.get(pilot)
        if not keys:
            return True
        view = self.coord.pilots.get(pilot)
        for key in sorted(keys):
            answer = None if answers is None else answers.get(key)
            if answer == "withdrawn" or self._end_read(view, key):
                self.settle(pilot, key)            # never runs, or its end was read already
        if pilot in self.by_pilot:
            if seq is not None:
                self.cancels.setdefault(pilot, []).append(seq)
            log.info("run %s: pilot %s was withdrawn while its agent held %s: not sent elsewhere until its end is "
                     "read", self.coord.run_id, pilot, ", ".join(task_key(*k) for k in sorted(self.by_pilot[pilot])))
            return False
        return True

    def _end_read(self, view: PilotView | None, key: Key) -> bool:
        """Whether the attempt's result was read already: an event made of it (whatever file
        held it — a per-key record or, since agent protocol 6, a wave), or a lost result waiting
        for its pilot's end."""
        consumed = self.coord.consumed
        return any((kind, *key) in consumed for kind in ENDED_BY) or (view is not None and key in view.parked)

    # ------------------------------------------------------------------ the dispatches
    def holds(self, task: int) -> bool:
        """Whether an attempt of ``task`` may still run on a withdrawn pilot."""
        return task in self.held

    def park(self, seq: int, action: DispatchTask) -> None:
        """A dispatch of a held task waits (its row stays undone until it is carried out)."""
        self.parked.setdefault(action.task, []).append((seq, action))

    def unpark(self, task: int, attempt: int) -> list[int]:
        """Drop the parked dispatches of this attempt (the engine asks it back: never sent, it
        can never run); their seqs, to be marked done."""
        waiting = self.parked.get(task)
        if not waiting:
            return []
        gone = [seq for seq, a in waiting if a.attempt == attempt]
        if gone:
            self.parked[task] = [(seq, a) for seq, a in waiting if a.attempt != attempt]
        return gone

    # ------------------------------------------------------------------ the withdrawn pilots
    def watched(self, pilot: int) -> bool:
        """Whether this pilot's job and files are still polled for an attempt's end."""
        return pilot in self.by_pilot

    def watched_views(self) -> list[PilotView]:
        """The withdrawn pilots still polled. One of a site given up, or never submitted, is
        over: nothing of it can be read (a lost site's attempts count as gone, as the engine
        counts its running ones); so is one whose attempts' ends are not read within
        ``site_timeout`` (its scheduler still lists it running, its agent silent): the run goes
        on rather than wait for ever."""
        now = self.coord.now()
        for pilot in list(self.by_pilot):
            view = self.coord.pilots.get(pilot)
            if view is None or not view.job_id or view.site in self.coord.engine.lost_sites:
                self.ended(pilot)
            elif now - self.since.get(pilot, now) > self.coord.options.site_timeout:
                log.warning("run %s: pilot %s, withdrawn, did not say within %.0f s how its tasks %s ended: "
                            "sent elsewhere", self.coord.run_id, pilot, self.coord.options.site_timeout,
                            ", ".join(task_key(*k) for k in sorted(self.by_pilot[pilot])))
                self.ended(pilot)
        return [self.coord.pilots[p] for p in self.by_pilot]

    def seen(self, t: float, view: PilotView, jobs: dict | None, found: PilotFiles | None) -> None:
        """A poll of a watched pilot: a result of a held attempt settles it; the pilot's job
        over (final, or missing from the scheduler's answer for ``missing_polls`` polls)
        settles them all. A withdrawn pilot's records go into the store's attempts as they are
        read (for the engine they are moot: those attempts are not the tasks' any more)."""
        if view.pilot not in self.by_pilot:
            return
        if found is not None:
            if view.state.final:            # (a pilot still live has them fed as events, as usual)
                self.coord.findings.file_events(t, view, found)
            for rec in found.results:
                self.settle(view.pilot, (rec["task"], rec["attempt"]))
        if jobs is None or not view.state.final or view.pilot not in self.by_pilot:
            return                          # (a pilot still live: its job's end is found as usual)
        info = jobs.get(view.job_id)
        if info is None:
            view.missing += 1
            if view.missing >= self.coord.options.missing_polls:
                self.ended(view.pilot)
        elif job_phase(info.state) == "final":
            self.ended(view.pilot)
        else:
            view.missing = 0

    def ended(self, pilot: int) -> None:
        """Nothing runs on the pilot any more: all its attempts are settled."""
        for key in sorted(self.by_pilot.get(pilot, ())):
            self.settle(pilot, key)

    def settle(self, pilot: int, key: Key) -> None:
        """``key`` can no longer run on ``pilot``: its task's dispatches go once nothing else
        holds it (after the turn commits, as any action), and the pilot's CancelPilot is marked
        done with its last attempt."""
        keys = self.by_pilot.get(pilot)
        if not keys or key not in keys:
            return
        keys.discard(key)
        task = key[0]
        self.held[task] -= 1
        if not self.held[task]:
            del self.held[task]
            for seq, action in self.parked.pop(task, []):
                self.coord.after_commit(lambda seq=seq, action=action: self.coord.acts.execute(seq, action))
        if not keys:
            del self.by_pilot[pilot]
            self.since.pop(pilot, None)
            self.over.add(pilot)
            for seq in self.cancels.pop(pilot, []):
                self.coord.mark_soon(seq)
