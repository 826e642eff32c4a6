"""One self-contained HTML page per run: figures, the numbers behind them, the configuration.

Meant to be mailed or attached to a paper draft, so it references nothing outside itself:
figures are embedded as base64 PNG (inline SVG from matplotlib would carry namespace URLs,
and PNG renders the same in every mail client), styles are inline, there is no script.
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
from resel.units import TimeUnit, pick

_CSS = """
body{font-family:sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #bbb;padding:3px 8px;text-align:right;font-size:13px}
th{background:#eee} td.l,th.l{text-align:left}
img{max-width:100%;border:1px solid #ddd}
pre{background:#f6f6f6;padding:0.8em;font-size:12px;overflow-x:auto}
.err{color:#a00}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _t(value: Any, unit: TimeUnit, digits: int | None = None) -> str:
    """A time (seconds) in the table's unit; ``—`` when unknown."""
    return _num(value, unit.seconds, unit.decimals if digits is None else digits)


def _num(value: Any, scale: float = 1.0, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value / scale:,.{digits}f}" if scale != 1.0 or isinstance(value, float) else f"{value:,}"
    return _e(value)


def _table(headers: Iterable[str], rows: Iterable[Iterable[Any]], caption: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    cap = f"<caption>{_e(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@plain_text
def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return base64.b64encode(buf.getvalue()).decode("ascii")


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
    shown = data["windows"][:200]
    w = pick(v for r in shown for v in (r["time"], r["w_hat"], r["w"], r["bound"]))
    wrows = [[str(r["seq"]), _t(r["time"], w), str(r["task"]), _e(r["origin"]), _e(r["target"]),
              _t(r["w_hat"], w), _t(r["w"], w), _e(r["case"] or "—"), _t(r["bound"], w)] for r in shown]
    return (_table(["site", u.header("predicted T̂_x"), u.header("measured mean T_x"), u.header("sample std"),
                    "tasks"], rows, "predicted vs measured T_x")
            + _table(["seq", w.header("time"), "task", "r", "r'", w.header("Ŵ"), w.header("W"), "case if wrong",
                      w.header("bound")], wrows, "re-selection windows (first 200)"))


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
                  f"experiment {data['experiment_id']}: mean ± sample std")


_TABLES = {"gantt": _gantt_tables, "cdfs": _cdf_tables, "predictions": _prediction_tables,
           "workload_by_size": _workload_tables}
_TITLES = {"gantt": "Pilots and task attempts", "cdfs": "Per-task time distributions",
           "predictions": "Predictions against measurements", "workload_by_size": "Workload times against size"}


def html_report(db: Database, run_id: int) -> str:
    """The whole report of one run as a single HTML document (no external reference).

    Raises:
        ReselError: no such run.
    """
    run = load_run(db, run_id)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>resel run {run_id}</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>resel run {run_id}</h1>"]
    u = pick([run.get("ttc_wkd")])
    core = pick([run.get("wasted_core_s")])
    summary = [["mode", run.get("mode")], ["status", run.get("status") or "done"], ["bag", run.get("bag")],
               ["strategy", run.get("strategy")], ["size [tasks]", run.get("size")], ["seed", run.get("seed")],
               ["LIM clock", run.get("clock")], ["sites", ", ".join(site_names(run))],
               [u.header("TTC_wkd"), _t(run.get("ttc_wkd"), u)], [u.header("T_q,wkd"), _t(run.get("tq_wkd"), u)],
               [u.header("T_x,wkd"), _t(run.get("tx_wkd"), u)], ["done", run.get("done")], ["failed", run.get("failed")],
               ["moved", run.get("reassigned")], ["restarts", run.get("restarts")],
               [f"wasted [core-{core.name}]", _t(run.get("wasted_core_s"), core, 1)], ["experiment", run.get("experiment_id")],
               ["created", run.get("created")]]
    parts.append("<h2>Run</h2>" + _table(["", "value"], [[f"<b>{_e(k)}</b>", _e("—" if v is None else v)]
                                                         for k, v in summary]))
    for name, (fig, data) in run_figures(db, run_id).items():
        parts.append(f"<h2>{_e(_TITLES.get(name, name))}</h2>")
        if fig is None:
            parts.append(f"<p class='err'>{_e(data['error'])}</p>")
            continue
        parts.append(f"<img alt='{_e(name)}' src='data:image/png;base64,{_png(fig)}'>")
        if data.get("note"):
            parts.append(f"<p class='err'>{_e(data['note'])}</p>")
        parts.append(_TABLES[name](data))
    config = {k: run.get(k) for k in ("bag_spec", "sites", "options", "audit", "per_site") if run.get(k) is not None}
    parts.append("<h2>Configuration</h2><pre>" + _e(json.dumps(config, indent=2, default=str)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
