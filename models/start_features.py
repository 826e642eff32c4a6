"""What a queue looks like at a job's submission, as numbers a learned start predictor reads
(issue 16 item 5).

Only what a user could see at that instant goes in: the queue snapshot the twin reads
(:class:`resel.backends.jobs.QueueSnapshot` — running jobs with their limits and elapsed times,
pending jobs with their limits), the twin's and the scheduler's estimates made from it, the
job's own size and requested time, and the time of day. Nothing about the future (run times
of the jobs ahead, later arrivals) can enter: that is what the clairvoyant reference of
:func:`resel.sim.wait_eval.clairvoyant_wait` has and a predictor has not.

Times enter as ln(x + 60 s) — the shifted log of :mod:`resel.models.conditioned`, a ratio for
long times and a difference near zero — and amounts of work as a share of the machine, so
one scale fits a 240-core and a 2,000-core site.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resel.backends.jobs import QueueSnapshot

#: the names of :func:`snapshot_features`' values, in order
FEATURES = (
    "twin",            # ln(twin's wait + 60)
    "scheduler",       # ln(scheduler's wait + 60)
    "fits_now",        # 1 if the job's cores are free now and nobody waits, else 0
    "free",            # free cores / machine
    "size",            # ln(job's cores / machine)
    "request",         # ln(requested time + 60)
    "pending",         # ln(1 + pending jobs)
    "pending_work",    # ln(1 + pending core-seconds requested / machine cores / 60)
    "running_left",    # ln(1 + running core-seconds left by their limits / machine cores / 60)
    "day_sin",         # time of day on the unit circle
    "day_cos",
)

_DAY = 86400.0


def _lg(seconds: float) -> float:
    return math.log(max(0.0, seconds) + 60.0)


def snapshot_features(snapshot: "QueueSnapshot", cores: int, walltime: float, twin: float | None,
                      scheduler: float | None, *, clock_offset: float = 0.0) -> tuple[float, ...]:
    """The :data:`FEATURES` of a job of ``cores`` × ``walltime`` submitted at the snapshot's
    instant. ``twin``/``scheduler`` are their estimated waits (seconds; None: taken as the
    other one, or 0). ``clock_offset`` turns the snapshot's clock into local epoch seconds
    (a trace's UnixStartTime + TimeZone; 0 where unknown — the phase of the day is then off
    by a constant, which a nearest-neighbour distance does not see)."""
    total = max(1, snapshot.total_cores)
    limit = snapshot.default_limit or 0.0
    busy = sum(j.cores for j in snapshot.running)
    free = max(0, total - busy)
    left = sum(j.cores * max(0.0, (j.time_limit or limit) - j.elapsed) for j in snapshot.running)
    pend = sum(j.cores * (j.time_limit or limit) for j in snapshot.pending)
    if twin is None:
        twin = scheduler if scheduler is not None else 0.0
    if scheduler is None:
        scheduler = twin
    phase = 2 * math.pi * ((snapshot.taken_at + clock_offset) % _DAY) / _DAY
    return (_lg(twin), _lg(scheduler),
            1.0 if cores <= free and not snapshot.pending else 0.0,
            free / total,
            math.log(max(1, cores) / total),
            _lg(walltime),
            math.log1p(len(snapshot.pending)),
            math.log1p(pend / total / 60.0),
            math.log1p(left / total / 60.0),
            math.sin(phase), math.cos(phase))
