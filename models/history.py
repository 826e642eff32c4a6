"""Queue-wait history per site and job shape, and the QBETS bounds drawn from it.

A bound is only as good as the history behind it, and the history of *similar* jobs: a
256-core, 48-hour job waits on a different queue than a 1-core, 10-minute one (backfill lets
the small one in early). So waits are grouped by site and a coarse **shape class** (cores in
power-of-two buckets, requested walltime in a few buckets). The classes are coarse on
purpose: a 95 % bound at 95 % confidence needs at least 59 waits (:func:`qbets.min_history`),
and fine classes would leave most of them empty. When a class is still too thin,
:meth:`WaitHistory.bound` falls back to the site's waits of the same core bucket, then to all
the site's waits, and says which level it used.

Where waits come from (``WaitRecord.source``):

* ``sacct``: the site's accounting (``sacct --json`` or ``sacct -P``), every user's jobs —
  the richest history, imported with ``resel history import --sacct``;
* ``swf``: a Standard Workload Format trace (Parallel Workloads Archive), for a site that
  is simulated from it;
* ``resel``: resel's own pilots (the ``live_pilots`` table), read on every load;
* ``sim``: waits measured in simulation.

Only jobs that started count. A job still pending (or cancelled while pending) has a wait
longer than what is recorded, so leaving it out biases the history low while a queue is
filling up; the change-point trimming of :class:`~resel.models.qbets.WaitBounds` is what
catches such a shift once the long waits do start.

Imported records are kept in the ``wait_history`` table (migration m007 of :mod:`resel.store`),
keyed by (site, source, job_id), so importing the same file twice adds nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from resel.errors import InputError, SchedulerReplyError, StoreError
from resel.models.qbets import WaitBounds, min_history

if TYPE_CHECKING:
    from sqlite_utils import Database

    from resel.backends.slurm.formats import JobInfo

Source = Literal["resel", "sacct", "swf", "sim"]
SOURCES: tuple[str, ...] = ("resel", "sacct", "swf", "sim")
Level = Literal["shape", "cores", "site"]

#: walltime bucket upper limits (seconds) and labels; None walltime is "unknown"
WALLTIME_BUCKETS: tuple[tuple[float, str], ...] = (
    (3600.0, "<=1h"), (4 * 3600.0, "<=4h"), (12 * 3600.0, "<=12h"), (24 * 3600.0, "<=24h"),
    (math.inf, ">24h"))
UNKNOWN_WALLTIME = "unknown"
#: a pilot of resel's that started within this many seconds did not queue: its wait is the
#: site's start latency (WaitHistory.start_latency)
LATENCY_CAP = 60.0


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """One job's queue wait: when it was submitted and when it started, with its shape.

    ``walltime`` is the *requested* limit in seconds (None: unknown or unlimited), ``submit``
    and ``start`` epoch seconds (or simulation seconds for ``sim``), ``job_id`` the
    scheduler's id (``file#id`` for an SWF trace, so two traces of one site do not collide).
    """

    site: str
    partition: str | None
    cores: int
    walltime: float | None
    submit: float
    start: float
    source: str
    job_id: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.cores < 1:
            raise ValueError(f"job {self.job_id}: cores must be >= 1, got {self.cores}")

    @property
    def wait(self) -> float:
        """Seconds from submission to start; a start a little before the submit (clock skew
        between hosts) counts as no wait rather than a negative one."""
        return max(0.0, self.start - self.submit)

    @property
    def shape(self) -> str:
        return shape_class(self.cores, self.walltime)


def cores_class(cores: int) -> str:
    """``1``, ``2``, ``3-4``, ``5-8``, ``9-16``, …: power-of-two buckets of the core count.

    Power-of-two because waits grow with the share of the machine a job asks for, roughly
    on a log scale, and because requests cluster on powers of two anyway (a bucket ends on one).
    """
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    upper = 1 << (cores - 1).bit_length()
    return str(upper) if upper <= 2 else f"{upper // 2 + 1}-{upper}"


def walltime_class(walltime: float | None) -> str:
    """``<=1h``, ``<=4h``, ``<=12h``, ``<=24h``, ``>24h``, or ``unknown`` for None.

    These follow the limits sites commonly set their partitions and backfill windows at, so a
    bucket is a group of jobs the scheduler itself treats alike.
    """
    if walltime is None:
        return UNKNOWN_WALLTIME
    for upper, label in WALLTIME_BUCKETS:
        if walltime <= upper:
            return label
    return WALLTIME_BUCKETS[-1][1]   # NaN lands here


def shape_class(cores: int, walltime: float | None) -> str:
    """The shape class of a job, e.g. ``1c/<=1h`` or ``5-8c/unknown``: coarse, so that enough
    history lands in each class for a bound (59 waits for 95 % at 95 % confidence)."""
    return f"{cores_class(cores)}c/{walltime_class(walltime)}"


def _shape_order(shape: str) -> tuple[int, int]:
    """Sort key: by cores bucket, then walltime bucket (unknown last)."""
    cores, _, wall = shape.partition("c/")
    labels = [label for _, label in WALLTIME_BUCKETS] + [UNKNOWN_WALLTIME]
    return int(cores.split("-")[-1]), labels.index(wall) if wall in labels else len(labels)


# ---------------------------------------------------------------------------- importers


@dataclass(frozen=True)
class Imported:
    """What an importer read: the records, and how many jobs it skipped for which reason."""

    records: tuple[WaitRecord, ...]
    skipped: Mapping[str, int] = field(default_factory=dict)
    origin: str = ""

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def describe(self) -> str:
        """E.g. ``312 waits from sacct.txt; skipped 4 jobs (3 never started, 1 still pending)``."""
        text = f"{len(self.records)} wait(s)" + (f" from {self.origin}" if self.origin else "")
        if self.skipped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items(), key=lambda kv: -kv[1]))
            text += f"; skipped {self.n_skipped} job(s) ({why})"
        return text


def records_from_jobs(jobs: Mapping[str, JobInfo], site: str, *, source: Source = "sacct",
                      origin: str = "", default_cores: int | None = None) -> Imported:
    """Wait records of the jobs that started, from parsed scheduler records (``sacct``).

    A job is skipped, and counted under its reason, when it never started (pending,
    cancelled while pending), lacks a submit or start time, or starts before it was submitted
    by more than clock skew explains. A job without a CPU count (a ``--format`` without
    AllocCPUS) gets ``default_cores`` if given, else is skipped too: guessing its size would put
    it in the wrong shape class.
    """
    out: list[WaitRecord] = []
    skipped: Counter[str] = Counter()
    for jid, job in jobs.items():
        if job.state.phase == "pending" or job.start is None:
            skipped["never started"] += 1
            continue
        if job.submit is None:
            skipped["without a submit time"] += 1
            continue
        if job.start < job.submit - 60:
            skipped["starting before their submit time"] += 1
            continue
        cores = job.cpus if job.cpus and job.cpus >= 1 else default_cores
        if cores is None:
            skipped["without a CPU count"] += 1
            continue
        if cores > MAX_CORES or not all(math.isfinite(t) and abs(t) < MAX_EPOCH
                                        for t in (job.submit, job.start, job.time_limit or 0)):
            skipped["with impossible numbers"] += 1     # beyond what the store (SQLite) holds
            continue
        out.append(WaitRecord(site=site, partition=job.partition, cores=int(cores),
                              walltime=job.time_limit, submit=float(job.submit), start=float(job.start),
                              source=source, job_id=str(job.job_id or jid)))
    return Imported(tuple(out), dict(skipped), origin)


_FORMAT_OPTION = re.compile(r"(?:--format[= ]|(?<!\S)-o\s*)['\"]?([A-Za-z0-9_%,:]+)['\"]?")
_COLUMN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: a job with more cores, or times beyond this epoch (year ~33,600), is not a real record; both
#: bounds also keep every value inside what SQLite stores (a 40-digit CPU count overflowed it)
MAX_CORES = 10**9
MAX_EPOCH = 1e12
_SACCT_HINT = ("`sacct -P` output with its header line (leave out -n/--noheader), `sacct --json` output, "
               "or a recorded command {command, stdout}")


def records_from_sacct_file(path: str | os.PathLike[str], site: str, *, fields: Iterable[str] | None = None,
                            tz: tzinfo | None = None, default_cores: int | None = None) -> Imported:
    """Waits from a saved ``sacct`` reply: ``--json``, ``-P`` text, or a recorded command.

    The kind is detected from the content: a JSON object with ``jobs`` is ``sacct --json``; a
    JSON object with ``stdout`` is a recorded command (its ``--format`` names the columns); text
    is ``sacct -P``, whose columns come from its header line, else from ``fields``, else
    resel's own :data:`~resel.backends.slurm.formats.SACCT_FIELDS`. Text times without a zone
    are in ``tz`` (the site's zone; None = this machine's). ``default_cores``: see
    :func:`records_from_jobs`.

    Raises:
        InputError: the file is missing, or is none of those, naming the file and the problem.
    """
    p = os.fspath(path)
    from resel.config import open_nonblocking
    try:
        with open_nonblocking(p) as f:     # a FIFO no one writes to hung the command
            if stat.S_ISCHR(os.fstat(f.fileno()).st_mode) or stat.S_ISBLK(os.fstat(f.fileno()).st_mode):
                raise InputError(p, None, "is a device", "a file of saved sacct output")   # /dev/zero never ends
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(p, None, "file not found") from None
    except OSError as exc:
        raise InputError(p, None, f"cannot be read: {exc.strerror or exc}") from None
    jobs = _parse_sacct(p, text, list(fields) if fields else None, tz)
    return records_from_jobs(jobs, site, source="sacct", origin=Path(p).name, default_cores=default_cores)


def _parse_sacct(path: str, text: str, fields: list[str] | None, tz: tzinfo | None) -> dict[str, JobInfo]:
    from resel.backends.slurm import formats as sf

    stripped = text.strip()
    if not stripped:
        raise InputError(path, None, "is empty", _SACCT_HINT)
    try:
        if stripped[0] in "{[":
            try:
                doc = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}",
                                 _SACCT_HINT) from None
            except RecursionError:
                raise InputError(path, None, "JSON nested too deeply to read", _SACCT_HINT) from None
            except ValueError as exc:     # an integer of more than 4,300 digits
                raise InputError(path, None, f"not valid JSON: {exc}", _SACCT_HINT) from None
            if not isinstance(doc, dict):
                raise InputError(path, None, f"is a JSON {type(doc).__name__}, not an object", _SACCT_HINT)
            if "jobs" in doc:
                return sf.parse_sacct_json(doc, command=path)
            if isinstance(doc.get("stdout"), str):
                command = str(doc.get("command") or "")
                if doc.get("exit_code") not in (None, 0):
                    raise InputError(path, "exit_code", f"the recorded command failed with exit code "
                                     f"{doc['exit_code']}: {str(doc.get('stderr') or '').strip()[:200]}",
                                     "the record of a sacct that succeeded")
                m = _FORMAT_OPTION.search(command)
                return _parse_sacct(path, doc["stdout"], fields or (m.group(1).split(",") if m else None), tz)
            raise InputError(path, None, f"a JSON object with keys {', '.join(sorted(doc)) or '(none)'}",
                             _SACCT_HINT)
        lines = stripped.splitlines()
        first = [cell.strip() for cell in lines[0].split("|")]
        if all(_COLUMN_NAME.fullmatch(cell) for cell in first):
            # a header line (a job line starts with a numeric JobID): it names the columns
            fields, stripped = first, "\n".join(lines[1:])
        return sf.parse_sacct_text(stripped, fields or sf.SACCT_FIELDS, tz, command=path)
    except SchedulerReplyError as exc:
        raise InputError(path, None, exc.problem, _SACCT_HINT) from None
    except ValueError as exc:         # a column list without JobID or State
        raise InputError(path, None, str(exc), _SACCT_HINT) from None


def records_from_swf(path: str | os.PathLike[str], site: str, limit: int | None = None, *,
                     skip_bad: bool = False) -> Imported:
    """Waits recorded in an SWF trace: field 3 is the wait, field 2 the submit time.

    Cores are the requested processors (field 8), else the allocated ones (field 5); the
    walltime is the requested time (field 9; -1 = unknown). Submit times are shifted by the
    header's ``UnixStartTime`` when it has one, so they are epochs like sacct's. Jobs without a
    wait or a processor count (-1) and jobs cancelled before they started are skipped.
    ``limit`` stops after that many records.

    Raises:
        InputError: a malformed line (from :func:`resel.sim.swf.read_swf`), naming file and line.
    """
    from resel.sim.swf import read_swf

    trace = read_swf(path, skip_bad=skip_bad)
    offset = float(trace.header.unix_start_time or 0)
    name = Path(os.fspath(path)).name
    out: list[WaitRecord] = []
    skipped: Counter[str] = Counter()
    for job in trace:
        if limit is not None and len(out) >= limit:
            break
        if job.wait is None or job.wait < 0 or job.submit < 0:
            skipped["without a recorded wait"] += 1
            continue
        if job.status == 5 and job.run <= 0:
            skipped["cancelled before they started"] += 1
            continue
        cores = job.req_procs if job.req_procs > 0 else job.procs
        if cores <= 0:
            skipped["without a processor count"] += 1
            continue
        submit = offset + float(job.submit)
        out.append(WaitRecord(site=site, partition=None if job.partition == -1 else str(job.partition),
                              cores=max(1, int(cores)), walltime=float(job.req_time) if job.req_time > 0 else None,
                              submit=submit, start=submit + float(job.wait), source="swf",
                              job_id=f"{name}#{job.id}"))
    if trace.skipped:
        skipped["malformed lines"] += trace.skipped
    return Imported(tuple(out), dict(skipped), name)


def records_from_store(db: Database, site: str | None = None) -> list[WaitRecord]:
    """Waits of resel's own pilots that started (the ``live_pilots`` table), oldest first: from
    the submission to the start its agent stamped where it did (else the poll that saw it).

    A pilot without a batch job id is named ``run<R>.pilot<P>`` so it still has a unique key.
    ``db`` is a store its caller opened (:func:`resel.store.open_store`): a model reads a store,
    it does not open one.
    """
    if "live_pilots" not in db.table_names():
        return []
    columns = {r["name"] for r in db.query("select name from pragma_table_info('live_pilots')")}
    agent = "agent_started" in columns and "runs" in db.table_names()
    sql = ("select p.run_id, p.pilot, p.site, p.job_id, p.cores, p.walltime, p.submitted, p.started"
           + (", p.agent_started, r.t0 from live_pilots p left join runs r on r.id = p.run_id" if agent
              else " from live_pilots p")
           + " where p.submitted is not null and p.started is not null")
    args: list[Any] = []
    if site is not None:
        sql += " and p.site = ?"
        args.append(site)
    out = []
    for row in db.query(sql + " order by p.submitted", args):
        start = float(row["started"])
        if agent and row["agent_started"] is not None and row["t0"] is not None:
            # its agent's own clock: the poll that saw the start came up to a poll later
            start = max(float(row["submitted"]), min(start, float(row["agent_started"]) - float(row["t0"])))
        out.append(WaitRecord(site=row["site"], partition=None, cores=max(1, int(row["cores"] or 1)),
                              walltime=row["walltime"], submit=float(row["submitted"]),
                              start=start, source="resel",
                              job_id=str(row["job_id"] or f"run{row['run_id']}.pilot{row['pilot']}")))
    return out


# ---------------------------------------------------------------------------- persistence

WAIT_HISTORY_COLUMNS: dict[str, type] = {
    "site": str, "source": str, "job_id": str, "partition": str, "cores": int, "walltime": float,
    "submit": float, "start": float}


def save_records(db: Database, records: Iterable[WaitRecord]) -> int:
    """Store records in ``wait_history`` of an open store; returns how many were new (a re-import adds 0)."""
    if "wait_history" not in db.table_names():
        raise StoreError("the run store has no wait_history table; open it with resel.store.open_store")
    table = db["wait_history"]
    before = table.count
    with db.atomic():
        table.insert_all(({"site": r.site, "source": r.source, "job_id": r.job_id, "partition": r.partition,
                           "cores": r.cores, "walltime": r.walltime, "submit": r.submit, "start": r.start}
                          for r in records), ignore=True, batch_size=2000)
    return table.count - before


def load_history(db: Database, site: str | None = None) -> WaitHistory:
    """Imported waits (``wait_history``) and resel's own pilots (``live_pilots``) of an open
    store, in one history."""
    history = WaitHistory()
    if "wait_history" in db.table_names():
        sql, args = "select * from wait_history", []
        if site is not None:
            sql, args = sql + " where site = ?", [site]
        history.add(WaitRecord(site=r["site"], partition=r["partition"], cores=int(r["cores"]),
                               walltime=r["walltime"], submit=float(r["submit"]), start=float(r["start"]),
                               source=r["source"], job_id=r["job_id"]) for r in db.query(sql, args))
    history.add(records_from_store(db, site))
    return history


# ---------------------------------------------------------------------------- bounds


@dataclass(frozen=True)
class HistoryBound:
    """A wait bound for one site and job shape, with where it came from.

    ``seconds`` is None when no level has enough history; ``reason`` then says why in words
    (and, with a bound from a coarser group, why the finer one was passed over).
    ``n`` is the history the bound rests on (after change-point trimming), ``level`` which
    grouping gave it (``shape``: the job's shape class, ``cores``: any walltime, ``site``: all
    jobs), ``group`` that group's label, ``change_points`` how often the queue shifted in it.
    """

    site: str
    seconds: float | None
    n: int
    level: Level | None
    group: str
    change_points: int
    quantile: float
    confidence: float
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "seconds": self.seconds, "n": self.n, "level": self.level, "group": self.group,
                "change_points": self.change_points, "quantile": self.quantile, "confidence": self.confidence,
                "reason": self.reason}


@dataclass(frozen=True)
class ClassSummary:
    """One row of ``resel history show``: a site's shape class and its bound."""

    site: str
    shape: str
    n: int
    median_wait: float
    bound: float | None
    used: int
    change_points: int

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "shape": self.shape, "n": self.n, "median_wait": self.median_wait,
                "bound": self.bound, "used": self.used, "change_points": self.change_points}


def _pct(x: float) -> str:
    return f"{x * 100:g} %"


class WaitHistory:
    """Waits per site, in submission order, grouped by shape class on demand.

    A job seen twice (resel's pilot and the same job in the site's sacct) counts once: records
    are keyed by site and job id, with SWF and simulated records in their own id spaces.
    """

    def __init__(self, records: Iterable[WaitRecord] = ()):
        self._records: dict[tuple[str, str, str], WaitRecord] = {}
        self._by_site: dict[str, list[WaitRecord]] | None = None
        self.add(records)

    @staticmethod
    def _key(r: WaitRecord) -> tuple[str, str, str]:
        space = r.source if r.source in ("swf", "sim") else "batch"
        return r.site, space, r.job_id

    def add(self, records: Iterable[WaitRecord]) -> None:
        for r in records:
            key = self._key(r)
            # the scheduler's accounting wins over resel's own polling (finer start times)
            if key not in self._records or r.source == "sacct":
                self._records[key] = r
        self._by_site = None

    def _sites(self) -> dict[str, list[WaitRecord]]:
        if self._by_site is None:
            by_site: dict[str, list[WaitRecord]] = {}
            for r in self._records.values():
                by_site.setdefault(r.site, []).append(r)
            for rs in by_site.values():
                rs.sort(key=lambda r: (r.submit, r.start, r.job_id))
            self._by_site = by_site
        return self._by_site

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[WaitRecord]:
        for site in self.sites():
            yield from self._sites()[site]

    def sites(self) -> list[str]:
        return sorted(self._sites())

    def start_latency(self, site: str, *, fits_within: float = LATENCY_CAP) -> tuple[float, int] | None:
        """How long the site takes to start one of resel's pilots that does not queue: the median
        wait of its pilots that started within ``fits_within`` seconds (its scheduler's cycle,
        the submission's round trip, the job's prolog — 0.9 to 5.2 s on the testbed), and how
        many it is the median of; None before any. A twin that finds a pilot fits *now* says
        0 s; no pilot has ever started that soon (issue 26 item 2)."""
        waits = sorted(r.start - r.submit for r in self._sites().get(site, [])
                       if r.source == "resel" and 0 <= r.start - r.submit <= fits_within)
        if not waits:
            return None
        n = len(waits)
        mid = waits[n // 2] if n % 2 else (waits[n // 2 - 1] + waits[n // 2]) / 2
        return mid, n

    def records(self, site: str | None = None) -> list[WaitRecord]:
        """The records of one site (or all), each site's in submission order."""
        return list(self) if site is None else list(self._sites().get(site, []))

    def shapes(self, site: str) -> dict[str, list[WaitRecord]]:
        """The site's records by shape class, classes ordered by cores then walltime."""
        groups: dict[str, list[WaitRecord]] = {}
        for r in self._sites().get(site, []):
            groups.setdefault(r.shape, []).append(r)
        return {s: groups[s] for s in sorted(groups, key=_shape_order)}

    @staticmethod
    def track(records: Iterable[WaitRecord], quantile: float = 0.95, confidence: float = 0.95,
              alarm: float = 0.01) -> WaitBounds:
        """A :class:`WaitBounds` tracker fed the records' waits in the given (submission) order."""
        tracker = WaitBounds(quantile, confidence, alarm)
        for r in records:
            tracker.observe(r.wait)
        return tracker

    def bound(self, site: str, cores: int, walltime: float | None, quantile: float = 0.95,
              confidence: float = 0.95, alarm: float = 0.01) -> HistoryBound:
        """The ``quantile`` wait bound at ``confidence`` for a job of this shape on ``site``.

        Tries the job's shape class, then the site's waits of the same cores bucket (any
        walltime), then all the site's waits, and takes the first with a bound after
        change-point trimming. A query without a walltime starts at the cores level, since
        "unknown walltime" is not a shape the job has.
        """
        records = self._sites().get(site, [])
        need = min_history(quantile, confidence)
        if not records:
            known = ", ".join(self.sites()) or "none"
            return HistoryBound(site, None, 0, None, site, 0, quantile, confidence,
                                f"no waits recorded for {site} (sites with history: {known}); read its accounting "
                                f"with `resel history fetch --sites FILE` or import a file with "
                                f"`resel history import --site {site} --sacct FILE`")
        cls = cores_class(cores)
        levels: list[tuple[Level, str, list[WaitRecord]]] = []
        if walltime is not None:
            shape = shape_class(cores, walltime)
            levels.append(("shape", f"{site}/{shape}", [r for r in records if r.shape == shape]))
        levels.append(("cores", f"{site}/{cls}c", [r for r in records if cores_class(r.cores) == cls]))
        levels.append(("site", site, records))
        tried: list[tuple[int, str, str]] = []
        for level, label, group in levels:
            if len(group) >= need:
                tracker = self.track(group, quantile, confidence, alarm)
                if tracker.bound is not None:
                    why = ""
                    if tried:
                        n0, label0, note0 = tried[0]
                        why = (f"too few waits for {label0} ({n0} < {need}{note0}); "
                               f"bound from the coarser group {label}")
                    return HistoryBound(site, tracker.bound, len(tracker.history), level, label, tracker.changes,
                                        quantile, confidence, why)
                tried.append((len(tracker.history), label,
                              f" since its last change point, of {len(group)}"))
            else:
                tried.append((len(group), label, ""))
        (n0, label0, note0), rest = tried[0], tried[1:]
        more = f" ({', '.join(f'{n} for {label}{note}' for n, label, note in rest)})" if rest else ""
        return HistoryBound(site, None, 0, None, levels[0][1], 0, quantile, confidence,
                            f"only {n0} waits for {label0}{note0}{more}; a {_pct(quantile)} bound at "
                            f"{_pct(confidence)} confidence needs {need}")

    def summary(self, site: str | None = None, quantile: float = 0.95, confidence: float = 0.95,
                alarm: float = 0.01) -> list[ClassSummary]:
        """Per site and shape class: history size, median wait, current bound, change points."""
        rows = []
        for s in ([site] if site is not None else self.sites()):
            for shape, group in self.shapes(s).items():
                tracker = self.track(group, quantile, confidence, alarm)
                rows.append(ClassSummary(s, shape, len(group), statistics.median(r.wait for r in group),
                                         tracker.bound, len(tracker.history), tracker.changes))
        return rows
