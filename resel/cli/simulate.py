"""``resel simulate``: compare strategies on simulated sites and store every run.

The simulator, the store and rich's progress bar are imported when the command runs; loading
this module (for ``resel --help``) costs click and :mod:`resel.cli.common` only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from resel.cli.common import SEED, Finite, Table, db_option, err, fail_cleanly, json_option, out, print_json
from resel.cli.common import sites_option
from resel.cli.rates import model_option, objective_option, risk_option, walltime_option
from resel.errors import ReselError
from resel.safe_text import markup as m

if TYPE_CHECKING:
    from resel.sim.experiment import Experiment


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
    from resel.sim.experiment import split_spec
    try:   # repeated names count once; an @source suffix is kept in the name
        return list(dict.fromkeys(split_spec(spec)[2] for spec in specs))
    except ReselError as exc:
        raise click.BadParameter(str(exc)) from None



@click.command()
@click.argument("bag_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@sites_option
@click.option("--strategies", default="auto,model,earliest,race,failover,oracle", show_default=True,
              callback=_csv_strategies,
              help="Comma-separated: auto (resel's default: queue-aware with re-selection where a start is "
                   "estimated, else model+reselect; rates learned during the run), random, model (lowest "
                   "predicted T_x: the fastest clock), topk:K, queue[:E] (lowest predicted start + T̂x; E extra "
                   "sites hold pilots), reselect (random + re-selection), BASE+reselect, BASE+learn; append "
                   "@scheduler, @twin or @history to pick a strategy's start estimate. Peers (what users do "
                   "without resel, docs/peers.md): race[:K] (the bag's pilot on every site, the first K to start "
                   "keep it), earliest (the earliest estimated start, never moved: sbatch -M), failover[:T] (best "
                   "site; nothing started in T s: the next), rebroker[:TIMEOUT] (PanDA-style reassignment). "
                   "oracle: the lower bound on TTC no strategy beats on that seed (resel/sim/oracle.py).")
@click.option("--estimate", type=click.Choice(["scheduler", "twin", "history"]), default="scheduler",
              show_default=True, help="Start estimate the queue-aware strategy ranks sites by (no @ suffix).")
@click.option("--quantile", type=Finite(0.5, 0.999), default=0.9, show_default=True,
              help="History estimate: the wait quantile bounded.")
@click.option("--confidence", type=Finite(0.5, 0.999), default=0.9, show_default=True,
              help="History estimate: confidence of the bound.")
@click.option("--sizes", default="256,1024", show_default=True, callback=_csv_ints,
              help="Workload sizes (tasks per bag) to simulate; a bag with a task table: its own rows unless "
                   "given (other sizes take its first rows, or repeat them).")
@click.option("--shift", "shift_days", type=Finite(0, 3650), default=None,
              help="Days later in their traces that trace-driven queues meet each repetition's bag "
                   "(repetition i: i × DAYS). Default: 3 for the embedded queue sites, 0 with --sites.")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1, 10_000),
              help="Repetitions per strategy and size (repetition i uses seed S+i for every strategy).")
@click.option("--seed", default=0, show_default=True, type=SEED, help="Base random seed.")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="Local processes running the repetitions (default: every core this process may use). "
                   "The results are the serial ones, whatever N.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run the repetitions on a Dask cluster instead (needs resel[sweep]): local[:N] starts a "
                   "private one here (N worker processes, default --workers; TLS with certificates made for "
                   "this run); tls://HOST:PORT reaches yours with Dask's TLS settings (distributed.comm.tls.ca-file, "
                   ".client.cert, .client.key in Dask's configuration); tcp://HOST:PORT needs --dask-insecure. "
                   "Its workers need resel; waits for a scheduler as long as Dask's "
                   "distributed.comm.timeouts.connect (30 s by default) — docs/peers.md, docs/security.md.")
@click.option("--dask-insecure", is_flag=True,
              help="Accept a tcp:// Dask scheduler: it authenticates nobody, so anyone who can reach its port "
                   "can run code as you through it or answer in its place. Only where no one else can reach it.")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True,
              help="Site clock LIM predicts with: nominal (thesis) or measured average.")
@model_option
@risk_option
@objective_option
@walltime_option
@click.option("--data-blind", is_flag=True,
              help="A bag with [bag.data] sizes: the engine decides blind to the data (sites ranked by T̂x, "
                   "not T̂x + data time) while the simulator still moves the bytes — what the data costs a "
                   "choice that ignores it (docs/engine.md, \"Selection sees the data\").")
@db_option
@click.option("--no-store", is_flag=True,
              help="Do not write the runs to the store (nothing for `resel runs` or `resel report` to show later).")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the experiment's figure into DIR: T_q, T_x and TTC against size, per strategy "
                   "(workload_by_size.png and .svg). One run's figures: `resel report RUN --plot DIR`.")
@json_option
@fail_cleanly
def simulate(bag_file: Path | None, sites_file: Path | None, strategies: list[str], estimate: str,
             quantile: float, confidence: float, sizes: list[int], shift_days: float | None, repeat: int, seed: int,
             workers: int | None, dask_address: str | None, dask_insecure: bool, clock: str,
             model: str, risk: float | None, objective: str, walltime: str, data_blind: bool,
             db: Path | None, no_store: bool, plot_dir: Path | None, as_json: bool) -> None:
    """Compare strategies on simulated sites: TTC, T_x and T_q of the whole bag.

    Without options this is resel's main job: the embedded GROMACS bag on three batch queues
    replaying the real HPC2N trace (the bag arriving 3 days later per repetition), resel's
    default (auto) against what a user would do instead — the fastest clock (model), earliest,
    race, failover — and the oracle's bound, with one line saying how much sooner resel finishes.

    BAG_FILE is a task bag (TOML; default: the embedded 1,024-task GROMACS bag, see
    examples/gromacs-bag.toml); --sites a sites file (default: the embedded queue sites, `resel
    sites defaults` shows the thesis sites). Each run is stored with its events and decisions;
    the table shows mean ± sample std per strategy and size, and how much lower TTC_wkd is than
    random (or, without random, than auto).
    A bag with [bag.data] sizes moves its data at each site's bandwidth, and the engine prices
    it in every choice of site (--data-blind: it does not); the table then shows the data
    seconds per task.

    \b
    Example:
      resel simulate
      resel simulate --sizes 256,1024 --repeat 10
      resel simulate examples/gromacs-bag.toml --sites my-sites.toml \\
          --strategies model,model+reselect --json
      resel simulate --strategies model+reselect,race,earliest,failover,rebroker \\
          --repeat 20 --workers 2
      resel simulate --sizes 64,1024 --plot figures/      # and `resel runs`, `resel report RUN`
      resel simulate examples/gromacs-data-bag.toml --sites examples/sites-data.toml \\
          --strategies queue --sizes 256
    """
    from resel.api import default_bag_path, queue_sites_path
    from resel.cli.rates import runtime_for, store_if_exists
    from resel.config import check_site_commands, load_bag, load_sites
    from resel.store import default_path, open_store
    _check_dask(dask_address, dask_insecure)       # refused before any work, the scheduler not even contacted
    bag = load_bag(bag_file or default_bag_path())
    sites = load_sites(sites_file or queue_sites_path())
    if shift_days is None:
        shift_days = 3.0 if sites_file is None else 0.0
    check_site_commands(bag, sites)
    if bag.tasks and click.get_current_context().get_parameter_source("sizes") is ParameterSource.DEFAULT:
        sizes = [bag.count]        # a task table is the bag the user means, not 256 and 1,024 of it
    protect = _checked_outputs(plot_dir, no_store, sizes, [("the run store", db or default_path()),
                                                           ("the bag file", bag_file), ("the sites file", sites_file)])
    store = None if no_store else open_store(db)
    moves = _moves_data(bag, sites, data_blind)
    runtime = runtime_for(bag, sites, model=model, db=store if store is not None else store_if_exists(db),
                          clock=clock, simulated=True, seed=seed)
    rates = runtime.engine_rates(bag.profile.instructions, risk=risk, objective=objective)
    params = {"bag": str(bag_file or "embedded"), "sites": str(sites_file or "embedded"), "strategies": strategies,
              "sizes": sizes, "repeat": repeat, "seed": seed, "clock": clock, "shift_days": shift_days,
              "estimate": estimate, "quantile": quantile, "confidence": confidence, "model": model,
              "model_used": runtime.summary(), "risk": risk, "objective": objective, "walltime": walltime,
              "data": ("blind" if data_blind else "priced") if moves else None}
    total = len([s for s in strategies if s != "oracle"]) * len(sizes) * repeat
    exp, exp_id = _run_stored(store, params, total, dask_address, dask_insecure, workers,
                              bag=bag, sites=sites, strategies=strategies, sizes=sizes, repeat=repeat, seed=seed,
                              clock=clock, estimate=estimate, quantile=quantile, confidence=confidence,
                              rates=rates, walltime=walltime, price_data=not data_blind, shift=shift_days * 86400)
    stored_in = None if store is None else db or default_path()
    if as_json:
        doc = _json_doc(exp, runtime, bag, sites, model=model, risk=risk, objective=objective, walltime=walltime,
                        shift_days=shift_days, data_blind=data_blind, moves=moves)
        doc["db"], doc["stored"] = None if stored_in is None else str(stored_in), stored_in is not None
        if plot_dir is not None:
            from resel.cli.report_plots import write_experiment
            doc["figures"] = write_experiment(store, exp_id, plot_dir, as_json=True, protect=protect)
        print_json(doc)
        return
    _print_experiment(exp, bag_file, sites_file)
    for line in _verdict(exp):
        out.print(line)
    _print_notes(runtime, risk, objective, _data_summary(bag, sites, data_blind) if moves else None, data_blind,
                 exp_id, stored_in)
    if plot_dir is not None:
        from resel.cli.report_plots import write_experiment
        write_experiment(store, exp_id, plot_dir, protect=protect)


def _check_dask(dask_address: str | None, dask_insecure: bool) -> None:
    """A ``tcp://`` Dask scheduler is said to authenticate nobody; ``--dask-insecure`` without one is
    refused."""
    if dask_address is not None:
        from resel.sim.dask_access import parse_target
        if parse_target(dask_address, insecure=dask_insecure).kind == "tcp":
            err.print(f"[yellow]--dask-insecure: the Dask scheduler at {m(dask_address)} authenticates nobody; "
                      "anyone who can reach it can run code as you[/yellow]", soft_wrap=True)
    elif dask_insecure:
        raise ReselError("--dask-insecure goes with --dask tcp://HOST:PORT")


def _run_stored(store: Any, params: dict, total: int, dask_address: str | None, dask_insecure: bool,
                workers: int | None, **experiment: Any) -> tuple[Experiment, int | None]:
    """:func:`~resel.sim.experiment.run_experiment` with a progress bar (on a terminal), locally or
    on Dask, each run stored as it ends (``store`` None: none). Returns the experiment and its id
    in the store.

    The experiment's row is written with its first run: a sweep that fails before one (a Dask
    cluster out of reach, a worker without resel) leaves no empty experiment in the store."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from resel.sim.experiment import dask_executor, local_cores, run_experiment
    from resel.store import add_experiment, save_run
    exp_ids: list[int] = []
    with Progress(TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as progress:
        bar = progress.add_task("runs", total=total)

        def on_run(result) -> int | None:
            progress.advance(bar)
            if store is None:
                return None
            if not exp_ids:
                exp_ids.append(add_experiment(store, params))
            return save_run(store, result, experiment_id=exp_ids[0])

        with dask_executor(dask_address, insecure=dask_insecure,
                           default_workers=workers or local_cores()) as executor:
            exp = run_experiment(on_run=on_run, workers=workers or local_cores(), executor=executor, **experiment)
    exp_id = exp_ids[0] if exp_ids else None
    exp.experiment_id = exp_id
    return exp, exp_id


def _json_doc(exp: Experiment, runtime: Any, bag: Any, sites: list, *, model: str, risk: float | None,
              objective: str, walltime: str, shift_days: float, data_blind: bool, moves: bool) -> dict:
    """The experiment as ``--json`` prints it, with the model used, the options that shaped it, how
    much sooner resel finished and the data moved (the store's part is added by the caller)."""
    doc = exp.as_dict()
    doc["model"] = {"asked": model, "used": runtime.used, "summary": runtime.summary(),
                    "application": runtime.application, "notes": runtime.notes,
                    "sites": {s: r.as_dict(bag.profile.instructions) for s, r in runtime.sites.items()}}
    doc["risk"], doc["objective"], doc["walltime"] = risk, objective, walltime
    doc["shift_days"] = shift_days
    doc["sooner"] = _sooner(exp)
    doc["data"] = _data_summary(bag, sites, data_blind) if moves else None
    return doc


def _checked_outputs(plot_dir: Path | None, no_store: bool, sizes: list[int],
                     protect: list[tuple[str, Path | None]]) -> list[tuple[str, Path | None]]:
    """Before any work: ``--plot`` needs the store, the sizes are within resel's limits, and
    everything drawing the figure needs is checked (``protect``: the files it must not overwrite,
    returned)."""
    from resel.limits import check_task_count
    if plot_dir is not None and no_store:
        raise ReselError("--plot draws from the stored runs: drop --no-store")
    check_task_count(max(sizes), "--sizes", hint="give smaller --sizes")
    if plot_dir is not None:
        from resel.cli.report_plots import ready_to_draw
        ready_to_draw(plot_dir, None, protect, names=["workload_by_size"])
    return protect


def _moves_data(bag: Any, sites: list, data_blind: bool) -> bool:
    """Whether the bag moves data (it has [bag.data] sizes); ``--data-blind`` without any is refused."""
    from resel.transfer import TransferModel
    moves = TransferModel.from_bag(bag, sites) is not None
    if data_blind and not moves:
        raise ReselError("--data-blind: the bag moves no data to be blind to; give it [bag.data] sizes "
                         "(input_mb, shared_mb, output_mb), e.g. examples/gromacs-data-bag.toml")
    return moves


def _print_notes(runtime: Any, risk: float | None, objective: str, data: dict | None, data_blind: bool,
                 exp_id: int | None, stored_in: Path | None) -> None:
    """The dim lines under the table: the T̂x model and its notes, the data each task moved, and
    where the runs were stored (``stored_in`` None: not stored)."""
    out.print(f"[dim]{m(runtime.summary())}" + (f"; re-selection windows at risk {risk:g}" if risk is not None else "")
              + ("; queue-aware split on P90" if objective == "p90" else "") + "[/dim]")
    for note in runtime.notes:
        out.print(f"[dim]{m(note)}[/dim]")
    if data is not None:
        d = data
        how = "the engine was blind to it (--data-blind)" if data_blind else "priced in every choice of site"
        out.print(f"[dim]data per task: {d['input_mb']:g} MB own inputs, {d['shared_mb']:g} MB shared (once per "
                  f"site), {d['output_mb']:g} MB outputs; {how}[/dim]")
    if stored_in is not None:
        out.print(f"[dim]stored as experiment {exp_id} in {m(stored_in)}: "
                  f"`resel runs --experiment {exp_id}`, `resel report RUN`; `resel prune` removes old runs[/dim]")
    else:
        out.print("[dim]not stored (--no-store): these runs cannot be listed or reported later[/dim]")


def _sooner(exp: Experiment) -> dict | None:
    """Per size, how much sooner resel's default finished than the best other strategy compared
    (the ``--json`` document's ``sooner``), or None without auto and another to compare."""
    out = {}
    for size in exp.sizes:
        found = exp.sooner(size)
        if found is None:
            return None
        best, pct = found
        cell = exp.cells.get(("oracle", size))
        auto = exp.cells[("auto", size)].summary("ttc_wkd")["mean"]
        out[str(size)] = {"best_other": best, "percent_sooner": pct, "auto_ttc": auto,
                          "best_other_ttc": exp.cells[(best, size)].summary("ttc_wkd")["mean"],
                          "oracle_ttc": cell.summary("ttc_wkd")["mean"] if cell else None}
    return out


def _verdict(exp: Experiment) -> list[str]:
    """The main job's one line: how much sooner resel finishes than what a user would do
    instead (the best of the others), and what auto ran as."""
    lines = []
    found = _sooner(exp)
    if found:
        from resel.units import pick
        unit = pick(x for v in found.values() for x in (v["auto_ttc"], v["best_other_ttc"]))
        parts = []
        for size, v in found.items():
            pct = v["percent_sooner"]
            how = f"{pct:.0f}% sooner than" if pct >= 0.5 else ("as soon as" if pct > -0.5 else f"{-pct:.0f}% later than")
            parts.append(f"{int(size):,} tasks in {unit.fmt(v['auto_ttc'])} {unit.name}, {how} {m(v['best_other'])} "
                         f"({unit.fmt(v['best_other_ttc'])} {unit.name})")
        lines.append("[bold]resel (auto) against the best of the others (mean TTC_wkd): " + "; ".join(parts)
                     + "[/bold]")
    ran = sorted({c for (name, _), cell in exp.cells.items() if name == "auto"
                  for c in (r.auto for r in cell.runs) if c is not None})
    for ran_as, why in ran:
        lines.append(f"[dim]auto ran as {m(ran_as)}: {m(why)}[/dim]")
    return lines


def _data_summary(bag: Any, sites: list, blind: bool) -> dict:
    """What the ``--json`` document says of a bag's data: its sizes (MB), whether the engine
    priced it, and each site's bandwidth as priced and as simulated (MB/s)."""
    from resel.transfer import MB, TransferModel
    priced, truth = TransferModel.from_bag(bag, sites), TransferModel.from_bag(bag, sites, truth=True)
    bandwidth = {}
    for s in sites:
        bw, true = priced.bandwidth_of(s.name), truth.bandwidth_of(s.name)
        bandwidth[s.name] = {"in": bw.inbound, "out": bw.outbound, "true_in": true.inbound, "true_out": true.outbound}
    return {"priced": not blind, "input_mb": priced.own_in_bytes / MB, "shared_mb": priced.shared_bytes / MB,
            "output_mb": priced.out_bytes / MB, "bandwidth": bandwidth}


def _mean_std(s: dict, unit: Any) -> str:
    """``mean±std`` of a cell's summary in the table's unit; the mean alone for a single run
    (its sample std is undefined, not 0); ``—`` for a cell with no run."""
    if s["n"] == 0 or math.isnan(s["mean"]):
        return "—"
    if s["n"] == 1:
        return unit.cell(s["mean"])
    return f"{unit.fmt(s['mean'])}±{unit.fmt(s['std'])}"


def _print_experiment(exp: Experiment, bag_file: Path | None, sites_file: Path | None) -> None:
    from resel.units import pick
    seeds = f"seed {exp.seed}" if exp.repeat == 1 else f"seeds {exp.seed}–{exp.seed + exp.repeat - 1}"
    per = (f"{exp.bag.profile.instructions:.3g} instructions per task" if not exp.bag.tasks else
           f"a table of unequal tasks, {exp.bag.profile.instructions:.3g} instructions on average")
    out.print(f"bag {m(exp.bag.name)} ({per}) on "
              f"{m(', '.join(s.name for s in exp.sites))}\n{exp.repeat} run{'s' if exp.repeat > 1 else ''} per "
              f"strategy and size, {seeds}, LIM predicting with the {exp.clock} clock"
              + (f"; run i meets the queues i × {exp.shift / 86400:g} d later" if exp.shift else ""), highlight=False)
    table = Table()
    unit = pick(cell.summary(metric)["mean"] for cell in exp.cells.values() for metric in ("ttc_wkd", "tx_wkd"))
    moves = any("data" in cell.as_dict() for cell in exp.cells.values())
    baseline = "random" if "random" in exp.strategies else "auto" if "auto" in exp.strategies else None
    for col, just in (("size", "right"), ("strategy", "left"), (m(unit.header("TTC_wkd")), "right"),
                      (m(unit.header("T_x,wkd")), "right"), (m(unit.header("T_q,wkd")), "right"),
                      (f"TTC vs {baseline or 'random'}", "right"), ("moved", "right"), ("P_RESEL wrong", "right"),
                      *((("data s/task", "right"),) if moves else ())):
        table.add_column(col, justify=just, no_wrap=col != "strategy")
    for size in exp.sizes:
        for i, name in enumerate(exp.strategies):
            cell = exp.cells[(name, size)]
            d = cell.as_dict()
            vs = ""
            if baseline is not None and name != baseline:
                change = exp.change(name, baseline, size)
                vs = f"{change:.0f}% lower" if change >= 0 else f"{-change:.0f}% higher"
            if name == "oracle":   # a bound, not a run: its TTC only
                table.add_row(str(size) if i == 0 else "", m(name), _mean_std(cell.summary("ttc_wkd"), unit), "—", "—",
                              vs, "", "", *(("—",) if moves else ()), end_section=i == len(exp.strategies) - 1)
                continue
            rs = d["reselection"]
            wrong = f"{rs['incorrect']}/{rs['judged']}" if rs["judged"] else ""
            data = (f"{d['data']['seconds_per_task']:.0f}" if "data" in d else "—",) if moves else ()
            table.add_row(str(size) if i == 0 else "", m(name), _mean_std(cell.summary("ttc_wkd"), unit),
                          _mean_std(cell.summary("tx_wkd"), unit), _mean_std(cell.summary("tq_wkd"), unit), vs,
                          f"{d['reassigned']:.0f}" if rs["decisions"] else "", wrong, *data,
                          end_section=i == len(exp.strategies) - 1 and size != exp.sizes[-1])
    out.print(table)
    spread = "mean±sample std over the runs" if exp.repeat > 1 else "one run each (--repeat N for a mean±std)"
    out.print(f"[dim]times in {unit.words}, {spread}; moved = tasks (mean per run) that finished "
              "away from their initial site; P_RESEL wrong = re-selections (all runs) that the oracle RESEL, knowing true "
              "T_x and a_r, would have decided otherwise"
              + ("; data s/task = seconds a done task spent waiting for its inputs and bringing its outputs home "
                 "(mean)" if moves else "") + "[/dim]")
