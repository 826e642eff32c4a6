"""The engine's books: a task's attempts, a task, a pilot's slots, a site's indices.

Records, not rules: every rule that writes them is a method of :class:`~resel.engine.Engine`
(resel/engine.py and its ``engine_*`` rooms). They live apart so that each of those rooms can
name them without importing the engine (an import the layers would count as a cycle);
``resel.engine`` exports them as before.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from resel.states import AttemptOutcome, PilotState, TaskState

#: the task states the engine's rules name most, short
WAITING, QUEUED, RUNNING, PROVISIONAL = TaskState.WAITING, TaskState.QUEUED, TaskState.RUNNING, TaskState.PROVISIONAL
FETCHING, RECALLED = TaskState.FETCHING, TaskState.RECALLED


@dataclass(slots=True)
class Attempt:
    """One attempt of a task: on which site and pilot, when it started and ended, how it ended.

    A record, not a list, so a reader (metrics, the live view, the simulator's audit) names what
    it reads. ``start`` is the dispatch time until the agent's own start record moves it;
    ``end`` is None while the attempt is open (and stays None for one withdrawn unstarted)."""

    site: int
    pilot: int
    start: float
    end: float | None = None
    outcome: AttemptOutcome = AttemptOutcome.OPEN
    #: when its outputs were home and verified (bags with outputs; docs/data.md), else None;
    #: left out of the repr, which tests/test_engine_schedule.py's pinned digests hash
    delivered: float | None = field(default=None, repr=False)


class TaskRecord:
    """The engine's book-keeping for one task (read it; do not write it)."""

    __slots__ = ("id", "state", "origin", "first_origin", "site", "pilot", "attempt",
                 "deadline", "opened", "failures", "losses", "attempts", "moved_from", "since", "priced", "barred")

    def __init__(self, tid: int, origin: int):
        self.id = tid
        self.state = WAITING
        self.origin = origin          # the site the task is bound to (r); changes on commit
        self.first_origin = origin    # initial selection, for reports
        self.site = -1                # where the current attempt runs
        self.pilot = -1
        self.attempt = 0
        self.deadline = 0.0           # end of the re-selection window while PROVISIONAL
        self.opened = 0.0             # a_r' of that window: when the task got its slot on r'
        self.failures = 0
        self.losses = 0
        self.moved_from = -1          # the quarantined site it was moved away from (comes back on release)
        self.since = 0.0              # when it was bound to its origin (the rebroker's timeout)
        #: (T̂x'(r), T̂x'(r'), Ŵ) its open window was priced with (bags that move data; else None)
        self.priced: tuple[float, float, float] | None = None
        self.attempts: list[Attempt] = []   # every attempt, oldest first
        #: the site whose failures (or losses) alone sent it elsewhere for one more try: it is
        #: never moved back there (engine_outcomes._retry_or_give_up); -1: none
        self.barred = -1


class PilotRecord:
    """A pilot's slots as the engine counts them.

    ``tasks`` hold a slot each (running or provisional); ``queued`` were handed ahead and wait
    in the agent's inbox. ``free`` slots take a task now; ``reserved`` slots have freed but the
    agent is starting a queued task in them; ``debt`` counts queued tasks the agent started
    before the engine heard that a slot freed (paid back by the next slot that frees).
    ``given_back`` are the (task, attempt) handed ahead to it that its withdrawal gave back
    unstarted as far as the engine knew: live, its agent may have claimed one meanwhile, so the
    driver takes their inbox files back before it sends those tasks anywhere else.
    """

    __slots__ = ("id", "site", "slots", "free", "state", "submitted", "started", "ended", "tasks",
                 "queued", "reserved", "debt", "walltime", "draining", "done", "given_back")

    def __init__(self, pid: int, site: int, slots: int, submitted: float, walltime: float = math.inf):
        self.id, self.site, self.slots, self.free = pid, site, slots, slots
        self.walltime = walltime       # what it asked for: it is killed at started + walltime
        self.draining = False          # too little walltime left for a task: takes none, ends when idle
        self.done = 0                  # attempts that finished on it (a pilot that did none and died
                                       # soon after its start counts against its site)
        self.state = PilotState.PENDING
        self.submitted, self.started, self.ended = submitted, None, None
        self.tasks: dict[int, None] = {}
        self.queued: dict[int, None] = {}
        self.reserved = 0
        self.debt = 0
        self.given_back: tuple[tuple[int, int], ...] = ()


class SiteBook:
    """Per-site indices that keep every decision O(sites), not O(tasks)."""

    __slots__ = ("waiting", "queued", "prov", "pending", "active", "free_pilots", "free", "reserved",
                 "pending_slots", "acquired_at", "cap_slots", "origins", "spec", "cap_saved", "draining",
                 "per_task", "max_pilots", "recalled", "incoming", "ran_n", "ran_s")

    def __init__(self, cap_slots: int, per_task: bool = False, max_pilots: int = 1):
        self.per_task = per_task             # the site's pilot.mode is "per-task" (a pool)
        self.max_pilots = max_pilots         # the site's pilot.max_pilots
        self.waiting: deque[int] = deque()
        self.queued: dict[int, None] = {}    # handed ahead to this site's pilots, not started
        self.reserved = 0                    # freed slots held for queued tasks (sum over pilots)
        self.prov: dict[int, None] = {}
        self.pending: dict[int, None] = {}
        self.active: dict[int, None] = {}
        self.free_pilots: dict[int, None] = {}
        self.free = 0
        self.pending_slots = 0
        self.acquired_at: float | None = None
        self.cap_slots = cap_slots
        self.origins: list[int] = []   # sites whose tasks may be re-selected onto this one
        self.spec = False              # acquires pilots for other sites' waiting tasks
        self.cap_saved = cap_slots     # cap_slots while the site is quarantined (0 then)
        self.draining = 0              # active pilots draining (not counted against max_pilots)
        self.recalled = 0              # its queued tasks asked back (WithdrawTask), not answered yet
        self.incoming = 0              # tasks asked back for this target's free slots, not answered yet
        self.ran_n = 0                 # tasks done here, and the seconds they ran as the engine saw them:
        self.ran_s = 0.0               # the measured T_x that sizes the hand-ahead depth (prefetch_cycle)

