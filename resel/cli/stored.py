"""``resel runs`` and ``resel report``: what the run store holds, as tables or JSON.

Both only read the store (``resel runs`` through sqlite3 alone, so it starts in a fraction of
a second); figures and the HTML report come from :mod:`resel.cli.report_plots` when asked for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from resel.cli.common import INT64_MAX, RUN_ID, Table, db_option, fail_cleanly, json_option, out, print_json
from resel.safe_text import markup as m


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


def learned_log(store, run_id: int) -> tuple[dict | None, dict[str, list[dict]]]:
    """What ``auto`` ran as (StrategyChosen) and, per site, every estimate of its rate a learning
    run recorded (RateLearned, oldest first): the report's "rates learned during the run"."""
    chosen, rates = None, {}
    for row in store.query("select time, kind, data from events where run_id = ? and kind in "
                           "('StrategyChosen', 'RateLearned') order by seq", [run_id]):
        data = json.loads(row["data"])
        if row["kind"] == "StrategyChosen":
            chosen = {"ran_as": data.get("strategy"), "why": data.get("reason")}
        else:
            rates.setdefault(str(data.get("site")), []).append({"time": row["time"], **data})
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
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, INT64_MAX), help="How many runs, newest first.")
@json_option
@fail_cleanly
def runs(db: Path | None, limit: int, as_json: bool) -> None:
    """List stored runs, newest first.

    \b
    Example:
      resel runs --limit 10
    """
    from resel.store import list_runs, read_store
    rows = list_runs(read_store(db), limit)
    if as_json:
        print_json(rows)
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


@click.command()
@click.argument("run_id", type=RUN_ID)
@db_option
@click.option("--decisions", "n_decisions", default=0, show_default=True, type=click.IntRange(0, INT64_MAX),
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
    chosen, learned = learned_log(store, run_id)
    if as_json:
        for key in ("sites", "bag_spec"):
            run.pop(key, None)
        from resel.cli.report_plots import emit
        print_json({"run": run, "per_site": per_site, "decisions": kinds, "decision_log": picked,
                     "quarantines": quarantines, "auto": chosen, "learned": learned,
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
    _print_learned(chosen, learned)
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
        from resel.cli.report_plots import emit
        emit(store, run_id, plot_dir, html_file, as_json=False, protect=protect)


def _s(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}" if isinstance(value, float) else str(value)
