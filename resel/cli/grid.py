"""``resel grid`` and ``resel scenario``: several simulated clusters behind one meta-scheduler."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import click

from resel.cli.common import Table   # rich, imported on first use
from resel.cli.common import COUNT, Finite
from resel.safe_text import markup as m
from resel.safe_text import terminal
from resel.sim.grid import ALGORITHMS, DISPATCHERS, HEURISTICS, Cluster, Grid, Reallocation, compare
from resel.sim.policies import POLICIES


def _cluster(ctx, param, values: tuple[str, ...]) -> list[Cluster]:
    clusters = []
    for value in values:
        parts = value.split(":")
        try:
            name, cores = parts[0], int(parts[1]) if len(parts[1]) < 12 else 0
            speed = float(parts[2]) if len(parts) > 2 and parts[2] else 1.0
            policy = parts[3] if len(parts) > 3 else "conservative"
        except (IndexError, ValueError):
            parts = []
        if not parts or len(parts) > 4 or not name.strip():     # ':8' had no name, 'a:8:1:easy:x' a fifth field
            raise click.BadParameter(f"{value!r}: write NAME:CORES[:SPEED[:POLICY]], e.g. zegox:576:1.2:easy") from None
        if policy not in POLICIES or not 1 <= cores <= 10**9 or not (1e-6 <= speed <= 1e6):
            raise click.BadParameter(f"{value!r}: cores from 1 to 10^9, speed from 1e-6 to 1e6, "
                                     f"policy one of {', '.join(POLICIES)}")
        clusters.append(Cluster(name, cores, speed, policy))
    if not clusters:
        raise click.BadParameter("give at least one --cluster")
    return clusters


def _period(ctx, param, value: float) -> float:
    """0 (no periodic rounds) or at least a second: a tiny period never lets time advance."""
    if 0 < value < 1:
        raise click.BadParameter(f"{value!r}: give 0 (no periodic rounds) or at least 1 second")
    return value


@click.command("grid")
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cluster", "clusters", multiple=True, callback=_cluster,
              help="NAME:CORES[:SPEED[:POLICY]]; repeat for each cluster (policy default: conservative).")
@click.option("--dispatch", type=click.Choice(DISPATCHERS), default="mct", show_default=True, metavar="RULE",
              help=f"How the meta-scheduler picks a cluster for each arriving job: {', '.join(DISPATCHERS)}.")
@click.option("--realloc", type=click.Choice(("none",) + ALGORITHMS), default="none", show_default=True,
              help="Move waiting jobs between clusters: regular (if it gains > margin) or all-cancel.")
@click.option("--heuristic", type=click.Choice(HEURISTICS), default="mct", show_default=True,
              help="Order in which waiting jobs are considered for reallocation.")
@click.option("--period", type=Finite(min=0, max=1e9), default=3600.0, show_default=True, callback=_period,
              help="Seconds between reallocation rounds, >= 1 (0: only the --early-end trigger).")
@click.option("--early-end", is_flag=True, help="Also reallocate whenever a job ends before its estimate.")
@click.option("--recompute", is_flag=True,
              help="Offline heuristics as in seed 004: recompute every job's ECTs after each pick (slower).")
@click.option("--margin", type=Finite(min=0, max=1e9), default=60.0, show_default=True,
              help="Move only when new ECT + margin < old ECT (seconds).")
@click.option("--exact", is_flag=True, help="Give the schedulers exact walltimes instead of the requests.")
@click.option("--load", type=Finite(min=1e-6, max=1e6), default=1.0, show_default=True,
              help="Divide submit times by this (2 = arrivals twice as dense).")
@click.option("--first", "first_n", type=COUNT, default=None, help="Only the first N jobs.")
@click.option("--dry-run", is_flag=True, help="List the moves reallocation would make, without making them "
              "(for all-cancel: the moves the regular algorithm would make).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def grid_cmd(traces: tuple[Path, ...], clusters: list[Cluster], dispatch: str, realloc: str, heuristic: str,
             period: float, early_end: bool, recompute: bool, margin: float, exact: bool, load: float, first_n: int | None,
             dry_run: bool, as_json: bool) -> None:
    """Dispatch the jobs of TRACES over several clusters; optionally reallocate waiting jobs.

    The traces are rebased to start together and fused by submit time; each job goes to the
    cluster chosen by --dispatch and joins its queue. With --realloc, a run without
    reallocation is made too and the two are compared job by job (seed 004's metrics).

    \b
    Example:
      resel grid ../shared/data/swf/wagap-2013.swf ../shared/data/swf/hpc2n.swf \\
          --cluster zewura:1600:1.0 --cluster zegox:576:1.2 --cluster seth:240:1.4 \\
          --realloc regular --heuristic minmin --load 1.5
      resel grid ../shared/data/swf/hpc2n.swf --cluster a:120 --cluster b:120:1.4 --realloc regular \\
          --dry-run --first 2000
    """
    from resel.cli.common import err, out
    from resel.errors import ReselError
    from resel.cli.common import fail_cleanly as _fail_cleanly, print_json as _print_json

    @_fail_cleanly
    def run() -> None:
        reallocation = None if realloc == "none" else Reallocation(realloc, heuristic, period, early_end, margin, recompute)

        def jobs():
            from resel.sim.scenarios import fused_jobs
            return fused_jobs({str(t): t for t in traces}, load, first_n)

        with err.status("simulating…"):
            base = Grid(clusters, dispatch, None, exact_walltimes=exact).run(jobs())
            if not base.summary()["jobs"]:     # an empty trace is no grid (it printed nan and exited 0)
                raise ReselError(f"{', '.join(str(t) for t in traces)}: no job to dispatch (the trace has none, or "
                                 "none a cluster can run)", hint="give an SWF trace with jobs; `resel replay TRACE` "
                                 "shows what one holds")
            result = None
            if reallocation is not None:
                result = Grid(clusters, dispatch, reallocation, exact_walltimes=exact, dry_run=dry_run).run(jobs())
        doc = {"traces": [str(t) for t in traces], "clusters": [vars(c) for c in clusters], "load": load,
               "without_reallocation": base.summary()}
        if result is not None:
            doc["with_reallocation"] = result.summary()
            if not dry_run:
                doc["comparison"] = compare(base, result)
            moves = result.planned if dry_run else result.moves
            doc["moves"] = [vars(m) for m in moves]
        if as_json:
            _print_json(doc)
            return
        _print_grid(doc, dry_run, out)

    run()


def _print_grid(doc: dict, dry_run: bool, console) -> None:
    base = doc["without_reallocation"]
    console.print(f"{base['jobs']:,} jobs over " + ", ".join(f"{m(c['name'])} ({c['cores']} cores, ×{c['speed']:g}, "
                                                                 f"{c['policy']})" for c in doc["clusters"])
                  + f"; dispatch {base['dispatcher']}; load ×{doc['load']:g}")
    from resel.units import pick
    table = Table()
    rows = [("without reallocation", base)]
    if "with_reallocation" in doc and not dry_run:
        rows.append(("with reallocation", doc["with_reallocation"]))
    unit = pick(v for _, s in rows for v in (s["wait"]["mean"], s["response"]["mean"]))
    for col in ("run", "jobs per cluster", unit.header("mean wait"), unit.header("mean response"), "mean bsld τ=60",
                "moves"):
        table.add_column(m(col), justify="right" if col != "run" else "left")
    for label, s in rows:
        table.add_row(label, m(" / ".join(f"{v:,}" for v in s["per_cluster"].values())), unit.cell(s["wait"]["mean"]),
                      unit.cell(s["response"]["mean"]), f"{s['bsld_60']['mean']:.2f}", f"{s['moves']:,}")
    console.print(table)
    if "comparison" in doc:
        c = doc["comparison"]
        console.print(f"jobs impacted {c['impacted_pct']:.1f} %, reallocations per job {c['reallocations_per_job']:.3f}, "
                      f"finishing earlier {c['earlier_pct']:.1f} % / later {c['later_pct']:.1f} %, "
                      f"relative mean response time {c['relative_mean_response']:.3f}, "
                      f"relative mean wait {c['relative_mean_wait']:.3f}")
    if dry_run and doc.get("moves") is not None:
        moves = doc["moves"]
        t = Table(title=f"{len(moves)} move(s) reallocation would make (not made)", title_justify="left")
        for col in ("time [s]", "job", "from", "to", "old ECT [s]", "new ECT [s]", "gain [s]"):
            t.add_column(m(col), justify="right")
        for mv in moves[:50]:
            t.add_row(f"{mv['time']:,.0f}", str(mv["job"]), m(mv["source"]), m(mv["target"]), f"{mv['old_ect']:,.0f}",
                      f"{mv['new_ect']:,.0f}", f"{mv['old_ect'] - mv['new_ect']:,.0f}")
        console.print(t)
        if len(moves) > 50:
            console.print(f"[dim]… {len(moves) - 50} more (use --json for all)[/dim]")


@click.group("scenario")
def scenario_group() -> None:
    """Named experiments built from the real traces in ../shared/data."""


@scenario_group.command("seed004")
@click.option("--load", type=Finite(min=1e-6, max=1e6), default=1.0, show_default=True,
              help="Divide submit times by this (denser arrivals, longer queues).")
@click.option("--period", type=Finite(min=1, max=1e9), default=3600.0, show_default=True,
              help="Seconds between reallocation rounds.")
@click.option("--first", "first_n", type=COUNT, default=None, help="Only the first N jobs.")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True, help="Runs in parallel.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def seed004_cmd(load: float, period: float, first_n: int | None, workers: int, as_json: bool) -> None:
    """Reallocation of waiting jobs across three heterogeneous clusters (seed 004) and ISIS dispatch.

    zewura (1,600 cores, speed 1.0) and zegox (576, 1.2) from wagap-2013.swf, Seth (240, 1.4)
    from hpc2n.swf; MCT meta-scheduling and conservative backfilling everywhere. Every variant
    is compared with the same run without reallocation. docs/reallocation.md explains the
    mapping and sets the results beside the published ones.

    \b
    Example:
      resel scenario seed004 --load 1.5
    """
    from resel.cli.common import err, out
    from resel.cli.common import fail_cleanly as _fail_cleanly, print_json as _print_json
    from resel.sim.scenarios import run_seed004

    @_fail_cleanly
    def run() -> None:
        if err.is_terminal and not as_json:
            with _variant_progress(err) as on_done:
                doc = run_seed004(load=load, period=period, limit=first_n, workers=workers, on_done=on_done)
        else:       # piped or --json: nothing on stderr but errors
            doc = run_seed004(load=load, period=period, limit=first_n, workers=workers)
        if as_json:
            _print_json(doc)
            return
        _print_seed004(doc, load, period, out)

    run()


@contextmanager
def _variant_progress(console) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on ``console`` (stderr) advanced by each finished run of a scenario."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("seed 004 runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as progress:
        task = progress.add_task("(about a minute per run on one core)", total=None)

        def on_done(label: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total, description=f"last done: {terminal(label)}")
        yield on_done


#: what the seed 004 table's columns mean, printed under it
SEED004_LEGEND = (
    "variant: baseline = no reallocation; regular/H = move a waiting job when another cluster's estimated "
    "completion time (ECT) is better by the margin, jobs taken in heuristic H's order; all-cancel/H = cancel "
    "every waiting job and resubmit each, in H's order, to the cluster with the least ECT; exact/… = the "
    "schedulers get the real run times instead of the requests; fcfs/… = FCFS queues instead of conservative "
    "backfilling; isis/D = no reallocation, dispatcher D instead of MCT",
    "moves = reallocations made; mean resp. = mean response time (wait + run) and mean bsld τ=60 = mean "
    "bounded slowdown (run times under 60 s counted as 60 s), over every job",
    "rel. resp. / rel. wait = this variant's mean response / wait over its paired baseline's (baseline, "
    "exact/baseline or fcfs/baseline; below 1 is better); impacted % = jobs whose completion time changed, "
    "earlier % / later % = those that finished earlier / later than in the baseline",
)


def _print_seed004(doc: dict, load: float, period: float, console) -> None:
    """The scenario's table, every variant name whole, and the legend of its columns."""
    table = Table(title=f"seed 004 scenario, load ×{load:g}, period {period:g} s", title_justify="left")
    rows = []
    for r in doc["rows"]:
        has = "relative_mean_response" in r
        rows.append([r["variant"], f"{r['moves']:,}", f"{r['mean_response']:,.0f}", f"{r['mean_bsld_60']:.2f}",
                     f"{r['relative_mean_response']:.3f}" if has else "",
                     f"{r['relative_mean_wait']:.3f}" if has else "",
                     f"{r['reallocations_per_job']:.3f}" if has else "", f"{r['impacted_pct']:.1f}" if has else "",
                     f"{r['earlier_pct']:.1f}" if has else "", f"{r['later_pct']:.1f}" if has else ""])
    headers = ("variant", "moves", "mean resp. [s]", "mean bsld τ=60", "rel. resp.", "rel. wait", "moves per job",
               "impacted %", "earlier %", "later %")
    for i, col in enumerate(headers):
        # every cell whole (a narrow terminal wraps the headers, never a variant name or a number)
        widest = max((len(row[i]) for row in rows), default=1)
        table.add_column(m(col), justify="left" if i == 0 else "right", min_width=widest)
    for row in rows:
        table.add_row(*(m(cell) for cell in row))
    console.print(table)
    for line in SEED004_LEGEND:
        console.print(f"[dim]{m(line)}[/dim]")
