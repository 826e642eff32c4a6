"""A Slurm site through slurmrestd (Slurm's REST API), over HTTP with a JWT.

For sites that offer slurmrestd but no SSH login (or where one HTTP request per poll is
cheaper than a login). The same methods as :class:`~resel.backends.slurm.SlurmCLI`, so the
coordinator does not care which it has; the replies are the same JSON ``sinfo``/``squeue``
print, parsed by :mod:`.slurm_formats`.

Authentication is slurmrestd's JWT scheme: headers ``X-SLURM-USER-NAME`` and
``X-SLURM-USER-TOKEN`` (a token from ``scontrol token``, which expires). The API version
is part of every path (``/slurm/v0.0.38/...``) and must be one the site's slurmrestd serves:
v0.0.38 for Slurm 22.05; v0.0.39+ for 23.02+ (where the job description's ``environment``
became a list of ``NAME=value`` strings).

slurmrestd has no "will run" endpoint, so :meth:`SlurmREST.test_only` answers None; the
pending jobs' ``start_time`` (the scheduler's backfill estimate) serves
:meth:`SlurmREST.start_estimates`. The queue twin's snapshot (:meth:`SlurmREST.queue_snapshot`)
is read as SlurmCLI reads it, from ``/partitions``, ``/nodes`` and ``/jobs``; no endpoint
(v0.0.38: ``/diag``, ``/ping``, ``/jobs``, ``/nodes``, ``/partitions``, ``/licenses``,
``/reservations``) reports the ``SchedulerType``, so the policy is inferred from ``/diag``'s
backfill statistics where they show the backfill plugin at work, and assumed otherwise — the
snapshot's notes say which.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import requests
from resel.backends import slurm_formats as fmt
from resel.backends.slurm import QUEUE_STATES, check_job_ids, check_job_name, snapshot_of, walltime_minutes
from resel.backends.slurm_formats import (
    Availability,
    JobInfo,
    Partition,
    SchedulerError,
    SchedulerReplyError,
)
from resel.models.twin import QueueSnapshot

from resel.errors import TransportError

__all__ = ["SlurmREST"]

_VERSION = re.compile(r"v0\.0\.\d+\Z")
_WORD = re.compile(r"[A-Za-z0-9_.\-]+\Z")
#: the states SlurmCLI's snapshot asks squeue for
_AUTH_HINT = ("check the site's rest_user and token: tokens from `scontrol token` expire "
              "(lifespan=SECONDS sets how long); get a new one")


class SlurmREST:
    """Slurm via slurmrestd. ``token`` is the JWT (without ``SLURM_JWT=``)."""

    scheduler = "slurmrest"

    def __init__(self, base_url: str, user: str, token: str, *, api_version: str = "v0.0.38",
                 partition: str | None = None, account: str | None = None, qos: str | None = None,
                 environment: Mapping[str, str] | None = None, timeout: float = 30.0,
                 session: requests.Session | None = None, requeue: bool = False):
        if not re.match(r"https?://", base_url or ""):
            raise SchedulerError(f"slurmrestd URL {base_url!r} must start with http:// or https://")
        if not _VERSION.match(api_version):
            raise SchedulerError(f"API version {api_version!r} must look like v0.0.38")
        for kind, value in (("user", user), ("partition", partition), ("account", account), ("qos", qos)):
            if value is not None and not _WORD.match(value):
                raise SchedulerError(f"{kind} {value!r} is not a valid Slurm name")
        if not token or "\n" in token:
            raise SchedulerError("a slurmrestd token is required (from `scontrol token`)")
        self.base_url = base_url.rstrip("/")
        self.user = user
        self.api_version = api_version
        self.partition, self.account, self.qos = partition, account, qos
        self.requeue = bool(requeue)      # the job description's "requeue" (sbatch --[no-]requeue)
        #: the environment of submitted jobs: slurmrestd passes none of its own, and Slurm
        #: refuses a job without one
        self.environment = dict(environment or {"PATH": "/usr/local/bin:/usr/bin:/bin"})
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.headers.update({"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})
        self._version: str | None = None
        #: True once /diag showed the backfill plugin at work (then SchedulerType is known)
        self._backfill_seen = False

    def __repr__(self) -> str:
        return f"SlurmREST({self.base_url!r}, user={self.user!r}, api={self.api_version})"

    # ------------------------------------------------------------------ HTTP

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], list[str]]:
        """One API call → (HTTP status, JSON reply, its error messages); only transport
        failures and unreadable replies raise here."""
        url = f"{self.base_url}/slurm/{self.api_version}/{path}"
        what = f"{method} {url}"
        try:
            reply = self.session.request(method, url, json=body, timeout=self.timeout)
        except requests.Timeout as e:
            raise TransportError(f"slurmrestd at {self.base_url}: no reply to {method} /{path} "
                                 f"within {self.timeout:g} s") from e
        except requests.ConnectionError as e:
            raise TransportError(f"cannot reach slurmrestd at {self.base_url} ({e.__class__.__name__}); "
                                 "check the URL and that slurmrestd is running") from e
        except requests.RequestException as e:
            raise TransportError(f"slurmrestd at {self.base_url}: {method} /{path} failed: {e}") from e
        try:
            doc = reply.json()
        except ValueError:
            text = reply.text.strip()[:160]
            if reply.status_code == 404:
                raise SchedulerError(f"{what}: not found ({text!r})", command=what,
                                     hint=f"this slurmrestd may not serve API {self.api_version}; "
                                          "see its /openapi/v3 for the versions it serves") from None
            if reply.status_code in (401, 403):
                raise SchedulerError(f"{what}: HTTP {reply.status_code} {text!r}", command=what,
                                     hint=_AUTH_HINT) from None
            raise SchedulerReplyError(what, f"HTTP {reply.status_code}, not JSON: {text!r}") from None
        if not isinstance(doc, dict):
            raise SchedulerReplyError(what, f"expected a JSON object, got {type(doc).__name__}")
        errors = fmt.error_texts(doc)
        if not errors and reply.status_code >= 400:
            errors = [f"HTTP {reply.status_code}"]
        return reply.status_code, doc, errors

    def _error(self, method: str, path: str, status: int, errors: list[str]) -> SchedulerError:
        said = "; ".join(errors)
        auth = status in (401, 403) or re.search(
            r"auth|slurmctld config is unable to load|Unspecified error", said, re.IGNORECASE)
        return SchedulerError(f"slurmrestd {method} /{path}: {said}", command=f"{method} /{path}",
                              reply=said, hint=_AUTH_HINT if auth else None)

    def _request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One API call → its JSON; errors in the reply's ``errors`` → SchedulerError."""
        status, doc, errors = self._call(method, path, body)
        if errors:
            raise self._error(method, path, status, errors)
        return doc

    # ------------------------------------------------------------------ queries

    def version(self) -> str:
        """The Slurm release behind slurmrestd (from ``/ping``'s meta), asked once."""
        if self._version is None:
            doc = self._request("GET", "ping")
            release = fmt.slurm_release(doc)
            if not release:
                raise SchedulerReplyError("GET /ping", "no Slurm release in meta")
            self._version = release
        return self._version

    def _partitions(self) -> tuple[list[Partition], list[fmt.NodeCpus]]:
        """Partitions (``/partitions``) with their CPUs (``/nodes``); the configured
        partition must be one of them."""
        metas = fmt.parse_partitions_json(self._request("GET", "partitions"), "GET /partitions")
        nodes_doc = self._request("GET", "nodes")
        self._version = self._version or fmt.slurm_release(nodes_doc)
        nodes = fmt.parse_nodes_json(nodes_doc, "GET /nodes")
        if self.partition and self.partition not in metas:
            raise SchedulerError(f"partition {self.partition} not found; the site has: "
                                 f"{', '.join(metas) or '(none)'}",
                                 hint="set the site's `partition` to one of these")
        return fmt.combine_partitions(metas, nodes), nodes

    def availability(self) -> Availability:
        """Partitions (``/partitions``), CPUs (``/nodes``) and the queue (``/jobs``)."""
        parts, nodes = self._partitions()
        jobs = self._all_jobs()
        return fmt.make_availability(self.scheduler, self._version, parts, jobs.values(),
                                     time.time(), target=self.partition, nodes=nodes)

    def scheduler_policy(self) -> str:
        """The twin's policy for this site: ``conservative``.

        slurmrestd does not report ``SchedulerType`` (no ``/config`` endpoint; ``/diag`` has
        statistics only), so ``sched/backfill`` — Slurm's default, modelled as conservative
        backfilling (see :meth:`SlurmCLI.scheduler_policy`) — is what a REST site is taken
        to run. :meth:`queue_snapshot` notes whether ``/diag`` confirmed it.
        """
        return "conservative"

    def _policy_note(self) -> str:
        """What the snapshot's policy rests on: ``/diag``'s backfill statistics, where the
        backfill plugin has run (a ``sched/builtin`` site never counts a backfill cycle), else
        nothing but the assumption. Once seen, not asked again."""
        if not self._backfill_seen:
            try:
                stats = self._request("GET", "diag").get("statistics")
            except SchedulerError as e:           # e.g. a site that keeps its statistics private
                return ("policy assumed conservative (sched/backfill, Slurm's default): slurmrestd "
                        f"does not report SchedulerType, and /diag could not be read ({e})")
            stats = stats if isinstance(stats, dict) else {}
            counts = []
            for key in ("bf_cycle_counter", "bf_backfilled_jobs", "bf_when_last_cycle"):
                try:
                    counts.append(fmt.integer(stats.get(key), key, "GET /diag") or 0)
                except SchedulerError:
                    counts.append(0)
            self._backfill_seen = any(n > 0 for n in counts)
        if self._backfill_seen:
            return ("policy conservative: slurmrestd does not report SchedulerType, but /diag shows "
                    "backfill cycles (sched/backfill)")
        return ("policy assumed conservative (sched/backfill, Slurm's default): slurmrestd does not "
                "report SchedulerType and /diag shows no backfill cycle yet")

    def queue_snapshot(self) -> QueueSnapshot:
        """The queue of the partition resel submits to (the configured one, else the default),
        as :meth:`SlurmCLI.queue_snapshot <resel.backends.slurm.SlurmCLI.queue_snapshot>`
        reads it (:func:`~resel.backends.slurm.snapshot_of`), from ``/partitions``,
        ``/nodes`` and ``/jobs``; the policy is :meth:`scheduler_policy`, and a note says
        whether ``/diag`` confirmed it. An unreadable queue raises :class:`SchedulerError`
        (:class:`~resel.errors.TransportError` where slurmrestd does not answer)."""
        parts, _ = self._partitions()
        scope = self.partition or next((p.name for p in parts if p.default), None)
        if scope is None:
            raise SchedulerError("the site has no default partition; set the site's `partition`",
                                 hint="the queue snapshot needs one partition to read")
        part = next(p for p in parts if p.name == scope)
        note = self._policy_note()
        # /jobs also lists recently finished jobs; squeue's --states filter (SlurmCLI) drops them
        jobs = [j for j in self._all_jobs().values() if j.state in QUEUE_STATES]
        snap = snapshot_of(part, jobs, self.scheduler_policy(), time.time())
        return replace(snap, notes=(*snap.notes, note))

    def _all_jobs(self) -> dict[str, JobInfo]:
        return fmt.parse_jobs_json(self._request("GET", "jobs"), "GET /jobs")

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        """Jobs slurmctld still lists (``/jobs``: all users, recently finished included)."""
        wanted = set(check_job_ids(ids)) if ids is not None else None
        if wanted is not None and not wanted:
            return {}
        return {jid: j for jid, j in self._all_jobs().items()
                if (wanted is None or jid in wanted)
                and (user is None or j.user == user)
                and (name_prefix is None or j.name.startswith(name_prefix))}

    def test_only(self, cores: int, walltime: float) -> float | None:
        """slurmrestd cannot ask "when would this start" without queueing a job: None."""
        return None

    def start_estimates(self, ids: Iterable[str]) -> dict[str, float | None]:
        """The backfill scheduler's expected start of pending jobs (their ``start_time``)."""
        wanted = check_job_ids(ids)
        if not wanted:
            return {}
        jobs = self.jobs(wanted)
        return {jid: (jobs[jid].start if jid in jobs and jobs[jid].state == "PENDING" else None)
                for jid in wanted}

    def accounting(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        """slurmdbd's REST side is a separate service resel does not use: {}."""
        return {}

    # ------------------------------------------------------------------ actions

    def job_description(self, *, name: str, cores: int, walltime: float, workdir: str,
                        output: str | None = None) -> dict[str, Any]:
        """The ``job`` object of a submission: one task with ``cores`` CPUs, like SlurmCLI."""
        check_job_name(name)
        if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
            raise SchedulerError(f"cores must be a positive whole number, not {cores!r}")
        if not workdir or "\n" in workdir:
            raise SchedulerError(f"work directory {workdir!r} must be a non-empty path on one line")
        old = self.api_version in ("v0.0.36", "v0.0.37", "v0.0.38")
        job: dict[str, Any] = {
            "name": name, "tasks": 1, "cpus_per_task": cores,
            "time_limit": walltime_minutes(walltime), "current_working_directory": workdir,
            # ≤ v0.0.38 takes a {NAME: value} object, later versions a list of NAME=value
            "environment": dict(self.environment) if old else
            [f"{k}={v}" for k, v in self.environment.items()],
        }
        if old:
            # ≤ v0.0.38 reads each key as the sbatch option of that name: "requeue": false
            # still means --requeue; --no-requeue is the (undocumented) key "no_requeue"
            job["requeue" if self.requeue else "no_requeue"] = True
        else:
            job["requeue"] = self.requeue
        if output:
            job["standard_output"] = output
        for key, value in (("partition", self.partition), ("account", self.account), ("qos", self.qos)):
            if value:
                job[key] = value
        return job

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None) -> str:
        """``POST /job/submit``; the job id. Not retried: a timeout may hide a queued job."""
        body = {"job": self.job_description(name=name, cores=cores, walltime=walltime,
                                            workdir=workdir, output=output), "script": script}
        _status, doc, errors = self._call("POST", "job/submit", body)
        jid = doc.get("job_id")
        if jid is None and isinstance(doc.get("result"), dict):      # v0.0.39+
            jid = doc["result"].get("job_id")
        if errors:
            note = None
            if jid is not None:
                # slurmctld queued the job but says it cannot run as asked (e.g. walltime above
                # the partition's MaxTime: error 2015); sbatch would say nothing and leave it
                # pending forever — a pilot that never starts, so it is cancelled
                self.cancel([str(fmt.integer(jid, "job_id", "POST /job/submit"))])
                note = f"slurmctld queued it as job {jid} anyway; it was cancelled"
            raise fmt.sbatch_error("\n".join(errors), "POST /job/submit", note=note)
        n = fmt.integer(jid, "job_id", "POST /job/submit")
        if n is None:
            raise SchedulerReplyError("POST /job/submit", f"no job_id in {str(doc)[:120]!r}")
        return str(n)

    def cancel(self, ids: Sequence[str]) -> None:
        """``DELETE /job/{id}`` for each; a job that already ended is not an error."""
        for jid in check_job_ids(ids):
            try:
                self._request("DELETE", f"job/{jid}")
            except SchedulerError as e:
                if e.reply and fmt.scancel_problems("error: " + e.reply) == []:
                    continue                   # already gone: what cancel wanted
                raise

