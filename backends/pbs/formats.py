"""PBS replies (PBS Pro/OpenPBS and Torque), turned into resel's types: pure parsers, no I/O.

The command runner (:mod:`.cli`) only builds commands and picks a parser; everything PBS
prints is read here, so the coordinator sees the same :class:`~resel.backends.jobs.JobInfo`,
:class:`~resel.backends.jobs.Partition` and :class:`~resel.backends.jobs.Availability` as for Slurm.

Two dialects:

* **PBS Pro / OpenPBS** speaks JSON (``qstat -f -F json``, ``qstat -Q -f -F json``,
  ``pbsnodes -a -F json``, ``qstat -B -f -F json``). Times in it are ``ctime(3)`` strings in the
  server's local time (``"Thu Jun 19 10:36:47 2025"``), so the caller passes the site's zone.
* **Torque** prints text: ``Job Id: 123.host`` blocks of ``    key = value`` lines, where a
  long value continues on lines indented by a tab; ``pbsnodes -a`` prints one block per node
  (``state = free``, ``np = 8``, ``jobs = 0/12.host,1/12.host``); ``qstat -q`` a table of queue
  limits. Debian's ``slurm-wlm-torque`` wrappers (Torque's commands over Slurm) print the same
  shapes with tabs instead of spaces, no ``jobs =`` line, ``mixed`` as a node state, and reuse
  ``mtime``/``ctime`` for the job's start and end (expected start and end while pending).

Job states are translated into resel's :class:`~resel.backends.jobs.JobState` through PBS's own table
(:data:`~resel.backends.jobs.PBS_STATES`, :func:`job_state`); the letter itself is kept as ``native``.

Malformed replies raise :class:`SchedulerReplyError` naming the command — never a
``KeyError`` from inside a parser.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from resel.backends.jobs import (Availability, JobInfo, JobState, Partition, Pending, QueueSnapshot, SnapJob,
                                 pbs_state)

from resel.errors import SchedulerError, SchedulerReplyError

__all__ = [
    "Availability", "JobInfo", "Partition", "QueueInfo", "assumed_policy", "detect_dialect",
    "job_records_json", "job_records_text", "job_state", "load_json", "make_availability",
    "nodes_from_json", "nodes_from_text", "parse_jobs_json", "parse_jobs_text", "parse_qstat_q",
    "parse_qsub", "parse_queues_json", "parse_queues_text", "parse_server_default_queue",
    "parse_walltime", "qdel_problems", "qsub_error", "snapshot_of",
]


# ---------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class QueueInfo:
    """One PBS queue's configuration and, where the server says, its job counts.

    ``max_time`` is ``resources_max.walltime`` in seconds (None = no limit or not said);
    ``running``/``pending`` come from ``state_count`` (None when the server does not print it).
    """

    name: str
    state: str
    max_time: float | None
    running: int | None = None
    pending: int | None = None
    queue_type: str | None = None


# ---------------------------------------------------------------------------- scalars


def parse_walltime(text: Any, where: str = "walltime", command: str = "qstat") -> float | None:
    """A PBS duration → seconds: ``[[[DD:]HH:]MM:]SS[.fff]`` or a bare number of seconds.

    PBS (unlike Slurm) reads a bare number as *seconds*. ``--`` and empty mean no limit.
    """
    if text is None:
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    t = str(text).strip()
    if t in ("", "--", "-", "UNLIMITED", "Infinite", "unlimited"):
        return None
    parts = t.split(":")
    if len(parts) > 4 or not all(re.fullmatch(r"\d+(\.\d+)?", p) for p in parts):
        raise SchedulerReplyError(command, f"{where}: not a PBS duration: {text!r}")
    seconds = 0.0
    for unit, part in zip((1, 60, 3600, 86400), reversed(parts)):
        seconds += float(part) * unit
    return seconds


def format_walltime(seconds: float) -> str:
    """Seconds → ``HH:MM:SS`` for ``-l walltime=``, rounded up to whole seconds."""
    if not seconds or seconds <= 0 or math.isinf(seconds) or math.isnan(seconds):
        raise SchedulerError(f"walltime must be a positive number of seconds, not {seconds!r}")
    total = max(1, math.ceil(seconds - 1e-9))
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


_CTIME = "%a %b %d %H:%M:%S %Y"


def parse_time(value: Any, tz: tzinfo | None, where: str = "time", command: str = "qstat") -> float | None:
    """A PBS time → epoch seconds: an epoch number, or ``ctime`` text in the site's zone ``tz``
    (None = this machine's). Empty, 0 and ``--`` mean not known."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    t = " ".join(str(value).split())
    if t in ("", "0", "--", "N/A"):
        return None
    if t.isdigit():
        return float(t)
    try:
        moment = datetime.strptime(t, _CTIME)
    except ValueError:
        raise SchedulerReplyError(command, f"{where}: not a time: {value!r}") from None
    if tz is None:
        return moment.astimezone().timestamp()
    return moment.replace(tzinfo=tz).timestamp()


def has_text_time(text: str) -> bool:
    """Whether a reply holds a ctime-style time (then the caller needs the site's zone)."""
    return bool(re.search(r"\b\d\d:\d\d:\d\d \d{4}\b", text))


def _int(value: Any, where: str, command: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise SchedulerReplyError(command, f"{where}: expected a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    raise SchedulerReplyError(command, f"{where}: expected a whole number, got {value!r}")


def _str(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


# ---------------------------------------------------------------------------- dialect

_PRO_VERSION = re.compile(r"pbs_version\s*=\s*(\S+)")
_TORQUE_VERSION = re.compile(r"^\s*version:\s*(\S+)", re.IGNORECASE | re.MULTILINE)
_WRAPPER_REFUSAL = re.compile(r"Unknown option: version", re.IGNORECASE)


def detect_dialect(stdout: str, stderr: str, command: str = "qstat --version") -> tuple[str, str | None]:
    """``qstat --version`` → (flavour, version).

    PBS Pro/OpenPBS prints ``pbs_version = 23.06.06`` (flavour ``"pro"``), Torque
    ``Version: 6.1.2`` (``"torque"``); Debian's Slurm wrappers know no ``--version`` and answer
    ``Unknown option: version`` with a usage text (``"slurm-torque"``: Torque's dialect, the
    version is Slurm's, asked separately).
    """
    said = f"{stdout}\n{stderr}"
    m = _PRO_VERSION.search(said)
    if m:
        return "pro", m.group(1)
    m = _TORQUE_VERSION.search(said)
    if m:
        return "torque", m.group(1)
    if _WRAPPER_REFUSAL.search(said):
        return "slurm-torque", None
    raise SchedulerReplyError(command, f"neither a PBS Pro nor a Torque version in {said.strip()[:120]!r}")


# ---------------------------------------------------------------------------- job states

#: PBS job states that wait, with the reason resel reports for them
_WAIT_REASONS = {"Q": None, "H": "Held", "W": "Waiting", "T": "Transit"}


def job_state(code: str, exit_status: int | None = None, dialect: str = "pro",
              command: str = "qstat") -> tuple[JobState, str | None]:
    """A PBS state letter (and the exit status of a finished job) → (JobState, reason).

    The translation is :data:`~resel.backends.jobs.PBS_STATES`
    (:func:`~resel.backends.jobs.pbs_state`, which cites the PBS documentation); this adds the
    reason resel shows: ``Held``/``Waiting``/``Transit`` for a waiting job, ``Moved`` for M,
    the exit status or the signal (PBS reports 256 + the signal) of a finished job,
    ``PBS state U`` for U. A letter not in the table is
    :attr:`~resel.backends.jobs.JobState.UNKNOWN` with reason ``unknown PBS state``: the pilot is polled on
    instead of being taken as ended (one odd job never makes the whole reply unreadable either).
    """
    c = str(code or "").strip().upper()[:1]
    state = pbs_state(c, exit_status, dialect)
    if state is JobState.UNKNOWN:
        return state, f"unknown PBS state {code!r}"
    if c in _WAIT_REASONS:
        return state, _WAIT_REASONS[c]
    if c == "U":
        return state, "PBS state U"
    if c == "M":
        return state, "Moved"
    if state is JobState.TIMEOUT or state is JobState.FAILED:
        return state, f"exit status {exit_status}"
    if state is JobState.CANCELLED:
        return state, f"killed by signal {exit_status - 256}"
    return state, None


_UNKNOWN_ID = re.compile(r"Unknown Job Id|Job has finished|unknown job id", re.IGNORECASE)


def unknown_ids_only(stderr: str) -> bool:
    """True when every complaint of a ``qstat ID…`` is about an id the server does not know
    (any more): PBS then exits 153 yet prints the jobs it does know."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return all(_UNKNOWN_ID.search(ln) for ln in lines)


def _exit_code(status: int | None) -> str | None:
    """A PBS exit status as Slurm's ``rc:signal``; PBS reports a signal as 256 + signal."""
    if status is None:
        return None
    if status > 256:
        return f"0:{status - 256}"
    return f"{status}:0"


#: why a PBS job waits → :class:`~resel.backends.jobs.Pending`, beside the state letters
#: (:data:`_WAIT_REASONS`, :data:`~resel.backends.jobs.PBS_STATES`). First the letter (PBS
#: Professional Reference Guide, "Job States"; Torque's qstat(1)): H is held — by its user, an
#: operator or the system (Hold_Types u/o/s), released by one of them — and W waits for its
#: execution time or its files, both ``blocked``; Q and T wait for the queue.
PBS_WAIT_LETTERS: dict[str, Pending] = {"Q": Pending.WAITING, "T": Pending.WAITING,
                                        "H": Pending.BLOCKED, "W": Pending.BLOCKED}
#: then, for a queued job, the comment PBS Pro's scheduler writes on it (PBS Professional
#: Administrator's Guide, "Job comments"), by how it begins (lower case): ``Can Never Run: …``
#: for a job it can never run as submitted (the only ``never``), ``Not Running: …`` with why it
#: waits — ``blocked`` when that is a limit (``… has reached queue workq running job limit``),
#: else ``waiting`` (``Insufficient amount of resource: ncpus``) — and ``Job held by …``.
PBS_COMMENTS: tuple[tuple[str, str | None, Pending], ...] = (
    ("can never run", None, Pending.NEVER),
    ("not running", "limit", Pending.BLOCKED),
    ("not running", None, Pending.WAITING),
    ("job held", None, Pending.BLOCKED),
)


def pending_class(letter: str, comment: str | None) -> Pending:
    """A pending PBS job's class (see :data:`PBS_WAIT_LETTERS`, :data:`PBS_COMMENTS`).

    A comment in neither table — another PBS version's words, a comment an administrator set
    with ``qalter -W comment`` — is ``waiting``: only the scheduler's own ``Can Never Run`` may
    end a pilot, and a pilot kept waiting is polled on with the comment shown (resel's rule for
    words it does not know, as for an unknown state).
    """
    c = str(letter or "").strip().upper()[:1]
    if c != "Q" or not comment:          # the scheduler comments on what it considered: queued jobs
        return PBS_WAIT_LETTERS.get(c, Pending.WAITING)
    said = comment.strip().lower()
    for start, word, kind in PBS_COMMENTS:
        if said.startswith(start) and (word is None or word in said):
            return kind
    return Pending.WAITING


# ---------------------------------------------------------------------------- JSON (PBS Pro)

#: OpenPBS prints environment values unescaped inside Variable_List, which can break the JSON
#: (a backslash or a quote in a user's variable); resel never needs that object
_VARIABLE_LIST = re.compile(r'"Variable_List"\s*:\s*\{.*?\n\s*\}\s*,?', re.DOTALL)


def load_json(text: str, command: str) -> dict[str, Any]:
    """Parse a PBS Pro ``-F json`` reply.

    Control characters inside strings are tolerated (``strict=False``); if the reply still
    does not parse, the job environments (``Variable_List``, printed unescaped by OpenPBS)
    are cut out and parsing is retried once.
    """
    try:
        doc = json.loads(text, strict=False)
    except json.JSONDecodeError as e:
        try:
            doc = json.loads(_VARIABLE_LIST.sub("", text), strict=False)
        except json.JSONDecodeError:
            snippet = text.strip()[:120]
            raise SchedulerReplyError(command, f"not JSON ({e.msg} at {e.pos}): {snippet!r}") from None
    if not isinstance(doc, dict):
        raise SchedulerReplyError(command, f"expected a JSON object, got {type(doc).__name__}")
    return doc


def _section(doc: Mapping[str, Any], key: str, command: str, optional: bool = False) -> dict[str, Any]:
    """``doc[key]`` as a dict of records; PBS omits the key when there is nothing to list."""
    value = doc.get(key)
    if value is None and (optional or "pbs_version" in doc or "timestamp" in doc):
        return {}
    if not isinstance(value, dict):
        raise SchedulerReplyError(command, f"no {key!r} object in the reply (keys: {sorted(doc)[:8]})")
    for name, rec in value.items():
        if not isinstance(rec, dict):
            raise SchedulerReplyError(command, f"{key}[{name!r}]: not an object")
    return value


def job_from_record(job_id: str, rec: Mapping[str, Any], tz: tzinfo | None, dialect: str,
                    command: str) -> JobInfo:
    """One job's attributes (JSON object, or a text block read into dotted keys) → JobInfo.

    The same attribute names serve both dialects; where Torque and the Slurm wrappers differ
    (start and end times) the record says which it is: Torque prints ``etime``/``start_time``/
    ``comp_time``, the wrappers print none of them and use ``mtime``/``ctime`` instead.
    """
    where = f"job {job_id}"
    flat = flatten(rec)
    if "job_state" not in flat:
        raise SchedulerReplyError(command, f"{where}: no job_state")
    exit_raw = flat.get("Exit_status", flat.get("exit_status"))
    exit_status = _int(exit_raw, f"{where}: exit status", command)
    code = str(flat["job_state"]).strip()
    state, reason = job_state(code, exit_status, dialect, command)
    native = code[:1].upper() or "?"       # PBS's letter, shown as it is
    comment = _str(flat.get("comment"))
    if state is JobState.PENDING and reason is None and comment:
        reason = comment                     # the scheduler's own words ("Can Never Run: …")
    pending = pending_class(code, comment) if state.phase == "pending" else None

    def t(key: str) -> float | None:
        return parse_time(flat.get(key), tz, f"{where}: {key}", command)

    if dialect == "pro":
        submit, start = t("qtime") or t("ctime"), t("stime")
        end = t("obittime") if state.phase not in ("pending", "running") else None
    elif any(k in flat for k in ("etime", "start_time", "comp_time")):     # Torque
        submit, start, end = t("qtime") or t("ctime"), t("start_time"), t("comp_time")
    else:                                                                   # Slurm's wrappers
        waiting = state.phase == "pending"
        submit = t("qtime")
        start = None if waiting else t("mtime")
        end = t("ctime") if state.phase not in ("pending", "running") else None
    if state.phase == "pending":
        start = None
    owner = _str(flat.get("Job_Owner")) or _str(flat.get("euser"))
    user = re.sub(r"[@(].*$", "", owner) if owner else None
    return JobInfo(
        job_id=job_id, name=str(flat.get("Job_Name") or ""), state=state, native=native,
        submit=submit, start=start, end=end,
        time_limit=parse_walltime(flat.get("Resource_List.walltime"), f"{where}: Resource_List.walltime", command),
        cpus=_job_cpus(flat, where, command),
        reason=reason, pending=pending, user=user or None, partition=_str(flat.get("queue")),
        exit_code=_exit_code(exit_status) if state.phase != "pending" and native not in ("R", "B") else None)


def flatten(rec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"Resource_List": {"ncpus": 1}}`` → ``{"Resource_List.ncpus": 1}`` (text is already flat)."""
    out: dict[str, Any] = {}
    for key, value in rec.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _job_cpus(flat: Mapping[str, Any], where: str, command: str) -> int | None:
    """CPUs a job asked for: ``Resource_List.ncpus``, else Torque's ``nodes=N:ppn=P`` (summed
    over ``+`` parts), else ``procs``."""
    ncpus = _int(flat.get("Resource_List.ncpus"), f"{where}: Resource_List.ncpus", command)
    if ncpus:
        return ncpus
    nodes = _str(flat.get("Resource_List.nodes"))
    if nodes:
        total = 0
        for part in nodes.split("+"):
            words = part.split(":")
            count = int(words[0]) if words[0].isdigit() else 1
            ppn = next((int(w[4:]) for w in words[1:] if re.fullmatch(r"ppn=\d+", w)), 1)
            total += count * ppn
        return total
    return _int(flat.get("Resource_List.procs"), f"{where}: Resource_List.procs", command)


def parse_jobs_json(doc: Mapping[str, Any], tz: tzinfo | None = None,
                    command: str = "qstat -f -F json") -> dict[str, JobInfo]:
    """``qstat -f -F json [-x]`` → jobs by id (``"1004.pbs"``, as qsub printed it)."""
    return {jid: job_from_record(jid, rec, tz, "pro", command)
            for jid, rec in _section(doc, "Jobs", command).items()}


def start_estimates_json(doc: Mapping[str, Any], tz: tzinfo | None = None,
                         command: str = "qstat -f -F json") -> dict[str, float | None]:
    """The scheduler's ``estimated.start_time`` per job (PBS Pro, when the server's scheduler
    is configured to estimate: ``est_start_time_freq``); None where there is none."""
    out = {}
    for jid, rec in _section(doc, "Jobs", command).items():
        est = rec.get("estimated")
        value = est.get("start_time") if isinstance(est, dict) else rec.get("estimated.start_time")
        out[jid] = parse_time(value, tz, f"job {jid}: estimated.start_time", command)
    return out


def _queue_state(enabled: Any, started: Any) -> str:
    """PBS's two queue switches → Slurm's partition words: ``enabled`` (accepts jobs) off is
    DRAIN, ``started`` (runs jobs) off is DOWN, both off INACTIVE."""
    def on(v: Any) -> bool:
        return str(v).strip().lower() in ("true", "yes", "1", "t", "y")
    e, s = on(enabled), on(started)
    return "UP" if e and s else "DRAIN" if s else "DOWN" if e else "INACTIVE"


_COUNT = re.compile(r"(\w+):(\d+)")


def _state_count(value: Any) -> tuple[int | None, int | None]:
    """``state_count = Transit:0 Queued:1 Held:0 Waiting:0 Running:2 Exiting:0 Begun:0`` →
    (running, pending)."""
    if not value:
        return None, None
    counts = {k.lower(): int(n) for k, n in _COUNT.findall(str(value))}
    if not counts:
        return None, None
    running = sum(counts.get(k, 0) for k in ("running", "exiting", "begun"))
    pending = sum(counts.get(k, 0) for k in ("queued", "held", "waiting", "transit"))
    return running, pending


def _queue_from_record(name: str, rec: Mapping[str, Any], command: str) -> QueueInfo:
    flat = flatten(rec)
    running, pending = _state_count(flat.get("state_count"))
    return QueueInfo(
        name=name, state=_queue_state(flat.get("enabled"), flat.get("started")),
        max_time=parse_walltime(flat.get("resources_max.walltime"),
                                f"queue {name}: resources_max.walltime", command),
        running=running, pending=pending, queue_type=_str(flat.get("queue_type")))


def parse_queues_json(doc: Mapping[str, Any], command: str = "qstat -Q -f -F json") -> list[QueueInfo]:
    """``qstat -Q -f -F json`` → queues."""
    return [_queue_from_record(n, rec, command) for n, rec in _section(doc, "Queue", command).items()]


def parse_server_default_queue(text: str, command: str = "qstat -B -f") -> str | None:
    """The server's ``default_queue`` from ``qstat -B -f`` (text) or ``-F json``; None if not said."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        doc = load_json(text, command)
        for rec in _section(doc, "Server", command, optional=True).values():
            if rec.get("default_queue"):
                return str(rec["default_queue"])
        return None
    m = re.search(r"^\s*default_queue\s*=\s*(\S+)", text, re.MULTILINE)
    return m.group(1) if m else None


#: node state words under which a node takes no new work
_NODE_DOWN = {"down", "offline", "state-unknown", "unknown", "stale", "unresolvable", "maintenance",
              "provisioning", "wait-provisioning", "sleep", "drain", "draining", "drained", "fail",
              "failing", "future", "maint", "power_down", "powered_down", "powering_down",
              "not_responding", "reboot_requested", "reboot_issued", "invalid", "inval"}
#: node state words under which all its CPUs are taken
_NODE_FULL = {"job-exclusive", "job-busy", "busy", "resv-exclusive", "allocated", "reserve"}


def _state_words(state: Any) -> list[str]:
    return [w for w in re.split(r"[,+ ]+", str(state or "").strip().lower().rstrip("*~#!%$@^")) if w]


def _idle(total: int, used: int | None, words: Sequence[str]) -> int | None:
    """Idle CPUs of a node: none when it is down or full; ``total - used`` when its use is
    known; all when it is plainly free; None when only the jobs can tell (``mixed``)."""
    if any(w in _NODE_DOWN for w in words) or any(w in _NODE_FULL for w in words):
        return 0
    if used is not None:
        return max(0, total - used)
    if words and all(w in ("free", "idle", "time-shared", "job-sharing") for w in words):
        return total
    return None


@dataclass(frozen=True)
class NodeRecord:
    """A node as pbsnodes reports it; ``idle`` None when only running jobs can tell."""

    name: str
    total: int
    idle: int | None
    queue: str | None
    state: str


def nodes_from_json(doc: Mapping[str, Any], command: str = "pbsnodes -a -F json") -> list[NodeRecord]:
    """``pbsnodes -a -F json`` → nodes: ``resources_available.ncpus`` minus
    ``resources_assigned.ncpus``, nothing on a down/offline/busy node. A node's ``queue``
    attribute ties it to one queue."""
    out = []
    for name, rec in _section(doc, "nodes", command).items():
        flat = flatten(rec)
        where = f"node {name}"
        total = _int(flat.get("resources_available.ncpus"), f"{where}: resources_available.ncpus", command)
        if total is None:
            total = _int(flat.get("pcpus"), f"{where}: pcpus", command) or 0
        used = _int(flat.get("resources_assigned.ncpus"), f"{where}: resources_assigned.ncpus", command) or 0
        words = _state_words(flat.get("state"))
        out.append(NodeRecord(name, total, _idle(total, used, words), _str(flat.get("queue")),
                              str(flat.get("state") or "")))
    return out


# ---------------------------------------------------------------------------- text (Torque)

_ATTR = re.compile(r"^\s+([A-Za-z_][\w.\-]*)\s=\s?(.*)$")


def text_blocks(text: str, header: re.Pattern[str], command: str,
            bare_header: bool = False) -> list[tuple[str, dict[str, str]]]:
    """Split ``Header: name`` blocks of indented ``key = value`` lines into (name, attrs).

    A line indented without `` = `` continues the previous value (Torque wraps long values
    at about 80 columns, the continuation starting with a tab); in a job's block so does any
    other line that is no header, after a blank line or not indented: Slurm's ``qstat``
    wrapper prints a job's name as it is, and another user's job named ``x<newline>…`` broke
    every listing of all jobs (a value so continued is still checked where it is read). With
    ``bare_header`` a non-indented line is itself the header (``pbsnodes`` prints just the
    node name).
    """
    out: list[tuple[str, dict[str, str]]] = []
    attrs: dict[str, str] | None = None
    last: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            if bare_header:
                last = None
            continue
        m = header.match(line)
        if m or (bare_header and not line[0].isspace()):
            name = (m.group(1) if m else line).strip()
            if not name:
                raise SchedulerReplyError(command, f"line {lineno}: a block without a name: {line!r}")
            attrs = {}
            out.append((name, attrs))
            last = None
            continue
        if attrs is None:
            raise SchedulerReplyError(command, f"line {lineno}: expected a block header, got {line[:80]!r}")
        a = _ATTR.match(line)
        if a:
            last = a.group(1)
            attrs[last] = a.group(2).strip()
        elif last is not None and (line[0].isspace() or not bare_header):
            attrs[last] += line.strip()
        else:
            raise SchedulerReplyError(command, f"line {lineno}: not 'key = value': {line[:80]!r}")
    return out


_JOB_HEADER = re.compile(r"^Job Id:\s*(\S*)\s*$")
QUEUE_HEADER = re.compile(r"^Queue:\s*(\S*)\s*$")


def parse_jobs_text(text: str, tz: tzinfo | None = None, command: str = "qstat -f") -> dict[str, JobInfo]:
    """``qstat -f`` (Torque, or Slurm's wrapper) → jobs by id."""
    if text.strip() and not _JOB_HEADER.match(text.lstrip().splitlines()[0]):
        raise SchedulerReplyError(command, f"expected 'Job Id:' blocks, got {text.strip()[:80]!r}")
    return {jid: job_from_record(jid, attrs, tz, "torque", command)
            for jid, attrs in text_blocks(text, _JOB_HEADER, command)}


def start_estimates_text(text: str, tz: tzinfo | None = None,
                         command: str = "qstat -f") -> dict[str, float | None]:
    """Expected starts of pending jobs in ``qstat -f`` text: ``estimated.start_time`` where
    the server prints it; Slurm's wrapper prints Slurm's expected start as a pending job's
    ``mtime`` (no ``etime`` there, which tells it from Torque's modification time)."""
    out: dict[str, float | None] = {}
    for jid, attrs in text_blocks(text, _JOB_HEADER, command):
        value = attrs.get("estimated.start_time")
        if value is None and attrs.get("job_state", "").strip()[:1] in ("Q", "H", "W") \
                and not any(k in attrs for k in ("etime", "start_time", "comp_time")):
            value = attrs.get("mtime")
        out[jid] = parse_time(value, tz, f"job {jid}: start estimate", command)
    return out


def parse_queues_text(text: str, command: str = "qstat -Q -f") -> list[QueueInfo]:
    """``qstat -Q -f`` text → queues (``enabled``/``started`` True/False or yes/no)."""
    return [_queue_from_record(n, attrs, command) for n, attrs in text_blocks(text, QUEUE_HEADER, command)]


@dataclass(frozen=True)
class QueueLimits:
    """A row of ``qstat -q``: the queue's walltime limit and its running/queued jobs."""

    name: str
    max_time: float | None
    running: int
    pending: int


def parse_qstat_q(text: str, command: str = "qstat -q") -> list[QueueLimits]:
    """``qstat -q`` (``Queue Memory CPU-Time Walltime Node Run Que Lm State``) → rows.

    Rows follow the dashed line; the totals under the second dashed line are skipped. Queue
    names are cut to 16 characters by Slurm's wrapper (the caller matches them by prefix).
    """
    rows, in_table = [], False
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if re.match(r"^-{4,}\s", line):
            in_table = True
            continue
        if not in_table or line[0].isspace():
            continue                           # "server:" lines, the header, the totals
        words = line.split()
        if len(words) < 8:
            raise SchedulerReplyError(command, f"line {lineno}: expected a queue row, got {line!r}")
        running = _int(words[5], f"line {lineno}: Run", command)
        pending = _int(words[6], f"line {lineno}: Que", command)
        rows.append(QueueLimits(words[0], parse_walltime(words[3], f"line {lineno}: Walltime", command),
                                running or 0, pending or 0))
    return rows


def _slots(jobs: str) -> int:
    """Slots in a Torque ``jobs =`` line: ``0/12.host, 1/12.host`` or ``0-3,5/12.host``."""
    total = 0
    for entry in re.split(r",\s*(?=[\d\-,]+/)", jobs.strip()):
        spec = entry.split("/", 1)[0]
        for part in spec.split(","):
            part = part.strip()
            if re.fullmatch(r"\d+-\d+", part):
                lo, hi = (int(x) for x in part.split("-"))
                total += max(0, hi - lo + 1)
            elif part.isdigit():
                total += 1
    return total


def nodes_from_text(text: str, command: str = "pbsnodes -a") -> list[NodeRecord]:
    """``pbsnodes -a`` text → nodes: ``np`` CPUs, used slots from ``jobs =`` (Torque).

    Slurm's wrapper prints no ``jobs =`` line: its ``free`` nodes are idle, ``job-exclusive``
    and ``busy`` ones full, and a ``mixed`` node's idle CPUs stay None (the caller counts them
    from the running jobs).
    """
    out = []
    for name, attrs in text_blocks(text, re.compile(r"^(?!)"), command, bare_header=True):
        where = f"node {name}"
        if "state" not in attrs:
            raise SchedulerReplyError(command, f"{where}: no state")
        total = _int(attrs.get("np") or attrs.get("pcpus"), f"{where}: np", command)
        if total is None:
            m = re.search(r"(?:^|,)ncpus=(\d+)", attrs.get("status", ""))
            total = int(m.group(1)) if m else 0
        used = _slots(attrs["jobs"]) if attrs.get("jobs", "").strip() else None
        words = _state_words(attrs["state"])
        if used is None and "free" in words and "jobs" in attrs:
            used = 0
        out.append(NodeRecord(name, total, _idle(total, used, words), _str(attrs.get("queue")), attrs["state"]))
    return out


def fill_idle_from_jobs(nodes: Sequence[NodeRecord], jobs: Iterable[JobInfo],
                        exec_hosts: Mapping[str, str]) -> list[NodeRecord]:
    """Nodes whose idle CPUs pbsnodes could not tell (``mixed``): total minus the CPUs of the
    running jobs whose ``exec_host`` names them, a multi-node job's CPUs spread evenly."""
    used: dict[str, float] = {}
    for job in jobs:
        if job.state.phase != "running" or not job.cpus:
            continue
        hosts = list(dict.fromkeys(h.split("/", 1)[0] for h in exec_hosts.get(job.job_id, "").split("+") if h))
        for h in hosts:
            used[h] = used.get(h, 0.0) + job.cpus / len(hosts)
    return [n if n.idle is not None else
            NodeRecord(n.name, n.total, max(0, n.total - round(used.get(n.name, 0.0))), n.queue, n.state)
            for n in nodes]


def exec_hosts_text(text: str, command: str = "qstat -f") -> dict[str, str]:
    """``exec_host`` per job id in ``qstat -f`` text."""
    return {jid: attrs.get("exec_host", "") for jid, attrs in text_blocks(text, _JOB_HEADER, command)}


# ---------------------------------------------------------------------------- availability


def partitions(queues: Sequence[QueueInfo], nodes: Sequence[NodeRecord],
               default_queue: str | None) -> list[Partition]:
    """Queues as :class:`Partition` records with the CPUs they can use.

    PBS queues do not own nodes, in general: a node serves every queue unless its ``queue``
    attribute ties it to one (PBS Pro); each queue is given the CPUs of the nodes it can use.
    """
    tied = {n.queue for n in nodes if n.queue}
    out = []
    for q in queues:
        mine = [n for n in nodes if n.queue == q.name] if q.name in tied else [n for n in nodes if not n.queue]
        out.append(Partition(name=q.name, state=q.state, total_cpus=sum(n.total for n in mine),
                             idle_cpus=sum(n.idle or 0 for n in mine), nodes=len(mine),
                             max_time=q.max_time, default=q.name == default_queue))
    return out


def make_availability(scheduler: str, version: str | None, parts: Sequence[Partition],
                      queues: Sequence[QueueInfo], nodes: Sequence[NodeRecord],
                      jobs: Iterable[JobInfo] | None, queried_at: float,
                      target: str | None = None) -> Availability:
    """One :class:`Availability` for the queue resel submits to (the configured one, else the
    server's default queue); without either, the whole cluster. Job counts come from the
    queues' ``state_count`` when the server prints it, else from ``jobs``."""
    scope = target or next((p.name for p in parts if p.default), None)
    if scope is not None:
        chosen = [p for p in parts if p.name == scope]
        free, total = sum(p.idle_cpus for p in chosen), sum(p.total_cpus for p in chosen)
    else:
        free, total = sum(n.idle or 0 for n in nodes), sum(n.total for n in nodes)
    counted = [q for q in queues if scope is None or q.name == scope]
    if counted and all(q.running is not None and q.pending is not None for q in counted):
        running = sum(q.running or 0 for q in counted)
        pending = sum(q.pending or 0 for q in counted)
    else:
        running = pending = 0
        for job in jobs or ():
            if scope is not None and job.partition and job.partition != scope:
                continue
            if job.state.phase == "running":
                running += 1
            elif job.state.phase == "pending":
                pending += 1
    shown = [p for p in parts if p.name == target] if target else list(parts)
    return Availability(scheduler, version, shown, int(free), int(total), running, pending, queried_at)


# ---------------------------------------------------------------------------- queue snapshot (the twin)

#: SchedulerType of the Slurm behind Debian's Torque wrappers → the twin's policy (as SlurmCLI)
_SLURM_POLICY = {"sched/backfill": "conservative", "sched/builtin": "fcfs"}
#: PBS state letters of jobs that are over (PBS Pro's history, Torque's completed jobs)
_OVER = {"F", "C", "X", "M"}
#: PBS states of waiting jobs the twin leaves out, with the words its note uses
_LEFT_OUT = {"H": "held", "W": "waiting for their start time (-a) or stage-in",
             "T": "in transit to another queue", "E": "exiting (ending now)", "S": "suspended",
             "U": "suspended (workstation busy)", "B": "array jobs (their subjobs are not listed)"}


def assumed_policy(flavour: str, scheduler_type: str | None = None) -> tuple[str, str]:
    """The twin's policy for a PBS site, and the note that says it is assumed.

    PBS's commands do not report the scheduler's configuration (``sched_config`` and the
    scheduler object are for managers), so the policy is the dialect's default:

    * ``"pro"`` (PBS Pro/OpenPBS) — **EASY**. Its scheduler backfills by default around
      ``backfill_depth`` top jobs, and ``backfill_depth`` defaults to 1: one reservation, for
      the highest-priority job, and smaller jobs started where they do not delay it — EASY's
      rule. (A site that raises ``backfill_depth`` moves towards conservative backfilling; a
      site without ``strict_ordering`` runs any job that fits, earlier still.)
    * ``"torque"`` — **FCFS**. Torque's own ``pbs_sched`` (fifo) does no backfilling; sites
      that run Maui or Moab do (EASY-like, ``RESERVATIONDEPTH`` 1), so there the twin's wait
      is on the safe side, likely too long.
    * ``"slurm-torque"`` (Debian's wrappers over Slurm) — Slurm's own policy, from
      ``scontrol show config``'s ``SchedulerType`` (``scheduler_type``) as
      :meth:`~resel.backends.slurm.cli.SlurmCLI.scheduler_policy` maps it; FCFS if not known.
    """
    if flavour == "pro":
        return "easy", ("policy assumed: PBS Pro's default backfilling around one top job "
                        "(backfill_depth 1) read as EASY; qstat does not report the scheduler's configuration")
    if flavour == "slurm-torque" and scheduler_type in _SLURM_POLICY:
        policy = _SLURM_POLICY[scheduler_type]
        return policy, (f"policy assumed from the Slurm behind the Torque wrappers ({scheduler_type}: {policy}); "
                        "the PBS commands do not report the scheduler's configuration")
    if flavour in ("torque", "slurm-torque"):
        why = ("Torque's pbs_sched (FIFO, no backfilling); under Maui/Moab backfilling the wait is likely shorter"
               if flavour == "torque" else
               f"the Slurm scheduler behind the Torque wrappers is {scheduler_type or 'not known'}")
        return "fcfs", f"policy assumed: FCFS ({why}); qstat does not report the scheduler's configuration"
    raise SchedulerError(f"PBS flavour {flavour!r} is not one of pro, torque, slurm-torque")


def job_records_json(doc: Mapping[str, Any], command: str = "qstat -f -F json") -> list[tuple[str, dict[str, Any]]]:
    """The job records of a ``qstat -f -F json`` reply, in its order: (id, attributes)."""
    return list(_section(doc, "Jobs", command).items())


def job_records_text(text: str, command: str = "qstat -f") -> list[tuple[str, dict[str, str]]]:
    """The job blocks of a ``qstat -f`` text reply, in its order: (id, ``key = value`` attributes)."""
    if text.strip() and not _JOB_HEADER.match(text.lstrip().splitlines()[0]):
        raise SchedulerReplyError(command, f"expected 'Job Id:' blocks, got {text.strip()[:80]!r}")
    return text_blocks(text, _JOB_HEADER, command)


def _seq_key(job_id: str) -> tuple[int, str]:
    head = job_id.split(".", 1)[0].split("[", 1)[0]
    return (int(head) if head.isdigit() else 0, job_id)


def _read_jobs(part: Partition, records: Iterable[tuple[str, Mapping[str, Any]]], *, flavour: str,
               tz: tzinfo | None, clock: float, scoped: bool, command: str
               ) -> tuple[list[SnapJob], list[tuple[int, float, tuple[int, str], SnapJob]], dict[str, int], int, int]:
    """:func:`snapshot_of`'s jobs: the running ones with their elapsed time at ``clock``, the
    pending ones with their sort key (priority, submission, number), unsorted, what was left out
    and why (counted), and how many pending jobs had no priority and running ones no elapsed time."""
    dialect = "pro" if flavour == "pro" else "torque"
    running: list[SnapJob] = []
    pending: list[tuple[int, float, tuple[int, str], SnapJob]] = []
    left_out: dict[str, int] = {}
    no_priority = no_elapsed = 0

    def leave(why: str) -> None:
        left_out[why] = left_out.get(why, 0) + 1

    for jid, rec in records:
        if not isinstance(rec, Mapping):
            raise SchedulerReplyError(command, f"job {jid}: not a record of attributes")
        info = job_from_record(jid, rec, tz, dialect, command)
        if scoped and info.partition and info.partition != part.name:
            continue
        flat = flatten(rec)
        code = str(flat.get("job_state", "")).strip().upper()[:1]
        if code in _OVER:
            continue
        where = f"job {jid}"
        if code in _LEFT_OUT:
            leave(_LEFT_OUT[code])
            continue
        if code not in ("R", "Q"):
            leave(f"in state {code}")
            continue
        if info.cpus is None or info.cpus < 1:
            leave("their CPU count is not known")
            continue
        if code == "R":
            if info.start is not None:
                elapsed = max(0.0, clock - info.start)
            else:
                used = parse_walltime(flat.get("resources_used.walltime"), f"{where}: resources_used.walltime",
                                      command)
                if used is None:
                    no_elapsed += 1
                elapsed = used or 0.0
            running.append(SnapJob(info.cpus, info.time_limit, elapsed, jid, info.user))
            continue
        if info.pending is Pending.NEVER:
            leave("the scheduler says they can never run")
            continue
        raw = flat.get("Priority")
        priority = _int(raw, f"{where}: Priority", command)
        if priority is None:
            no_priority += 1
        elif flavour == "slurm-torque" and priority == 0:
            leave("held (priority 0 under Slurm's wrappers)")
            continue
        job = SnapJob(info.cpus, info.time_limit, 0.0, jid, info.user)
        pending.append((-(priority or 0), info.submit if info.submit is not None else math.inf,
                        _seq_key(jid), job))
    return running, pending, left_out, no_priority, no_elapsed


def snapshot_of(part: Partition, records: Iterable[tuple[str, Mapping[str, Any]]], policy: str, now: float, *,
                flavour: str = "pro", tz: tzinfo | None = None, server_time: float | None = None,
                notes: Sequence[str] = (), scoped: bool = True,
                command: str = "qstat -f") -> QueueSnapshot:
    """The twin's view of one PBS queue from ``qstat -f`` job records (pure).

    ``part`` is the queue (its CPUs and walltime maximum, from :func:`partitions`); with
    ``scoped`` False every queue's jobs count (the whole cluster, when no queue is known).
    ``flavour`` is ``"pro"``, ``"torque"`` or ``"slurm-torque"``; ``notes`` are prepended
    (the policy's, from :func:`assumed_policy`).

    * Running jobs (``R``): their CPUs (``Resource_List.ncpus``, else ``nodes=N:ppn=P``, else
      ``procs``), ``Resource_List.walltime``, and elapsed time since their start (``stime``,
      ``start_time``; the wrappers' ``mtime``) measured against ``server_time`` — the
      reply's own ``timestamp`` where PBS Pro prints one, so no clock skew enters — else
      ``now``; ``resources_used.walltime`` where the start is not printed.
    * Pending jobs (``Q``) in priority order: the ``Priority`` attribute (higher first), then
      ``qtime``, then the job number. PBS Pro's scheduler sorts by its own formula
      (``job_sort_formula``, fairshare), which users cannot see: a note says so.
    * Left out, each counted in a note: held (``H``), waiting (``W``), in transit (``T``),
      exiting, suspended, array parents, jobs PBS Pro says can never run, and, under Slurm's
      wrappers, queued jobs of priority 0 (Slurm's held jobs, which the wrappers print as Q).
      Finished jobs (PBS Pro's history) are skipped silently.
    * Jobs without a walltime get the queue's maximum (``default_limit``), with a note; a
      note also says when the queue has none (the twin then refuses to simulate them).

    A record without ``job_state`` or with unreadable values raises
    :class:`SchedulerReplyError` naming ``command``.
    """
    if flavour not in ("pro", "torque", "slurm-torque"):
        raise SchedulerError(f"PBS flavour {flavour!r} is not one of pro, torque, slurm-torque")
    if part.total_cpus < 1:
        raise SchedulerError(f"queue {part.name} has no CPUs (pbsnodes lists none it may use): "
                             "there is no queue to simulate")
    clock = server_time if server_time is not None else now
    running, pending, left_out, no_priority, no_elapsed = _read_jobs(
        part, records, flavour=flavour, tz=tz, clock=clock, scoped=scoped, command=command)
    pending.sort(key=lambda p: p[:3])
    out = list(notes)
    out += [f"{n} job(s) left out: {why}" for why, n in sorted(left_out.items())]
    if pending and flavour == "pro":
        out.append("pending jobs ordered by their Priority attribute, then submission: "
                   "the scheduler's own sort formula (fairshare, job_sort_formula) is not visible")
    if no_priority:
        out.append(f"{no_priority} pending job(s) without a Priority attribute taken as priority 0")
    if no_elapsed:
        out.append(f"{no_elapsed} running job(s) without a start time or used walltime taken as just started")
    unlimited = sum(1 for j in (*running, *(p[3] for p in pending)) if j.time_limit is None)
    if unlimited:
        out.append(f"{unlimited} job(s) without a walltime given the queue's maximum"
                   + (f" ({part.max_time:.0f} s)" if part.max_time else
                      ", which it does not have (resources_max.walltime): they cannot be simulated"))
    busy = sum(j.cores for j in running)
    outside = part.total_cpus - part.idle_cpus - busy
    if scoped and outside > 0:
        out.append(f"{outside} busy core(s) of queue {part.name}'s nodes belong to no job listed in it "
                   "(another queue shares its nodes?): taken as free")
    return QueueSnapshot(
        site=part.name, taken_at=now, total_cores=part.total_cpus, running=tuple(running),
        pending=tuple(p[3] for p in pending), policy=policy,
        default_limit=part.max_time or None, notes=tuple(out))


# ---------------------------------------------------------------------------- qsub, qdel

_JOB_ID = re.compile(r"^\s*(\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.\-]+)?)\s*$")


def parse_qsub(stdout: str, command: str = "qsub") -> str:
    """The job id qsub printed: ``1.pbs`` (PBS Pro), ``123.server`` (Torque), ``1417``
    (Slurm's wrapper, which prints the last word of sbatch's reply)."""
    for line in reversed([x for x in stdout.splitlines() if x.strip()]):
        m = _JOB_ID.match(line)
        if m:
            return m.group(1)
    raise SchedulerReplyError(command, f"no job id in {stdout.strip()[:120]!r}")


#: qsub's refusals (PBS Pro, Torque, and the sbatch words Slurm's wrapper passes on)
_QSUB_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Unknown queue|requested queue not found|invalid partition|Invalid partition", re.IGNORECASE),
     "set the site's `queue` to one listed by `qstat -Q`"),
    (re.compile(r"Maximum number of jobs|would exceed|max_queued|max_user_queued|"
                r"QOSMaxSubmitJob|MaxSubmitJobs|job submit limit", re.IGNORECASE),
     ("the site caps how many jobs you may have queued; wait for some to finish, lower this "
      "site's max_pilots, or ask the site for a higher limit")),
    (re.compile(r"exceeds queue resource limits|violates queue and/or server resource limits|"
                r"cannot locate feasible nodes|Requested node configuration is not available|"
                r"time limit|More processors requested", re.IGNORECASE),
     ("the pilot asks for more cores or walltime than the queue allows (pilots run on one "
      "node); compare with `qstat -Q -f` (resources_max.*) and `pbsnodes -a`, then lower the "
      "pilot's cores or walltime")),
    (re.compile(r"Queue is not enabled|queue.*disabled|partition.*(inactive|down)", re.IGNORECASE),
     "the queue is not taking jobs now; wait until the site enables it (`qstat -Q`) or choose another"),
    (re.compile(r"Invalid Account|Bad account|account.*not.*(valid|permitted)", re.IGNORECASE),
     "set the site's `account` to a project you may charge"),
    (re.compile(r"Unauthorized Request|Bad UID|ruserok|not allowed|acl", re.IGNORECASE),
     "the server does not let you submit to this queue (user/group ACL); ask the site"),
    (re.compile(r"Illegal attribute or resource value|Unknown resource|Invalid time limit|"
                r"illegal -l value|unknown option|Usage:", re.IGNORECASE),
     ("the server does not understand the resource request; check the site's `dialect` "
      "(`pro` uses -l select=1:ncpus=N, `torque` -l nodes=1:ppn=N) and its submit_args")),
    (re.compile(r"cannot connect to server|Connection refused|Communication failure|"
                r"Unable to contact|pbs_connect", re.IGNORECASE),
     "the PBS server did not answer; retry later"),
)

_WRAPPER_OUTPUT = re.compile(r"and the output was:\s*'(.*?)'?\s*$", re.DOTALL)


def qsub_error(stdout: str, stderr: str, command: str = "qsub",
               returncode: int | None = None) -> SchedulerError:
    """qsub's refusal → :class:`SchedulerError` with the site's words and what to do.

    PBS Pro says ``qsub: Unknown queue``; Torque ``qsub: submit error (Unknown queue
    MSG=requested queue not found)``; Slurm's wrapper prints, on stdout, the sbatch command it
    ran and sbatch's own complaint, which is what is kept.
    """
    said = f"{stderr}\n{stdout}".strip()
    m = _WRAPPER_OUTPUT.search(said)
    if m:
        lines = [re.sub(r"^\s*sbatch:\s*(error:\s*)?", "", x).strip() for x in m.group(1).splitlines()]
        lines = [re.sub(r"^Batch job submission failed:\s*", "", x) for x in lines if x.strip()]
        words = "; ".join(dict.fromkeys(lines))
    elif re.search(r"^\s*Usage:", said, re.MULTILINE):
        head = [x.strip() for x in said.splitlines() if x.strip() and not x.strip().startswith("Usage:")]
        words = "it printed its usage text" + (f" ({head[0]})" if head and "[" not in head[0] else "")
    else:
        lines = [re.sub(r"^\s*qsub:\s*", "", x).strip() for x in said.splitlines() if x.strip()]
        words = "; ".join(dict.fromkeys(lines))
    if not words:
        words = f"exit status {returncode}"
    hint = next((h for p, h in _QSUB_HINTS if p.search(said)),
                "see the site's message above and its documentation for qsub limits")
    return SchedulerError(f"qsub refused the job: {words}", command=command, reply=said, hint=hint)


_QDEL_GONE = re.compile(r"Unknown Job Id|Job has finished|has already finished|already completed|"
                        r"Invalid job id|Request invalid for state of job|job.*completed", re.IGNORECASE)


def qdel_problems(stdout: str, stderr: str) -> list[str]:
    """qdel's complaints that matter: a job that is already gone is what cancel wanted.

    Slurm's wrapper says nothing (exit status 1) for a job already done or unknown, and
    ``qdel: Kill job error on job id N: …`` for a real failure.
    """
    out = []
    for line in f"{stderr}\n{stdout}".splitlines():
        text = line.strip()
        if not text or _QDEL_GONE.search(text):
            continue
        out.append(re.sub(r"^qdel:\s*", "", text))
    return out
