"""Domain types: a task bag, its tasks' measured profile, and sites.

These are plain frozen dataclasses built once by :mod:`resel.config` (from TOML files,
the embedded defaults included); everything downstream (LIM, engine, simulator) reads them and never
mutates them, so a run can be reproduced from them alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resel.command_template import fill
from resel.models.distributions import Dist
from resel.url_inputs import is_url, url_file_name


@dataclass(frozen=True, slots=True)
class Profile:
    """What was measured of one task on the baseline machine (seeds/003 §4.1).

    ``instructions`` is the retired-instruction count (perf ``instructions``), which LIM uses as
    the task's sequential cycle count (eq. 3.3–3.5). ``cycles`` and ``ipc`` are optional
    extras that let the model report p2a_cy and ε.
    """

    instructions: float
    cycles: float | None = None
    ipc: float | None = None
    baseline: str | None = None


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One entry of a bag's ``inputs``: a file or a glob, relative to the bag file, in which
    ``{index}`` and ``{name}`` are filled in per task (docs/data.md). ``name`` is the file's
    name in the task's directory (``as`` in the bag file); None keeps its own name.

    Or a URL (``osdf://…``, ``https://…``; :mod:`resel.url_inputs`): the same for every task,
    never fetched, checked or hashed here — the site fetches it (an HTCondor pilot's
    ``transfer_input_files``); its name is ``as`` or the last part of its path."""

    pattern: str
    name: str | None = None

    @property
    def is_url(self) -> bool:
        """Whether the site fetches this input (a URL) rather than resel (a file here)."""
        return is_url(self.pattern)

    @property
    def file_name(self) -> str | None:
        """A URL input's name in the task's folder (``as``, else its file name); None for files."""
        return (self.name or url_file_name(self.pattern)) if self.is_url else None


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """One entry of a bag's ``outputs``: a glob relative to the task's directory. A required
    one (the default) that matches no file fails the attempt with its name."""

    pattern: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class DataSpec:
    """What a bag's tasks read and write (docs/data.md): the files that must reach the site
    that runs each task, the files that must come home from it, and where they go.

    ``base`` is the folder inputs are relative to (the bag file's); ``results`` the folder
    results go to as the bag file says it (None: ``./resel-results``; ``resel run --results``
    overrides it). The ``*_mb`` sizes (decimal megabytes) are what selection and the
    simulator price before any transfer is seen: ``output_mb`` per task (outputs do not exist
    before a task runs), and ``input_mb``/``shared_mb`` for a bag whose inputs are not files
    on this machine (a simulated what-if); declared inputs are measured instead.
    """

    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[OutputSpec, ...] = ()
    results: str | None = None
    base: str = "."
    input_mb: float | None = None
    shared_mb: float | None = None
    output_mb: float | None = None

    @property
    def moves_files(self) -> bool:
        """Whether a live run carries files for the tasks (inputs to stage, outputs to fetch)."""
        return bool(self.inputs or self.outputs)

    @property
    def urls(self) -> tuple[InputSpec, ...]:
        """The inputs the site fetches (URLs): not expanded, read or hashed here."""
        return tuple(i for i in self.inputs if i.is_url)

    @property
    def files(self) -> tuple[InputSpec, ...]:
        """The inputs resel reads here and sends (files and globs)."""
        return tuple(i for i in self.inputs if not i.is_url)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One row of a bag's task table (docs/configuration.md, "Bags of unequal tasks"): its
    name, its size (atoms, MD steps: what its class's size law reads), its cores, the shell
    words ``{args}`` stands for, its class, and the instructions that class predicts for it."""

    name: str
    instructions: float
    size: float = 0.0
    cores: int = 1
    args: str = ""
    cls: str = ""
    #: where the row was read, for errors: the file, and the row in it (``line 7``,
    #: ``bag.tasks[6] (line 40)``)
    source: str = ""
    where: str = ""


@dataclass(frozen=True, slots=True)
class Bag:
    """A bag of ``count`` independent tasks sharing one command template and one profile, or
    (``tasks``) a table of tasks each with its own size, cores, arguments and instructions.

    A bag with a table keeps every bag-wide view true of the whole: ``profile.instructions`` is
    the tasks' mean (so ``count`` × it is the bag's work), ``cores_per_task`` the widest task's
    cores (a pilot must hold that many; tasks of several widths share a pilot's cores,
    resel/engine_packing.py); :attr:`weights` scales each task's T̂x from the mean.
    """

    name: str
    command: str
    count: int
    cores_per_task: int
    profile: Profile
    isa: str = "x86"
    source: str = "<memory>"
    #: live runs: every Nth task (by index) runs under ``perf stat`` and feeds calibration
    #: (0: none, 1: every task) — the thesis could measure only ~1 % of its OSG runs
    perf_every: int = 0
    #: per-site command templates that replace ``command`` on those sites (``gmx_mpi`` on one
    #: cluster, ``gmx`` elsewhere), as (site, template) pairs in the file's order
    site_commands: tuple[tuple[str, str], ...] = ()
    #: the files each task reads and writes (``inputs``/``outputs``/``results``, docs/data.md);
    #: None: tasks find their inputs on the site and their outputs stay there
    data: DataSpec | None = None
    #: the task table (empty: ``count`` equal tasks, each ``profile.instructions``)
    tasks: tuple[TaskSpec, ...] = ()
    #: the order tasks wait in at each site: ``given`` (the table's), ``largest`` (most
    #: instructions first, ties in the table's order) or ``auto``: largest first unless a site
    #: is a per-task pool (docs/peers.md has the measurement)
    order: str = "auto"

    def resized(self, count: int) -> "Bag":
        """The same bag with another number of tasks (workload sizes of experiment 2). A table
        bag keeps its first ``count`` rows, or repeats the table (``row.1``, ``row.2``, …) to
        reach ``count``."""
        tasks = self.tasks
        if tasks and count != len(tasks):
            n = len(tasks)
            tasks = tuple(t if i < n else _renamed(t, f"{t.name}.{i // n}")
                          for i, t in ((i, tasks[i % n]) for i in range(count)))
        profile = self.profile if not tasks else Profile(
            _mean(t.instructions for t in tasks), None, None, self.profile.baseline)
        return Bag(self.name, self.command, count, self.cores_per_task, profile, self.isa, self.source,
                   self.perf_every, self.site_commands, self.data, tasks, self.order)

    @property
    def task_cores(self) -> tuple[int, ...] | None:
        """Each task's cores, for a table of several widths (None: every task is
        ``cores_per_task`` wide) — what an attempt of each holds."""
        widths = tuple(t.cores for t in self.tasks)
        return widths if len(set(widths)) > 1 else None

    @property
    def weights(self) -> tuple[float, ...] | None:
        """Each task's instructions over the bag's mean (``profile.instructions``): T̂x of
        task i on a site is the site's T̂x times weight i. None for a bag of equal tasks."""
        if not self.tasks:
            return None
        mean = self.profile.instructions
        return tuple(t.instructions / mean for t in self.tasks)

    def instructions_of(self, index: int) -> float:
        """Task ``index``'s instructions: its row's, else the bag's profile."""
        return self.tasks[index].instructions if self.tasks else self.profile.instructions

    def measured(self, index: int) -> bool:
        """Whether task ``index`` runs under the probe (``perf_every``)."""
        return self.perf_every > 0 and index % self.perf_every == 0

    def command_for(self, index: int, site: str | None = None) -> str:
        """The shell command of task ``index`` (0-based) on ``site``: the site's own template if
        the bag has one (``[bag.site_commands]``), else ``command``. Only ``{index}`` and
        ``{name}`` are filled in — and in a bag with a task table ``{task}``, ``{size}`` and
        ``{args}`` (the row's) —, every other brace is the shell's (:mod:`resel.command_template`)."""
        if self.tasks:
            row = self.tasks[index]
            return fill(self.template_for(site), index, self.name, row=(row.name, row.size, row.args))
        return fill(self.template_for(site), index, self.name)

    def template_for(self, site: str | None) -> str:
        """The command template tasks run with on ``site``."""
        for name, template in self.site_commands:
            if name == site:
                return template
        return self.command


@dataclass(frozen=True, slots=True)
class Clock:
    """A site's clock in GHz: ``base`` from the specification, ``avg`` measured under load."""

    base: float
    avg: float | None = None

    def get(self, which: str) -> float:
        """The clock LIM should use: ``"base"`` or ``"avg"`` (falls back to base if unmeasured)."""
        if which == "avg" and self.avg is not None:
            return self.avg
        return self.base


@dataclass(frozen=True, slots=True)
class PilotPolicy:
    """How resel acquires a site's cores.

    ``mode = "single"``: at most ``max_pilots`` pilot(s) at a time, sized for the tasks assigned
    to the site (the thesis's one pilot per supercomputer). ``mode = "per-task"``: one pilot
    per task, each ``cores_per_task`` wide (single-core OSG pilots).
    """

    mode: str = "single"
    max_cores: int | None = None
    walltime: float = 48 * 3600.0
    max_pilots: int = 1


@dataclass(frozen=True, slots=True)
class WaitModel:
    """Queue wait of a simulated pilot, in seconds.

    The wait is ``dist`` scaled by ``nodes ** size_exponent``, where nodes is the pilot's
    cores divided by ``cores_per_node`` (rounded up): larger requests wait longer, which is
    what the thesis saw on Bridges and Comet for workloads of 256 tasks and more.
    """

    dist: Dist
    size_exponent: float = 0.0
    cores_per_node: int = 1


@dataclass(frozen=True, slots=True)
class QueueModel:
    """A simulated site whose queue is a real batch queue instead of a wait distribution.

    Other users' jobs are replayed from ``trace`` (SWF) under ``policy`` on the site's
    cores, and resel's pilots join the same queue, so their waits emerge from the schedule.
    The bag is submitted ``offset`` seconds into the trace (the jobs before it load the
    queue); ``load`` divides the trace's submit times; ``speed`` divides its run times.
    """

    policy: str
    trace: str
    offset: float = 86400.0
    load: float = 1.0
    speed: float = 1.0


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """How fast files move between this machine and a site, in decimal megabytes per second:
    ``inbound`` to the site (task inputs), ``outbound`` from it (task outputs)."""

    inbound: float
    outbound: float

    def seconds(self, in_bytes: float, out_bytes: float) -> float:
        """Seconds to send ``in_bytes`` to the site and bring ``out_bytes`` back."""
        return in_bytes / (self.inbound * 1e6) + out_bytes / (self.outbound * 1e6)


@dataclass(frozen=True, slots=True)
class Truth:
    """How a simulated site really executes, distinct from what LIM predicts.

    T_x = instructions · kappa / (ipc · clock), with ``clock`` (GHz) drawn once per slot —
    per pilot — so heterogeneous pools such as the OSG get a different clock per slot.
    ``fail`` is the probability that an attempt fails (exits non-zero) there, ``fail_after``
    seconds after it started (or at its T_x if that is sooner): a black-hole site is
    ``fail = 1`` (resel/blackhole.py).
    """

    kappa: float = 1.0
    ipc: Dist = field(default_factory=lambda: Dist.fixed(1.0))
    clock: Dist = field(default_factory=lambda: Dist.fixed(1.0))
    fail: float = 0.0
    fail_after: float = 60.0
    #: how fast files really move to and from the site (None: as the site's ``bandwidth`` says)
    bandwidth: Bandwidth | None = None


@dataclass(frozen=True, slots=True)
class TransportSpec:
    """How the coordinator reaches a site's login node or access point: this machine
    (``local``) or SSH. Paths (``key``, ``ssh_config``, ``known_hosts``) are on this machine."""

    kind: str = "local"
    host: str | None = None
    user: str | None = None
    port: int | None = None
    key: str | None = None
    ssh_config: str | None = None
    known_hosts: str | None = None
    accept_new_host_keys: bool = False

    def table(self) -> dict[str, Any]:
        """The table :func:`resel.backends.transport.make_transport` reads."""
        spec: dict[str, Any] = {"transport": self.kind}
        for key in ("host", "user", "port", "key", "ssh_config", "known_hosts"):
            value = getattr(self, key)
            if value is not None:
                spec[key] = value
        spec["accept_new_host_keys"] = self.accept_new_host_keys
        return spec


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """What a Slurm site's pilots are submitted with (the sites file's keys in brackets):
    partition, account, QOS, extra ``sbatch`` options [sbatch_options], and the slurmrestd
    endpoint for ``api = "rest"`` (the token file is on this machine)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch_options: tuple[str, ...] = ()
    rest_url: str | None = None
    rest_user: str | None = None
    rest_token_file: str | None = None


@dataclass(frozen=True, slots=True)
class PBSOptions:
    """What a PBS site's pilots are submitted with: queue [queue or partition], account,
    extra ``qsub`` options [qsub_options] and the dialect (auto, pro for PBS Pro/OpenPBS,
    torque)."""

    queue: str | None = None
    account: str | None = None
    qsub_options: tuple[str, ...] = ()
    dialect: str = "auto"


@dataclass(frozen=True, slots=True)
class HTCondorOptions:
    """What an HTCondor pool's pilots are submitted with: ``+ProjectName`` [project] (OSG
    access points refuse jobs without one), ``accounting_group`` and extra submit commands
    [submit_lines]."""

    project: str | None = None
    accounting_group: str | None = None
    submit_lines: dict[str, str] = field(default_factory=dict)


#: the options of one kind of scheduler, as ``Access.scheduler`` holds them
SchedulerOptions = SlurmOptions | PBSOptions | HTCondorOptions
#: site kind -> its options record
SCHEDULER_OPTIONS: dict[str, type] = {"slurm": SlurmOptions, "pbs": PBSOptions, "htcondor": HTCondorOptions}


@dataclass(frozen=True, slots=True)
class Access:
    """How resel reaches a live site: a transport, a scheduler API and its options, a work
    directory.

    ``workdir`` is on the site's shared filesystem: the coordinator writes pilot inboxes there
    (locally or over SFTP) and the pilot agent, running on a compute node, reads them.
    ``env`` is added to every scheduler command (e.g. ``SLURM_CONF`` to pick a cluster).
    ``scheduler`` holds what only one kind of scheduler understands (a record per kind, so a
    Slurm site cannot carry a PBS dialect or an HTCondor project).
    """

    transport: TransportSpec = field(default_factory=TransportSpec)
    workdir: str = "~/resel-work"
    python: str = "python3"
    env: dict[str, str] = field(default_factory=dict)
    api: str = "cli"
    scheduler: SchedulerOptions | None = None
    #: shell lines the pilot runs before the agent (``module load …``): the agent and its tasks
    #: inherit the environment they leave
    setup: tuple[str, ...] = ()
    #: let the scheduler requeue or rerun a pilot (off: a relaunched agent would find its
    #: predecessor's attempts half done; resel asks for a new pilot instead)
    requeue: bool = False

    def options(self, kind: type) -> Any:
        """The scheduler options as ``kind`` (SlurmOptions, ...): the defaults when none were
        given; an error when the site's options are of another kind."""
        if self.scheduler is None:
            return kind()
        if not isinstance(self.scheduler, kind):
            raise TypeError(f"this site's scheduler options are {type(self.scheduler).__name__}, not {kind.__name__}")
        return self.scheduler


@dataclass(frozen=True, slots=True)
class Site:
    """One place tasks can run: a supercomputer partition or an HTC pool."""

    name: str
    kind: str
    cores: int
    clock: Clock
    kappa: float = 1.0
    pilot: PilotPolicy = field(default_factory=PilotPolicy)
    isa: str = "x86"
    reselect_target: bool = True
    wait: WaitModel | None = None
    queue: QueueModel | None = None
    truth: Truth | None = None
    access: Access | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: how fast task files move to and from the site (sites file ``bandwidth``, MB/s); None:
    #: unknown until measured (live: a short probe before the first transfer; docs/data.md)
    bandwidth: Bandwidth | None = None

    @property
    def agent_reads_a_copy(self) -> bool:
        """An HTCondor pool's agent works on a copy of its inbox (no shared filesystem:
        resel/shipped/chirp_sync.py), so a task handed ahead to it comes back only by its
        agent's answer — which a pilot that never starts never gives (backends/pilotsite.py
        ``withdraw_task``). Elsewhere the coordinator takes an unclaimed inbox file back itself."""
        return self.kind == "htcondor"


def _mean(values) -> float:
    """The mean of ``values`` (a task table is never empty)."""
    values = list(values)
    return sum(values) / len(values)


def _renamed(task: TaskSpec, name: str) -> TaskSpec:
    return TaskSpec(name, task.instructions, task.size, task.cores, task.args, task.cls, task.source, task.where)
