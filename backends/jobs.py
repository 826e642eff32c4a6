"""One job vocabulary for every backend: what a batch job is doing, in resel's words.

Every scheduler names its job states its own way (Slurm's ``RUNNING``/``CG``, PBS's letters,
HTCondor's ``JobStatus`` numbers). Each backend translates them here, through one table per
scheduler that cites the documentation it follows, into :class:`JobState`; the coordinator
(:mod:`resel.live.coordinator`), the pilot exchange (:mod:`.pilotsite`), the probes and plans read only
:class:`JobState` and its :attr:`~JobState.phase`. The scheduler's own word is kept in
:attr:`JobInfo.native`, for what resel shows and for the one backend-specific reader that needs
finer grain (Slurm's queue snapshot tells SUSPENDED from RUNNING).

Why a pending job waits is the scheduler's own word too (:attr:`JobInfo.reason`, shown), and
one neutral class, :class:`Pending` (:attr:`JobInfo.pending`): each backend fills it in through
its table of reasons, beside its parsers, so no reader outside a backend tests a scheduler's word.

**Unknown is never final.** A word a table does not hold (a newer Slurm's state, a PBS letter
resel has not met, an HTCondor code past 7) becomes :attr:`JobState.UNKNOWN`, whose phase is
``unknown``: the pilot keeps the state it had, is polled on, and the word is shown. Nothing ends
a pilot but a state the scheduler documents as over.

The client protocols (:class:`Scheduler`, :class:`QueueReader`, :class:`CpuReader`) say what the
coordinator, ``resel plan`` and ``resel sites`` may ask of a client, so they test for a
capability with ``isinstance`` against a protocol instead of probing attribute names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from resel.errors import ModelError


class JobState(str, Enum):
    """What a batch job is doing, whatever its scheduler.

    ``held`` waits for someone to release it (it never starts by itself); ``completing`` has
    finished its work but still holds its cores; ``unknown`` is a state the backend's table does
    not know, and concludes nothing.
    """

    PENDING = "pending"
    RUNNING = "running"
    COMPLETING = "completing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    HELD = "held"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def phase(self) -> str:
        """``pending`` (waits for cores, held included), ``running`` (holds cores), ``final``
        (over, for good) or ``unknown`` (never taken as final)."""
        return _PHASE[self]

    @property
    def final(self) -> bool:
        """True only for states the scheduler documents as over; never for ``unknown``."""
        return _PHASE[self] == "final"


class Pending(str, Enum):
    """Why a pending job waits, whatever its scheduler: each backend turns its own reasons (Slurm's
    Reason codes, PBS's comments and hold letters, HTCondor's held status) into one of these
    through a table of its own, beside its parsers, and the coordinator tests this class, never
    a scheduler's word (the word stays in :attr:`JobInfo.reason`, shown to people).

    ``waiting`` starts once the queue gets to it (cores, its turn); ``blocked`` waits for
    something besides the queue to change — a limit of the user's, a hold, a dependency, a
    begin time, a partition down — and may still start by itself; ``never`` cannot start as it
    was submitted (too many cores or too long for its partition, an account or QOS it may not
    use): the coordinator cancels such a pilot and gives its site up.
    """

    WAITING = "waiting"
    BLOCKED = "blocked"
    NEVER = "never"

    def __str__(self) -> str:
        return self.value


_PHASE = {
    JobState.PENDING: "pending", JobState.HELD: "pending",
    JobState.RUNNING: "running", JobState.COMPLETING: "running",
    JobState.DONE: "final", JobState.FAILED: "final", JobState.CANCELLED: "final",
    JobState.TIMEOUT: "final",
    JobState.UNKNOWN: "unknown",
}
#: the states whose phase is each of the four (for tests and availability counts)
PENDING = frozenset(s for s, p in _PHASE.items() if p == "pending")
RUNNING = frozenset(s for s, p in _PHASE.items() if p == "running")
FINAL = frozenset(s for s, p in _PHASE.items() if p == "final")


# ---------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Partition:
    """One partition (Slurm), queue (PBS) or pool (HTCondor) as the scheduler reports it.
    ``max_time`` is in seconds, None = unlimited; ``state`` is the scheduler's word (``UP``)."""

    name: str
    state: str
    total_cpus: int
    idle_cpus: int
    nodes: int
    max_time: float | None
    default: bool


@dataclass(frozen=True)
class Availability:
    """A snapshot of a site: what is free now and how busy the queue is.

    ``free_cores``/``total_cores`` and the job counts are those of the partition resel submits
    to (the configured one, else the site's default partition), not a sum over partitions
    that may share nodes. The job counts are every user's: this is an all-users query.
    """

    scheduler: str
    version: str | None
    partitions: list[Partition]
    free_cores: int
    total_cores: int
    running_jobs: int
    pending_jobs: int
    queried_at: float


@dataclass(frozen=True)
class JobInfo:
    """One batch job. Times are epoch seconds (None = not known/not yet), ``time_limit`` in
    seconds (None = unlimited or unset), ``state`` resel's :class:`JobState` and ``native`` the
    scheduler's own word for it (``RUNNING``, ``R``, ``Idle``), shown to people.

    ``partition`` (a comma list for jobs pending on several) lets availability count the jobs of
    one partition; ``exit_code`` is only known from accounting. ``priority`` orders the pending
    queue (higher first); a float, because squeue's ``%p`` prints it normalised to [0, 1].
    """

    job_id: str
    name: str
    state: JobState
    submit: float | None
    start: float | None
    end: float | None
    time_limit: float | None
    cpus: int | None
    reason: str | None
    user: str | None
    partition: str | None = None
    exit_code: str | None = None
    priority: float | None = None
    native: str = ""
    #: why a pending job waits, in resel's words (:class:`Pending`, from the backend's table of
    #: reasons); None for a job that is not pending, or whose backend does not say
    pending: Pending | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, JobState):
            # a scheduler's word slipped through untranslated: a bug, caught where it is made
            raise TypeError(f"JobInfo.state must be a JobState, not {self.state!r} (translate it "
                            "through the backend's table in resel.backends.jobs)")
        if not self.native:
            object.__setattr__(self, "native", self.state.value.upper())

    @property
    def shown(self) -> str:
        """The state as people read it: the scheduler's word, with resel's where they differ."""
        if self.native.lower() == self.state.value:
            return self.native
        return f"{self.native} ({self.state.value})"


# ---------------------------------------------------------------------------- a queue's snapshot

#: the batch policies a snapshot's queue can be ordered by (:data:`resel.sim.policies.POLICIES`,
#: which the twin runs; tests/test_twin.py holds the two equal)
BATCH_POLICIES = ("fcfs", "easy", "easy-sjbf", "conservative")


def finite_number(value: float, what: str) -> float:
    """``value`` as a float if it is a finite number (not a bool), else a ModelError naming ``what``:
    a snapshot's or a twin's numbers come from scheduler replies and stores resel did not write."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelError(f"{what} must be a finite number, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class SnapJob:
    """One job in a queue snapshot.

    ``time_limit`` is in seconds (None: the site did not say; the snapshot's ``default_limit``
    is used). ``elapsed`` is how long a running job has run (0 for pending ones). ``reserved``
    is a pending job's start as the scheduler itself planned it, where the scheduler keeps such
    plans between events (resel's simulated conservative sites); Slurm re-plans every pass,
    so its snapshots leave it None.
    """

    cores: int
    time_limit: float | None
    elapsed: float = 0.0
    job_id: str = ""
    user: str | None = None
    reserved: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.cores, bool) or not isinstance(self.cores, int):
            raise ModelError(f"job {self.job_id!r}: cores must be a whole number, not {self.cores!r}")
        if self.time_limit is not None and finite_number(self.time_limit, f"job {self.job_id!r}: time limit") <= 0:
            raise ModelError(f"job {self.job_id!r}: time limit must be positive, not {self.time_limit!r}")
        if finite_number(self.elapsed, f"job {self.job_id!r}: elapsed") < 0:
            raise ModelError(f"job {self.job_id!r}: elapsed must not be negative, not {self.elapsed!r}")
        if self.reserved is not None:
            finite_number(self.reserved, f"job {self.job_id!r}: reserved start")


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """A site's queue at ``taken_at``: what a scheduler would need to plan from it.

    ``pending`` is in priority order, highest first. ``policy`` is one of
    :data:`BATCH_POLICIES`. ``default_limit`` stands in for jobs without a time
    limit (a partition's maximum, where the site has one). ``notes`` say what the reader of
    the queue assumed or left out (e.g. held jobs), so a plan built on it can say so too.
    """

    site: str
    taken_at: float
    total_cores: int
    running: tuple[SnapJob, ...] = ()
    pending: tuple[SnapJob, ...] = ()
    policy: str = "easy"
    default_limit: float | None = None
    notes: tuple[str, ...] = ()
    #: a pool that starts jobs only at its negotiation cycles (HTCondor): the last cycle's end
    #: and the period between cycles; the pilot starts at the first cycle at or after the time
    #: the twin frees its cores. None: the scheduler starts jobs as soon as they fit (Slurm, PBS).
    cycle_end: float | None = None
    cycle_period: float | None = None

    def __post_init__(self) -> None:
        finite_number(self.taken_at, "snapshot time")
        if isinstance(self.total_cores, bool) or not isinstance(self.total_cores, int) or self.total_cores < 1:
            raise ModelError(f"site {self.site!r}: a snapshot needs at least one core, got {self.total_cores!r}")
        if self.policy not in BATCH_POLICIES:
            raise ModelError(f"site {self.site!r}: unknown policy {self.policy!r}; one of {', '.join(BATCH_POLICIES)}")
        if self.default_limit is not None and finite_number(self.default_limit, "default limit") <= 0:
            raise ModelError(f"site {self.site!r}: default limit must be positive, not {self.default_limit!r}")
        for job in (*self.running, *self.pending):
            if not isinstance(job, SnapJob):
                raise ModelError(f"site {self.site!r}: snapshot jobs must be SnapJob, not {type(job).__name__}")

    @property
    def busy_cores(self) -> int:
        return sum(j.cores for j in self.running)


# ---------------------------------------------------------------------------- Slurm

#: Slurm job states → JobState. Source: squeue(1), "JOB STATE CODES" (Slurm 22.05–24.11), the
#: same words sacct(1) "JOB STATE CODES" and the REST API's ``job_state`` use. The compact codes
#: (``%t``: ``PD``, ``CG`` …) are expanded first by :data:`SLURM_CODES`.
SLURM_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,          # PD: awaiting resource allocation
    "CONFIGURING": JobState.PENDING,      # CF: allocated, nodes booting: the pilot has not begun
    "REQUEUED": JobState.PENDING,         # RQ: completing job being requeued
    "REQUEUE_FED": JobState.PENDING,      # RF: requeued by a federation sibling
    "REQUEUE_HOLD": JobState.HELD,        # RH: requeued and held
    "SPECIAL_EXIT": JobState.HELD,        # SE: requeued in a special state (held)
    "RUNNING": JobState.RUNNING,          # R: has an allocation
    "RESIZING": JobState.RUNNING,         # RS: running, about to change size
    "SUSPENDED": JobState.RUNNING,        # S: allocation kept, execution suspended
    "STOPPED": JobState.RUNNING,          # ST: SIGSTOPped, CPUs retained
    "COMPLETING": JobState.COMPLETING,    # CG: in the process of completing
    "COMPLETED": JobState.DONE,           # CD: all processes terminated with exit code zero
    "FAILED": JobState.FAILED,            # F: non-zero exit code or other failure
    "BOOT_FAIL": JobState.FAILED,         # BF: launch failure (hardware)
    "NODE_FAIL": JobState.FAILED,         # NF: a node failed
    "OUT_OF_MEMORY": JobState.FAILED,     # OOM
    "CANCELLED": JobState.CANCELLED,      # CA: cancelled by the user or administrator
    "PREEMPTED": JobState.CANCELLED,      # PR: terminated by preemption
    "REVOKED": JobState.CANCELLED,        # RV: removed because a federation sibling started it
    "TIMEOUT": JobState.TIMEOUT,          # TO: reached its time limit
    "DEADLINE": JobState.TIMEOUT,         # DL: reached its deadline
    # Three documented states say nothing about whether the pilot still holds its cores or has
    # ended — the job is being signaled (SI), stages out files (SO), or waits on a deleted
    # reservation (RD) — so they are unknown on purpose: the pilot is polled on, the word shown.
    "SIGNALING": JobState.UNKNOWN,
    "STAGE_OUT": JobState.UNKNOWN,
    "RESV_DEL_HOLD": JobState.UNKNOWN,
}
#: squeue's compact state codes (``%t``) → full names (squeue(1), "JOB STATE CODES")
SLURM_CODES = {
    "BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING",
    "CG": "COMPLETING", "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY", "PD": "PENDING", "PR": "PREEMPTED", "R": "RUNNING",
    "RD": "RESV_DEL_HOLD", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD", "RQ": "REQUEUED",
    "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING", "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT", "ST": "STOPPED", "S": "SUSPENDED", "TO": "TIMEOUT",
}


def slurm_state(word: str) -> JobState:
    """A Slurm state name (already normalised: upper case, one word) → JobState; a word the
    table does not hold is :attr:`JobState.UNKNOWN`."""
    return SLURM_STATES.get(SLURM_CODES.get(word, word), JobState.UNKNOWN)


# ---------------------------------------------------------------------------- PBS

#: PBS job state letters → JobState. Sources: PBS Professional Reference Guide, "Job States"
#: (qstat(1B): B begun (array), E exiting, F finished, H held, M moved, Q queued, R running,
#: S suspended, T transit, U suspended/workstation busy, W waiting, X expired subjob) and
#: Torque's qstat(1) (C completed, E exiting, H, Q, R, T, W, S). ``F``/``C``/``X`` are refined
#: by the exit status (:func:`pbs_state`); ``U`` is dialect-dependent.
PBS_STATES: dict[str, JobState] = {
    "Q": JobState.PENDING, "W": JobState.PENDING, "T": JobState.PENDING,
    "H": JobState.HELD,
    "R": JobState.RUNNING, "B": JobState.RUNNING, "S": JobState.RUNNING,
    "E": JobState.COMPLETING,
    "F": JobState.DONE, "C": JobState.DONE, "X": JobState.DONE,
    "M": JobState.DONE,       # moved to another server: over here (reason "Moved")
}
#: PBS Pro's exit status for a job killed at its walltime (JOB_EXEC_KILL_WALLTIME, pbs_error.h)
PBS_PRO_KILL_WALLTIME = -29


def pbs_state(letter: str, exit_status: int | None = None, dialect: str = "pro") -> JobState:
    """A PBS state letter (and a finished job's exit status) → JobState.

    A finished job (F/C/X) is ``done`` with exit status 0 or none, ``timeout`` with PBS Pro's
    -29, ``cancelled`` when killed by a signal (PBS reports 256 + the signal), else ``failed``.
    ``U`` is PBS Pro's "suspended, workstation busy" (running: it keeps its cores); Debian's
    Slurm wrappers for Torque print U for a state they have no letter for (out of memory,
    deadline), all of them over: ``failed`` there. Any other letter is ``unknown``.
    """
    c = str(letter or "").strip().upper()[:1]
    if c == "U":
        return JobState.RUNNING if dialect == "pro" else JobState.FAILED
    state = PBS_STATES.get(c, JobState.UNKNOWN)
    if c in ("F", "C", "X") and exit_status not in (None, 0):
        if dialect == "pro" and exit_status == PBS_PRO_KILL_WALLTIME:
            return JobState.TIMEOUT
        if exit_status > 256:
            return JobState.CANCELLED
        return JobState.FAILED
    return state


# ---------------------------------------------------------------------------- HTCondor

#: HTCondor ``JobStatus`` → (its name, JobState). Source: HTCondor manual, "Job ClassAd
#: Attributes", JobStatus (1 Idle, 2 Running, 3 Removed, 4 Completed, 5 Held, 6 Transferring
#: Output, 7 Suspended). Completed is refined by ExitCode/ExitBySignal (:func:`htcondor_state`);
#: a held job's HoldReason is its reason (it never starts unless released).
HTCONDOR_STATES: dict[int, tuple[str, JobState]] = {
    1: ("Idle", JobState.PENDING),
    2: ("Running", JobState.RUNNING),
    3: ("Removed", JobState.CANCELLED),
    4: ("Completed", JobState.DONE),
    5: ("Held", JobState.HELD),
    6: ("Transferring Output", JobState.COMPLETING),
    7: ("Suspended", JobState.RUNNING),
}


def htcondor_state(status: int, exit_code: int | None = None, by_signal: bool = False
                   ) -> tuple[str, JobState]:
    """A JobStatus number → (HTCondor's name for it, JobState); a Completed job with a
    non-zero ExitCode or killed by a signal is ``failed``; a number not in the manual's table
    is ``("JobStatus N", unknown)``."""
    if status not in HTCONDOR_STATES:
        return f"JobStatus {int(status)}", JobState.UNKNOWN
    name, state = HTCONDOR_STATES[status]
    if status == 4 and (by_signal or exit_code not in (None, 0)):
        return name, JobState.FAILED
    return name, state


# ---------------------------------------------------------------------------- polling our own jobs

#: how many job ids one poll command names at most (a command line stays short, a reply small)
POLL_BATCH = 100


def batches(ids: Sequence[str], size: int = POLL_BATCH) -> Iterator[list[str]]:
    """``ids`` in order, in lists of at most ``size`` (none for no ids)."""
    for i in range(0, len(ids), size):
        yield list(ids[i:i + size])


# ---------------------------------------------------------------------------- client protocols


@runtime_checkable
class Scheduler(Protocol):
    """What every scheduler client does: the coordinator starts, polls and stops pilots
    through this alone (:mod:`.pilotsite`).

    ``jobs(ids)`` asks about those jobs only, never every user's queue, and also reports a job
    that finished since the last poll with its final state (from history or accounting) as
    long as the scheduler keeps it; ``jobs(name_prefix=…)`` finds this user's jobs by name (a
    pilot submitted before a crash). ``availability()`` is an all-users query.
    """

    scheduler: str

    def version(self) -> str: ...

    def availability(self) -> Availability: ...

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]: ...

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None) -> str: ...

    def cancel(self, ids: Sequence[str]) -> None: ...

    def test_only(self, cores: int, walltime: float) -> float | None: ...


@runtime_checkable
class QueueReader(Protocol):
    """A client that can read its queue for the twin (``resel plan``): every user's running and
    pending jobs, the policy that orders them, and the scheduler's own start estimates."""

    def queue_snapshot(self) -> QueueSnapshot: ...

    def scheduler_policy(self) -> str: ...

    def start_estimates(self, ids: Iterable[str]) -> dict[str, float | None]: ...


@runtime_checkable
class LimitReader(Protocol):
    """A client that can read the user's limits where the site tells them (sacctmgr, PBS queue
    limits, the schedd's MAX_JOBS_* knobs: :mod:`.limit_formats`) and who that user is."""

    def limits(self) -> tuple[Any, list[str]]: ...

    def user_name(self) -> str: ...


@runtime_checkable
class SlotReader(Protocol):
    """A pool that lists its execute slots (HTCondor's collector): their clocks give ``resel
    plan`` the spread of a task's runtime across the pool."""

    def slots(self) -> list[Any]: ...


@runtime_checkable
class CpuReader(Protocol):
    """A client that can tell the CPU of the machine it runs commands on (``resel sites check``)."""

    def cpu_info(self) -> dict[str, Any]: ...
