"""The peer strategies' rules inside the engine: what users do without resel (docs/peers.md).

Like the rest of the engine these are pure rules over its books — no clock, no I/O. The
engine's own timers carry them: a :class:`~resel.events.SetTimer` with ``task = -1`` is the
engine's (``attempt`` numbers the round), and the driver answers with a
:class:`~resel.events.TimerFired` of the same numbers, as for a re-selection window.

* ``race[:K]`` (cluv's "submit first"): every viable site asks for the bag's pilot; the first K
  sites to start keep the bag and share it (a free slot on one of them takes any waiting task,
  for good); when the K-th starts, the other sites' pending pilots are cancelled.
* ``failover[:T]`` (SkyPilot's failover): every task waits for the best-ranked site (lowest
  T̂x); if none of its pilots started within T seconds, they are cancelled and the bag is
  submitted to the next site in the ranking. After the last site the list is tried again
  with the time doubled (T, 2T, 4T, … per round), so a run always ends.
* ``rebroker[:TIMEOUT]`` (PanDA): tasks are brokered by PanDA's weight (running + 1) /
  (queued + 10); every :data:`REBROKER_PERIOD` seconds, a site with more than
  :data:`REBROKER_RATIO` × running tasks queued, or with tasks queued longer than TIMEOUT,
  gives the excess (newest first) to the site of highest weight among those still under the
  ratio after taking it and running something — PanDA's filter "skip queues if activated >
  2 × running" (panda-docs, docs/source/advanced/brokerage.rst).
* ``earliest`` needs no rule at run time: one site, chosen at submission (resel/selection.py).
"""

from __future__ import annotations

from resel.events import Action, Decision, DecisionKind, SetTimer, TimerFired
from resel.selection import panda_weight

#: rebroker: seconds between two rounds of reassignment (PanDA's periodic brokerage cycle)
REBROKER_PERIOD = 600.0
#: rebroker: queued / running above which a site's excess tasks are reassigned (PanDA: 2)
REBROKER_RATIO = 2.0


class PeerRules:
    """The peer strategies' part of :class:`~resel.engine.Engine` (a mixin over its books)."""

    def _peer_setup(self, candidates: list[int], t: float, out: list[Action]) -> None:
        """After the initial assignment: arm the peer strategy's rule."""
        base = self.strategy.base
        self._peer_round = 0
        self._peer_done = False
        if base == "race":
            self._race_winners: list[int] = []
            self._targets = sorted(candidates, key=lambda x: (self.tx[x], x))
            for x in self._targets:
                book = self._books[x]
                book.origins = [r for r in candidates if r != x]
                book.spec = True        # asks for the pilot of every task waiting anywhere
        elif base == "failover":
            self._fo_order = list(candidates)
            self._fo_pos = 0
            out.append(SetTimer(at=t + self.strategy.timeout, task=-1, attempt=0))
        elif base == "rebroker":
            out.append(SetTimer(at=t + REBROKER_PERIOD, task=-1, attempt=0))

    def _peer_started(self, x: int, t: float, out: list[Action]) -> None:
        """A pilot of site x started (the site may have been acquired before)."""
        base = self.strategy.base
        if base == "failover" and not self._peer_done and x == self._fo_order[self._fo_pos]:
            self._peer_done = True      # the bag stays where it started
        elif base == "race" and x not in self._race_winners and x in self._targets:
            self._race_winners.append(x)
            if len(self._race_winners) >= self.strategy.k:
                self._race_close(t, out)

    def _race_close(self, t: float, out: list[Action]) -> None:
        """K sites started: the others leave the race; their waiting tasks go to the first winner."""
        winners = self._race_winners
        losers = [x for x in self._targets if x not in winners]
        names = [s.name for s in self.sites]
        first = winners[0]
        for x in losers:
            book = self._books[x]
            book.spec = False
            for pid in list(book.pending):
                self._cancel_pilot(self.pilots[pid], t, out)
            while book.waiting:
                task = self.tasks[book.waiting.popleft()]
                task.origin = first
                self._books[first].waiting.append(task.id)
            self._dirty.add(x)
        self._targets = [x for x in self._targets if x in winners]
        for x in self._targets:
            self._books[x].origins = [r for r in self._books[x].origins if r in winners]
        self._dirty.update(winners)
        self._waiting_changed = True
        if self.decisions:
            out.append(Decision(time=t, kind=DecisionKind.RACE_CLOSED, task=-1, origin=names[first], target=names[first]))

    def _peer_timer(self, ev: TimerFired, out: list[Action]) -> None:
        """One of the engine's own timers (task −1) fired: the peer strategy's round."""
        if ev.attempt != self._peer_round or self._peer_done:
            return                      # a stale round, or the rule has nothing left to do
        if self.strategy.base == "failover":
            self._failover(ev.time, out)
        elif self.strategy.base == "rebroker":
            self._rebroker(ev.time, out)

    def _failover(self, t: float, out: list[Action]) -> None:
        """Nothing started on the current site within its time: cancel it, try the next."""
        order = self._fo_order
        here = order[self._fo_pos]
        book = self._books[here]
        if book.acquired_at is not None or len(order) == 1:
            self._peer_done = True       # started, or nowhere else to go: keep its place in the queue
            return
        for pid in list(book.pending):   # first: their handed-ahead tasks come back to the queue
            self._cancel_pilot(self.pilots[pid], t, out)
        self._fo_pos = (self._fo_pos + 1) % len(order)
        there = order[self._fo_pos]
        names = [s.name for s in self.sites]
        if there != here:
            while book.waiting:
                task = self.tasks[book.waiting.popleft()]
                task.origin = there
                self._books[there].waiting.append(task.id)
            if self.decisions:
                out.append(Decision(time=t, kind=DecisionKind.FAILOVER, task=-1, origin=names[here], target=names[there],
                                    tx_r=self.tx[here], tx_r2=self.tx[there]))
        self._dirty.update((here, there))
        self._peer_round += 1
        rounds = self._peer_round // len(order)        # each pass over the list doubles T
        out.append(SetTimer(at=t + self.strategy.timeout * 2 ** rounds, task=-1, attempt=self._peer_round))

    def _running_on(self, x: int) -> int:
        return sum(len(self.pilots[pid].tasks) for pid in self._books[x].active)

    def _rebroker(self, t: float, out: list[Action]) -> None:
        """PanDA's rule: a site's tasks over the ratio, or queued longer than the timeout, go to
        the best-weighted site that runs something and stays under the ratio."""
        n_sites = len(self.sites)
        usable = [x for x in range(n_sites) if self._books[x].cap_slots > 0 and self.sites[x].name not in self.lost_sites]
        running = {x: self._running_on(x) for x in usable}
        queued = {x: len(self._books[x].waiting) for x in usable}
        names = [s.name for s in self.sites]
        timeout = self.strategy.timeout
        for r in usable:
            book = self._books[r]
            if not book.waiting:
                continue
            excess = int(queued[r] - REBROKER_RATIO * running[r])
            stale = sum(1 for tid in book.waiting if t - self.tasks[tid].since >= timeout)
            for _ in range(max(excess, stale)):
                dest = [x for x in usable if x != r and running[x] > 0
                        and queued[x] + 1 <= REBROKER_RATIO * running[x]]
                if not dest or not book.waiting:
                    break
                x = max(dest, key=lambda i: (panda_weight(running[i], queued[i]), -self.tx[i], -i))
                task = self.tasks[book.waiting.pop()]        # the newest: the front starts here next
                task.origin, task.since = x, t
                self._books[x].waiting.append(task.id)
                queued[r] -= 1
                queued[x] += 1
                self._dirty.update((r, x))
                self._waiting_changed = True
                if self.decisions:
                    out.append(Decision(time=t, kind=DecisionKind.REBROKER, task=task.id, origin=names[r], target=names[x],
                                        tx_r=self.tx[r], tx_r2=self.tx[x]))
        self._peer_round += 1
        out.append(SetTimer(at=t + REBROKER_PERIOD, task=-1, attempt=self._peer_round))
