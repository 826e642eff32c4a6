"""HTCondor's replies, turned into resel's types: pure parsers, no I/O.

Every ClassAd is read by the real ClassAd library (:mod:`classad2`, from ``pip install
htcondor``), never by regular expressions: ``condor_status -long`` text through
:func:`classad2.parseAds`, the ``-json`` arrays of ``condor_status``/``condor_q``/
``condor_history`` through :func:`json.loads` for the array framing and :class:`classad2.ClassAd`
for each ad, whose ``"\\/Expr(...)\\/"`` strings become real expressions
(:class:`classad2.ExprTree`) evaluated in their ad, as HTCondor would.

The old-format parser of the ClassAd library is lenient: a line it cannot read is dropped
without a word. A reply with such a line is malformed, not "an ad with one attribute fewer", so
:func:`parse_long` parses every line on its own as well and raises
:class:`SchedulerReplyError` for one that is not exactly one attribute.

Slots
-----
Which attributes a slot ad has depends on the pool. The real recording in
``shared/data/formats/htcondor/condor_status_long.txt`` (10 ads) holds ``Name``, ``State``,
``SlotType``, ``TotalCpus``, ``TotalSlotCpus``, ``TotalSlotMemory``, ``UtsnameNodename`` …
but not ``Activity``, ``Cpus``, ``Memory``, ``Machine`` nor any CPU model or clock: the capture
starts at ``Name`` in alphabetical order. So every field of :class:`Slot` says where it came
from when the usual attribute is missing:

* ``cpus``: ``Cpus``, else ``TotalSlotCpus`` (equal for static and dynamic slots);
* ``memory``: ``Memory``, else ``TotalSlotMemory`` (MB);
* ``machine``: ``Machine``, else the part of ``Name`` after ``@``, else ``UtsnameNodename``;
* ``cpu_model``: the first of :data:`CPU_MODEL_ATTRS` the ad has (``CPUModel`` is what
  HTCondor ≥ 9 advertises; names are case-insensitive in ClassAds);
* ``clock_mhz``: the first of :data:`CLOCK_MHZ_ATTRS` (not standard: attributes an
  administrator may add with ``STARTD_ATTRS``), else the ``@ 2.40GHz`` suffix of the model
  string (Intel's model names carry their base clock; AMD's do not);
* ``cpu_family``, ``cpu_model_number``, ``mips``, ``kflops``: recorded when present
  (``CPUFamily``, ``CPUModelNumber``, ``Mips``, ``KFlops``), never turned into a clock — the
  benchmarks measure the slot, not the nominal clock LIM wants.

Pool summary
------------
:func:`summarize_pool` counts cores per slot as ``condor_status -total`` does, so dynamic slots
(carved from a partitionable slot) are not counted twice: total = partitionable slots'
``TotalSlotCpus`` + static slots' cpus; free = Unclaimed/Idle static or dynamic slots' cpus +
partitionable slots' free ``Cpus``. Without ``Cpus`` (the recording) a partitionable slot's free
cores are its ``TotalSlotCpus`` minus the cpus of the dynamic slots listed for it — exact when
the listing is complete, as ``condor_status`` is.

The pool's clock is the **weighted average of the slots' clocks, weights = cpus** (the thesis's
Table 4.1 "OSG base" is a weighted average of the pool's base clocks). When no slot advertises
a clock, it is None: nothing is guessed, and LIM keeps the site file's ``clock.base`` (2.50 GHz
for the OSG in Table 4.1).

Jobs
----
``JobStatus`` is translated into resel's :class:`~resel.backends.jobs.JobState` through HTCondor's own table
(:data:`~resel.backends.jobs.HTCONDOR_STATES`, from the manual's "Job ClassAd Attributes"); the status's
name is kept as ``native``:

==========  ====================  ===================================================
JobStatus   HTCondor (native)     resel (JobState)
==========  ====================  ===================================================
1           Idle                  pending
2           Running               running
3           Removed               cancelled, reason ``RemoveReason`` (from the history); completing
                                  while ``condor_q`` still lists it (see below)
4           Completed             done, or failed when ``ExitCode`` != 0 / a signal
5           Held                  held, reason ``"Held: " + HoldReason``
6           Transferring Output   completing
7           Suspended             running (it keeps its slot)
other       ``JobStatus N``       unknown: polled on, never taken as ended
==========  ====================  ===================================================

A removed job that was running stays in ``condor_q`` with JobStatus 3 until its shadow exits:
the job got SIGTERM and is still ending (a pilot's chirp wrapper pushes its last results then,
seconds later). Taken as final there, those results came back after the coordinator had ended
the pilot, and its tasks ran twice (found live: tests/test_htcondor_faults_live.py). Such a job
is therefore ``completing`` — still ending, like Slurm's CG — and ``cancelled`` once it reached
the history (``condor_history``/``Schedd.history``), when everything it wrote is on the access
point.

A held job never starts by itself (a user or a ``periodic_release`` must release it); the pilot
submit description of :mod:`.client` removes a pilot held for longer than ten minutes, which
the coordinator then sees as cancelled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    import classad2
except ImportError:      # the CLI backend needs the ClassAd library too, not the daemons
    classad2 = None

from resel.backends.jobs import HTCONDOR_STATES, Availability, JobInfo, JobState, Partition, Pending, htcondor_state
from resel.errors import SchedulerError, SchedulerReplyError

__all__ = [
    "CLOCK_MHZ_ATTRS", "CPU_MODEL_ATTRS", "JOB_ATTRS", "JOB_STATES", "PENDING_STATUS", "PoolSummary", "SLOT_ATTRS",
    "Slot", "job_from_ad", "make_availability", "parse_json_ads", "parse_long", "parse_rm",
    "parse_slots", "parse_submit_terse", "parse_version", "slot_from_ad", "summarize_pool",
]

#: CPU model attributes, in the order tried (ClassAd names are case-insensitive)
CPU_MODEL_ATTRS = ("CPUModel", "Cpu_Model", "ProcessorModel")
#: clock attributes in MHz: not advertised by HTCondor itself, only where an admin adds them
CLOCK_MHZ_ATTRS = ("CPUClockMHz", "CPU_MHz", "ClockMHz")
#: what resel asks of every slot (``-attributes`` / ``projection``); missing ones are fine
SLOT_ATTRS = ("Name", "Machine", "State", "Activity", "Cpus", "TotalCpus", "TotalSlotCpus",
              "Memory", "TotalSlotMemory", "SlotType", "UtsnameNodename", "CPUFamily",
              "CPUModelNumber", "Mips", "KFlops", *CPU_MODEL_ATTRS, *CLOCK_MHZ_ATTRS)
#: what resel asks of every job
JOB_ATTRS = ("ClusterId", "ProcId", "JobStatus", "JobBatchName", "Owner", "QDate",
             "JobCurrentStartDate", "JobStartDate", "CompletionDate", "EnteredCurrentStatus",
             "RequestCpus", "ExitCode", "ExitBySignal", "ExitSignal", "HoldReason",
             "RemoveReason", "ReselWalltime", "NumJobStarts")
#: JobStatus → JobState (Completed is refined by the exit code); the table is in :mod:`resel.backends.jobs`
JOB_STATES = {code: state for code, (_name, state) in HTCONDOR_STATES.items()}
#: why a job that waits waits → :class:`~resel.backends.jobs.Pending`, by JobStatus (the manual's
#: "Job ClassAd Attributes"): Idle waits for the negotiator to match it to a slot; Held waits
#: for a release (``HoldReason`` says why, and is the job's reason; resel asks for no
#: ``HoldReasonCode``), and the pilot's submit description removes a pilot held for ten minutes
#: (:mod:`.client`), which the coordinator then sees as cancelled — so none is ``never``.
PENDING_STATUS: dict[int, Pending] = {1: Pending.WAITING, 5: Pending.BLOCKED}


# ---------------------------------------------------------------------------- ClassAds


def _need_classad() -> None:
    if classad2 is None:
        raise SchedulerError("the ClassAd library (classad2) is not installed",
                             hint="pip install 'resel[htcondor]' (Python bindings only, no daemons needed)")


def _ad_blocks(text: str) -> list[list[str]]:
    """Old-format ads are separated by blank lines (``condor_status -long``)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def parse_long(text: str, command: str = "condor_status -long") -> list[classad2.ClassAd]:
    """``-long`` output → ClassAds, refusing any line the ClassAd library cannot read.

    Each blank-line separated block is parsed by :func:`classad2.parseOne` (old syntax); each of
    its lines must also parse on its own into exactly one attribute, since the library drops
    unreadable lines silently.
    """
    _need_classad()
    ads = []
    for number, block in enumerate(_ad_blocks(text), 1):
        for line in block:
            if line.lstrip().startswith("#"):
                continue
            try:
                one = classad2.parseOne(line, classad2.ParserType.Old)
            except ValueError as e:
                raise SchedulerReplyError(command, f"ad {number}: cannot parse {line.strip()[:80]!r}: {e}") from None
            if len(one) != 1:
                raise SchedulerReplyError(command, f"ad {number}: {line.strip()[:80]!r} is not one "
                                                   "'Attribute = expression' line")
        try:
            ad = classad2.parseOne("\n".join(block), classad2.ParserType.Old)
        except ValueError as e:
            raise SchedulerReplyError(command, f"ad {number}: {e}") from None
        ads.append(ad)
    return ads


_EXPR_PREFIX, _EXPR_SUFFIX = "/Expr(", ")/"


def _json_value(value: Any, where: str, command: str) -> Any:
    """A JSON value as a ClassAd value: ``"\\/Expr(e)\\/"`` (``/Expr(e)/`` once decoded) is
    HTCondor's JSON encoding of an expression, parsed here by the ClassAd library."""
    if isinstance(value, str) and value.startswith(_EXPR_PREFIX) and value.endswith(_EXPR_SUFFIX):
        source = value[len(_EXPR_PREFIX):-len(_EXPR_SUFFIX)]
        try:
            return classad2.ExprTree(source)
        except Exception as e:   # noqa: BLE001 - the library raises several types
            raise SchedulerReplyError(command, f"{where}: bad expression {source[:80]!r}: {e}") from None
    if isinstance(value, list):
        return [_json_value(v, where, command) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v, f"{where}.{k}", command) for k, v in value.items()}
    return value


def parse_json_ads(text: str, command: str = "condor_q -json") -> list[classad2.ClassAd]:
    """A ``-json`` reply (a JSON array of ads) → ClassAds. An empty reply is no ads: ``condor_q
    -json`` prints nothing at all when no job matches."""
    if not text.strip():
        return []
    _need_classad()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchedulerReplyError(command, f"not JSON ({e.msg} at {e.pos}): {text.strip()[:120]!r}") from None
    if not isinstance(doc, list):
        raise SchedulerReplyError(command, f"expected a JSON array of ads, got {type(doc).__name__}")
    ads = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            raise SchedulerReplyError(command, f"ad {i}: expected a JSON object, got {type(item).__name__}")
        try:
            ads.append(classad2.ClassAd({k: _json_value(v, f"ad {i}.{k}", command) for k, v in item.items()}))
        except SchedulerReplyError:
            raise
        except Exception as e:   # noqa: BLE001 - a value the ClassAd library refuses
            raise SchedulerReplyError(command, f"ad {i}: {e}") from None
    return ads


def value(ad: classad2.ClassAd, attr: str) -> Any:
    """An attribute's value, expressions evaluated in the ad; None when absent, undefined or an
    error (``SlotWeight = Cpus`` in an ad without ``Cpus`` is undefined, not a crash)."""
    if attr not in ad:
        return None
    try:
        v = ad.eval(attr)
    except Exception:   # noqa: BLE001 - the library's evaluation errors
        return None
    if isinstance(v, classad2.Value):
        return None
    return v


def _first(ad: classad2.ClassAd, attrs: Iterable[str]) -> Any:
    for attr in attrs:
        v = value(ad, attr)
        if v is not None:
            return v
    return None


def _number(ad: classad2.ClassAd, attr: str, command: str, *, whole: bool = False) -> float | int | None:
    v = value(ad, attr)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
        raise SchedulerReplyError(command, f"{attr} = {v!r} is not a number")
    return int(v) if whole else v


def _text(ad: classad2.ClassAd, attr: str, command: str) -> str | None:
    v = value(ad, attr)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SchedulerReplyError(command, f"{attr} = {v!r} is not a string")
    return v


# ---------------------------------------------------------------------------- slots


@dataclass(frozen=True)
class Slot:
    """One startd slot. ``cpus`` are the slot's own (a partitionable slot's *free* ones when its
    ``Cpus`` is known); ``memory`` in MB; ``clock_mhz`` None where the pool advertises none."""

    name: str
    machine: str | None
    state: str | None
    activity: str | None
    cpus: int | None
    total_cpus: int | None       # the machine's (TotalCpus)
    slot_cpus: int | None        # the slot's configured cpus (TotalSlotCpus)
    memory: int | None
    slot_type: str | None        # Static, Partitionable or Dynamic
    cpu_model: str | None = None
    clock_mhz: float | None = None
    cpu_family: int | None = None
    cpu_model_number: int | None = None
    mips: int | None = None
    kflops: int | None = None
    cpus_known: bool = True      # False when cpus came from TotalSlotCpus (no Cpus attribute)

    @property
    def partitionable(self) -> bool:
        return (self.slot_type or "").lower() == "partitionable"

    @property
    def dynamic(self) -> bool:
        return (self.slot_type or "").lower() == "dynamic"

    @property
    def idle(self) -> bool:
        """Unclaimed and (where the ad says) Idle: free for a new job."""
        return self.state == "Unclaimed" and self.activity in (None, "Idle")


def clock_from_model(model: str | None) -> float | None:
    """The base clock in MHz from an Intel-style model name (``… @ 2.40GHz``), else None."""
    if not model or "@" not in model:
        return None
    tail = model.rsplit("@", 1)[1].strip()
    if not tail.lower().endswith("ghz"):
        return None
    try:
        ghz = float(tail[:-3].strip())
    except ValueError:
        return None
    return ghz * 1000.0 if ghz > 0 else None


def slot_from_ad(ad: classad2.ClassAd, command: str = "condor_status") -> Slot:
    """One slot ad → :class:`Slot` (see the module docstring for the fallbacks)."""
    name = _text(ad, "Name", command)
    if not name:
        raise SchedulerReplyError(command, f"a slot ad without Name: {sorted(ad.keys())[:8]}")
    cpus = _number(ad, "Cpus", command, whole=True)
    slot_cpus = _number(ad, "TotalSlotCpus", command, whole=True)
    total = _number(ad, "TotalCpus", command)
    memory = _number(ad, "Memory", command, whole=True)
    if memory is None:
        memory = _number(ad, "TotalSlotMemory", command, whole=True)
    machine = _text(ad, "Machine", command)
    if machine is None and "@" in name:
        machine = name.split("@", 1)[1]
    machine = machine or _text(ad, "UtsnameNodename", command)
    model = _first(ad, CPU_MODEL_ATTRS)
    model = str(model).strip() if model is not None else None
    clock = _first(ad, CLOCK_MHZ_ATTRS)
    if clock is not None and (isinstance(clock, bool) or not isinstance(clock, (int, float)) or clock <= 0):
        clock = None
    if clock is None:
        clock = clock_from_model(model)

    def opt_int(attr: str) -> int | None:
        v = _number(ad, attr, command)
        return None if v is None else int(v)

    return Slot(name=name, machine=machine, state=_text(ad, "State", command),
                activity=_text(ad, "Activity", command),
                cpus=cpus if cpus is not None else slot_cpus,
                total_cpus=None if total is None else int(total), slot_cpus=slot_cpus, memory=memory,
                slot_type=_text(ad, "SlotType", command), cpu_model=model or None,
                clock_mhz=None if clock is None else float(clock), cpu_family=opt_int("CPUFamily"),
                cpu_model_number=opt_int("CPUModelNumber"), mips=opt_int("Mips"), kflops=opt_int("KFlops"),
                cpus_known=cpus is not None)


def parse_slots(text: str, command: str = "condor_status -json") -> list[Slot]:
    """``condor_status -json`` (an array) or ``-long`` (old ClassAds) text → slots."""
    stripped = text.lstrip()
    ads = parse_json_ads(text, command) if stripped.startswith("[") else parse_long(text, command)
    return [slot_from_ad(ad, command) for ad in ads]


@dataclass(frozen=True)
class PoolSummary:
    """What a pool offers now. ``clock_ghz`` is the cpu-weighted average of the slots' clocks,
    None when no slot advertises one (LIM then keeps the site file's clock); ``clock_coverage``
    is the share of cpus whose clock is known."""

    slots: int
    machines: int
    total_cores: int
    free_cores: int
    claimed_cores: int
    models: dict[str, int] = field(default_factory=dict)     # model → cpus ("unknown" if absent)
    clock_ghz: float | None = None
    clock_coverage: float = 0.0
    estimated_free: bool = False     # a partitionable slot's free cpus were derived (no Cpus)


def _partitionable_free(slots: list[Slot]) -> dict[str, tuple[int, bool]]:
    """Free cpus of every partitionable slot: its ``Cpus``, else TotalSlotCpus minus the cpus of
    the dynamic slots carved from it (``slot1_3@m`` belongs to ``slot1@m``)."""
    used: dict[str, int] = {}
    for s in slots:
        if s.dynamic and "@" in s.name:
            local, host = s.name.split("@", 1)
            parent = local.split("_", 1)[0] + "@" + host
            used[parent] = used.get(parent, 0) + (s.cpus or 0)
    out = {}
    for s in slots:
        if s.partitionable:
            if s.cpus_known:
                out[s.name] = (s.cpus or 0, False)
            else:
                out[s.name] = (max(0, (s.slot_cpus or 0) - used.get(s.name, 0)), True)
    return out


def summarize_pool(slots: list[Slot]) -> PoolSummary:
    """Free/total cores, cpus per CPU model and the cpu-weighted clock of a pool."""
    pfree = _partitionable_free(slots)
    total = free = claimed = 0
    estimated = False
    models: dict[str, int] = {}
    weighted = weight = 0.0
    for s in slots:
        if s.partitionable:
            size = s.slot_cpus if s.slot_cpus is not None else (s.cpus or 0)
            total += size
            got, est = pfree[s.name]
            if s.state != "Owner" and s.state != "Drained":
                free += got
                estimated = estimated or est
            counted = size
        else:
            size = s.cpus or 0
            if not s.dynamic:
                total += size
            if s.idle:
                free += size
            elif s.state == "Claimed":
                claimed += size
            counted = 0 if s.dynamic else size
        # models and clock per cpu of the pool: dynamic slots' cpus are inside their p-slot's
        if counted:
            key = s.cpu_model or "unknown"
            models[key] = models.get(key, 0) + counted
            if s.clock_mhz:
                weighted += s.clock_mhz * counted
                weight += counted
    clock = round(weighted / weight / 1000.0, 4) if weight else None
    machines = len({s.machine for s in slots if s.machine})
    return PoolSummary(slots=len(slots), machines=machines, total_cores=total, free_cores=free,
                       claimed_cores=claimed, models=models, clock_ghz=clock,
                       clock_coverage=round(weight / total, 4) if total else 0.0,
                       estimated_free=estimated)


def make_availability(version: str | None, summary: PoolSummary, running_jobs: int, pending_jobs: int,
                      now: float) -> Availability:
    """The pool as one partition-like ``pool`` entry (HTCondor has no partitions; a slot's
    walltime is the job's own business, so ``max_time`` is None)."""
    pool = Partition(name="pool", state="UP", total_cpus=summary.total_cores, idle_cpus=summary.free_cores,
                     nodes=summary.machines, max_time=None, default=True)
    return Availability(scheduler="htcondor", version=version, partitions=[pool],
                        free_cores=summary.free_cores, total_cores=summary.total_cores,
                        running_jobs=running_jobs, pending_jobs=pending_jobs, queried_at=now)


def schedd_totals(ads: Iterable[classad2.ClassAd], command: str = "condor_status -schedd -json") -> tuple[int, int]:
    """Running and idle jobs summed over schedd ads (``TotalRunningJobs``, ``TotalIdleJobs``)."""
    running = idle = 0
    for ad in ads:
        running += int(_number(ad, "TotalRunningJobs", command) or 0)
        idle += int(_number(ad, "TotalIdleJobs", command) or 0)
    return running, idle


# ---------------------------------------------------------------------------- jobs


def job_state(status: int, exit_code: int | None = None, by_signal: bool = False) -> JobState:
    """JobStatus → JobState (see the table in the module docstring); a code not in the table
    is ``unknown``: the pilot is polled on and the state shown, never taken as ended."""
    return htcondor_state(status, exit_code, by_signal)[1]


def job_from_ad(ad: classad2.ClassAd, command: str = "condor_q -json") -> JobInfo:
    """A job ad → :class:`JobInfo` with id ``Cluster.Proc``, its JobState and JobStatus name."""
    cluster = _number(ad, "ClusterId", command, whole=True)
    proc = _number(ad, "ProcId", command, whole=True)
    status = _number(ad, "JobStatus", command, whole=True)
    if cluster is None or proc is None or status is None:
        raise SchedulerReplyError(command, f"a job ad without ClusterId/ProcId/JobStatus: {sorted(ad.keys())[:8]}")
    exit_code = _number(ad, "ExitCode", command, whole=True)
    by_signal = bool(value(ad, "ExitBySignal"))
    native, state = htcondor_state(status, exit_code, by_signal)
    in_queue = "history" not in command.lower()
    reason = None
    if status == 5:
        reason = "Held: " + (_text(ad, "HoldReason", command) or "no reason given")
    elif status == 3:
        reason = _text(ad, "RemoveReason", command)
        if in_queue:     # still ending: see the module docstring
            state = JobState.COMPLETING
            reason = "removed, still ending" + (f" ({reason})" if reason else "")
    elif state is JobState.FAILED:
        reason = f"signal {value(ad, 'ExitSignal')}" if by_signal else f"exit code {exit_code}"

    def when(attr: str) -> float | None:
        v = _number(ad, attr, command)
        return float(v) if v and v > 0 else None

    start = when("JobCurrentStartDate") or when("JobStartDate")
    end = when("CompletionDate")
    if end is None and status == 3:
        end = when("EnteredCurrentStatus")
    cpus = _number(ad, "RequestCpus", command)
    limit = _number(ad, "ReselWalltime", command)
    exit_text = None
    if exit_code is not None or by_signal:
        exit_text = f"signal {value(ad, 'ExitSignal')}" if by_signal else str(exit_code)
    return JobInfo(job_id=f"{cluster}.{proc}", name=_text(ad, "JobBatchName", command) or "", state=state,
                   native=native,
                   submit=when("QDate"), start=start if status != 1 else None, end=end,
                   time_limit=float(limit) if limit else None, cpus=None if cpus is None else int(cpus),
                   reason=reason, user=_text(ad, "Owner", command), partition=None, exit_code=exit_text,
                   pending=PENDING_STATUS.get(status, Pending.WAITING) if state.phase == "pending" else None)


def parse_jobs(text: str, command: str = "condor_q -json") -> dict[str, JobInfo]:
    """``condor_q -json`` / ``condor_history -json`` → jobs by ``Cluster.Proc``."""
    return {j.job_id: j for j in (job_from_ad(ad, command) for ad in parse_json_ads(text, command))}


# ---------------------------------------------------------------------------- commands


def _job_id(word: str, command: str) -> str:
    cluster, dot, proc = word.partition(".")
    if not dot or not cluster.isdigit() or not proc.isdigit():
        raise SchedulerReplyError(command, f"{word!r} is not a Cluster.Proc job id")
    return f"{int(cluster)}.{int(proc)}"


def parse_submit_terse(stdout: str, command: str = "condor_submit -terse") -> list[str]:
    """``condor_submit -terse`` prints ``FIRST - LAST`` (``123.0 - 123.0``) → every job id."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise SchedulerReplyError(command, "no job id in the reply")
    ids: list[str] = []
    for line in lines:
        words = line.split()
        if len(words) != 3 or words[1] != "-":
            raise SchedulerReplyError(command, f"expected 'CLUSTER.PROC - CLUSTER.PROC', got {line[:80]!r}")
        first, last = _job_id(words[0], command), _job_id(words[2], command)
        c1, p1 = (int(x) for x in first.split("."))
        c2, p2 = (int(x) for x in last.split("."))
        if c1 != c2 or p2 < p1:
            raise SchedulerReplyError(command, f"job range {line!r} spans clusters or runs backwards")
        ids.extend(f"{c1}.{p}" for p in range(p1, p2 + 1))
    return ids


def parse_rm(stdout: str, stderr: str, returncode: int, ids: list[str], command: str = "condor_rm") -> list[str]:
    """``condor_rm`` → the problems worth raising; a job already gone is not one (that is what
    was wanted). condor_rm says ``Job 123.0 marked for removal`` per job, and ``Couldn't find/
    remove all jobs matching …`` / ``Job 123.0 not found`` for the others."""
    problems = []
    for line in (stdout + "\n" + stderr).splitlines():
        text = line.strip()
        if not text:
            continue
        low = text.lower()
        if "marked for removal" in low or "not found" in low or "couldn't find/remove all jobs" in low \
                or "already" in low:
            continue
        if "error" in low or "failed" in low or "denied" in low or "not authorized" in low \
                or "can't" in low or "cannot" in low:
            problems.append(text)
    if returncode != 0 and not problems:
        said = (stderr or stdout).strip()
        if said and all(("not found" in s.lower() or "couldn't find" in s.lower()
                         or "marked for removal" in s.lower()) for s in said.splitlines() if s.strip()):
            return []
        problems.append(said or f"exit status {returncode}")
    return problems


def parse_version(stdout: str, command: str = "condor_version") -> str:
    """``$CondorVersion: 23.0.3 2024-01-02 BuildID: … $`` → ``"23.0.3"``."""
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "$CondorVersion:":
            return words[1]
    raise SchedulerReplyError(command, f"no $CondorVersion in {stdout.strip()[:80]!r}")


def check_ids(ids: Iterable[str]) -> list[str]:
    """Job ids as ``Cluster.Proc`` strings, refusing anything else (they reach argv)."""
    out = []
    for jid in ids:
        text = str(jid).strip()
        try:
            out.append(_job_id(text, "job id"))
        except SchedulerReplyError:
            raise SchedulerError(f"{jid!r} is not an HTCondor job id (CLUSTER.PROC)") from None
    return out


def cpu_summary(summary: PoolSummary) -> dict[str, Any]:
    """:meth:`cpu_info`'s answer for a pool, keyed like the Slurm login-node summary."""
    known = {m: n for m, n in summary.models.items() if m != "unknown"}
    model = max(known, key=lambda m: known[m]) if known else None
    return {"model": model, "base_mhz": None if summary.clock_ghz is None else round(summary.clock_ghz * 1000, 1),
            "max_mhz": None, "min_mhz": None, "current_mhz": None, "cpus": summary.total_cores,
            "models": dict(summary.models), "clock_coverage": summary.clock_coverage,
            "clock_source": ("cpu-weighted average over the pool's slots" if summary.clock_ghz is not None
                             else "none advertised: LIM uses the site file's clock.base")}


def as_mapping(ad: classad2.ClassAd) -> Mapping[str, Any]:
    """An ad's evaluated values (for logs and tests)."""
    return {k: value(ad, k) for k in ad.keys()}
