"""What the engine compares sites by: T̂x, a task's data time D, and the window Ŵ.

Every choice of site in the engine (seeds/003 §3.4: the initial site, the target of a
re-selection, the window a provisional task waits, where a lost or quarantined site's tasks
go) asks these rules, never the rates directly:

* T̂x(x) per site, from the rates the driver gave (LIM or a calibrated fit) or LIM with the
  run's clock; a task of a task table scales its site's by its weight;
* D(x), with a data model (``[bag.data]``, :mod:`resel.transfer`): inputs to x, outputs home,
  and the shared inputs while x is cold, so sites are ranked by T̂x' = T̂x + D
  (docs/engine.md, "Selection sees the data"); without one D = 0 and every figure is T̂x;
* Ŵ(r', r) = T̂x'(r') − T̂x'(r), or the pair's given window (``--risk``) plus the data part;
* a slot's longest hold (T̂x,hi plus the inputs' trip), what walltime packing plans with;
* the measurements that move D during a run (:class:`~resel.events.BandwidthMeasured`,
  :class:`~resel.events.OutputsMeasured`).

Pure rules over the engine's state, as the rest of it; a mixin of
:class:`~resel.engine.Engine`. Learning (resel/engine_learning.py) moves T̂x itself.
"""

from __future__ import annotations

import dataclasses
import math

from resel.domain import Bag
from resel.engine_books import TaskRecord
from resel.errors import IllegalTransition
from resel.events import Action, BandwidthMeasured, OutputsMeasured
from resel.models.lim import site_rates
from resel.models.runtime import EngineRates
from resel.transfer import DataTimes, TransferModel


class PricingRules:
    """The engine's prices: T̂x, D and Ŵ per site (a mixin of :class:`~resel.engine.Engine`)."""

    def _init_pricing(self, bag: Bag, given: EngineRates, clock: str, data: TransferModel | None) -> None:
        """The run's prices at the start: T̂x per site (the rates given, else LIM with
        ``clock``), the split's, the windows given, T̂x,hi, the task table's weights, and the
        data model's figures."""
        lim = site_rates(self.sites, clock)
        self.rates = [given.rates.get(s.name, lim[s.name]) for s in self.sites]
        self.tx = [r.tx(bag.profile.instructions) for r in self.rates]   # T̂x per site
        split = given.split or {}
        self._split_tx = [split[s.name].tx(bag.profile.instructions) if s.name in split else self.tx[i]
                          for i, s in enumerate(self.sites)]
        self._windows = given.windows      # Ŵ(r', r) by name pair (--risk), else T̂x(r') − T̂x(r)
        upper = given.upper or {}
        #: T̂x,hi per site: the top of its runtime interval, what walltime packing plans with
        self.tx_hi = [max(self.tx[i], upper[s.name].tx(bag.profile.instructions)) if s.name in upper
                      else self.tx[i] for i, s in enumerate(self.sites)]
        #: a bag with a task table: each task's T̂x is its site's (the tasks' mean) times its
        #: weight (None: equal tasks, every figure the site's); walltime checks plan with the
        #: largest task's
        self._w = bag.weights
        self._wmax = max(self._w) if self._w else 1.0
        #: the data model (None: no data priced, D = 0); its figures per site in ``_dt``, updated
        #: by BandwidthMeasured, and per site when its shared inputs are there (``_ready``: None
        #: while cold, else the first binding there + their transfer time)
        self.data = data if data is not None and data.moves else None
        #: the model as given, kept even while it moves nothing: OutputsMeasured may make it move
        self._model = data
        self._dt: list[DataTimes] = ([self.data.times(s.name) for s in self.sites] if self.data is not None else [])
        self._ready: list[float | None] = [None] * len(self.sites)
        self._resort = False          # a data figure changed: re-rank targets and origins

    def _window(self, target: int, origin: int, t: float) -> float:
        """Ŵ(r', r) at t: T̂x'(r') − T̂x'(r), or the given window of the pair (an upper quantile,
        --risk) plus D(r') − D(r) (data times are priced as points: they have no interval). A
        learning run prices a pool r' at its slowest slot (:meth:`_pool_slowest`).
        A race has no windows: whichever kept site frees a slot takes the task for good."""
        if self.strategy.base == "race":
            return 0.0
        if self._windows is not None and not (self._learn and (self.beliefs.tasks(target) or self.beliefs.tasks(origin))):
            # (a site measured in this run: its quantile window, from the prior, is stale — point rule)
            w = self._windows.get((self.sites[target].name, self.sites[origin].name))
            if w is not None:
                return w if self.data is None else w + (self._data_s(target, t) - self._data_s(origin, t))
        slow = self._pool_slowest(target) if self._learn else 1.0   # a pool priced at its slowest slot
        if self.data is None:
            return self.tx[target] * slow - self.tx[origin]
        return self._txd(target, t) + self.tx[target] * (slow - 1.0) - self._txd(origin, t)

    def _data_s(self, x: int, t: float) -> float:
        """D(x) at t: a task's own inputs to x and its outputs home, plus the shared inputs
        while x is cold (what is left of their trip while they are on their way)."""
        d = self._dt[x]
        ready = self._ready[x]
        return d.own_in + d.out + (d.shared_in if ready is None else max(0.0, ready - t))

    def _txd(self, x: int, t: float) -> float:
        """T̂x'(x) = T̂x(x) + D(x) at t: what the engine compares sites by (T̂x without data)."""
        if self.data is None:
            return self.tx[x]
        return self.tx[x] + self._data_s(x, t)

    def _task_txd(self, x: int, t: float, tid: int) -> float:
        """T̂x'(x) of task ``tid``: its weight times the site's T̂x, plus D(x)."""
        if self._w is None:
            return self._txd(x, t)
        tx = self.tx[x] * self._w[tid]
        return tx if self.data is None else tx + self._data_s(x, t)

    def _task_window(self, target: int, origin: int, t: float, tid: int) -> float:
        """Ŵ(r', r) of task ``tid`` at t: the run-time part scaled by its weight, the data part
        as it is (a task table's tasks share the bag's data sizes)."""
        window = self._window(target, origin, t)
        if self._w is None or self.strategy.base == "race":
            return window
        d = 0.0 if self.data is None else self._data_s(target, t) - self._data_s(origin, t)
        return (window - d) * self._w[tid] + d

    def _priced(self, task: TaskRecord, r: int, x: int, t: float) -> tuple[float, float, float]:
        """(T̂x'(r), T̂x'(r'), Ŵ) of the task's window: as it was opened (a bag that moves data),
        else as the rates say now."""
        if task.priced is not None:
            return task.priced
        if self._w is None:
            return self.tx[r], self.tx[x], self._window(x, r, t)
        w = self._w[task.id]
        return self.tx[r] * w, self.tx[x] * w, self._task_window(x, r, t, task.id)

    def _fastest(self, candidates: list[int], t: float) -> int:
        """The candidate of lowest T̂x' at t, ties to the first in site order."""
        return min(candidates, key=lambda i: (self._txd(i, t), i))

    def _slot_hi(self, x: int) -> float:
        """How long a task holds a slot of x at most: T̂x,hi plus its own inputs' trip, which
        is staged after the task is bound to the slot; its outputs travel after the slot is
        free. (The shared inputs, sent once per site, are added where x is cold.)"""
        if self.data is None:
            return self.tx_hi[x] if self._w is None else self.tx_hi[x] * self._wmax
        return (self.tx_hi[x] if self._w is None else self.tx_hi[x] * self._wmax) + self._dt[x].own_in

    def _bound(self, x: int, t: float) -> None:
        """A task was bound to site x at t: if x was cold its shared inputs leave now."""
        if self._ready[x] is None:
            self._ready[x] = t + self._dt[x].shared_in
            self._resort = True

    def _on_bandwidth(self, ev: BandwidthMeasured, out: list[Action]) -> None:
        """A site's MB/s measured during the run: new decisions price its data with it; windows
        already open keep theirs, a pilot's drain instant moves with its new slot time."""
        x = next((i for i, s in enumerate(self.sites) if s.name == ev.site), None)
        if x is None:
            raise IllegalTransition(f"BandwidthMeasured for unknown site {ev.site!r}")
        for value in (ev.inbound, ev.outbound):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise IllegalTransition(f"BandwidthMeasured for {ev.site}: {value!r} is not MB/s > 0")
        if self.data is None:   # no data priced: nothing depends on a bandwidth yet
            if self._model is not None:    # (but kept for when outputs are measured)
                self._model = self._model.with_bandwidth(ev.site, ev.inbound, ev.outbound)
            return
        self.data = self.data.with_bandwidth(ev.site, ev.inbound, ev.outbound)
        self._model = self.data
        self._dt[x] = self.data.times(ev.site)
        self._resort = True
        if self.walltime.guard:   # a slower link drains the site's pilots sooner: its due instant moves
            self._refresh_due(x)

    @property
    def data_model(self):
        """The data model the engine prices with — or, while it moves no byte, the one it was
        given (None: the driver gave none)."""
        return self.data if self.data is not None else self._model

    def _on_outputs_measured(self, ev: OutputsMeasured, out: list[Action]) -> None:
        """A task's outputs measured (the mean of those delivered so far): new decisions price
        their trip home with it. A bag priced with no data until now (outputs declared, their
        size not) starts pricing it here; windows already open keep their figures."""
        value = ev.out_bytes
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise IllegalTransition(f"OutputsMeasured: {value!r} is not a number of bytes >= 0")
        model = self.data if self.data is not None else self._model
        if model is None:
            return   # the driver prices no data for this bag (no model was given)
        model = dataclasses.replace(model, out_bytes=float(value))
        self._model = model
        self.data = model if model.moves else None
        self._dt = [model.times(s.name) for s in self.sites] if self.data is not None else []
        self._resort = True
        if self.walltime.guard:   # a task's hold may have grown (its inputs now priced): drains move
            self._refresh_dues()
