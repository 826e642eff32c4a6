"""A PBS site (PBS Pro/OpenPBS or Torque) through its command-line tools, over any transport.

:class:`PBSCLI` is a :class:`~resel.backends.jobs.Scheduler` (and a
:class:`~resel.backends.jobs.QueueReader`) like :class:`~resel.backends.slurm.cli.SlurmCLI`, with
job states translated from PBS's letters into resel's :class:`~resel.backends.jobs.JobState`,
so :class:`~resel.backends.pilotsite.PilotSite` and the coordinator drive a PBS site unchanged.
Every command is an argv list (the transport quotes it); the replies are read by
:mod:`.formats`.

Dialects (``dialect=``):

* ``"pro"`` — PBS Pro / OpenPBS: ``qstat -f -F json`` and friends, ``qsub -l
  select=1:ncpus=N`` with the script on stdin;
* ``"torque"`` — Torque's text replies and ``qsub -l nodes=1:ppn=N``. The script goes in a
  file in the pilot's work directory, not on stdin: Debian's ``slurm-wlm-torque`` wrapper
  (Torque's commands over Slurm) insists on a script argument;
* ``"auto"`` — asks ``qstat --version`` once: ``pbs_version = …`` is PBS Pro, ``Version: …``
  Torque, and ``Unknown option: version`` Slurm's Torque wrapper (its version is then
  Slurm's, from ``sinfo --version``).

The work directory: PBS has no ``--chdir`` (PBS Pro starts a job in the home directory), so
:meth:`PBSCLI.submit` puts ``cd <workdir> || exit 1`` into the script, after its first
comment block (where ``#PBS`` directives must stay), and makes the output path absolute.

Queries are sent with ``idempotent=True``; ``qsub`` and ``qdel`` are not, so a connection
lost during a submission surfaces as :class:`~resel.errors.ConnectionLost` and the caller
looks for the job by its name.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import tzinfo
from typing import Any

from resel.backends.pbs import formats as fmt
from resel.backends.limit_formats import Limits
from resel.backends.jobs import Availability, JobInfo, Partition, QueueSnapshot, batches
from resel.backends.slurm.formats import (
    parse_cpuinfo,
    parse_lscpu_json,
    parse_scheduler_type,
    parse_utc_offset,
    parse_version,
)

from resel.errors import SchedulerError, SchedulerReplyError
from resel.site_options import check_qsub_options, torque_resources

__all__ = ["PBSCLI", "SchedulerError", "SchedulerReplyError"]

_WORD = re.compile(r"[A-Za-z0-9_.\-]+\Z")
#: job names: what PBS Pro, Torque and the Slurm wrapper all accept (the wrapper pastes the
#: name unquoted into a shell command line, so nothing a shell would interpret)
_JOB_NAME = re.compile(r"[A-Za-z0-9_.+\-]+\Z")
_JOB_ID = re.compile(r"\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.\-]+)?\Z")
_BAD_TEXT = re.compile(r"[\x00-\x1f\x7f]")
#: paths the Slurm wrapper passes through a shell unquoted: only these characters are safe
_SHELL_SAFE_PATH = re.compile(r"/[A-Za-z0-9_./+\-]*\Z")
_DIALECTS = ("auto", "pro", "torque")


def _check_word(kind: str, value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _WORD.match(value):
        raise SchedulerError(f"{kind} {value!r} is not a valid PBS {kind} name "
                             "(letters, digits, '_', '.', '-')")
    return value


def check_job_ids(ids: Iterable[str]) -> list[str]:
    """Job ids as strings, refusing anything that is not a PBS job id (``12``, ``12.server``,
    ``12[].server``)."""
    out = []
    for jid in ids:
        text = str(jid).strip()
        if not _JOB_ID.match(text):
            raise SchedulerError(f"{jid!r} is not a PBS job id")
        out.append(text)
    return out


def check_job_name(name: str) -> str:
    """PBS job names: letters, digits, ``_ . + -`` (resel's ``resel-r12-abcdef-p3`` fits).

    Stricter than Slurm's "printable, one line" on purpose: Torque's and PBS Pro's qsub refuse
    blanks and most punctuation, and Slurm's Torque wrapper builds a shell command line from
    the name without quoting it.
    """
    if not isinstance(name, str) or not _JOB_NAME.match(name):
        raise SchedulerError(f"job name {name!r} must be letters, digits, '_', '.', '+' or '-' "
                             "(PBS job names)")
    return name


def _seq(job_id: str) -> str:
    """A job id's sequence number (``12.server`` → ``12``): qsub, qstat and qdel of one site
    do not always agree on the server suffix."""
    return job_id.split(".", 1)[0]


def with_workdir(script: str, workdir: str) -> str:
    """The script with ``cd <workdir>`` inserted after its leading comment block.

    PBS reads ``#PBS`` directives only up to the first command, so the ``cd`` goes after the
    shebang and the comments that follow it.
    """
    lines = script.splitlines(keepends=True)
    at = 0
    while at < len(lines) and (not lines[at].strip() or lines[at].lstrip().startswith("#")):
        at += 1
    cd = f"cd {shlex.quote(workdir)} || exit 1\n"
    if at and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    return "".join(lines[:at] + [cd] + lines[at:])


class PBSCLI:
    """PBS via qstat/qsub/qdel/pbsnodes on the site's login node.

    ``env`` is added to every command's environment (e.g. ``PBS_SERVER``, or ``SLURM_CONF``
    under Slurm's Torque wrappers); ``queue`` and ``account`` go to every submission
    (``-q``/``-A``) and restrict :meth:`availability` to that queue; ``extra_qsub`` are further
    qsub options from the site file (each one word, e.g. ``-l`` and ``mem=2gb`` as two).
    """

    def __init__(self, transport: Any, *, env: Mapping[str, str] | None = None,
                 queue: str | None = None, account: str | None = None,
                 dialect: str = "auto", extra_qsub: Sequence[str] = (), timeout: float = 60.0,
                 rerunnable: bool = False):
        if dialect not in _DIALECTS:
            raise SchedulerError(f"PBS dialect {dialect!r} is not one of {', '.join(_DIALECTS)}")
        self.transport = transport
        self.env = dict(env or {})
        self.queue = _check_word("queue", queue)
        self.account = _check_word("account", account)
        for _, why in check_qsub_options(list(extra_qsub), dialect=dialect)[:1]:
            raise SchedulerError(f"extra qsub option refused: {why}")
        self.extra_qsub = tuple(extra_qsub)
        #: ``-r n`` unless the site's ``requeue = true``: a rerun pilot would start a new agent
        #: on its predecessor's half-done attempts (PBS Pro, Torque and Slurm's wrapper know -r)
        self.rerunnable = bool(rerunnable)
        self.timeout = timeout
        #: "pro", "torque" or "slurm-torque" (Torque's dialect spoken by Slurm's wrappers)
        self.flavour: str | None = None if dialect == "auto" else dialect
        self._version: str | None = None
        self._tz: tzinfo | None = None
        self._default_queue: tuple[str | None] | None = None
        self._slurm_scheduler: tuple[str | None] | None = None

    def __repr__(self) -> str:
        return f"PBSCLI({self.transport!r}, queue={self.queue!r}, dialect={self.flavour or 'auto'!r})"

    # ------------------------------------------------------------------ running commands

    def _run(self, argv: Sequence[str], *, idempotent: bool, input: str | None = None) -> Any:
        return self.transport.run(list(argv), env=self.env or None, input=input,
                                  timeout=self.timeout, idempotent=idempotent)

    @staticmethod
    def _failed(argv: Sequence[str], done: Any) -> SchedulerError:
        said = (done.stderr or done.stdout or "").strip() or f"exit status {done.returncode}"
        command = shlex.join(argv)
        hint = None
        if done.returncode == 127:
            hint = "the PBS tools are not on the PATH of the site's login shell; check the site's access settings"
        elif re.search(r"cannot connect to server|Connection refused|Communication failure|"
                       r"Unable to contact|pbs_connect", said, re.IGNORECASE):
            hint = "the PBS server did not answer; check that it is up (and PBS_SERVER in the site's env)"
        return SchedulerError(f"{command} failed: {said}", command=command, reply=said, hint=hint)

    def _query(self, argv: Sequence[str], *, empty_ok: bool = False) -> str:
        """Run a query; with ``empty_ok`` a silent exit status 153 (Torque's "nothing
        found", what Slurm's wrapper returns when there are no jobs) is an empty reply."""
        done = self._run(argv, idempotent=True)
        if done.returncode != 0:
            if empty_ok and done.returncode == 153 and not done.stderr.strip():
                return done.stdout
            raise self._failed(argv, done)
        return done.stdout

    def site_tz(self) -> tzinfo:
        """The login node's zone (``date +%z``): PBS prints times as local ``ctime`` text."""
        if self._tz is None:
            self._tz = parse_utc_offset(self._query(["date", "+%z"]))
        return self._tz

    def _tz_for(self, text: str) -> tzinfo | None:
        return self.site_tz() if fmt.has_text_time(text) else None

    # ------------------------------------------------------------------ dialect, version

    def _detect(self) -> None:
        argv = ["qstat", "--version"]
        done = self._run(argv, idempotent=True)
        if done.returncode == 127:
            raise self._failed(argv, done)
        try:
            flavour, version = fmt.detect_dialect(done.stdout, done.stderr, shlex.join(argv))
        except SchedulerReplyError:
            if done.returncode != 0:
                raise self._failed(argv, done) from None
            raise
        if flavour == "slurm-torque":
            try:
                version = f"slurm-torque-wrapper {parse_version(self._query(['sinfo', '--version']))}"
            except SchedulerError:
                version = "slurm-torque-wrapper"
        if self.flavour is None or (self.flavour == "torque" and flavour == "slurm-torque"):
            self.flavour = flavour
        self._version = version

    @property
    def dialect(self) -> str:
        """``"pro"`` or ``"torque"`` (Slurm's wrappers speak Torque), detected once if auto."""
        if self.flavour is None:
            self._detect()
        return "pro" if self.flavour == "pro" else "torque"

    @property
    def scheduler(self) -> str:
        """``"pbs"`` for PBS Pro/OpenPBS, ``"torque"`` for Torque and Slurm's wrappers."""
        return "pbs" if self.dialect == "pro" else "torque"

    def version(self) -> str:
        """The server's release (``qstat --version``), asked once."""
        if self._version is None:
            self._detect()
        return self._version or "unknown"

    # ------------------------------------------------------------------ queries

    def _jobs_text(self) -> str:
        """``qstat -f`` of all jobs (PBS Pro: with ``-x``, so finished jobs stay visible)."""
        if self.dialect == "pro":
            return self._query(["qstat", "-f", "-F", "json", "-x"])
        return self._query(["qstat", "-f"], empty_ok=True)

    def _all_jobs(self) -> dict[str, JobInfo]:
        out = self._jobs_text()
        if self.dialect == "pro":
            return fmt.parse_jobs_json(fmt.load_json(out, "qstat -f -F json -x"), self._tz_for(out))
        return fmt.parse_jobs_text(out, self._tz_for(out))

    def _jobs_by_id(self, wanted: list[str]) -> dict[str, JobInfo]:
        """Only these jobs: ``qstat -f [-F json -x] ID…`` in batches of
        :data:`~resel.backends.jobs.POLL_BATCH`. PBS Pro's ``-x`` keeps finished jobs (history) and Torque
        keeps completed ones for ``keep_completed`` seconds, so a job that ended between two
        polls is reported with its final state. An id the server no longer knows is simply
        absent ("Unknown Job Id", exit status 153, for it alone)."""
        found: dict[str, JobInfo] = {}
        for batch in batches(wanted):
            if self.dialect == "pro":
                argv = ["qstat", "-f", "-F", "json", "-x", *batch]
            else:
                argv = ["qstat", "-f", *batch]
            done = self._run(argv, idempotent=True)
            if done.returncode != 0 and not (done.returncode == 153 and fmt.unknown_ids_only(done.stderr)):
                raise self._failed(argv, done)
            out = done.stdout
            if not out.strip():
                continue
            if self.dialect == "pro":
                found.update(fmt.parse_jobs_json(fmt.load_json(out, "qstat -f -F json -x"), self._tz_for(out)))
            else:
                found.update(fmt.parse_jobs_text(out, self._tz_for(out)))
        return found

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        """Jobs the server still lists (PBS Pro: history jobs too), by id; filtered by ids
        (matched on their number, keyed as asked), user and name prefix. With ``ids`` (a
        pilot poll) only those jobs are asked for (:meth:`_jobs_by_id`), never every user's.

        Names are read from ``qstat -f``, which prints them whole (the short ``qstat`` cuts
        them to 16 characters), so resel's ~20-character pilot names match exactly. A name
        lookup without ``user`` keeps this user's jobs only (``qstat -f`` lists everyone's, and
        another user's job named as a pilot was taken for it).
        """
        wanted = check_job_ids(ids) if ids is not None else None
        if wanted is not None and not wanted:
            return {}
        if name_prefix is not None and user is None:
            user = self.user_name()
        if user is not None:
            _check_word("user", user)
        found = self._jobs_by_id(sorted(set(wanted))) if wanted is not None else self._all_jobs()
        if wanted is not None:
            by_seq = {_seq(jid): j for jid, j in found.items()}
            picked = {}
            for jid in wanted:
                job = found.get(jid) or by_seq.get(_seq(jid))
                if job is not None:
                    picked[jid] = job if job.job_id == jid else _rekey(job, jid)
            found = picked
        return {jid: j for jid, j in found.items()
                if (user is None or j.user == user)
                and (name_prefix is None or j.name.startswith(name_prefix))}

    def start_estimates(self, ids: Iterable[str]) -> dict[str, float | None]:
        """The server's expected start of pending jobs: ``estimated.start_time`` (PBS Pro,
        where the scheduler estimates), Slurm's estimate under its wrappers; None otherwise."""
        wanted = check_job_ids(ids)
        if not wanted:
            return {}
        out = self._jobs_text()
        if self.dialect == "pro":
            found = fmt.start_estimates_json(fmt.load_json(out, "qstat -f -F json -x"), self._tz_for(out))
        else:
            found = fmt.start_estimates_text(out, self._tz_for(out))
        by_seq = {_seq(j): v for j, v in found.items()}
        return {jid: found.get(jid, by_seq.get(_seq(jid))) for jid in wanted}

    def default_queue(self) -> str | None:
        """The server's ``default_queue`` (``qstat -B -f``), asked once; None if not said.
        Slurm's wrappers have no server query (their ``-B`` lists jobs), so none is asked."""
        if self._default_queue is None:
            if self.dialect == "pro":
                text = self._query(["qstat", "-B", "-f", "-F", "json"])
            elif self.flavour == "slurm-torque":
                text = ""
            else:
                text = self._query(["qstat", "-B", "-f"], empty_ok=True)
            self._default_queue = (fmt.parse_server_default_queue(text) if text.strip() else None,)
        return self._default_queue[0]

    def queues(self) -> list[fmt.QueueInfo]:
        """The server's queues with their walltime limit and, where said, job counts.

        Torque's ``qstat -Q -f`` may lack the limits and counts (Slurm's wrapper prints
        neither); ``qstat -q`` fills them in.
        """
        if self.dialect == "pro":
            return fmt.parse_queues_json(fmt.load_json(self._query(["qstat", "-Q", "-f", "-F", "json"]),
                                                       "qstat -Q -f -F json"))
        queues = fmt.parse_queues_text(self._query(["qstat", "-Q", "-f"], empty_ok=True))
        if all(q.max_time is not None and q.running is not None for q in queues):
            return queues
        rows = fmt.parse_qstat_q(self._query(["qstat", "-q"], empty_ok=True))

        def row(name: str) -> fmt.QueueLimits | None:
            exact = [r for r in rows if r.name == name]
            cut = [r for r in rows if len(r.name) >= 16 and name.startswith(r.name)]
            return (exact or cut or [None])[0]

        out = []
        for q in queues:
            r = row(q.name)
            if r is None:
                out.append(q)
                continue
            out.append(fmt.QueueInfo(
                q.name, q.state, q.max_time if q.max_time is not None else r.max_time,
                q.running if q.running is not None else r.running,
                q.pending if q.pending is not None else r.pending, q.queue_type))
        return out

    def nodes(self, jobs_text: str | None = None) -> list[fmt.NodeRecord]:
        """Nodes with their CPUs; a ``mixed`` node (Slurm's wrapper) gets its idle CPUs from
        the running jobs' ``exec_host`` (``jobs_text``: a ``qstat -f`` reply already read)."""
        if self.dialect == "pro":
            return fmt.nodes_from_json(fmt.load_json(self._query(["pbsnodes", "-a", "-F", "json"]),
                                                     "pbsnodes -a -F json"))
        nodes = fmt.nodes_from_text(self._query(["pbsnodes", "-a"]))
        if any(n.idle is None for n in nodes):
            text = self._jobs_text() if jobs_text is None else jobs_text
            nodes = fmt.fill_idle_from_jobs(nodes, fmt.parse_jobs_text(text, self._tz_for(text)).values(),
                                            fmt.exec_hosts_text(text))
        return nodes

    def partitions(self) -> list[Partition]:
        """The queues as :class:`Partition` records (see :func:`.formats.partitions`)."""
        return fmt.partitions(self.queues(), self.nodes(), self.default_queue())

    def availability(self) -> Availability:
        """Free and total cores and queue length, for the queue resel submits to (the server's
        default queue if none is configured; the whole cluster if neither is known)."""
        queues = self.queues()
        if self.queue and self.queue not in {q.name for q in queues}:
            have = ", ".join(q.name for q in queues) or "(none)"
            raise SchedulerError(f"queue {self.queue} not found; the site has: {have}",
                                 hint="set the site's `queue` to one of these")
        nodes = self.nodes()
        parts = fmt.partitions(queues, nodes, self.default_queue())
        scope = self.queue or next((p.name for p in parts if p.default), None)
        counted = [q for q in queues if scope is None or q.name == scope]
        jobs = None
        if not all(q.running is not None and q.pending is not None for q in counted):
            jobs = self._all_jobs().values()
        return fmt.make_availability(self.scheduler, self.version(), parts, queues, nodes, jobs,
                                     time.time(), target=self.queue)

    def user_name(self) -> str:
        """The login this site runs our commands as (``id -un``), asked once."""
        if getattr(self, "_user", None) is None:
            self._user = self._query(["id", "-un"]).strip()
        return self._user

    def limits(self) -> tuple[Limits, list[str]]:
        """The limits of the queue resel submits to (or the server's default queue) on this
        user: ``max_queued``, ``max_run``, ``max_run_res.ncpus``, ``resources_max.*`` (PBS
        Pro, ``-F json``) or Torque's ``max_user_queuable``/``max_user_run`` (text)."""
        from resel.backends import limit_formats as lf
        user = self.user_name()
        queue = self.queue or self.default_queue()
        if self.dialect == "pro":
            command = "qstat -Q -f -F json"
            doc = fmt.load_json(self._query(["qstat", "-Q", "-f", "-F", "json"]), command)
            records = dict(doc.get("Queue") or {})
        else:
            command = "qstat -Q -f"
            records = lf.pbs_queues_text(self._query(["qstat", "-Q", "-f"], empty_ok=True), command)
        if queue is None or queue not in records:
            return lf.Limits(), [f"no queue limits: the queue resel submits to ({queue or 'the default'}) "
                                 f"is not in `{command}`"]
        return lf.pbs_queue_limits(records[queue], queue, user, command), []

    def _policy(self) -> tuple[str, str]:
        """(policy, the note saying it is assumed): see :func:`.formats.assumed_policy`.
        Under Slurm's wrappers the Slurm behind them is asked (``scontrol show config``), once."""
        if self.flavour == "torque" and self._version is None:
            with contextlib.suppress(SchedulerError):
                self._detect()                      # a "torque" site may be Slurm's wrappers
        if self.flavour is None:
            self._detect()
        kind = None
        if self.flavour == "slurm-torque":
            if self._slurm_scheduler is None:
                cmd = ["scontrol", "show", "config"]
                try:
                    self._slurm_scheduler = (parse_scheduler_type(self._query(cmd), shlex.join(cmd)),)
                except SchedulerError:
                    self._slurm_scheduler = (None,)
            kind = self._slurm_scheduler[0]
        return fmt.assumed_policy(self.flavour or "torque", kind)

    def scheduler_policy(self) -> str:
        """The twin's policy for this site, assumed from the dialect (PBS's commands do not
        report the scheduler's configuration): EASY for PBS Pro/OpenPBS, whose scheduler
        backfills around ``backfill_depth`` (default 1) top jobs; FCFS for Torque's own
        ``pbs_sched``; under Debian's Torque wrappers, the Slurm behind them as
        :meth:`SlurmCLI.scheduler_policy <resel.backends.slurm.cli.SlurmCLI.scheduler_policy>`
        maps it. See :func:`.formats.assumed_policy`."""
        return self._policy()[0]

    def queue_snapshot(self) -> QueueSnapshot:
        """The queue resel submits to (the configured one, else the server's default; else
        every queue on every node), for the twin (:mod:`resel.models.twin`): all users' running
        jobs with their CPUs, walltime and elapsed time, and queued ones in priority order.

        Held, waiting and other jobs that cannot start now are left out and counted in the
        snapshot's notes, which also say that the policy is assumed (see
        :meth:`scheduler_policy`). A queue that cannot be read raises :class:`SchedulerError`:
        a plan must say "unreadable", never guess.
        """
        queues = self.queues()
        if self.queue and self.queue not in {q.name for q in queues}:
            have = ", ".join(q.name for q in queues) or "(none)"
            raise SchedulerError(f"queue {self.queue} not found; the site has: {have}",
                                 hint="set the site's `queue` to one of these")
        policy, policy_note = self._policy()
        notes = [policy_note]
        server_time = None
        if self.dialect == "pro":
            command = "qstat -f -F json"
            text = self._query(["qstat", "-f", "-F", "json"])
            doc = fmt.load_json(text, command)
            records: list[tuple[str, Any]] = fmt.job_records_json(doc, command)
            stamp = doc.get("timestamp")
            if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and stamp > 0:
                server_time = float(stamp)
            nodes = self.nodes()
        else:
            command = "qstat -f"
            text = self._query(["qstat", "-f"], empty_ok=True)
            records = fmt.job_records_text(text, command)
            nodes = self.nodes(jobs_text=text)
        parts = fmt.partitions(queues, nodes, None if self.queue else self.default_queue())
        scope = self.queue or next((p.name for p in parts if p.default), None)
        if scope is not None:
            part = next(p for p in parts if p.name == scope)
        else:
            limits = [q.max_time for q in queues]
            part = Partition(name="(all queues)", state="UP", total_cpus=sum(n.total for n in nodes),
                             idle_cpus=sum(n.idle or 0 for n in nodes), nodes=len(nodes),
                             max_time=max(limits) if limits and None not in limits else None, default=False)
            notes.append("no queue configured and the server names no default queue: "
                         "every queue's jobs on every node")
        return fmt.snapshot_of(part, records, policy, time.time(), flavour=self.flavour or "torque",
                               tz=self._tz_for(text), server_time=server_time, notes=notes,
                               scoped=scope is not None, command=command)

    def test_only(self, cores: int, walltime: float) -> float | None:
        """None: PBS has no dry-run submission (``qsub`` always queues the job), so there is no
        start estimate for a job not yet submitted. Estimates for queued pilots come from
        :meth:`start_estimates`. The shape is still checked, as SlurmCLI's would be."""
        self._resources(cores, walltime)
        return None

    def cpu_info(self) -> dict[str, Any]:
        """The login node's CPU (``lscpu -J``, else ``/proc/cpuinfo``), as SlurmCLI reports it:
        a first guess for LIM's clock; compute nodes may differ."""
        done = self._run(["lscpu", "-J"], idempotent=True)
        if done.returncode == 0:
            try:
                return parse_lscpu_json(done.stdout)
            except SchedulerError:
                pass
        return parse_cpuinfo(self._query(["cat", "/proc/cpuinfo"]))

    # ------------------------------------------------------------------ actions

    def _resources(self, cores: int, walltime: float) -> list[str]:
        """One chunk of ``cores`` CPUs on one node: a pilot is one agent process that runs
        tasks on the cores it was given, so they must not be spread over nodes."""
        if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
            raise SchedulerError(f"cores must be a positive whole number, not {cores!r}")
        if self.dialect in ("torque", "pro"):   # known only now for dialect "auto"
            for _, why in check_qsub_options(list(self.extra_qsub), dialect=self.dialect)[:1]:
                raise SchedulerError(f"extra qsub option refused: {why}")
        wall = fmt.format_walltime(walltime)
        extra = list(self.extra_qsub)
        if self.dialect == "pro":
            argv = ["-l", f"select=1:ncpus={cores}", "-l", f"walltime={wall}"]
        else:       # one -l: Slurm's Torque wrapper keeps only the last one it is given
            resources, extra = torque_resources(extra)
            argv = ["-l", ",".join([f"nodes=1:ppn={cores},walltime={wall}", *resources])]
        if self.queue:
            argv += ["-q", self.queue]
        if self.account:
            argv += ["-A", self.account]
        argv += ["-r", "y" if self.rerunnable else "n"]
        return argv + extra

    def _check_path(self, kind: str, path: str) -> str:
        if not path or not isinstance(path, str) or _BAD_TEXT.search(path):
            raise SchedulerError(f"{kind} {path!r} must be a non-empty path on one line")
        if not path.startswith("/"):
            raise SchedulerError(f"{kind} {path!r} must be absolute (a PBS job starts in the home directory)")
        if self.dialect == "torque" and not _SHELL_SAFE_PATH.match(path):
            raise SchedulerError(f"{kind} {path!r} may hold only letters, digits and '_ . / + -' "
                                 "on a Torque site (Slurm's qsub wrapper passes it through a shell unquoted)")
        if self.dialect == "pro" and ":" in path:
            raise SchedulerError(f"{kind} {path!r} must not contain ':' (PBS reads host:path)")
        return path

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None) -> str:
        """Submit a batch script; returns the job id as qsub printed it.

        The work directory is honoured by a ``cd`` in the script (see :func:`with_workdir`);
        ``output`` (stdout and stderr joined, ``-j oe``) is made absolute against it, and
        defaults to ``{workdir}/{name}.out``. PBS Pro reads the script on stdin; Torque's
        dialect writes it to ``{workdir}/.{name}.qsub.sh`` first (Slurm's wrapper reads no
        stdin) and removes it once qsub has copied it.

        Not idempotent: if the connection drops after sending, ConnectionLost is raised and the
        caller finds out whether the job exists by its name.
        """
        check_job_name(name)
        self._check_path("work directory", workdir)
        out = output or f"{name}.out"
        if _BAD_TEXT.search(out):
            raise SchedulerError(f"output path {out!r} must be on one line")
        out = self._check_path("output path", posixpath.join(workdir, out))
        argv = ["qsub", "-N", name, *self._resources(cores, walltime), "-o", out, "-j", "oe"]
        body = with_workdir(script, workdir)
        if self.dialect == "pro":
            done = self._run(argv, idempotent=False, input=body)
            return self._submitted(argv, done)
        path = self._check_path("script path", posixpath.join(workdir, f".{name}.qsub.sh"))
        self.transport.write_file(path, body.encode(), mode=0o700)
        try:
            done = self._run([*argv, path], idempotent=False)
        finally:
            with contextlib.suppress(Exception):      # a left-over script harms nothing
                self.transport.remove(path)
        return self._submitted([*argv, path], done)

    @staticmethod
    def _submitted(argv: Sequence[str], done: Any) -> str:
        if done.returncode != 0:
            raise fmt.qsub_error(done.stdout, done.stderr, shlex.join(argv), done.returncode)
        return fmt.parse_qsub(done.stdout, shlex.join(argv))

    def cancel(self, ids: Sequence[str]) -> None:
        """Cancel jobs (``qdel``); jobs that already ended are not an error (that is what was
        wanted)."""
        wanted = check_job_ids(ids)
        if not wanted:
            return
        argv = ["qdel", *wanted]
        done = self._run(argv, idempotent=False)
        problems = fmt.qdel_problems(done.stdout, done.stderr)
        if problems:
            said = "; ".join(problems)
            raise SchedulerError(f"qdel {' '.join(wanted)} failed: {said}", command=shlex.join(argv),
                                 reply=(done.stderr or done.stdout).strip())


def _rekey(job: JobInfo, job_id: str) -> JobInfo:
    """The job under the id the caller knows it by (``12`` vs ``12.server``)."""
    return replace(job, job_id=job_id)
