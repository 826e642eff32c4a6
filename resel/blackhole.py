"""Black-hole sites: the rule that quarantines a site whose tasks keep failing.

A *black hole* takes tasks and ends them at once (a broken software stack, a full disk, a node
that kills everything): with late binding it drains the bag, because a slot that fails fast is
free again at once. The rule has the shape GlideinWMS gives its glideins over HTCondor's
``RecentJobBusyTimeCount``/``RecentJobBusyTimeAvg`` (``GLIDEIN_BLACKHOLE_NUMJOBS`` and
``GLIDEIN_BLACKHOLE_RATE``): *a minimum count* (so one unlucky failure never condemns a site)
*and a rate threshold*. resel counts outcomes instead of job lifetimes, per site, and adds a
comparison with the other sites, so that a bag whose command fails everywhere is not blamed on
the first site that happened to run it:

    quarantine site x  ⇔  bad_x ≥ min_bad  ∧  bad_x / n_x ≥ rate
                          ∧  bad_x / n_x ≥ ratio · (bad_else / n_else)      (0 if n_else = 0)

where n counts the site's outcomes — each attempt that ended there (done or failed) and each
pilot incident — and *bad* the failed attempts (non-zero exit) and the incidents: a pilot that
ended with tasks on it (the node or the job died; not at its walltime, which is resel's own
packing, not the site's fault), ended within ``start_grace`` seconds of its start (or before
it) with nothing done, or was requeued while running. A pilot that takes eight tasks down is
one incident, not eight: one node failure must not condemn a site that a bad command would.
Attempts reported lost by a relaunched agent (``TaskLost``) are not counted either, for the
same reason; nor is a task failing again on a site it failed on (a broken task fails wherever
it runs: it must not condemn a site that runs every other task well) — unless the site refused
the dispatch itself (``events.DISPATCH_FAILED``), its own fault each time. *else* pools every other site's counts. The last site still usable is never
quarantined. Counts restart when a site is released.

Release is by back-off: the k-th quarantine of a site lasts ``backoff · factor^(k−1)``,
capped at ``backoff_max`` (1800 s, 3600 s, 7200 s … 4 h with the defaults) — the exponential
back-off of the 'retry after a pause, longer each time' kind, so a site that recovers comes
back soon and one that stays broken costs a few tasks per period.

This module only counts and judges; :mod:`resel.engine` acts (moves tasks, withdraws pilots,
sets the release timer) and records each quarantine as an action, so the journal replays it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuarantinePolicy:
    """The numbers of the black-hole rule (docs/engine.md, "Black-hole sites").

    ``enabled`` False turns the rule off (every site is used whatever it does).
    """

    min_bad: int = 5
    rate: float = 0.5
    ratio: float = 2.0
    start_grace: float = 300.0
    backoff: float = 1800.0
    factor: float = 2.0
    backoff_max: float = 4 * 3600.0
    enabled: bool = True

    def backoff_for(self, k: int) -> float:
        """How long the k-th (1-based) quarantine of a site lasts."""
        return min(self.backoff_max, self.backoff * self.factor ** max(0, k - 1))


@dataclass(slots=True)
class SiteHealth:
    """Outcomes counted on one site since it was last released (or since the run began)."""

    n: int = 0
    bad: int = 0
    quarantines: int = 0           # how many times it was quarantined (sets the back-off)
    until: float | None = None     # released at this time while quarantined, else None
    since: float | None = None
    reason: str = ""

    @property
    def quarantined(self) -> bool:
        return self.until is not None

    def add(self, bad: bool) -> None:
        self.n += 1
        self.bad += int(bad)

    def reset(self) -> None:
        self.n = self.bad = 0


def is_black_hole(site: SiteHealth, others_n: int, others_bad: int, policy: QuarantinePolicy) -> bool:
    """The rule above for one site, given the pooled counts of every other site."""
    if not policy.enabled or site.n == 0 or site.bad < policy.min_bad:
        return False
    rate = site.bad / site.n
    if rate < policy.rate:
        return False
    elsewhere = others_bad / others_n if others_n else 0.0
    return rate >= policy.ratio * elsewhere


def describe(site: SiteHealth, others_n: int, others_bad: int) -> str:
    """One line a person can check against the rule: the counts that decided it."""
    elsewhere = f"{others_bad}/{others_n}" if others_n else "none measured"
    return (f"{site.bad} of {site.n} attempts/pilots failed or were lost "
            f"({site.bad / site.n:.0%}); elsewhere {elsewhere}")
