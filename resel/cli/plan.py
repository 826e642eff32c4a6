"""``resel plan``: a dry run against the real queues — three start estimates per site, T̂x,
predicted TTC, and the pilots and tasks the engine would submit. Nothing is submitted."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from resel.cli import common as c   # its consoles are looked up at each use (tests replace them)
from resel.cli.common import Table   # rich, imported on first use
from resel.cli.rates import model_option, objective_option, risk_option
from resel.errors import ReselError
from resel.cli.common import Finite, fail_cleanly, fail_json, json_option, live_sites_from, print_json
from resel.cli.common import print_table, seed_option, wide_option
from resel.safe_text import markup as m, terminal


#: what the plan table's columns mean, one whole sentence each under the table (in the title, a
#: long legend was wrapped and, in an older version, cut mid-phrase)
PLAN_LEGEND = (
    "start: when the pilot the plan asks for would start, by the estimate named under 'by' "
    "(--wide: all three, * the one used; --json: every pilot size, 'menu').",
    "T̂x: one task's predicted run time there, from LIM or, marked *, from the stored fit of the bag's "
    "application (--wide: the model and its 90 % interval).",
    "P50 / P90: when that site's share of the tasks would be done, median and 90th percentile; "
    "'no spread' where neither the wait nor T̂x has a measured spread, so P90 is P50.",
)
#: the columns --wide adds, explained the same way
WIDE_LEGEND = (
    "history / twin / scheduler: the three start estimates (a QBETS bound from past waits, the queue "
    "simulated forward, the scheduler's own answer); * marks the one used.",
    "bag alone: the predicted TTC of the whole bag on that site alone; share done: the point estimate.",
)


def _load_history(db_path: Path | None):
    """The wait history from the store, or None with the reason (a plan still works without)."""
    try:
        from resel.models.history import load_history
        from resel.store import open_store
        return load_history(open_store(db_path, write=False)), None
    except Exception as exc:   # noqa: BLE001 - no history is a note, not a failure
        return None, str(exc).strip() or type(exc).__name__


@click.command("plan")
@click.argument("bag_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Sites file (TOML) with live sites (kind slurm, pbs or htcondor and an [site.access] table).")
@click.option("--strategy", default="auto", show_default=True,
              help="auto: queue+reselect (every task to the lowest predicted TTC, one more site holds an extra "
                   "pilot, rates learned during the run) where a site's start can be estimated, else "
                   "model+reselect; the plan says which and why. Any other strategy (queue[:E]+reselect, "
                   "model+reselect, …) is planned the same way.")
@click.option("--estimate", "source", type=click.Choice(["auto", "history", "twin", "scheduler"]), default="auto",
              show_default=True, help="Which start estimate ranks the sites; auto = twin, else history bound, else scheduler.")
@click.option("--quantile", type=Finite(0.5, 0.999), default=0.95, show_default=True,
              help="History bound: the fraction of past pilots that started within it.")
@click.option("--confidence", type=Finite(0.5, 0.999), default=0.95, show_default=True,
              help="History bound: the confidence that the quantile is below the bound.")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True,
              help="Site clock LIM predicts T̂x with.")
@seed_option
@model_option
@objective_option
@risk_option
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store with the wait history and the fits (default: $RESEL_DB or ~/.local/share/resel/resel.db).")
@click.option("--explain", is_flag=True,
              help="Say per site why it was chosen, given extra pilots or left out (a limit, unreachable, "
                   "walltime too short, too slow …), with the numbers that decided; --json always has it ('explain').")
@wide_option
@json_option
@fail_cleanly
def plan_cmd(bag_file: Path, sites_file: Path, strategy: str, source: str, quantile: float, confidence: float,
             clock: str, seed: int, model: str, objective: str, risk: float | None, db_path: Path | None,
             explain: bool, wide: bool, as_json: bool) -> None:
    """Ask the sites when a pilot would start, and show the plan; submit nothing.

    \b
    For every site, three estimates of when the bag's pilot would start:
      history    a QBETS bound from past waits of this shape on this site
                 (`resel history import` adds sacct or SWF history; live runs add their pilots)
      twin       the site's queue, read now and simulated forward under its policy
      scheduler  the scheduler's own answer (sbatch --test-only and kin)
    then T̂x (the stored fit of the bag's application where there is one, else LIM; each row
    says which) with its 90 % interval, the predicted TTC of the bag, what the engine would do
    first — which site gets the tasks, which sites hold extra pilots, the pilot sizes — and
    when each share and the whole plan would be done: median (P50) and 90th percentile (P90).
    A site whose queue cannot be read says so in its row; it is ranked last, not guessed.
    Simulated sites (a sites file without live sites) are planned from the simulator.

    \b
    Example:
      resel plan examples/sleep-bag.toml --sites examples/sites-testbed.toml
      resel plan bag.toml --sites sites.toml --estimate twin --json
      resel plan examples/gromacs-bag.toml --sites examples/sites-thesis.toml --objective p90
      resel plan examples/sleep-bag.toml --sites examples/sites-testbed.toml --explain
      resel plan examples/gromacs-bag.toml --sites examples/sites-thesis.toml --wide

    \b
    Live sites are also asked for your limits there (Slurm associations and QOS through
    sacctmgr, PBS queue limits, HTCondor's per-owner limits) and for your jobs already queued:
    pilots are sized and counted within them, a site with no room left is given up, and the
    reasons your pending jobs wait (Priority, QOSMaxJobsPerUserLimit, …) are shown.
    """
    from resel.config import LIVE_KINDS, check_site_commands, load_bag, load_sites
    bag = load_bag(bag_file)
    all_sites = load_sites(sites_file)
    check_site_commands(bag, all_sites)
    simulated = all(s.kind not in LIVE_KINDS for s in all_sites)
    site_list = all_sites if simulated else live_sites_from(sites_file, "resel plan")
    show_plan(bag, site_list, strategy=strategy, source=source, quantile=quantile,
              confidence=confidence, clock=clock, seed=seed, db_path=db_path, as_json=as_json,
              model=model, objective=objective, risk=risk, simulated=simulated, explain=explain, wide=wide)


def plan_simulated(bag, sites_file: Path, *, strategy: str, source: str, clock: str, seed: int, db_path: Path | None,
                   as_json: bool, model: str, objective: str, risk: float | None) -> None:
    """``resel run --dry-run`` on a file of simulated sites: the plan ``resel plan`` shows for it,
    with ``resel plan``'s own defaults for the history bound."""
    from resel.config import check_site_commands, load_sites
    site_list = load_sites(sites_file)
    check_site_commands(bag, site_list)
    params = {p.name: p.default for p in plan_cmd.params}
    show_plan(bag, site_list, strategy=strategy, source=source, quantile=params["quantile"],
              confidence=params["confidence"], clock=clock, seed=seed, db_path=db_path, as_json=as_json,
              model=model, objective=objective, risk=risk, simulated=True)


def show_plan(bag, site_list, *, strategy: str, source: str, quantile: float, confidence: float, clock: str,
              seed: int, db_path: Path | None, as_json: bool, model: str = "auto", objective: str = "p50",
              risk: float | None = None, simulated: bool = False, explain: bool = False, wide: bool = False) -> None:
    """Probe, plan and print (``resel plan`` and ``resel run --dry-run``)."""
    from resel.cli.rates import runtime_for, store_if_exists
    from resel.limits import check_task_count
    from resel.models.conditioned import load_wait_errors
    check_task_count(bag.count, f"{bag.source}: bag.count")
    db = store_if_exists(db_path)
    runtime = runtime_for(bag, site_list, model=model, db=db, clock=clock, simulated=simulated, seed=seed)
    if simulated:
        import contextlib
        import sys
        from resel.sim.plan import simulated_plan
        # the first plan on a replayed trace replays thousands of probe pilots (sites-hetero.toml:
        # 56 s here, then 2 s from ~/.cache/resel): a spinner says so, on a terminal only
        traced = [s.name for s in site_list if s.queue is not None]
        with (c.err.status(f"planning: replaying the queues of {', '.join(traced)} (the first plan on a trace "
                           "takes up to a minute; later ones read ~/.cache/resel)…")
              if traced and sys.stderr.isatty() else contextlib.nullcontext()):
            doc = simulated_plan(bag, site_list, strategy=strategy, source="twin" if source == "auto" else source,
                                 quantile=quantile, confidence=confidence, clock=clock, seed=seed, runtime=runtime,
                                 risk=risk, objective=objective)
        why = None
    else:
        from resel.live.plan import plan
        history, why = _load_history(db_path)
        doc = plan(bag, site_list, strategy=strategy, source=source, quantile=quantile, confidence=confidence,
                   clock=clock, seed=seed, history=history, runtime=runtime, risk=risk, objective=objective,
                   wait_errors=load_wait_errors(db))
    doc["sites_kind"] = "simulated" if simulated else "live"
    if why:
        doc["history_problem"] = why
    if as_json:
        if doc["problem"]:
            fail_json(doc, doc["problem"], "the sites' rows say what each one answered; --explain says why")
        print_json(doc)
        return
    _print_plan(doc, bag, objective=objective, risk=risk, explain=explain, wide=wide)
    if why:
        c.out.print(f"  history: not used ({terminal(why)})", markup=False)
    if doc["problem"]:
        raise ReselError(doc["problem"])


def _print_plan(doc: dict, bag, *, objective: str, risk: float | None, explain: bool, wide: bool) -> None:
    """The plan as a table of numbers in one time unit (named in the headers), its legend, the
    notes per site and, with ``explain``, why each site was chosen or left out."""
    from resel.planning_explain import plan_unit
    rows = doc["sites"]
    unit = plan_unit(rows)
    f = unit.cell
    c.out.print(f"plan for {bag.count} × {m(bag.name)} ({m(doc['strategy'])}, ranked by {m(doc['estimate'])}, "
                f"objective {objective}{'' if risk is None else f', risk {risk:g}'}; "
                f"{doc['sites_kind']} sites); nothing submitted\n{m(doc['model']['summary'])}")
    t = Table()
    columns = _plan_columns(unit.name, wide)
    for col in columns:
        # the role wraps rather than vanish in a terminal narrower than the table
        t.add_column(m(col), justify="left" if col in ("site", "by", "model", "role") else "right",
                     no_wrap=col != "role", overflow="fold")
    notes = []
    for r in rows:
        t.add_row(*_plan_cells(r, f, wide))
        notes += _site_notes(r, explain)
    print_table(t, wide)
    for line in PLAN_LEGEND + (WIDE_LEGEND if wide else ()):
        c.out.print(f"  {line}", markup=False, highlight=False)
    c.out.print(f"  times in {unit.words}.", markup=False, highlight=False)
    _print_plan_summary(doc, unit)
    for n in notes:
        c.out.print(f"  {terminal(n)}", markup=False, highlight=False)
    if explain:
        c.out.print("  why:", markup=False)
        for r in rows:
            ex = r.get("explain") or {}
            c.out.print(f"    {terminal(r['site'])}: {ex.get('verdict', '?')}", markup=False, highlight=False)
            for line in ex.get("why", []):
                c.out.print(f"      {terminal(line)}", markup=False, highlight=False)


def _plan_columns(unit_name: str, wide: bool) -> list[str]:
    """The plan table's headers, times in ``unit_name``; ``wide`` adds every estimate, the model,
    T̂x's interval, the bag alone and the share's finish."""
    u = f" [{unit_name}]"
    columns = ["site", "free/total"]
    if wide:
        columns += ["pilot [cores]", f"walltime{u}", f"history{u}", f"twin{u}", f"scheduler{u}"]
    else:
        columns += [f"start{u}", "by"]
    columns += [f"T̂x{u}"]
    if wide:
        columns += ["model", f"T̂x 90 %{u}", f"bag alone{u}"]
    columns += ["tasks", "pilots"]
    if wide:
        columns += [f"share done{u}"]
    columns += [f"P50{u}", f"P90{u}", "role"]
    return columns


def _plan_cells(r: dict, f: Callable[[float | None], str], wide: bool) -> list[str]:
    """One site's row of the plan table (``f`` writes a time in the table's unit)."""
    cores = "—" if r["total_cores"] is None else f"{'?' if r['free_cores'] is None else r['free_cores']}/{r['total_cores']}"
    # every number of the row is about the pilot the plan asks for there (resel.live.plan)
    used = r["used"]
    cells = [m(r["site"]), cores]
    if wide:
        cells += [str(r["pilot_cores"]), f(r["walltime"])]
        cells += [f(r[f"{name}_s"]) + ("*" if used == name else "") for name in ("history", "twin", "scheduler")]
    else:
        cells += [f(r["wait_s"]) if used else "—", used or "—"]
    cells += [f(r["tx"]) + ("" if wide or r["tx_model"] != "fit" else "*")]
    if wide:
        iv = r["tx_interval"]
        cells += ["fit" if r["tx_model"] == "fit" else "LIM", f"{f(iv[0])}–{f(iv[1])}" if iv else "—", f(r["ttc_s"])]
    cells += [f"{r['tasks']:,}", _pilots(r["pilots"])]
    if wide:
        cells += [f(r["finish_s"]) if r["tasks"] else "—"]
    p50, p90 = r["finish_p50"], r["finish_p90"]
    if not r["tasks"] or p50 is None:
        cells += ["—", "—"]
    else:
        cells += [f(p50), f(p90) if f(p90) != f(p50) else "no spread"]
    cells.append(m(r["role"] or ("unreachable" if r["error"] else "")))
    return cells


def _print_plan_summary(doc: dict, unit: Any) -> None:
    """The lines under the legend: what auto runs as, the predicted TTC, the P50/P90 finish, the
    task table."""
    if doc.get("auto"):
        c.out.print(f"  strategy auto runs as {doc['auto']['ran_as']}: {terminal(doc['auto']['why'])}",
                    markup=False, highlight=False)
    if doc.get("predicted_ttc_s") is not None:
        c.out.print(f"  predicted TTC of this plan: {unit.say(doc['predicted_ttc_s'])} "
                    f"(each origin's chosen pilot size: its start estimate + its waves of T̂x)", markup=False)
    if doc.get("finish_p50_s") is not None:
        p50, p90 = doc["finish_p50_s"], doc["finish_p90_s"]
        spread = (f"{unit.say(p50)} (P50) / {unit.say(p90)} (P90)" if unit.say(p90) != unit.say(p50)
                  else f"{unit.say(p50)} (P50 = P90: no spread known)")
        c.out.print(f"  the plan is done by {spread}: the latest origin's share, wait and run-time spreads drawn "
                    "together (re-selection, which can only shorten it, left out)", markup=False)
    table = doc.get("table")
    if table:
        c.out.print(f"  a table of {table['tasks']:,} unequal tasks: T̂x is of their mean "
                    f"({table['instructions_mean']:.3g} instructions); a task's is that times its instructions "
                    f"over the mean, from {table['instructions_min'] / table['instructions_mean']:.2f}× to "
                    f"{table['instructions_max'] / table['instructions_mean']:.2f}×; they wait "
                    f"{'largest first' if table['order'] == 'largest' else 'in the table' + chr(39) + 's order'}"
                    f"{' (order auto)' if table['order_asked'] == 'auto' else ''}",
                    markup=False, highlight=False)


def _site_notes(r: dict, explain: bool) -> list[str]:
    """The lines under the table about one site: why it is unreachable, estimates it lacks,
    where its T̂x comes from, its limits."""
    notes = []
    if r["error"]:
        notes.append(f"{r['site']}: unreachable — {r['error']}")
    else:
        for name in ("history", "twin", "scheduler"):
            if r[f"{name}_s"] is None and r[f"{name}_note"]:
                notes.append(f"{r['site']}: {name}: {r[name + '_note']}")
        if r["used"] is None:
            notes.append(f"{r['site']}: no start estimate at all — ranked last, not guessed")
        notes.append(f"{r['site']}: T̂x {r['tx_detail']}")
        if r["tasks"] and r["wait_note"]:
            notes.append(f"{r['site']}: wait spread: {r['wait_note']}")
    lim = r.get("limits") or {}
    for line in lim.get("notes", []):
        if not (r["error"] and r["error"] in line):      # the same failure, said once above
            notes.append(f"{r['site']}: limits: {line}")
    if not explain:     # --explain says these in its own lines
        for line in lim.get("changes", []):
            notes.append(f"{r['site']}: within your limits: {line}")
        if lim.get("blocked"):
            notes.append(f"{r['site']}: left out: {lim['blocked']}")
        if lim.get("pending_reasons"):
            notes.append(f"{r['site']}: your pending jobs there wait for: "
                         + ", ".join(f"{k} ×{n}" for k, n in sorted(lim["pending_reasons"].items())))
    return notes


def _pilots(cores: list[int]) -> str:
    """``240`` or ``1,024 × 1`` (a pool's one-task pilots), in submission order of first size
    (the words ``--explain`` uses for the same list: :func:`~resel.planning_explain.pilots_words`)."""
    from resel.planning_explain import pilots_text
    return pilots_text(cores)


def register(cli: click.Group) -> None:
    cli.add_command(plan_cmd)
