"""Initial selection strategies: which site each task of a bag is first assigned to.

A strategy is named by a short spec: ``random``, ``model``, ``topk:K`` (the chapter-5
variant: the K best sites by LIM affinity, tasks spread round-robin over them), ``queue:E``
(queue-aware: every task to the site of lowest predicted TTC = predicted pilot start + the
waves of T̂x its pilot runs; with ``+reselect`` the E next best sites also hold pilots — the
thesis's "excess resources" — and take tasks by re-selection when a prediction was wrong;
E defaults to 1), each optionally followed by ``+reselect`` to turn run-time re-selection on
and by ``+learn`` to learn each site's rate from the tasks that finish there during the run
(:mod:`resel.learning`). ``reselect`` alone means ``random+reselect`` — the thesis's experiment
3 replayed the random runs with re-selection.

``auto`` (the default of ``run``, ``simulate`` and ``plan``, issue 26) is resel's own choice:
``queue+reselect+learn`` when at least one viable site has a start estimate (every simulated,
Slurm, PBS and HTCondor site whose queue the driver could read), else ``model+reselect+learn``.
The engine resolves it when the bag is submitted, from the estimates the driver passes in
:class:`~resel.events.BagSubmitted`, and says which it used and why (``Engine.auto_choice``).
A learning run's split (:func:`queue_split` with ``spread``) prices a pool's one wave of j tasks
at its slowest of j slots (:func:`slowest_of`) and leaves out a site whose share the others
finish by the same horizon (docs/engine.md, "A pool's wave ends with its slowest slot").

The *peer* strategies are what a user would do without resel (issue 17, docs/peers.md); they
take no ``+reselect``: ``race[:K]`` (the bag's pilot on every site, the first K to start keep
the bag, the others are cancelled), ``earliest`` (one submission to the site of earliest
estimated start, never moved), ``failover[:T]`` (the best-ranked site; nothing started within
T seconds: cancel, try the next) and ``rebroker[:TIMEOUT]`` (PanDA-style brokerage weights, and
tasks queued too long or on an overloaded site reassigned).

Where the predicted start comes from (the scheduler's answer, a forward-simulated twin of the
queue, or a QBETS bound of the wait from history) is the driver's business: the engine only
sees one number per site, or None for a site whose queue could not be read.

A bag that moves data (docs/engine.md, "Selection sees the data") ranks the sites of ``model``,
``topk`` and ``queue`` by T̂x' = T̂x + D, D a task's data time there (:mod:`resel.transfer`;
every site is cold at submission, so D includes the shared inputs). The queue-aware TTC counts
the shared inputs once, before the first wave, each wave's task its own inputs, and the last
wave's outputs once after it. The peers rank as their users do, by T̂x alone.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass
from statistics import NormalDist
from typing import Callable, Sequence

from resel.domain import Bag, Site
from resel.errors import ReselError
from resel.formalism import lim_resource, lim_task, res_select, satisfy_task, top_k
from resel.models.lim import SiteRate
from resel.transfer import DataTimes

BASES = ("random", "model", "topk", "queue", "auto")
#: flags a base strategy may carry (``BASE+flag``); peers and ``auto`` take none
FLAGS = ("reselect", "learn")
#: strategies a user would pick instead of resel (docs/peers.md); no ``+reselect``
PEERS = ("race", "earliest", "failover", "rebroker")
#: failover: seconds a submission may stay pending before the next site is tried (SkyPilot's 120 s)
FAILOVER_TIMEOUT = 120.0
#: rebroker: seconds a task may wait on its site before it is reassigned
REBROKER_TIMEOUT = 3600.0


@dataclass(frozen=True, slots=True)
class Strategy:
    """A parsed strategy spec."""

    base: str
    reselect: bool = False
    k: int = 2
    extra: int = 1      # queue: sites holding extra pilots beyond the best one (with +reselect)
    timeout: float = 0.0   # failover: T (s) before the next site; rebroker: queued-too-long (s)
    learn: bool = False    # learn each site's rate from this run's finished tasks (resel.learning)

    @property
    def peer(self) -> bool:
        """One of the strategies resel is compared against (docs/peers.md)."""
        return self.base in PEERS

    @property
    def auto(self) -> bool:
        """resel's default: resolved to ``queue+reselect+learn`` or ``model+reselect+learn`` by
        the engine when the bag is submitted (:func:`resolve_auto`)."""
        return self.base == "auto"

    @property
    def asks_waits(self) -> bool:
        """Whether the driver hands the engine every pilot size's start estimate with the bag
        (``BagSubmitted.wait_menu``): the queue-aware strategy, and ``auto``, which is
        queue-aware wherever a start is estimated."""
        return self.base in ("queue", "auto")

    @property
    def name(self) -> str:
        if self.base == "auto":
            return "auto"
        if self.base == "race":
            return "race" if self.k == 1 else f"race:{self.k}"
        if self.base in ("failover", "rebroker"):
            default = FAILOVER_TIMEOUT if self.base == "failover" else REBROKER_TIMEOUT
            # the number written out in full: f"{1e6:g}" is '1e+06', whose '+' parsed as a flag
            # refused failover:1000000 although the help allows up to 10,000,000
            return self.base if self.timeout == default else f"{self.base}:{_plain(self.timeout)}"
        core = f"topk:{self.k}" if self.base == "topk" else self.base
        if self.base == "queue" and self.extra != 1:
            core = f"queue:{self.extra}"
        learn = "+learn" if self.learn else ""
        if self.base == "random" and self.reselect:
            return "reselect" + learn
        return core + ("+reselect" if self.reselect else "") + learn

    @staticmethod
    def parse(spec: str) -> "Strategy":
        """``random``, ``model``, ``topk:3``, ``queue:2+reselect``, ``reselect``, …"""
        text = spec.strip().lower().replace("queue-aware", "queue")
        if text in ("reselect", "re-selection", "reselection"):
            return Strategy("random", True)
        parts = text.split("+")
        base, flags = parts[0], parts[1:]
        if base == "auto":
            if flags:
                raise ReselError(f"strategy {spec!r}: auto already re-selects and learns; write auto")
            return Strategy("auto", True, learn=True)
        if base in ("reselect", "re-selection", "reselection"):   # reselect+learn
            base, flags = "random", ["reselect", *flags]
        peer = base.split(":", 1)[0]
        if peer in PEERS:
            return _parse_peer(spec, peer, base[len(peer):], flags)
        k = 2
        if base.startswith("topk"):
            num = base[4:].lstrip(":") or "2"
            if not num.isdigit() or int(num) < 1:
                raise ReselError(f"strategy {spec!r}: topk takes a whole number >= 1, as in topk:2")
            base, k = "topk", int(num)
        extra = 1
        if base.startswith("queue:"):
            num = base[6:]
            if not num.isdigit():
                raise ReselError(f"strategy {spec!r}: queue takes a whole number of extra sites >= 0, as in queue:1")
            base, extra = "queue", int(num)
        if base not in BASES or any(f not in FLAGS for f in flags) or len(set(flags)) != len(flags):
            raise ReselError(f"unknown strategy {spec!r}: use auto, random, model, topk:K, queue[:E], reselect, "
                             f"BASE+reselect, BASE+learn, BASE+reselect+learn, or a peer: race[:K], earliest, "
                             f"failover[:T], rebroker[:TIMEOUT]")
        return Strategy(base, "reselect" in flags, k, extra, learn="learn" in flags)


def _plain(seconds: float) -> str:
    """A time for a strategy's name: a whole number without exponent or point, else its repr."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def _parse_peer(spec: str, base: str, arg: str, flags: list[str]) -> Strategy:
    """``race[:K]``, ``earliest``, ``failover[:T]``, ``rebroker[:TIMEOUT]`` (no ``+reselect``)."""
    if flags:
        raise ReselError(f"strategy {spec!r}: {base} is a peer strategy (what users do without resel) "
                         f"and takes no +{'+'.join(flags)}; drop it, as in {base}")
    num = arg[1:] if arg.startswith(":") else arg
    if arg and not arg.startswith(":"):
        num = "?"
    if base == "race":
        if num and (not num.isdigit() or int(num) < 1):
            raise ReselError(f"strategy {spec!r}: race keeps the first K sites to start, K a whole number >= 1, as in race:2")
        return Strategy("race", False, k=int(num or 1))
    if base == "earliest":
        if arg:
            raise ReselError(f"strategy {spec!r}: earliest takes no number; write earliest")
        return Strategy("earliest")
    default = FAILOVER_TIMEOUT if base == "failover" else REBROKER_TIMEOUT
    try:
        value = float(num) if num else default
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1 or value > 1e7:
        raise ReselError(f"strategy {spec!r}: {base} takes a time in seconds from 1 to 10,000,000, "
                         f"as in {base}:{default:g}")
    return Strategy(base, False, timeout=value)


def resolve_auto(strategy: Strategy, sites: list[Site], viable: list[int],
                 wait_menu: dict[str, list[float | None]] | None,
                 wait_estimates: dict[str, float] | None) -> tuple[Strategy, str]:
    """What ``auto`` runs as, and why, from the start estimates the driver passed with the bag.

    Queue-aware selection with re-selection (``queue+reselect``) where at least one viable site
    has a start estimate — a queue the driver could read, a pool's negotiation cycle, a
    simulated queue or wait model: waits then differ by hours between sites and choosing by
    clock alone can lose days (docs/peers.md) — else ``model+reselect`` (the lowest T̂x; with
    no estimate there is nothing to rank waits by). Both learn the sites' rates during the run.
    A strategy that is not ``auto`` is returned as it is, with an empty reason.
    """
    if not strategy.auto:
        return strategy, ""

    def known(name: str) -> bool:
        menu = (wait_menu or {}).get(name) or []
        values = [*menu, (wait_estimates or {}).get(name)]
        return any(w is not None and math.isfinite(w) for w in values)

    with_estimate = [sites[i].name for i in viable if known(sites[i].name)]
    if with_estimate:
        without = [sites[i].name for i in viable if sites[i].name not in with_estimate]
        why = ("start estimates for " + ", ".join(with_estimate)
               + (f" (none for {', '.join(without)}: ranked after them)" if without else "")
               + ": queue-aware selection with re-selection, rates learned during the run")
        return Strategy("queue", True, extra=1, learn=True), why
    return Strategy("model", True, learn=True), (
        "no site has a start estimate (no queue could be read): the lowest predicted T_x with "
        "re-selection, rates learned during the run")


def viable_sites(bag: Bag, sites: list[Site]) -> list[int]:
    """Indices of the sites that can run the bag's tasks (Alg. 2 on the LIM instantiation)."""
    task = lim_task(bag.name, bag.profile.instructions, bag.isa)
    out = []
    for i, site in enumerate(sites):
        cap = site.pilot.max_cores or site.cores
        if bag.cores_per_task <= min(cap, site.cores) and satisfy_task(lim_resource(site.name, site.clock.base, site.isa), task):
            out.append(i)
    return out


def ranked(viable: list[int], rates: list[SiteRate], instructions: float, k: int,
           data: list[DataTimes] | None = None) -> list[int]:
    """The k best viable sites by affinity −T̂x (with ``data``, −T̂x' of a cold site), ties
    to the first in site order."""
    if data is None:
        return top_k(viable, lambda i: -rates[i].tx(instructions), k)
    return top_k(viable, lambda i: -(rates[i].tx(instructions) + data[i].seconds(cold=True)), k)


def predicted_ttc(wait: float | None, tx: float, tasks: int, slots: int, data: DataTimes | None = None) -> float:
    """A site's predicted TTC for ``tasks`` tasks: the pilot's predicted start, then as many
    waves of T̂x as its ``slots`` need. An unknown start is infinite: ranked last, never chosen
    over a site whose queue could be read. With ``data``: the shared inputs before the first
    wave, each task's own inputs in its wave, the last wave's outputs home after it."""
    if wait is None or slots <= 0:
        return math.inf
    if data is None:
        return max(0.0, wait) + math.ceil(tasks / slots) * tx
    return max(0.0, wait) + data.shared_in + math.ceil(tasks / slots) * (tx + data.own_in) + data.out


def queue_ranking(bag: Bag, viable: list[int], rates: list[SiteRate], waits: list[float | None],
                  slots: list[int] | None = None, data: list[DataTimes] | None = None,
                  need: list[int] | None = None) -> list[tuple[int, float]]:
    """Viable sites by predicted TTC, best first, with their TTC (ties: site order).

    ``need`` (a bag of several widths): per site, the slots (units) the whole bag takes there
    — each task counted by its cores, not as one slot — which ``slots`` are counted in."""
    n = bag.count
    caps = slots if slots is not None else [n] * len(waits)
    scored = [(i, predicted_ttc(waits[i], rates[i].tx(bag.profile.instructions), n if need is None else need[i],
                                max(1, min(n if need is None else need[i], caps[i])),
                                None if data is None else data[i]))
              for i in viable]
    return sorted(scored, key=lambda it: (it[1], it[0]))


def initial_assignment(strategy: Strategy, bag: Bag, viable: list[int], rates: list[SiteRate],
                       rng: random.Random, waits: list[float | None] | None = None,
                       slots: list[int] | None = None,
                       data: list[DataTimes] | None = None,
                       need: list[int] | None = None) -> tuple[list[int], list[int]]:
    """Each task's origin site index, and the candidate sites re-selection may move it to.

    Args:
        waits: per site, the predicted wait of its pilot (the queue-aware strategy); None for
            a site whose queue could not be read.
        slots: per site, how many tasks its pilots run at once (the queue-aware TTC's waves).
        data: per site, a task's data times (:mod:`resel.transfer`): ``model``, ``topk`` and
            ``queue`` then rank by T̂x' (module docstring); None: by T̂x.
        need: a bag of several widths: per site, the slots (units) all its tasks take there,
            ``slots`` being counted in the same units (None: one slot per task).

    Raises:
        ReselError: no site can run the bag, or ``queue`` was asked for without any estimate.
    """
    if not viable:
        raise ReselError(f"no site can run bag {bag.name!r} (ISA {bag.isa}, {bag.cores_per_task} cores per task)")
    n = bag.count
    if strategy.base == "random":
        return [rng.choice(viable) for _ in range(n)], viable
    if strategy.base == "model":
        if data is None:
            best = res_select(viable, lambda i: -rates[i].tx(bag.profile.instructions))
        else:
            best = res_select(viable, lambda i: -(rates[i].tx(bag.profile.instructions)
                                                  + data[i].seconds(cold=True)))
        return [best] * n, viable
    if strategy.base == "earliest":   # sbatch -M a,b,…: the earliest estimated start, for good
        if waits is None or all(waits[i] is None for i in viable):
            raise ReselError("the earliest strategy needs a start estimate from at least one site; "
                             "none of the viable sites' queues could be read")
        best = min((i for i in viable if waits[i] is not None),
                   key=lambda i: (max(0.0, waits[i]), rates[i].tx(bag.profile.instructions), i))
        return [best] * n, [best]
    if strategy.base in ("race", "failover"):   # every task waits for the first site to start
        order = ranked(viable, rates, bag.profile.instructions, len(viable))
        return [order[0]] * n, order
    if strategy.base == "rebroker":
        return panda_assignment(n, viable, rates, bag.profile.instructions), viable
    if strategy.base == "queue":
        if waits is None or all(waits[i] is None for i in viable):
            raise ReselError("the queue-aware strategy needs a start estimate from at least one site; "
                             "none of the viable sites' queues could be read")
        ranking = [i for i, ttc in queue_ranking(bag, viable, rates, waits, slots, data, need) if ttc < math.inf]
        held = ranking[:1 + (strategy.extra if strategy.reselect else 0)]
        return [held[0]] * n, held
    best_k = ranked(viable, rates, bag.profile.instructions, strategy.k, data)
    return [best_k[t % len(best_k)] for t in range(n)], best_k


def panda_weight(running: int, queued: int) -> float:
    """PanDA's brokerage weight of a queue: (running + 1) / (queued + 10) — panda-docs,
    docs/source/advanced/brokerage.rst, "ATLAS Production Job Brokerage" (its activated,
    assigned, starting and defined jobs are all *queued* here)."""
    return (running + 1) / (queued + 10)


def panda_assignment(n: int, viable: list[int], rates: list[SiteRate], instructions: float) -> list[int]:
    """The rebroker's initial brokerage: task by task to the site of highest PanDA weight,
    the tasks already assigned counting as queued there (nothing runs yet, so this spreads the
    bag evenly); ties to the lower T̂x, then site order."""
    queued = {i: 0 for i in viable}
    out = []
    for _ in range(n):
        best = max(viable, key=lambda i: (panda_weight(0, queued[i]), -rates[i].tx(instructions), -i))
        queued[best] += 1
        out.append(best)
    return out


def slowest_of(k: int, spread: float) -> float:
    """The expected slowest of k tasks on k independent slots, over one slot's typical time:
    exp(σ · z_k), σ the ln-spread of a slot's rate and z_k the expected largest of k standard
    normals (Blom's approximation, Φ⁻¹((k − 0.375) / (k + 0.25)): 0 for one slot, 1.77 for
    16, 2.87 for 256). A pool's one wave ends with its slowest slot, not its typical one."""
    if k <= 1 or spread <= 0:
        return 1.0
    return math.exp(spread * NormalDist().inv_cdf((k - 0.375) / (k + 0.25)))


def _most_by(start: float, k: int, tx: float, spread: float, horizon: float, most: int) -> int:
    """The most tasks j ≤ ``most`` that k independent slots starting at ``start`` end by
    ``horizon``: start + ⌈j / k⌉ · T̂x · :func:`slowest_of` (min(j, k)) ≤ horizon (it grows with
    j, so bisection finds the largest)."""
    lo, hi = 0, max(0, most)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if start + math.ceil(mid / k) * tx * slowest_of(min(mid, k), spread) <= horizon + 1e-9:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _capacity(options: list[tuple[int, float | None]], tx: float, horizon: float,
              spread: float = 0.0, most: int = 0) -> tuple[int, int]:
    """Most tasks a site finishes by ``horizon`` with one of its pilot sizes, and that size.

    A pilot of k slots starting at w runs ⌊(horizon − w) / T̂x⌋ waves of k tasks. With a
    ``spread`` (a pool's independent slots, :func:`queue_split`), j tasks end by
    w + ⌈j / k⌉ · T̂x · :func:`slowest_of` (min(j, k)): the most j ≤ ``most`` that fit.
    """
    best, best_k = 0, 0
    for k, w in options:
        if w is None or not math.isfinite(w) or k < 1:
            continue
        if spread > 0:
            j = _most_by(max(0.0, w), k, tx, spread, horizon, most)
            if j > best:
                best, best_k = j, k
            continue
        waves = math.floor((horizon - max(0.0, w)) / tx + 1e-9) if tx > 0 else 0
        if waves > 0 and k * waves > best:
            best, best_k = k * waves, k
    return best, best_k


#: the split's pilot size for a site: among its sizes predicted to finish its share within
#: this much of the chosen one's finish, the one whose start is estimated earliest (ties: the
#: larger). A larger pilot that buys a wave with a later start leans on two fragile figures —
#: its start estimate (a near-whole-machine size waits far longer than estimated) and T̂x
#: (LIM's, 2.4-2.7x the measured task time on the trace sites, so a wave looks dearer than it
#: is). Measured (benchmarks/eval_peers.py, 10 seeds, ``auto``): on wagap at 1,024 tasks zegox
#: took 512 slots (2 waves, estimated start 40.49 h, 40.48 h for 407) and started past 43.9 h,
#: TTC 48.6 h where 342 slots (40.47 h, 5.3 % dearer) start at 23.2 h: 26.0 h; and 342 (15.62 h)
#: over 288 (13.62 h, 1.8 % dearer): started 13.6 h against 4.3 h, TTC 16.3 h against 7.9 h
#: (1.06 and 1.10 measured the same on every set; 1.02 leaves the 512)
STEADY = 1.10


def _steadier(options: list[tuple[int, float | None]], tx: float, take: int, k: int) -> int:
    """The pilot size for ``take`` tasks at a site whose split chose ``k`` slots: the size no
    larger than k whose start is estimated earliest among those whose start + ⌈take / size⌉
    waves of T̂x is within :data:`STEADY` of k's (ties: the larger); k if k has no estimate."""
    est = {s: max(0.0, w) for s, w in options if w is not None and math.isfinite(w) and s >= 1}
    if k not in est:
        return k
    bound = STEADY * (est[k] + math.ceil(take / k) * tx)
    ok = [s for s in est if s <= k and est[s] + math.ceil(take / s) * tx <= bound]
    return min(ok, key=lambda s: (est[s], -s))


def _fewest_sites(caps: dict[int, tuple[int, int]], order: list[int], n: int) -> dict[int, tuple[int, int]]:
    """The split's capacities at its horizon without the sites it does not need: while the other
    sites can finish the whole bag by the same horizon, the site that would take the smallest
    share (ties: the later in ``order``) is dropped. Each site's rate is uncertain until its tasks
    measure it, and the bag ends with the slowest of the sites it uses: a share that saves no
    wave elsewhere adds that site's uncertainty to the finish and buys nothing (docs/engine.md,
    "A pool's wave ends with its slowest slot")."""
    caps = dict(caps)
    while True:
        shares, left = {}, n
        for i in order:
            shares[i] = min(caps[i][0], left)
            left -= shares[i]
        used = [i for i in order if shares[i] > 0]
        drop = [i for i in used if sum(caps[j][0] for j in used if j != i) >= n]
        if len(used) < 2 or not drop:
            return caps
        worst = min(drop, key=lambda i: (shares[i], -order.index(i)))
        caps[worst] = (0, caps[worst][1])


def queue_split(strategy: Strategy, bag: Bag, viable: list[int], tx: list[float],
                options: list[list[tuple[int, float | None]]], units: Sequence[Sequence[int] | None] | None = None,
                weights: Sequence[float] | None = None,
                spread: dict[int, float] | None = None) -> tuple[list[int], list[int], dict[int, int]]:
    """The queue-aware plan with pilot sizes: split the bag over sites so the predicted
    makespan — each site's pilot start + its waves of T̂x — is smallest.

    ``options[i]`` lists site i's pilot sizes (task slots) with the predicted start of each
    (None: unknown). A whole-machine pilot may wait for the machine to drain while half of it
    backfills at once, so the plan weighs every size. The smallest horizon T at which the
    sites together finish the bag is found by bisection (capacity grows with T); tasks then go
    to the sites in order of their earliest possible finish, each up to its capacity at T.

    ``spread`` (a learning run, :meth:`resel.engine.Engine._pool_spread`): per site index whose
    tasks each meet a slot of their own (a pool's one-task pilots), the ln-spread of a slot's
    rate; j tasks of one wave there are priced at the slowest of j slots, not the typical one
    (:func:`slowest_of`); and a site whose share the others finish by the same horizon is left
    out (:func:`_fewest_sites`). None: every task at T̂x, every site that fits, as before.

    A bag of several widths (``units``: per site, each task's slots there, None for one each;
    ``weights``: each task's T̂x over the mean) is split by :func:`_packed_split` instead
    (``spread`` is not applied there).

    Returns each task's origin, the sites holding pilots (those with tasks, then the
    ``strategy.extra`` next best by their own single-site TTC, with ``+reselect``), and the
    pilot size (slots) chosen per site.

    Raises:
        ReselError: no viable site has any start estimate.
    """
    n = bag.count
    known = [i for i in viable if any(w is not None and math.isfinite(w) for _, w in options[i])]
    if not known:
        raise ReselError("the queue-aware strategy needs a start estimate from at least one site; "
                         "none of the viable sites' queues could be read")
    if units is not None and weights is not None:
        return _packed_split(strategy, n, known, tx, options, units, weights)

    hedge = spread is not None
    spread = spread or {}

    def solo(i: int) -> tuple[float, int]:
        """Site i alone: its best (TTC, slots) over its pilot sizes."""
        s = spread.get(i, 0.0)
        return min(((predicted_ttc(w, tx[i] * slowest_of(min(n, k), s), n, k), k) for k, w in options[i]
                    if w is not None and math.isfinite(w) and k >= 1), default=(math.inf, 0))

    ranking = sorted(known, key=lambda i: (solo(i)[0], i))
    lo = min(max(0.0, w) + tx[i] for i in known for _, w in options[i] if w is not None and math.isfinite(w))
    hi = solo(ranking[0])[0]
    for _ in range(60):                   # bisection on the horizon; capacity is monotone in it
        if hi - lo <= 1e-6 * max(1.0, hi):
            break
        mid = (lo + hi) / 2
        if sum(_capacity(options[i], tx[i], mid, spread.get(i, 0.0), n)[0] for i in known) >= n:
            hi = mid
        else:
            lo = mid
    caps = {i: _capacity(options[i], tx[i], hi, spread.get(i, 0.0), n) for i in known}
    order = sorted(known, key=lambda i: (min((max(0.0, w) + tx[i] for k, w in options[i]
                                              if w is not None and math.isfinite(w)), default=math.inf), i))
    if hedge:
        caps = _fewest_sites(caps, order, n)
    origins: list[int] = []
    sizes: dict[int, int] = {}
    for i in order:
        take = min(caps[i][0], n - len(origins))
        if take > 0:
            origins += [i] * take
            k = caps[i][1]
            if k <= take and not spread.get(i, 0.0):
                k = _steadier(options[i], tx[i], take, k)
            sizes[i] = min(k, take)
    if len(origins) < n:                  # numerical slack: the rest to the best single site
        best = ranking[0]
        origins += [best] * (n - len(origins))
        sizes.setdefault(best, min(n, solo(best)[1]))
    return origins, _held(strategy, order, ranking, sizes, solo), sizes


def _held(strategy: Strategy, order: list[int], ranking: list[int], sizes: dict[int, int],
          solo: Callable[[int], tuple[float, int]]) -> list[int]:
    """The sites holding pilots: those given tasks (in ``order``), then with ``+reselect`` the
    ``strategy.extra`` next best by their own single-site TTC (their pilot size added to
    ``sizes``)."""
    held = [i for i in order if i in sizes]
    if strategy.reselect:
        for i in ranking:
            if len(held) >= len(sizes) + strategy.extra:
                break
            if i not in sizes:
                held.append(i)
                sizes[i] = solo(i)[1]
    return held


#: a bag of several widths: the split's sites take their tasks at this much past the best
#: horizon found — among plans within 2 % of the best predicted TTC, the one that leans on the
#: fastest sites (taken first) and leaves less to the slow, noisy ones. Measured on the
#: packing benchmark (thesis sites, 64-core pilots, LIM, 5 seeds: ``auto`` at 64 tasks took
#: 12.4 h without it, 6.95 h with it, as before the split counted cores; docs/benchmarks.md, "Issue 26 item 3")
LEAN = 1.02


def _packed_split(strategy: Strategy, n: int, known: list[int], tx: list[float],
                  options: list[list[tuple[int, float | None]]], units: Sequence[Sequence[int] | None],
                  weights: Sequence[float]) -> tuple[list[int], list[int], dict[int, int]]:
    """:func:`queue_split` for a bag of several widths (a table: tasks of unequal T̂x too), each
    task counted by its own cores and run time — not a pilot's units as tasks of the mean.

    The tasks are taken largest first, and the sites fastest first (by T̂x); a pilot of k units
    starting at w runs them in waves: each wave the next tasks whose units sum to at most k,
    as long as its largest (its first) — so a wave's length is that task's T̂x (ω · T̂x), and a
    site finishes by the horizon T the waves that end by T. Spread by the mean instead (tasks in
    the table's order, waves of the mean T̂x), the largest tasks landed on a slow pool at random
    and held the whole bag: measured, the median TTC of 8 bags doubled (docs/queue-aware.md).
    Bisection on T as for one width.
    """
    seq = sorted(range(n), key=lambda t: -weights[t])          # largest first, ties by index
    per = {i: units[i] for i in known}
    sums: dict[int, list[int]] = {}                             # per units tuple: running units, in seq
    for p in per.values():
        if id(p) not in sums:
            sums[id(p)] = list(itertools.accumulate((1 if p is None else p[t] for t in seq), initial=0))
    starts = {i: [(k, max(0.0, w)) for k, w in options[i] if w is not None and math.isfinite(w) and k >= 1]
              for i in known}

    def waves(i: int, k: int, w: float, at: int, horizon: float) -> tuple[int, float]:
        """From task ``at`` of seq, where the waves of a k-unit pilot of site i starting at w
        that end by ``horizon`` stop, and when the last of them ends."""
        run, end = sums[id(per[i])], w
        while at < n and end + tx[i] * weights[seq[at]] <= horizon:
            end += tx[i] * weights[seq[at]]
            at = max(at + 1, min(n, bisect.bisect_right(run, run[at] + k) - 1))
        return at, end

    def solo(i: int) -> tuple[float, int]:
        """Site i alone: its best (TTC, slots) over its pilot sizes."""
        return min(((waves(i, k, w, 0, math.inf)[1], k) for k, w in starts[i]), default=(math.inf, 0))

    def reach(i: int, at: int, horizon: float) -> tuple[int, int]:
        """Where the tasks site i finishes by ``horizon`` end, from task ``at`` of seq, and the
        pilot size (the most tasks; ties: the larger, listed first)."""
        return max(((waves(i, k, w, at, horizon)[0], k) for k, w in starts[i]), key=lambda e: e[0],
                   default=(at, 0))

    order = sorted(known, key=lambda i: (tx[i], i))
    ranking = sorted(known, key=lambda i: (solo(i)[0], i))
    lo = min(w + tx[i] * weights[seq[0]] for i in known for _, w in starts[i])
    hi = solo(ranking[0])[0]
    for _ in range(60):                   # bisection on the horizon; capacity is monotone in it
        if hi - lo <= 1e-6 * max(1.0, hi):
            break
        mid = (lo + hi) / 2
        at = 0
        for i in order:
            at = reach(i, at, mid)[0]
        lo, hi = (lo, mid) if at >= n else (mid, hi)
    placed: list[int] = []
    sizes: dict[int, int] = {}
    for i in order:
        at = len(placed)
        end, k = reach(i, at, hi * LEAN)
        if end > at:                      # a pilot no larger than the units of the tasks it takes
            placed += [i] * (end - at)
            sizes[i] = min(k, sums[id(per[i])][end] - sums[id(per[i])][at])
    if len(placed) < n:                   # numerical slack: the rest to the best single site
        best = ranking[0]
        placed += [best] * (n - len(placed))
        sizes.setdefault(best, solo(best)[1])
    origins = [0] * n
    for j, t in enumerate(seq):
        origins[t] = placed[j]
    return origins, _held(strategy, order, ranking, sizes, solo), sizes
