"""What the coordinator notices about a live site besides engine events, kept for the live
table and ``resel status`` (:mod:`resel.live.notes`): a site not answering and since when (given
up after ``site_timeout``), job states resel does not know, why a pilot waits in the queue,
files an agent refused, records that break the agent's protocol. Runs on the coordinator's
thread; each note is written to the store as it is taken."""

from __future__ import annotations

import logging
from typing import Any

from resel.events import Event, SiteLost
from resel.live import notes as live_notes
from resel.live.errors import describe
from resel.live.pilot_views import PilotView, SiteView


log = logging.getLogger("resel.live")


class SiteHealth:
    """Each site's :class:`SiteView` and the notes the coordinator writes about it."""

    def __init__(self, coord: Any) -> None:
        #: the :class:`~resel.live.coordinator.Coordinator` that owns it
        self.coord = coord
        self.views = {s.name: SiteView() for s in coord.sites}
        #: pilot → the pending reason last noted (resel status shows it)
        self.pending_reasons: dict[int, str] = {}

    def watch(self, t: float) -> list[Event]:
        """A site whose command has run for ``slow_after`` seconds is not answering: say so,
        and give it up after ``site_timeout``."""
        events: list[Event] = []
        for name, worker in self.coord.workers.items():
            busy = max((b for b in (worker.busy, self.coord.exchange[name].busy) if b is not None), key=lambda b: b[1],
                       default=None)
            view = self.views[name]
            if busy is None or busy[1] < self.coord.options.slow_after:
                continue
            since = t - busy[1]
            view.failing_since = min(view.failing_since or since, since)
            view.error = f"not answering ({busy[0]} running for {busy[1]:.0f} s)"
            live_notes.put(self.coord.db, self.coord.run_id, name, "unreachable", "unreachable", view.failing_since,
                           view.error)
            if t - view.failing_since > self.coord.options.site_timeout and name not in self.coord.engine.lost_sites:
                events.append(SiteLost(time=t, site=name,
                                       reason=f"unreachable for {self.coord.options.site_timeout:g} s: {view.error}"))
        return events

    def files_failed(self, name: str, t: float, exc: BaseException) -> list[Event]:
        """The pilots' files could not be read: shown, and the site given up if it lasts (an
        answering scheduler does not clear it)."""
        view = self.views[name]
        view.files_failing_since = view.files_failing_since or t
        view.failing_since = min(view.failing_since or t, view.files_failing_since)
        why = f"reading the pilots' files: {describe(exc)}"
        return self.not_answering(name, t, why, why)

    def not_answering(self, name: str, t: float, error: str, words: str) -> list[Event]:
        """Note a site that does not answer (since when, why); give it up after ``site_timeout``."""
        view = self.views[name]
        view.error = error
        view.failing_since = view.failing_since or t
        live_notes.put(self.coord.db, self.coord.run_id, name, "unreachable", "unreachable", view.failing_since, words)
        if t - view.failing_since > self.coord.options.site_timeout and name not in self.coord.engine.lost_sites:
            return [SiteLost(time=t, site=name,
                             reason=f"unreachable for {self.coord.options.site_timeout:g} s: {error}")]
        return []

    def state_note(self, v: PilotView, state: str, phase: str, t: float) -> None:
        """A job state in none of resel's tables concludes nothing: keep polling, say so."""
        key = f"state:p{v.pilot}"
        if phase == "unknown":
            if v.unknown_state != state:
                log.warning("run %s: pilot %s (job %s on %s) is in job state %s, which resel does not know; "
                            "it is not taken as ended, and polled on", self.coord.run_id, v.pilot, v.job_id, v.site,
                            state)
            v.unknown_state = state
            self.note(v.site, key, "job-state", t, f"pilot {v.pilot}: job {v.job_id} in state {state}, "
                                                   "which resel does not know: still polled")
        elif v.unknown_state is not None:
            v.unknown_state = None
            self.views[v.site].notes.pop(key, None)
            live_notes.drop(self.coord.db, self.coord.run_id, v.site, key)

    def pending_note(self, v: PilotView, info: Any, phase: str, t: float) -> None:
        """Why the scheduler keeps a pilot waiting, in its own words (its backend reads a
        placeholder for none as no reason), for the live table and ``resel status``; written
        when it changes, dropped once the pilot leaves the queue."""
        key = f"pending:p{v.pilot}"
        reason = info.reason if phase == "pending" and info is not None else None
        if not reason:
            if self.pending_reasons.pop(v.pilot, None) is not None:
                self.views[v.site].notes.pop(key, None)
                live_notes.drop(self.coord.db, self.coord.run_id, v.site, key)
            return
        if self.pending_reasons.get(v.pilot) != reason:
            self.pending_reasons[v.pilot] = reason
            self.note(v.site, key, "pending-reason", t, f"pilot {v.pilot}: job {v.job_id} pending ({reason})")

    def rejected(self, t: float, v: PilotView, beat: dict) -> None:
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
            log.warning("run %s, site %s: %s", self.coord.run_id, v.site, words)
            self.note(v.site, key, "rejected", t, words)

    def bad_record(self, site: str, path: str, why: str, t: float) -> None:
        key = f"bad:{path}"
        if key not in self.views[site].notes:
            self.views[site].notes[key] = why
            self.views[site].bad_records += 1
            log.warning("run %s, site %s: skipped %s: %s", self.coord.run_id, site, path, why)
        live_notes.put(self.coord.db, self.coord.run_id, site, key, "bad-record", t, f"{path}: {why}")

    def note(self, site: str, key: str, kind: str, t: float, words: str) -> None:
        self.views[site].notes[key] = words
        live_notes.put(self.coord.db, self.coord.run_id, site, key, kind, t, words)

    def site_notes(self) -> dict[str, "live_notes.SiteNotes"]:
        """What this coordinator noticed per site, as the live table shows it."""
        out = {}
        for name, view in self.views.items():
            out[name] = live_notes.SiteNotes(
                not_answering_since=view.failing_since, not_answering=view.error, bad_records=view.bad_records,
                lines=[words for key, words in view.notes.items() if not key.startswith("bad:")])
        return out
