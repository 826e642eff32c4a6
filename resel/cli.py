"""The ``resel`` command line: thin wrappers over the Python API (resel/api.py).

Each command parses options, calls the API and formats the result — a rich table for people,
``--json`` for scripts. Every error resel raises on purpose is printed as one line without a
traceback (exit status 1); bad usage exits 2 as usual for click.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from resel import __version__
from resel.cli_common import CleanErrors, LazyConsole, LazyGroup, Table, fail_cleanly, print_json
from resel.cli_common import INT64_MAX, RUN_ID, SEED, Finite
from resel.cli_rates import model_option, objective_option, risk_option, walltime_option
from resel.errors import ReselError
from resel.safe_text import markup as m

if TYPE_CHECKING:
    from resel.experiment import Experiment

# Start-up: the store (sqlite_utils), the simulator, rich and its progress bar are imported in
# the commands that use them, and the other command modules only when their command runs
# (LazyGroup): `resel --help` and `resel runs` stay a fraction of a second (docs/benchmarks.md).

# Piped output (a file, a pager) gets wide lines rather than 80-column wrapping.
out = LazyConsole(highlight=False, width=None if sys.stdout.isatty() else 150)
err = LazyConsole(stderr=True, highlight=False)


_fail_cleanly = fail_cleanly    # the names the command modules import
_print_json = print_json


def _csv_ints(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    from resel.config import MAX_COUNT
    try:
        sizes = [int(v) if len(v.strip()) <= 12 else 0 for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: give whole numbers separated by commas, e.g. 64,256") from None
    if not sizes or any(not 1 <= n <= MAX_COUNT for n in sizes):
        raise click.BadParameter(f"give one or more sizes from 1 to {MAX_COUNT:,}, e.g. 64,256")
    return list(dict.fromkeys(sizes))


def _csv_strategies(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    specs = [v.strip() for v in value.split(",") if v.strip()]
    if not specs:
        raise click.BadParameter("give one or more strategies, e.g. random,model,reselect")
    from resel.experiment import split_spec
    try:   # repeated names count once; an @source suffix is kept in the name
        return list(dict.fromkeys(split_spec(spec)[2] for spec in specs))
    except ReselError as exc:
        raise click.BadParameter(str(exc)) from None


db_option = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Run store (SQLite). Default: $RESEL_DB or ~/.local/share/resel/resel.db.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
sites_option = click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                            help="Sites file (TOML). Default: the embedded thesis sites (`resel sites defaults`).")


#: the commands defined in other modules: name -> "module:command", imported when the command runs
#: (or when its help is shown); tests/test_cli.py checks this against the modules' register()
COMMANDS = {
    "replay": "resel.cli_trace:replay_cmd",
    "profile": "resel.cli_profile:profile_cmd",
    "model": "resel.cli_model:model_group",
    "run": "resel.cli_live:run_cmd",
    "status": "resel.cli_live:status_cmd",
    "cancel": "resel.cli_live:cancel_cmd",
    "plan": "resel.cli_plan:plan_cmd",
    "history": "resel.cli_history:history_group",
    "grid": "resel.cli_grid:grid_cmd",
    "scenario": "resel.cli_grid:scenario_group",
}
#: the same for ``resel sites``
SITES_COMMANDS = {
    "check": "resel.cli_live:check_cmd",
    "status": "resel.cli_live:sites_status_cmd",
    "probe": "resel.cli_live:sites_probe_cmd",
}


@click.group(cls=CleanErrors, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="resel")
def cli() -> None:
    """Run bags of tasks across several sites and finish them sooner.

    resel predicts each task's run time on each site from its instruction count and the
    site's clock (the Limited Information Model), acquires cores with pilot jobs, and moves
    waiting tasks to whichever acquired site finishes them first (re-selection windows).
    The simulator runs the very same decisions in virtual time.

    \b
    Start here:
      resel simulate                      # 1,024 GROMACS-style tasks on 4 thesis sites
      resel sites show                    # the sites, their clocks and LIM's predictions
      resel runs / resel report RUN       # what was stored
      resel sites check --sites S.toml    # can resel reach your live sites?
      resel run BAG --sites S.toml        # run a bag on live Slurm sites (status, cancel, --resume)
    """


@cli.command()
@click.argument("bag_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@sites_option
@click.option("--strategies", default="random,model,reselect", show_default=True, callback=_csv_strategies,
              help="Comma-separated: random, model (lowest predicted T_x), topk:K, queue[:E] (lowest "
                   "predicted start + T̂x; E extra sites hold pilots), reselect (random + re-selection), "
                   "BASE+reselect; append @scheduler, @twin or @history to pick a strategy's start estimate. "
                   "Peers (what users do without resel, docs/peers.md): race[:K] (the bag's pilot on every "
                   "site, the first K to start keep it), earliest (the earliest estimated start, never "
                   "moved), failover[:T] (best site; nothing started in T s: the next), rebroker[:TIMEOUT] "
                   "(PanDA-style reassignment).")
@click.option("--estimate", type=click.Choice(["scheduler", "twin", "history"]), default="scheduler",
              show_default=True, help="Start estimate the queue-aware strategy ranks sites by (no @ suffix).")
@click.option("--quantile", type=Finite(0.5, 0.999), default=0.9, show_default=True,
              help="History estimate: the wait quantile bounded.")
@click.option("--confidence", type=Finite(0.5, 0.999), default=0.9, show_default=True,
              help="History estimate: confidence of the bound.")
@click.option("--sizes", default="64,128,256,512,1024", show_default=True, callback=_csv_ints,
              help="Workload sizes (tasks per bag) to simulate.")
@click.option("--repeat", default=5, show_default=True, type=click.IntRange(1, 10_000),
              help="Repetitions per strategy and size (repetition i uses seed S+i for every strategy).")
@click.option("--seed", default=0, show_default=True, type=SEED, help="Base random seed.")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="Local processes running the repetitions (default: every core this process may use). "
                   "The results are the serial ones, whatever N.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run the repetitions on a Dask cluster instead (its scheduler, e.g. tcp://login1:8786; "
                   "needs resel[sweep] here and resel on its workers; waits for it as long as Dask's "
                   "distributed.comm.timeouts.connect, 30 s by default) — docs/peers.md.")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True,
              help="Site clock LIM predicts with: nominal (thesis) or measured average.")
@model_option
@risk_option
@objective_option
@walltime_option
@db_option
@click.option("--no-store", is_flag=True, help="Do not write runs to the store.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write T_q/T_x/TTC against size per strategy (and each run's figures) into DIR.")
@json_option
@_fail_cleanly
def simulate(bag_file: Path | None, sites_file: Path | None, strategies: list[str], estimate: str,
             quantile: float, confidence: float, sizes: list[int], repeat: int, seed: int,
             workers: int | None, dask_address: str | None, clock: str,
             model: str, risk: float | None, objective: str, walltime: str,
             db: Path | None, no_store: bool, plot_dir: Path | None, as_json: bool) -> None:
    """Compare strategies on simulated sites: TTC, T_x and T_q of the whole bag.

    BAG_FILE is a task bag (TOML; default: the embedded 1,024-task GROMACS bag, see
    examples/gromacs-bag.toml). Each run is stored with its events and decisions; the table
    shows mean ± sample std per strategy and size, and how much lower TTC_wkd is than random.

    \b
    Example:
      resel simulate --sizes 256,1024 --repeat 10
      resel simulate examples/gromacs-bag.toml --sites my-sites.toml --strategies model,model+reselect --json
      resel simulate --strategies model+reselect,race,earliest,failover,rebroker --repeat 20 --workers 2
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from resel.api import default_bag_path, default_sites_path
    from resel.cli_rates import runtime_for, store_if_exists
    from resel.config import check_site_commands, load_bag, load_sites
    from resel.experiment import run_experiment
    from resel.limits import check_task_count
    from resel.store import add_experiment, default_path, open_store, save_run
    bag = load_bag(bag_file or default_bag_path())
    sites = load_sites(sites_file or default_sites_path())
    check_site_commands(bag, sites)
    if plot_dir is not None and no_store:
        raise ReselError("--plot draws from the stored runs: drop --no-store")
    check_task_count(max(sizes), "--sizes", hint="give smaller --sizes")
    protect = [("the run store", db or default_path()), ("the bag file", bag_file), ("the sites file", sites_file)]
    if plot_dir is not None:    # before any work: neither the figures' folder nor a figure is an input
        from resel.outputs import refuse_plot_inputs
        refuse_plot_inputs(plot_dir, protect, names=["workload_by_size"])
    store = None if no_store else open_store(db)
    runtime = runtime_for(bag, sites, model=model, db=store if store is not None else store_if_exists(db),
                          clock=clock, simulated=True, seed=seed)
    rates = runtime.engine_rates(bag.profile.instructions, risk=risk, objective=objective)
    params = {"bag": str(bag_file or "embedded"), "sites": str(sites_file or "embedded"),
              "strategies": strategies, "sizes": sizes, "repeat": repeat, "seed": seed, "clock": clock,
              "estimate": estimate, "quantile": quantile, "confidence": confidence,
              "model": model, "model_used": runtime.summary(), "risk": risk, "objective": objective,
              "walltime": walltime}
    exp_id = add_experiment(store, params) if store is not None else None
    total = len(strategies) * len(sizes) * repeat
    with Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        bar = progress.add_task("runs", total=total)

        def on_run(result) -> int | None:
            progress.advance(bar)
            return save_run(store, result, experiment_id=exp_id) if store is not None else None

        from resel.experiment import dask_executor, local_cores
        with dask_executor(dask_address) as executor:
            exp = run_experiment(bag, sites, strategies, sizes, repeat=repeat, seed=seed, clock=clock,
                                 estimate=estimate, quantile=quantile, confidence=confidence, on_run=on_run,
                                 rates=rates, workers=workers or local_cores(), executor=executor,
                                 walltime=walltime)
    exp.experiment_id = exp_id
    if as_json:
        doc = exp.as_dict()
        doc["model"] = {"asked": model, "used": runtime.used, "summary": runtime.summary(),
                        "application": runtime.application, "notes": runtime.notes,
                        "sites": {s: r.as_dict(bag.profile.instructions) for s, r in runtime.sites.items()}}
        doc["risk"], doc["objective"], doc["walltime"] = risk, objective, walltime
        doc["db"] = str(db or default_path()) if store is not None else None
        if plot_dir is not None:
            from resel.cli_report_plots import write_experiment
            doc["figures"] = write_experiment(store, exp_id, plot_dir, as_json=True, protect=protect)
        _print_json(doc)
        return
    _print_experiment(exp, bag_file, sites_file)
    out.print(f"[dim]{m(runtime.summary())}" + (f"; re-selection windows at risk {risk:g}" if risk is not None else "")
              + ("; queue-aware split on P90" if objective == "p90" else "") + "[/dim]")
    for note in runtime.notes:
        out.print(f"[dim]{m(note)}[/dim]")
    if store is not None:
        out.print(f"[dim]stored as experiment {exp_id} in {m(db or default_path())}: "
                  f"`resel runs`, `resel report RUN`[/dim]")
    if plot_dir is not None:
        from resel.cli_report_plots import write_experiment
        write_experiment(store, exp_id, plot_dir, protect=protect)


def quarantine_log(store, run_id: int) -> list[dict]:
    """Each quarantine of a stored run (docs/engine.md, black-hole sites): site, when, until,
    the counts that decided it, and when it was released (None: not before the run ended)."""
    out: list[dict] = []
    for row in store.query("select time, kind, data from events where run_id = ? and kind in "
                           "('SiteQuarantined', 'SiteReleased') order by seq", [run_id]):
        data = json.loads(row["data"])
        if row["kind"] == "SiteQuarantined":
            out.append({"site": data["site"], "time": row["time"], "until": data.get("until"),
                        "reason": data.get("reason", ""), "released": None})
        else:
            for q in reversed(out):
                if q["site"] == data["site"] and q["released"] is None:
                    q["released"] = row["time"]
                    break
    return out


def _mean_std(s: dict, unit: Any) -> str:
    """``mean±std`` of a cell's summary in the table's unit (``—`` for a cell with no run)."""
    if s["n"] == 0 or math.isnan(s["mean"]):
        return "—"
    return f"{unit.fmt(s['mean'])}±{unit.fmt(s['std'])}"


def _print_experiment(exp: Experiment, bag_file: Path | None, sites_file: Path | None) -> None:
    table = Table(title=f"bag {m(exp.bag.name)} ({exp.bag.profile.instructions:.3g} instructions/task) on "
                        f"{m(', '.join(s.name for s in exp.sites))} — {exp.repeat} run(s) each, seed {exp.seed}, "
                        f"LIM clock {exp.clock}", title_justify="left")
    from resel.units import pick
    unit = pick(cell.summary(metric)["mean"] for cell in exp.cells.values() for metric in ("ttc_wkd", "tx_wkd"))
    for col, just in (("size", "right"), ("strategy", "left"), (m(unit.header("TTC_wkd")), "right"),
                      (m(unit.header("T_x,wkd")), "right"), (m(unit.header("T_q,wkd")), "right"),
                      ("TTC vs random", "right"), ("moved", "right"), ("P_RESEL wrong", "right")):
        table.add_column(col, justify=just, no_wrap=col != "TTC vs random" and col != "P_RESEL wrong")
    for size in exp.sizes:
        for i, name in enumerate(exp.strategies):
            cell = exp.cells[(name, size)]
            d = cell.as_dict()
            vs = ""
            if "random" in exp.strategies and name != "random":
                change = exp.change(name, "random", size)
                vs = f"{change:.0f}% lower" if change >= 0 else f"{-change:.0f}% higher"
            rs = d["reselection"]
            wrong = f"{rs['incorrect']}/{rs['judged']}" if rs["judged"] else ""
            table.add_row(str(size) if i == 0 else "", m(name), _mean_std(cell.summary("ttc_wkd"), unit),
                          _mean_std(cell.summary("tx_wkd"), unit), _mean_std(cell.summary("tq_wkd"), unit), vs,
                          f"{d['reassigned']:.0f}" if rs["decisions"] else "", wrong,
                          end_section=i == len(exp.strategies) - 1)
    out.print(table)
    out.print(f"[dim]times in {unit.words}, mean±sample std over runs; moved = tasks (mean per run) that finished "
              "away from their initial site; P_RESEL wrong = re-selections (all runs) that the oracle RESEL, knowing true "
              "T_x and a_r, would have decided otherwise[/dim]")


@cli.command()
@db_option
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, INT64_MAX), help="How many runs, newest first.")
@json_option
@_fail_cleanly
def runs(db: Path | None, limit: int, as_json: bool) -> None:
    """List stored runs, newest first.

    \b
    Example:
      resel runs --limit 10
    """
    from resel.store import list_runs, read_store
    rows = list_runs(read_store(db), limit)
    if as_json:
        _print_json(rows)
        return
    if not rows:
        out.print("no runs stored yet — try `resel simulate`")
        return
    from resel.units import pick
    unit = pick(r["ttc_wkd"] for r in rows)
    table = Table()
    for col in ("run", "exp", "created", "bag", "strategy", "size", "seed", m(unit.header("TTC_wkd")), "done", "failed",
                "moved"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        table.add_row(str(r["id"]), str(r["experiment_id"] or ""), m(r["created"]), m(r["bag"]), m(r["strategy"]),
                      m(r["size"]), m(r["seed"]), unit.fmt(r["ttc_wkd"]), str(r["done"]),
                      str(r["failed"]), str(r["reassigned"]))
    out.print(table)


@cli.command()
@click.argument("run_id", type=RUN_ID)
@db_option
@click.option("--decisions", "n_decisions", default=0, show_default=True, type=click.IntRange(0, INT64_MAX),
              help="Also list the first N re-selection decisions with their inputs.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the run's figures (PNG and SVG) into DIR: Gantt, CDFs, predictions vs measured.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML report (figures, tables, configuration) to FILE.")
@json_option
@_fail_cleanly
def report(run_id: int, db: Path | None, n_decisions: int, plot_dir: Path | None, html_file: Path | None,
           as_json: bool) -> None:
    """Show one stored run: workload times, where tasks ran, re-selection audit.

    \b
    Example:
      resel report 12 --decisions 20
      resel report 12 --plot figures/ --html run12.html
    """
    from resel.outputs import refuse_inputs, refuse_plot_inputs
    from resel.store import default_path, get_run, open_store
    protect = [("the run store", db or default_path())]
    if html_file is not None:   # before anything is read or drawn
        refuse_inputs(html_file, "--html", protect)
    if plot_dir is not None:
        refuse_plot_inputs(plot_dir, protect)
    store = open_store(db, write=False)
    run = get_run(store, run_id)
    per_site = list(store.query(
        "select site, origin, count(*) as tasks, avg(tq) as tq, avg(tx) as tx, max(ttc) as ttc "
        "from tasks where run_id = ? group by site, origin order by site, origin", [run_id]))
    kinds = {r["kind"]: r["n"] for r in store.query(
        "select kind, count(*) as n from decisions where run_id = ? group by kind", [run_id])}
    picked = list(store.query(
        "select * from decisions where run_id = ? and kind != 'assign' order by seq limit ?", [run_id, n_decisions]))
    quarantines = quarantine_log(store, run_id)
    if as_json:
        for key in ("sites", "bag_spec"):
            run.pop(key, None)
        from resel.cli_report_plots import emit
        _print_json({"run": run, "per_site": per_site, "decisions": kinds, "decision_log": picked,
                     "quarantines": quarantines,
                     **emit(store, run_id, plot_dir, html_file, as_json=True, protect=protect)})
        return
    from resel.units import pick
    out.print(f"[bold]run {run['id']}[/bold]  bag {m(run['bag'])}  strategy {m(run['strategy'])}  size {m(run['size'])}  "
              f"seed {m(run['seed'])}  LIM clock {m(run['clock'])}")
    if run["ttc_wkd"] is None:   # a live run still going (or stopped): its numbers come at the end
        out.print(f"run {run_id} is {m(run.get('status') or 'not finished')}: no workload times yet "
                  f"(`resel status {run_id}` shows where it stands)")
    else:
        unit = pick([run["ttc_wkd"]])
        wasted = pick([run["wasted_core_s"] or 0])
        out.print(f"TTC_wkd {unit.with_name(run['ttc_wkd'])} = T_q,wkd {unit.with_name(run['tq_wkd'])} + "
                  f"T_x,wkd {unit.with_name(run['tx_wkd'])}   done {run['done']}  failed {run['failed']}  "
                  f"moved {run['reassigned']}  restarts {run['restarts']}  "
                  f"wasted {wasted.fmt(run['wasted_core_s'] or 0, 1)} core-{wasted.name}")
    unit = pick(v for r in per_site for v in (r["tq"], r["tx"], r["ttc"]))
    table = Table(title="where tasks ran", title_justify="left")
    for col in ("ran on", "assigned to", "tasks", m(unit.header("mean T_q")), m(unit.header("mean T_x")),
                m(unit.header("last end"))):
        table.add_column(col)
    for r in per_site:
        table.add_row(m(r["site"] or "(failed)"), m(r["origin"]), str(r["tasks"]), unit.fmt(r["tq"]),
                      unit.fmt(r["tx"]), unit.fmt(r["ttc"]))
    out.print(table)
    for q in quarantines:
        until = f"until {q['until']:,.0f} s" if q["until"] is not None else "not released"
        released = f", released at {q['released']:,.0f} s" if q["released"] is not None else ""
        out.print(f"quarantined {m(q['site'])} at {q['time']:,.0f} s ({until}{released}): black hole — {m(q['reason'])}")
    audit = run["audit"] or {}
    out.print("decisions: " + m(", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none"))
    if audit.get("decisions"):
        penalty = pick([audit["penalty_total"]])
        out.print(f"re-selection audit: {audit['judged']} judged, {audit['incorrect']} where P_RESEL ≠ RESEL "
                  f"{m(audit['by_case'] or '')}, penalty total {penalty.with_name(audit['penalty_total'])}, "
                  f"max {penalty.with_name(audit['penalty_max'])}, bound violations {audit['bound_violations']}")
    if picked:
        times = ("time", "a_r", "a_r2", "tx_r", "tx_r2", "window")
        unit = pick(d[k] for d in picked for k in times if isinstance(d[k], (int, float)))
        t = Table(title="re-selection decisions", title_justify="left")
        for col in (unit.header("time"), "kind", "task", "r", "r'", unit.header("a_r"), unit.header("a_r'"),
                    unit.header("T̂x(r)"), unit.header("T̂x(r')"), unit.header("Ŵ")):
            t.add_column(m(col), justify="right")
        for d in picked:
            t.add_row(*(m(unit.fmt(d[k]) if k in times and isinstance(d[k], (int, float)) else _s(d[k]))
                        for k in ("time", "kind", "task", "origin", "target", "a_r", "a_r2", "tx_r", "tx_r2",
                                  "window")))
        out.print(t)
    if plot_dir is not None or html_file is not None:
        from resel.cli_report_plots import emit
        emit(store, run_id, plot_dir, html_file, as_json=False, protect=protect)


def _s(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}" if isinstance(value, float) else str(value)


@cli.group(cls=LazyGroup, lazy=SITES_COMMANDS)
def sites() -> None:
    """Inspect site files and LIM's predictions for them."""


@sites.command("show")
@sites_option
@click.option("--bag", "bag_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Bag whose predicted T_x to show (default: the embedded GROMACS bag).")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True)
@json_option
@_fail_cleanly
def sites_show(sites_file: Path | None, bag_file: Path | None, clock: str, as_json: bool) -> None:
    """List sites with clocks, κ, pilot policy, wait model and LIM's T̂x for a bag.

    \b
    Example:
      resel sites show --sites examples/sites-thesis.toml --clock avg
    """
    from resel.api import default_bag_path, default_sites_path
    from resel.config import load_bag, load_sites
    from resel.models.lim import site_rates
    site_list = load_sites(sites_file or default_sites_path())
    bag = load_bag(bag_file or default_bag_path())
    rates = site_rates(site_list, clock)
    rows = [{"name": s.name, "kind": s.kind, "cores": s.cores, "clock_base": s.clock.base, "clock_avg": s.clock.avg,
             "kappa": s.kappa, "tx_pred": rates[s.name].tx(bag.profile.instructions), "pilot_mode": s.pilot.mode,
             "max_pilots": s.pilot.max_pilots, "reselect_target": s.reselect_target,
             "wait": _wait_text(s), "notes": s.notes} for s in site_list]
    if as_json:
        _print_json({"bag": bag.name, "clock": clock, "sites": rows})
        return
    table = Table(title=f"T̂x = κ · {bag.profile.instructions:.3g} instructions / clock ({clock})", title_justify="left")
    from resel.units import pick
    unit = pick(r["tx_pred"] for r in rows)
    for col in ("site", "cores", "base GHz", "avg GHz", "κ", m(unit.header("T̂x")), "pilots", "target",
                "queue wait (simulated)"):
        table.add_column(col, no_wrap=col != "queue wait (simulated)")
    for r in rows:
        table.add_row(m(r["name"]), str(r["cores"]), f"{r['clock_base']:.3f}",
                      "—" if r["clock_avg"] is None else f"{r['clock_avg']:.3f}", f"{r['kappa']:.2f}",
                      unit.fmt(r["tx_pred"]), m(r["pilot_mode"]), "yes" if r["reselect_target"] else "no",
                      m(r["wait"] or "—"))
    out.print(table)


def _wait_text(site) -> str | None:
    if site.wait is not None:
        scale = f" × nodes^{site.wait.size_exponent:g}" if site.wait.size_exponent else ""
        return site.wait.dist.describe() + scale
    if site.queue is not None:
        q = site.queue
        return f"{q.policy} queue replaying {Path(q.trace).name} (load ×{q.load:g})"
    return None


@sites.command("defaults")
def sites_defaults() -> None:
    """Print the embedded default sites file, to copy and edit.

    \b
    Example:
      resel sites defaults > my-sites.toml
    """
    from resel.api import default_sites_path
    click.echo(default_sites_path().read_text(encoding="utf-8"), nl=False)


def main() -> None:
    """Console-script entry point. ``RESEL_LOG=debug`` (or ``info``) shows on stderr what resel
    does that the tables do not: every command it runs on a site with its exit code and time."""
    level = os.environ.get("RESEL_LOG", "").strip().upper()
    if level:
        import logging
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise SystemExit(f"resel: RESEL_LOG={level.lower()!r}: give debug, info, warning or error")
        # resel's own loggers only: paramiko's and urllib3's debug would bury what resel did
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("resel").setLevel(level)
    cli(prog_name="resel")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
