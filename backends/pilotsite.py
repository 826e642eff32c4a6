"""One live site as the coordinator sees it: a scheduler to start pilots, and a work directory
on the site's shared filesystem to exchange tasks and results with their agents.

Scheduler-agnostic on purpose (PSI/J's split of executor and launcher): the scheduler object
(any :class:`~resel.backends.jobs.Scheduler`: :class:`~resel.backends.slurm.cli.SlurmCLI`,
:class:`~resel.backends.slurm.rest.SlurmREST`, PBS, HTCondor …) only submits, polls and cancels
batch jobs, in resel's job vocabulary; everything a pilot does once it runs goes through
files written atomically in ``{workdir}/{run_key}/p{pilot}/``, following the agent's protocol
(:mod:`resel.shipped.agent`, docs/agent.md). The coordinator never talks to a compute node.

Every path and name that reaches a command is built here from validated parts (run keys and
pilot numbers) and quoted by the transport; the bag's command travels inside a JSON file and
is run by the agent with ``/bin/sh -c`` as the user wrote it.

Other users share that filesystem, so the work directory must be private before the agent is
shipped into it (:func:`~resel.backends.workdir.prepare_workdir`), everything resel creates
there is 0700/0600, and the pilot's batch script runs the agent only if its SHA-256 is the
one written into the script (:mod:`~resel.backends.verified`); docs/security.md.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import shlex
import stat
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence
from typing import Any

from resel.shipped import agent as agent_module
from resel.backends.jobs import JobInfo, JobState, Scheduler
from resel.backends.transport import FileStat, FileTooLarge
from resel.backends.verified import digest, verified_argv
from resel.backends.waves import AHEAD_MAX, FOLDERS, TORN_READS, WaveCursor, parse_wave_name, wave_name
from resel.backends.workdir import prepare_workdir
from resel.config import relative_path_problem
from resel.domain import InputSpec, Site
from resel.site_options import setup_block
from resel.errors import ReselError

#: the agent file shipped to every site, named after its protocol version
AGENT_NAME = f"resel-agent-v{agent_module.PROTOCOL_VERSION}.py"
_RUN_KEY = re.compile(r"r\d+-[0-9a-f]{6}")
#: the longest agent record read (started/results/agent/heartbeat/rejected JSON are a few
#: hundred bytes to a few KB): a longer file is a bad record, never read into memory
RECORD_LIMIT = 1 << 20
#: the longest wave read (protocol 6: the agent cuts a wave at about 1 MiB, but one result alone
#: may list up to MAX_OUTPUTS outputs — about 100 bytes each — in up to the agent's RESULT_BYTES,
#: 30 MiB: at 2 MiB a result of 30,000 outputs was skipped and its attempt never ended)
WAVE_LIMIT = 32 * RECORD_LIMIT


def job_phase(state: JobState) -> str:
    """``running`` (the pilot holds its cores), ``pending`` (waiting, or waiting again: a
    requeue), ``final`` or ``unknown`` for a job's :class:`~.jobs.JobState`. Every backend
    translates its scheduler's words into JobState (:mod:`.jobs`); a word its table does not
    know is ``unknown``, which concludes nothing: the pilot keeps the state it had, is polled
    on, and the scheduler's word is shown."""
    return JobState(state).phase


#: what an agent may write as an attempt's outcome (docs/agent.md)
OUTCOMES = ("done", "failed", "cancelled", "lost")


@dataclass
class PilotFiles:
    """What one poll found in a pilot's directory: new start and result records (each checked
    against the protocol), the agent's registration and heartbeat, and the records refused."""

    started: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    agent: dict | None = None
    heartbeat: dict | None = None
    #: (file, why) of every record that broke the protocol: logged, counted, skipped
    bad: list[tuple[str, str]] = field(default_factory=list)
    #: a pool's waves read half written (``folder/name``): not bad yet, held by the pilot's
    #: cursor and read again at its next reads (:attr:`~resel.backends.waves.WaveCursor.torn`)
    torn: list[str] = field(default_factory=list)


@dataclass
class WaveRead:
    """One pilot's part of a site's wave read (:meth:`PilotSite._read_waves`): where its
    folders are, its cursor, where its records go, and — for a pool, whose folders are also
    listed — the names read before and in this read."""

    pdir: str
    pilot: int
    cursor: WaveCursor
    found: PilotFiles
    seen: set[str] | None = None
    taken: set[str] | None = None


def _json_or_none(raw: bytes | Exception) -> Any:
    """A small JSON file's document; None when it is missing, too long or not JSON."""
    if isinstance(raw, Exception):
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def task_key(task: int, attempt: int) -> str:
    """The name of a task attempt in the agent's protocol: ``t12-a1`` (attempts count from 1)."""
    return f"t{int(task)}-a{int(attempt)}"


_KEY = re.compile(r"t\d+-a\d+")


def _check_key(key: str) -> None:
    """A task attempt's key becomes part of a path on the site: only ``tN-aM``."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ReselError(f"bad task attempt key {key!r}")


def pilot_path(workdir: str, run_key: str, pilot: int) -> str:
    """A pilot's folder on its site: ``WORKDIR/RUN_KEY/pN`` (the run key checked: it becomes
    part of a path there)."""
    if not _RUN_KEY.fullmatch(run_key):
        raise ReselError(f"bad run key {run_key!r}")
    return posixpath.join(workdir, run_key, f"p{int(pilot)}")


def task_dir(pdir: str, key: str) -> str:
    """An attempt's task folder in its pilot's folder ``pdir``, where the agent runs it (on a
    shared filesystem; an HTCondor slot's is in its scratch)."""
    _check_key(key)
    return posixpath.join(pdir, "tasks", key)


class PilotSite:
    """Pilots and task exchange on one site.

    Args:
        site: the site (its ``access`` table gives the work directory and the agent's Python).
        transport: runs commands and moves files on the site (local or SSH).
        scheduler: submits/polls/cancels batch jobs on the site (a :class:`~.jobs.Scheduler`).
    """

    def __init__(self, site: Site, transport: Any, scheduler: Scheduler):
        if site.access is None:
            raise ReselError(f"site {site.name!r} is not a live site (no access table)")
        self.site = site
        self.name = site.name
        self.transport = transport
        self.scheduler = scheduler
        self._workdir: str | None = None
        self._agent_shipped = False

    # ------------------------------------------------------------------ paths
    @property
    def workdir(self) -> str:
        """The site's work directory with ``~`` expanded on the site (asked once)."""
        if self._workdir is None:
            raw = self.site.access.workdir
            if raw == "~" or raw.startswith("~/"):
                raw = posixpath.join(self.transport.home(), raw[2:])
            self._workdir = posixpath.normpath(raw)
        return self._workdir

    def run_dir(self, run_key: str) -> str:
        if not _RUN_KEY.fullmatch(run_key):
            raise ReselError(f"bad run key {run_key!r}")
        return posixpath.join(self.workdir, run_key)

    def pilot_dir(self, run_key: str, pilot: int) -> str:
        return pilot_path(self.workdir, run_key, pilot)

    def job_name(self, run_key: str, pilot: int) -> str:
        """The batch job's name: how a pilot is found again after a crash (see resume)."""
        return f"resel-{run_key}-p{int(pilot)}"

    # ------------------------------------------------------------------ pilots
    def ship_agent(self) -> str:
        """Copy the agent into the work directory (idempotent); returns its path.

        The work directory is made (0700) and checked first: a directory another user owns or
        may write is refused with a :class:`~resel.backends.workdir.WorkdirError`.
        """
        path = posixpath.join(self.workdir, AGENT_NAME)
        if not self._agent_shipped:
            prepare_workdir(self.transport, self.workdir, site=self.name)
            self.transport.write_file(path, agent_module.source().encode(), mode=0o600)
            self._agent_shipped = True
        return path

    def pilot_script(self, run_key: str, pilot: int, cores: int, walltime: float) -> str:
        """The batch script of a pilot: start the agent on the pilot's directory, if the agent
        file still has the SHA-256 of what resel shipped (written here, in the script)."""
        slots = max(1, cores)
        drain = min(60.0, 0.1 * walltime)
        agent = self.ship_agent()
        options = ["--dir", self.pilot_dir(run_key, pilot), "--pilot", str(int(pilot)), "--slots", str(slots),
                   "--walltime", f"{walltime:g}", "--drain", f"{drain:g}"]
        argv = verified_argv(self.site.access.python, agent, digest(agent_module.source()), options)
        setup = ""
        if self.site.access.setup and self.site.kind != "htcondor":   # HTCondor: the chirp wrapper runs it
            setup = "# the site's setup (sites file, access.setup): its environment reaches the agent and tasks\n" \
                    + setup_block(self.site.access.setup)
        return "#!/bin/sh\n# resel pilot: starts the agent (if unchanged), which takes tasks from its inbox\n" \
               f"{setup}exec {shlex.join(argv)}\n"

    def submit_pilot(self, run_key: str, pilot: int, cores: int, walltime: float, cores_per_task: int = 1,
                     inputs: tuple[str, ...] = ()) -> str:
        """Create the pilot's directory and submit its batch job; returns the job id.

        ``inputs``: files of the run's cache on the site (absolute paths, already sent) that
        the pilot should carry with it — the bag's shared inputs. A site with a shared
        filesystem needs nothing more (its tasks take them from the cache); an HTCondor pool,
        whose slots share nothing with the access point, gets them as the pilot's input files
        (docs/data.md)."""
        pdir = self.make_pilot_dir(run_key, pilot)
        script = self.pilot_script(run_key, pilot, cores // max(1, cores_per_task), walltime)
        extra = {"inputs": tuple(inputs)} if inputs and self.site.kind == "htcondor" else {}
        return self.scheduler.submit(script, name=self.job_name(run_key, pilot), cores=cores,
                                     walltime=walltime, workdir=pdir,
                                     output=posixpath.join(pdir, "pilot.out"), **extra)

    def make_pilot_dir(self, run_key: str, pilot: int) -> str:
        """The pilot's directory with its inbox and cancel folders (all 0700); returns it."""
        pdir = self.pilot_dir(run_key, pilot)
        for sub in ("inbox", "cancel"):
            self.transport.makedirs(posixpath.join(pdir, sub))
        return pdir

    def find_pilot_job(self, run_key: str, pilot: int) -> str | None:
        """The job id of a pilot submitted before a crash, found by its name, or None."""
        name = self.job_name(run_key, pilot)
        for job_id, info in self.scheduler.jobs(name_prefix=name).items():
            if info.name == name:
                return job_id
        return None

    def pilot_jobs(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """The scheduler's view of these jobs, asked by id (never every user's queue): a job
        that ended since the last poll is there with its final state while the scheduler's
        history or accounting keeps it; jobs it no longer knows are absent."""
        if not job_ids:
            return {}
        return self.scheduler.jobs(job_ids)

    def run_jobs(self, run_key: str) -> dict[str, JobInfo]:
        """Every job of this run the scheduler still lists (found by name prefix)."""
        prefix = f"resel-{run_key}-p"
        return {j: i for j, i in self.scheduler.jobs(name_prefix=prefix).items() if i.name.startswith(prefix)}

    def stop_pilot(self, run_key: str, pilot: int, job_id: str | None) -> None:
        """Tell the agent to stop, then cancel the batch job (either alone is enough)."""
        try:
            self.transport.write_file(posixpath.join(self.pilot_dir(run_key, pilot), "stop"), b"stop\n")
        except (OSError, ReselError):
            pass   # the directory may be gone or the site unreachable; scancel still ends it
        if job_id:
            self.scheduler.cancel([job_id])

    # ------------------------------------------------------------------ tasks
    def dispatch(self, run_key: str, pilot: int, task: int, attempt: int, command: str,
                 env: dict[str, str] | None = None, perf: bool = False, timeout: float | None = None,
                 inputs: list[dict] | None = None, outputs: list[dict] | None = None,
                 slots: int | None = None) -> None:
        """Put a task attempt in the pilot's inbox (an atomic write: idempotent on resume);
        the file is :meth:`inbox_file`'s."""
        self.transport.write_file(*self.inbox_file(run_key, pilot, task, attempt, command, env=env, perf=perf,
                                                   timeout=timeout, inputs=inputs, outputs=outputs,
                                                   slots=slots))

    def dispatch_many(self, files: Sequence[tuple[str, bytes]]) -> list[Exception | None]:
        """Put many attempts in their pilots' inboxes at once (``files``: :meth:`inbox_file`'s
        answers): each one's exception or None, in order. Each file is the atomic write
        :meth:`dispatch` makes, so the batch is as idempotent on resume; over SSH their
        requests are in flight together (a wave of a turn's dispatches costs about one round
        trip instead of five per file). A site that cannot be reached raises, as one write."""
        write_files = getattr(self.transport, "write_files", None)
        if write_files is None:     # a transport without batches: one after the other
            results: list[Exception | None] = []
            for path, data in files:
                try:
                    self.transport.write_file(path, data)
                    results.append(None)
                except OSError as e:
                    results.append(e)
            return results
        return write_files(list(files))

    def inbox_file(self, run_key: str, pilot: int, task: int, attempt: int, command: str,
                   env: dict[str, str] | None = None, perf: bool = False, timeout: float | None = None,
                   inputs: list[dict] | None = None, outputs: list[dict] | None = None,
                   slots: int | None = None, order: int | None = None) -> tuple[str, bytes]:
        """A task attempt's inbox file: (its path on the site, its bytes).

        ``inputs`` (name, sha256, size: already in the run's cache) and ``outputs`` (glob,
        optional) are the task's data, protocol 3 (docs/data.md); left out when it has none.
        ``slots``: how many of the agent's slots the attempt takes (protocol 5: a bag of
        several widths, whose pilots count slots in cores); left out for a bag of one width.
        ``order``: the attempt's place in the coordinator's handing order (protocol 7: its
        journal seq), which the agent takes files in — their modification times cannot say it
        (a turn's files are written together: docs/agent.md)."""
        spec = {"task": int(task), "attempt": int(attempt), "command": command, "env": dict(env or {}),
                "perf": bool(perf), "timeout": timeout}
        if inputs:
            spec["inputs"] = inputs
        if outputs:
            spec["outputs"] = outputs
        if slots is not None:
            spec["slots"] = int(slots)
        if order is not None:
            spec["order"] = int(order)
        path = posixpath.join(self.pilot_dir(run_key, pilot), "inbox", task_key(task, attempt) + ".json")
        return path, json.dumps(spec).encode()

    # ------------------------------------------------------------------ task data
    @property
    def shares_files(self) -> bool:
        """Whether the pilots see the work directory (a shared filesystem: Slurm, PBS, local);
        an HTCondor pool's slots see nothing of the access point (docs/data.md)."""
        return self.site.kind != "htcondor"

    def output_path(self, run_key: str, pilot: int, key: str, index: int, name: str) -> str:
        """Where output ``index`` (its place in the result's ``outputs`` list) named ``name`` of
        attempt ``key`` is on the site, for the coordinator to fetch over its transport.

        Shared filesystem: the agent's task folder, ``pN/tasks/KEY/NAME``. HTCondor pool: the
        chirp wrapper put it to ``pN/outputs/KEY.I`` on the access point before it pushed the
        result (the task folder is in the slot's scratch, gone with the pilot)."""
        pdir = self.pilot_dir(run_key, pilot)
        _check_key(key)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ReselError(f"bad output index {index!r}")
        if not self.shares_files:
            return posixpath.join(pdir, "outputs", f"{key}.{index}")
        # glob=True: a file's name may hold * ? [ (``run[0].dat``, matched by ``*.dat``)
        why = relative_path_problem(name, glob=True) if isinstance(name, str) and name else "no name"
        if why:
            raise ReselError(f"bad output name {name!r}: {why}")
        return posixpath.join(task_dir(pdir, key), *name.split("/"))

    def task_files(self, run_key: str, pilot: int, key: str, count: int) -> list[str]:
        """What attempt ``key`` left on the site that holds its data, to remove after a verified
        fetch of its ``count`` outputs (how many the result listed): its task folder on a shared
        filesystem; on an HTCondor pool its ``outputs/KEY.I`` files (the slot's copies are
        removed by the wrapper once put, its task folder with the slot's scratch). The agent's
        records (inbox, started, results) stay: a resumed coordinator reads them."""
        pdir = self.pilot_dir(run_key, pilot)
        _check_key(key)
        if self.shares_files:
            return [task_dir(pdir, key)]
        return [posixpath.join(pdir, "outputs", f"{key}.{i}") for i in range(int(count))]

    def url_inbox_inputs(self, specs: Sequence[InputSpec]) -> list[dict]:
        """The inbox file's ``inputs`` entries for a bag's URL inputs on this site:
        ``{"name", "url"}`` each on an HTCondor pool (its pilots were submitted with the URLs
        in ``inputs``, so the agent finds each in the slot's cache), none elsewhere (resel
        fetches nothing there; :meth:`url_inputs_note`)."""
        if self.shares_files:
            return []
        return [{"name": s.file_name, "url": s.pattern} for s in specs if s.is_url]

    def cancel_task(self, run_key: str, pilot: int, task: int, attempt: int) -> None:
        path = posixpath.join(self.pilot_dir(run_key, pilot), "cancel", task_key(task, attempt))
        self.transport.write_file(path, b"cancel\n")

    def withdraw_task(self, run_key: str, pilot: int, task: int, attempt: int) -> str:
        """Ask for a handed-ahead attempt back, only if its agent has not started it (agent
        protocol 4): ``"withdrawn"`` if it certainly never will — its inbox file renamed away
        here before the agent's own rename into ``claimed/`` (one of the two renames wins) —
        else ``"asked"``: the agent answers (a ``withdrawn`` result, or its ``started`` record).
        An HTCondor pool's agent reads a copy of the inbox, so only its answer counts there."""
        pdir = self.pilot_dir(run_key, pilot)
        key = task_key(task, attempt)
        self.transport.write_file(posixpath.join(pdir, "cancel", key), b"withdraw\n")
        if self.site.kind == "htcondor":
            return "asked"
        try:
            self.transport.rename(posixpath.join(pdir, "inbox", key + ".json"),
                                  posixpath.join(pdir, "inbox", f".withdrawn-{key}"))
        except FileNotFoundError:
            if self.transport.exists(posixpath.join(pdir, "inbox", f".withdrawn-{key}")):
                return "withdrawn"   # renamed by an earlier try whose answer was lost (a retry)
            return "asked"      # claimed (or never written): the agent's records say which
        return "withdrawn"

    def collect(self, run_key: str, pilot: int, seen: set[str], *, heartbeat: bool = False,
                cursor: WaveCursor | None = None, whole: bool = False) -> PilotFiles:
        """New start and result records of a pilot; ``seen`` holds names read before.

        An agent of protocol 6 or later writes its records in waves (one file per turn of its
        loop, :mod:`~resel.backends.waves`): with a ``cursor`` they are read wave after wave
        until one is missing — no listing, a read costs what is new. Otherwise (an older agent,
        or a caller without a cursor) ``started/`` and ``results/`` are listed and every file
        not in ``seen`` is read, per-key record or wave alike.

        An HTCondor pool's wrapper pushes the waves in its own order (a wave held back for its
        outputs, a put that failed) and writes per-key ``evicted`` results of its own, which no
        cursor finds: there the cursor reads the waves at every poll, and the folders are also
        listed (every file not in ``seen`` read, the cursor's waves added to ``seen`` so none is
        read twice) when a new incarnation shows up (an evicted pilot's rerun writes its
        ``evicted`` results before its agent starts), when the caller asks (``whole``: the
        pilot's state changed, or the last read), and every
        :data:`~resel.backends.waves.LIST_EVERY` reads as a backstop. The read is all or
        nothing: ``seen`` and the cursor move only once every part of it came back.

        Every record is checked (:func:`check_started`, :func:`check_result`): one that breaks
        the protocol (not JSON, wrong types, a name that is not its key, a stray README.json)
        is never returned, but listed in ``bad`` once, so one bad file never stops a run. On a
        pool a wave (or the wrapper's per-key ``evicted`` result) that is not JSON is not bad at
        once: the wrapper may still be putting it
        (docs/htcondor.md), so the cursor holds it (listed in ``torn``) and reads it again at
        each next read — its records taken once it is whole — and only the
        :data:`~resel.backends.waves.TORN_READS`-th read that finds it so lists it in ``bad``;
        the waves after it are read meanwhile. A
        record that is not a regular file of the site's user (another user's file, a link) is
        not even read: only the user's agent (or, on HTCondor, the user's own shadow) writes
        there, so it is someone else's doing (docs/security.md).
        With ``heartbeat``, ``heartbeat.json`` is read too (every poll: it tells a relaunched
        agent from its predecessor); ``agent.json`` is read once, or again after ``seen``
        forgets it. Both are read before the records, so the records are at least as new.
        """
        return self.collect_many(run_key, [(pilot, seen, cursor)], heartbeat=heartbeat, whole=whole)[pilot]

    def collect_many(self, run_key: str, asks: Sequence[tuple[int, set[str], WaveCursor | None]], *,
                     heartbeat: bool = False, whole: bool = False) -> dict[int, PilotFiles]:
        """:meth:`collect` of several pilots of this site, ``asks`` each (pilot, seen, cursor),
        in one exchange: every pilot's ``agent.json`` and ``heartbeat.json`` in one batch, then
        every wave their cursors are due in the same rounds (over SSH one batch of requests in
        flight for all the pilots, not a few round trips per pilot: a pool of one-core pilots
        was read pilot after pilot, its read growing with its pilots). A pilot whose read needs
        a listing (an older agent, a new incarnation, ``whole``, the backstop) is listed on its
        own first. All or nothing across the pilots: every ``seen`` and cursor moves only once
        every part of every pilot's read came back, so a read that fails half-way loses no
        record of a pilot read before the failure."""
        pdirs = [self.pilot_dir(run_key, pilot) for pilot, _seen, _cursor in asks]
        founds = [PilotFiles() for _ in asks]
        takens: list[set[str]] = [set() for _ in asks]      # into ``seen`` once the whole read came back
        self._read_heads(asks, pdirs, founds, takens, heartbeat)
        waves: list[WaveRead] = []
        counted: list[tuple[WaveCursor, bool, int]] = []
        for (pilot, seen, cursor), pdir, found, taken in zip(asks, pdirs, founds, takens):
            unknown = cursor.hear(found.agent, found.heartbeat) if cursor is not None else False
            if cursor is None or not cursor.waves:
                self._list_records(pdir, int(pilot), seen, found, taken)
            elif self.shares_files:
                if unknown:
                    for sub in FOLDERS:     # once per new incarnation: the earlier ones' waves
                        try:
                            cursor.learn(self.transport.entries(posixpath.join(pdir, sub)))
                        except FileNotFoundError:
                            pass
                waves.append(WaveRead(pdir, int(pilot), cursor, found))
            else:
                listing = unknown or whole or cursor.listing_due()
                if listing:      # first: the cursor then follows every incarnation the folders show
                    cursor.learn(self._list_records(pdir, int(pilot), seen, found, taken, cursor))
                waves.append(WaveRead(pdir, int(pilot), cursor, found, seen, taken))
                counted.append((cursor, listing, int(pilot)))
        self._read_waves(waves)()
        for cursor, listing, pilot in counted:
            cursor.read_counted(listing, pilot)
        for (_pilot, seen, _cursor), taken in zip(asks, takens):
            seen |= taken
        return {pilot: found for (pilot, _seen, _cursor), found in zip(asks, founds)}

    def _read_heads(self, asks: Sequence[tuple[int, set[str], WaveCursor | None]], pdirs: list[str],
                    founds: list[PilotFiles], takens: list[set[str]], heartbeat: bool) -> None:
        """Each pilot's ``agent.json`` (until it was read once) and, with ``heartbeat``, its
        ``heartbeat.json``, in one batch; read before the records, so the records are at least
        as new. One missing, too long or not JSON is simply not there yet."""
        heads: list[tuple[int, str]] = []
        for i, ((_pilot, seen, _cursor), pdir) in enumerate(zip(asks, pdirs)):
            if "agent.json" not in seen:
                heads.append((i, "agent.json"))
            if heartbeat:
                heads.append((i, "heartbeat.json"))
        raws = self._read_many([(posixpath.join(pdirs[i], name), RECORD_LIMIT) for i, name in heads])
        for (i, name), raw in zip(heads, raws):
            doc = _json_or_none(raw)
            if not isinstance(doc, dict):
                continue
            if name == "agent.json":
                founds[i].agent = doc
                takens[i].add(name)
            elif check_heartbeat(doc) is None:
                founds[i].heartbeat = doc

    def _read_waves(self, reads: list[WaveRead]) -> Callable[[], None]:
        """Every wave the cursors have not read yet, in order, to the first missing one of each
        folder and incarnation of each pilot. In rounds: the next few names of each
        (``WaveCursor.ahead``: one more than the last read found there) are looked at
        (``lstat``: the owner check, which also finds the end) in one batch, the ones there
        read in another — every pilot's in the same batches: over SSH each batch's requests in
        flight together, a few round trips for a site's read instead of six per wave — and a
        folder whose names were all there goes on to the next round. The cursors move past the
        waves only once every round's reads came back: a read that fails leaves them where they
        were (read again next time; the consumed set skips what was taken): it returns the
        move, for the caller to make once its whole read came back. A read with ``seen`` (a
        pool's, whose folders are also listed) passes over unread a wave named there or in its
        ``taken``, and adds each wave it reads to ``taken``."""
        fresh: list[set[str]] = [set() for _ in reads]
        took: list[list[tuple[str, str]]] = [[] for _ in reads]
        counts: list[dict[tuple[str, str], int]] = [{} for _ in reads]
        self._reread_torn([r for r in reads if r.seen is not None])
        due = [(j, sub, inc, n, r.cursor.ahead(sub, inc)) for j, r in enumerate(reads) for sub, inc, n in r.cursor.due()]
        while due:
            names = [[wave_name(inc, n + k) for k in range(ahead)] for _j, _sub, inc, n, ahead in due]
            stats = iter(self._stat_many([posixpath.join(reads[j].pdir, sub, name)
                                          for (j, sub, _inc, _n, _a), row in zip(due, names) for name in row]))
            there: list[tuple[int, str, str, str, FileStat]] = []
            more: list[tuple[int, str, str, int, int]] = []
            for (j, sub, inc, n, ahead), row in zip(due, names):
                looked = [next(stats) for _ in row]
                count = next((k for k, st in enumerate(looked) if isinstance(st, FileNotFoundError)), ahead)
                there += [(j, sub, inc, row[k], looked[k]) for k in range(count)]    # type: ignore[misc]
                counts[j][(sub, inc)] = counts[j].get((sub, inc), 0) + count
                if count == ahead:
                    more.append((j, sub, inc, n + ahead, min(2 * ahead, AHEAD_MAX)))
            # a pool's: a wave its listing read already (this read or an earlier one) is passed over
            listed = {(j, f"{sub}/{name}") for j, sub, _inc, name, _owner in there
                      if reads[j].seen is not None
                      and (f"{sub}/{name}" in reads[j].seen or f"{sub}/{name}" in (reads[j].taken or ()))}
            readable = [(j, sub, name) for j, sub, _inc, name, owner in there
                        if self._own_file(owner) and (j, f"{sub}/{name}") not in listed]
            raws = iter(self._read_many([(posixpath.join(reads[j].pdir, sub, name), WAVE_LIMIT)
                                         for j, sub, name in readable]))
            for j, sub, inc, name, owner in there:
                r = reads[j]
                fresh[j].add(inc)
                took[j].append((sub, inc))
                if (j, f"{sub}/{name}") in listed:
                    continue
                if r.taken is not None:
                    r.taken.add(f"{sub}/{name}")
                if not self._own_file(owner):
                    _not_read(r.found, f"p{r.pilot}/{sub}/{name}", owner)
                    continue
                raw = next(raws)
                if not isinstance(raw, FileNotFoundError):
                    self._take_wave(raw if isinstance(raw, bytes) else None, r.pilot, sub, name, r.found,
                                    r.cursor if r.seen is not None else None)
            due = more

        def move() -> None:
            for r, its_took, its_counts, its_fresh in zip(reads, took, counts, fresh):
                for sub, inc in its_took:
                    r.cursor.took(sub, inc)
                for (sub, inc), count in its_counts.items():
                    r.cursor.found(sub, inc, count)
                r.cursor.read_done(its_fresh)
                if r.seen is not None:
                    r.cursor.hold(r.found.torn)
        return move

    def _reread_torn(self, reads: list[WaveRead]) -> None:
        """Every wave (or per-key ``evicted`` result) these pools' cursors hold half written
        (WaveCursor.torn) read again, in
        one batch of looks and one of reads: its records if it is whole now, held again while
        fewer than TORN_READS reads found it torn, else reported bad. Only this reads a held wave:
        its name is in ``seen`` (or this read's ``taken``), which the listing and the cursor's
        rounds pass over, so none is read twice."""
        held = [(r, wave) for r in reads for wave in r.cursor.held()]
        if not held:
            return
        stats = self._stat_many([posixpath.join(r.pdir, wave) for r, wave in held])
        raws = iter(self._read_many([(posixpath.join(r.pdir, wave), _limit_of(wave)) for (r, wave), st in zip(held, stats)
                                     if not isinstance(st, Exception) and self._own_file(st)]))
        for (r, wave), st in zip(held, stats):
            if isinstance(st, Exception):
                _torn(r.found, r.cursor, r.pilot, wave, "gone since it was read half written")
            elif not self._own_file(st):
                _not_read(r.found, f"p{r.pilot}/{wave}", st)
            elif isinstance(raw := next(raws), FileNotFoundError):
                _torn(r.found, r.cursor, r.pilot, wave, "gone since it was read half written")
            else:
                sub, name = wave.split("/")
                self._take_listed(raw if isinstance(raw, bytes) else None, r.pilot, sub, name,
                                  parse_wave_name(name) is not None, r.found, r.cursor)

    def _own_file(self, owner: FileStat) -> bool:
        """A regular file of the site's user (not a link, not someone else's)."""
        return owner.uid == self.transport.uid() and stat.S_ISREG(owner.mode)

    def _stat_many(self, paths: list[str]) -> list[FileStat | Exception]:
        """Each path's FileStat or FileNotFoundError (a batch where the transport has one); any
        other failure raises, as one stat would."""
        stat_files = getattr(self.transport, "stat_files", None)
        if stat_files is not None:
            stats = stat_files(paths) if paths else []
        else:
            stats = []
            for path in paths:
                try:
                    stats.append(self.transport.stat(path))
                except FileNotFoundError as e:
                    stats.append(e)
        for st in stats:
            if isinstance(st, Exception) and not isinstance(st, FileNotFoundError):
                raise st
        return stats

    def _take_wave(self, raw: bytes | None, pilot: int, sub: str, name: str, found: PilotFiles,
                   cursor: WaveCursor | None = None) -> None:
        """A wave's records, each checked as its own per-key file was (its key is its task and
        attempt), into ``found``; what breaks the protocol into ``found.bad``. With a pool's
        ``cursor``, a wave that is not JSON may be one the wrapper is still putting: held for the
        next reads (``found.torn``) until :data:`~resel.backends.waves.TORN_READS` reads found it
        so."""
        tag = f"p{int(pilot)}/{sub}/{name}"
        if raw is None:
            found.bad.append((tag, f"longer than {WAVE_LIMIT:,} bytes"))
            return
        records, why, unparsed = _load_wave(raw)
        if why and unparsed and cursor is not None:
            _torn(found, cursor, pilot, f"{sub}/{name}", why)
            return
        if why:
            found.bad.append((tag, why))
            return
        check, bucket = (check_started, found.started) if sub == "started" else (check_result, found.results)
        for i, record in enumerate(records):
            why = "not a JSON object" if not isinstance(record, dict) else check(record, _own_key(record))
            if why:
                named = record.get("file") if isinstance(record, dict) else None   # a bad inbox file's
                found.bad.append((f"{tag} record {i + 1}" + (f" ({named[:80]})" if isinstance(named, str) else ""),
                                  why))
            else:
                bucket.append(record)

    def _list_records(self, pdir: str, pilot: int, seen: set[str], found: PilotFiles,
                      taken: set[str], cursor: WaveCursor | None = None) -> list[str]:
        """Every file of ``started/`` and ``results/`` not in ``seen``: per-key records (agent
        protocol 5 and earlier, the HTCondor wrapper's ``evicted`` results) and waves. Both
        folders are listed first, then every new file read in one batch (over SSH their
        requests in flight together), then each taken in the listing's order; its name goes
        into ``taken`` (the caller adds them to ``seen`` once its whole read came back), a wave
        read half written too: a pool's ``cursor`` holds it and reads it again
        (:meth:`_take_wave`). Returns the names listed."""
        steps: list[tuple[str, str, bool]] = []       # (sub, name, wave) to read, in order
        listed: list[str] = []
        for sub in ("started", "results"):
            try:
                entries = self.transport.entries(posixpath.join(pdir, sub))
            except FileNotFoundError:
                continue
            listed += entries
            for name in sorted(entries):
                tag = f"{sub}/{name}"
                if not name.endswith(".json") or name.startswith(".") or tag in seen:
                    continue
                owner = entries[name]
                if not self._own_file(owner):
                    taken.add(tag)
                    _not_read(found, f"p{pilot}/{tag}", owner)
                    continue
                steps.append((sub, name, parse_wave_name(name) is not None))
        raws = self._read_many([(posixpath.join(pdir, sub, name), WAVE_LIMIT if wave else RECORD_LIMIT)
                                for sub, name, wave in steps])
        for (sub, name, wave), raw in zip(steps, raws):
            if isinstance(raw, FileNotFoundError):
                continue
            self._take_listed(raw if isinstance(raw, bytes) else None, pilot, sub, name, wave, found, cursor)
            taken.add(f"{sub}/{name}")
        return listed

    def _read_many(self, items: list[tuple[str, int]]) -> list[bytes | Exception]:
        """Each file's bytes, FileNotFoundError or FileTooLarge (a batch where the transport
        has one); any other failure raises, as one read would."""
        read_files = getattr(self.transport, "read_files", None)
        if read_files is not None:
            raws = read_files(items) if items else []
        else:
            raws = []
            for path, limit in items:
                try:
                    raws.append(self.transport.read_file(path, limit=limit))
                except (FileNotFoundError, FileTooLarge) as e:
                    raws.append(e)
        for raw in raws:
            if isinstance(raw, Exception) and not isinstance(raw, (FileNotFoundError, FileTooLarge)):
                raise raw
        return raws

    def _take_listed(self, raw: bytes | None, pilot: int, sub: str, name: str, wave: bool,
                     found: PilotFiles, cursor: WaveCursor | None = None) -> None:
        """A listed record file's content (None: over its limit) into ``found``; one read half
        written (not JSON: a wave, or the pool wrapper's per-key ``evicted`` result) held by a
        pool's ``cursor``."""
        tag = f"{sub}/{name}"
        if wave:
            self._take_wave(raw, pilot, sub, name, found, cursor)
            return
        record, why = (None, f"longer than {RECORD_LIMIT:,} bytes") if raw is None else _load_record(raw)
        if why and raw is not None and cursor is not None and _unparsed(raw):
            # a pool's wrapper writes its own `evicted` results per key, put under the final
            # name where chirp refuses `link`: held and read again, as a wave is
            _torn(found, cursor, pilot, tag, why)
            return
        if record is not None:
            why = (check_started if sub == "started" else check_result)(record, name[:-len(".json")])
        if why:
            found.bad.append((f"p{pilot}/{tag}", why))
        else:
            (found.started if sub == "started" else found.results).append(record)

    def rejected(self, run_key: str, pilot: int) -> dict | None:
        """The agent's record of files in its directory it refused to act on (another user's
        inbox file, a planted link): ``{"count": N, "files": [...]}``, or None if there are
        none. The heartbeat's ``rejected`` carries the same count."""
        path = posixpath.join(self.pilot_dir(run_key, pilot), "rejected.json")
        record = self._read_json(path)
        return record if isinstance(record, dict) else None

    def _read_json(self, path: str) -> Any:
        try:
            return json.loads(self.transport.read_file(path, limit=RECORD_LIMIT))
        except (FileNotFoundError, ValueError, RecursionError):     # FileTooLarge is a ValueError
            return None


def _torn(found: PilotFiles, cursor: WaveCursor, pilot: int, wave: str, why: str) -> None:
    """A pool's wave or per-key record (``folder/name``) read half written: held for the next read while the
    cursor holds it, else reported bad, saying it was so on every read."""
    if cursor.holds(wave):
        found.torn.append(wave)
    else:
        found.bad.append((f"p{int(pilot)}/{wave}", f"{why} (on {TORN_READS} reads in a row)"))


def _not_read(found: PilotFiles, tag: str, owner: FileStat) -> None:
    """A record file that is not a regular file of the site's user: listed as bad, never read."""
    found.bad.append((tag, f"not a regular file of yours (owner uid {owner.uid}"
                           f"{', a link' if owner.is_link else ''}): not read"))


def url_inputs_note(site: Site, urls: Sequence[str]) -> str | None:
    """What to tell the user at the start of a run whose bag has URL inputs, for this site
    (None: nothing to say). An HTCondor pilot carries them in its ``transfer_input_files``
    (the pool's transfer plugins fetch them); anywhere else resel fetches nothing, so the
    coordinator leaves them out of the inbox files and the site's ``setup`` lines must fetch
    them where the tasks look (docs/data.md)."""
    if not urls:
        return None
    listed = ", ".join(urls[:3]) + (f" and {len(urls) - 3} more" if len(urls) > 3 else "")
    if site.kind == "htcondor":
        return f"URL inputs ({listed}) are fetched by the pool's file transfer, for each pilot"
    return (f"resel does not fetch URL inputs ({listed}) on a {site.kind} site: its tasks find them only "
            "where the site's setup lines (access.setup in the sites file) put them; docs/data.md")


# ---------------------------------------------------------------------- the agent's records
#: why a document nested too deep for the parser is refused: JSON, but no agent writes it
_TOO_DEEP = "not JSON: nested too deep"


def _load_json(raw: bytes) -> tuple[Any, str | None]:
    """An agent file's JSON document, or why it is not JSON."""
    try:
        return json.loads(raw), None
    except ValueError as exc:          # includes UnicodeDecodeError
        return None, f"not JSON: {exc}"
    except RecursionError:
        return None, _TOO_DEEP


def _limit_of(tag: str) -> int:
    """The size limit of a record file (``folder/name``): a wave's, or a per-key record's."""
    return WAVE_LIMIT if parse_wave_name(tag.split("/")[-1]) is not None else RECORD_LIMIT


def _unparsed(raw: bytes) -> bool:
    """Whether a per-key record's bytes do not even parse as JSON (what a record read half
    written gives: an object cut short anywhere is never JSON), as against JSON that breaks the
    protocol, which was written whole."""
    doc, why = _load_json(raw)
    return why is not None and why != _TOO_DEEP


def _load_record(raw: bytes) -> tuple[dict | None, str | None]:
    doc, why = _load_json(raw)
    if why:
        return None, why
    if not isinstance(doc, dict):
        return None, f"not a JSON object but {type(doc).__name__}"
    return doc, None


def _load_wave(raw: bytes) -> tuple[list, str | None, bool]:
    """A wave's records, or why it cannot be taken and whether it did not even parse: a list cut
    short anywhere is never JSON, so such a wave may be one read half written, while a wave of
    JSON that is not a list was written whole and breaks the protocol."""
    doc, why = _load_json(raw)
    if why:
        return [], why, why != _TOO_DEEP
    if not isinstance(doc, list):
        return [], f"a wave must be a JSON list, not {type(doc).__name__}", False
    return doc, None, False


def _own_key(rec: dict) -> str:
    """The key a wave's record names (its task and attempt), for the checks that compare a
    per-key file's name with its record; "" when they are not counts (the check says why)."""
    task, attempt = rec.get("task"), rec.get("attempt")
    return task_key(task, attempt) if _is_count(task) and _is_count(attempt) else ""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 53


def _is_time(value: Any, optional: bool = False) -> bool:
    if value is None:
        return optional
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _key_problem(rec: dict, stem: str) -> str | None:
    task, attempt = rec.get("task"), rec.get("attempt")
    if not _is_count(task) or not _is_count(attempt):
        return f"task and attempt must be non-negative integers, not {task!r} and {attempt!r}"
    if stem != task_key(task, attempt):
        return f"the file name is not the key {task_key(task, attempt)} of its task and attempt"
    return None


def _text_problem(rec: dict) -> str | None:
    """Why a record holds a string that is not text (JSON's ``"\\udcff"``, a lone surrogate,
    reads into one, and no agent writes it), or None: stored, such a string stopped the
    coordinator (SQLite refuses it) — at once and at every ``--resume``."""
    try:
        json.dumps(rec, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "a string in it is not UTF-8 text (a lone surrogate)"
    except (TypeError, ValueError, RecursionError):
        pass                              # the field checks say what is wrong
    return None


def check_started(rec: dict, stem: str) -> str | None:
    """Why a ``started/{key}.json`` record breaks the protocol, or None."""
    problem = _key_problem(rec, stem) or _text_problem(rec)
    if problem:
        return problem
    if not _is_time(rec.get("time")):
        return f"time must be a number, not {rec.get('time')!r}"
    if rec.get("host") is not None and not isinstance(rec.get("host"), str):
        return f"host must be a string, not {rec.get('host')!r}"
    return None


def check_result(rec: dict, stem: str) -> str | None:
    """Why a ``results/{key}.json`` record breaks the protocol, or None."""
    problem = _key_problem(rec, stem) or _text_problem(rec)
    if problem:
        return problem
    if rec.get("outcome") not in OUTCOMES:
        return f"outcome must be one of {', '.join(OUTCOMES)}, not {rec.get('outcome')!r}"
    for name in ("start", "end"):
        if not _is_time(rec.get(name), optional=True):
            return f"{name} must be a number or null, not {rec.get(name)!r}"
    for name in ("exit_code", "signal"):
        value = rec.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{name} must be an integer or null, not {value!r}"
    for name in ("reason", "host", "stdout_tail", "stderr_tail", "incarnation"):
        value = rec.get(name)
        if value is not None and not isinstance(value, str):
            return f"{name} must be a string or null, not {type(value).__name__}"
    if rec.get("perf") is not None and not isinstance(rec.get("perf"), dict):
        return f"perf must be an object or null, not {type(rec.get('perf')).__name__}"
    return _outputs_problem(rec)


_SHA256 = re.compile(r"[0-9a-f]{64}")
#: the most outputs one result may list (a glob over a task folder of many files)
MAX_OUTPUTS = 100_000


def _outputs_problem(rec: dict) -> str | None:
    """Why a result's ``outputs``/``refused`` (protocol 3) break the protocol, or None. An
    output's name must stay inside the task's folder: the coordinator fetches exactly that."""
    outputs, refused = rec.get("outputs"), rec.get("refused")
    if outputs is not None:
        if not isinstance(outputs, list) or len(outputs) > MAX_OUTPUTS:
            return f"outputs must be a list of at most {MAX_OUTPUTS:,} objects"
        names = set()
        for out in outputs:
            if not isinstance(out, dict):
                return "an output must be an object"
            name = out.get("name")
            why = relative_path_problem(name, glob=True) if isinstance(name, str) and name else "no name"
            if why:
                return f"output name {name!r}: {why}"
            if name in names:
                return f"output {name!r} listed twice"
            names.add(name)
            if not _is_count(out.get("size")):
                return f"output {name}: size must be a non-negative integer"
            if not isinstance(out.get("sha256"), str) or not _SHA256.fullmatch(out["sha256"]):
                return f"output {name}: sha256 must be 64 lowercase hexadecimal digits"
    if refused is not None and not (isinstance(refused, list) and all(
            isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("why"), str) for r in refused)):
        return "refused must be a list of {name, why} objects"
    return None


def check_heartbeat(rec: dict) -> str | None:
    """Why a ``heartbeat.json`` cannot be used (an older agent's is fine without an incarnation)."""
    if not _is_time(rec.get("time")):
        return "time must be a number"
    if rec.get("incarnation") is not None and not isinstance(rec.get("incarnation"), str):
        return "incarnation must be a string"
    if not _is_time(rec.get("started"), optional=True):
        return "started must be a number"
    return None
