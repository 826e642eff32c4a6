"""One self-contained HTML page per run: what happened first, the figures next, the decisions
that mattered in a table, the configuration folded away.

Meant to be read in a browser, mailed or attached to a paper draft, so it references nothing
outside itself: figures are embedded as base64 PNG (inline SVG from matplotlib would carry
namespace URLs, and PNG renders the same in every mail client), styles are inline, there is no
script. Its order follows what a reader asks: how did the run go (a summary: TTC and its
parts, tasks, moves, how often re-selection was wrong), where did the time go (the figures,
the numbers behind each folded under it), which decisions moved tasks and on which numbers
(moves and move-backs grouped by site pair, then the first of them one by one), and only then
the configuration (bag, sites, options), folded, with the raw stored JSON folded inside it.
A page of a 1,024-task run is a few screens tall at 1,400 px (tests/test_plots.py measures it
in headless Chromium).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from typing import Any, Iterable

from sqlite_utils import Database

from resel.report.plots import load_run, plain_text, run_figures, site_names
from resel.units import TimeUnit, pick, span

_CSS = """
body{font-family:sans-serif;margin:1.5em 2em;max-width:1400px;color:#222;line-height:1.35}
h1{font-size:1.5em;margin:0 0 .3em} h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
p.lead{font-size:1.05em;margin:.2em 0 .8em}
table{border-collapse:collapse;margin:0.4em 0 1em}
th,td{border:1px solid #bbb;padding:2px 7px;text-align:right;font-size:13px}
th{background:#eee} td.l,th.l{text-align:left}
table.kv td{border:none;padding:1px 14px 1px 0;text-align:left} table.kv td.k{color:#555}
figure{margin:0.6em 0 0.8em} figcaption{font-size:13px;color:#444;margin:.2em 0}
img{max-width:100%;border:1px solid #ddd}
details{margin:.3em 0 .8em} summary{cursor:pointer;color:#245}
pre{background:#f6f6f6;padding:0.8em;font-size:12px;overflow-x:auto}
.err{color:#a00} .note{color:#555;font-size:13px}
"""

#: what each decision kind means, in the table of decisions (resel.events.DecisionKind)
MEANING = {
    "reselect-provisional": "started on r' inside the window Ŵ, r not acquired yet",
    "reselect-commit": "r' no slower than r: moved for good",
    "window-commit": "the window closed with r still unacquired: stays on r'",
    "move-back": "r acquired inside the window: back to r (the move rejected)",
    "site-lost": "its origin can never run it: rebound",
    "quarantine": "its origin became a black hole: rebound",
    "quarantine-release": "the quarantine ended: bound back",
    "race-win": "a race: the first kept site to free a slot",
    "race-closed": "the race's first start cancelled the rest",
    "failover": "the primary did not start in time: the next site",
    "rebroker": "waited past the timeout: rebrokered",
}
#: decision kinds listed one by one under the grouped table: those that moved a task or undid a move
MOVES = ("reselect-commit", "window-commit", "move-back", "site-lost", "quarantine", "quarantine-release",
         "race-win", "failover", "rebroker")
#: how many of them are listed one by one, at most, and of each kind and site pair (the whole
#: log: `resel report RUN --decisions N --json`)
LISTED, PER_GROUP = 20, 4


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _t(value: Any, unit: TimeUnit, digits: int | None = None) -> str:
    """A time (seconds) in the table's unit; ``—`` when unknown."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return unit.cell(value) if digits is None else unit.fmt(value, digits)


def _table(headers: Iterable[str], rows: Iterable[Iterable[Any]], caption: str = "", left: int = 1,
           cls: str = "") -> str:
    """An HTML table; the first ``left`` columns left-aligned (names), the rest right (numbers)."""
    head = "".join(f"<th class='l'>{_e(h)}</th>" if i < left else f"<th>{_e(h)}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td class='l'>{c}</td>" if i < left else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    cap = f"<caption>{_e(caption)}</caption>" if caption else ""
    return f"<table class='{cls}'>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fold(summary: str, content: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{_e(summary)}</summary>{content}</details>"


@plain_text
def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return base64.b64encode(buf.getvalue()).decode("ascii")


# ------------------------------------------------------------------ the numbers behind each figure
def _gantt_tables(data: dict) -> str:
    counts: dict[tuple[str, str], int] = {}
    for s in data["segments"]:
        counts[(s["site"], s["outcome"])] = counts.get((s["site"], s["outcome"]), 0) + 1
    outcomes = sorted({o for _, o in counts})
    rows = [[_e(site)] + [str(counts.get((site, o), 0)) for o in outcomes]
            + [str(sum(p["site"] == site for p in data["pilots"]))] for site in data["lanes"]]
    moves: dict[str, int] = {}
    for m in data["moves"]:
        moves[m["kind"]] = moves.get(m["kind"], 0) + 1
    return (_table(["site"] + [f"attempts {o}" for o in outcomes] + ["pilots"], rows, "attempts and pilots per site")
            + _table(["decision", "count"], [[_e(k), str(v)] for k, v in sorted(moves.items())],
                     "re-selection moves"))


def _cdf_tables(data: dict) -> str:
    rows = []
    u = pick(v for d in data["sites"].values() for k in ("tq", "tx", "ttc") for v in d[k])
    for site, d in data["sites"].items():
        n = len(d["ttc"])
        rows.append([_e(site), str(n)] + [_t(sum(d[k]) / n, u) for k in ("tq", "tx", "ttc")]
                    + [_t(d[k][n // 2], u) for k in ("tq", "tx", "ttc")])
    return _table(["site", "finished"] + [u.header(f"{stat} {k}") for stat in ("mean", "median")
                                          for k in ("T_q", "T_x", "TTC")], rows, "per-task times per site")


def _prediction_tables(data: dict) -> str:
    u = pick(v for p in data["per_site"] for v in (p["predicted"], p["measured_mean"]))
    rows = [[_e(p["site"]), _t(p["predicted"], u), _t(p["measured_mean"], u), _t(p["measured_std"], u),
             str(p["n"])] for p in data["per_site"]]
    return _table(["site", u.header("predicted T̂_x"), u.header("measured mean T_x"), u.header("sample std"),
                   "tasks"], rows, "predicted vs measured T_x")


def _workload_tables(data: dict) -> str:
    rows = []
    u = pick(v for st in data["strategies"] for m in ("tq_wkd", "tx_wkd", "ttc_wkd")
             for v in data["series"][st][m]["mean"])
    for st in data["strategies"]:
        for i, n in enumerate(data["sizes"]):
            s = data["series"][st]
            rows.append([_e(st), str(n), str(s["ttc_wkd"]["n"][i])]
                        + [f"{_t(s[m]['mean'][i], u)} ± {_t(s[m]['std'][i], u)}" for m in ("tq_wkd", "tx_wkd", "ttc_wkd")])
    return _table(["strategy", "size", "runs", u.header("T_q,wkd"), u.header("T_x,wkd"), u.header("TTC_wkd")], rows,
                  f"experiment {data['experiment_id']}: mean ± sample std", left=2)


_TABLES = {"gantt": _gantt_tables, "cdfs": _cdf_tables, "predictions": _prediction_tables,
           "workload_by_size": _workload_tables}
_TITLES = {"gantt": "Pilots and task attempts per site", "cdfs": "Per-task time distributions",
           "predictions": "Predictions against measurements", "workload_by_size": "Workload times against size"}


# ------------------------------------------------------------------ the page's parts
def _summary(run: dict, experiment_unit: TimeUnit | None) -> str:
    """The page's head: one sentence of how the run went, then its numbers as a two-column list."""
    u = experiment_unit or pick([run.get("ttc_wkd")])
    audit = run.get("audit") or {}
    status = run.get("status") or "done"
    mode = run.get("mode") or "simulated"
    ttc = run.get("ttc_wkd")
    if ttc is None:
        lead = f"This {mode} run is {_e(status)}: it has no workload times yet."
    else:
        lead = (f"{run.get('done')} of {run.get('size')} tasks done in <b>{_e(span(ttc))}</b> (TTC_wkd: "
                f"{_e(span(run.get('tq_wkd')))} waiting for resources + {_e(span(run.get('tx_wkd')))} executing)"
                f"; {run.get('reassigned') or 0} moved, {run.get('restarts') or 0} restarted, "
                f"{run.get('failed') or 0} failed.")
        if audit.get("judged"):
            lead += (f" Re-selection decided {audit['judged']} times and was wrong {audit['incorrect']} times "
                     f"against the oracle that knows the true times; bound violations: {audit['bound_violations']}.")
    core = pick([run.get("wasted_core_s")])
    items = [("run", run.get("id")), ("mode", mode), ("status", status), ("bag", run.get("bag")),
             ("strategy", run.get("strategy")), ("tasks", run.get("size")), ("seed", run.get("seed")),
             ("LIM clock", run.get("clock")), ("sites", ", ".join(site_names(run))),
             (u.header("TTC_wkd"), _t(ttc, u)), (u.header("T_q,wkd"), _t(run.get("tq_wkd"), u)),
             (u.header("T_x,wkd"), _t(run.get("tx_wkd"), u)),
             (f"wasted [core-{core.name}]", _t(run.get("wasted_core_s"), core, 1)),
             ("experiment", run.get("experiment_id")), ("created (UTC)", run.get("created"))]
    half = (len(items) + 1) // 2
    rows = []
    for i in range(half):
        row = []
        for k, v in (items[i], items[i + half] if i + half < len(items) else ("", "")):
            row += [f"<span class='k'>{_e(k)}</span>", _e("—" if v is None else v)]
        rows.append(row)
    kv = "<table class='kv'><tbody>" + "".join(
        "<tr>" + "".join(f"<td class='k'>{c}</td>" if j % 2 == 0 else f"<td>{c}</td>" for j, c in enumerate(r))
        + "</tr>" for r in rows) + "</tbody></table>"
    return f"<p class='lead'>{lead}</p>{kv}"


def _decisions(db: Database, run_id: int, predictions: dict | None) -> str:
    """The decisions that moved tasks or undid a move: grouped by kind and site pair with their
    numbers (how many, when, T̂x on each side, the window Ŵ, and the W measured after), then the
    first :data:`LISTED` of them one by one."""
    rows = [dict(r) for r in db.query(
        "select seq, time, kind, task, origin, target, a_r, a_r2, tx_r, tx_r2, window from decisions "
        "where run_id = ? and kind != 'assign' order by seq", [run_id])]
    assigned = next(iter(db.query("select count(*) as n from decisions where run_id = ? and kind = 'assign'",
                                  [run_id])))["n"]
    if not rows:
        return (f"<p class='note'>No decision moved a task: {assigned} task(s) were assigned to their "
                "first site and stayed there.</p>")
    measured = {p["site"]: p["measured_mean"] for p in (predictions or {}).get("per_site", [])}
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for d in rows:
        groups.setdefault((d["kind"], d["origin"] or "", d["target"] or ""), []).append(d)
    order = list(MEANING)
    keys = sorted(groups, key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1], k[2]))
    u = pick(v for d in rows for v in (d["tx_r"], d["tx_r2"], d["window"], d["time"]))
    table = []
    for kind, r, r2 in keys:
        ds = groups[(kind, r, r2)]
        w = (measured.get(r2) - measured.get(r)) if measured.get(r) is not None and measured.get(r2) is not None \
            else None
        table.append([_e(kind), _e(MEANING.get(kind, "")), _e(f"{r} → {r2}" if r2 and r2 != r else r), str(len(ds)),
                      _span([d["time"] for d in ds], u), _span([d["tx_r"] for d in ds], u),
                      _span([d["tx_r2"] for d in ds], u), _span([d["window"] for d in ds], u),
                      _t(w, u) if r2 and r2 != r else ""])
    out = _table(["decision", "what it means", "r → r'", "times", u.header("when"), u.header("T̂x(r)"),
                  u.header("T̂x(r')"), u.header("Ŵ"), u.header("W measured")], table,
                 f"{len(rows)} decisions beyond the {assigned} first assignments, by kind and site pair "
                 "(a range: min–max)", left=3)
    moves, per_group = [], {}
    for d in rows:         # the first few of each kind and site pair, in the order they were made
        key = (d["kind"], d["origin"], d["target"])
        if d["kind"] in MOVES and per_group.get(key, 0) < PER_GROUP and len(moves) < LISTED:
            per_group[key] = per_group.get(key, 0) + 1
            moves.append(d)
    if moves:
        columns = [("time", "when", True), ("kind", "decision", False), ("task", "task", False),
                   ("origin", "r", False), ("target", "r'", False), ("a_r", "a_r", True), ("a_r2", "a_r'", True),
                   ("tx_r", "T̂x(r)", True), ("tx_r2", "T̂x(r')", True), ("window", "Ŵ", True)]
        shown = [c for c in columns if any(d[c[0]] is not None for d in moves)]      # no column of dashes only
        unit = pick(d[k] for d in moves for k, _, is_time in shown if is_time)
        body = [[(_t(d[k], unit) if is_time else _e("—" if d[k] is None else d[k])) for k, _, is_time in shown]
                for d in moves]
        total = sum(1 for d in rows if d["kind"] in MOVES)
        out += _table([unit.header(h) if is_time else h for _, h, is_time in shown], body,
                      f"{len(moves)} of the {total} moves and move-backs, one by one: the first {PER_GROUP} of each "
                      f"kind and site pair (all of them: resel report {run_id} --decisions N --json)", left=0)
    return out


def _span(values: list, unit: TimeUnit) -> str:
    """One value, or ``min–max`` of several, in ``unit``; ``—`` when none is known."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    if not known:
        return "—"
    lo, hi = min(known), max(known)
    return _t(lo, unit) if unit.cell(lo) == unit.cell(hi) else f"{_t(lo, unit)}–{_t(hi, unit)}"


def _configuration(run: dict) -> str:
    """The bag and the sites as tables, the run's options, then the raw stored JSON: folded."""
    parts = []
    bag = run.get("bag_spec") or {}
    if bag:
        prof = bag.get("profile") or {}
        parts.append(_table(["bag", "command", "tasks", "cores per task", "instructions per task"],
                            [[_e(bag.get("name")), f"<code>{_e(bag.get('command'))}</code>", _e(bag.get("count")),
                              _e(bag.get("cores_per_task")), _e(f"{prof.get('instructions', 0):.3g}")]],
                            "bag", left=2))
    sites = run.get("sites") or []
    if sites:
        rows = []
        for s in sites:
            clock = s.get("clock") or {}
            pilot = s.get("pilot") or {}
            rows.append([_e(s.get("name")), _e(s.get("kind")), _e(s.get("cores")), _e(clock.get("base")),
                         _e("—" if clock.get("avg") is None else clock.get("avg")), _e(s.get("kappa")),
                         _e(pilot.get("mode")), "yes" if s.get("reselect_target") else "no",
                         _e(_wait_words(s)), _e(s.get("notes") or "")])
        parts.append(_table(["site", "kind", "cores", "base GHz", "avg GHz", "κ", "pilots", "re-selection target",
                             "queue wait", "notes"], rows, "sites", left=2))
    options = run.get("options")
    if options:
        parts.append(_table(["option", "value"], [[_e(k), _e(v)] for k, v in sorted(options.items())],
                            "options of the live run", left=1))
    raw = {k: run.get(k) for k in ("bag_spec", "sites", "options", "audit", "per_site") if run.get(k) is not None}
    parts.append(_fold("the stored configuration as JSON", "<pre>" + _e(json.dumps(raw, indent=2, default=str))
                       + "</pre>"))
    return _fold("Configuration: the bag, the sites, the options", "".join(parts))


def _wait_words(site: dict) -> str:
    """A simulated site's queue-wait model in words (``lognormal median 900 s, sigma 0.9``)."""
    wait = site.get("wait") or {}
    dist = wait.get("dist") or {}
    if dist:
        params = ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}"
                           for k, v in (dist.get("params") or []))
        scale = f" × nodes^{wait['size_exponent']:g}" if wait.get("size_exponent") else ""
        return f"{dist.get('kind')} {params}{scale}"
    queue = site.get("queue") or {}
    if queue:
        return f"{queue.get('policy')} queue replaying {str(queue.get('trace', '')).rsplit('/', 1)[-1]}"
    return "live" if site.get("access") else "—"


def _experiment_unit(db: Database, run: dict) -> TimeUnit | None:
    """The unit of every run of the run's experiment, so that two reports of one experiment
    give TTC in the same unit (None for a run outside one)."""
    exp = run.get("experiment_id")
    if exp is None:
        return None
    return pick(r["ttc_wkd"] for r in db.query("select ttc_wkd from runs where experiment_id = ?", [exp]))


def html_report(db: Database, run_id: int) -> str:
    """The whole report of one run as a single HTML document (no external reference).

    Raises:
        ReselError: no such run.
    """
    run = load_run(db, run_id)
    title = f"resel run {run_id}: {run.get('bag')}, {run.get('strategy')}, {run.get('size')} tasks"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{_e(title)}</h1>",
             _summary(run, _experiment_unit(db, run))]
    figures = run_figures(db, run_id)
    parts.append("<h2>Figures</h2>")
    for name, (fig, data) in figures.items():
        caption = _TITLES.get(name, name)
        if fig is None:
            parts.append(f"<figure><figcaption><b>{_e(caption)}</b></figcaption>"
                         f"<p class='err'>not drawn: {_e(data['error'])}</p></figure>")
            continue
        note = f" <span class='err'>{_e(data['note'])}</span>" if data.get("note") else ""
        parts.append(f"<figure><img alt='{_e(caption)}' id='fig-{_e(name)}' src='data:image/png;base64,{_png(fig)}'>"
                     f"<figcaption><b>{_e(caption)}</b>{note}</figcaption>"
                     + _fold("the numbers behind this figure", _TABLES[name](data)) + "</figure>")
    parts.append("<h2>Decisions that moved tasks</h2>")
    predictions = figures.get("predictions", (None, {}))[1]
    parts.append(_decisions(db, run_id, predictions if "per_site" in predictions else None))
    try:
        configuration = _configuration(run)
    except (TypeError, AttributeError, ValueError, KeyError):   # a damaged store: its raw JSON, no tables
        raw = {k: run.get(k) for k in ("bag_spec", "sites", "options") if run.get(k) is not None}
        configuration = ("<p>The stored configuration cannot be read as a bag and sites (the store is "
                         "damaged); as it is stored:</p><pre>" + _e(json.dumps(raw, indent=2, default=str)) + "</pre>")
    parts.append("<h2>Configuration</h2>" + configuration)
    parts.append("</body></html>")
    return "\n".join(parts)
