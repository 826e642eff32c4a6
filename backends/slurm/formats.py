"""Slurm's replies, turned into resel's types: pure parsers, no I/O.

Everything Slurm prints is parsed here, so the command runners (:mod:`.cli` over a transport,
:mod:`.rest` over HTTP) only build commands and pick a parser. The parsers are tested on
real recorded outputs (``shared/data/formats/slurm``) and on the live testbed.

Slurm's JSON comes in two generations, told apart by ``meta``:

* ``meta.plugin.type = "openapi/v0.0.37"`` / ``"v0.0.38"`` (Slurm 21.08–23.02): flat fields,
  ``job_state: "RUNNING"``, plain integers with the C sentinels NO_VAL (0xfffffffe) and
  INFINITE (0xffffffff) for "unset" and "unlimited";
* ``meta.plugin.data_parser = "data_parser/v0.0.39"`` … ``v0.0.45`` (Slurm 23.02+; 24.11's CLI
  answers v0.0.42 by default, 26.05's v0.0.45 and on request v0.0.42–v0.0.44): numbers as
  ``{"set": true, "infinite": false, "number": N}`` objects, states as lists, nested
  partition fields (``partition.cpus.total``, ``partition.maximums.time``). Each later layout
  only added fields resel does not read, except the partitions' ``flags`` (``DEFAULT``): gone
  from v0.0.40–v0.0.44, back in v0.0.45 (recorded: tests/data/trixie, tests/data/sid).

Real replies mix both (a v0.0.37 ``squeue --json`` file holds a job with number objects), so
fields are not read by generation but through :func:`number`, which accepts either form.

Where ``--json`` is missing (Slurm < 21.08, or a site built without the JSON plugins) the text
formats below are parsed instead; :func:`json_unsupported` recognises the refusal.

Malformed replies raise :class:`SchedulerReplyError` naming the command and what was wrong —
never a ``KeyError`` from deep inside a parser.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Any

from resel.backends.jobs import (  # noqa: F401 - Availability, JobInfo, Partition re-exported
    SLURM_CODES,
    Availability,
    JobInfo,
    JobState,
    Partition,
    Pending,
    slurm_state,
)
from resel.errors import SchedulerError, SchedulerReplyError  # noqa: F401 - re-exported

# ---------------------------------------------------------------------------- errors


# ---------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class NodeCpus:
    """One node's CPUs, as node listings report them (``sinfo --json`` ≤ v0.0.38, REST /nodes)."""

    name: str
    partitions: tuple[str, ...]
    total: int
    idle: int


@dataclass(frozen=True)
class PartitionMeta:
    """A partition's configuration without its current load (scontrol, REST /partitions)."""

    name: str
    state: str
    max_time: float | None
    default: bool
    total_cpus: int | None = None
    nodes: int | None = None


# ---------------------------------------------------------------------------- scalars

#: Slurm's C sentinels in the flat JSON generation: "not set" and "unlimited"
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
NO_VAL64 = 0xFFFFFFFFFFFFFFFE
INFINITE64 = 0xFFFFFFFFFFFFFFFF


def number(value: Any, where: str = "value", command: str = "slurm") -> float | int | None:
    """A Slurm number in either JSON generation: a plain number or a number object.

    Returns None for "not set" (``set: false``, null, NO_VAL) and ``math.inf`` for
    "unlimited" (``infinite: true``, INFINITE) so callers decide what unlimited means.
    """
    if value is None or isinstance(value, bool):
        return None if value is None else int(value)
    if isinstance(value, dict):
        if "number" not in value and "set" not in value:
            raise SchedulerReplyError(command, f"{where}: expected a number or a number object, got {value!r}")
        if value.get("infinite"):
            return math.inf
        if not value.get("set", True):
            return None
        return number(value.get("number"), where, command)
    if isinstance(value, (int, float)):
        if value in (NO_VAL, NO_VAL64):
            return None
        if value in (INFINITE, INFINITE64):
            return math.inf
        if isinstance(value, float) and (math.isnan(value) or value == -math.inf):
            raise SchedulerReplyError(command, f"{where}: {value!r} is not a number")   # JSON's NaN/-Infinity
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                parsed = float(text)
            except ValueError:
                pass
            else:
                if math.isnan(parsed) or parsed == -math.inf:
                    raise SchedulerReplyError(command, f"{where}: {value!r} is not a number")
                return parsed
    raise SchedulerReplyError(command, f"{where}: expected a number, got {value!r}")


def integer(value: Any, where: str = "value", command: str = "slurm") -> int | None:
    """:func:`number` as an int; unlimited counts make no sense here and are reported as None."""
    n = number(value, where, command)
    if n is None or n == math.inf:
        return None
    return int(n)


def timestamp(value: Any, where: str = "time", command: str = "slurm") -> float | None:
    """An epoch time from JSON; 0 and unset mean "not known" (Slurm's convention)."""
    n = number(value, where, command)
    if n is None or n == math.inf or n <= 0:
        return None
    return float(n)


def minutes(value: Any, where: str = "time limit", command: str = "slurm") -> float | None:
    """A time limit in minutes (as JSON gives them) → seconds; unlimited/unset → None."""
    n = number(value, where, command)
    if n is None or n == math.inf or n < 0:
        return None
    return float(n) * 60.0


_DURATION = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_NO_LIMIT = {"UNLIMITED", "INFINITE", "N/A", "NONE", "NOT_SET", "PARTITION_LIMIT", "", "(NULL)"}


def parse_duration(text: str, where: str = "duration", command: str = "slurm") -> float | None:
    """Slurm's text durations → seconds; "UNLIMITED" and friends → None.

    Forms (sbatch(1)): ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``; elapsed times may
    carry fractional seconds (``00:00:01.5`` in sacct).
    """
    t = text.strip()
    if t.upper() in _NO_LIMIT:
        return None
    frac = 0.0
    if "." in t:
        t, _, f = t.partition(".")
        if not f.isdigit():
            raise SchedulerReplyError(command, f"{where}: not a Slurm duration: {text!r}")
        frac = float("0." + f)
    m = _DURATION.match(t)
    if not m:
        raise SchedulerReplyError(command, f"{where}: not a Slurm duration: {text!r}")
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:
        h, mi, s = (parts + [0, 0, 0])[:3]
        return float(int(days) * 86400 + h * 3600 + mi * 60 + s) + frac
    if len(parts) == 1:
        return parts[0] * 60.0 + frac          # a bare number is minutes
    if len(parts) == 2:
        return parts[0] * 60.0 + parts[1] + frac
    return parts[0] * 3600.0 + parts[1] * 60 + parts[2] + frac


def parse_time(text: str, tz: tzinfo | None = None, where: str = "time",
               command: str = "slurm") -> float | None:
    """A text time → epoch seconds; "N/A", "Unknown", "None" → None.

    Epoch digits are what resel asks for (``SLURM_TIME_FORMAT=%s``); the ISO form
    ``2026-11-25T10:00:00`` (Slurm's "standard") has no zone and is the *site's* local time,
    so ``tz`` must be the site's zone (None = this machine's, right for a local scheduler).
    """
    t = text.strip()
    if t.upper() in {"N/A", "UNKNOWN", "NONE", "", "(NULL)", "0"}:
        return None
    if t.isdigit():
        return float(t)
    try:
        moment = datetime.strptime(t, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise SchedulerReplyError(command, f"{where}: not a time: {text!r}") from None
    if tz is None:
        return moment.astimezone().timestamp()       # naive → this machine's local time
    return moment.replace(tzinfo=tz).timestamp()


def parse_utc_offset(text: str) -> timezone:
    """``date +%z`` output (``+0100``) → a fixed-offset zone for :func:`parse_time`."""
    m = re.fullmatch(r"\s*([+-])(\d\d):?(\d\d)\s*", text)
    if not m:
        raise SchedulerReplyError("date +%z", f"not a UTC offset: {text!r}")
    sign = -1 if m.group(1) == "-" else 1
    from datetime import timedelta
    return timezone(sign * timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))


# ---------------------------------------------------------------------------- job states

#: squeue's compact state codes (%t) → full names (the table lives in :mod:`resel.backends.jobs`)
STATE_CODES = SLURM_CODES
#: base states (a job has exactly one); the data_parser lists add flags such as COMPLETING
BASE_STATES = {"PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
               "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
#: flags that matter more than the base state they ride on (a COMPLETING job still holds cores)
_OVERRIDING_FLAGS = ("COMPLETING", "CONFIGURING", "REQUEUED", "RESIZING", "STAGE_OUT", "SIGNALING")
_STATE_WORD = re.compile(r"^[A-Z_]+$")


def normalise_state(value: Any, command: str = "slurm") -> str:
    """Any Slurm job state → one upper-case name.

    Accepts ``"RUNNING"``, ``["RUNNING", "COMPLETING"]`` (data_parser), sacct's
    ``"CANCELLED by 1000"``, squeue's ``"R"`` and lower case. A COMPLETING/CONFIGURING flag wins
    over the base state, as squeue shows it, since it is what the job is doing.
    """
    if isinstance(value, list):
        names = [normalise_state(v, command) for v in value if isinstance(v, str) and v.strip()]
        if not names:
            raise SchedulerReplyError(command, f"empty job state list {value!r}")
        for flag in _OVERRIDING_FLAGS:
            if flag in names:
                return flag
        base = [n for n in names if n in BASE_STATES]
        return base[0] if base else names[0]
    if not isinstance(value, str) or not value.strip():
        raise SchedulerReplyError(command, f"job state: expected a state name, got {value!r}")
    word = value.strip().split()[0].upper().rstrip("+")
    word = STATE_CODES.get(word, word)
    if not _STATE_WORD.match(word):
        raise SchedulerReplyError(command, f"job state: not a Slurm state: {value!r}")
    return word


def job_state_fields(value: Any, command: str) -> dict[str, Any]:
    """``state`` (resel's :class:`~resel.backends.jobs.JobState`) and ``native`` (Slurm's word) of a job."""
    native = normalise_state(value, command)
    return {"state": slurm_state(native), "native": native}


# ---------------------------------------------------------------------------- pending reasons

#: Slurm's pending reasons → :class:`~resel.backends.jobs.Pending`, beside the state table
#: (:data:`~resel.backends.jobs.SLURM_STATES`). Source: Slurm's "Job Reason Codes"
#: (https://slurm.schedmd.com/job_reason_codes.html) and squeue(1), "JOB REASON CODES"
#: (22.05–24.11). ``never`` holds the reasons for which Slurm keeps a job pending although it
#: can never start as submitted — limits per job, not per moment — and only those: such a
#: pilot is cancelled and its site given up (the thirteen the coordinator has always acted on).
SLURM_REASONS: dict[str, Pending] = {
    # the queue: cores, its turn
    "Priority": Pending.WAITING,              # higher-priority jobs go first
    "Resources": Pending.WAITING,             # the cores asked for are in use
    "Cleaning": Pending.WAITING,              # being requeued, its last run still cleaning up
    "Prolog": Pending.WAITING,                # its PrologSlurmctld is running
    "WaitingForScheduling": Pending.WAITING,  # no reason set yet: the scheduler has not looked
    # something besides the queue: a limit of the moment, a hold, a dependency, a time
    "Dependency": Pending.BLOCKED,            # waits for the jobs it depends on
    "BeginTime": Pending.BLOCKED,             # its earliest start time is not reached
    "JobHeldUser": Pending.BLOCKED,           # held by its user
    "JobHeldAdmin": Pending.BLOCKED,          # held by an administrator
    "ReqNodeNotAvail": Pending.BLOCKED,       # the nodes it needs are down, drained or reserved
    "NodeDown": Pending.BLOCKED,
    "PartitionDown": Pending.BLOCKED,
    "PartitionInactive": Pending.BLOCKED,
    "Reservation": Pending.BLOCKED,           # waits for its advanced reservation
    "Licenses": Pending.BLOCKED,
    "JobArrayTaskLimit": Pending.BLOCKED,
    "AccountingPolicy": Pending.BLOCKED,      # a limit Slurm names no better
    "AssociationJobLimit": Pending.BLOCKED,
    "AssociationResourceLimit": Pending.BLOCKED,
    "AssociationTimeLimit": Pending.BLOCKED,
    "QOSJobLimit": Pending.BLOCKED,
    "QOSResourceLimit": Pending.BLOCKED,
    "QOSTimeLimit": Pending.BLOCKED,
    "QOSUsageThreshold": Pending.BLOCKED,
    # never, as submitted
    "PartitionConfig": Pending.NEVER,         # asks more than the partition's configuration allows
    "PartitionTimeLimit": Pending.NEVER,
    "PartitionNodeLimit": Pending.NEVER,
    "InvalidAccount": Pending.NEVER,
    "InvalidQOS": Pending.NEVER,
    "BadConstraints": Pending.NEVER,
    "QOSMaxWallDurationPerJobLimit": Pending.NEVER,
    "QOSMaxCpuPerJobLimit": Pending.NEVER,
    "QOSMaxNodePerJobLimit": Pending.NEVER,
    "AssocMaxWallDurationPerJobLimit": Pending.NEVER,
    "AssocMaxCpuPerJobLimit": Pending.NEVER,
    "AssocMaxNodePerJobLimit": Pending.NEVER,
    "DependencyNeverSatisfied": Pending.NEVER,
}
#: families of reasons by their first word, for the codes not in :data:`SLURM_REASONS`: the
#: aggregate limits of an association or QOS (``AssocGrpCpuLimit``, ``QOSGrpNodeLimit`` …) and
#: the per-user/per-account ones (``QOSMaxJobsPerUserLimit``, ``MaxCpuPerAccount`` …) clear as
#: other jobs end; the per-job maxima missing from the table (``QOSMaxGRESPerJob`` …) stay
#: ``blocked``, as the coordinator has always treated them (the pilot waits), and
#: ``ReqNodeNotAvail, UnavailableNodes:cs[100-102]`` is ReqNodeNotAvail with its nodes
_SLURM_REASON_FAMILIES = (("AssocGrp", Pending.BLOCKED), ("QOSGrp", Pending.BLOCKED), ("AssocMax", Pending.BLOCKED),
                          ("QOSMax", Pending.BLOCKED), ("Max", Pending.BLOCKED), ("QOSMin", Pending.BLOCKED),
                          ("ReqNodeNotAvail", Pending.BLOCKED))


def reason_text(value: Any) -> str | None:
    """A job's reason as Slurm prints it, with its placeholders for none (``None``,
    ``(null)``, ``N/A``, empty) read as None: no other module needs to know them."""
    return _str_or_none(value)


def pending_class(reason: str | None) -> Pending:
    """A pending job's reason (:func:`reason_text`'s) → its :class:`~resel.backends.jobs.Pending`.

    No reason is ``waiting`` (Slurm has not looked at the job yet). A reason in no table — a
    newer Slurm's, or the sentence squeue prints for some (``Nodes required for job are DOWN,
    DRAINED or …``) — is ``waiting`` too: only a reason Slurm documents as never starting may
    end a pilot, as only a state it documents as over does (:mod:`resel.backends.jobs`); a
    pilot kept waiting for nothing is polled on and its reason shown, one cancelled for a word
    resel misread is lost work.
    """
    if not reason:
        return Pending.WAITING
    if reason in SLURM_REASONS:          # the word exactly: nothing else is ever ``never``
        return SLURM_REASONS[reason]
    word = reason.lstrip("( ")           # a family's code inside squeue's %R parentheses too
    for prefix, kind in _SLURM_REASON_FAMILIES:
        if word.startswith(prefix):
            return kind
    return Pending.WAITING


def reason_fields(value: Any, state: JobState) -> dict[str, Any]:
    """``reason`` (Slurm's word, placeholders read as None) and ``pending`` (its class, for a
    pending job only) of a job, for :class:`JobInfo`."""
    reason = reason_text(value)
    return {"reason": reason, "pending": pending_class(reason) if state.phase == "pending" else None}


# ---------------------------------------------------------------------------- JSON envelopes

_JSON_REFUSALS = (
    re.compile(r"unrecognized option.*--json", re.IGNORECASE),
    re.compile(r"unknown option.*json", re.IGNORECASE),
    re.compile(r"invalid option", re.IGNORECASE),
    re.compile(r"(data_parser|serializer|openapi)\S*.*(not found|unable|cannot|could not|failed)", re.IGNORECASE),
    re.compile(r"unable to (find|load).*(data_parser|serializer|openapi)", re.IGNORECASE),
)


def json_unsupported(stderr: str) -> bool:
    """Whether a command's complaint means "this Slurm has no ``--json``" (switch to text)."""
    return any(p.search(stderr) for p in _JSON_REFUSALS)


#: slurmdbd's "Nothing found with query" (ESLURM_REST_EMPTY_RESULT): Slurm 22.05's ``sacct
#: --json`` puts it in ``errors`` when no job matches (an id it never recorded), with ``jobs: []``
NOTHING_FOUND = 9003


def _error_code(err: Any) -> Any:
    return err.get("error_number", err.get("errno", err.get("error_code"))) if isinstance(err, dict) else None


def load_json(text: str, command: str, empty_ok: bool = False) -> dict[str, Any]:
    """Parse a JSON reply and raise :class:`SchedulerError` for its ``errors`` array.

    ``empty_ok``: a query that may match nothing (``sacct --json -j ID`` for ids accounting
    never saw) — "Nothing found" is then an empty answer, not an error; any other error still is."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        snippet = text.strip()[:120]
        raise SchedulerReplyError(command, f"not JSON ({e.msg} at {e.pos}): {snippet!r}") from None
    if not isinstance(doc, dict):
        raise SchedulerReplyError(command, f"expected a JSON object, got {type(doc).__name__}")
    if empty_ok and isinstance(doc.get("errors"), list):
        doc = {**doc, "errors": [e for e in doc["errors"] if _error_code(e) != NOTHING_FOUND]}
    check_errors(doc, command)
    return doc


def error_texts(doc: Mapping[str, Any]) -> list[str]:
    """The messages of a reply's ``errors`` array, in either generation's shape."""
    out = []
    for err in doc.get("errors") or []:
        if isinstance(err, dict):
            parts = [str(err[k]) for k in ("description", "error") if err.get(k)]
            code = _error_code(err)
            text = ": ".join(dict.fromkeys(parts)) or "unknown error"
            if code not in (None, 0):
                text += f" (error {code})"
            out.append(text)
        else:
            out.append(str(err))
    return out


def check_errors(doc: Mapping[str, Any], command: str) -> None:
    """Raise :class:`SchedulerError` if the reply carries errors."""
    errors = error_texts(doc)
    if errors:
        raise SchedulerError(f"{command}: the scheduler reported: {'; '.join(errors)}",
                             command=command, reply="; ".join(errors))


def slurm_release(doc: Mapping[str, Any]) -> str | None:
    """The Slurm release a JSON reply came from (``meta.Slurm`` ≤ v0.0.38, ``meta.slurm`` after)."""
    meta = doc.get("meta") or {}
    info = meta.get("Slurm") or meta.get("slurm") or {}
    if info.get("release"):
        return str(info["release"])
    v = info.get("version") or {}
    if all(k in v for k in ("major", "minor", "micro")):
        return f"{int(v['major']):02d}.{int(v['minor']):02d}.{v['micro']}"
    return None


def json_layout(doc: Mapping[str, Any]) -> str:
    """The reply's generation: ``"data_parser/v0.0.40"`` or ``"openapi/v0.0.38"``, or ``"unknown"``."""
    plugin = (doc.get("meta") or {}).get("plugin") or {}
    return str(plugin.get("data_parser") or plugin.get("type") or "unknown")


def _list(doc: Mapping[str, Any], key: str, command: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise SchedulerReplyError(command, f"no {key!r} list in the reply (keys: {sorted(doc)[:8]})")
    return value


def _dig(obj: Any, path: str) -> Any:
    """``obj["a"]["b"]`` for ``path="a/b"``, or None where a level is missing."""
    for part in path.split("/"):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None", "(null)", "N/A") else text


# ---------------------------------------------------------------------------- partitions, nodes

_USABLE_NODE_STATES = {"IDLE", "MIXED", "ALLOCATED", "ALLOC", "MIX", "COMPLETING"}
_UNUSABLE_NODE_FLAGS = {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINTENANCE",
                        "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN",
                        "REBOOT_REQUESTED", "REBOOT_ISSUED", "FUTURE", "UNKNOWN", "INVALID",
                        "PLANNED", "RESERVED", "INVALID_REG", "ERROR"}


def _node_state_words(node: Mapping[str, Any]) -> list[str]:
    state = node.get("state")
    words = state if isinstance(state, list) else [state] if state else []
    words = [str(w).upper() for w in words] + [str(f).upper() for f in node.get("state_flags") or []]
    return [w.strip() for w in words if w]


def parse_nodes_json(doc: Mapping[str, Any], command: str) -> list[NodeCpus]:
    """A ``nodes`` listing (``sinfo --json`` ≤ v0.0.38, REST ``/nodes``) → CPUs per node.

    Idle CPUs count only on nodes that can take work: a down or drained node reports all its
    CPUs "idle" but offers none (sinfo's %C counts them as "other"), and an ALLOCATED node
    offers none whatever ``idle_cpus`` says.
    """
    out = []
    for i, node in enumerate(_list(doc, "nodes", command)):
        if not isinstance(node, dict) or "name" not in node:
            raise SchedulerReplyError(command, f"nodes[{i}]: not a node record")
        where = f"node {node['name']}"
        total = integer(node.get("cpus"), f"{where}: cpus", command) or 0
        alloc = integer(node.get("alloc_cpus"), f"{where}: alloc_cpus", command) or 0
        words = _node_state_words(node)
        base = words[0] if words else "UNKNOWN"
        if base not in _USABLE_NODE_STATES or any(w in _UNUSABLE_NODE_FLAGS for w in words) or base in ("ALLOCATED", "ALLOC"):
            idle = 0
        else:
            reported = integer(node.get("idle_cpus"), f"{where}: idle_cpus", command)
            idle = reported if reported is not None else max(0, total - alloc)
            idle = max(0, min(idle, total - alloc))
        parts = node.get("partitions") or []
        if isinstance(parts, str):
            parts = [p for p in parts.split(",") if p]
        out.append(NodeCpus(str(node["name"]), tuple(str(p) for p in parts), int(total), int(idle)))
    return out


def _partition_state(value: Any) -> str:
    words = value if isinstance(value, list) else [value]
    words = [str(w).upper() for w in words if w]
    if not words:
        return "UNKNOWN"
    return "INACTIVE" if words[0] == "INACT" else words[0]


def parse_partitions_json(doc: Mapping[str, Any], command: str) -> dict[str, PartitionMeta]:
    """A ``partitions`` listing (REST ``/partitions``, ``scontrol show partition --json``).

    Flat (≤ v0.0.38): ``max_time_limit`` minutes, ``flags: ["default"]``, ``total_cpus``.
    data_parser: ``maximums.time``, ``partition.state``, ``cpus.total``, ``nodes.total`` and
    ``flags: ["DEFAULT"]`` (in v0.0.45, Slurm 26.05's newest; v0.0.40–v0.0.44 leave it out).
    """
    out = {}
    for i, p in enumerate(_list(doc, "partitions", command)):
        if not isinstance(p, dict) or not p.get("name"):
            raise SchedulerReplyError(command, f"partitions[{i}]: no partition name")
        name = str(p["name"])
        where = f"partition {name}"
        flags = {str(f).upper() for f in p.get("flags") or []}
        if "maximums" in p or isinstance(p.get("partition"), dict):       # data_parser
            max_time = minutes(_dig(p, "maximums/time"), f"{where}: maximums.time", command)
            state = _partition_state(_dig(p, "partition/state"))
            cpus = integer(_dig(p, "cpus/total"), f"{where}: cpus.total", command)
            nodes = integer(_dig(p, "nodes/total"), f"{where}: nodes.total", command)
        else:
            max_time = minutes(p.get("max_time_limit"), f"{where}: max_time_limit", command)
            state = _partition_state(p.get("state"))
            cpus = integer(p.get("total_cpus"), f"{where}: total_cpus", command)
            nodes = integer(p.get("total_nodes"), f"{where}: total_nodes", command)
        out[name] = PartitionMeta(name, state, max_time, "DEFAULT" in flags, cpus, nodes)
    return out


def parse_sinfo_json(doc: Mapping[str, Any], command: str = "sinfo --json"
                     ) -> tuple[dict[str, PartitionMeta], list[NodeCpus]]:
    """``sinfo --json`` in either generation → partition configuration and CPUs per node.

    ≤ v0.0.38 lists nodes only (no partition limits: the caller adds ``scontrol show
    partition``). data_parser lists ``sinfo`` records, one per partition and group of alike
    nodes, with the partition nested; each record's CPUs are spread evenly over its nodes
    (sinfo groups nodes of one configuration and state, so this is exact for totals) and nodes
    are de-duplicated by name, so a node in two partitions counts once in cluster totals.
    """
    if "nodes" in doc and "sinfo" not in doc:
        return {}, parse_nodes_json(doc, command)
    records = _list(doc, "sinfo", command)
    metas: dict[str, PartitionMeta] = {}
    nodes: dict[str, dict[str, Any]] = {}
    anonymous = 0
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise SchedulerReplyError(command, f"sinfo[{i}]: not an object")
        part = rec.get("partition") or {}
        name = part.get("name")
        if not name:
            raise SchedulerReplyError(command, f"sinfo[{i}]: no partition.name")
        where = f"sinfo[{i}] ({name})"
        if name not in metas:
            flags = {str(f).upper() for f in part.get("flags") or []}
            metas[name] = PartitionMeta(
                name, _partition_state(_dig(part, "partition/state")),
                minutes(_dig(part, "maximums/time"), f"{where}: maximums.time", command),
                "DEFAULT" in flags,
                integer(_dig(part, "cpus/total"), f"{where}: partition.cpus.total", command),
                integer(_dig(part, "nodes/total"), f"{where}: partition.nodes.total", command))
        total = integer(_dig(rec, "cpus/total"), f"{where}: cpus.total", command)
        idle = integer(_dig(rec, "cpus/idle"), f"{where}: cpus.idle", command)
        if total is None or idle is None:
            raise SchedulerReplyError(command, f"{where}: no cpus.total/cpus.idle")
        names = _dig(rec, "nodes/nodes") or []
        if isinstance(names, str):
            names = [n for n in names.split(",") if n]
        if not names:                     # no names: keep the group as one anonymous "node"
            anonymous += 1
            names = [f"#{anonymous}"]
        share_total, share_idle = total / len(names), idle / len(names)
        for n in names:
            entry = nodes.setdefault(n, {"total": share_total, "idle": share_idle, "parts": []})
            if name not in entry["parts"]:
                entry["parts"].append(name)
    node_list = [NodeCpus(n, tuple(e["parts"]), round(e["total"]), round(e["idle"]))
                 for n, e in nodes.items()]
    return metas, node_list


def parse_scontrol_partitions(text: str, command: str = "scontrol -o show partition"
                              ) -> dict[str, PartitionMeta]:
    """``scontrol -o show partition`` (one partition a line, ``Key=Value`` words)."""
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        name = fields.get("PartitionName")
        if not name:
            raise SchedulerReplyError(command, f"line {lineno}: no PartitionName= in {line[:80]!r}")
        where = f"partition {name}"
        out[name] = PartitionMeta(
            name, _partition_state(fields.get("State")),
            parse_duration(fields.get("MaxTime", "UNLIMITED"), f"{where}: MaxTime", command),
            fields.get("Default", "NO").upper() == "YES",
            integer(fields.get("TotalCPUs"), f"{where}: TotalCPUs", command),
            integer(fields.get("TotalNodes"), f"{where}: TotalNodes", command))
    return out


#: the text query for partitions where --json is missing: partition (default marked *),
#: availability, time limit, node count, CPUs allocated/idle/other/total
SINFO_TEXT_FORMAT = "%P %a %l %D %C"


def parse_sinfo_text(text: str, command: str = f"sinfo -h -o '{SINFO_TEXT_FORMAT}'") -> list[Partition]:
    """``sinfo -h -o '%P %a %l %D %C'`` → partitions; repeated partitions (split by node
    groups on some versions) are summed."""
    rows: dict[str, Partition] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        words = line.split()
        if len(words) != 5:
            raise SchedulerReplyError(command, f"line {lineno}: expected 5 fields, got {line!r}")
        pname, avail, limit, count, cpus = words
        default = pname.endswith("*")
        pname = pname.rstrip("*")
        try:
            _a, i, _o, t = (int(x) for x in cpus.split("/"))
            n = int(count)
        except ValueError:
            raise SchedulerReplyError(command, f"line {lineno}: CPUs A/I/O/T or node count not numbers: {line!r}") from None
        part = Partition(pname, _partition_state(avail),
                         t, i, n, parse_duration(limit, f"line {lineno}: time limit", command), default)
        if pname in rows:
            old = rows[pname]
            part = Partition(pname, old.state, old.total_cpus + t, old.idle_cpus + i,
                             old.nodes + n, old.max_time, old.default or default)
        rows[pname] = part
    return list(rows.values())


def combine_partitions(metas: Mapping[str, PartitionMeta], nodes: Sequence[NodeCpus]) -> list[Partition]:
    """Partition configuration + CPUs per node → :class:`Partition` records.

    Partitions come from ``metas`` (nodes of partitions not listed there — hidden ones — are
    ignored); without any configuration the partitions are those the nodes name.
    """
    names = list(metas) or list(dict.fromkeys(p for n in nodes for p in n.partitions))
    out = []
    for name in names:
        mine = [n for n in nodes if name in n.partitions]
        meta = metas.get(name)
        total = sum(n.total for n in mine)
        if not mine and meta and meta.total_cpus is not None:
            total = meta.total_cpus
        out.append(Partition(
            name=name, state=meta.state if meta else "UNKNOWN", total_cpus=total,
            idle_cpus=sum(n.idle for n in mine),
            nodes=len(mine) if mine else (meta.nodes or 0 if meta else 0),
            max_time=meta.max_time if meta else None, default=meta.default if meta else False))
    return out


def make_availability(scheduler: str, version: str | None, partitions: Sequence[Partition],
                      jobs: Iterable[JobInfo], queried_at: float, *, target: str | None = None,
                      nodes: Sequence[NodeCpus] | None = None) -> Availability:
    """One :class:`Availability` for the partition resel submits to.

    ``target`` is the configured partition; without one, the site's default partition (where
    sbatch sends a job without ``-p``). Without a default either, the whole cluster: distinct
    nodes when ``nodes`` are known, else the sum over partitions (may count shared nodes twice).
    ``target`` must name one of ``partitions`` (the caller checks and explains).
    """
    parts = list(partitions)
    scope = target or next((p.name for p in parts if p.default), None)
    if scope is not None:
        chosen = [p for p in parts if p.name == scope]
        free, total = sum(p.idle_cpus for p in chosen), sum(p.total_cpus for p in chosen)
    elif nodes:
        free, total = sum(n.idle for n in nodes), sum(n.total for n in nodes)
    else:
        free, total = sum(p.idle_cpus for p in parts), sum(p.total_cpus for p in parts)
    running = pending = 0
    for job in jobs:
        if scope is not None and job.partition and scope not in job.partition.split(","):
            continue
        if job.state.phase == "running":
            running += 1
        elif job.state.phase == "pending":
            pending += 1
    if target:
        parts = [p for p in parts if p.name == target]
    return Availability(scheduler, version, parts, int(free), int(total), running, pending, queried_at)


# ---------------------------------------------------------------------------- jobs


def job_from_json(job: Mapping[str, Any], command: str) -> JobInfo:
    """One job of ``squeue --json`` / REST ``/jobs`` (both generations) → :class:`JobInfo`."""
    if not isinstance(job, dict) or job.get("job_id") is None:
        raise SchedulerReplyError(command, f"a job record without job_id: {str(job)[:80]!r}")
    jid = str(integer(job["job_id"], "job_id", command))
    where = f"job {jid}"
    if "job_state" not in job:
        raise SchedulerReplyError(command, f"{where}: no job_state")
    native = normalise_state(job["job_state"], command)
    state = slurm_state(native)
    start = timestamp(job.get("start_time"), f"{where}: start_time", command)
    end = timestamp(job.get("end_time"), f"{where}: end_time", command)
    partition = _str_or_none(job.get("partition"))
    return JobInfo(
        job_id=jid, name=str(job.get("name") or ""), state=state, native=native,
        submit=timestamp(job.get("submit_time"), f"{where}: submit_time", command),
        start=start, end=end,
        time_limit=minutes(job.get("time_limit"), f"{where}: time_limit", command),
        cpus=integer(job.get("cpus"), f"{where}: cpus", command),
        **reason_fields(job.get("state_reason"), state),
        user=_str_or_none(job.get("user_name")),
        partition=partition,
        exit_code=_exit_code(job.get("exit_code")) if native not in ("PENDING", "RUNNING") else None,
        priority=_priority(job.get("priority"), f"{where}: priority", command))


def _priority(value: Any, where: str, command: str) -> float | None:
    """A job's priority, flat or a number object; "N/A" or empty (text replies) is unknown."""
    if isinstance(value, str) and value.strip().upper() in ("", "N/A"):
        return None
    n = number(value, where, command)
    return None if n is None else float(n)


def _exit_code(value: Any) -> str | None:
    """Exit codes as ``"rc:signal"``, whether a plain int (flat) or a data_parser object."""
    if value is None:
        return None
    if isinstance(value, dict):
        rc = integer(value.get("return_code"), "exit_code") if "return_code" in value else None
        sig = integer(_dig(value, "signal/id"), "exit_code.signal") if "signal" in value else None
        return None if rc is None else f"{rc}:{sig or 0}"
    if isinstance(value, int):                       # a raw wait(2) status
        return f"{(value >> 8) & 0xff}:{value & 0x7f}"
    return _str_or_none(value)


def parse_jobs_json(doc: Mapping[str, Any], command: str = "squeue --json") -> dict[str, JobInfo]:
    """``squeue --json`` / REST ``/jobs`` / ``/job/{id}`` → jobs by id."""
    return {j.job_id: j for j in (job_from_json(x, command) for x in _list(doc, "jobs", command))}


def parse_sacct_json(doc: Mapping[str, Any], command: str = "sacct --json") -> dict[str, JobInfo]:
    """``sacct --json`` (slurmdbd's job records, both generations) → jobs by id.

    Here times sit under ``time`` (``submission``, ``start``, ``end``, ``limit`` minutes),
    the state under ``state.current`` (a string, or a list in data_parser) and CPUs under
    ``required.CPUs``.
    """
    out = {}
    for i, job in enumerate(_list(doc, "jobs", command)):
        if not isinstance(job, dict) or job.get("job_id") is None:
            raise SchedulerReplyError(command, f"jobs[{i}]: no job_id")
        jid = str(integer(job["job_id"], "job_id", command))
        where = f"job {jid}"
        current = _dig(job, "state/current")
        if current is None:
            raise SchedulerReplyError(command, f"{where}: no state.current")
        t = job.get("time") or {}
        if not isinstance(t, dict):
            raise SchedulerReplyError(command, f"{where}: time is {type(t).__name__}, expected an object")
        alloc_cpus = None
        allocated = _dig(job, "tres/allocated") or []
        for tres in allocated if isinstance(allocated, list) else []:
            if isinstance(tres, dict) and tres.get("type") == "cpu":
                alloc_cpus = integer(tres.get("count"), f"{where}: tres cpu", command)
        user = job.get("user")
        states = job_state_fields(current, command)
        out[jid] = JobInfo(
            job_id=jid, name=str(job.get("name") or ""), **states,
            submit=timestamp(t.get("submission"), f"{where}: time.submission", command),
            start=timestamp(t.get("start"), f"{where}: time.start", command),
            end=timestamp(t.get("end"), f"{where}: time.end", command),
            time_limit=minutes(t.get("limit"), f"{where}: time.limit", command),
            cpus=alloc_cpus if alloc_cpus is not None else integer(
                _dig(job, "required/CPUs"), f"{where}: required.CPUs", command),
            **reason_fields(_dig(job, "state/reason"), states["state"]),
            user=_str_or_none(user if isinstance(user, str) else _dig(job, "association/user")),
            partition=_str_or_none(job.get("partition")),
            exit_code=_exit_code(job.get("exit_code")),
            priority=_priority(job.get("priority"), f"{where}: priority", command))
    return out


#: column names (as ``squeue --Format`` / ``sacct --format`` spell them) → JobInfo fields;
#: squeue and sacct name the same thing differently, both are accepted
_COLUMNS = {
    "jobid": "job_id", "jobidraw": "job_id", "name": "name", "jobname": "name", "state": "state",
    "statecompact": "state", "cpus": "cpus", "numcpus": "cpus", "alloccpus": "cpus",
    "submittime": "submit", "submit": "submit", "starttime": "start", "start": "start",
    "endtime": "end", "end": "end", "timelimit": "time_limit", "timelimitraw": "time_limit_raw",
    "reason": "reason", "username": "user", "user": "user", "partition": "partition",
    "exitcode": "exit_code", "priority": "priority", "prioritylong": "priority",
}


def parse_job_table(text: str, fields: Sequence[str], tz: tzinfo | None = None,
                    command: str = "squeue") -> dict[str, JobInfo]:
    """'|'-separated job lines (squeue ``-o``/``--Format``, ``sacct -P``) → jobs by id.

    ``fields`` names the columns in order (unknown names and ``""`` are skipped, so any column
    list parses). A job name holding '|' makes a line longer than ``fields``; the surplus is
    given back to the name. Steps (``123.batch``) are skipped. Times are epochs (resel asks for
    ``SLURM_TIME_FORMAT=%s``) or ISO in the site's zone ``tz``.
    """
    keys = [_COLUMNS.get(f.strip().lower()) for f in fields]
    if "job_id" not in keys or "state" not in keys:
        raise ValueError("a job table needs JobID and State columns")
    name_at = keys.index("name") if "name" in keys else None
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split("|")
        extra = len(cells) - len(keys)
        if extra > 0 and name_at is not None:
            cells[name_at:name_at + extra + 1] = ["|".join(cells[name_at:name_at + extra + 1])]
        if len(cells) != len(keys):
            raise SchedulerReplyError(command, f"line {lineno}: expected {len(keys)} '|'-separated "
                                               f"fields, got {len(cells)}: {line!r}")
        row = {k: c for k, c in zip(keys, cells) if k}
        jid = row["job_id"].strip()
        if "." in jid:
            continue                          # a step (batch, extern, 0…) of a job listed above
        where = f"line {lineno} (job {jid})"
        if "time_limit_raw" in row:
            raw = row["time_limit_raw"].strip()
            limit = minutes(raw if raw.isdigit() else None, f"{where}: TimelimitRaw", command)
        else:
            limit = parse_duration(row.get("time_limit", ""), f"{where}: time limit", command)
        cpus = row.get("cpus", "").strip()
        states = job_state_fields(row["state"], command)
        out[jid] = JobInfo(
            job_id=jid, name=row.get("name", ""), **states,
            submit=parse_time(row.get("submit", ""), tz, f"{where}: submit", command),
            start=parse_time(row.get("start", ""), tz, f"{where}: start", command),
            end=parse_time(row.get("end", ""), tz, f"{where}: end", command),
            time_limit=limit,
            cpus=integer(cpus, f"{where}: cpus", command) if cpus else None,
            **reason_fields(row.get("reason"), states["state"]), user=_str_or_none(row.get("user")),
            partition=_str_or_none(row.get("partition")), exit_code=_str_or_none(row.get("exit_code")),
            priority=_priority(row.get("priority"), f"{where}: priority", command))
    return out


#: the text query for jobs where --json is missing (``squeue -h -t all -o``): id, name, state,
#: CPUs, submit, start, end, time limit, reason, user, partition
SQUEUE_TEXT_FORMAT = "%i|%j|%T|%C|%V|%S|%e|%l|%r|%u|%P"
SQUEUE_TEXT_FIELDS = ("JobID", "Name", "State", "CPUs", "SubmitTime", "StartTime", "EndTime",
                      "TimeLimit", "Reason", "UserName", "Partition")


def parse_squeue_text(text: str, tz: tzinfo | None = None,
                      command: str = f"squeue -h -o '{SQUEUE_TEXT_FORMAT}'") -> dict[str, JobInfo]:
    """``squeue -h -t all -o '%i|%j|%T|%C|%V|%S|%e|%l|%r|%u|%P'`` → jobs by id."""
    return parse_job_table(text, SQUEUE_TEXT_FIELDS, tz, command)


#: the text query for a queue snapshot: the jobs format without the name, plus the priority as
#: an integer (%Q). Every user's jobs are listed, and a name is its owner's to choose, newlines
#: included: ``x<newline>…`` broke the reply's lines (the snapshot failed, or read a job line of
#: their making); the snapshot needs no names.
QUEUE_TEXT_FORMAT = SQUEUE_TEXT_FORMAT.replace("|%j", "") + "|%Q"
QUEUE_TEXT_FIELDS = tuple(f for f in SQUEUE_TEXT_FIELDS if f != "Name") + ("PriorityLong",)


def parse_queue_text(text: str, tz: tzinfo | None = None,
                     command: str = f"squeue -h -o '{QUEUE_TEXT_FORMAT}'") -> dict[str, JobInfo]:
    """``squeue -h -o '<jobs format without %j>|%Q'`` → jobs by id (no names), with their priorities."""
    return parse_job_table(text, QUEUE_TEXT_FIELDS, tz, command)


_SCHEDULER_TYPE = re.compile(r"^\s*SchedulerType\s*=\s*(\S+)", re.MULTILINE)


def parse_scheduler_type(text: str, command: str = "scontrol show config") -> str:
    """The ``SchedulerType`` line of ``scontrol show config`` (e.g. ``sched/backfill``)."""
    m = _SCHEDULER_TYPE.search(text)
    if not m:
        raise SchedulerReplyError(command, f"no SchedulerType line in {text.strip()[:120]!r}")
    return m.group(1)


def parse_squeue_start(text: str, tz: tzinfo | None = None,
                       command: str = "squeue --start -h -o '%i|%S'") -> dict[str, float | None]:
    """``squeue --start -h -o '%i|%S'`` → expected start by job id (None = not estimated)."""
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        jid, sep, start = line.partition("|")
        if not sep:
            raise SchedulerReplyError(command, f"line {lineno}: expected 'id|start', got {line!r}")
        out[jid.strip()] = parse_time(start, tz, f"line {lineno}: start", command)
    return out


#: accounting text fields resel asks for (``sacct -P -n -X -o ...``)
SACCT_FIELDS = ("JobID", "JobName", "State", "Submit", "Start", "End", "Elapsed", "AllocCPUS",
                "ExitCode", "Timelimit", "User", "Partition", "Reason")

#: the text fields of every user's history (``sacct -a``): no name. A name is its owner's to
#: choose, newlines included, and ``sacct -P`` prints it as it is: another user's job named
#: ``x<newline>…`` broke the reply's lines (the history failed, or read a job line of their
#: making); the history needs no names (as the queue snapshot, :data:`QUEUE_TEXT_FORMAT`).
SACCT_HISTORY_FIELDS = tuple(f for f in SACCT_FIELDS if f != "JobName")


def parse_sacct_text(text: str, fields: Sequence[str] = SACCT_FIELDS, tz: tzinfo | None = None,
                     command: str = "sacct -P -n") -> dict[str, JobInfo]:
    """``sacct -P -n -o <fields>`` → jobs by id (see :func:`parse_job_table`)."""
    return parse_job_table(text, fields, tz, command)


_NODE_COLUMNS = {"nodelist": "name", "%n": "name", "nodehost": "host", "partition": "partition",
                 "%r": "partition", "%p": "partition", "cpusstate": "cpus", "%c": "cpus",
                 "statelong": "state", "%t": "state", "statecompact": "state"}


def parse_sinfo_nodes_text(text: str, fields: Sequence[str],
                           command: str = "sinfo -N -h") -> list[NodeCpus]:
    """Per-node sinfo lines (``sinfo -N -h -o '...|%N|...|%R|...|%C'``, '|'-separated) → CPUs
    per node. ``fields`` names the columns (NodeList, Partition, CPUsState needed; StateLong
    used). A node listed once per partition is merged into one record."""
    keys = [_NODE_COLUMNS.get(f.strip().lower()) for f in fields]
    if not {"name", "partition", "cpus"} <= set(keys):
        raise ValueError("per-node sinfo columns need NodeList, Partition and CPUsState")
    nodes: dict[str, NodeCpus] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(keys):
            raise SchedulerReplyError(command, f"line {lineno}: expected {len(keys)} fields, got {len(cells)}")
        row = {k: c.strip() for k, c in zip(keys, cells) if k}
        node = _node_from_cstate(row["name"], row["partition"], row["cpus"], row.get("state", ""),
                                 f"line {lineno}", command)
        old = nodes.get(node.name)
        nodes[node.name] = node if old is None else NodeCpus(
            old.name, tuple(dict.fromkeys(old.partitions + node.partitions)), old.total, old.idle)
    return list(nodes.values())


def _node_from_cstate(name: str, partition: str, cstate: str, state: str, where: str,
                      command: str) -> NodeCpus:
    try:
        _a, i, _o, t = (int(x) for x in cstate.split("/"))
    except ValueError:
        raise SchedulerReplyError(command, f"{where}: CPUs A/I/O/T expected, got {cstate!r}") from None
    words = state.upper().rstrip("*~#!%$@^-").split("+")
    if any(w in _UNUSABLE_NODE_FLAGS for w in words):
        i = 0                          # sinfo already counts these as "other"; be sure
    return NodeCpus(name, (partition.rstrip("*"),), t, i)


def parse_json_lines(text: str, command: str, strict: bool = True
                     ) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """One JSON object a line, as monitoring exporters make sinfo/squeue print them with a
    format string (``-o '{"n": "%n", "cstate": "%C", …}'``): the objects and the bad lines.

    A format string cannot escape what Slurm substitutes, so a line may not parse (an
    unset number prints as ``xx``): with ``strict`` that raises, naming the line; otherwise
    such lines are returned apart, to be counted. ``#`` lines are comments.
    """
    good, bad = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            obj: Any = json.loads(line)
            why = "" if isinstance(obj, dict) else f"a {type(obj).__name__}"
        except ValueError as e:
            why = str(e)
        if why:
            if strict:
                raise SchedulerReplyError(command, f"line {lineno}: not a JSON object ({why}): {line[:80]!r}")
            bad.append((lineno, line))
            continue
        good.append(obj)
    return good, bad


def nodes_from_json_lines(rows: Iterable[Mapping[str, Any]], command: str = "sinfo -N") -> list[NodeCpus]:
    """Exporter-style sinfo node lines (``n`` node, ``p`` partition, ``s`` state, ``cstate``
    A/I/O/T) → CPUs per node, merged over partitions."""
    nodes: dict[str, NodeCpus] = {}
    for k, row in enumerate(rows):
        if not all(key in row for key in ("n", "p", "cstate")):
            raise SchedulerReplyError(command, f"row {k}: needs n, p and cstate: {dict(row)!r}")
        node = _node_from_cstate(str(row["n"]), str(row["p"]), str(row["cstate"]), str(row.get("s", "")),
                                 f"row {k}", command)
        old = nodes.get(node.name)
        nodes[node.name] = node if old is None else NodeCpus(
            old.name, tuple(dict.fromkeys(old.partitions + node.partitions)), old.total, old.idle)
    return list(nodes.values())


def jobs_from_json_lines(rows: Iterable[Mapping[str, Any]], tz: tzinfo | None = None,
                         command: str = "squeue") -> dict[str, JobInfo]:
    """Exporter-style squeue lines (``id``, ``state``, ``p``, ``cpu``, ``end_time``, ``r``
    reason in parentheses) → jobs by id; what such lines lack (name, submit) stays empty."""
    out = {}
    for k, row in enumerate(rows):
        if "id" not in row or "state" not in row:
            raise SchedulerReplyError(command, f"row {k}: needs id and state: {dict(row)!r}")
        jid = str(integer(row["id"], f"row {k}: id", command))
        reason = reason_text(row.get("r"))
        native = normalise_state(row["state"], command)
        state = slurm_state(native)
        if reason and state is JobState.PENDING and reason.startswith("(") and reason.endswith(")"):
            reason = reason[1:-1]              # %R wraps a pending job's reason in parentheses
        out[jid] = JobInfo(job_id=jid, name="", state=state, native=native, submit=None, start=None,
                           end=parse_time(str(row.get("end_time", "")), tz, f"job {jid}: end_time", command),
                           time_limit=None, cpus=integer(row.get("cpu"), f"job {jid}: cpu", command),
                           reason=reason if state is JobState.PENDING else None, user=None,
                           pending=pending_class(reason) if state.phase == "pending" else None,
                           partition=_str_or_none(row.get("p")))
    return out


_ACCOUNTING_OFF = re.compile(r"accounting storage is disabled|AccountingStorageType.*none|"
                             r"accounting_storage/none", re.IGNORECASE)


def accounting_disabled(stderr: str) -> bool:
    """Whether sacct's complaint means the site keeps no accounting (nothing to ask, ever)."""
    return bool(_ACCOUNTING_OFF.search(stderr))


# ---------------------------------------------------------------------------- sbatch, scancel

_PARSABLE = re.compile(r"^\s*(\d+)(?:_\d+)?(?:;(\S+))?\s*$")
_SUBMITTED = re.compile(r"Submitted batch job (\d+)")


def parse_sbatch(stdout: str, command: str = "sbatch --parsable") -> str:
    """The job id sbatch printed: ``--parsable`` (``123`` or ``123;cluster``) or the
    human ``Submitted batch job 123``."""
    for line in reversed([x for x in stdout.splitlines() if x.strip()]):
        m = _PARSABLE.match(line) or _SUBMITTED.search(line)
        if m:
            return m.group(1)
    raise SchedulerReplyError(command, f"no job id in {stdout.strip()[:120]!r}")


#: sbatch's refusals, recognised by their words, and what the user can do about each
_SBATCH_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"QOSMaxSubmitJob|MaxSubmitJobs|job submit limit|AssocMaxSubmitJob", re.IGNORECASE),
     ("the site caps how many jobs you may have queued (QOS/association limit); wait for some to "
      "finish or cancel some, lower this site's max_pilots, or ask the site for a QOS with a higher "
      "limit (`sacctmgr show qos`, `sacctmgr show assoc user=$USER`)")),
    (re.compile(r"QOSMax\w*(Wall|Time)|time limit|TimeLimit", re.IGNORECASE),
     ("the requested walltime exceeds what the partition or QOS allows; lower the pilot walltime "
      "(see `sinfo -o '%P %l'`)")),
    (re.compile(r"QOSMax\w*(CPU|Node|TRES)|size limit|More processors requested", re.IGNORECASE),
     "the job asks for more cores than the partition, QOS or account allows; lower the pilot's cores"),
    (re.compile(r"Memory specification can not be satisfied", re.IGNORECASE),
     "no node in the partition has that much memory; lower or remove --mem in the site's submit_args"),
    (re.compile(r"Requested node configuration is not available", re.IGNORECASE),
     "no node in the partition has that many cores (pilots run on one node); lower the pilot's cores"),
    (re.compile(r"Invalid account|account.*not.*(valid|permitted)", re.IGNORECASE),
     "set the site's `account` to one you belong to (`sacctmgr show assoc user=$USER`)"),
    (re.compile(r"partition not available|partition.*(inactive|drain|down)", re.IGNORECASE),
     ("the partition is not taking jobs now (down, drained or inactive); wait until the site "
      "brings it back (`sinfo`) or choose another partition")),
    (re.compile(r"partition configuration not available", re.IGNORECASE),
     ("the job does not fit the partition's limits (walltime above its MaxTime, or more cores "
      "than its nodes have); compare with `sinfo -o '%P %l %c'`")),
    (re.compile(r"Invalid partition|partition.*not.*(valid|available|exist)", re.IGNORECASE),
     "set the site's `partition` to one listed by `sinfo`"),
    (re.compile(r"Invalid qos|qos.*not", re.IGNORECASE),
     "set the site's `qos` to one your account may use (`sacctmgr show assoc user=$USER format=qos`)"),
    (re.compile(r"accounting/QOS policy|AssocGrp|QOSGrp", re.IGNORECASE),
     ("the site's accounting policy refused the job (an account or QOS limit); check your allocation "
      "with the site (`sshare`, `sacctmgr show assoc user=$USER`)")),
    (re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused", re.IGNORECASE),
     "the site's scheduler did not answer; retry later"),
    (re.compile(r"invalid working directory|chdir|No such file or directory", re.IGNORECASE),
     "the pilot's work directory does not exist or is not writable on the site"),
)


def sbatch_error(stderr: str, command: str = "sbatch", returncode: int | None = None,
                 note: str | None = None) -> SchedulerError:
    """sbatch's refusal → :class:`SchedulerError`: what the site said and what to do.

    sbatch prints a reason code line (``sbatch: error: QOSMaxSubmitJobPerUserLimit``) and a
    sentence (``Batch job submission failed: …``); both are kept, the sentence first.
    """
    lines = [re.sub(r"^\s*sbatch:\s*(error:\s*)?", "", x).strip() for x in stderr.splitlines()]
    lines = [x for x in lines if x]
    failed = [x for x in lines if "failed" in x.lower()]
    said = failed[-1] if failed else (lines[-1] if lines else f"exit status {returncode}")
    said = re.sub(r"^Batch job submission failed:\s*", "", said)
    codes = [x for x in lines if x not in failed and re.fullmatch(r"[A-Za-z_]+", x)]
    details = [x for x in lines if x not in failed and x not in codes]   # e.g. the memory line
    reply = said + (f": {'; '.join(details)}" if details else "") + (f" [{', '.join(codes)}]" if codes else "")
    hint = next((h for p, h in _SBATCH_HINTS if p.search(stderr)),
                "see the site's message above and its documentation for sbatch limits")
    label = "sbatch" if command.startswith("sbatch") else command
    if note:
        reply += f" ({note})"
    return SchedulerError(f"{label} refused the job: {reply}", command=command,
                          reply=stderr.strip(), hint=hint)


_TEST_ONLY = re.compile(
    r"Job (\d+) to start at (\S+)(?: on cluster (\S+))?(?: a)? using (\d+) processors on "
    r"(?:nodes )?(\S+)(?: in partition (\S+))?")


@dataclass(frozen=True)
class TestOnly:
    """What ``sbatch --test-only`` predicted: when, where and how many processors."""

    __test__ = False          # not a pytest test class, despite its name

    start: float | None
    processors: int
    nodes: str
    partition: str | None


def parse_test_only(stderr: str, tz: tzinfo | None = None,
                    command: str = "sbatch --test-only") -> TestOnly:
    """sbatch's will-run line (on stderr):
    ``sbatch: Job 5 to start at 2026-11-25T10:00:00 using 2 processors on nodes n1 in partition debug``.
    The time is an epoch with ``SLURM_TIME_FORMAT=%s``, else the site's local time (``tz``).
    """
    m = _TEST_ONLY.search(stderr)
    if not m:
        raise SchedulerReplyError(command, f"no 'Job N to start at' line in {stderr.strip()[:160]!r}")
    return TestOnly(parse_time(m.group(2), tz, "start", command), int(m.group(4)), m.group(5), m.group(6))


_SCANCEL_GONE = re.compile(r"Invalid job id|already completing or completed|Job has already finished", re.IGNORECASE)


def scancel_problems(stderr: str) -> list[str]:
    """scancel's complaints that matter: a job that is already gone is what cancel wanted."""
    out = []
    for line in stderr.splitlines():
        text = line.strip()
        if not text or _SCANCEL_GONE.search(text):
            continue
        if "error" in text.lower():
            out.append(re.sub(r"^scancel:\s*(error:\s*)?", "", text))
    return out


def parse_scancel(stdout: str) -> list[str]:
    """Job ids ``scancel -v`` reports terminating (``scancel: Terminating job 10``)."""
    return re.findall(r"Terminating job (\d+)", stdout)


_VERSION = re.compile(r"slurm(?:-wlm)?\s+(\d+\.\d+[\w.\-]*)", re.IGNORECASE)


def parse_version(stdout: str, command: str = "sinfo --version") -> str:
    """``slurm 22.05.8`` → ``"22.05.8"``."""
    m = _VERSION.search(stdout)
    if not m:
        raise SchedulerReplyError(command, f"no Slurm version in {stdout.strip()[:80]!r}")
    return m.group(1)


# ---------------------------------------------------------------------------- login node CPU


def parse_lscpu_json(text: str, command: str = "lscpu -J") -> dict[str, Any]:
    """``lscpu -J`` → model, clocks and topology (what LIM needs to know about a site's CPUs).

    util-linux ≥ 2.37 nests fields under ``children``; both layouts are flattened. The base
    clock is read from the model name (``… @ 2.10GHz``), the only place lscpu shows it.
    """
    doc = load_json(text, command)
    flat: dict[str, str] = {}

    def walk(items: Any) -> None:
        for item in items or []:
            if isinstance(item, dict):
                if "field" in item:
                    flat[str(item["field"]).strip().rstrip(":")] = str(item.get("data") or "").strip()
                walk(item.get("children"))

    walk(doc.get("lscpu"))
    if not flat:
        raise SchedulerReplyError(command, "no 'lscpu' fields")
    return _cpu_summary(flat.get("Model name"), flat, command)


def parse_cpuinfo(text: str, command: str = "cat /proc/cpuinfo") -> dict[str, Any]:
    """``/proc/cpuinfo`` → the same summary as :func:`parse_lscpu_json` (max clock unknown)."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    if not blocks:
        raise SchedulerReplyError(command, "empty cpuinfo")
    procs = []
    for b in blocks:
        d = {}
        for line in b.splitlines():
            k, sep, v = line.partition(":")
            if sep:
                d[k.strip()] = v.strip()
        procs.append(d)
    first = procs[0]
    sockets = len({p.get("physical id") for p in procs if "physical id" in p}) or None
    cores = integer(first.get("cpu cores"), "cpu cores", command) if first.get("cpu cores") else None
    mhz = [float(p["cpu MHz"]) for p in procs if p.get("cpu MHz", "").replace(".", "", 1).isdigit()]
    flat = {"CPU(s)": str(len(procs)), "Socket(s)": str(sockets) if sockets else "",
            "Core(s) per socket": str(cores) if cores else "",
            "CPU MHz": str(max(mhz)) if mhz else ""}
    if sockets and cores:
        flat["Thread(s) per core"] = str(max(1, len(procs) // (sockets * cores)))
    return _cpu_summary(first.get("model name"), flat, command)


def _cpu_summary(model: str | None, flat: Mapping[str, str], command: str) -> dict[str, Any]:
    def num(key: str) -> float | None:
        value = (flat.get(key) or "").strip()
        try:
            return float(value) if value else None
        except ValueError:
            return None

    base = None
    if model:
        m = re.search(r"@\s*([\d.]+)\s*GHz", model)
        base = float(m.group(1)) * 1000 if m else None
    ints = {k: (int(v) if v is not None else None) for k, v in {
        "cpus": num("CPU(s)"), "sockets": num("Socket(s)"),
        "cores_per_socket": num("Core(s) per socket"), "threads_per_core": num("Thread(s) per core"),
    }.items()}
    return {"model": model, "base_mhz": base, "max_mhz": num("CPU max MHz"),
            "min_mhz": num("CPU min MHz"), "current_mhz": num("CPU MHz"), **ints}
