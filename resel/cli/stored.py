"""``resel runs``, ``resel report`` and ``resel prune``: what the run store holds, as tables or
JSON, and removing what is no longer wanted.

``runs`` and ``report`` only read the store (``resel runs`` through sqlite3 alone, so it starts
in a fraction of a second); figures and the HTML report come from :mod:`resel.cli.report_plots`
when asked for; ``prune`` chooses and removes runs through :mod:`resel.store_prune`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from resel.cli.common import COUNT, RUN_ID, Table, db_option, fail_cleanly, json_option, out, print_json
from resel.cli.common import INT64_MAX, Whole, print_table, wide_option
from resel.errors import ReselError
from resel.safe_text import markup as m


#: the numbers of a stored run that the tables print
_RUN_NUMBERS = ("experiment_id", "size", "seed", "ttc_wkd", "tx_wkd", "tq_wkd", "done", "failed", "reassigned",
                "restarts", "wasted_core_s")


def _checked_run(row: dict) -> dict:
    """A stored run as the tables print it, its numbers and audit checked: a store is a file
    whoever can write it fills, and a string in ``ttc_wkd`` ended ``resel runs`` in a traceback."""
    from resel.models.stored_records import damaged, is_number, shown
    where = f"runs row {shown(row.get('id'))}"
    for key in _RUN_NUMBERS:
        if row.get(key) is not None and not is_number(row[key]):
            raise damaged(where, f"{key} {shown(row[key])} is not a number")
    if not isinstance(row.get("audit") or {}, dict):
        raise damaged(where, f"audit {shown(row.get('audit'))} is not a table")
    return row


def quarantine_log(store, run_id: int) -> list[dict]:
    """Each quarantine of a stored run (docs/engine.md, black-hole sites): site, when, until,
    the counts that decided it, and when it was released (None: not before the run ended)."""
    from resel.events import SiteQuarantined, SiteReleased
    from resel import journal
    out: list[dict] = []
    for t, r in journal.read(store, run_id, SiteQuarantined, SiteReleased):
        if isinstance(r, SiteQuarantined):
            out.append({"site": r.site, "time": t, "until": r.until, "reason": r.reason, "released": None})
        else:
            for q in reversed(out):
                if q["site"] == r.site and q["released"] is None:
                    q["released"] = t
                    break
    return out


kind_option = click.option("--kind", type=click.Choice(["simulated", "live"]), default=None,
                           help="Only simulated runs (resel simulate) or live ones (resel run).")
experiment_option = click.option("--experiment", type=RUN_ID, default=None, metavar="N",
                                 help="Only the runs of experiment N (one `resel simulate`; its number is in "
                                      "the `exp` column).")


def _parsed(parse_name: str) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """An option callback that parses its text with ``resel.store_prune.<parse_name>`` (imported
    when the option is given), a ReselError becoming click's bad-parameter error."""
    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        from resel import store_prune
        try:
            return getattr(store_prune, parse_name)(value)
        except ReselError as exc:
            raise click.BadParameter(f"{exc} — {exc.hint}") from None
    return callback


#: an age (30d, 12h, 90min, 2w) or a date, as the store's ``created``; run ids (3, 3,7, 3-9)
_when, _ids = _parsed("moment"), _parsed("run_ids")


def overdue_log(store, run_id: int) -> list[dict]:
    """Each attempt the overdue rule cancelled, and each task it gave up as hung (docs/engine.md,
    "Overdue attempts"): task, attempt, site, when, how long it had run and the limit."""
    from resel.events import TaskOverdue
    from resel import journal
    return [{"task": r.task, "attempt": r.attempt, "site": r.site, "time": t, "ran": r.ran, "limit": r.limit,
             "gave_up": r.gave_up} for t, r in journal.read(store, run_id, TaskOverdue)]


def _print_overdue(overdue: list[dict]) -> None:
    from resel.units import span
    for o in overdue[:FAILED_SHOWN]:
        if o["gave_up"]:
            line = (f"task {o['task']} given up as hung: its attempt {o['attempt']} on {o['site']} ran "
                    f"{span(o['ran'])} (limit {span(o['limit'])}) until it was lost")
        else:
            line = (f"overdue: task {o['task']} attempt {o['attempt']} on {o['site']} cancelled after "
                    f"{span(o['ran'])} (its site's limit {span(o['limit'])}), run again")
        out.print(m(line), highlight=False, soft_wrap=True)
    if len(overdue) > FAILED_SHOWN:
        out.print(f"… {len(overdue) - FAILED_SHOWN:,} more overdue records in --json", highlight=False)


#: failed tasks ``resel report`` lists one by one (``--json`` has them all)
FAILED_SHOWN = 10


def _print_failed(failed: list[dict], live: bool) -> None:
    """The failed tasks, a line each: where each attempt ended and why, and the last line its
    last attempt wrote on stderr."""
    if not failed:
        return
    out.print(f"failed tasks ({len(failed):,}" + (f"; the first {FAILED_SHOWN} here, all in --json" if
                                                  len(failed) > FAILED_SHOWN else "") + "):", highlight=False)
    for f in failed[:FAILED_SHOWN]:
        counts: dict[tuple, int] = {}
        for a in f["attempts"]:
            key = (a["site"], a["reason"] or a["outcome"])
            counts[key] = counts.get(key, 0) + 1
        where = ", ".join(f"{site} {why}" + (f" ×{n}" if n > 1 else "") for (site, why), n in counts.items())
        named = f" {f['task_name']!r}" if f["task_name"] is not None else ""
        line = f"  task {f['task']}{named}: {where or ('no attempt recorded' if live else 'a simulated run keeps no attempts')}"
        if f["stderr_last_line"]:
            line += f"; stderr: {f['stderr_last_line']}"
        if f.get("folder"):
            line += f"; its files: {f['folder']}"
        out.print(m(line), highlight=False, soft_wrap=True)


def learned_log(store, run_id: int) -> tuple[dict | None, dict[str, list[dict]]]:
    """What ``auto`` ran as (StrategyChosen) and, per site, every estimate of its rate a learning
    run recorded (RateLearned, oldest first): the report's "rates learned during the run"."""
    from resel.events import RateLearned, StrategyChosen
    from resel import journal
    chosen, rates = None, {}
    for t, r in journal.read(store, run_id, StrategyChosen, RateLearned):
        if isinstance(r, StrategyChosen):
            chosen = {"ran_as": r.strategy, "why": r.reason}
        else:
            fields = {f: getattr(r, f) for f in journal.fields_of(RateLearned)}
            rates.setdefault(str(r.site), []).append({"time": t, **fields})
    return chosen, rates


def _print_learned(chosen: dict | None, rates: dict[str, list[dict]]) -> None:
    from resel.units import pick
    if chosen:
        out.print(f"strategy auto ran as {m(chosen['ran_as'])}: {m(chosen['why'])}")
    if not rates:
        return
    unit = pick(v for recs in rates.values() for r in recs for v in (r["tx"], r["prior"]))
    t = Table(title="rates learned during the run (T̂x per task; the sites file's or the fit's first)",
              title_justify="left")
    for col in ("site", unit.header("T̂x at start"), "after its first task", "after 5", "at the end",
                "90 % interval", "tasks (last record)"):
        t.add_column(m(col), justify="right" if col != "site" else "left")

    def at(recs: list[dict], n: int) -> str:
        hit = next((r for r in recs if r["tasks"] >= n), None)
        return "—" if hit is None else f"{unit.fmt(hit['tx'])} ({hit['tasks']}; at {hit['time']:,.1f} s)"

    for site, recs in sorted(rates.items()):
        last = recs[-1]
        t.add_row(m(site), unit.fmt(last["prior"]), at(recs, 1), at(recs, 5), unit.fmt(last["tx"]),
                  f"{unit.fmt(last['low'])}–{unit.fmt(last['high'])}", str(last["tasks"]))
    out.print(t)


@click.command()
@db_option
@kind_option
@experiment_option
@click.option("--since", callback=_when, default=None, metavar="WHEN",
              help="Only runs stored since WHEN: an age (30d, 12h, 90min, 2w) or a date (2026-11-01, UTC).")
@click.option("--limit", default=50, show_default=True, type=COUNT, help="How many runs, newest first.")
@wide_option
@json_option
@fail_cleanly
def runs(db: Path | None, kind: str | None, experiment: int | None, since: str | None, limit: int, wide: bool,
         as_json: bool) -> None:
    """List stored runs, newest first.

    Each `resel simulate` stores one experiment of many runs (strategies × sizes × repetitions);
    `resel run` stores one live run. `resel report RUN` shows one; `resel prune` removes old ones.

    \b
    Example:
      resel runs --limit 10
      resel runs --kind live
      resel runs --experiment 3 --json
      resel runs --since 2d
    """
    from resel.store import read_store
    from resel.store_prune import list_runs
    store = read_store(db)
    rows = [_checked_run(r) for r in list_runs(store, limit, kind=kind, experiment=experiment, since=since)]
    if as_json:
        print_json(rows)
        return
    if not rows:
        filtered = kind or experiment or since
        out.print("no stored run matches these filters — `resel runs` lists them all" if filtered
                  else "no runs stored yet — try `resel simulate`")
        return
    from resel.units import pick
    unit = pick(r["ttc_wkd"] for r in rows)
    table = Table()
    cols = ["run", "exp", "created", "kind", "bag", "strategy", "size"] + (["seed"] if wide else [])
    cols += [unit.header("TTC_wkd")] + ([unit.header("T_x,wkd"), unit.header("T_q,wkd")] if wide else [])
    cols += ["done", "failed", "moved"]
    for col in cols:     # bag and strategy names give way first when the table is too wide
        table.add_column(m(col), no_wrap=col not in ("bag", "strategy"), overflow="fold",
                         justify="left" if col in ("created", "kind", "bag", "strategy") else "right")
    from resel.live.notes import coordinator_of
    for r in rows:
        created = r["created"] if wide else (r["created"] or "")[5:16].replace("T", " ")    # the year: --wide
        live = r["mode"] == "live"
        kind_text = ("live" if r["status"] == "done" else (r["status"] or "live")) if live else "sim"
        if live and r["status"] == "running" and coordinator_of(store, r["id"]) is None:
            kind_text = "stopped"   # marked running, but no resel carries it on (Ctrl-C, a crash)
        cells = [str(r["id"]), str(r["experiment_id"] or ""), m(created), m(kind_text), m(r["bag"]),
                 m(r["strategy"]), m(r["size"])] + ([m(r["seed"])] if wide else []) + [unit.cell(r["ttc_wkd"])]
        if wide:
            cells += [unit.cell(r["tx_wkd"]), unit.cell(r["tq_wkd"])]
        cells += [str(r["done"] if r["done"] is not None else "—"), str(r["failed"] if r["failed"] is not None else "—"),
                  str(r["reassigned"] if r["reassigned"] is not None else "—")]
        table.add_row(*cells)
    print_table(table, wide)
    more = f"the newest {limit} (--limit N for more); " if len(rows) == limit else ""
    out.print(f"[dim]{more}created: UTC; kind: sim, live, or a live run's state (stopped: no resel carries it "
              "on — `resel run --resume RUN`); --kind, --experiment, --since filter; --wide: seed, T_x, T_q; "
              "`resel report RUN` shows one[/dim]")


@click.command()
@db_option
@click.option("--older-than", "before", callback=_when, default=None, metavar="AGE",
              help="Runs stored before AGE ago (30d, 12h, 90min, 2w) or before a date (2026-11-01, UTC).")
@kind_option
@experiment_option
@click.option("--run", "ids", callback=_ids, default=None, metavar="IDS",
              help="These runs: an id, ids separated by commas, or ranges (3, 3,7 or 3-9).")
@click.option("--dry-run", is_flag=True, help="Show what would be removed, and remove nothing.")
@json_option
@fail_cleanly
def prune(db: Path | None, before: str | None, kind: str | None, experiment: int | None, ids: list[int] | None,
          dry_run: bool, as_json: bool) -> None:
    """Remove stored runs, with every row of them, and compact the store.

    Runs are chosen by age, kind, experiment or id (several options: runs matching all of
    them). A live run that is still running or being cancelled is never removed — `resel
    cancel RUN` it first. An experiment left without runs goes too. A removed live run's
    pilots leave the wait history (`resel history`) and its tasks the evidence of `resel model
    fit`; the fits already made stay.

    \b
    Example:
      resel prune --older-than 30d --dry-run
      resel prune --kind simulated --older-than 7d
      resel prune --experiment 3
      resel prune --run 12-40
    """
    if before is None and kind is None and experiment is None and ids is None:
        raise click.UsageError("say which runs to remove: --older-than AGE, --kind, --experiment N or --run IDS "
                               "(--older-than 0d: every run; add --dry-run to see them first)")
    from resel.store import default_path, open_store
    from resel.store_prune import choose, remove
    path = Path(db) if db else default_path()
    if not path.is_file():
        raise ReselError(f"no run store at {path}", hint="`resel simulate` or `resel run` makes one; --db names another")
    store = open_store(path, write=not dry_run)
    pruning = choose(store, kind=kind, experiment=experiment, before=before, ids=ids)
    if not dry_run and pruning.runs:
        remove(store, pruning, path)
    if as_json:
        print_json({"dry_run": dry_run, "db": str(path), **pruning.as_dict()})
        return
    _print_pruning(pruning, dry_run, path)


def _print_pruning(pruning, dry_run: bool, path: Path) -> None:
    """What prune removed or would remove: per experiment (runs, dates), each live run, the
    live runs kept and why, the rows and the bytes."""
    verb = "would remove" if dry_run else "removed"
    if not pruning.runs:
        out.print("no stored run matches these options; nothing " + ("would be" if dry_run else "was") + " removed")
    groups: dict = {}
    for r in pruning.runs:
        groups.setdefault((r["mode"], r["experiment_id"]), []).append(r)
    for (mode, exp), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        first, last = (rs[0]["created"] or "")[:16].replace("T", " "), (rs[-1]["created"] or "")[:16].replace("T", " ")
        span = first if first == last else f"{first} to {last}"
        what = (f"experiment {exp}: {len(rs)} simulated run(s)" if exp is not None
                else f"{len(rs)} {mode} run(s) " + _id_list([r["id"] for r in rs]))
        gone = " (the whole experiment)" if exp in pruning.experiments else ""
        out.print(f"{verb} {m(what)}{gone}, stored {m(span)} UTC", highlight=False)
    for k in pruning.kept:
        out.print(f"kept {m(k['why'])}", highlight=False)
    if pruning.runs:
        rows = ", ".join(f"{n:,} {t}" for t, n in pruning.rows.items() if n)
        out.print(f"rows {'to remove' if dry_run else 'removed'}: {m(rows)}", highlight=False)
    if not dry_run and pruning.bytes_before is not None:
        out.print(f"{m(path)}: {pruning.bytes_before / 2**20:,.1f} MiB -> {pruning.bytes_after / 2**20:,.1f} MiB",
                  highlight=False)
        if pruning.compacted:
            out.print(m(pruning.compacted), highlight=False)


def _id_list(ids: list[int]) -> str:
    """``3-9, 12``: ids as ranges."""
    parts, start = [], None
    for i, x in enumerate(ids):
        if start is None:
            start = x
        if i + 1 == len(ids) or ids[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(parts)


@click.command()
@click.argument("run_id", type=RUN_ID)
@db_option
@click.option("--decisions", "n_decisions", default=0, show_default=True, type=Whole(0, INT64_MAX),
              help="Also list the first N re-selection decisions with their inputs.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the run's figures (PNG and SVG) into DIR: Gantt, CDFs, predictions vs measured.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write one self-contained HTML report (figures, tables, configuration) to FILE.")
@json_option
@fail_cleanly
def report(run_id: int, db: Path | None, n_decisions: int, plot_dir: Path | None, html_file: Path | None,
           as_json: bool) -> None:
    """Show one stored run: workload times, where tasks ran, re-selection audit.

    \b
    Example:
      resel report 12 --decisions 20
      resel report 12 --plot figures/ --html run12.html
    """
    from resel.store import default_path, get_run, open_store
    protect = [("the run store", db or default_path())]
    if html_file is not None or plot_dir is not None:   # before anything is read or drawn
        from resel.cli.report_plots import ready_to_draw
        ready_to_draw(plot_dir, html_file, protect)
    store = open_store(db, write=False)
    run = _checked_run(get_run(store, run_id))
    per_site = list(store.query(
        "select site, origin, count(*) as tasks, avg(tq) as tq, avg(tx) as tx, max(ttc) as ttc "
        "from tasks where run_id = ? group by site, origin order by site, origin", [run_id]))
    kinds = {r["kind"]: r["n"] for r in store.query(
        "select kind, count(*) as n from decisions where run_id = ? group by kind", [run_id])}
    picked = list(store.query(
        "select * from decisions where run_id = ? and kind != 'assign' order by seq limit ?", [run_id, n_decisions]))
    quarantines = quarantine_log(store, run_id)
    chosen, learned = learned_log(store, run_id)
    from resel.cli.results import failed_log
    failed = failed_log(store, run_id, run.get("bag_spec"))
    overdue = overdue_log(store, run_id)
    if as_json:
        for key in ("sites", "bag_spec"):
            run.pop(key, None)
        from resel.cli.report_plots import emit
        print_json({"run": run, "per_site": per_site, "decisions": kinds, "decision_log": picked,
                     "quarantines": quarantines, "auto": chosen, "learned": learned, "failed": failed,
                     "overdue": overdue,
                     **emit(store, run_id, plot_dir, html_file, as_json=True, protect=protect)})
        return
    _print_run_header(store, run, run_id)
    _print_where_tasks_ran(per_site, quarantines)
    _print_failed(failed, run.get("mode") == "live")
    _print_overdue(overdue)
    _print_learned(chosen, learned)
    _print_decisions(run["audit"] or {}, kinds, picked, n_decisions)
    if plot_dir is not None or html_file is not None:
        from resel.cli.report_plots import emit
        emit(store, run_id, plot_dir, html_file, as_json=False, protect=protect)


def _print_run_header(store: Any, run: dict, run_id: int) -> None:
    """The run's first lines: what ran, and its workload times (or why there are none yet)."""
    from resel.units import pick, span
    out.print(f"[bold]run {run['id']}[/bold]  bag {m(run['bag'])}  strategy {m(run['strategy'])}  size {m(run['size'])}  "
              f"seed {m(run['seed'])}  LIM clock {m(run['clock'])}"
              + (f"  (experiment {run['experiment_id']})" if run.get("experiment_id") else ""))
    if run["ttc_wkd"] is None:   # a live run still going (or stopped): its numbers come at the end
        out.print(f"run {run_id} is {m(run.get('status') or 'not finished')}: no workload times yet "
                  f"(`resel status {run_id}` shows where it stands)")
    else:
        # the unit of the whole experiment, so two reports of one experiment read alike
        exp_runs = (list(store.query("select ttc_wkd from runs where experiment_id = ?", [run["experiment_id"]]))
                    if run.get("experiment_id") else [])
        unit = pick([run["ttc_wkd"]] + [r["ttc_wkd"] for r in exp_runs])
        out.print(f"TTC_wkd {unit.cell(run['ttc_wkd'])} {unit.name} = T_q,wkd {unit.cell(run['tq_wkd'])} {unit.name} + "
                  f"T_x,wkd {unit.cell(run['tx_wkd'])} {unit.name}   done {run['done']}  failed {run['failed']}  "
                  f"moved {run['reassigned']}  restarts {run['restarts']}  core time wasted "
                  f"{span(run['wasted_core_s'] or 0)}", highlight=False)


def _print_where_tasks_ran(per_site: list[dict], quarantines: list[dict]) -> None:
    """Where the tasks ran, per site and the site they were first assigned to; the black holes."""
    from resel.units import pick, span
    unit = pick(v for r in per_site for v in (r["tq"], r["tx"], r["ttc"]))
    table = Table(title="where tasks ran")
    for col in ("ran on", "assigned to", "tasks", m(unit.header("mean T_q")), m(unit.header("mean T_x")),
                m(unit.header("last end"))):
        table.add_column(col, justify="left" if col in ("ran on", "assigned to") else "right")
    for r in per_site:
        table.add_row(m(r["site"] or "(failed)"), m(r["origin"]), str(r["tasks"]), unit.cell(r["tq"]),
                      unit.cell(r["tx"]), unit.cell(r["ttc"]))
    out.print(table)
    for q in quarantines:
        until = f"until {span(q['until'])}" if q["until"] is not None else "not released"
        released = f", released at {span(q['released'])}" if q["released"] is not None else ""
        out.print(f"quarantined {m(q['site'])} at {span(q['time'])} ({until}{released}): black hole — {m(q['reason'])}")


def _print_decisions(audit: dict, kinds: dict[str, int], picked: list[dict], n_decisions: int) -> None:
    """The decisions by kind, the re-selection audit, and the first ``n_decisions`` with their inputs."""
    from resel.units import pick, span
    out.print("decisions: " + m(", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none"))
    if audit.get("decisions"):
        cases = ", ".join(f"case {c}: {n}" for c, n in sorted((audit["by_case"] or {}).items()))
        out.print(f"re-selection audit: {audit['judged']} judged, {audit['incorrect']} where P_RESEL ≠ RESEL"
                  f"{f' ({m(cases)})' if cases else ''}, penalty total {span(audit['penalty_total'])}, "
                  f"max {span(audit['penalty_max'])}, bound violations {audit['bound_violations']}", highlight=False)
    if picked:
        times = ("time", "a_r", "a_r2", "tx_r", "tx_r2", "window")
        unit = pick(d[k] for d in picked for k in times if isinstance(d[k], (int, float)))
        t = Table(title="re-selection decisions")
        for col in (unit.header("time"), "kind", "task", "r", "r'", unit.header("a_r"), unit.header("a_r'"),
                    unit.header("T̂x(r)"), unit.header("T̂x(r')"), unit.header("Ŵ")):
            t.add_column(m(col), justify="left" if col in ("kind", "r", "r'") else "right")
        for d in picked:
            t.add_row(*(m(unit.cell(d[k]) if k in times and isinstance(d[k], (int, float)) else _s(d[k]))
                        for k in ("time", "kind", "task", "origin", "target", "a_r", "a_r2", "tx_r", "tx_r2",
                                  "window")))
        out.print(t)
    elif n_decisions == 0 and sum(n for k, n in kinds.items() if k != "assign"):
        out.print("[dim]--decisions N lists the first N with their inputs; --html FILE groups them by site pair[/dim]")


def _s(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}" if isinstance(value, float) else str(value)
