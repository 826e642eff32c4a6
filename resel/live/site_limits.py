"""Size and count a site's pilots within the limits its scheduler puts on the user.

A site's pilot policy (sites file) says what resel *wants*: ``max_pilots``, ``max_cores``,
``walltime``. The scheduler says what the user *may have* (:mod:`resel.backends.limit_formats`):
jobs queued (MaxSubmit, ``max_queued``), jobs running (MaxJobs, ``max_run``), cores per job and
in all (MaxTRES, GrpTRES, ``max_run_res.ncpus``), walltime (MaxWall, ``resources_max.walltime``).
A pilot beyond them is refused or waits for ever, so the engine is given the policy within both,
minus the jobs the user already has there (a user with 8 of MaxSubmit=10 queued has room for 2):

* ``max_pilots`` ≤ the jobs the user may still submit, and ≤ those they may still run (a pilot
  that can never run holds tasks for nothing); per-task pools also ≤ the cores they may hold
  divided by a task's cores;
* ``max_cores`` ≤ cores per job and ≤ cores in all;
* ``walltime`` ≤ the longest walltime allowed.

A site whose room is zero (MaxSubmitPU=0, a full quota) keeps its policy, and the reason is
returned: the run gives it up at the start, ``resel plan --explain`` shows it as rejected by
a limit. Pure except :func:`read_limits`, which asks the sites.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from resel.backends.limit_formats import Limits
from resel.domain import Site


@dataclass
class SiteLimits:
    """What was learnt of one site's limits, and what it did to the site's policy."""

    site: str
    limits: Limits = field(default_factory=Limits)
    #: the user's jobs already on the site: queued + running, and running
    jobs: int | None = None
    running: int | None = None
    #: why a pending job of the user's waits, counted, in the scheduler's words (shown, never tested)
    pending_reasons: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: "max_pilots 100000 → 8 (QOS normal: MaxSubmitPU=10, 2 jobs already there)" …
    changes: list[str] = field(default_factory=list)
    #: why no pilot can be submitted at all (None: there is room)
    blocked: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "limits": self.limits.as_dict(), "jobs": self.jobs, "running": self.running,
                "pending_reasons": dict(self.pending_reasons), "notes": list(self.notes),
                "changes": list(self.changes), "blocked": self.blocked}


def within_limits(site: Site, found: SiteLimits, cores_per_task: int = 1) -> Site:
    """``site`` with its pilot policy inside ``found.limits`` (``found.changes`` and
    ``found.blocked`` are filled in). An unchanged site is returned as it is."""
    lim, policy = found.limits, site.pilot
    why = lim.why
    max_pilots, max_cores, walltime = policy.max_pilots, policy.max_cores, policy.walltime
    jobs, running = found.jobs or 0, found.running or 0

    def room(limit: int | None, used: int) -> int | None:
        return None if limit is None else max(0, limit - used)

    candidates = []
    if lim.max_submit is not None:
        r = room(lim.max_submit, jobs)
        candidates.append((r, f"{why.get('max_submit', 'max_submit')}" + (f", {jobs} job(s) already there" if jobs else "")))
    if lim.max_running is not None:
        r = room(lim.max_running, running)
        candidates.append((r, f"{why.get('max_running', 'max_running')}"
                              + (f", {running} running already" if running else "")))
    if policy.mode == "per-task" and lim.max_cores is not None:
        candidates.append((lim.max_cores // max(1, cores_per_task), f"{why.get('max_cores', 'max_cores')}, "
                                                                    f"{cores_per_task} core(s) per pilot"))
    for n, said in candidates:
        if n < max_pilots:
            found.changes.append(f"max_pilots {max_pilots} → {n} ({said})")
            max_pilots = n
            if n == 0:
                found.blocked = f"no pilot may be submitted: {said}"
    cap = max_cores if max_cores is not None else site.cores
    for limit, key in ((lim.max_cores_per_job, "max_cores_per_job"), (lim.max_cores, "max_cores")):
        if limit is not None and limit < cap:
            found.changes.append(f"max_cores {cap} → {limit} ({why.get(key, key)})")
            cap = max_cores = limit
            if limit < cores_per_task:
                found.blocked = f"a pilot may hold {limit} core(s), a task needs {cores_per_task} ({why.get(key, key)})"
    if lim.max_walltime is not None and lim.max_walltime < walltime:
        found.changes.append(f"walltime {walltime:g} s → {lim.max_walltime:g} s ({why.get('max_walltime', '')})")
        walltime = lim.max_walltime
    if not found.changes or found.blocked:
        return site
    return replace(site, pilot=replace(policy, max_pilots=max(1, max_pilots), max_cores=max_cores,
                                       walltime=walltime))


def read_site(site: Site, opener: Callable[[Site], Any]) -> SiteLimits:
    """Ask one live site for the user's limits, jobs and pending reasons; a site or a
    scheduler that cannot tell gives notes, never an error (its limits are then unknown)."""
    from resel.backends.connect import close_quietly
    from resel.backends.jobs import LimitReader
    found = SiteLimits(site.name)
    ps = None
    try:
        ps = opener(site)
        sched = ps.scheduler
        if not isinstance(sched, LimitReader):
            found.notes.append(f"limits are not read through {type(sched).__name__}")
        else:
            found.limits, notes = sched.limits()
            found.notes += notes
        user = sched.user_name() if isinstance(sched, LimitReader) else None
        if user:
            mine = sched.jobs(user=user)
            # held jobs count against MaxSubmit-style limits too; an unknown state is counted as
            # live (it may hold a slot), never as ended
            live = [j for j in mine.values() if j.state.phase in ("pending", "running", "unknown")]
            found.jobs = len(live)
            found.running = sum(1 for j in live if j.state.phase == "running")
            for j in live:
                if j.state.phase == "pending" and j.reason:     # its backend read "no reason" as None
                    found.pending_reasons[j.reason] = found.pending_reasons.get(j.reason, 0) + 1
    except Exception as exc:   # noqa: BLE001 - the limits stay unknown; the run or plan says why
        found.notes.append(f"limits unknown: {str(exc).strip() or type(exc).__name__}")
    finally:
        close_quietly(ps)
    return found


def read_limits(sites: list[Site], opener: Callable[[Site], Any] | None = None) -> dict[str, SiteLimits]:
    """Every live site's limits, asked at once."""
    from resel.backends.connect import open_site
    live = [s for s in sites if s.access is not None]
    if not live:
        return {}
    with ThreadPoolExecutor(max_workers=len(live)) as pool:
        found = list(pool.map(lambda s: read_site(s, opener or open_site), live))
    return {f.site: f for f in found}


def apply_limits(sites: list[Site], found: dict[str, SiteLimits], cores_per_task: int = 1) -> list[Site]:
    """The sites with their policies inside the limits found (sites without a finding unchanged)."""
    return [within_limits(s, found[s.name], cores_per_task) if s.name in found else s for s in sites]
