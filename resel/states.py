"""Task and pilot lifecycles as transition tables — every state change of the engine is here.

Following h11's ``_state.py``: transitions are data, not if-chains, so they can be listed in
the docs and checked by tests; an event a state does not allow raises
:class:`~resel.errors.IllegalTransition` and changes nothing.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from resel.errors import IllegalTransition


class TaskState(Enum):
    """Where a task is in its life. ``final`` states never change again."""

    WAITING = "waiting"          # not running anywhere; bound to its origin site
    QUEUED = "queued"            # handed ahead to a busy pilot of its origin; starts when a slot frees
    RECALLED = "recalled"        # handed ahead, then asked back: the driver says whether its agent
                                 # had claimed it (started) or gave it up (withdrawn)
    RUNNING = "running"          # running, committed to the site it runs on
    PROVISIONAL = "provisional"  # running on r' inside the re-selection window of its origin r
    FETCHING = "fetching"        # ended well where it ran; its outputs are on their way home
    DONE = "done"
    FAILED = "failed"

    # members are singletons compared by identity, so identity hashes them: Enum's own hash
    # (of the name, in Python) ran on every transition, the engine's hottest lookup
    __hash__ = object.__hash__

    @property
    def final(self) -> bool:
        return self in (TaskState.DONE, TaskState.FAILED)


class PilotState(Enum):
    """A pilot job's life; ``order`` lets a poller ignore updates that would move backwards."""

    PENDING = "pending"      # submitted, waiting in the site's queue (again, after a requeue)
    ACTIVE = "active"        # acquired: its cores can run tasks
    ENDED = "ended"          # ran and stopped (released, walltime, failure)
    CANCELLED = "cancelled"  # withdrawn before it started

    __hash__ = object.__hash__   # as TaskState's

    @property
    def final(self) -> bool:
        return self in (PilotState.ENDED, PilotState.CANCELLED)

    @property
    def order(self) -> int:
        return {PilotState.PENDING: 0, PilotState.ACTIVE: 1, PilotState.ENDED: 2, PilotState.CANCELLED: 2}[self]


class AttemptOutcome(StrEnum):
    """How one attempt of a task ended (``OPEN`` while it runs or waits in an inbox).

    A StrEnum: the value is what reports, the store and older code compare with (``"done"``)."""

    OPEN = ""                  # running, or handed ahead and not started yet
    DONE = "done"
    FAILED = "failed"          # non-zero exit, killed by its timeout: counts toward max_attempts
    LOST = "lost"              # its pilot vanished or lost the slot: counts toward max_losses
    CANCELLED = "cancelled"    # moved back to its origin, or the run was stopped
    WITHDRAWN = "withdrawn"    # taken back from an inbox before it started: no time counted


W, Q, R, P, FE, D, F = (TaskState.WAITING, TaskState.QUEUED, TaskState.RUNNING, TaskState.PROVISIONAL,
                        TaskState.FETCHING, TaskState.DONE, TaskState.FAILED)
RC = TaskState.RECALLED

#: TASK_TRANSITIONS[state][what happened] -> next state
TASK_TRANSITIONS: dict[TaskState, dict[str, TaskState]] = {
    W: {"dispatch": R, "dispatch-provisional": P, "queue": Q, "give-up": F},
    # a queued attempt runs once its pilot's agent starts it (its own start record, or a
    # result read before the start record); withdrawn = taken back before it started
    # recall: re-selection wants it elsewhere, but its agent may have claimed it already (live,
    # a poll behind): the driver takes it back only if unclaimed (withdraw) or reports it started
    Q: {"start": R, "withdraw": W, "recall": RC},
    RC: {"start": R, "withdraw": W},
    # stop: the user cancelled the run (the task is left waiting, never to run)
    # fetch: the attempt ended well and its outputs are coming home (bags with outputs)
    # restart (learning strategies): cancelled here and handed straight to a free slot that
    # finishes it sooner, counting the time it ran (through WAITING's "dispatch")
    R: {"finish": D, "fetch": FE, "fail": W, "give-up": F, "lost": W, "stop": W, "restart": W},
    # move-back: cancelled on r' and handed straight to r, through WAITING's "dispatch"
    P: {"finish": D, "fetch": FE, "fail": W, "give-up": F, "lost": W, "commit": R, "move-back": W, "stop": W},
    # deliver: every output home and verified; lost: they could not be brought home (runs again)
    FE: {"deliver": D, "lost": W, "give-up": F, "stop": W},
    D: {},
    F: {},
}

PILOT_TRANSITIONS: dict[PilotState, dict[str, PilotState]] = {
    PilotState.PENDING: {"start": PilotState.ACTIVE, "cancel": PilotState.CANCELLED, "end": PilotState.ENDED},
    # requeue: the batch job went back to the queue (scontrol requeue, a node failure with
    # requeue on): its agent is gone, the scheduler may start it again later
    PilotState.ACTIVE: {"end": PilotState.ENDED, "cancel": PilotState.ENDED, "requeue": PilotState.PENDING},
    PilotState.ENDED: {},
    PilotState.CANCELLED: {},
}


def next_task_state(state: TaskState, what: str) -> TaskState:
    """The state after ``what`` happens to a task in ``state``; raises IllegalTransition."""
    try:
        return TASK_TRANSITIONS[state][what]
    except KeyError:
        raise IllegalTransition(f"task in state {state.value!r} cannot {what!r}") from None


def next_pilot_state(state: PilotState, what: str) -> PilotState:
    """The state after ``what`` happens to a pilot in ``state``; raises IllegalTransition."""
    try:
        return PILOT_TRANSITIONS[state][what]
    except KeyError:
        raise IllegalTransition(f"pilot in state {state.value!r} cannot {what!r}") from None
