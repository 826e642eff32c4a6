"""A Slurm site through its command-line tools, over any transport (local or SSH).

:class:`SlurmCLI` builds every command as an argv list (the transport quotes it; no shell
string is ever assembled here), runs it, and hands the output to a parser in
:mod:`.formats`. It holds what it learnt about the site between calls: whether the
site's tools speak ``--json`` (asked first, text formats after a refusal), whether the site
keeps accounting, and the site's UTC offset for the rare text time without a zone.

Every command runs with ``SLURM_TIME_FORMAT=%s`` so text times come back as epoch seconds,
whatever the login node's time zone; ISO times are still understood, in the site's zone.

Queries are sent with ``idempotent=True`` (the transport may resend them after a dropped
connection); ``sbatch`` and ``scancel`` are not, so a lost connection during a submission
surfaces as :class:`~resel.errors.ConnectionLost` and the caller looks for the job by name.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from resel.backends.slurm import formats as fmt
from resel.backends.limit_formats import Limits
from resel.backends.jobs import QueueSnapshot, SnapJob, batches
from resel.backends.slurm.formats import (
    Availability,
    JobInfo,
    Partition,
    SchedulerError,
    SchedulerReplyError,
)
from resel.site_options import check_sbatch_options

__all__ = ["SchedulerError", "SchedulerReplyError", "SlurmCLI"]

_PARTITION = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_ACCOUNT = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_JOB_ID = re.compile(r"\d+(?:_\d+)?(?:\+\d+)?\Z")
_NAME_BAD = re.compile(r"[\x00-\x1f\x7f]")


def _check_word(kind: str, value: str | None, pattern: re.Pattern[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise SchedulerError(f"{kind} {value!r} is not a valid Slurm {kind} name "
                             "(letters, digits, '_', '.', '-')")
    return value


def check_job_ids(ids: Iterable[str]) -> list[str]:
    """Job ids as strings, refusing anything that is not a Slurm job id (``123``, ``123_4``)."""
    out = []
    for jid in ids:
        text = str(jid).strip()
        if not _JOB_ID.match(text):
            raise SchedulerError(f"{jid!r} is not a Slurm job id")
        out.append(text)
    return out


def check_job_name(name: str) -> str:
    """Slurm job names are one line of printable text; resel finds its pilots by them."""
    if not isinstance(name, str) or not name or _NAME_BAD.search(name):
        raise SchedulerError(f"job name {name!r} must be non-empty printable text on one line")
    return name


def walltime_minutes(walltime: float) -> int:
    """sbatch's ``--time`` in whole minutes, rounded up so the job never gets less than asked."""
    if not walltime or walltime <= 0 or math.isinf(walltime) or math.isnan(walltime):
        raise SchedulerError(f"walltime must be a positive number of seconds, not {walltime!r}")
    return max(1, math.ceil(walltime / 60.0 - 1e-9))


#: SchedulerType → the policy of resel.sim.policies that models it (see scheduler_policy)
_POLICY_OF = {"sched/backfill": "conservative", "sched/builtin": "fcfs"}

#: pending reasons of jobs that only wait for cores (and their turn); any other reason — held,
#: dependency, begin time, a QOS or association limit, a down partition — keeps a job waiting
#: whatever the queue does, so the twin leaves it out (and says so)
_WAITING_FOR_CORES = {"none", "priority", "resources", ""}


def _id_key(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0].split("+")[0]
    return (int(head) if head.isdigit() else 0, job_id)


def snapshot_of(part: Partition, jobs: Iterable[JobInfo], policy: str, now: float) -> QueueSnapshot:
    """The twin's view of one partition's queue from the jobs squeue listed (pure), in Slurm's own words (``native``):
    the twin tells a suspended or completing job from a running one.

    Running jobs' elapsed time is ``now`` minus their start: resel's clock against the
    controller's, so the two are assumed synchronised (NTP). Pending jobs go in priority order
    (higher first), then by submission; those waiting for something other than cores are
    left out, and every such choice is written into the snapshot's notes.
    """
    scope = part.name
    running: list[SnapJob] = []
    pending: list[JobInfo] = []
    left_out: Counter[str] = Counter()
    for job in jobs:
        if job.partition and scope not in job.partition.split(","):
            continue
        if job.cpus is None or job.cpus < 1:
            left_out["its CPU count is not known"] += 1
        elif job.native in ("RUNNING", "CONFIGURING"):
            elapsed = max(0.0, now - job.start) if job.start else 0.0
            running.append(SnapJob(job.cpus, job.time_limit, elapsed, job.job_id, job.user))
        elif job.native == "COMPLETING":
            left_out["completing (ending now)"] += 1
        elif job.native == "SUSPENDED":
            left_out["suspended"] += 1
        elif job.native == "PENDING":
            reason = (job.reason or "None").strip()
            if reason.lower() in _WAITING_FOR_CORES:
                pending.append(job)
            else:
                left_out[f"pending for {reason}"] += 1
    notes = [f"{n} job(s) left out: {why}" for why, n in sorted(left_out.items())]
    if any(j.priority is None for j in pending):
        notes.append("some pending jobs have no priority: ordered by submission")
    pending.sort(key=lambda j: (-(j.priority or 0.0), j.submit or math.inf, _id_key(j.job_id)))
    unlimited = sum(1 for j in (*running, *pending) if j.time_limit is None)
    if unlimited:
        notes.append(f"{unlimited} job(s) without a time limit given the partition's maximum"
                     + ("" if part.max_time else ", which it does not have: they cannot be simulated"))
    outside = part.total_cpus - part.idle_cpus - sum(j.cores for j in running)
    if outside > 0:
        notes.append(f"{outside} busy core(s) of partition {scope} belong to no job listed in it "
                     "(another partition shares its nodes?): taken as free")
    return QueueSnapshot(
        site=scope, taken_at=now, total_cores=part.total_cpus, running=tuple(running),
        pending=tuple(SnapJob(j.cpus or 0, j.time_limit, 0.0, j.job_id, j.user) for j in pending),
        policy=policy, default_limit=part.max_time or None, notes=tuple(notes))


#: job states a queue snapshot reads (the rest have left the queue)
QUEUE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})


class SlurmCLI:
    """Slurm via sinfo/squeue/sbatch/scancel/sacct on the site's login node.

    ``env`` is added to every command's environment (e.g. ``{"SLURM_CONF": ...}`` for a
    cluster that is not the login node's default); ``partition``, ``account`` and ``qos`` go to
    every submission (``-p``/``-A``/``-q``) and restrict :meth:`availability` to that
    partition; ``extra_sbatch`` are further sbatch options from the site file. Jobs are
    submitted ``--no-requeue`` unless ``requeue`` (the site's ``requeue = true``).
    ``use_json=False`` starts in text mode (the mode a site without ``--json`` falls into).
    """

    scheduler = "slurm"

    def __init__(self, transport: Any, *, env: Mapping[str, str] | None = None,
                 partition: str | None = None, account: str | None = None,
                 qos: str | None = None, extra_sbatch: Sequence[str] = (),
                 use_json: bool = True, timeout: float = 60.0, requeue: bool = False):
        self.transport = transport
        self.env = dict(env or {})
        self.partition = _check_word("partition", partition, _PARTITION)
        self.account = _check_word("account", account, _ACCOUNT)
        self.qos = _check_word("qos", qos, _ACCOUNT)
        for _, why in check_sbatch_options(list(extra_sbatch))[:1]:
            raise SchedulerError(f"extra sbatch option refused: {why}")
        self.extra_sbatch = tuple(extra_sbatch)
        #: pilots are submitted --no-requeue unless the site asks otherwise: a requeued or
        #: relaunched pilot starts a new agent on its predecessor's half-done attempts
        self.requeue = bool(requeue)
        self.timeout = timeout
        #: per tool: does this site's version speak --json? (learnt from its first refusal)
        self.json = {"sinfo": use_json, "squeue": use_json, "sacct": use_json}
        #: False once sacct said accounting is disabled: never asked again
        self.accounting_enabled: bool | None = None
        self._version: str | None = None
        self._tz: tzinfo | None = None
        self._scheduler_type: str | None = None
        #: True once the site file's SLURM_CONF was seen on the site (:meth:`_check_conf`)
        self._conf_seen = "SLURM_CONF" not in self.env

    def __repr__(self) -> str:
        return f"SlurmCLI({self.transport!r}, partition={self.partition!r})"

    # ------------------------------------------------------------------ running commands

    def _run(self, argv: Sequence[str], *, idempotent: bool, input: str | None = None,
             time_format: str = "%s") -> Any:
        """``argv`` on the site, its times printed as epochs (``SLURM_TIME_FORMAT=%s``) unless a
        command cannot take that (``sacct --json`` on 22.05, see :meth:`_sacct`)."""
        if not self._conf_seen:
            self._check_conf()
        env = {**self.env, "SLURM_TIME_FORMAT": time_format}
        return self.transport.run(list(argv), env=env, input=input, timeout=self.timeout,
                                  idempotent=idempotent)

    def _check_conf(self) -> None:
        """Refuse at once a ``SLURM_CONF`` (the site's ``access.env``) that is not on the site.

        Why: every Slurm command retries a configuration file it cannot stat for 60 s before it
        gives up ("retrying in 1sec up to 60sec"), so a mistyped path made `resel plan` take three
        minutes to say the site is unreachable. A path that is there is not checked again; one
        that is missing is checked before each command (it may be mounted later). A relative
        path, or a transport that cannot tell, is left to Slurm."""
        conf = self.env["SLURM_CONF"]
        if not conf.startswith("/"):
            self._conf_seen = True
            return
        try:
            there = self.transport.exists(conf)
        except Exception:            # noqa: BLE001 - cannot tell: Slurm will say
            return
        if there:
            self._conf_seen = True
            return
        raise SchedulerError(f"SLURM_CONF {conf} does not exist on the site", command=f"SLURM_CONF={conf}",
                             reply=None, hint="fix SLURM_CONF in the site's access.env in the sites file "
                             "(the cluster's slurm.conf as the login node sees it), then `resel sites check`")

    @staticmethod
    def _failed(argv: Sequence[str], done: Any, what: str | None = None) -> SchedulerError:
        said = (done.stderr or done.stdout or "").strip() or f"exit status {done.returncode}"
        command = shlex.join(argv)
        hint = None
        if done.returncode == 127:
            hint = ("the Slurm tools are not on the PATH of the site's login shell; "
                    "check the site's access settings")
        elif re.search(r"Unable to contact slurm controller|Connection refused|"
                       r"Could not establish a configuration source|fetch_config", said, re.IGNORECASE):
            hint = ("the scheduler did not answer; check that Slurm is up and, for a non-default "
                    "cluster, that SLURM_CONF is set in the site's env")
        return SchedulerError(f"{what or command} failed: {said}", command=command, reply=said,
                              hint=hint)

    def _query(self, argv: Sequence[str]) -> str:
        done = self._run(argv, idempotent=True)
        if done.returncode != 0:
            raise self._failed(argv, done)
        return done.stdout

    def _json_or_text(self, tool: str, json_argv: Sequence[str],
                      text_argv: Sequence[str]) -> tuple[str, str]:
        """Run the JSON form if the site speaks it, else (and from then on) the text form."""
        if self.json[tool]:
            done = self._run(json_argv, idempotent=True)
            if done.returncode == 0:
                return "json", done.stdout
            if not fmt.json_unsupported(done.stderr):
                raise self._failed(json_argv, done)
            self.json[tool] = False       # remembered for this site: no second refusal
        return "text", self._query(text_argv)

    def site_tz(self) -> tzinfo:
        """The login node's zone (``date +%z``), for text times Slurm prints without one."""
        if self._tz is None:
            self._tz = fmt.parse_utc_offset(self._query(["date", "+%z"]))
        return self._tz

    def _tz_for(self, text: str) -> tzinfo | None:
        """The site's zone, but only for a reply holding an ISO time: epochs need no ``date``."""
        return self.site_tz() if re.search(r"\d{4}-\d\d-\d\dT\d\d:", text) else None

    # ------------------------------------------------------------------ queries

    def version(self) -> str:
        """The Slurm release (``sinfo --version``), asked once."""
        if self._version is None:
            self._version = fmt.parse_version(self._query(["sinfo", "--version"]))
        return self._version

    def partitions(self) -> tuple[list[Partition], list[fmt.NodeCpus] | None]:
        """All (visible) partitions with their current CPU counts, and the nodes if known."""
        kind, out = self._json_or_text("sinfo", ["sinfo", "--json"],
                                       ["sinfo", "-h", "-o", fmt.SINFO_TEXT_FORMAT])
        if kind == "text":
            return fmt.parse_sinfo_text(out), None
        doc = fmt.load_json(out, "sinfo --json")
        self._version = self._version or fmt.slurm_release(doc)
        metas, nodes = fmt.parse_sinfo_json(doc)
        if not metas or not any(m.default for m in metas.values()):
            # ≤ v0.0.38 lists only nodes, and data_parser v0.0.40–v0.0.44 (24.11's default,
            # 26.05's on request) skip the partition flags (no DEFAULT): the configuration comes
            # from scontrol's text. v0.0.45 (26.05's default) flags the default again.
            cmd = ["scontrol", "-o", "show", "partition"]
            metas = fmt.parse_scontrol_partitions(self._query(cmd), shlex.join(cmd)) or metas
        return fmt.combine_partitions(metas, nodes), nodes

    def _check_partition(self, parts: Sequence[Partition]) -> None:
        if self.partition and self.partition not in {p.name for p in parts}:
            have = ", ".join(p.name for p in parts) or "(none)"
            raise SchedulerError(f"partition {self.partition} not found; the site has: {have}",
                                 hint="set the site's `partition` to one of these")

    def availability(self) -> Availability:
        """Free and total cores and queue length, for the partition resel submits to."""
        parts, nodes = self.partitions()
        self._check_partition(parts)
        jobs = self._all_jobs()
        version = self._version or self.version()      # JSON replies carry it; text does not
        return fmt.make_availability(self.scheduler, version, parts, jobs.values(), time.time(),
                                     target=self.partition, nodes=nodes)

    def scheduler_policy(self) -> str:
        """The twin's policy for this site, from ``scontrol show config``'s ``SchedulerType``.

        ``sched/backfill`` is conservative backfilling, not EASY: each pass Slurm plans every
        pending job in priority order on the availability profile and starts a lower-priority
        job early only where that delays no higher-priority job's planned start (the
        reservation EASY keeps for the head alone). ``sched/builtin`` starts jobs strictly in
        priority order: FCFS. Anything else is refused rather than guessed.
        """
        if self._scheduler_type is None:
            cmd = ["scontrol", "show", "config"]
            self._scheduler_type = fmt.parse_scheduler_type(self._query(cmd), shlex.join(cmd))
        kind = self._scheduler_type
        if kind in _POLICY_OF:
            return _POLICY_OF[kind]
        raise SchedulerError(f"the site's SchedulerType is {kind}; resel can only model "
                             f"{' and '.join(_POLICY_OF)}")

    def queue_snapshot(self) -> QueueSnapshot:
        """The queue of the partition resel submits to (the configured one, else the default):
        running and pending jobs of every user, pending ones in priority order, for the twin
        (:mod:`resel.models.twin`).

        Pending jobs that cannot start whatever the queue does (held, waiting on a dependency,
        a begin time, a limit…) are left out, and the snapshot's notes say so. Jobs without a
        time limit get the partition's maximum. A queue that cannot be read raises
        :class:`SchedulerError` (:class:`~resel.errors.TransportError` where the site does not
        answer at all): a plan must say "unreadable", never guess.
        """
        parts, _ = self.partitions()
        self._check_partition(parts)
        scope = self.partition or next((p.name for p in parts if p.default), None)
        if scope is None:
            raise SchedulerError("the site has no default partition; set the site's `partition`",
                                 hint="the queue snapshot needs one partition to read")
        part = next(p for p in parts if p.name == scope)
        policy = self.scheduler_policy()
        jobs = self._queue_jobs()
        return snapshot_of(part, jobs.values(), policy, time.time())

    def _queue_jobs(self) -> dict[str, JobInfo]:
        """All users' pending and running jobs, with priorities (the text form asks for %Q).

        Filtered here too: Slurm 22.05's ``squeue --json`` ignores ``--states`` and lists
        finished jobs, which the snapshot must not count (nor note as unsized)."""
        jobs = self._squeue(["--states=" + ",".join(sorted(QUEUE_STATES))], fmt.QUEUE_TEXT_FORMAT,
                            fmt.parse_queue_text)
        return {jid: j for jid, j in jobs.items() if j.native in QUEUE_STATES}

    def _all_jobs(self, user: str | None = None) -> dict[str, JobInfo]:
        # -t all: the text form otherwise hides finished jobs; 22.05's --json ignores the
        # filters (and lists every job anyway), later versions honour them
        return self._squeue(["--states=all"] + (["-u", user] if user else []), fmt.SQUEUE_TEXT_FORMAT,
                            fmt.parse_squeue_text)

    def _squeue(self, filters: list[str], text_format: str, parse_text) -> dict[str, JobInfo]:
        """``squeue --json`` with ``filters``, or its text form in ``text_format`` read by
        ``parse_text`` where the JSON form is missing or broken."""
        kind, out = self._json_or_text(
            "squeue", ["squeue", "--json", *filters], ["squeue", "-h", *filters, "-o", text_format])
        if kind == "json":
            doc = fmt.load_json(out, "squeue --json")
            self._version = self._version or fmt.slurm_release(doc)
            return fmt.parse_jobs_json(doc)
        return parse_text(out, self._tz_for(out))

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        """Jobs by id, filtered by ids, user and name prefix.

        With ``ids`` (a pilot poll) only those jobs are asked for, never every user's queue:
        ``squeue --jobs=…`` in batches of :data:`~resel.backends.jobs.POLL_BATCH`, in squeue's text form
        (Slurm 22.05's ``--json`` ignores ``--jobs`` and lists every job), and ``sacct`` for
        the ids squeue no longer lists — a job that ended more than ``MinJobAge`` seconds ago
        is still reported with its final state where the site keeps accounting. Without ids
        (finding a pilot by name after a crash) this user's jobs are listed (``--me``), or
        ``user``'s; with neither, every job the controller lists.
        """
        wanted = check_job_ids(ids) if ids is not None else None
        if wanted is not None and not wanted:
            return {}
        if user is not None:
            _check_word("user", user, _ACCOUNT)
        if wanted is not None:
            jobs = self._jobs_by_id(sorted(set(wanted)))
        elif name_prefix is not None and user is None:
            jobs = self._listed(["--me"])
        else:
            jobs = self._all_jobs(user)
        return {jid: j for jid, j in jobs.items()
                if (wanted is None or jid in wanted)
                and (user is None or j.user == user)
                and (name_prefix is None or j.name.startswith(name_prefix))}

    def _listed(self, selection: Sequence[str]) -> dict[str, JobInfo]:
        """``squeue -h --states=all SELECTION`` in the text form; {} where squeue says the
        (only) job asked for is not known any more."""
        argv = ["squeue", "-h", "--states=all", *selection, "-o", fmt.SQUEUE_TEXT_FORMAT]
        done = self._run(argv, idempotent=True)
        if done.returncode != 0:
            if re.search(r"Invalid job id", done.stderr, re.IGNORECASE):
                return {}
            raise self._failed(argv, done)
        return fmt.parse_squeue_text(done.stdout, self._tz_for(done.stdout))

    def _jobs_by_id(self, wanted: list[str]) -> dict[str, JobInfo]:
        """Our jobs by id: squeue for those still listed, sacct for those that left it."""
        found: dict[str, JobInfo] = {}
        for batch in batches(wanted):
            found.update(self._listed(["--jobs=" + ",".join(batch)]))
        missing = [jid for jid in wanted if jid not in found]
        if missing and self.accounting_enabled is not False:
            for batch in batches(missing):
                found.update(self.accounting(batch))
        return found

    def start_estimates(self, ids: Iterable[str]) -> dict[str, float | None]:
        """The scheduler's expected start of pending jobs (``squeue --start``); None where it
        has no estimate (yet), or the job is not pending."""
        wanted = check_job_ids(ids)
        if not wanted:
            return {}
        argv = ["squeue", "--start", "-h", "-j", ",".join(wanted), "-o", "%i|%S"]
        done = self._run(argv, idempotent=True)
        if done.returncode != 0 and re.search(r"Invalid job id", done.stderr, re.IGNORECASE):
            argv = ["squeue", "--start", "-h", "-o", "%i|%S"]   # one id is gone: ask for all
            done = self._run(argv, idempotent=True)
        if done.returncode != 0:
            raise self._failed(argv, done)
        found = fmt.parse_squeue_start(done.stdout, self._tz_for(done.stdout))
        return {jid: found.get(jid) for jid in wanted}

    def accounting(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        """Finished jobs from accounting (``sacct``); {} on a site that keeps none.

        A site with ``AccountingStorageType=none`` answers "accounting storage is disabled":
        remembered, and never asked again.
        """
        wanted = check_job_ids(ids)
        if not wanted:
            return {}
        jobs = ",".join(wanted)
        found = self._sacct(["-X", "-j", jobs])
        return {jid: j for jid, j in found.items() if jid in set(wanted)}

    def history(self, since: float) -> dict[str, JobInfo]:
        """Every user's jobs (allocations, not steps) since ``since`` (epoch) from accounting
        (``sacct -a -X -S``); {} on a site that keeps none.

        The start time is given in the site's own zone: sacct reads a bare time as local.
        """
        if not math.isfinite(since):
            raise SchedulerError(f"history needs a finite start time, not {since!r}")
        if self.accounting_enabled is False:
            return {}
        start = datetime.fromtimestamp(since, self.site_tz()).strftime("%Y-%m-%dT%H:%M:%S")
        return self._sacct(["-a", "-X", "-S", start, "-E", "now"], fmt.SACCT_HISTORY_FIELDS)

    def _sacct(self, selection: Sequence[str],
               fields: Sequence[str] = fmt.SACCT_FIELDS) -> dict[str, JobInfo]:
        """``sacct`` with ``--json`` where the site speaks it, else ``-P`` with ``fields``; {}
        (and remembered) where accounting is disabled."""
        if self.accounting_enabled is False:
            return {}
        json_argv = ["sacct", "--json", *selection]
        text_argv = ["sacct", "-P", "-n", *selection, "-o", ",".join(fields)]
        for argv, kind in ((json_argv, "json"), (text_argv, "text")):
            if kind == "json" and not self.json["sacct"]:
                continue
            # Slurm 22.05's sacct --json reads back its own default -S/-E printed in
            # SLURM_TIME_FORMAT, and %s fails that ("Unable to parse time format", found on the
            # testbed's tbb): JSON times are epochs anyway, so it gets the standard format.
            done = self._run(argv, idempotent=True, time_format="%s" if kind == "text" else "standard")
            said = done.stderr + done.stdout
            if fmt.accounting_disabled(said):
                self.accounting_enabled = False
                return {}
            if done.returncode != 0:
                if kind == "json" and fmt.json_unsupported(done.stderr):
                    self.json["sacct"] = False
                    continue
                raise self._failed(argv, done)
            self.accounting_enabled = True
            if kind == "json":
                return fmt.parse_sacct_json(fmt.load_json(done.stdout, "sacct --json", empty_ok=True))
            return fmt.parse_sacct_text(done.stdout, fields, self._tz_for(done.stdout))
        return {}

    def cpu_info(self) -> dict[str, Any]:
        """The login node's CPU: model, base/max MHz, sockets and cores (``lscpu -J``, else
        ``/proc/cpuinfo``). Compute nodes may differ; this is a first guess for LIM's clock."""
        done = self._run(["lscpu", "-J"], idempotent=True)
        if done.returncode == 0:
            try:
                return fmt.parse_lscpu_json(done.stdout)
            except SchedulerError:
                pass                     # an lscpu too old for -J prints text: try cpuinfo
        return fmt.parse_cpuinfo(self._query(["cat", "/proc/cpuinfo"]))

    # ------------------------------------------------------------------ the user's limits

    def user_name(self) -> str:
        """The login this site runs our commands as (``id -un``), asked once."""
        if getattr(self, "_user", None) is None:
            self._user = self._query(["id", "-un"]).strip()
            _check_word("user", self._user, _ACCOUNT)
        return self._user

    def limits(self) -> tuple[Limits, list[str]]:
        """The user's association and QOS limits (``sacctmgr -P show assoc`` / ``show qos``),
        and notes on what could not be read. A cluster without slurmdbd has no associations:
        its limits are unknown (a note says so), not zero."""
        from resel.backends import limit_formats as lf
        user = self.user_name()
        argv = ["sacctmgr", "-P", "show", "assoc", "where", f"user={user}"]
        done = self._run(argv, idempotent=True)
        said = (done.stdout + done.stderr).strip()
        if done.returncode != 0 or "accounting_storage" in said or "slurmdbd" in said.lower():
            first = said.splitlines()[0] if said else f"exit status {done.returncode}"
            return lf.Limits(), [f"no association limits: `{shlex.join(argv)}` said: {first}"]
        assoc, qos_names = lf.slurm_assoc_limits(lf.parse_sacctmgr(done.stdout, shlex.join(argv)), user,
                                                 account=self.account, partition=self.partition,
                                                 command=shlex.join(argv))
        notes: list[str] = []
        qos = self.qos or (qos_names[0] if qos_names else None)
        if qos:
            argv = ["sacctmgr", "-P", "show", "qos", "where", f"name={qos}"]
            done = self._run(argv, idempotent=True)
            if done.returncode == 0:
                assoc = assoc.tightest(lf.slurm_qos_limits(lf.parse_sacctmgr(done.stdout, shlex.join(argv)), qos,
                                                           shlex.join(argv)))
            else:
                notes.append(f"QOS {qos} unreadable: {(done.stderr or done.stdout).strip()[:200]}")
        return assoc, notes

    # ------------------------------------------------------------------ actions

    def _resources(self, cores: int, walltime: float) -> list[str]:
        """One task with ``cores`` CPUs: a pilot is one process (the agent) that runs tasks
        on the cores it was given, so all of them must be on one node — ``-n cores`` could
        spread them over several nodes the agent cannot reach."""
        if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
            raise SchedulerError(f"cores must be a positive whole number, not {cores!r}")
        argv = ["--ntasks=1", f"--cpus-per-task={cores}", f"--time={walltime_minutes(walltime)}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        if self.account:
            argv.append(f"--account={self.account}")
        if self.qos:
            argv.append(f"--qos={self.qos}")
        return argv + list(self.extra_sbatch)

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None) -> str:
        """Submit a batch script (sent on stdin, so it needs no file on the site); the job id.

        Not idempotent: if the connection drops after sending, ConnectionLost is raised and the
        caller finds out whether the job exists by its name.
        """
        check_job_name(name)
        if not workdir or _NAME_BAD.search(workdir):
            raise SchedulerError(f"work directory {workdir!r} must be a non-empty path on one line")
        argv = ["sbatch", "--parsable", f"--job-name={name}", *self._resources(cores, walltime),
                "--requeue" if self.requeue else "--no-requeue", f"--chdir={workdir}"]
        if output:
            if _NAME_BAD.search(output):
                raise SchedulerError(f"output path {output!r} must be on one line")
            argv.append(f"--output={output}")
        done = self._run(argv, idempotent=False, input=script)
        if done.returncode != 0:
            raise fmt.sbatch_error(done.stderr or done.stdout, shlex.join(argv), done.returncode)
        return fmt.parse_sbatch(done.stdout, shlex.join(argv))

    def test_only(self, cores: int, walltime: float) -> float | None:
        """When a job of this size would start (``sbatch --test-only``: nothing is queued)."""
        argv = ["sbatch", "--test-only", *self._resources(cores, walltime)]
        done = self._run(argv, idempotent=True, input="#!/bin/sh\ntrue\n")
        if done.returncode != 0:
            raise fmt.sbatch_error(done.stderr or done.stdout, shlex.join(argv), done.returncode)
        said = done.stderr + "\n" + done.stdout
        return fmt.parse_test_only(said, self._tz_for(said), shlex.join(argv)).start

    def cancel(self, ids: Sequence[str]) -> None:
        """Cancel jobs; jobs that already ended are not an error (that is what was wanted)."""
        wanted = check_job_ids(ids)
        if not wanted:
            return
        argv = ["scancel", *wanted]
        done = self._run(argv, idempotent=False)
        problems = fmt.scancel_problems(done.stderr)
        if problems or (done.returncode != 0 and not done.stderr.strip()):
            said = "; ".join(problems) or f"exit status {done.returncode}"
            raise SchedulerError(f"scancel {' '.join(wanted)} failed: {said}",
                                 command=shlex.join(argv), reply=done.stderr.strip())
