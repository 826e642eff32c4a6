"""A live run as the store keeps it, read back: its options, bag and sites.

``resel status`` (another process) rebuilds a run's engine from these and the run's journal
(:mod:`resel.journal`); the coordinator (:mod:`resel.live.coordinator`) stores and resumes
runs with them. Apart from the coordinator on purpose: this module loads the standard library
and the pure core only, not the site clients (paramiko, requests) nor sqlite-utils, so showing
a run's status does not pay for what driving one needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resel.errors import ReselError

if TYPE_CHECKING:
    from sqlite_utils import Database

    from resel.domain import Access, Bag, Site
    from resel.store import StoreReader


@dataclass
class LiveOptions:
    """How a live run behaves; stored with the run so ``--resume`` behaves the same."""

    strategy: str = "auto"
    seed: int = 0
    clock: str = "base"
    poll: float = 1.0
    perf: bool = False
    task_timeout: float | None = None
    #: a site whose scheduler cannot be reached for this long is given up (SiteLost)
    site_timeout: float = 600.0
    #: a pilot the scheduler stops listing is taken as ended after this many polls
    missing_polls: int = 2
    #: queue-aware strategy: which start estimate ranks the sites (resel.planning.SOURCES)
    estimate: str = "auto"
    quantile: float = 0.95
    confidence: float = 0.95
    #: tasks handed ahead per pilot slot, so a freed slot is refilled by the agent at once
    #: (0: none; runs stored before this option replay with 0; stored as 1 before issue 29 §2).
    #: "auto" (``resel run --prefetch``'s default): as deep as the site's measured T_x needs to
    #: keep a slot busy for one refill cycle, 1 until measured, at most PREFETCH_CAP
    prefetch: int | str = "auto"
    #: a site whose command has not answered for this long is shown as not answering
    slow_after: float = 10.0
    #: seconds the first check of the sites may take; a site silent that long is given up
    check_timeout: float = 120.0
    #: the engine's T̂x rates (:meth:`resel.models.runtime.EngineRates.to_json`), stored so a
    #: resumed run decides with the same numbers; None: LIM with ``clock``
    rates: dict | None = None
    #: queue-aware split: minimise the P50 (point estimates) or the P90 finish (resel.planning.menu_waits)
    objective: str = "p50"
    #: walltime rules (resel/walltime.py): limit, pack or off (runs stored before them replay with off)
    walltime: str = "limit"
    #: the black-hole rule (resel/blackhole.py) on (runs stored before it replay without it)
    quarantine: bool = True
    #: the overdue rule (resel/engine_overdue.py) on (runs stored before it replay without it)
    overdue: bool = True
    #: its floor, seconds: no attempt is overdue sooner; not a CLI option — the live tests lower it
    overdue_floor: float = 600.0
    #: task data (docs/data.md): keep a task's folder on the site after its outputs came home
    keep_remote: bool = False
    #: the data the engine prices (:meth:`resel.transfer.TransferModel.to_json`: the manifest's
    #: sizes, the sites' bandwidths as the sites file states them or the probe measured them);
    #: None: no data priced. Later measurements are journaled BandwidthMeasured events.
    data: dict | None = None
    #: tasks of several widths packed into a pilot's cores (resel/engine_packing.py); runs
    #: stored before packing replay without it (slots as wide as the widest task)
    pack: bool = True
    #: the queue-aware split counts a mixed bag's cores (resel/selection.py ``_packed_split``);
    #: runs stored before it replay with each unit of the menu counted as a task
    split_cores: bool = True

    def hand_ahead(self) -> tuple[int, float | None]:
        """The engine's ``prefetch`` and ``prefetch_cycle`` (resel/engine_hand_ahead.py, "The depth").

        "auto": the cap, and the refill cycle — a result waits up to one coordinator poll to be
        read, the task written for its slot up to one look of the agent at its inbox."""
        if self.prefetch == "auto":
            return PREFETCH_CAP, self.poll + AGENT_POLL
        return int(self.prefetch), None

    def engine_options(self) -> dict:
        """The engine's keyword arguments these options set (the coordinator and status alike)."""
        from resel.blackhole import QuarantinePolicy
        from resel.engine_overdue import OverduePolicy
        from resel.transfer import TransferModel
        prefetch, cycle = self.hand_ahead()
        return {"seed": self.seed, "clock": self.clock, "prefetch": prefetch, "prefetch_cycle": cycle,
                "rates": self.engine_rates(),
                "walltime": self.walltime, "quarantine": QuarantinePolicy(enabled=self.quarantine),
                "data": TransferModel.from_json(self.data) if self.data else None, "pack": self.pack,
                "split_cores": self.split_cores, "overdue": OverduePolicy(
                    enabled=self.overdue, floor=self.overdue_floor)}

    def engine_rates(self):
        """The stored rates as the engine takes them (None: LIM)."""
        from resel.models.runtime import EngineRates
        return EngineRates.from_json(self.rates) if self.rates else None


#: the deepest "auto" hand-ahead, tasks per slot: on the testbed 16 gave ~95 tasks/s of ~0-s
#: tasks against ~25 at 1, and stopped scaling there (4–4.5× where the pipeline said 8.5×: the
#: reads of 4× the records became the limit; docs/benchmarks.md, issue 29 §2)
PREFETCH_CAP = 16
#: the agent's look at its inbox (resel/shipped/agent.py ``--poll``'s default, which the
#: coordinator does not change): a new inbox file does not wake it
AGENT_POLL = 0.5


def parse_prefetch(value: object) -> int | str:
    """``--prefetch``'s value: "auto" or a whole number of tasks per slot, 0 to 1,000.

    Raises:
        ReselError: anything else.
    """
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    try:
        k = int(text)
    except ValueError:
        k = -1
    if not 0 <= k <= 1000:
        raise ReselError(f"--prefetch {value!r}: give auto or a whole number of tasks per slot from 0 to 1000")
    return k


def live_run_row(db: Database | StoreReader, run_id: int) -> dict:
    """A live run's ``runs`` row, from a store checked unchanged since it was opened — what
    ``resel status`` needs of a run whose counts the coordinator stored (:mod:`resel.live.summary`),
    without building its bag and sites (and loading :mod:`resel.domain` for them).

    Raises:
        ReselError: no such run, or it is a simulated one.
    """
    from resel.store_common import verify_unchanged
    verify_unchanged(db)    # what the sites say is run as the user: the store must be the file checked
    rows = list(db.query("select * from runs where id = ?", [run_id]))
    if not rows:
        raise ReselError(f"no run {run_id} in the store (list them with `resel runs`)")
    run = rows[0]
    if run["mode"] != "live":
        raise ReselError(f"run {run_id} is a {run['mode']} run, not a live one: use `resel report {run_id}`")
    return run


def load_live_run(db: Database | StoreReader, run_id: int, *, to_run: bool = False
                  ) -> tuple[dict, Bag, list[Site], LiveOptions]:
    """A live run's row, bag, sites and options, as stored when it started.

    A command stored by a resel that filled commands with ``str.format`` comes back in today's
    language (:func:`bag_from_json`); with ``to_run`` (a coordinator resuming it), one that has
    no equivalent there is refused rather than run otherwise than its first tasks were.

    Raises:
        ReselError: no such run, or it is a simulated one; with ``to_run``, a command of an
            older resel that cannot be carried over.
    """
    run = live_run_row(db, run_id)
    what = "options"
    try:
        options = json.loads(run["options"])
        options.setdefault("prefetch", 0)   # stored before hand-ahead existed: replay as it ran
        options.setdefault("walltime", "off")      # stored before the walltime rules: replay as it ran
        options.setdefault("quarantine", False)    # stored before the black-hole rule
        options.setdefault("overdue", False)       # stored before the overdue rule
        options.setdefault("pack", False)          # stored before packing: slots of the widest task
        options.setdefault("split_cores", False)   # stored before the split counted a mixed bag's cores
        what = "bag"
        bag = bag_from_json(json.loads(run["bag_spec"]))
        what = "sites"
        sites = sites_from_json(json.loads(run["sites"]))
        what = "options"
        live_options = LiveOptions(**options)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:    # a damaged store: said, never a traceback
        raise ReselError(f"run {run_id}'s stored {what} cannot be read ({type(exc).__name__}: {exc}): the store is "
                         "damaged", hint="`resel report RUN` shows what can still be read; nothing was acted on") from None
    if to_run:
        for command in (bag.command, *(cmd for _site, cmd in bag.site_commands)):
            if LEGACY_ESCAPE in command:
                raise ReselError(
                    f"run {run_id} was stored by an older resel, which read its command {command!r} with Python's "
                    "str.format ('{{' for a brace); it has no equivalent in today's language (docs/configuration.md"
                    f"#command), so its remaining tasks cannot run what its first ones ran: `resel cancel {run_id}`, "
                    "then run the bag again with the command written for this resel")
    return run, bag, sites, live_options


#: what only a command stored by a resel that filled commands with str.format holds (today's
#: bag files refuse it: resel.command_template.problems)
LEGACY_ESCAPE = "${{"


def bag_from_json(d: dict) -> Bag:
    """A stored bag back; a command holding ``${{`` was stored by a resel that filled commands
    with ``str.format`` and comes back in today's language where it can (unchanged where it
    cannot: :func:`load_live_run` refuses to run it)."""
    from resel.command_template import from_format
    from resel.domain import Bag, Profile, TaskSpec

    def today(command: str) -> str:
        return (from_format(command, d["name"]) or command) if LEGACY_ESCAPE in command else command
    return Bag(d["name"], today(d["command"]), d["count"], d["cores_per_task"], Profile(**d["profile"]),
               d.get("isa", "x86"), d.get("source", "<store>"), d.get("perf_every", 0),
               tuple((str(site), today(str(cmd))) for site, cmd in d.get("site_commands") or ()),
               data_from_json(d.get("data")),
               tuple(TaskSpec(**{k: v for k, v in t.items() if k in TaskSpec.__dataclass_fields__})
                     for t in d.get("tasks") or ()), d.get("order", "auto"))


def data_from_json(d: dict | None):
    """A bag's :class:`~resel.domain.DataSpec` back from its stored JSON (None: a bag without
    files, or a run stored before bags had them)."""
    from resel.domain import DataSpec, InputSpec, OutputSpec
    if not d:
        return None
    return DataSpec(tuple(InputSpec(i["pattern"], i.get("name")) for i in d.get("inputs") or ()),
                    tuple(OutputSpec(o["pattern"], bool(o.get("optional"))) for o in d.get("outputs") or ()),
                    d.get("results"), d.get("base", "."), d.get("input_mb"), d.get("shared_mb"), d.get("output_mb"))


def sites_from_json(items: list[dict]) -> list[Site]:
    """Live sites back from their stored JSON (simulation-only fields are not needed live)."""
    from resel.domain import Bandwidth, Clock, PilotPolicy, Site
    out = []
    for d in items:
        access = access_from_json(d["kind"], d["access"]) if d.get("access") else None
        out.append(Site(name=d["name"], kind=d["kind"], cores=d["cores"], clock=Clock(**d["clock"]),
                        kappa=d.get("kappa", 1.0), pilot=PilotPolicy(**d["pilot"]), isa=d.get("isa", "x86"),
                        reselect_target=d.get("reselect_target", True), access=access, notes=d.get("notes", ""),
                        bandwidth=Bandwidth(**d["bandwidth"]) if d.get("bandwidth") else None))
    return out


#: the keys of an access table as runs stored it before the scheduler options were split off
_FLAT_TRANSPORT = ("host", "user", "port", "key", "ssh_config", "known_hosts", "accept_new_host_keys")


def access_from_json(kind: str, acc: dict) -> Access:
    """A live site's access back from its stored JSON: nested (transport and scheduler tables)
    as stored now, or flat as runs stored before the split (``--resume`` of an older run)."""
    from resel.domain import SCHEDULER_OPTIONS, Access, HTCondorOptions, PBSOptions, SlurmOptions, TransportSpec
    common = {k: acc[k] for k in ("workdir", "python", "api", "requeue") if k in acc}
    common["env"] = dict(acc.get("env") or {})
    common["setup"] = tuple(acc.get("setup") or ())
    if isinstance(acc.get("transport"), dict):
        transport = TransportSpec(**acc["transport"])
        raw = dict(acc.get("scheduler") or {})
        if "sbatch_options" in raw:
            raw["sbatch_options"] = tuple(raw["sbatch_options"] or ())
        if "qsub_options" in raw:
            raw["qsub_options"] = tuple(raw["qsub_options"] or ())
        scheduler = SCHEDULER_OPTIONS[kind](**raw) if kind in SCHEDULER_OPTIONS else None
        return Access(transport=transport, scheduler=scheduler, **common)
    transport = TransportSpec(kind=acc.get("transport", "local"), **{k: acc[k] for k in _FLAT_TRANSPORT if k in acc})
    extra = tuple(acc.get("submit_args") or ())
    if kind == "slurm":
        scheduler = SlurmOptions(partition=acc.get("partition"), account=acc.get("account"), qos=acc.get("qos"),
                                 sbatch_options=extra, rest_url=acc.get("rest_url"), rest_user=acc.get("rest_user"),
                                 rest_token_file=acc.get("rest_token_file"))
    elif kind == "pbs":
        scheduler = PBSOptions(queue=acc.get("partition"), account=acc.get("account"), qsub_options=extra,
                               dialect=acc.get("dialect", "auto"))
    elif kind == "htcondor":
        scheduler = HTCondorOptions(project=acc.get("project"), accounting_group=acc.get("accounting_group"),
                                    submit_lines=dict(acc.get("submit_lines") or {}))
    else:
        scheduler = None
    return Access(transport=transport, scheduler=scheduler, **common)
