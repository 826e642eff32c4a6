"""Events into the engine and actions out of it: frozen, slotted, keyword-only records.

Every event carries its own ``time`` (seconds since the bag was submitted): the engine never
reads a clock. Actions are instructions for the driver (live coordinator or simulator);
:class:`Decision` is an action with no effect but to be recorded, so every choice the engine
makes can be audited with its inputs.
"""

from __future__ import annotations

import dataclasses
import inspect
from enum import StrEnum


def _rec(cls: type) -> type:
    """A frozen, slotted, keyword-only dataclass whose ``__init__`` fills the slots directly.

    Why: dataclasses' frozen ``__init__`` sets each field through ``object.__setattr__`` looked
    up by name, about 1.4 µs for a :class:`Decision`; a simulation of 1,000,000 tasks builds
    millions of these records (issue 15). Calling each slot's own descriptor does the same
    (the instance stays frozen: assigning a field still raises ``FrozenInstanceError``) in
    about 0.6 µs. Same signature, defaults, ``repr``, equality, hash and ``replace``.
    """
    cls = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)
    namespace: dict = {}
    params, body = [], []
    for i, f in enumerate(dataclasses.fields(cls)):
        if f.default_factory is not dataclasses.MISSING or not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: _rec records take plain defaults only")
        namespace[f"_set{i}"] = inspect.getattr_static(cls, f.name).__set__   # the slot's descriptor
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            namespace[f"_default{i}"] = f.default
            params.append(f"{f.name}=_default{i}")
        body.append(f"    _set{i}(self, {f.name})")
    head = f"def __init__(self, *, {', '.join(params)}):" if params else "def __init__(self):"
    exec("\n".join([head, *(body or ["    pass"])]), namespace)
    init = namespace["__init__"]
    init.__qualname__, init.__module__ = f"{cls.__qualname__}.__init__", cls.__module__
    cls.__init__ = init
    return cls


# ---------------------------------------------------------------- events (driver -> engine)
@_rec
class Event:
    time: float


@_rec
class BagSubmitted(Event):
    """The run starts: the engine makes its initial selection and asks for pilots.

    ``wait_estimates`` (seconds, per site name) are the sites' answers to "how long would the
    pilot of :meth:`Engine.probe_shapes` wait?"; ``wait_menu`` (per site name, a list aligned
    with :meth:`Engine.probe_menu`) the same for each pilot size the queue-aware strategy may
    choose (None where a size has no estimate). Drivers ask the scheduler, the queue twin or
    the wait history (:mod:`resel.live.plan`, :mod:`resel.sim.estimates`).
    """

    wait_estimates: dict[str, float] | None = None
    wait_menu: dict[str, list[float | None]] | None = None


@_rec
class PilotStarted(Event):
    """The site's scheduler started the pilot: its cores are acquired (a_r)."""

    pilot: int


@_rec
class PilotEnded(Event):
    """The pilot stopped (released, walltime, node failure); tasks still on it are lost."""

    pilot: int
    reason: str = "ended"


@_rec
class PilotRequeued(Event):
    """The pilot's batch job went back to the queue while it ran (``scontrol requeue``, a node
    failure with requeue on): its agent is gone, so the attempts it ran are lost; the pilot is
    pending again and may start later as a new incarnation of the same job.
    """

    pilot: int
    reason: str = "requeued"


@_rec
class SiteLost(Event):
    """A site cannot be used any more (unreachable, rejects submissions, unknown partition).

    Its pending pilots are withdrawn, it takes no new pilots, and its waiting tasks move to the
    fastest site still usable; tasks already running on its active pilots stay until those end.
    """

    site: str
    reason: str = "lost"


@_rec
class TaskStarted(Event):
    """The pilot began running an attempt (live drivers; the simulator starts at dispatch)."""

    task: int
    attempt: int


@_rec
class TaskFinished(Event):
    task: int
    attempt: int


@_rec
class TaskMeasured(Event):
    """How long the attempt executed by the agent's own clock (its result's end − start), sent
    just before the attempt's :class:`TaskFinished` or :class:`TaskFetching`. A strategy that
    learns rates during the run (``+learn``, ``auto``: :mod:`resel.learning`) counts this time
    instead of the gap between the two events the coordinator fed it, which a poll's period
    blurs; the journal keeps it, so a resumed engine learns alike. Others ignore it."""

    task: int
    attempt: int
    seconds: float


@_rec
class TaskWithdrawn(Event):
    """The driver took a handed-ahead attempt back before its agent claimed it (the answer to
    :class:`WithdrawTask`): it never ran, and the task waits again. If the agent had claimed it
    first, the driver sends :class:`TaskStarted` instead (the request is refused)."""

    task: int
    attempt: int


@_rec
class TaskFetching(Event):
    """The attempt ended well on its site and its outputs are on their way home (live: the
    coordinator fetches and checks them; simulated: their transfer time). Its slot is free
    again and the task stays where it ran — no window moves it any more — but it is done only
    at :class:`TaskDelivered` (docs/data.md). Drivers send it instead of :class:`TaskFinished`
    for bags whose tasks have outputs."""

    task: int
    attempt: int


@_rec
class TaskDelivered(Event):
    """Every declared output of the attempt is home and verified (size and sha256): done."""

    task: int
    attempt: int


@_rec
class TaskUndelivered(Event):
    """The attempt's outputs could not be brought home (gone from the site, a wrong checksum,
    the site lost): the attempt counts as failed and the task runs again."""

    task: int
    attempt: int
    reason: str = "outputs not delivered"


@_rec
class TaskFailed(Event):
    task: int
    attempt: int
    reason: str = "failed"


#: how the reason of a TaskFailed begins when the site refused the dispatch itself (the live
#: coordinator's): the site's fault each time, where a task's own non-zero exit may be the task's
DISPATCH_FAILED = "dispatch failed: "


@_rec
class TaskLost(Event):
    """One attempt died with the agent that ran it while its pilot lives on: the agent was
    relaunched under the same batch job (a new incarnation) and reported the attempts its
    predecessor had taken. The task is waiting again (a loss, as for a pilot that ended)."""

    task: int
    attempt: int
    reason: str = "lost"


@_rec
class BagCancelled(Event):
    """The user cancelled the run (``resel cancel``): every pilot is stopped, nothing more is
    dispatched; tasks not done stay waiting (their running attempts count as cancelled)."""

    reason: str = "cancelled"


@_rec
class TimerFired(Event):
    """A re-selection window closed for this attempt (answer to :class:`SetTimer`); with
    ``site``, a quarantined site's back-off ended (``task`` is then -1 and ``attempt`` the
    number of that site's quarantine, so a stale timer is recognised)."""

    task: int
    attempt: int
    site: str | None = None


@_rec
class OutputsMeasured(Event):
    """How many bytes a task's outputs are, as the run's deliveries measured them (their mean):
    the engine prices a task's trip home with it from now on, instead of the bag's
    ``output_mb`` (docs/data.md). Journaled by the live coordinator like BandwidthMeasured."""

    out_bytes: float


@_rec
class BandwidthMeasured(Event):
    """How fast files moved to (``inbound``) or from (``outbound``) a site, in decimal MB/s,
    as the run's own transfers measured it (None: that way was not measured). The engine
    prices data with the new figure from now on (docs/engine.md, "Selection sees the data");
    windows already open keep theirs. The live coordinator journals it like any event, so a
    resumed engine decides alike. A figure known before the run starts goes into the
    engine's transfer model instead (:meth:`resel.transfer.TransferModel.measured`)."""

    site: str
    inbound: float | None = None
    outbound: float | None = None


# ---------------------------------------------------------------- actions (engine -> driver)
@_rec
class Action:
    pass


@_rec
class SubmitPilot(Action):
    pilot: int
    site: str
    cores: int
    walltime: float


@_rec
class CancelPilot(Action):
    pilot: int
    site: str


@_rec
class DispatchTask(Action):
    task: int
    attempt: int
    pilot: int
    site: str


@_rec
class CancelTask(Action):
    task: int
    attempt: int
    pilot: int
    site: str


@_rec
class WithdrawTask(Action):
    """Take back a handed-ahead attempt if its agent has not claimed it yet — a request the
    agent's claim may refuse (docs/engine.md, "A move never undoes work it cannot see"). The
    driver answers with :class:`TaskWithdrawn` (taken back: the task waits again) or
    :class:`TaskStarted` (it was already running: it stays where it is)."""

    task: int
    attempt: int
    pilot: int
    site: str


@_rec
class SetTimer(Action):
    """Answer with :class:`TimerFired` at ``at``: a re-selection window closes for the task's
    attempt, or (``site`` given, ``task`` -1) a quarantined site's back-off ends."""

    at: float
    task: int
    attempt: int
    site: str | None = None


@_rec
class TaskOverdue(Action):
    """An attempt ran past its site's overdue limit (resel/engine_overdue.py): it was cancelled
    and the task waits to run once more with no such limit — or, ``gave_up``, that next attempt
    too ran past the limit and was lost, and the task was given up as hung. ``ran``: seconds the
    attempt had run; ``limit``: the limit. Recorded, no effect of its own (the CancelTask beside
    it does the work)."""

    time: float
    task: int
    attempt: int
    site: str
    ran: float
    limit: float
    gave_up: bool = False


@_rec
class SiteQuarantined(Action):
    """The site behaves as a black hole (resel/blackhole.py's rule): it takes no tasks until
    ``until``; ``reason`` gives the counts that decided it. Recorded, no effect of its own (the
    engine's other actions move the tasks and withdraw the pilots)."""

    time: float
    site: str
    until: float
    reason: str = ""


@_rec
class StrategyChosen(Action):
    """What ``auto`` runs as, and why (:func:`resel.selection.resolve_auto`): recorded when the
    bag is submitted, no effect of its own."""

    time: float
    strategy: str
    reason: str


@_rec
class RateLearned(Action):
    """A learning strategy's estimate of a site's rate moved (resel.learning): its T̂x now, the
    90 % credible interval of it, the tasks measured there, and T̂x₀, what the run started with.
    Recorded, no effect of its own; emitted at a site's 1st, 2nd, 3rd, 5th, 10th, 20th, 50th, …
    measured task and whenever its T̂x moved by a tenth since the last record (a site with no
    task of its own moves with what the others measured)."""

    time: float
    site: str
    tx: float
    low: float
    high: float
    tasks: int
    prior: float


@_rec
class SiteReleased(Action):
    """A quarantined site's back-off ended: it may take tasks again (its counts restart)."""

    time: float
    site: str


class DecisionKind(StrEnum):
    """What a :class:`Decision` records (the value is what the store and reports show)."""

    ASSIGN = "assign"                              # initial selection: the task's origin r
    RESELECT_PROVISIONAL = "reselect-provisional"  # runs on r' inside the window Ŵ(r', r)
    RESELECT_COMMIT = "reselect-commit"            # r' is no slower than r: moved for good
    RACE_WIN = "race-win"                          # a race: the first kept site to free a slot
    WINDOW_COMMIT = "window-commit"                # the window closed with r still unacquired
    MOVE_BACK = "move-back"                        # r was acquired inside the window: back to r
    SITE_LOST = "site-lost"                        # its origin can never run it: rebound
    QUARANTINE = "quarantine"                      # its origin became a black hole: rebound
    QUARANTINE_RELEASE = "quarantine-release"      # the quarantine ended: bound back
    RACE_CLOSED = "race-closed"                    # peers: the race's first start cancels the rest
    FAILOVER = "failover"                          # peers: the primary did not start in time
    REBROKER = "rebroker"                          # peers: waited past the timeout, rebrokered
    RESTART = "restart"                            # learning: a running attempt restarted on a free
                                                   # slot that finishes it sooner, elapsed time counted


@_rec
class Decision(Action):
    """An auditable choice: initial selection, re-selection, move-back or window commit.

    ``a_r`` is when the origin r was acquired (None while unacquired); ``a_r2`` is a_r' as the
    engine uses it: when the task got its slot on the alternative r' (its dispatch there,
    which is r's acquisition for a task dispatched as r' starts and later for one that takes
    a slot freed afterwards) — the window closes at a_r' + Ŵ. ``tx_r``/``tx_r2`` are the
    predictions the choice compared: T̂x, or for a bag that moves data T̂x' = T̂x + D, its data
    time on that site at the moment of the choice (docs/engine.md, "Selection sees the data");
    a window's commit or move-back logs the figures its opening used. ``window`` is Ŵ(r', r).
    """

    time: float
    kind: DecisionKind
    task: int
    origin: str
    target: str
    a_r: float | None = None
    a_r2: float | None = None
    tx_r: float | None = None
    tx_r2: float | None = None
    window: float | None = None


@_rec
class BagDone(Action):
    """Every task is done or failed; the driver may stop."""

    time: float
    done: int
    failed: int
