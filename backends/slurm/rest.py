"""A Slurm site through slurmrestd (Slurm's REST API), over HTTP with a JWT.

For sites that offer slurmrestd but no SSH login (or where one HTTP request per poll is
cheaper than a login). The same methods as :class:`~resel.backends.slurm.cli.SlurmCLI`, so the
coordinator does not care which it has; the replies are the same JSON ``sinfo``/``squeue``
print, parsed by :mod:`.formats`.

Authentication is slurmrestd's JWT scheme: headers ``X-SLURM-USER-NAME`` and
``X-SLURM-USER-TOKEN`` (a token from ``scontrol token``, which expires). The API version
is part of every path (``/slurm/v0.0.38/...``) and must be one the site's slurmrestd serves:
v0.0.38 for Slurm 22.05; v0.0.39+ for 23.02+ (where the job description's ``environment``
became a list of ``NAME=value`` strings); Slurm 24.11 serves v0.0.40–v0.0.42 and no longer
v0.0.38; Slurm 26.05 serves v0.0.42–v0.0.45 (all four read and submitted through live, on the
testbed's Debian sid root). ``api_version="auto"`` (what sites opened from a sites file use) asks ``/ping`` of each
version resel reads, newest first, once, and keeps the first one served (slurmrestd answers an
unserved version with 404).

The token is a password for the user's whole Slurm account, so it goes to the configured
URL only: no redirect is ever followed (slurmrestd does not redirect). A 3xx reply is an error
that names the URL asked and the ``Location`` given, and the token goes nowhere else. resel once
followed redirects by hand within the same scheme, host and port; a ``Location`` such as
``http://127.0.0.1:18899\\@127.0.0.1:18820/`` passed that check (``urlsplit`` reads host
127.0.0.1:18820, with ``127.0.0.1:18899\\`` as user info) while urllib3 connected to port 18899 —
two parsers never agree on every URL, so none is asked. A plain ``http://`` URL to another
machine than this one sends the token in clear text: resel warns (:class:`InsecureTokenWarning`).
The token file itself must be the user's and readable by nobody else
(:func:`resel.trust.read_secret`, used by :mod:`resel.backends.connect`).

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

import ipaddress
import logging
import re
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit
from dataclasses import replace
from typing import Any

import requests
from resel.backends.slurm import formats as fmt
from resel.backends.slurm.cli import QUEUE_STATES, check_job_ids, check_job_name, snapshot_of, walltime_minutes
from resel.backends.jobs import QueueSnapshot
from resel.backends.slurm.formats import (
    Availability,
    JobInfo,
    JobState,
    Partition,
    SchedulerError,
    SchedulerReplyError,
)

from resel.errors import TransportError
from resel.safe_text import terminal

#: each request at DEBUG: method, URL, HTTP status, seconds (``RESEL_LOG=debug``)
log = logging.getLogger("resel.backends.slurm.rest")

__all__ = ["InsecureTokenWarning", "SlurmREST"]



class InsecureTokenWarning(UserWarning):
    """The slurmrestd token would cross the network unencrypted."""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

_VERSION = re.compile(r"v0\.0\.\d+\Z")
#: HTTP statuses of a refused identity: 511 is what Slurm 24.11's slurmrestd answers (with an
#: empty ``errors`` list) when slurmctld rejects the JWT
_AUTH_STATUS = (401, 403, 511)
#: the API versions resel reads, newest first: what ``api_version="auto"`` tries
API_VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")
_WORD = re.compile(r"[A-Za-z0-9_.\-]+\Z")
#: the states SlurmCLI's snapshot asks squeue for
_AUTH_HINT = ("check the site's rest_user and token: tokens from `scontrol token` expire "
              "(lifespan=SECONDS sets how long); get a new one")


def default_when_unflagged(metas: dict[str, fmt.PartitionMeta], doc: Any
                           ) -> tuple[dict[str, fmt.PartitionMeta], str | None]:
    """The partitions with a default, where ``/partitions`` does not say which one it is; and a
    note saying what was assumed (None where nothing was).

    Slurm 24.11's slurmrestd (API v0.0.40–v0.0.42, seen live) leaves the partition ``flags``
    out of ``/partitions``, so ``DEFAULT`` is never there, and REST has no ``scontrol`` to ask
    instead. A lone partition is taken as the default: a job without a partition can only go
    there (or nowhere, on a cluster with no default, where it is refused at submission). With
    several, the default stays unknown and the note says so.
    """
    if not metas or any(m.default for m in metas.values()):
        return metas, None
    listed = doc.get("partitions") if isinstance(doc, dict) else None
    if any(isinstance(p, dict) and "flags" in p for p in listed or ()):
        return metas, None                         # flags are reported: there is no default
    if len(metas) == 1:
        (name, meta), = metas.items()
        return ({name: replace(meta, default=True)},
                f"slurmrestd does not flag the default partition: its only partition, {name}, taken as the default")
    return metas, ("slurmrestd does not say which partition is the default "
                   f"(no partition flags in /partitions; the site has {', '.join(sorted(metas))})")


class SlurmREST:
    """Slurm via slurmrestd. ``token`` is the JWT (without ``SLURM_JWT=``)."""

    scheduler = "slurmrest"

    def __init__(self, base_url: str, user: str, token: str, *, api_version: str = "v0.0.38",
                 partition: str | None = None, account: str | None = None, qos: str | None = None,
                 environment: Mapping[str, str] | None = None, timeout: float = 30.0,
                 session: requests.Session | None = None, requeue: bool = False):
        if not re.match(r"https?://", base_url or ""):
            raise SchedulerError(f"slurmrestd URL {base_url!r} must start with http:// or https://")
        if api_version != "auto" and not _VERSION.match(api_version):
            raise SchedulerError(f"API version {api_version!r} must look like v0.0.38, or be 'auto'")
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
        #: sent with each request made here, never put in the session (which would send it on
        #: whatever redirect the session follows)
        self._auth = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token}
        scheme, host, _ = _origin(self.base_url)
        if scheme == "http" and not _loopback(host):
            warnings.warn(f"slurmrestd URL {self.base_url} is plain http to another machine: the token "
                          "(a password for your Slurm account) crosses the network unencrypted; use "
                          "https:// or an SSH tunnel to 127.0.0.1", InsecureTokenWarning, stacklevel=2)
        self._version: str | None = None
        #: True once /diag showed the backfill plugin at work (then SchedulerType is known)
        self._backfill_seen = False
        #: what the last /partitions said (or did not say) about the default partition
        self._default_note: str | None = None

    def __repr__(self) -> str:
        return f"SlurmREST({self.base_url!r}, user={self.user!r}, api={self.api_version})"

    # ------------------------------------------------------------------ HTTP

    def api(self) -> str:
        """The API version in use: the configured one, or (``"auto"``) the newest of
        :data:`API_VERSIONS` this slurmrestd serves, found once."""
        if self.api_version == "auto":
            for version in API_VERSIONS:
                status = self._probe(version)
                if status in (401, 403):
                    raise SchedulerError(f"slurmrestd at {self.base_url} refused the token (HTTP {status})",
                                         command=f"GET /slurm/{version}/ping", hint=_AUTH_HINT)
                if status == 200:
                    self.api_version = version
                    break
            else:
                raise SchedulerError(f"slurmrestd at {self.base_url} serves none of the API versions resel reads "
                                     f"({', '.join(reversed(API_VERSIONS))})",
                                     hint="see its /openapi/v3 for the versions it serves")
        return self.api_version

    def _probe(self, version: str) -> int:
        """The HTTP status of ``GET /slurm/{version}/ping`` (404: version not served)."""
        url = f"{self.base_url}/slurm/{version}/ping"
        try:
            reply = self._send("GET", url, None)   # the token per request, never a redirect
            reply.close()
            return reply.status_code
        except requests.Timeout as e:
            raise TransportError(f"slurmrestd at {self.base_url}: no reply to GET /slurm/{version}/ping "
                                 f"within {self.timeout:g} s") from e
        except requests.RequestException as e:
            raise TransportError(f"cannot reach slurmrestd at {self.base_url} ({e.__class__.__name__}); "
                                 "check the URL and that slurmrestd is running") from e

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], list[str]]:
        """One API call → (HTTP status, JSON reply, its error messages); only transport
        failures and unreadable replies raise here."""
        url = f"{self.base_url}/slurm/{self.api()}/{path}"
        what = f"{method} {url}"
        try:
            reply = self._send(method, url, body)
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
            errors = [f"HTTP {reply.status_code}"
                      + (" (authentication refused)" if reply.status_code in _AUTH_STATUS else "")]
        return reply.status_code, doc, errors

    def _send(self, method: str, url: str, body: Any) -> requests.Response:
        """One request to ``url`` and no other: a redirect is never followed (module docstring),
        so the token reaches the configured server only.

        Raises:
            SchedulerError: the reply is a redirect (any 3xx), naming the URL and where it pointed.
        """
        t0 = time.monotonic()
        reply = self.session.request(method, url, json=body, headers=self._auth, timeout=self.timeout,
                                     allow_redirects=False)
        log.debug("slurmrestd: %s %s -> HTTP %d in %.3f s", method, url, reply.status_code,
                  time.monotonic() - t0)     # never the token, never the body (a job script)
        if 300 <= reply.status_code < 400:
            location = reply.headers.get("location", "")
            reply.close()
            shown = terminal(location, lines=False)[:300] or "(none)"
            raise SchedulerError(
                f"slurmrestd at {self.base_url} answered {method} {url} with a redirect (HTTP "
                f"{reply.status_code}, Location {shown}); slurmrestd does not redirect, and resel never "
                "sends the token anywhere but rest_url",
                command=f"{method} {url}", reply=f"HTTP {reply.status_code} Location: {shown}",
                hint="if the site's slurmrestd really is at another address, put that address in the site's rest_url")
        return reply

    def _error(self, method: str, path: str, status: int, errors: list[str]) -> SchedulerError:
        said = "; ".join(errors)
        auth = status in _AUTH_STATUS or re.search(
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
        parts_doc = self._request("GET", "partitions")
        metas = fmt.parse_partitions_json(parts_doc, "GET /partitions")
        metas, self._default_note = default_when_unflagged(metas, parts_doc)
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
        as :meth:`SlurmCLI.queue_snapshot <resel.backends.slurm.cli.SlurmCLI.queue_snapshot>`
        reads it (:func:`~resel.backends.slurm.cli.snapshot_of`), from ``/partitions``,
        ``/nodes`` and ``/jobs``; the policy is :meth:`scheduler_policy`, and a note says
        whether ``/diag`` confirmed it. An unreadable queue raises :class:`SchedulerError`
        (:class:`~resel.errors.TransportError` where slurmrestd does not answer)."""
        parts, _ = self._partitions()
        scope = self.partition or next((p.name for p in parts if p.default), None)
        if scope is None:
            said = self._default_note or "the site has no default partition"
            raise SchedulerError(f"{said}; set the site's `partition`",
                                 hint="the queue snapshot needs one partition to read")
        part = next(p for p in parts if p.name == scope)
        notes = [self._policy_note()]
        if self._default_note and not self.partition:
            notes.append(self._default_note)
        # /jobs also lists recently finished jobs; squeue's --states filter (SlurmCLI) drops them
        jobs = [j for j in self._all_jobs().values() if j.native in QUEUE_STATES]
        snap = snapshot_of(part, jobs, self.scheduler_policy(), time.time())
        return replace(snap, notes=(*snap.notes, *notes))

    def _all_jobs(self) -> dict[str, JobInfo]:
        return fmt.parse_jobs_json(self._request("GET", "jobs"), "GET /jobs")

    def _job(self, job_id: str) -> dict[str, JobInfo]:
        """``GET /job/{id}``: one job (slurmrestd takes one id per call), {} where slurmctld
        no longer knows it ("Invalid job id specified", error 2017, HTTP 500)."""
        status, doc, errors = self._call("GET", f"job/{job_id}")
        if errors:
            if any(re.search(r"Invalid job id|Unable to find JobId", e, re.IGNORECASE) for e in errors):
                return {}
            raise self._error("GET", f"job/{job_id}", status, errors)
        return fmt.parse_jobs_json(doc, f"GET /job/{job_id}")

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        """Jobs slurmctld still lists, recently finished ones included (for ``MinJobAge``).

        With ``ids`` (a pilot poll) only those jobs are asked for, one ``GET /job/{id}`` each
        on the kept-alive connection, never every user's queue; without, ``GET /jobs``. A name
        lookup without ``user`` keeps this user's jobs only, as the CLI's ``--me`` does: pilot
        names are public, and another user's job named as a pilot was taken for it."""
        wanted = set(check_job_ids(ids)) if ids is not None else None
        if wanted is not None and not wanted:
            return {}
        if name_prefix is not None and user is None:
            user = self.user
        if wanted is not None:
            found: dict[str, JobInfo] = {}
            for jid in sorted(wanted):
                found.update(self._job(jid))
        else:
            found = self._all_jobs()
        return {jid: j for jid, j in found.items()
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
        return {jid: (jobs[jid].start if jid in jobs and jobs[jid].state is JobState.PENDING else None)
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
        old = self.api() in ("v0.0.36", "v0.0.37", "v0.0.38")
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

