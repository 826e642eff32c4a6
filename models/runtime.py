"""T̂x per site as a distribution: a point rate, and the spread measured around it (issue 16).

LIM (:mod:`resel.models.lim`) and the calibrated fit (:mod:`resel.models.calibration`) both end
in one number per site, seconds per baseline instruction. A decision needs more than the point:
"when will my bag be done, and how sure are you?" So each site's runtime model here is

* a **point rate** (a :class:`~resel.models.lim.SiteRate`): T̂x = rate · instructions; the
  engine predicts and windows with it;
* the **ratios** measured / predicted that describe the spread around it, from one of
  - the calibration residuals of a fit (leave-one-out ratios T_x / T̂x of the tasks the fit
    was made from, so a task's own time never narrows its interval), or
  - the per-slot clocks of a heterogeneous pool (the collector's ``Mips`` or clock ads, the
    probes' and pilots' measured clocks): a task on a slot of clock c runs median(c) / c
    times the point (LIM's T̂x is inversely proportional to the clock);
  - none: plain LIM with nothing measured has no interval, and says so.

An interval at level 1 − α is [ρ_(α/2), ρ_(1−α/2)] · T̂x, with ρ_p the *type-6* quantile of the
ratios (rank p·(n + 1), interpolated): for n exchangeable ratios and a new one from the same
law, the k-th smallest lies below it with probability k / (n + 1), so the interval covers
1 − α on average without assuming a distribution — the split-conformal argument. With too few
ratios for a rank (n + 1 < 1 / (α/2)) the quantile is clamped to the extreme ratio and the
interval under-covers; :meth:`SiteRuntime.enough` says whether n suffices.

This module only uses the standard library: the engine imports :class:`EngineRates`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from resel.models.lim import GHZ, SiteRate

#: ratios kept per site at most (evenly spaced order statistics): windows and finish-time
#: samples stay fast; 400 points resolve a 5 % tail to a quarter of a percent
MAX_RATIOS = 400


#: the ratio quantile walltime packing plans with: the top of the central 90 % interval
UPPER_QUANTILE = 0.95


def quantile(sorted_values: Sequence[float], p: float) -> float:
    """Type-6 quantile (Weibull plotting positions) of an ascending sequence.

    Rank h = p·(n + 1), interpolated between neighbours, clamped to the smallest/largest value.
    Why type 6: E[F(X_(k))] = k / (n + 1) for continuous exchangeable data, so the interval
    between the ranks α/2·(n + 1) and (1 − α/2)·(n + 1) covers 1 − α of new values on average.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("quantile of no values")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    h = p * (n + 1)
    if h <= 1:
        return float(sorted_values[0])
    if h >= n:
        return float(sorted_values[-1])
    lo = int(math.floor(h))
    frac = h - lo
    return float(sorted_values[lo - 1] + frac * (sorted_values[lo] - sorted_values[lo - 1]))


def thin(sorted_values: Sequence[float], k: int = MAX_RATIOS) -> tuple[float, ...]:
    """At most ``k`` evenly spaced order statistics of an ascending sequence (keeps its shape)."""
    n = len(sorted_values)
    if n <= k:
        return tuple(float(v) for v in sorted_values)
    return tuple(float(sorted_values[round(i * (n - 1) / (k - 1))]) for i in range(k))


def slot_ratios(clocks: Sequence[float], weights: Sequence[float] | None = None) -> tuple[float, ...]:
    """Per-slot run-time ratios of a heterogeneous pool from its slots' speeds (clock or Mips).

    A slot of speed c runs a task in median / c of the median slot's time; ``weights`` (cores
    per slot) repeat a slot as often as it has cores, since a task lands on a core.
    """
    pairs = [(c, w) for c, w in zip(clocks, weights or [1] * len(clocks)) if c and c > 0 and w and w > 0]
    if not pairs:
        return ()
    expanded = sorted(c for c, w in pairs for _ in range(max(1, int(round(w)))))
    med = statistics.median(expanded)
    return thin(sorted(med / c for c in expanded))


@dataclass(frozen=True, slots=True)
class SiteRuntime:
    """One site's runtime model: the point rate, where it came from, and its spread.

    ``source`` is ``"lim"`` or ``"fit"``; ``detail`` one sentence a person can check (the fit's
    id, application, evidence); ``ratios`` ascending measured/predicted ratios (empty: no
    interval); ``spread`` says where they came from.
    """

    site: str
    rate: SiteRate
    source: str = "lim"
    detail: str = ""
    ratios: tuple[float, ...] = ()
    spread: str = ""

    def tx(self, instructions: float) -> float:
        return self.rate.tx(instructions)

    def ratio(self, p: float) -> float | None:
        """The p-quantile of measured / predicted (None without any measurement)."""
        return quantile(self.ratios, p) if self.ratios else None

    def tx_quantile(self, instructions: float, p: float) -> float:
        """T_x's p-quantile; the point itself where nothing measured its spread."""
        r = self.ratio(p)
        return self.tx(instructions) * (1.0 if r is None else r)

    def interval(self, instructions: float, level: float = 0.9) -> tuple[float, float] | None:
        """The central ``level`` prediction interval of one task's T_x, or None (no ratios)."""
        if not self.ratios:
            return None
        a = (1.0 - level) / 2.0
        tx = self.tx(instructions)
        return tx * quantile(self.ratios, a), tx * quantile(self.ratios, 1.0 - a)

    def enough(self, level: float = 0.9) -> bool:
        """Whether there are ratios enough for the interval's ranks (n + 1 ≥ 2 / (1 − level))."""
        return len(self.ratios) + 1 >= 2.0 / (1.0 - level) - 1e-9

    def as_dict(self, instructions: float | None = None, level: float = 0.9) -> dict:
        d = {"site": self.site, "source": self.source, "detail": self.detail, "spread": self.spread or None,
             "n_ratios": len(self.ratios), "kappa": self.rate.kappa, "clock_ghz": self.rate.clock_ghz,
             "s_per_instruction": self.rate.seconds_per_instruction}
        if instructions is not None:
            d["tx"] = self.tx(instructions)
            iv = self.interval(instructions, level)
            d["tx_interval"] = list(iv) if iv else None
            d["interval_level"] = level
        return d


def rate_from_seconds_per_instruction(site: str, s_per_instr: float, kappa: float | None = None) -> SiteRate:
    """The :class:`SiteRate` with this rate: κ kept (1 if unknown), the clock LIM would need."""
    k = kappa if kappa and kappa > 0 else 1.0
    return SiteRate(site, k, k / (s_per_instr * GHZ))


def window_quantile(target: SiteRuntime, origin: SiteRuntime, instructions: float, q: float) -> float:
    """The q-quantile of W = T_x(r') − T_x(r) with each T_x = T̂x · ρ, ρ drawn independently
    from the site's ratios (a site without ratios contributes its point).

    Re-selection with ``--risk q`` moves a task for good only when even this upper quantile of
    the window is ≤ 0 (r' is faster with probability ≥ q), and otherwise keeps it provisional
    on r' for that longer window. All pairs of the (thinned) ratios are weighed alike.
    """
    a = [target.tx(instructions) * r for r in (target.ratios or (1.0,))]
    b = [origin.tx(instructions) * r for r in (origin.ratios or (1.0,))]
    diffs = sorted(x - y for x in a for y in b)
    return quantile(diffs, q)


@dataclass(frozen=True)
class EngineRates:
    """What the engine predicts with, given as input so the simulator and the live coordinator
    use the same numbers (issue 15 item 6).

    ``rates``: T̂x per site (point). ``windows``: Ŵ(r', r) per (target, origin) name pair to use
    instead of T̂x(r') − T̂x(r) (``--risk``: an upper quantile). ``split``: the T̂x the
    queue-aware split plans with (``--objective p90``: each site's upper runtime quantile).
    ``label``: one line saying what produced them (recorded with the run). ``upper``: each
    site's T̂x,hi, the top of its central 90 % runtime interval (the 0.95 ratio quantile), which
    walltime packing plans with (:mod:`resel.walltime`); a site missing from it uses its point.
    ``prior``: per site, (``lim`` or ``fit``, the spread of one task's ln T_x): its rate as the
    prior a learning strategy updates (:mod:`resel.learning`; a site missing from it: LIM, with
    the spread of its runtime interval).
    """

    rates: Mapping[str, SiteRate]
    windows: Mapping[tuple[str, str], float] | None = None
    split: Mapping[str, SiteRate] | None = None
    label: str = ""
    upper: Mapping[str, SiteRate] | None = None
    prior: Mapping[str, tuple[str, float]] | None = None

    def to_json(self) -> dict:
        """A JSON-ready form (stored with a live run so ``--resume`` rebuilds the same engine)."""
        def rates(m: Mapping[str, SiteRate] | None) -> dict | None:
            return None if m is None else {s: [r.kappa, r.clock_ghz] for s, r in m.items()}
        return {"rates": rates(self.rates), "split": rates(self.split), "label": self.label,
                "upper": rates(self.upper),
                "windows": None if self.windows is None else [[a, b, w] for (a, b), w in self.windows.items()],
                "prior": None if self.prior is None else {s: list(p) for s, p in self.prior.items()}}

    @classmethod
    def from_json(cls, d: Mapping) -> "EngineRates":
        def rates(m: Mapping | None) -> dict | None:
            return None if m is None else {s: SiteRate(s, float(k), float(c)) for s, (k, c) in m.items()}
        w, prior = d.get("windows"), d.get("prior")
        return cls(rates(d["rates"]) or {}, None if w is None else {(a, b): float(x) for a, b, x in w},
                   rates(d.get("split")), d.get("label", ""), rates(d.get("upper")),
                   None if prior is None else {s: (str(k), float(v)) for s, (k, v) in prior.items()})


@dataclass
class RuntimeModel:
    """Every site's :class:`SiteRuntime` for one bag (its application), and how it was chosen."""

    sites: dict[str, SiteRuntime]
    model: str = "lim"                  # what was asked: lim, fitted or auto
    application: str = ""
    notes: list[str] = field(default_factory=list)

    def rates(self) -> dict[str, SiteRate]:
        return {s: r.rate for s, r in self.sites.items()}

    @property
    def used(self) -> str:
        """``lim``, ``fitted`` or ``mixed``: what the sites actually use."""
        kinds = {r.source for r in self.sites.values()}
        return "fitted" if kinds == {"fit"} else "lim" if kinds <= {"lim"} else "mixed"

    def summary(self) -> str:
        """One line for a table title: the model per site."""
        fit = sorted(s for s, r in self.sites.items() if r.source == "fit")
        lim = sorted(s for s, r in self.sites.items() if r.source != "fit")
        parts = []
        if fit:
            parts.append("fitted on " + ", ".join(fit))
        if lim:
            parts.append("LIM on " + ", ".join(lim))
        return f"T̂x model {self.used} ({'; '.join(parts)})"

    def engine_rates(self, instructions: float, *, risk: float | None = None,
                     objective: str = "p50") -> EngineRates:
        """The engine's inputs: point rates; with ``risk`` the windows at that quantile; with
        ``objective`` ``p90`` the split's rates at each site's 90 % runtime quantile."""
        if objective not in ("p50", "p90"):
            raise ValueError(f"objective must be p50 or p90, got {objective!r}")
        windows = None
        if risk is not None:
            windows = {(a, b): window_quantile(self.sites[a], self.sites[b], instructions, risk)
                       for a in self.sites for b in self.sites if a != b}
        split = None
        if objective == "p90":
            split = {}
            for s, r in self.sites.items():
                factor = r.ratio(0.9) or 1.0
                split[s] = SiteRate(s, r.rate.kappa, r.rate.clock_ghz / factor)
        label = self.summary() + (f"; windows at risk {risk:g}" if risk is not None else "") + (
            "; split on P90 run times" if objective == "p90" else "")
        upper = {}
        for s, r in self.sites.items():   # T̂x,hi for walltime packing: the 90 % interval's top
            factor = r.ratio(UPPER_QUANTILE)
            if factor is not None:
                upper[s] = SiteRate(s, r.rate.kappa, r.rate.clock_ghz / factor)
        return EngineRates(self.rates(), windows, split, label, upper or None, self.priors())

    def priors(self) -> dict[str, tuple[str, float]]:
        """Per site, its rate as the prior of a learning strategy (:mod:`resel.learning`): where
        it comes from (``lim`` or ``fit``) and the spread of one task's ln T_x, from its ratios
        (their 5–95 % range over ±1.645 σ), else the default.

        A LIM site's ratios are its pool's published slot clocks: they say how the slots'
        clocks differ, not how the application's speed does — slots of one clock differ in
        IPC by as much again (another CPU generation, another memory system), which LIM does
        not see. So they may widen a LIM site's spread past the default, never narrow it: a
        learning run would otherwise trust a pool's wave to end with its typical slot (the
        simulated pool's clocks give 0.08 where its tasks spread 0.11; docs/engine.md, "A
        pool's wave ends with its slowest slot"). A fit's ratios are measured run times and
        say it all."""
        from resel.learning import DEFAULT_SPREAD, MIN_SPREAD
        out = {}
        for s, r in self.sites.items():
            lo, hi = r.ratio(0.05), r.ratio(UPPER_QUANTILE)
            spread = (max(MIN_SPREAD, math.log(hi / lo) / (2 * 1.645)) if lo and hi and hi > lo
                      else DEFAULT_SPREAD)
            if r.source != "fit":
                spread = max(spread, DEFAULT_SPREAD)
            out[s] = ("fit" if r.source == "fit" else "lim", spread)
        return out
