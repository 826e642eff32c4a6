"""Sites that leave the run: black holes quarantined and released, sites lost for good.

A site whose attempts fail (or whose pilots die young) far more often than elsewhere is a
black hole (:mod:`resel.blackhole` counts and judges; docs/engine.md, "Black-hole sites"):
here the engine acts on that judgement — it withdraws the site's pending pilots, asks back
the tasks handed ahead to its pilots, moves its waiting tasks to the fastest usable site,
commits the tasks that waited for it provisionally elsewhere, and after a back-off lets it
take tasks again, the tasks it lost coming back. A site the driver says is lost
(:class:`~resel.events.SiteLost`) is the same move, for good.

Pure rules over the engine's state; a mixin of :class:`~resel.engine.Engine`.
"""

from __future__ import annotations


from resel.blackhole import QuarantinePolicy, SiteHealth, describe, is_black_hole
from resel.events import Action, Decision, DecisionKind, SetTimer, SiteLost, SiteQuarantined, SiteReleased
from resel.states import next_task_state


class HealthRules:
    """The engine's site health: quarantine, release and lost sites (a mixin of
    :class:`~resel.engine.Engine`)."""

    def _init_health(self, quarantine: QuarantinePolicy | None) -> None:
        """The black-hole rule's numbers, and every site's counts at zero."""
        self.quarantine = quarantine or QuarantinePolicy()
        #: outcomes per site for the black-hole rule (resel/blackhole.py)
        self.health = [SiteHealth() for _ in self.sites]
        self._suspects: set[int] = set()
        self.lost_sites: dict[str, str] = {}

    @property
    def quarantined(self) -> dict[str, SiteHealth]:
        """Sites quarantined as black holes right now, with their counts and release time."""
        return {self.sites[i].name: h for i, h in enumerate(self.health) if h.quarantined}

    def _usable(self, exclude: int = -1) -> list[int]:
        """Sites that may take tasks: viable, not lost, not quarantined, not ``exclude``."""
        return [i for i in self._viable if i != exclude and self._books[i].cap_slots > 0
                and self.sites[i].name not in self.lost_sites and not self.health[i].quarantined]

    def _outcome(self, x: int, bad: bool) -> None:
        """Count an attempt's (or a pilot's) end on site x; a bad one makes x a suspect."""
        if x < 0:
            return
        self.health[x].add(bad)
        if bad:
            self._suspects.add(x)

    def _judge(self, x: int, t: float, out: list[Action]) -> None:
        health = self.health[x]
        if health.quarantined or self.sites[x].name in self.lost_sites:
            return
        others_n = sum(h.n for i, h in enumerate(self.health) if i != x)
        others_bad = sum(h.bad for i, h in enumerate(self.health) if i != x)
        if not is_black_hole(health, others_n, others_bad, self.quarantine):
            return
        usable = self._usable(exclude=x)
        if not usable:
            return   # the last usable site is never quarantined: nowhere else to go
        self._quarantine(x, usable, describe(health, others_n, others_bad), t, out)

    def _quarantine(self, x: int, usable: list[int], reason: str, t: float, out: list[Action]) -> None:
        """Site x is a black hole: withdraw its pending pilots, move its waiting (and handed
        ahead) tasks to the fastest usable site as for a lost site, and set the release timer.
        Tasks running there stay until they end (a success still counts for the site)."""
        health, book, name = self.health[x], self._books[x], self.sites[x].name
        health.quarantines += 1
        health.since, health.until = t, t + self.quarantine.backoff_for(health.quarantines)
        health.reason = reason
        book.cap_saved, book.cap_slots = book.cap_slots, 0
        out.append(SiteQuarantined(time=t, site=name, until=health.until, reason=reason))
        for pid in list(book.pending):
            self._cancel_pilot(self.pilots[pid], t, out)
        for tid in reversed(list(book.queued)):      # handed ahead to its busy pilots: ask them back
            self._recall(self.tasks[tid], t, out)      # (moved on when withdrawn, or run there if started)
        best = self._fastest(usable, t)
        while book.waiting:
            tid = book.waiting.popleft()
            task = self.tasks[tid]
            task.origin, task.moved_from = best, x
            self._books[best].waiting.append(tid)
            if self.decisions:
                out.append(Decision(time=t, kind=DecisionKind.QUARANTINE, task=tid, origin=name,
                                    target=self.sites[best].name, tx_r=self._txd(x, t), tx_r2=self._txd(best, t)))
        for tid in list(book.prov):                  # provisional elsewhere: r is out, keep r'
            self._commit(self.tasks[tid], t, out)
        self._reorder(best)
        self._waiting_changed = True
        self._dirty.update((x, best))
        out.append(SetTimer(at=health.until, task=-1, attempt=health.quarantines, site=name))

    def _release(self, x: int, k: int, t: float, out: list[Action]) -> None:
        """The k-th quarantine of site x ends: it may take tasks again, its counts restart, and
        the tasks it lost to the quarantine that still wait elsewhere come back (the retry)."""
        health, book, name = self.health[x], self._books[x], self.sites[x].name
        if not health.quarantined or health.quarantines != k:
            return   # a stale or repeated timer
        health.until = health.since = None
        health.reset()
        out.append(SiteReleased(time=t, site=name))
        if name in self.lost_sites:
            return
        book.cap_slots = book.cap_saved
        for y, other in enumerate(self._books):
            if y == x or not other.waiting:
                continue
            back = [tid for tid in other.waiting if self.tasks[tid].moved_from == x]
            if not back:
                continue
            keep = set(back)
            other.waiting = self._new_waiting(tid for tid in other.waiting if tid not in keep)
            for tid in back:
                self.tasks[tid].origin, self.tasks[tid].moved_from = x, -1
                book.waiting.append(tid)
                if self.decisions:
                    out.append(Decision(time=t, kind=DecisionKind.QUARANTINE_RELEASE, task=tid, origin=self.sites[y].name,
                                        target=name, tx_r=self._txd(y, t), tx_r2=self._txd(x, t)))
            self._dirty.add(y)
        self._reorder(x)
        self._waiting_changed = True
        self._dirty.add(x)

    def _on_site_lost(self, ev: SiteLost, out: list[Action]) -> None:
        x = self._index(ev.site)
        if ev.site in self.lost_sites:
            return
        self.lost_sites[ev.site] = ev.reason
        book = self._books[x]
        book.cap_slots = 0                       # _size_pilots never asks this site again
        if x in self._targets:
            self._targets.remove(x)
        for other in self._books:
            if x in other.origins:
                other.origins.remove(x)
        for pid in list(book.pending):           # withdrawn: the driver cancels them
            self._cancel_pilot(self.pilots[pid], ev.time, out)
        usable = [i for i, b in enumerate(self._books) if b.cap_slots > 0
                  and self.sites[i].name not in self.lost_sites]
        names = [s.name for s in self.sites]
        if not usable:
            while book.waiting:                  # nowhere left to run: give up, say why
                task = self.tasks[book.waiting.popleft()]
                self._waiting_total -= 1
                task.state = next_task_state(task.state, "give-up")
                self._settled_one(done=False)
            if self._remaining == 0:
                self._finish(ev.time, out)
            return
        best = self._fastest(usable, ev.time)
        while book.waiting:
            tid = book.waiting.popleft()
            task = self.tasks[tid]
            task.origin = best
            self._books[best].waiting.append(tid)
            if self.decisions:
                out.append(Decision(time=ev.time, kind=DecisionKind.SITE_LOST, task=tid, origin=ev.site,
                                    target=names[best], tx_r=self._txd(x, ev.time), tx_r2=self._txd(best, ev.time)))
        for tid in list(book.prov):              # provisional elsewhere: r is gone, commit to r'
            task = self.tasks[tid]
            self._commit(task, ev.time, out)
        self._reorder(best)
        self._waiting_changed = True
        self._dirty.add(best)

    def _reorder(self, x: int) -> None:
        """Largest first: site x's waiting tasks back in decreasing size after others joined them."""
        if self._largest_first:
            w = self._w
            book = self._books[x]
            book.waiting = self._new_waiting(sorted(book.waiting, key=lambda tid: -w[tid]))
