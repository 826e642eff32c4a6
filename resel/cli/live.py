"""``resel run``, ``resel status``, ``resel cancel`` and ``resel sites check``: live sites.

Thin wrappers over :mod:`resel.live.coordinator` (the coordinator) and :mod:`resel.backends.connect`
(opening a site from its ``access`` table).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from resel.cli import common as c   # its consoles are looked up at each use (tests replace them)
from resel.cli.common import Table   # rich, imported on first use
from resel.cli.rates import model_option, objective_option, risk_option, walltime_option
from resel.cli.common import RUN_ID, Finite, db_option, fail_cleanly, fail_json, json_option, live_sites_from
from resel.cli.common import print_json, seed_option, wide_option
from resel.errors import ReselError, StoreError
from resel.safe_text import markup as m

if TYPE_CHECKING:
    from resel.live.coordinator import Coordinator

# The coordinator, the store and the site clients (paramiko, requests) are imported in the
# commands that use them: loading this module (for `resel --help`) stays cheap.


def readable_run(store, run_id: int):
    """The run's engine rebuilt from its stored events (as ``status`` shows it), or a StoreError
    saying the run cannot be read back — before ``--resume`` or ``cancel`` touch any site.

    Stored rows are data another program (or a newer resel, or a damaged disk) may have written:
    a missing key, a field this version does not know, text that is not JSON.
    """
    from resel.live.view import replayed_engine
    try:
        return replayed_engine(store, run_id)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"run {run_id} cannot be read back from the store ({type(exc).__name__}: {exc}): "
                         "the store is damaged, or the run was written by another resel version") from None


def _prefetch_value(ctx: click.Context, param: click.Parameter, value: str) -> int | str:
    """``--prefetch``, checked as the command line is read (a usage error, exit status 2)."""
    from resel.live.stored import parse_prefetch
    try:
        return parse_prefetch(value)
    except ReselError:
        raise click.BadParameter(f"{value!r}: give auto or a whole number of tasks per slot from 0 to 1000") from None


@click.command("run")
@click.argument("bag_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Sites file with live sites (kind = \"slurm\", \"pbs\" or \"htcondor\", an [site.access] "
                   "table each; simulated sites only with --dry-run).")
@click.option("--strategy", default="auto", show_default=True,
              help="auto: queue-aware selection with re-selection where a site's start can be estimated "
                   "(Slurm, PBS, HTCondor sites whose queue resel reads), else model+reselect; both learn each "
                   "site's rate from the tasks that finish there. Or name one: random, model, topk:K, "
                   "queue[:E], each with +reselect and/or +learn; peers race[:K], earliest, failover[:T], "
                   "rebroker[:T] (docs/peers.md).")
@seed_option
@click.option("--clock", type=click.Choice(["base", "avg", "probed"]), default="base", show_default=True,
              help="Site clock LIM predicts with: base, measured avg from the sites file, or the latest "
                   "`resel sites probe` of each site (falls back to the sites file).")
@click.option("--poll", default=2.0, show_default=True, type=Finite(0.05, 3600),
              help="Seconds between two polls of every site.")
@click.option("--prefetch", default="auto", show_default=True, metavar="K|auto", callback=_prefetch_value,
              help="Tasks handed ahead per pilot slot, so the agent refills a freed slot at once instead "
                   "of a poll later (0: none). auto: as many as the site's measured task time needs to keep a "
                   "slot busy until the next refill (--poll + the agent's 0.5-s look at its inbox), 1 until "
                   "a task has finished there, at most 16.")
@click.option("--perf", is_flag=True, help="Run every task under `perf stat` and store its counters.")
@click.option("--task-timeout", type=Finite(1, 1e9), default=None, help="Kill an attempt after this many seconds.")
@click.option("--resume", "resume_id", type=RUN_ID, default=None, metavar="RUN",
              help="Carry on run RUN after a crash or Ctrl-C, with the bag, sites, results folder and options stored "
                   "with it (no BAG, --sites, --results or run options; --poll is taken).")
@click.option("--dry-run", is_flag=True, help="Show the plan (as `resel plan`: start estimates, T̂x, chosen sites); "
              "submit nothing. A file of simulated sites is planned from the simulator, as `resel plan` does.")
@click.option("--estimate", type=click.Choice(["auto", "history", "twin", "scheduler"]), default="auto", show_default=True,
              help="Queue-aware strategy: which start estimate ranks the sites (see `resel plan`).")
@click.option("--max-time", type=Finite(1, 1e9), default=None, help="Give up (and cancel everything) after this many seconds.")
@click.option("--progress/--no-progress", default=None, help="Live table (default: on a terminal).")
@model_option
@risk_option
@objective_option
@walltime_option
@click.option("--quarantine/--no-quarantine", default=True, show_default=True,
              help="Quarantine a site whose tasks fail or pilots die far more often than elsewhere "
                   "(5 bad outcomes, half of its own, twice the rate elsewhere; back-off 30 min doubling "
                   "up to 4 h — docs/engine.md).")
@click.option("--overdue/--no-overdue", default=True, show_default=True,
              help="Cancel an attempt that runs 10 times as long as the longest of the first tasks its "
                   "site ran (3 at least; never before 10 min) and run it once more without that limit; "
                   "a rerun lost after running as long is given up as hung (docs/engine.md, "
                   "\"Overdue attempts\"). --task-timeout is a hard limit of your own beside it.")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the tasks' outputs go (bags with `outputs`): RESULTS/RUN/task-NNNN/. "
                   "Default: the bag's `results` (beside the bag file), else ./resel-results.")
@click.option("--keep-remote", is_flag=True,
              help="Keep each task's folder on its site after its outputs came home (default: removed "
                   "once every output is home and its sha256 checked).")
@click.option("--refit", is_flag=True,
              help="When the run is done, refit the model of the bag's application from every live run "
                   "(as `resel model fit --application APP`), so the next run and plan use it.")
@db_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the final status as one JSON document (an error too: {\"error\", \"hint\"}).")
@fail_cleanly
def run_cmd(bag_file: Path | None, sites_file: Path | None, strategy: str, seed: int, clock: str, poll: float,
            prefetch: int | str, perf: bool,
            task_timeout: float | None, resume_id: int | None, dry_run: bool, estimate: str, max_time: float | None,
            progress: bool | None, model: str, risk: float | None, objective: str, walltime: str,
            quarantine: bool, overdue: bool, results_dir: Path | None, keep_remote: bool, refit: bool,
            db: Path | None, as_json: bool) -> None:
    """Run a bag on live sites: pilots, late binding, re-selection; crash-safe.

    Every event and action is written to the run store before it is carried out, so a
    coordinator that dies (kill -9, reboot) is continued with `resel run --resume RUN` and
    no task is lost or run twice. Ctrl-C stops the coordinator but leaves the pilots
    running; resume later, or `resel cancel RUN` to stop everything.

    Watch it from another terminal with `resel status`.

    A bag with `inputs` and `outputs` (docs/data.md) carries its files: every input is
    checked and hashed before anything is submitted, each goes to the site a task is bound
    to, and a task is done only when its outputs are home (`--results`) with their sha256
    checked; `resel results RUN` lists them.

    \b
    Examples:
      resel run bag.toml --sites my-sites.toml --dry-run
      resel run bag.toml --sites my-sites.toml
      resel run --resume 7
    """
    from resel.backends.connect import open_site
    from resel.live.coordinator import Coordinator
    from resel.live.view import table
    from resel.store import default_path, open_store
    store = open_store(db)
    if resume_id is not None:
        _resume_alone(click.get_current_context(), bag_file, sites_file, results_dir, dry_run)
        readable_run(store, resume_id)
        coord = Coordinator.resume(store, resume_id, open_site)
        _new_poll(click.get_current_context(), store, coord, poll)
    else:
        from resel.live.coordinator import StoppedWhileStarting
        try:
            coord = _start_run(store, bag_file, sites_file, results_dir, dry_run=dry_run, as_json=as_json, db=db,
                               strategy=strategy, seed=seed, clock=clock, poll=poll, prefetch=prefetch, perf=perf,
                               task_timeout=task_timeout,
                               estimate=estimate, model=model, risk=risk, objective=objective, walltime=walltime,
                               quarantine=quarantine, overdue=overdue, keep_remote=keep_remote)
        except StoppedWhileStarting as stop:
            c.err.print(f"stopped while run {stop.run_id} first checked its sites. Continue with `resel run "
                        f"--resume {stop.run_id}` or stop everything with `resel cancel {stop.run_id}`", soft_wrap=True)
            sys.exit(130)
        if coord is None:       # a dry run: the plan was shown
            return
    c.err.print(f"run {coord.run_id}: {coord.bag.count} tasks on {m(', '.join(s.name for s in coord.sites))} "
                f"(store {m(db or default_path())}; resume with `resel run --resume {coord.run_id}`)", soft_wrap=True)
    if coord.engine.auto_choice is not None:
        ran_as, why = coord.engine.auto_choice
        c.err.print(f"strategy auto runs as {m(ran_as)}: {m(why)}", soft_wrap=True)
    _drive(coord, sys.stderr.isatty() if progress is None else progress, max_time)
    snap = _snap(coord)
    refitted = _refit(store, coord) if refit and coord.finished else None
    doc = snap.as_dict()
    if refitted is not None:
        doc["refit"] = refitted
    failed = (f"run {coord.run_id}: {snap.failed} task(s) failed" if snap.failed else None)
    hint = f"`resel report {coord.run_id}` and the attempts table say why" if snap.failed else None
    if as_json:
        if failed:
            fail_json(doc, failed, hint)
        print_json(doc)
        return
    c.out.print(table(snap))
    if failed:
        c.err.print(f"Error: {failed}\nHint: {hint}", markup=False, soft_wrap=True)
        sys.exit(1)


#: `resel run` options stored with a run when it starts: `--resume` carries the run on with those
RUN_OPTIONS = ("strategy", "seed", "clock", "prefetch", "perf", "task_timeout", "estimate", "model", "risk",
               "objective", "walltime", "quarantine", "overdue", "keep_remote")


def _resume_alone(ctx: click.Context, bag_file: Path | None, sites_file: Path | None, results_dir: Path | None,
                  dry_run: bool) -> None:
    """``--resume`` carries a run on with the bag, sites, results folder and options stored with
    it: one given beside it would be ignored (a fixed sites file not used, outputs not where
    asked, another strategy not taken), and ``--dry-run`` would resume for real — each is a
    usage error, before the store is touched."""
    from click.core import ParameterSource
    given = [what for what, there in (("BAG_FILE", bag_file), ("--sites", sites_file), ("--results", results_dir),
                                      ("--dry-run", dry_run)) if there]
    given += ["/".join(p.opts + p.secondary_opts) for p in ctx.command.params if p.name in RUN_OPTIONS
              and ctx.get_parameter_source(p.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)]
    if given:
        raise click.UsageError(f"--resume carries the run on with the bag, sites, results folder and options "
                               f"stored with it; {', '.join(given)} cannot go with it (a new run: `resel run BAG "
                               "--sites FILE`)")


def _new_poll(ctx: click.Context, store: Any, coord: Coordinator, poll: float) -> None:
    """``--poll`` beside ``--resume`` sets the resumed run's poll (and is stored with it): how
    often a coordinator asks its sites is this coordinator's pace, not a decision of the run (a
    user resuming from a laptop on a slow link may well want it slower). It was accepted and
    silently not used."""
    from click.core import ParameterSource
    from resel.store import to_json
    if ctx.get_parameter_source("poll") in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
        coord.options.poll = poll
        store["runs"].update(coord.run_id, {"options": to_json(coord.options)})


def _start_run(store: Any, bag_file: Path | None, sites_file: Path | None, results_dir: Path | None, *,
               dry_run: bool, as_json: bool, db: Path | None, strategy: str, seed: int, clock: str, poll: float,
               prefetch: int | str, perf: bool, task_timeout: float | None, estimate: str, model: str,
               risk: float | None, objective: str, walltime: str, quarantine: bool,
               keep_remote: bool, overdue: bool = True) -> Coordinator | None:
    """A new run's coordinator, started: the bag and sites checked, the sites probed for their
    clocks (``--clock probed``), the inputs hashed, the pilots sized within the user's limits and
    the rates chosen. A dry run shows the plan instead (from the simulator where every site is
    simulated) and returns None."""
    from resel.backends.connect import open_site
    from resel.config import check_site_commands, load_bag
    from resel.limits import check_task_count
    from resel.live.coordinator import Coordinator, LiveOptions
    from resel.selection import Strategy
    if bag_file is None or sites_file is None:
        raise click.UsageError("give BAG_FILE and --sites FILE (or --resume RUN)")
    bag = load_bag(bag_file)
    if dry_run and _all_simulated(sites_file):   # planned from the simulator, as `resel plan` does
        from resel.cli.plan import plan_simulated
        plan_simulated(bag, sites_file, strategy=strategy, source=estimate, clock=clock, seed=seed,
                       db_path=db, as_json=as_json, model=model, objective=objective, risk=risk)
        return None
    site_list = live_sites_from(sites_file, "resel run")
    check_site_commands(bag, site_list)
    check_task_count(bag.count, f"{bag_file}: bag.count")
    Strategy.parse(strategy)
    if clock == "probed":
        from resel.live.site_probe import probed_sites
        site_list, probed = probed_sites(store, site_list)
        c.err.print(f"probed clocks: {m(probed or 'none stored; using the sites file')}", soft_wrap=True)
        clock = "avg"
    manifest = _manifest(bag, check_only=dry_run)
    if dry_run:
        from resel.cli.plan import show_plan
        show_plan(bag, site_list, strategy=strategy, source=estimate, quantile=LiveOptions.quantile,
                  confidence=LiveOptions.confidence, clock=clock, seed=seed, db_path=db, as_json=as_json,
                  model=model, objective=objective, risk=risk)
        return None
    site_list = _within_limits(c, bag, site_list)
    _url_notes(c, bag, site_list)
    from resel.cli.rates import runtime_for
    runtime = runtime_for(bag, site_list, model=model, db=store, clock=clock)
    rates = runtime.engine_rates(bag.profile.instructions, risk=risk, objective=objective)
    c.err.print(rates.label, soft_wrap=True, markup=False)
    options = LiveOptions(strategy=strategy, seed=seed, clock=clock, poll=poll, prefetch=prefetch, perf=perf,
                          task_timeout=task_timeout, estimate=estimate, rates=rates.to_json(),
                          objective=objective, walltime=walltime, quarantine=quarantine, overdue=overdue,
                          keep_remote=keep_remote)
    return Coordinator.start(store, bag, site_list, options, open_site,
                             bag_file=str(bag_file.resolve()), sites_file=str(sites_file.resolve()),
                             manifest=manifest, results=_results_root(bag, results_dir))


def _drive(coord: Coordinator, show: bool, max_time: float | None) -> None:
    """Run the coordinator (a live table on stderr if ``show``) until the bag is done, ``max_time``
    passes or it is stopped: SIGTERM stops it as Ctrl-C does, leaving the pilots running."""
    from rich.live import Live

    from resel.live.view import table
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if show:
            with Live(table(_snap(coord)), console=c.err, refresh_per_second=2, transient=True) as live:
                coord.run(on_cycle=lambda co: live.update(table(_snap(co))), max_time=max_time)
        else:
            coord.run(max_time=max_time)
    except KeyboardInterrupt:
        c.err.print(f"stopped; pilots keep running. Continue with `resel run --resume {coord.run_id}` "
                    f"or stop everything with `resel cancel {coord.run_id}`", soft_wrap=True)
        sys.exit(130)
    finally:
        coord.close()
    if coord.cancelled:
        c.err.print(f"run {coord.run_id} is being cancelled (`resel cancel {coord.run_id}`); this coordinator "
                    "let go of it", soft_wrap=True)
        sys.exit(1)


def _all_simulated(sites_file: Path) -> bool:
    """Every site of ``sites_file`` is simulated (an error in the file is raised here)."""
    from resel.config import LIVE_KINDS, load_sites
    return all(s.kind not in LIVE_KINDS for s in load_sites(sites_file))


def _manifest(bag, *, check_only: bool = False):
    """The bag's inputs found, checked and hashed before anything is submitted (docs/data.md);
    None for a bag without inputs. A progress line on a terminal while large inputs are read."""
    if bag.data is None or not bag.data.files:       # URL inputs are the sites' (_url_notes)
        return None
    from resel import task_data
    shown = [0.0]

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty() and (time.monotonic() - shown[0] > 0.5 or done == total):
            shown[0] = time.monotonic()
            c.err.print(f"checking inputs: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB hashed", end="\r",
                        markup=False)
    manifest = task_data.build(bag, progress=progress, hashed=not check_only)
    files = manifest.distinct_files
    c.err.print(f"inputs: {sum(len(t) for t in manifest.tasks):,} for {bag.count:,} task(s), {len(files):,} distinct "
                f"file(s), {sum(f.size for f in files.values()) / 1e6:,.1f} MB"
                + (f"; shared by every task: {', '.join(f.name for f in manifest.shared_files)}"
                   if manifest.shared else ""), soft_wrap=True, markup=False)
    return manifest


def _results_root(bag, given: Path | None) -> str | None:
    """Where the run's outputs go (absolute: ``--resume`` from elsewhere delivers there too):
    ``--results``, else the bag's ``results`` (relative to the bag file, as its inputs are),
    else ./resel-results. Made (0700) and checked writable now, before anything is submitted."""
    if bag.data is None or not bag.data.outputs:
        return None
    import os

    from resel.live.staging import results_root_problem
    if given is not None:
        asked = Path(given).expanduser().absolute()
    elif bag.data.results:
        asked = (Path(bag.data.base) / Path(bag.data.results).expanduser()).absolute()
    else:
        asked = Path("resel-results").absolute()
    why = results_root_problem(str(asked))      # before anything is made in it
    if why:
        raise ReselError(f"{why}; give another with --results DIR")
    root = asked.resolve()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ReselError(f"cannot make the results folder {root}: {exc.strerror or exc}; give another with "
                         "--results DIR") from None
    why = results_root_problem(str(root))       # and as it is now: an existing one may be someone else's
    if why:
        raise ReselError(f"{why}; give another with --results DIR")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ReselError(f"the results folder {root} is not writable; give another with --results DIR")
    return str(root)


def _refit(store, coord: Coordinator) -> list[dict]:
    """``--refit``: fit the bag's application again from every live run, and say what changed."""
    from resel.cli.model import refit
    from resel.models.calibration import application_of
    app = application_of(coord.bag.command)
    try:
        docs = refit(store, application=app, holdout=0.0)
    except ReselError as exc:
        c.err.print(f"--refit: not refitted: {exc}", soft_wrap=True, markup=False)
        return []
    before = {s.name: tx for s, tx in zip(coord.engine.sites, coord.engine.tx)}
    for doc in docs:
        after = {s: f["rate_s_per_instr"] * coord.bag.profile.instructions for s, f in doc["fit"].items()}
        changes = ", ".join(f"{s} {before[s]:.3g} s → {after[s]:.3g} s" for s in after if s in before)
        c.err.print(f"--refit: fit {doc['id']} of {app} from {doc['n_evidence']} task(s) of run(s) "
                    f"{', '.join(map(str, doc['runs']))}; T̂x per task {changes}", soft_wrap=True, markup=False)
    return docs


def _snap(coord: Coordinator):
    """The live table's counts. From the coordinator's tally (resel/live/summary.py), which
    recounts only the tasks each event changed: counting every task at every turn, as this did,
    cost the main thread 110 ms a turn at 100,000 tasks, and a user watching the table a third
    of the throughput (docs/benchmarks.md, "The live table")."""
    from resel.live.view import snapshot, summary_snapshot
    status, elapsed = ("done" if coord.finished else "running"), coord.now()
    if coord.finished:   # the bag's TTC as stored (the agents' clocks), not the time of this print
        elapsed = coord.db["runs"].get(coord.run_id)["ttc_wkd"] or elapsed
    errors = {n: v.error for n, v in coord.views.items()}
    tally = coord.summary.tally
    if tally is None or tally.engine is not coord.engine:     # nothing stored yet: count once
        return snapshot(coord.engine, coord.run_id, status, elapsed, errors, coord.site_notes())
    tally.update()
    return summary_snapshot(tally.summary(), coord.run_id, status, elapsed, coord.site_notes(), errors)


def _url_notes(c, bag, site_list) -> None:
    """Say per site what becomes of the bag's URL inputs: an HTCondor pilot's file transfer
    fetches them; elsewhere resel fetches nothing (docs/data.md)."""
    from resel.backends.pilotsite import url_inputs_note
    urls = [i.pattern for i in bag.data.urls] if bag.data else []
    for site in site_list:
        said = url_inputs_note(site, urls)
        if said:
            c.err.print(f"{m(site.name)}: {m(said)}", soft_wrap=True)


def _within_limits(c, bag, site_list):
    """Ask each live site for the user's limits and jobs there, size the pilots within them
    (:mod:`resel.live.site_limits`), say what changed, and leave out a site with no room at all."""
    from resel.live.site_limits import apply_limits, read_limits
    found = read_limits(site_list)
    limited = apply_limits(site_list, found, bag.cores_per_task)     # fills in each site's changes
    for f in found.values():
        for line in f.notes + f.changes:
            c.err.print(f"{m(f.site)}: limits: {m(line)}", soft_wrap=True)
        if f.pending_reasons:
            c.err.print(f"{m(f.site)}: your pending jobs there wait for: "
                        + m(", ".join(f"{k} ×{n}" for k, n in sorted(f.pending_reasons.items()))), soft_wrap=True)
    blocked = {n: f.blocked for n, f in found.items() if f.blocked}
    for name, why in blocked.items():
        c.err.print(f"{m(name)}: left out: {m(why)}", soft_wrap=True)
    kept = [s for s in limited if s.name not in blocked]
    if not kept:
        raise ReselError("no site has room for a pilot within your limits: "
                         + "; ".join(f"{n}: {w}" for n, w in blocked.items()))
    return kept


@click.command("status")
@click.argument("run_id", type=RUN_ID, required=False)
@db_option
@json_option
@fail_cleanly
def status_cmd(run_id: int | None, db: Path | None, as_json: bool) -> None:
    """Where a live run stands (default: the newest live run), from the run store.

    \b
    Example:
      resel status
      resel status 7 --json
    """
    from resel.live.stored import live_run_row
    from resel.live.summary import read as read_summary
    from resel.live.view import snapshot, stored_notes, summary_snapshot, table
    from resel.store import read_store
    store = read_store(db)
    if run_id is None:
        rows = list(store.query("select id from runs where mode = 'live' order by id desc limit 1"))
        if not rows:
            raise ReselError("no live run in the store yet", hint="start one with `resel run BAG --sites FILE`; "
                             "`resel runs` lists the simulated ones")
        run_id = rows[0]["id"]
    # the counts the coordinator stored with the journal's last row; else (a run stored before
    # them, or carried on by a resel that keeps none) the journal replayed (issue 29 §2)
    counts = read_summary(store, run_id)
    if counts is None:
        from resel import journal
        engine, run = readable_run(store, run_id)
        last = journal.last_time(store, run_id) or 0.0
    else:     # the store checked as a replay's, the run's bag and sites not built: they are not shown
        run = live_run_row(store, run_id)
        last = counts["last_time"] or 0.0
    elapsed = (run["ttc_wkd"] if run["status"] == "done" and run["ttc_wkd"] is not None
               else max(last, time.time() - run["t0"] if run["status"] == "running" else last))
    notes = stored_notes(store, run_id)
    snap = (snapshot(engine, run_id, run["status"], elapsed, notes=notes) if counts is None
            else summary_snapshot(counts, run_id, run["status"], elapsed, notes=notes))
    from resel.live.notes import coordinator_of
    driver = coordinator_of(store, run_id) if run["status"] in ("running", "cancelling") else None
    if as_json:
        doc = snap.as_dict()
        doc["pilots"] = list(store.query("select pilot, site, job_id, cores, state, reason from live_pilots "
                                         "where run_id = ? order by pilot", [run_id]))
        doc["coordinator"] = driver
        print_json(doc)
    else:
        c.out.print(table(snap))
        if run["status"] == "running" and driver is None:
            c.out.print(f"no resel carries run {run_id} on (stopped or killed): these counts are where it left "
                        f"them, and its pilots may still be running; `resel run --resume {run_id}` carries it on, "
                        f"`resel cancel {run_id}` stops them", soft_wrap=True, markup=False)


@click.command("cancel")
@click.argument("run_id", type=RUN_ID)
@db_option
@json_option
@fail_cleanly
def cancel_cmd(run_id: int, db: Path | None, as_json: bool) -> None:
    """Cancel every pilot and task of a live run; checks that nothing is left on any site.

    A coordinator still running that run notices and lets go of it first. The agents' last
    results (attempts that finished before the stop) are read, so the run's counts agree with
    what ran. A finished run is left as it is.

    \b
    Example:
      resel cancel 7
    """
    from resel.backends.connect import open_site
    from resel.live.coordinator import Coordinator
    from resel.store import open_store
    store = open_store(db)
    rows = list(store.query("select status, options from runs where id = ? and mode = 'live'", [run_id]))
    if rows and rows[0]["status"] == "cancelled":
        raise ReselError(f"run {run_id} is already cancelled")
    if rows and rows[0]["status"] == "done":
        raise ReselError(f"run {run_id} is done (every task finished or failed); there is nothing to cancel, "
                         "and it stays done")
    if rows:
        store["runs"].update(run_id, {"status": "cancelling"})   # a running coordinator stops
        _wait_for_coordinator(store, run_id, rows[0]["options"])
    readable_run(store, run_id)
    coord = Coordinator.resume(store, run_id, open_site, to_cancel=True)
    try:
        left = coord.cancel_everything()
    finally:
        coord.close()
    problem = f"run {run_id}: could not cancel {', '.join(left)}" if left else None
    hint = f"try `resel cancel {run_id}` again, or cancel those jobs on their sites" if left else None
    if as_json:
        doc = {"run": run_id, "cancelled": not left, "left": left}
        if left:
            fail_json(doc, problem, hint)
        print_json(doc)
    elif left:
        raise ReselError(problem, hint=hint)
    else:
        c.out.print(f"run {run_id} cancelled; no pilot of it is left on any site")


def _wait_for_coordinator(store, run_id: int, options: str | None) -> None:
    """A coordinator still driving the run notices the cancel at its next turn and lets go;
    wait for that (or for its lease to go stale: it was killed) before taking the run over."""
    from resel.live import notes as live_notes
    stale = live_notes.lease_stale_after(options)
    deadline = time.monotonic() + stale + 5.0
    while time.monotonic() < deadline and live_notes.holder(store, run_id, stale) is not None:
        time.sleep(0.2)


def _site_failures(rows: list[dict], sites_file: Path, failed: list[str], what: str) -> tuple[str, str] | None:
    """The error a live ``resel sites`` command ends with when some sites failed: which, and
    what to try next."""
    if not failed:
        return None
    return (f"{len(failed)} of {len(rows)} site(s) {what}: {', '.join(failed)}",
            f"the error column says why; `RESEL_LOG=debug resel sites check --sites {sites_file}` "
            "shows every command sent")


def _end(doc: dict, failure: tuple[str, str] | None, as_json: bool) -> None:
    """Print ``doc`` (``--json``) and end with the failure, in the one error style."""
    if as_json:
        if failure:
            fail_json(doc, *failure)
        print_json(doc)
    elif failure:
        raise ReselError(failure[0], hint=failure[1])


@click.command("check")
@click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Sites file with live sites.")
@wide_option
@json_option
@fail_cleanly
def check_cmd(sites_file: Path, wide: bool, as_json: bool) -> None:
    """Probe every live site at once: reachable, scheduler and version, partitions, cores,
    a start estimate for the pilot shape, CPU model and clock.

    \b
    Example:
      resel sites check --sites my-sites.toml
      resel sites check --sites my-sites.toml --wide     # partitions and CPU model too
      resel sites check --sites my-sites.toml --json
    """
    from resel.backends.connect import check_site
    from concurrent.futures import ThreadPoolExecutor
    site_list = live_sites_from(sites_file, "resel sites check")
    with ThreadPoolExecutor(max_workers=max(1, len(site_list))) as pool:
        rows = list(pool.map(check_site, site_list))
    failure = _site_failures(rows, sites_file, [r["site"] for r in rows if not r["reachable"] or r.get("error")],
                             "failed the check")
    if not as_json:
        from resel.units import pick
        unit = pick(r.get("start_estimate_s") for r in rows)
        t = Table(title=f"sites in {m(sites_file)}", title_justify="left")
        cols = ["site", "reachable", "scheduler"] + (["partitions"] if wide else []) + [
            "free/total cores", m(unit.header("pilot starts in"))] + (["CPU"] if wide else []) + ["GHz", "error"]
        for col in cols:
            t.add_column(col)
        for r in rows:
            cpu = r.get("cpu") or {}
            cells = [m(r["site"]), "yes" if r["reachable"] else "no",
                     m(f"{r.get('scheduler') or '—'} {r.get('version') or ''}".strip())]
            if wide:
                cells.append(m(", ".join(p["name"] for p in r.get("partitions") or []) or "—"))
            cells += ["—" if r.get("total_cores") is None else f"{r['free_cores']}/{r['total_cores']}",
                      unit.fmt(r.get("start_estimate_s"))]
            if wide:
                cells.append(m(cpu.get("model") or "—"))
            cells += ["—" if not cpu.get("mhz") else f"{cpu['mhz'] / 1000:.2f}", m(r.get("error") or "")]
            t.add_row(*cells)
        c.out.print(t)
    _end({"sites": rows}, failure, as_json)


@click.command("status")
@click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Sites file with live sites (Slurm, PBS, HTCondor).")
@click.option("--timeout", default=30.0, show_default=True, type=Finite(1, 1e6),
              help="Seconds to wait for a site before showing it as not answering.")
@json_option
@fail_cleanly
def sites_status_cmd(sites_file: Path, timeout: float, as_json: bool) -> None:
    """What every live site has free right now, whatever its kind, in one table.

    Sites are asked at once; a slow or dead site shows its error (or "no answer") and
    does not hold up the others.

    \b
    Example:
      resel sites status --sites my-sites.toml
      resel sites status --sites my-sites.toml --json
    """
    from resel.backends.connect import site_status
    site_list = live_sites_from(sites_file, "resel sites status")
    # daemon threads, not an executor: a site that never answers must not hold up the exit
    answers: dict[str, dict] = {}
    threads = [threading.Thread(target=lambda s=s: answers.__setitem__(s.name, site_status(s)), daemon=True)
               for s in site_list]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    rows = []
    for site in site_list:
        if site.name in answers:
            rows.append(answers[site.name])
        else:
            rows.append({"site": site.name, "kind": site.kind, "scheduler": None, "version": None,
                         "free_cores": None, "total_cores": None, "running_jobs": None, "pending_jobs": None,
                         "partitions": [], "error": f"no answer within {timeout:g} s", "seconds": None})
    failure = _site_failures(rows, sites_file, [r["site"] for r in rows if r["error"]], "did not answer")
    if not as_json:
        t = Table(title=f"availability of the sites in {m(sites_file)}", title_justify="left")
        for col in ("site", "kind", "scheduler", "free/total cores", "running jobs", "pending jobs", "asked [s]",
                    "error"):
            t.add_column(col)
        for r in rows:
            t.add_row(m(r["site"]), m(r["kind"]), m(f"{r['scheduler'] or '—'} {r['version'] or ''}".strip()),
                      "—" if r["total_cores"] is None else f"{r['free_cores']}/{r['total_cores']}",
                      "—" if r["running_jobs"] is None else str(r["running_jobs"]),
                      "—" if r["pending_jobs"] is None else str(r["pending_jobs"]),
                      "—" if r["seconds"] is None else f"{r['seconds']:.2f}", m(r["error"] or ""))
        c.out.print(t)
    _end({"sites": rows}, failure, as_json)


@click.command("probe")
@click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Sites file with live sites.")
@click.option("--timeout", default=300.0, show_default=True, type=Finite(10, 1e6),
              help="Seconds to wait for a site's probe pilot to start and report.")
@db_option
@wide_option
@json_option
@fail_cleanly
def sites_probe_cmd(sites_file: Path, timeout: float, db: Path | None, wide: bool, as_json: bool) -> None:
    """Measure each site's compute nodes through its own queue: CPU model, clock, and a
    reference task under perf; stored for LIM (`resel run --clock probed`).

    One single-core probe pilot per site, all sites at once.

    \b
    Example:
      resel sites probe --sites my-sites.toml
      resel sites probe --sites my-sites.toml --wide     # the CPU model too
      resel sites probe --sites my-sites.toml --json
    """
    from concurrent.futures import ThreadPoolExecutor

    from resel.backends.connect import open_site
    from resel.live.site_probe import probe_site, save
    from resel.store import open_store
    site_list = live_sites_from(sites_file, "resel sites probe")
    store = open_store(db)
    with ThreadPoolExecutor(max_workers=max(1, len(site_list))) as pool:
        rows = list(pool.map(lambda s: probe_site(s, open_site, timeout=timeout), site_list))
    save(store, rows)
    failure = _site_failures(rows, sites_file, [r["site"] for r in rows if r["error"]], "could not be probed")
    if not as_json:
        t = Table(title=f"probes of the sites in {m(sites_file)} (stored in site_probes)", title_justify="left")
        cols = ["site", "host"] + (["CPU"] if wide else []) + ["clock [GHz]", "how", "reference task-clock [s]",
                                                            "queue wait [s]", "error"]
        for col in cols:
            t.add_column(col)
        for r in rows:
            cells = [m(r["site"]), m(r["host"] or "—")] + ([m(r["cpu_model"] or "—")] if wide else [])
            t.add_row(*cells, "—" if r["clock_ghz"] is None else f"{r['clock_ghz']:.3f}", m(r["clock_method"] or "—"),
                      "—" if r["task_clock_s"] is None else f"{r['task_clock_s']:.3f}",
                      "—" if r["wait_s"] is None else f"{r['wait_s']:.1f}", m(r["error"] or ""))
        c.out.print(t)
    _end({"probes": rows}, failure, as_json)


def register(cli: click.Group, sites_group: click.Group) -> None:
    cli.add_command(run_cmd)
    cli.add_command(status_cmd)
    cli.add_command(cancel_cmd)
    sites_group.add_command(check_cmd)
    sites_group.add_command(sites_status_cmd)
    sites_group.add_command(sites_probe_cmd)
