"""The oracle: a lower bound on the TTC any strategy can reach on one seed (docs/peers.md).

The simulator's truth for a seed is fixed before any decision: site s's k-th pilot
submission waits W_s[k] · nodes^e (drawn-wait sites) and runs every task in
t_s[k] = instructions · κ_true / speed_s[k] (both streams seeded by the seed and the site's
name, :class:`~resel.sim.simulation.SiteTruth`); a trace-driven site starts a pilot when
its schedule lets it, never before the cores held by the jobs already running when the bag
arrives are free. The oracle knows all of it and asks: by time T, how many tasks could *any*
schedule have finished? Per site, two counts, each an upper bound (the smaller is used):

* **per pilot** (no limit on concurrent pilots): pilot k of c task slots starts no earlier
  than W[k] · nodes(c)^e and ends within its walltime L, so it finishes at most
  c · ⌊min(T − start, L) / t[k]⌋ tasks; summed over the first M submissions, each with the
  best c. (Drawn-wait sites.)
* **per slot** (at most ``max_pilots`` at once): at time τ the site holds at most A(τ) slots —
  ``max_pilots`` × the largest pilot that could have started by τ (drawn waits), or the cores
  not held by the jobs running at the bag's arrival (trace queues) — and A only grows. Giving
  the j-th slot to appear at a_j its own machine, every schedule fits (interval colouring:
  a task starting at σ finds a machine with a_j ≤ σ free, since at most A(σ) run at once), so
  completions ≤ Σ_j ⌊(T − a_j) / t_min⌋ with t_min the fastest of the first M draws.

A bag that moves data (``[bag.data]``, docs/data.md) adds its true transfer times, as the
simulator moves them (:class:`~resel.sim.simulation._DataTruth`): on site s no
task starts before the shared inputs have crossed (S_s after the site's first pilot starts),
each task holds its slot for its own inputs before it executes (t + I_s), and it is done O_s
after it ends, when its outputs are home. So a site's counts are taken at T − O_s, with no
start before the site's earliest possible pilot start + S_s (the shared inputs are sent once,
at the site's first binding, which is no earlier) and every task I_s longer; the walltime
still counts from where the tasks start (a relaxation: it only adds completions).

A bag with a task table (tasks of unequal instructions, docs/configuration.md) is bounded by
work instead of counts: task i takes w_i times a mean task's T_x (w_i its instructions over the
mean, Σ w_i = n), and by T the sites can have done at most the same sums without the floors —
each slot's or pilot's time over a mean task's T_x, tasks split at will (:meth:`SiteCapacity.work`)
— which must reach Σ w_i; and the largest task must have ended somewhere: T ≥ min over sites of
its earliest slot + w_max × its fastest T_x. Both are necessary, so the bound stays a bound.

The bound is the smallest T at which the sites together could have finished the bag's n
tasks; a strategy's TTC is at least that T, because its schedule is one of those counted.
What it relaxes (why it is not the exact optimum): walltimes in the per-slot count, other
users' jobs queued at the bag's arrival (they can only delay a pilot), the pairing of a
slot's speed with its start, and the concurrency limit in the per-pilot count. The exact
optimum would have to search over submission times and sizes on queues whose answer depends
on them — not tractable; the relaxation is.

``M`` — how many submissions per site the bound allows — matters because every submission
redraws its wait: a strategy that resubmits often may meet a shorter wait. The bound holds
for every strategy that submits at most ``M[s]`` pilots to site s (the evaluation takes M from
the runs it compares, so it bounds each of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from resel.domain import Bag, Site
from resel.transfer import DataTimes

#: slack in ⌊x⌋ so a float T exactly at a task's end still counts the task (the bound stays ≤ TTC)
EPS = 1e-9


@dataclass(frozen=True)
class SiteCapacity:
    """What the oracle knows of one site for one seed."""

    name: str
    slots_per_pilot: int          # the largest pilot, in task slots
    max_pilots: int
    walltime: float
    #: per submission k < M: (earliest start of a one-node pilot, T_x of a task on it) — drawn waits
    draws: tuple[tuple[float, float], ...]
    #: (nodes, slots) per pilot size class: a pilot of that many nodes has at most that many slots
    sizes: tuple[tuple[int, int], ...]
    exponent: float
    #: per-slot count: (time, how many slots appear then), ascending — A(τ) as steps
    slot_times: tuple[tuple[float, int], ...]
    tx_min: float
    #: data (a bag that moves it): no task here starts before ``ready`` — the earliest any of
    #: its pilots could start, plus the shared inputs' trip (−inf without data) — and each is
    #: done ``after`` its end (its outputs home); its own inputs are in ``draws``' and
    #: ``tx_min``'s T_x, since they hold its slot
    ready: float = -math.inf
    after: float = 0.0
    #: the own inputs' trip inside ``tx_min`` (the same for every task, whatever its size)
    own: float = 0.0

    def completions(self, T: float) -> int:
        """At most how many tasks this site finishes by T in any schedule."""
        T -= self.after                 # a task counts once its outputs are home
        ready = self.ready
        per_slot = 0
        for a, count in self.slot_times:
            a = max(a, ready)
            if a >= T:
                break
            per_slot += count * math.floor((T - a) / self.tx_min + EPS)
        if not self.draws:
            return per_slot
        per_pilot = 0
        for w, tx in self.draws:
            best = 0
            for nodes, slots in self.sizes:
                start = max(w * (nodes ** self.exponent if self.exponent else 1.0), ready)
                if start >= T:
                    if self.exponent >= 0:
                        break                  # sizes are by node count: later ones start later
                    continue
                best = max(best, slots * math.floor(min(T - start, self.walltime) / tx + EPS))
            per_pilot += best
            if per_pilot >= per_slot:
                return per_slot
        return min(per_slot, per_pilot)


    def work(self, T: float) -> float:
        """At most how much work this site does by T in any schedule, in mean tasks, tasks
        split at will (:meth:`completions` without its floors: a bag of unequal tasks)."""
        T -= self.after
        ready = self.ready
        per_slot = 0.0
        for a, count in self.slot_times:
            a = max(a, ready)
            if a >= T:
                break
            per_slot += count * (T - a) / self.tx_min
        if not self.draws:
            return per_slot
        per_pilot = 0.0
        for w, tx in self.draws:
            best = 0.0
            for nodes, slots in self.sizes:
                start = max(w * (nodes ** self.exponent if self.exponent else 1.0), ready)
                if start >= T:
                    if self.exponent >= 0:
                        break
                    continue
                best = max(best, slots * min(T - start, self.walltime) / tx)
            per_pilot += best
            if per_pilot >= per_slot:
                return per_slot
        return min(per_slot, per_pilot)

    def first_end(self, weight: float) -> float:
        """The earliest a task of ``weight`` mean tasks can be done here: the first slot (or
        pilot start) plus its run at the fastest T_x, plus its outputs' trip home."""
        starts = [max(a, self.ready) for a, _ in self.slot_times]
        starts += [max(w * (nodes ** self.exponent if self.exponent else 1.0), self.ready)
                   for w, _ in self.draws for nodes, _ in self.sizes]
        return (min(starts) if starts else math.inf) + weight * (self.tx_min - self.own) + self.own + self.after


@dataclass(frozen=True)
class OracleBound:
    """The bound for one bag, site list and seed."""

    ttc: float                    # no strategy (within ``submissions``) finishes sooner
    tasks: int
    submissions: dict[str, int]
    sites: tuple[SiteCapacity, ...]

    def as_dict(self) -> dict:
        return {"ttc": self.ttc, "tasks": self.tasks, "submissions": dict(self.submissions)}


def probe_sizes(cap: int) -> list[int]:
    """The pilot sizes (task slots) whose start the tightened bound probes: every size up to 8,
    then a geometric ladder (ratio 2^(1/4)) and ``cap`` itself."""
    sizes, c = [], 1
    while c < cap:
        sizes.append(c)
        c = c + 1 if c < 8 else max(c + 1, int(round(c * 2 ** 0.25)))
    return sizes + [cap]


def probe_slots(starts: list[tuple[int, float]]) -> list[tuple[float, int]]:
    """A(τ) as steps from probed starts ``(size, start)`` (sizes ascending): the earliest any
    pilot at least as large as a probed size could start is the smallest start from that size
    up; a size between two probed ones starts no sooner than the smaller (a queue never starts
    a larger pilot sooner), so from the smaller one's start the site holds at most the larger
    one less a slot — and all of ``cap`` (the last) from its own start."""
    env, low = [], math.inf
    for size, start in reversed(starts):
        low = min(low, start)
        env.append((size, low))
    env.reverse()
    out: list[tuple[float, int]] = []
    for k, (size, at) in enumerate(env):
        most = env[k + 1][0] - 1 if k + 1 < len(env) else size
        if not out or most > out[-1][1]:
            out.append((at, most))
    steps: list[tuple[float, int]] = []
    have = 0
    for at, most in sorted(out):
        if most > have:
            if steps and steps[-1][0] == at:       # one step per instant
                steps[-1] = (at, steps[-1][1] + most - have)
            else:
                steps.append((at, most - have))
            have = most
    return steps


def _cap_steps(a: list[tuple[float, int]], b: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """min(A₁, A₂) of two step functions given as (time, slots added), ascending."""
    times = sorted({t for t, _ in a} | {t for t, _ in b})
    out, have, ia, ib, sa, sb = [], 0, 0, 0, 0, 0
    for t in times:
        while ia < len(a) and a[ia][0] <= t:
            sa += a[ia][1]
            ia += 1
        while ib < len(b) and b[ib][0] <= t:
            sb += b[ib][1]
            ib += 1
        now = min(sa, sb)
        if now > have:
            out.append((t, now - have))
            have = now
    return out


def site_capacity(site: Site, bag: Bag, seed: int, draws: int, running_ends: list[tuple[float, int]] | None,
                  data: DataTimes | None = None,
                  probe: Callable[[int, float], float] | None = None) -> SiteCapacity | None:
    """One site's truth for the seed, as the oracle uses it (None: the bag cannot run there).

    ``running_ends`` (trace-driven sites): (end, cores) of each job running at the bag's arrival.
    ``data``: a task's true data times on the site (a bag that moves data). ``probe(cores,
    walltime)`` (trace-driven sites, the tightened bound): when a pilot of that shape submitted
    at the bag's arrival would start, the queue's own jobs ending at their true times.
    """
    from resel.sim.simulation import SiteTruth
    # a bag of several widths is packed into a pilot's cores (resel/engine_packing.py): as a
    # bound, every task is taken as narrow as the narrowest (a relaxation: no packing runs more
    # at once); a bag of one width: its cores_per_task, as before
    cpt = min(t.cores for t in bag.tasks) if bag.tasks else bag.cores_per_task
    cap_cores = min(site.pilot.max_cores or site.cores, site.cores)
    per_task = site.pilot.mode == "per-task"
    slots = 1 if per_task else cap_cores // cpt
    if slots < 1:
        return None
    max_pilots = max(1, site.pilot.max_pilots)
    truth = SiteTruth(site, seed)
    m = max(1, draws)
    own = data.own_in if data is not None else 0.0
    txs = [bag.profile.instructions * truth.kappa / truth.draw_speed() + own for _ in range(m)]
    tx_min = min(txs)
    after = data.out if data is not None else 0.0
    if running_ends is not None:          # a trace queue: cores free as the running jobs end
        held = sum(c for _, c in running_ends)
        free = site.cores - held
        limit = max_pilots if per_task else slots * max_pilots
        have = min(limit, max(0, free) // cpt)
        times = [(0.0, have)] if have else []
        for end, cores in sorted(running_ends):
            free += cores
            now_have = min(limit, max(0, free) // cpt)
            if now_have > have:
                times.append((max(0.0, end), now_have - have))
            have = now_have
        if probe is not None:   # the queue's own backlog counted too: what a pilot really waits behind
            shortest = min(txs) - own    # no pilot that runs a task asks for less time than one task takes
            if bag.weights is not None:  # (a task table: than its smallest task takes)
                shortest *= min(bag.weights)
            per = 1 if per_task else slots
            starts = [(k, probe(k * cpt, shortest)) for k in probe_sizes(per)]
            probed = [(at, n * (max_pilots if not per_task else 1)) for at, n in probe_slots(starts)]
            if per_task:        # a pool's one-task pilots: each starts no sooner than the first could
                probed = [(probed[0][0], limit)] if probed else []
            times = _cap_steps(times, [(at, min(n, limit)) for at, n in probed])
        ready = min((a for a, _ in times), default=0.0) + data.shared_in if data is not None else -math.inf
        return SiteCapacity(site.name, slots, max_pilots, site.pilot.walltime, (), ((1, slots),), 0.0,
                            tuple(times), tx_min, ready, after, own)
    waits = [max(0.0, truth.wait()) for _ in range(m)]
    per_node = truth.per_node if site.wait is not None else 1
    exponent = truth.exponent
    sizes = []                             # (nodes, largest pilot of that many nodes, in slots)
    for nodes in range(1, math.ceil(slots * cpt / per_node) + 1):
        fit = min(slots, nodes * per_node // cpt)
        if fit >= 1 and (not sizes or fit > sizes[-1][1]):
            sizes.append((nodes, fit))
    if not sizes:
        sizes = [(math.ceil(cpt / per_node), 1)]
    w_min = min(waits)
    times: list[tuple[float, int]] = []
    have = 0
    order = sizes if exponent >= 0 else sorted(sizes, key=lambda s: w_min * s[0] ** exponent)
    for nodes, fit in order:               # the largest pilot startable by τ grows with τ
        at = w_min * (nodes ** exponent if exponent else 1.0)
        total = min(fit * max_pilots, (site.cores // cpt) if not per_task else max_pilots)
        if total > have:
            times.append((at, total - have))
            have = total
    times.sort()
    ready = -math.inf
    if data is not None:   # the earliest any pilot could start (a slot, or any size of any draw)
        first = min((w * (nodes ** exponent if exponent else 1.0) for w in waits for nodes, _ in sizes),
                    default=0.0)
        ready = min([first, *(a for a, _ in times)]) + data.shared_in
    return SiteCapacity(site.name, slots, max_pilots, site.pilot.walltime, tuple(zip(waits, txs)), tuple(sizes),
                        exponent, tuple(times), tx_min, ready, after, own)


def _running_at_arrival(sites: list[Site]) -> tuple[dict[int, list[tuple[float, int]]], dict[int, Any]]:
    """Per trace-driven site: (end, cores) of other users' jobs running when the bag arrives (0),
    and its batch policy then (what a probe pilot would queue behind)."""
    from resel.sim.queuesite import warm_queues
    if not any(s.queue is not None for s in sites):
        return {}, {}
    _env, queues = warm_queues(sites)
    return ({i: [(j.start + j.run, j.size) for j in q.policy.running.values()] for i, q in queues.items()},
            {i: q.policy for i, q in queues.items()})


def oracle_bound(bag: Bag, sites: list[Site], seed: int, submissions: int | Mapping[str, int] = 1, *,
                 backlog: bool = True) -> OracleBound:
    """The smallest TTC any strategy submitting at most ``submissions`` pilots per site could
    reach on this seed (a lower bound; see the module docstring for why).

    Args:
        submissions: per site name (or one number for all) how many pilot submissions the
            bound allows; a per-task pool needs at least one per task.
        backlog: count a trace-driven queue's backlog (the tightened bound, issue 26): a pilot
            starts no sooner than a probe of its shape submitted at the bag's arrival, run
            forward with the queue's jobs ending at their true times. False: the cores free as
            running jobs end, whatever is queued (the bound before issue 26).
    """
    from resel.selection import viable_sites
    from resel.transfer import TransferModel
    n = bag.count
    data = TransferModel.from_bag(bag, sites, truth=True)   # as the simulator moves it
    counts = {s.name: (submissions.get(s.name, 1) if isinstance(submissions, Mapping) else int(submissions))
              for s in sites}
    running, policies = _running_at_arrival(sites)
    caps = []
    for i in viable_sites(bag, sites):
        probe = None
        if backlog and i in policies:
            from resel.sim.wait_eval import clairvoyant_wait
            probe = (lambda cores, walltime, policy=policies[i]: clairvoyant_wait(policy, 0.0, cores, walltime))
        cap = site_capacity(sites[i], bag, seed, counts[sites[i].name], running.get(i),
                            None if data is None else data.times(sites[i].name), probe)
        if cap is not None:
            caps.append(cap)
    if n == 0 or not caps:
        return OracleBound(0.0 if n == 0 else math.inf, n, counts, tuple(caps))

    def enough(T: float) -> bool:
        done = 0
        for c in caps:
            done += c.completions(T)
            if done >= n:
                return True
        return False

    weights = bag.weights
    if weights is not None:   # a task table: work, and the largest task's earliest end
        total, largest = math.fsum(weights), max(weights)
        floor = min(c.first_end(largest) for c in caps)

        def enough(T: float) -> bool:   # noqa: F811 (the unequal bag's test)
            return T >= floor and math.fsum(c.work(T) for c in caps) >= total * (1 - 1e-12)

    return OracleBound(earliest(enough), n, counts, tuple(caps))


def earliest(enough: Callable[[float], bool]) -> float:
    """The earliest T at which ``enough(T)`` holds, for a test that stays true once true (the
    completions the sites' capacities count by T): doubled from 1 s until it holds, then halved
    to 1e-9 of T; the T returned is where it does not yet hold, so it is below every T that
    makes it (a bound stays a bound). ``math.inf`` when nothing up to 10¹² s holds."""
    lo, hi = 0.0, 1.0
    while not enough(hi):
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return math.inf
    for _ in range(200):                  # enough(lo) is False throughout: lo < every TTC
        if hi - lo <= 1e-9 * hi:
            break
        mid = (lo + hi) / 2
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return lo


@dataclass(frozen=True)
class Hindsight:
    """Per site, when its first pilot could start and when it alone would finish the bag, as the
    oracle's truth makes them for the seed (the bag's n tasks on the site's best single pilot
    size, or a pool's one-task pilots): which site a user should have picked, in hindsight."""

    first_start: dict[str, float]
    finish_alone: dict[str, float]
    #: per site, when a first task could end there on the pilot its finish alone uses (that
    #: pilot's start plus one task; a pool: its first slot's) — how soon choosing it pays
    first_task: dict[str, float] = field(default_factory=dict)
    #: per site, when a first task could end there at the soonest (its first start plus a task)
    soonest_task: dict[str, float] = field(default_factory=dict)

    @property
    def starts_first(self) -> str:
        return min(self.first_start, key=lambda s: (self.first_start[s], s))

    @property
    def finishes_first(self) -> str:
        return min(self.finish_alone, key=lambda s: (self.finish_alone[s], s))

    @property
    def differ(self) -> bool:
        """The site that finishes first is not the one that starts first: where choosing well
        beats starting first (docs/peers.md's 20 % goal applies)."""
        return self.finishes_first != self.starts_first

    @property
    def reachable(self) -> bool:
        """The site that finishes first ends a first task, on the pilot that makes it finish
        first, no later than the site that starts first can end one at the soonest: a strategy
        that sees the queues could have got there first (issue 26's proposed scope of the
        best-peer goal). True where both are the same site."""
        best, first = self.finishes_first, self.starts_first
        if best == first or not self.first_task:
            return best == first
        return self.first_task[best] <= self.soonest_task[first]


class _Packing:
    """A bag of several widths on a ``single`` site, in hindsight: its pilot sizes in units of
    the widths' gcd (none narrower than the widest task), the whole bag packed into each as
    the engine packs it (resel/engine_packing.py: largest first where the engine orders so,
    each task its own run time) — where one width per slot (every slot the widest) counted
    the bag's waves too many. ``units`` is None for a bag of one width."""

    def __init__(self, bag: Bag, sites: list[Site]):
        from resel.engine_packing import core_unit
        self.bag = bag
        self.unit, self.units = core_unit(bag)
        weights = bag.weights or (1.0,) * bag.count
        order = range(bag.count)
        # (the engine's rule: largest first if asked, or ``auto`` where no site is a pool)
        if bag.order == "largest" or (bag.order == "auto" and not any(s.pilot.mode == "per-task" for s in sites)):
            order = sorted(order, key=lambda tid: -weights[tid])
        self.order = list(order)
        self.weights = weights

    def alone(self, site: Site, truth: Any, policy: Any) -> tuple[float, float, float, float]:
        """The site's (first start, finish alone, first task's end on that pilot, soonest
        task's end), as :func:`hindsight` has them for a bag of one width."""
        from resel.engine_packing import packed_run
        from resel.sim.wait_eval import clairvoyant_wait
        cores = min(site.pilot.max_cores or site.cores, site.cores)
        least = self.bag.cores_per_task // self.unit             # the widest task's units
        w0 = max(0.0, truth.wait())
        tx = self.bag.profile.instructions * truth.kappa / truth.draw_speed()
        per_node = truth.per_node if site.wait is not None else 1
        units = [self.units[t] for t in self.order]
        times = [tx * self.weights[t] for t in self.order]
        best, earliest, best_wait = math.inf, math.inf, math.inf
        for slots in probe_sizes(min(cores // self.unit, sum(self.units))):
            if slots < least:
                continue
            if policy is not None:
                w = clairvoyant_wait(policy, 0.0, slots * self.unit, tx)
            else:
                nodes = max(1, math.ceil(slots * self.unit / per_node))
                w = w0 * (nodes ** truth.exponent if truth.exponent else 1.0)
            earliest = min(earliest, w)
            finish = w + packed_run(units, times, [slots])
            if finish < best:
                best, best_wait = finish, w
        return earliest, best, best_wait + tx, earliest + tx


def hindsight(bag: Bag, sites: list[Site], seed: int) -> Hindsight:
    """Each viable site's first possible start and its finish alone with the bag (see
    :class:`Hindsight`): drawn-wait sites from their first draws, trace-driven ones from the
    probes of the tightened bound (the queue's jobs ending at their true times)."""
    from resel.sim.simulation import SiteTruth
    from resel.selection import viable_sites
    from resel.sim.wait_eval import clairvoyant_wait
    n, cpt = bag.count, bag.cores_per_task
    _, policies = _running_at_arrival(sites)
    first, alone, task, soonest = {}, {}, {}, {}
    packing = _Packing(bag, sites)
    for i in viable_sites(bag, sites):
        site = sites[i]
        truth = SiteTruth(site, seed)
        per_task = site.pilot.mode == "per-task"
        cap = 1 if per_task else min(site.pilot.max_cores or site.cores, site.cores) // cpt
        if cap < 1:
            continue
        if not per_task and packing.units is not None:   # several widths: packed into the pilot's cores
            first[site.name], alone[site.name], task[site.name], soonest[site.name] = \
                packing.alone(site, truth, policies.get(i))
            continue
        if per_task:          # one-task pilots, each its own wait and slot
            m = min(n, max(1, site.pilot.max_pilots))
            pilots = [(max(0.0, truth.draw_wait(cpt)) if i not in policies else 0.0,
                       bag.profile.instructions * truth.kappa / truth.draw_speed()) for _ in range(m)]
            if i in policies:
                w = clairvoyant_wait(policies[i], 0.0, cpt, min(t for _, t in pilots))
                pilots = [(w, t) for _, t in pilots]
            waves = math.ceil(n / m)
            first[site.name] = min(w for w, _ in pilots)
            alone[site.name] = max(w + waves * t for w, t in pilots)
            task[site.name] = soonest[site.name] = min(w + t for w, t in pilots)
            continue
        w0 = max(0.0, truth.wait())        # the site's first submission's draw (drawn waits)
        tx = bag.profile.instructions * truth.kappa / truth.draw_speed()
        per_node = truth.per_node if site.wait is not None else 1
        best, earliest, best_wait = math.inf, math.inf, math.inf
        for slots in probe_sizes(min(cap, n)):
            if i in policies:
                w = clairvoyant_wait(policies[i], 0.0, slots * cpt, tx)
            else:
                nodes = max(1, math.ceil(slots * cpt / per_node))
                w = w0 * (nodes ** truth.exponent if truth.exponent else 1.0)
            earliest = min(earliest, w)
            if w + math.ceil(n / slots) * tx < best:
                best, best_wait = w + math.ceil(n / slots) * tx, w
        first[site.name], alone[site.name] = earliest, best
        task[site.name], soonest[site.name] = best_wait + tx, earliest + tx
    return Hindsight(first, alone, task, soonest)
