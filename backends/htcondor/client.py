"""An HTCondor pool (the OSG, a campus pool) as a resel scheduler: CLI or Python bindings.

Both classes are :class:`~resel.backends.jobs.Scheduler` objects (``version``, ``availability``,
``jobs``, ``submit``, ``test_only``, ``cancel``; and ``cpu_info``, ``slots``) so
:class:`~resel.backends.pilotsite.PilotSite` drives them unchanged; job states come back as
resel's :class:`~resel.backends.jobs.JobState` (:mod:`.formats`).

* :class:`HTCondorCLI` runs ``condor_status -json``, ``condor_q -json``, ``condor_history
  -json``, ``condor_submit -terse`` (submit description on stdin) and ``condor_rm`` over any
  transport, like the Slurm CLI backend: argv lists only, quoted by the transport.
* :class:`HTCondorBindings` uses ``htcondor2`` (``pip install resel[htcondor]``) on the access
  point itself: Collector/Schedd queries, ``Schedd.submit`` and ``Schedd.act``.

No shared filesystem
--------------------
An OSG slot does not see the access point's disk, and HTCondor's file transfer moves files only
when a job starts and ends. A pilot lives for hours and exchanges files all the time, so it runs
the agent beside :mod:`resel.shipped.chirp_sync`, which mirrors the pilot directory through
``condor_chirp`` (the job's I/O proxy to its shadow, ``+WantIOProxy = true``): the job's
``initialdir`` *is* the pilot directory, so the coordinator reads and writes it over its
transport exactly as on a shared filesystem. docs/htcondor.md says why and what it costs.

``submit`` therefore does not run the batch script it is given: it takes the agent command from
the resel pilot script (:meth:`PilotSite.pilot_script`'s ``exec`` line) and builds a pilot
submit description around the wrapper (:func:`pilot_description`).

Both files travel from the access point with HTCondor's file transfer, and another user who
could change them there before the job starts would run code as you. The job therefore does not
execute the wrapper file: its executable is ``/usr/bin/env`` (not transferred), which starts
Python on :data:`resel.backends.verified.VERIFY`, which runs the wrapper only if its SHA-256 is
the one in the job's arguments (kept by the schedd, out of other users' reach); the wrapper
in turn starts the agent only if the agent's SHA-256 is the one the pilot script carries.

OSG conventions
---------------
* **Single-core pilots.** The OSG advises against multi-core pilots (their slots are
  single-core and multi-core jobs wait much longer for a match), and the thesis used only
  single-core OSG pilots; ``cores`` > 1 is refused with a message rather than silently clamped
  (a clamped pilot would run its agent with more slots than cores).
* ``+ProjectName`` and ``accounting_group`` come from the site file (``access.project``,
  ``access.accounting_group``); OSG access points refuse jobs without a project.
* ``request_memory = 2GB`` and ``request_disk = 4GB`` by default (the OSG's advice for one core);
  ``extra_submit`` (the site's ``submit_lines``) may override them and add others, but not the
  commands resel writes itself (:data:`resel.site_options.CONDOR_RESERVED`).
* ``test_only`` is None: HTCondor's matchmaking gives no start estimate (no ``--test-only``).
"""

from __future__ import annotations

import math
import posixpath
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from resel.shipped import chirp_sync
from resel.backends.htcondor import formats as fmt
from resel.backends.limit_formats import CONDOR_KNOBS, Limits, condor_limits
from resel.backends.verified import digest, parse_verified, verified_argv
from resel.backends.jobs import Availability, JobInfo, JobState, QueueSnapshot, SnapJob, batches
from resel.errors import SchedulerError, SchedulerReplyError
from resel.site_options import check_condor_lines, check_setup
from resel.url_inputs import is_url, url_file_name, url_problem

__all__ = ["HTCondorBindings", "HTCondorCLI", "pilot_description", "render_submit"]

#: the wrapper's name on the access point, next to the agent
WRAPPER_NAME = f"resel-chirp-sync-v{chirp_sync.PROTOCOL_VERSION}.py"
#: the wrapper's own log in the slot's scratch directory: the one output file transferred back
WRAPPER_LOG = chirp_sync.LOG_NAME
#: the pilot directory's folders made at submission (condor_chirp makes none): the agent's
#: records, and the tasks' output files (``outputs/KEY.I``, docs/data.md)
PILOT_SUBDIRS = ("inbox", "cancel", "started", "results", chirp_sync.OUTPUTS)


def ship_wrapper(transport: Any, wrapper: str) -> None:
    """Write the chirp wrapper and its empty log (:func:`log_seed`) on the access point."""
    transport.write_file(wrapper, chirp_sync.source().encode(), mode=0o600)
    transport.write_file(log_seed(wrapper), b"", mode=0o600)


def log_seed(wrapper: str) -> str:
    """The empty ``resel-chirp.log`` shipped next to the wrapper and transferred in with it.

    ``transfer_output_files`` names the wrapper's log; a pilot removed or evicted before the
    wrapper made it (condor_rm in the first milliseconds, a modified wrapper refused) had no
    such file, the starter's output transfer failed, and the starter held the slot
    "Preempting/Vacating" for the job lease (40 minutes) with no job in the queue. Transferred
    in empty, the log is always there to go back."""
    return posixpath.join(posixpath.dirname(wrapper), WRAPPER_LOG)
#: seconds beyond the walltime before periodic_remove ends a pilot the agent did not end itself
REMOVE_GRACE = 60
#: seconds a held pilot is left before periodic_remove ends it (a held job never starts by itself)
HELD_GRACE = 600
#: what the job executes (present on every Linux execute point): it finds the site's Python on
#: the PATH, which runs the verified wrapper (see the module docstring)
LAUNCHER = "/usr/bin/env"
DEFAULT_MEMORY = "2GB"
DEFAULT_DISK = "4GB"
_BAD_TEXT = set("\x00\n\r")


def _check_line(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or any(c in _BAD_TEXT or ord(c) < 32 for c in value):
        raise SchedulerError(f"{what} {value!r} must be non-empty printable text on one line")
    return value


def condor_arguments(words: Sequence[str]) -> str:
    """argv → the submit file's ``arguments`` in the new syntax: the whole value in double
    quotes, each word in single quotes (a ``'`` doubled, a ``"`` doubled)."""
    out = []
    for w in words:
        if w:
            _check_line("argument", w)
        out.append("'" + w.replace("'", "''").replace('"', '""') + "'")
    return '"' + " ".join(out) + '"'


def classad_string(text: str) -> str:
    """A ClassAd string literal (for ``+ProjectName`` and friends)."""
    _check_line("value", text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def periodic_remove(walltime: float, requeue: bool = False) -> str:
    """When the schedd ends a pilot by itself: running past its walltime (the agent stops on
    time; this is the backstop), held too long, or evicted and about to run again (a re-run
    pilot would start over with a fresh agent, so it is ended and the coordinator asks for a
    new one — HTCondor's "no requeue", see docs/htcondor.md). With ``requeue`` (the site's
    ``requeue = true``) an evicted pilot may run again: its new agent reports what the old
    one left unfinished."""
    limit = int(math.ceil(walltime)) + REMOVE_GRACE
    rule = (f"(JobStatus == 2 && (time() - EnteredCurrentStatus) > {limit})"
            f" || (JobStatus == 5 && (time() - EnteredCurrentStatus) > {HELD_GRACE})")
    return rule if requeue else rule + " || (JobStatus == 1 && NumJobStarts > 0)"


def pilot_inputs(inputs: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """A pilot's inputs (what ``submit(..., inputs=...)`` is given) → (files for
    ``transfer_input_files``, ``--shared`` digests, ``--url`` URLs). A path must be absolute
    and end in a sha256: a file of the run's cache on the access point (``WORKDIR/RUN/cache/
    SHA256``), transferred in under that name, which the wrapper moves into the slot's cache
    once its sha256 is checked. A URL (:mod:`resel.url_inputs`) is fetched by the pool's
    transfer plugins. No two may arrive in the slot under the same name."""
    files: list[str] = []
    shared: list[str] = []
    urls: list[str] = []
    names: dict[str, str] = {}
    for item in inputs:
        if not isinstance(item, str) or not item:
            raise SchedulerError(f"a pilot input must be a path or a URL, not {item!r}")
        if is_url(item):
            why = url_problem(item)
            if why:
                raise SchedulerError(f"URL input {item!r}: {why}")
            name = url_file_name(item)
            urls.append(item)
        else:
            _check_line("pilot input", item)
            name = posixpath.basename(item)
            if not item.startswith("/") or not chirp_sync.is_digest(name) or "," in item:
                raise SchedulerError(f"pilot input {item!r} must be an absolute path to a file of the run's cache "
                                     "(…/cache/SHA256, no comma)")
            shared.append(name)
        if name in names and names[name] != item:
            raise SchedulerError(f"inputs {names[name]!r} and {item!r} would both arrive in the slot as {name!r}")
        if name not in names:
            names[name] = item
            files.append(item)
    return files, list(dict.fromkeys(shared)), list(dict.fromkeys(urls))


def _wrapper_sum() -> str:
    """The SHA-256 of the chirp wrapper resel ships."""
    return digest(chirp_sync.source())


def pilot_description(*, name: str, pilot_dir: str, agent: str, wrapper: str, python: str,
                      agent_args: Sequence[str], walltime: float, agent_sha256: str,
                      wrapper_sha256: str | None = None, project: str | None = None,
                      accounting_group: str | None = None, requirements: str | None = None,
                      extra: Mapping[str, str] | None = None, interval: float = 2.0,
                      requeue: bool = False, setup: Sequence[str] = (),
                      inputs: Sequence[str] = ()) -> dict[str, str]:
    """The submit description of one pilot, as the commands ``condor_submit`` reads.

    The job runs ``/usr/bin/env PYTHON -I -c VERIFY WRAPPER SHA256 ...``: the chirp wrapper
    (transferred as an input file next to the agent), only if unchanged, and it starts the agent
    only if the agent is unchanged (``--agent-sha256``). Its ``initialdir`` is the pilot
    directory on the access point, which is where ``condor_chirp``'s relative paths land and
    where the wrapper's log, ``pilot.out``, ``pilot.err`` and the job event log ``pilot.log`` go.

    ``inputs`` (:func:`pilot_inputs`): the run's shared input files and URL inputs, which the
    job's own file transfer brings into the slot before the wrapper starts; the wrapper is told
    each one (``--shared SHA256``, ``--url URL``) and puts it into the slot's cache.
    """
    _check_line("job name", name)
    for what, path in (("pilot directory", pilot_dir), ("agent", agent), ("wrapper", wrapper)):
        _check_line(what, path)
        if "," in path:
            raise SchedulerError(f"{what} path {path!r} must not contain ',' (transfer_input_files is a comma list)")
    if not walltime or walltime <= 0 or math.isinf(walltime) or math.isnan(walltime):
        raise SchedulerError(f"walltime must be a positive number of seconds, not {walltime!r}")
    wrapper_sum = wrapper_sha256 or _wrapper_sum()
    for what, sha in (("agent", agent_sha256), ("wrapper", wrapper_sum)):
        if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
            raise SchedulerError(f"the {what}'s sha256 {sha!r} must be 64 lowercase hex digits")
    for _, why in check_setup(list(setup))[:1]:
        raise SchedulerError(why)
    setup_args = [word for line in setup for word in ("--setup", line)]
    files, shared, urls = pilot_inputs(inputs)
    data_args = [*(w for d in shared for w in ("--shared", d)), *(w for u in urls for w in ("--url", u))]
    args = verified_argv(python, posixpath.basename(wrapper), wrapper_sum, [
        "--agent", posixpath.basename(agent), "--agent-sha256", agent_sha256, "--python", python,
        "--interval", f"{interval:g}", *setup_args, *data_args, "--", *agent_args])
    desc = {
        "universe": "vanilla",
        "executable": LAUNCHER,
        "transfer_executable": "false",
        "arguments": condor_arguments(args),
        "initialdir": pilot_dir,
        "batch_name": name,
        "should_transfer_files": "YES",
        "when_to_transfer_output": "ON_EXIT_OR_EVICT",
        "transfer_input_files": ", ".join([agent, wrapper, log_seed(wrapper), *files]),
        "transfer_output_files": WRAPPER_LOG,
        "output": posixpath.join(pilot_dir, "pilot.out"),
        "error": posixpath.join(pilot_dir, "pilot.err"),
        "log": posixpath.join(pilot_dir, "pilot.log"),
        "request_cpus": "1",
        "request_memory": DEFAULT_MEMORY,
        "request_disk": DEFAULT_DISK,
        "+WantIOProxy": "true",
        "+ReselWalltime": str(int(math.ceil(walltime))),
        "periodic_remove": periodic_remove(walltime, requeue),
    }
    if project:
        desc["+ProjectName"] = classad_string(project)
    if accounting_group:
        desc["accounting_group"] = _check_line("accounting group", accounting_group)
    if requirements:
        desc["requirements"] = _check_line("requirements", requirements)
    for key, why in check_condor_lines(dict(extra or {}))[:1]:
        raise SchedulerError(f"extra submit command refused: {why}")
    for key, val in (extra or {}).items():
        desc[key] = _check_line(f"submit value of {key}", str(val))
    return desc


def render_submit(desc: Mapping[str, str]) -> str:
    """A submit description as ``condor_submit`` reads it on stdin (what ``str(Submit(desc))``
    prints, without needing the bindings on the machine running the CLI backend)."""
    lines = [f"{key} = {val}" for key, val in desc.items()]
    return "\n".join(lines) + "\nqueue 1\n"


def agent_command(script: str) -> tuple[str, str, str, list[str]]:
    """The agent's Python, path, SHA-256 and options from a resel pilot script's ``exec`` line.

    PilotSite writes that line with :func:`shlex.join` around
    :func:`~resel.backends.verified.verified_argv`, so :func:`shlex.split` gives the argv back
    exactly; ``--dir`` (a path on the access point) is dropped: in the slot the wrapper gives the
    agent its local mirror instead.
    """
    execs = [line for line in script.splitlines() if line.startswith("exec ")]
    if not execs:
        raise SchedulerError("an HTCondor pilot needs a resel pilot script (an 'exec python agent ...' line); "
                             "HTCondor sites run only the resel agent, under its chirp wrapper")
    verified = parse_verified(shlex.split(execs[-1][len("exec "):]))
    if verified is None or not posixpath.basename(verified[1]).startswith("resel-agent"):
        raise SchedulerError(f"not a resel pilot command (one that checks the agent's sha256): {execs[-1][:120]!r}")
    python, agent, sha256, rest = verified
    options: list[str] = []
    i = 0
    while i < len(rest):
        if rest[i] == "--dir":
            i += 2
            continue
        if rest[i].startswith("--dir="):
            i += 1
            continue
        options.append(rest[i])
        i += 1
    return python, agent, sha256, options


#: what the twin asks of the negotiator: when its last cycle ended and how far apart cycles are
NEGOTIATOR_ATTRS = ("Name", "LastNegotiationCycleEnd0", "LastNegotiationCyclePeriod0")


def pool_snapshot(slots: Sequence[fmt.Slot], jobs: Iterable[JobInfo], negotiators: Iterable[Any],
                  taken: float) -> QueueSnapshot:
    """The pool's queue for the twin (:mod:`resel.models.twin`): every user's running jobs
    (cores, ``ReselWalltime`` or unknown, elapsed) and idle ones in submission order, the
    pool's cores, and its negotiation cycle (the negotiator's ``LastNegotiationCycleEnd0`` and
    ``LastNegotiationCyclePeriod0``: a job starts only in a cycle). Held jobs are left out and
    counted. Assumed, and said in the notes: the negotiator matches every idle job that fits
    (EASY here), ordered by QDate — not by the users' fair-share priorities it really uses.
    Jobs without a limit run as long as the longest known one (none known: the twin says it
    cannot simulate the pool)."""
    summary = fmt.summarize_pool(list(slots))
    running, pending, held, unknown_limit = [], [], 0, 0
    for job in sorted(jobs, key=lambda j: (j.submit or 0.0, j.job_id)):
        cores = job.cpus or 1
        if job.state is JobState.RUNNING:
            unknown_limit += job.time_limit is None
            running.append(SnapJob(cores=cores, time_limit=job.time_limit, job_id=job.job_id, user=job.user,
                                   elapsed=max(0.0, taken - job.start) if job.start else 0.0))
        elif job.state is JobState.HELD:
            held += 1
        elif job.state is JobState.PENDING:
            unknown_limit += job.time_limit is None
            pending.append(SnapJob(cores=cores, time_limit=job.time_limit, job_id=job.job_id, user=job.user))
    notes = ["policy assumed: the negotiator matches any idle job that fits (EASY here), idle jobs in "
             "submission order — users' fair-share priorities are not modelled"]
    if held:
        notes.append(f"{held} held job(s) left out (they start only when released)")
    limits = [j.time_limit for j in (*running, *pending) if j.time_limit is not None]
    default_limit = max(limits) if limits else None
    if unknown_limit and default_limit is not None:
        notes.append(f"{unknown_limit} job(s) without a time limit (HTCondor jobs have none unless a policy "
                     f"sets one): taken to run as long as the longest known, {default_limit:g} s")
    cycle_end = cycle_period = None
    for ad in negotiators:
        end, period = fmt.value(ad, "LastNegotiationCycleEnd0"), fmt.value(ad, "LastNegotiationCyclePeriod0")
        if isinstance(end, (int, float)) and isinstance(period, (int, float)) and end > 0 and period > 0:
            cycle_end, cycle_period = float(end), float(period)
    if cycle_end is None:
        notes.append("the negotiator's cycle is unknown (no negotiator ad, or none with a last cycle's end and "
                     "period yet): jobs taken to start at once")
    return QueueSnapshot(site="pool", taken_at=taken, total_cores=summary.total_cores, running=tuple(running),
                         pending=tuple(pending), policy="easy", default_limit=default_limit, notes=tuple(notes),
                         cycle_end=cycle_end, cycle_period=cycle_period)


def _check_cores(cores: int) -> None:
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise SchedulerError(f"cores must be a positive whole number, not {cores!r}")
    if cores > 1:
        raise SchedulerError(f"an HTCondor/OSG pilot has one core, not {cores}: the OSG advises against "
                             "multi-core pilots", hint="set the site's pilot mode to 'per-task' (or max_cores = 1)")


class _Common:
    """What both interfaces share: filtering jobs, the pool summary, the pilot description."""

    scheduler = "htcondor"

    def __init__(self, *, project: str | None, accounting_group: str | None,
                 requirements: str | None, extra_submit: Mapping[str, str] | None, requeue: bool = False,
                 setup: Sequence[str] = ()):
        for _, why in check_condor_lines(dict(extra_submit or {}))[:1]:
            raise SchedulerError(f"extra submit command refused: {why}")
        for _, why in check_setup(list(setup))[:1]:
            raise SchedulerError(why)
        self.setup = tuple(setup)
        self.project = project
        self.requeue = bool(requeue)
        self.accounting_group = accounting_group
        self.requirements = requirements
        self.extra_submit = dict(extra_submit or {})
        self._version: str | None = None

    def scheduler_policy(self) -> str:
        """The twin's policy for a pool, assumed (the negotiator matches every idle job that
        fits, by fair-share): EASY in submission order; :func:`pool_snapshot` says so."""
        return "easy"

    def start_estimates(self, ids: Iterable[str]) -> dict[str, float | None]:
        """None for every job: matchmaking plans no start times (there is no ``--test-only``)."""
        return {jid: None for jid in fmt.check_ids(ids)}

    @staticmethod
    def _filter(jobs: Mapping[str, JobInfo], wanted: set[str] | None, user: str | None,
                name_prefix: str | None) -> dict[str, JobInfo]:
        return {jid: j for jid, j in jobs.items()
                if (wanted is None or jid in wanted) and (user is None or j.user == user)
                and (name_prefix is None or j.name.startswith(name_prefix))}

    def description(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
                    wrapper: str, inputs: Sequence[str] = ()) -> dict[str, str]:
        _check_cores(cores)
        python, agent, sha256, options = agent_command(script)
        return pilot_description(name=name, pilot_dir=workdir, agent=agent, wrapper=wrapper, python=python,
                                 agent_args=options, walltime=walltime, agent_sha256=sha256, project=self.project,
                                 accounting_group=self.accounting_group, requirements=self.requirements,
                                 extra=self.extra_submit, requeue=self.requeue, setup=self.setup, inputs=inputs)

    @staticmethod
    def make_pilot_dirs(transport: Any, workdir: str) -> None:
        """The folders condor_chirp puts files into (it makes none; a put into a missing folder
        is refused and, in 23.9.6, drops the shadow's connection for seconds): the agent's
        records, and ``outputs`` for the tasks' output files."""
        for sub in PILOT_SUBDIRS:
            transport.makedirs(posixpath.join(workdir, sub))

    def test_only(self, cores: int, walltime: float) -> float | None:
        """None: HTCondor's negotiator gives no start estimate (there is no ``--test-only``); a
        pilot starts when a slot matches, on the OSG typically within minutes."""
        _check_cores(cores)
        return None


class HTCondorCLI(_Common):
    """HTCondor via its command-line tools on the access point, over any transport.

    ``env`` is added to every command (e.g. ``CONDOR_CONFIG``); ``project`` becomes
    ``+ProjectName``, ``accounting_group`` the submit command of that name, ``requirements`` the
    job's requirements; ``extra_submit`` adds submit commands (the site's ``submit_lines``; one
    that resel writes itself is refused, :mod:`resel.site_options`); ``setup`` are shell lines
    the chirp wrapper runs before the agent, in the shell that then execs it.
    """

    def __init__(self, transport: Any, *, env: Mapping[str, str] | None = None, project: str | None = None,
                 accounting_group: str | None = None, requirements: str | None = None,
                 extra_submit: Mapping[str, str] | None = None, timeout: float = 60.0, requeue: bool = False,
                 setup: Sequence[str] = ()):
        super().__init__(project=project, accounting_group=accounting_group, requirements=requirements,
                         extra_submit=extra_submit, requeue=requeue, setup=setup)
        self.transport = transport
        self.env = dict(env or {})
        self.timeout = timeout
        self._wrapper_shipped: set[str] = set()

    def __repr__(self) -> str:
        return f"HTCondorCLI({self.transport!r}, project={self.project!r})"

    def _run(self, argv: Sequence[str], *, idempotent: bool, input: str | None = None) -> Any:
        return self.transport.run(list(argv), env=self.env or None, input=input, timeout=self.timeout,
                                  idempotent=idempotent)

    @staticmethod
    def _failed(argv: Sequence[str], done: Any) -> SchedulerError:
        said = (done.stderr or done.stdout or "").strip() or f"exit status {done.returncode}"
        hint = None
        if done.returncode == 127:
            hint = "the HTCondor tools are not on the PATH of the access point's login shell"
        elif "Failed to connect" in said or "Can't find address" in said or "Unable to locate" in said:
            hint = "the schedd or collector did not answer; check the pool (condor_status) on the access point"
        return SchedulerError(f"{shlex.join(argv)} failed: {said}", command=shlex.join(argv), reply=said, hint=hint)

    def _query(self, argv: Sequence[str]) -> str:
        done = self._run(argv, idempotent=True)
        if done.returncode != 0:
            raise self._failed(argv, done)
        return done.stdout

    # ------------------------------------------------------------------ queries

    def version(self) -> str:
        """The HTCondor release (``condor_version``), asked once."""
        if self._version is None:
            self._version = fmt.parse_version(self._query(["condor_version"]))
        return self._version

    def slots(self) -> list[fmt.Slot]:
        argv = ["condor_status", "-json", "-attributes", ",".join(fmt.SLOT_ATTRS)]
        return fmt.parse_slots(self._query(argv), "condor_status -json")

    def availability(self) -> Availability:
        """Free and total cores of the pool, and the schedds' running and idle jobs."""
        summary = fmt.summarize_pool(self.slots())
        argv = ["condor_status", "-schedd", "-json", "-attributes", "Name,TotalRunningJobs,TotalIdleJobs"]
        running, idle = fmt.schedd_totals(fmt.parse_json_ads(self._query(argv), "condor_status -schedd -json"))
        return fmt.make_availability(self.version(), summary, running, idle, time.time())

    def queue_snapshot(self) -> QueueSnapshot:
        """The pool's queue for the twin (:func:`pool_snapshot`): ``condor_status -json`` (slots),
        ``condor_q -allusers -json`` (every user's jobs), ``condor_status -negotiator -json``."""
        taken = time.time()
        slots = self.slots()
        argv = ["condor_q", "-allusers", "-json", "-attributes", ",".join(fmt.JOB_ATTRS)]
        jobs = fmt.parse_jobs(self._query(argv), "condor_q -allusers -json")
        argv = ["condor_status", "-negotiator", "-json", "-attributes", ",".join(NEGOTIATOR_ATTRS)]
        negotiators = fmt.parse_json_ads(self._query(argv), "condor_status -negotiator -json")
        return pool_snapshot(slots, jobs.values(), negotiators, taken)

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        """Jobs in the queue (``condor_q``), and for ids asked by name those that left it
        (``condor_history``: completed and removed jobs leave the queue at once). With ids (a
        pilot poll) only those jobs are asked for, in batches of :data:`~resel.backends.jobs.POLL_BATCH`;
        without, ``condor_q`` lists this user's jobs (its default), or ``user``'s."""
        wanted = set(fmt.check_ids(ids)) if ids is not None else None
        if wanted is not None and not wanted:
            return {}
        if user is not None:
            _check_line("user", user)
            if not all(c.isalnum() or c in "_.-@" for c in user):
                raise SchedulerError(f"user {user!r} is not a valid user name")
        attrs = ",".join(fmt.JOB_ATTRS)
        argv = ["condor_q", "-json", "-attributes", attrs]
        if wanted is None:
            found = fmt.parse_jobs(self._query(argv + ([user] if user is not None else [])), "condor_q -json")
            return self._filter(found, wanted, user, name_prefix)
        found = {}
        for batch in batches(sorted(wanted)):
            found.update(fmt.parse_jobs(self._query(argv + batch), "condor_q -json"))
        for batch in batches(sorted(wanted - set(found))):
            hist = ["condor_history", "-json", "-attributes", attrs, "-limit", str(len(batch)), *batch]
            found.update(fmt.parse_jobs(self._query(hist), "condor_history -json"))
        return self._filter(found, wanted, user, name_prefix)

    def cpu_info(self) -> dict[str, Any]:
        """The pool's CPUs: models by cpus and the cpu-weighted clock (None where no slot says)."""
        return fmt.cpu_summary(fmt.summarize_pool(self.slots()))

    # ------------------------------------------------------------------ actions

    def user_name(self) -> str:
        """The login on the access point (``id -un``): the jobs' Owner, asked once."""
        if getattr(self, "_user", None) is None:
            self._user = self._query(["id", "-un"]).strip()
        return self._user

    def limits(self) -> tuple[Limits, list[str]]:
        """The schedd's per-owner limits from its configuration (``condor_config_val``, one
        knob at a time: an undefined knob exits 1 and prints nothing on stdout)."""
        values: dict[str, str] = {}
        notes: list[str] = []
        for knob in CONDOR_KNOBS:
            done = self._run(["condor_config_val", knob], idempotent=True)
            if done.returncode == 0 and done.stdout.strip():
                values[knob] = done.stdout.strip().splitlines()[0]
            elif "Not defined" not in (done.stderr or ""):
                notes.append(f"condor_config_val {knob}: {(done.stderr or done.stdout).strip()[:200]}")
        return condor_limits(values), notes

    def _ship_wrapper(self, agent_path: str) -> str:
        """Put the chirp wrapper next to the agent on the access point (once per directory)."""
        path = posixpath.join(posixpath.dirname(agent_path), WRAPPER_NAME)
        if path not in self._wrapper_shipped:
            ship_wrapper(self.transport, path)
            self._wrapper_shipped.add(path)
        return path

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None, inputs: Sequence[str] = ()) -> str:
        """Submit a pilot (``condor_submit -terse``, description on stdin); the job id
        ``Cluster.Proc``. ``output`` is ignored: a pilot's stdout goes to ``pilot.out`` in its
        directory. ``inputs``: the run's shared inputs on the access point and URL inputs the
        pilot carries (:func:`pilot_inputs`). Not idempotent: a lost connection raises
        ConnectionLost and the caller looks the pilot up by its name (``JobBatchName``)."""
        _check_cores(cores)
        agent = agent_command(script)[1]
        wrapper = self._ship_wrapper(agent)
        desc = self.description(script, name=name, cores=cores, walltime=walltime, workdir=workdir,
                                wrapper=wrapper, inputs=inputs)
        self.make_pilot_dirs(self.transport, workdir)
        argv = ["condor_submit", "-terse"]
        done = self._run(argv, idempotent=False, input=render_submit(desc))
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            raise SchedulerError(f"condor_submit refused the pilot: {said}", command="condor_submit -terse",
                                 reply=said)
        ids = fmt.parse_submit_terse(done.stdout)
        if len(ids) != 1:
            raise SchedulerReplyError("condor_submit -terse", f"expected one job, got {ids}")
        return ids[0]

    def cancel(self, ids: Sequence[str]) -> None:
        """Remove jobs; jobs already gone are not an error."""
        wanted = fmt.check_ids(ids)
        if not wanted:
            return
        argv = ["condor_rm", *wanted]
        done = self._run(argv, idempotent=False)
        problems = fmt.parse_rm(done.stdout, done.stderr, done.returncode, wanted)
        if problems:
            raise SchedulerError(f"condor_rm {' '.join(wanted)} failed: {'; '.join(problems)}",
                                 command=shlex.join(argv), reply=(done.stderr or done.stdout).strip())


def _bindings() -> Any:
    try:
        import htcondor2
    except ImportError:
        raise SchedulerError("the HTCondor Python bindings (htcondor2) are not installed",
                             hint="pip install 'resel[htcondor]', or use api = \"cli\"") from None
    return htcondor2


class HTCondorBindings(_Common):
    """HTCondor through ``htcondor2`` on the access point (resel runs there, ``transport`` is
    local): the same answers as :class:`HTCondorCLI` without parsing any command output.

    ``collector`` and ``schedd`` may be given (tests, a pool that is not the local default);
    otherwise ``htcondor2.Collector()`` and ``htcondor2.Schedd()`` are located on first use.
    """

    def __init__(self, transport: Any = None, *, project: str | None = None, accounting_group: str | None = None,
                 requirements: str | None = None, extra_submit: Mapping[str, str] | None = None,
                 collector: Any = None, schedd: Any = None, requeue: bool = False, setup: Sequence[str] = ()):
        super().__init__(project=project, accounting_group=accounting_group, requirements=requirements,
                         extra_submit=extra_submit, requeue=requeue, setup=setup)
        self.htcondor = _bindings()
        self.transport = transport
        self._collector = collector
        self._schedd = schedd
        self._wrapper_shipped: set[str] = set()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SchedulerError:
            raise
        except Exception as e:   # noqa: BLE001 - HTCondorException and the library's others
            raise SchedulerError(f"{what} failed: {e}", command=what, reply=str(e)) from None

    @property
    def collector(self) -> Any:
        if self._collector is None:
            self._collector = self._call("htcondor2.Collector()", self.htcondor.Collector)
        return self._collector

    @property
    def schedd(self) -> Any:
        if self._schedd is None:
            self._schedd = self._call("htcondor2.Schedd()", self.htcondor.Schedd)
        return self._schedd

    def version(self) -> str:
        """The pool's HTCondor release, asked once: the schedds' ``CondorVersion`` (as the CLI's
        ``condor_version`` on the access point says), not the bindings' own release (PyPI's 25.x
        talks to a 23.x pool as well); that only where no schedd ad carries a version."""
        if self._version is None:
            ads = self._call("Collector.query(Schedd)", self.collector.query, self.htcondor.AdTypes.Schedd,
                             projection=["Name", "CondorVersion"])
            said = [str(v) for v in (fmt.value(ad, "CondorVersion") for ad in ads) if v]
            self._version = fmt.parse_version(said[0] if said else self.htcondor.version(),
                                              "the schedd's CondorVersion" if said else "htcondor2.version()")
        return self._version

    def slots(self) -> list[fmt.Slot]:
        ads = self._call("Collector.query(Startd)", self.collector.query, self.htcondor.AdTypes.Startd,
                         projection=list(fmt.SLOT_ATTRS))
        return [fmt.slot_from_ad(ad, "Collector.query(Startd)") for ad in ads]

    def availability(self) -> Availability:
        summary = fmt.summarize_pool(self.slots())
        ads = self._call("Collector.query(Schedd)", self.collector.query, self.htcondor.AdTypes.Schedd,
                         projection=["Name", "TotalRunningJobs", "TotalIdleJobs"])
        running, idle = fmt.schedd_totals(ads, "Collector.query(Schedd)")
        return fmt.make_availability(self.version(), summary, running, idle, time.time())

    def queue_snapshot(self) -> QueueSnapshot:
        """The pool's queue for the twin (:func:`pool_snapshot`), as :meth:`HTCondorCLI.queue_snapshot`
        reads it: the collector's slot and negotiator ads, the schedd's jobs of every user."""
        taken = time.time()
        slots = self.slots()
        ads = self._call("Schedd.query", self.schedd.query, "true", list(fmt.JOB_ATTRS))
        jobs = [fmt.job_from_ad(ad, "Schedd.query") for ad in ads]
        negotiators = self._call("Collector.query(Negotiator)", self.collector.query,
                                 self.htcondor.AdTypes.Negotiator, projection=list(NEGOTIATOR_ATTRS))
        return pool_snapshot(slots, jobs, negotiators, taken)

    @staticmethod
    def _constraint(ids: Sequence[str]) -> str:
        parts = []
        for jid in ids:
            cluster, proc = jid.split(".")
            parts.append(f"(ClusterId == {int(cluster)} && ProcId == {int(proc)})")
        return " || ".join(parts) or "true"

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        wanted = set(fmt.check_ids(ids)) if ids is not None else None
        if wanted is not None and not wanted:
            return {}
        owner = f" && Owner == {classad_string(user)}" if user is not None else ""
        # a name lookup without ``user``: the schedd's "my jobs" (whom it authenticated), as
        # condor_q's default — pilot names are public, another user's job named as a pilot
        # would be taken for it
        mine = {"opts": self.htcondor.QueryOpt.DefaultMyJobsOnly} if name_prefix is not None and user is None else {}
        found: dict[str, JobInfo] = {}
        # with ids (a pilot poll) only those jobs, in batches; the history for those that left
        for batch in (batches(sorted(wanted)) if wanted is not None else [None]):
            constraint = self._constraint(batch) if batch is not None else "true"
            ads = self._call("Schedd.query", self.schedd.query, f"({constraint}){owner}", list(fmt.JOB_ATTRS), **mine)
            found.update({j.job_id: j for j in (fmt.job_from_ad(ad, "Schedd.query") for ad in ads)})
        for batch in batches(sorted(wanted - set(found)) if wanted is not None else []):
            ads = self._call("Schedd.history", self.schedd.history, self._constraint(batch), list(fmt.JOB_ATTRS),
                             match=len(batch))
            found.update({j.job_id: j for j in (fmt.job_from_ad(ad, "Schedd.history") for ad in ads)})
        return self._filter(found, wanted, user, name_prefix)

    def cpu_info(self) -> dict[str, Any]:
        return fmt.cpu_summary(fmt.summarize_pool(self.slots()))

    def submit_description(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
                           wrapper: str, inputs: Sequence[str] = ()) -> Any:
        """The pilot as an ``htcondor2.Submit`` (what :meth:`submit` hands the schedd)."""
        return self.htcondor.Submit(self.description(script, name=name, cores=cores, walltime=walltime,
                                                     workdir=workdir, wrapper=wrapper, inputs=inputs))

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None, inputs: Sequence[str] = ()) -> str:
        _check_cores(cores)
        agent = agent_command(script)[1]
        wrapper = posixpath.join(posixpath.dirname(agent), WRAPPER_NAME)
        sub = self.submit_description(script, name=name, cores=cores, walltime=walltime, workdir=workdir,
                                      wrapper=wrapper, inputs=inputs)
        if self.transport is not None:
            if wrapper not in self._wrapper_shipped:
                ship_wrapper(self.transport, wrapper)
                self._wrapper_shipped.add(wrapper)
            self.make_pilot_dirs(self.transport, workdir)
        result = self._call("Schedd.submit", self.schedd.submit, sub, count=1)
        return f"{int(result.cluster())}.{int(result.first_proc())}"

    def cancel(self, ids: Sequence[str]) -> None:
        wanted = fmt.check_ids(ids)
        if not wanted:
            return
        ad = self._call("Schedd.act(Remove)", self.schedd.act, self.htcondor.JobAction.Remove, wanted)
        bad = sum(int(fmt.value(ad, k) or 0) for k in ("TotalError", "TotalPermissionDenied", "TotalBadStatus"))
        if bad:
            raise SchedulerError(f"removing {' '.join(wanted)} failed for {bad} job(s): {ad}",
                                 command="Schedd.act(Remove)", reply=str(ad))
