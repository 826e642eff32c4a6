"""Figures from stored runs: what happened, drawn as the thesis drew it.

Every function reads only the run store (never re-runs anything) and returns
``(Figure, data)``: ``data`` holds the exact numbers the figure was drawn from, so tests check
content rather than pixels, and ``resel report --json`` can hand the same numbers to whoever
wants to re-plot them elsewhere.

Simulated runs are rebuilt from their ``events`` table (DispatchTask, CancelTask, PilotEnded,
...), ``tasks`` table (when each task's last attempt finished) and ``pilots`` table; live runs from ``attempts`` and ``live_pilots``, whose
times are the agents' and the coordinator's own clocks (attempt stamps are absolute, so
``runs.t0`` is subtracted). Times are seconds from the bag's submission; each axis shows s, min or h by the times on it
(:mod:`resel.units`).

A run with nothing to draw for one figure raises :class:`~resel.errors.ReselError` with a
message saying why; a run with partial data (still running, no finished task) gives a partial
figure with a note. :func:`write_all` catches the errors per figure so one empty figure never
prevents the others.
"""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import matplotlib

matplotlib.use("Agg")        # headless: the CLI and tests never open a window
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from sqlite_utils import Database  # noqa: E402

from resel.errors import ReselError
from resel.events import CancelPilot, CancelTask, DispatchTask, PilotEnded, TaskFailed, TaskFinished
from resel import journal
from resel.outputs import create, private_dir, refuse_inputs
from resel.json_safe import clean as json_clean  # noqa: E402
from resel.store import get_run  # noqa: E402
from resel.metrics import summarize  # noqa: E402
from resel.units import pick  # noqa: E402

OUTCOME_COLOURS = {"done": "#2ca02c", "cancelled": "#ff7f0e", "lost": "#d62728", "failed": "#7f007f",
                   "running": "#1f77b4"}
MOVE_KINDS = ("reselect-provisional", "reselect-commit", "move-back", "site-lost", "quarantine",
              "quarantine-release")
METRIC_LABELS = {"tq_wkd": "T_q,wkd", "tx_wkd": "T_x,wkd", "ttc_wkd": "TTC_wkd"}
#: every text of resel's figures is plain: a '$' in a site or bag name is a dollar, not the start
#: of matplotlib mathtext (an odd number of them made drawing fail); no label uses mathtext
PLAIN_TEXT = {"text.parse_math": False}


def plain_text(fn: Callable) -> Callable:
    """Run ``fn`` (which builds or draws figures) with mathtext off for every text it makes."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with matplotlib.rc_context(PLAIN_TEXT), warnings.catch_warnings():
            # a name with a control character (from a store edited by hand) has no glyph; the
            # warning would print that character, raw, on the terminal
            warnings.filterwarnings("ignore", message="Glyph .* missing", category=UserWarning)
            return fn(*args, **kwargs)
    return wrapper


# ------------------------------------------------------------------ reading the store
def load_run(db: Database, run_id: int) -> dict:
    """The run row with its JSON columns decoded (:func:`resel.store.get_run`)."""
    return get_run(db, run_id)


def site_names(run: dict) -> list[str]:
    """The run's sites in configuration order (the lanes of the Gantt chart)."""
    sites = run.get("sites")
    if not isinstance(sites, list):      # a damaged store: no lanes rather than a crash
        return []
    return [str(s["name"]) for s in sites if isinstance(s, dict) and s.get("name") is not None]


def _is_live(run: dict) -> bool:
    return run.get("mode") == "live"


def _run_end(run: dict, times: Iterable[float | None]) -> float:
    """Where open bars stop: the run's TTC_wkd if known, else the latest time seen."""
    seen = [t for t in times if t is not None and math.isfinite(t)]
    end = run.get("ttc_wkd")
    return max([end] + seen if end is not None else seen, default=0.0)


#: how an attempt's record ends it, in the Gantt's words
_ENDED_AS = {TaskFinished: "done", TaskFailed: "failed", CancelTask: "cancelled"}


def attempts(db: Database, run: dict) -> list[dict]:
    """Every task attempt: task, attempt, site, pilot, start, end (None while open), outcome.

    Raises:
        ReselError: a simulated run stored without its events.
    """
    if _is_live(run):
        t0 = run.get("t0") or 0.0
        out = []
        for r in db.query("select task, attempt, site, pilot, start, end, outcome from attempts "
                          "where run_id = ? order by task, attempt", [run["id"]]):
            # a live start can be unknown if the agent has not reported yet: skip, nothing to draw
            if r["start"] is None:
                continue
            out.append({"task": r["task"], "attempt": r["attempt"], "site": r["site"], "pilot": r["pilot"],
                        "start": r["start"] - t0, "end": None if r["end"] is None else r["end"] - t0,
                        "outcome": r["outcome"] or ("running" if r["end"] is None else "lost")})
        return out
    if not journal.count(db, run["id"]):
        raise ReselError(f"run {run['id']} was stored without its events, which the Gantt chart is drawn "
                         "from; store runs with events (the default of `resel simulate`)")
    open_: dict[tuple[int, int], dict] = {}
    done: list[dict] = []
    # a task's last attempt ends at its TTC: the tasks table holds what TaskFinished events said
    # (a simulated run stores no TaskFinished since: resel.store.KEPT_ELSEWHERE)
    finished = {(r["task"], r["attempts"]): r["ttc"] for r in db.query(
        "select task, attempts, ttc from tasks where run_id = ? and state = 'done' and ttc is not null", [run["id"]])}

    def close(key: tuple[int, int], time: float, outcome: str) -> None:
        rec = open_.pop(key, None)
        if rec is not None:
            rec["end"], rec["outcome"] = time, outcome
            done.append(rec)

    for t, r in journal.read(db, run["id"], DispatchTask, TaskFinished, TaskFailed, CancelTask, PilotEnded):
        if isinstance(r, DispatchTask):
            key = (r.task, r.attempt)
            open_[key] = {"task": r.task, "attempt": r.attempt, "site": r.site,
                          "pilot": r.pilot, "start": t, "end": None, "outcome": "running"}
            if key in finished:      # the attempt that finished the task: nothing else ends it
                close(key, finished[key], "done")
        elif isinstance(r, PilotEnded):   # tasks still on the pilot are lost with it
            for key in [k for k, v in open_.items() if v["pilot"] == r.pilot]:
                close(key, t, "lost")
        else:
            close((r.task, r.attempt), t, _ENDED_AS[type(r)])
    done.extend(open_.values())
    return sorted(done, key=lambda a: (a["task"], a["attempt"]))


def pilots(db: Database, run: dict) -> list[dict]:
    """Every pilot: site, cores, submitted, start (None if it never started), end, state."""
    if _is_live(run):
        out = []
        for r in db.query("select * from live_pilots where run_id = ? order by pilot", [run["id"]]):
            out.append({"pilot": r["pilot"], "site": r["site"], "cores": r["cores"], "submitted": r["submitted"],
                        "start": r["started"], "end": r["ended"], "state": r["state"]})
        return out
    ends: dict[int, float] = {}
    for t, r in journal.read(db, run["id"], CancelPilot, PilotEnded):
        ends.setdefault(r.pilot, t)
    out = []
    for r in db.query("select * from pilots where run_id = ? order by pilot", [run["id"]]):
        started = bool(r["started"])
        out.append({"pilot": r["pilot"], "site": r["site"], "cores": r["cores"], "submitted": r["submitted"],
                    "start": r["start"] if started else None, "end": ends.get(r["pilot"]),
                    "state": "ended" if r["pilot"] in ends else ("running" if started else "pending")})
    return out


def finished_tasks(db: Database, run: dict) -> list[dict]:
    """Finished tasks with site, T_q, T_x, TTC (s) — from the attempts for live runs, whose
    ``tasks`` table is only written at the end, so a running live run still shows its progress."""
    if _is_live(run):
        # T_q = TTC − T_x is the start of the successful attempt (time 0 = submission)
        return [{"task": a["task"], "site": a["site"], "tq": a["start"], "tx": a["end"] - a["start"],
                 "ttc": a["end"]}
                for a in attempts(db, run) if a["outcome"] == "done" and a["end"] is not None]
    return [dict(r) for r in db.query("select task, site, tq, tx, ttc from tasks where run_id = ? and "
                                      "state = 'done' and ttc is not null order by task", [run["id"]])]


def decisions(db: Database, run_id: int) -> list[dict]:
    return [dict(r) for r in db.query("select * from decisions where run_id = ? order by seq", [run_id])]


# ------------------------------------------------------------------ figures
def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11,
            bbox={"boxstyle": "round", "fc": "#fff8dc", "ec": "#999"})


def _pack(items: list[dict], end_default: float) -> list[int]:
    """Greedy interval packing: the sub-row (core slot) each attempt on a pilot is drawn in."""
    rows_end: list[float] = []
    slots = []
    for a in items:
        end = a["end"] if a["end"] is not None else end_default
        for i, e in enumerate(rows_end):
            if a["start"] >= e - 1e-9:
                rows_end[i] = end
                slots.append(i)
                break
        else:
            rows_end.append(end)
            slots.append(len(rows_end) - 1)
    return slots


#: a site with more pilots than this is drawn as one band of slot counts, not a row per pilot: a
#: pool's 1,024 single-core pilots made the chart 25,000 pixels tall
MAX_PILOT_ROWS = 12
#: a pilot's row is at most this many slots tall; a wider pilot's slots are drawn thinner
MAX_ROW_SLOTS = 8
#: height of a site's band, in slot rows
BAND_SLOTS = 8
SLOT = 0.3               # height of one slot row (y units)


def slot_counts(pils: Sequence[dict], segs: Sequence[dict], end: float) -> dict:
    """Step functions of one site's slots over time: ``queued`` (cores of pilots waiting in the
    queue), ``running`` (cores of started pilots) and ``busy`` (task attempts running), each
    value holding from its time until the next. Equal times are merged, ends before starts, so
    a slot handed on at one instant never counts twice."""
    deltas: dict[float, list[int]] = {}

    def add(t: float, q: int, r: int, b: int) -> None:
        d = deltas.setdefault(t, [0, 0, 0])
        d[0] += q
        d[1] += r
        d[2] += b

    for p in pils:
        cores = int(p.get("cores") or 1)
        sub = p["submitted"] or 0.0
        stop = p["end"] if p["end"] is not None else end
        if p["start"] is None:
            add(sub, cores, 0, 0)
            add(max(sub, stop), -cores, 0, 0)
        else:
            add(sub, cores, 0, 0)
            add(max(sub, p["start"]), -cores, cores, 0)
            add(max(p["start"], stop), 0, -cores, 0)
    for a in segs:
        add(a["start"], 0, 0, 1)
        add(max(a["start"], a["end"] if a["end"] is not None else end), 0, 0, -1)
    out: dict[str, list] = {"times": [], "queued": [], "running": [], "busy": []}
    q = r = b = 0
    for t in sorted(deltas):
        dq, dr, db_ = deltas[t]
        q, r, b = q + dq, r + dr, b + db_
        out["times"].append(t)
        out["queued"].append(q)
        out["running"].append(r)
        out["busy"].append(b)
    return out


def _gantt_layout(lanes: list[str], segs: list[dict], pils: list[dict],
                  end: float) -> tuple[float, dict, dict, dict]:
    """Where each lane, pilot row and band of the Gantt chart goes, top down. Returns the height
    used, each pilot's row ``(y, slots high, pitch, slot of each attempt by id)``, each site's
    lane ``(top, bottom)`` and each banded site's slot counts (with its ``top``)."""
    # layout: each pilot a row of its slots (at most MAX_ROW_SLOTS high), or the whole site one
    # band of slot counts when it has too many pilots for rows; sites separated by a gap
    by_pilot: dict[int, list[dict]] = {}
    for a in segs:
        by_pilot.setdefault(a["pilot"], []).append(a)
    y, rows, lane_span, bands = 0.0, {}, {}, {}
    for site in lanes:
        top = y
        site_pilots = [p for p in pils if p["site"] == site]
        if len(site_pilots) > MAX_PILOT_ROWS:
            counts = slot_counts(site_pilots, [a for a in segs if a["site"] == site], end)
            peak = max(counts["queued"][i] + counts["running"][i] for i in range(len(counts["times"])))
            bands[site] = {"pilots": len(site_pilots), "peak": peak, "top": y, **counts}
            y += BAND_SLOTS * SLOT + 0.4
        else:
            for p in site_pilots:
                items = sorted(by_pilot.get(p["pilot"], []), key=lambda a: a["start"])
                slots = _pack(items, end)
                used = max(1, max(slots, default=0) + 1)
                pitch = SLOT * min(1.0, MAX_ROW_SLOTS / used)
                rows[p["pilot"]] = (y, min(used, MAX_ROW_SLOTS), pitch, dict(zip([id(a) for a in items], slots)))
                y += min(used, MAX_ROW_SLOTS) * SLOT + 0.4
        if y == top:
            y += 0.7            # an empty lane still gets a row, so every site is visible
        lane_span[site] = (top, y)
        y += 0.6
    return y, rows, lane_span, bands


def _draw_pilots(ax: Any, pils: list[dict], rows: dict, unit: float, end: float) -> None:
    """Each pilot with a row: its queue wait (hatched) and its lifetime."""
    for p in pils:
        if p["pilot"] not in rows:
            continue
        y0, height, _, _ = rows[p["pilot"]]
        h = height * SLOT + 0.2
        sub = p["submitted"] or 0.0
        qend = p["start"] if p["start"] is not None else (p["end"] if p["end"] is not None else end)
        ax.broken_barh([(sub / unit, max(0.0, qend - sub) / unit)], (y0, h), facecolors="#dddddd",
                       edgecolor="#999999", hatch="//", linewidth=0.5)
        if p["start"] is not None:
            pend = p["end"] if p["end"] is not None else end
            ax.broken_barh([(p["start"] / unit, max(0.0, pend - p["start"]) / unit)], (y0, h), facecolors="#cfe2f3",
                           edgecolor="#6f8faf", linewidth=0.5)


def _draw_attempts(ax: Any, segs: list[dict], rows: dict, bands: dict, lane_span: dict, unit: float,
                   end: float) -> list[dict]:
    """Each task attempt: a segment in its pilot's slot coloured by outcome (or, on a banded site,
    counted in the band), a restart marked ✕. Returns the attempts with the height drawn at."""
    seg_rows = []
    for a in segs:
        stop = a["end"] if a["end"] is not None else end
        if a["site"] in bands and a["pilot"] not in rows:   # drawn as the band's busy slots
            ys = bands[a["site"]]["top"]
            if a["outcome"] == "cancelled":
                ax.plot([stop / unit], [ys + 0.1], marker="x", color="black", markersize=6)
            seg_rows.append({**a, "y": ys})
            continue
        pitch = SLOT
        if a["pilot"] in rows:
            y0, _, pitch, slots = rows[a["pilot"]]
            ys = y0 + 0.1 + slots.get(id(a), 0) * pitch
        else:
            ys = lane_span[a["site"]][0] + 0.1
        ax.broken_barh([(a["start"] / unit, max(0.0, stop - a["start"]) / unit)], (ys, pitch * 0.8),
                       facecolors=OUTCOME_COLOURS.get(a["outcome"], "#888888"), linewidth=0)
        if a["outcome"] == "cancelled":
            ax.plot([stop / unit], [ys + pitch * 0.4], marker="x", color="black", markersize=6)
        seg_rows.append({**a, "y": ys})
    return seg_rows


@plain_text
def gantt(db: Database, run_id: int) -> tuple[Figure, dict]:
    """One lane per site, one row per pilot in it: queue wait and lifetime bars, task attempts
    as segments coloured by outcome, re-selection moves (▲) and restarts (✕) marked.

    A site with more than :data:`MAX_PILOT_ROWS` pilots (a pool of single-core pilots, one per
    task) is one band instead: how many slots were queued, running and busy over time, so a
    1,024-task run fits a screen. A pilot wider than :data:`MAX_ROW_SLOTS` slots keeps its row
    that high and draws its slots thinner.

    ``data['segments']`` has one entry per attempt, so tasks + restarts (+ lost attempts) of the
    run; ``data['moves']`` the engine's move decisions; ``data['restarts']`` the cancelled
    attempts; ``data['bands']`` the slot counts of each banded site (:func:`slot_counts`).
    """
    run = load_run(db, run_id)
    lanes = site_names(run)
    segs = attempts(db, run)
    pils = pilots(db, run)
    moves = [{"time": d["time"], "kind": d["kind"], "task": d["task"], "origin": d["origin"], "target": d["target"]}
             for d in decisions(db, run_id) if d["kind"] in MOVE_KINDS]
    end = _run_end(run, [a["end"] for a in segs] + [p["end"] for p in pils] + [a["start"] for a in segs])
    for s in {a["site"] for a in segs} | {p["site"] for p in pils}:
        if s not in lanes:      # a site seen in records but not in the configuration: still draw it
            lanes.append(s)

    y, rows, lane_span, bands = _gantt_layout(lanes, segs, pils, end)
    # attempts on pilots with no record (nor a band for their site)
    orphans = [a for a in segs if a["pilot"] not in rows and a["site"] not in bands]

    # a live test run lasts seconds, a thesis-size bag days: pick the unit that reads
    tu = pick([end])
    unit, uname = tu.seconds, tu.name
    fig = Figure(figsize=(12, max(4.0, 1.0 + y * 0.35)), layout="constrained")
    ax = fig.add_subplot()
    for site, band in bands.items():
        _draw_band(ax, band, unit, end)
    _draw_pilots(ax, pils, rows, unit, end)
    seg_rows = _draw_attempts(ax, segs, rows, bands, lane_span, unit, end)
    for m in moves:
        span = lane_span.get(m["target"]) or lane_span.get(m["origin"])
        if span:
            ax.plot([m["time"] / unit], [span[0] - 0.15], marker="v" if m["kind"] == "move-back" else "^",
                    color="#444444", markersize=5, linestyle="none")
    ax.set_yticks([(a + b) / 2 for a, b in lane_span.values()], list(lane_span))
    for a, b in lane_span.values():
        ax.axhspan(a - 0.3, b - 0.3, color="#f4f4f4", zorder=-1)
    ax.invert_yaxis()
    ax.set_xlabel(f"time since the bag was submitted [{uname}]")
    ax.set_ylabel("site (one row per pilot)" if not bands else "site (rows: pilots; bands: slots)")
    state = f" — {run.get('status')}" if run.get("status") and run.get("status") != "done" else ""
    ax.set_title(f"run {run_id}: pilots and task attempts per site ({run.get('strategy')}, "
                 f"{run.get('size')} tasks){state}")
    ax.legend(handles=_gantt_legend(pils, segs, moves, bands), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8)
    if not segs:
        _note(ax, "no task attempt recorded yet")
    data = {"run_id": run_id, "mode": run.get("mode"), "lanes": lanes,
            "segments": [{k: a[k] for k in ("task", "attempt", "site", "pilot", "start", "end", "outcome")}
                         for a in seg_rows],
            "pilots": pils, "moves": moves,
            "restarts": sum(a["outcome"] == "cancelled" for a in segs),
            "orphan_segments": len(orphans),
            "bands": {site: {k: v for k, v in band.items() if k != "top"} for site, band in bands.items()}}
    return fig, data


BAND_BUSY = "#2f7f3f"


def _gantt_legend(pils: Sequence[dict], segs: Sequence[dict], moves: Sequence[dict], bands: dict) -> list:
    """The legend's entries for what the chart shows, and only that: an attempt outcome, a
    marker or a band that never occurs in the run is not listed."""
    handles = []
    if any((p["start"] if p["start"] is not None else p["end"] or 0.0) > (p["submitted"] or 0.0) for p in pils):
        handles.append(Patch(facecolor="#dddddd", edgecolor="#999999", hatch="//", label="pilot queue wait"))
    if any(p["start"] is not None for p in pils):
        handles.append(Patch(facecolor="#cfe2f3", edgecolor="#6f8faf", label="pilot lifetime"))
    seen = {a["outcome"] for a in segs}
    handles += [Patch(color=c, label=f"attempt: {k}") for k, c in OUTCOME_COLOURS.items() if k in seen]
    if bands:
        handles.append(Patch(facecolor=BAND_BUSY, label="band: slots running a task"))
    kinds = {m["kind"] for m in moves}
    if kinds - {"move-back"}:
        handles.append(Line2D([], [], marker="^", color="#444444", linestyle="none", label="re-selection move"))
    if "move-back" in kinds:
        handles.append(Line2D([], [], marker="v", color="#444444", linestyle="none", label="move-back"))
    if "cancelled" in seen:
        handles.append(Line2D([], [], marker="x", color="black", linestyle="none", label="restart (cancelled attempt)"))
    return handles


def _draw_band(ax, band: dict, unit: float, end: float) -> None:
    """One site's slots as stacked steps: running pilots' slots (the lifetime colour) with the
    busy ones inside them, the queued ones hatched above, scaled so the peak fills the band."""
    top, height = band["top"], BAND_SLOTS * SLOT
    scale = height / max(1, band["peak"])
    times = [t / unit for t in band["times"]] + [end / unit]
    base = top + height                 # the y axis is inverted: counts grow upwards from here

    def steps(values: list[float]) -> list[float]:
        return [base - v * scale for v in values] + [base - values[-1] * scale] if values else []

    if not band["times"]:
        return
    running, busy = band["running"], band["busy"]
    queued_top = [r + q for r, q in zip(running, band["queued"])]
    ax.fill_between(times, steps(running), steps(queued_top), step="post", facecolor="#dddddd",
                    edgecolor="#999999", hatch="//", linewidth=0.5)
    ax.fill_between(times, [base] * len(times), steps(running), step="post", facecolor="#cfe2f3",
                    edgecolor="#6f8faf", linewidth=0.5)
    ax.fill_between(times, [base] * len(times), steps(busy), step="post", facecolor=BAND_BUSY, linewidth=0)
    ax.text(times[-1], top + 0.05, f"{band['pilots']} pilots; at most {band['peak']} slots queued or running",
            fontsize=7, ha="right", va="top", color="#333333")


def _experiment_runs(db: Database, experiment_id: int) -> list[dict]:
    return [dict(r) for r in db.query(
        "select id, strategy, size, seed, ttc_wkd, tx_wkd, tq_wkd from runs where experiment_id = ? "
        "order by id", [experiment_id])]


@plain_text
def workload_by_size(db: Database, experiment_id: int) -> tuple[Figure, dict]:
    """T_q,wkd, T_x,wkd and TTC_wkd (mean ± sample std over repetitions) per strategy against
    workload size: the thesis's Figs 4.6/4.8, three panels side by side.

    Raises:
        ReselError: the experiment has no stored runs.
    """
    runs = _experiment_runs(db, experiment_id)
    if not runs:
        raise ReselError(f"experiment {experiment_id} has no stored runs (list them with `resel runs`)")
    sizes = sorted({r["size"] for r in runs})
    strategies = list(dict.fromkeys(r["strategy"] for r in runs))
    series: dict[str, dict[str, dict[str, list]]] = {}
    for st in strategies:
        series[st] = {}
        for metric in ("tq_wkd", "tx_wkd", "ttc_wkd"):
            means, stds, ns = [], [], []
            for n in sizes:
                s = summarize([r[metric] if r[metric] is not None else math.nan
                               for r in runs if r["strategy"] == st and r["size"] == n])
                means.append(s["mean"])
                stds.append(s["std"])
                ns.append(s["n"])
            series[st][metric] = {"sizes": sizes, "mean": means, "std": stds, "n": ns}
    fig = Figure(figsize=(15, 4.8), layout="constrained")
    axes = fig.subplots(1, 3, sharex=True)
    for ax, metric in zip(axes, ("tq_wkd", "tx_wkd", "ttc_wkd")):
        unit = pick(m + d for st in strategies for m, d in zip(series[st][metric]["mean"], series[st][metric]["std"]))
        for i, st in enumerate(strategies):
            s = series[st][metric]
            # a time is never negative: the bar below the mean stops at 0 (mean − std can be < 0
            # for a skewed spread such as T_q's; the std itself is in --json and the report's table)
            below = [unit.of(min(d, m)) if math.isfinite(m) else 0.0 for m, d in zip(s["mean"], s["std"])]
            ax.errorbar(sizes, [unit.of(m) for m in s["mean"]], yerr=[below, [unit.of(d) for d in s["std"]]],
                        marker="os^Dv*"[i % 6], capsize=4, label=st)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{METRIC_LABELS[metric]} per strategy")
        ax.set_xlabel("workload size [tasks]")
        ax.set_ylabel(f"{unit.header(METRIC_LABELS[metric])} (mean ± sample std, ≥ 0)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.grid(alpha=0.3)
        ax.legend(title="strategy")
    fig.suptitle(f"experiment {experiment_id}: workload times against size")
    return fig, {"experiment_id": experiment_id, "sizes": sizes, "strategies": strategies, "series": series,
                 "runs": len(runs)}


def _ecdf(values: list[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    return xs, [(i + 1) / len(xs) for i in range(len(xs))]


@plain_text
def cdfs(db: Database, run_id: int) -> tuple[Figure, dict]:
    """Empirical CDFs of TTC_task, T_q,task and T_x,task per site where the task finished."""
    run = load_run(db, run_id)
    tasks = finished_tasks(db, run)
    per_site: dict[str, dict[str, list[float]]] = {}
    for t in tasks:
        d = per_site.setdefault(t["site"], {"ttc": [], "tq": [], "tx": []})
        for k in ("ttc", "tq", "tx"):
            d[k].append(t[k])
    order = [s for s in site_names(run) if s in per_site] + [s for s in per_site if s not in site_names(run)]
    data = {"run_id": run_id, "finished": len(tasks),
            "sites": {s: {k: sorted(v) for k, v in per_site[s].items()} for s in order}}
    fig = Figure(figsize=(15, 4.6), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    for ax, (key, label) in zip(axes, (("ttc", "TTC_task"), ("tq", "T_q,task"), ("tx", "T_x,task"))):
        unit = pick(t[key] for t in tasks)
        for s in order:
            xs, ys = _ecdf(per_site[s][key])
            ax.step([unit.of(x) for x in xs], ys, where="post", label=f"{s} ({len(xs)})")
        ax.set_title(f"CDF of {label} per site")
        ax.set_xlabel(unit.header(label))
        ax.set_ylabel("fraction of the site's finished tasks")
        ax.grid(alpha=0.3)
        if order:
            ax.legend(title="site (tasks)")
        else:
            _note(ax, "no finished task yet")
    fig.suptitle(f"run {run_id}: per-task times ({len(tasks)} finished of {run.get('size')})")
    if not tasks:
        data["note"] = f"run {run_id} has no finished task yet: the CDFs are empty"
    return fig, data


def window_bound(w: float, w_hat: float) -> tuple[str, float]:
    """The case of §3.4 a wrong P_RESEL would fall in, and its penalty bound (eq. 3.7–3.10);
    the same case analysis as :func:`resel.metrics.judge`, without the acquisition times."""
    if w <= 0:
        return "1", abs(w_hat) + abs(w)
    if w_hat <= 0:
        return "2a", w
    if w > w_hat:
        return "2b", abs(w - w_hat)
    return "2c", abs(w_hat - w)


def _measured_windows(decs: list[dict], means: dict[str, float | None]) -> list[dict]:
    """Each re-selection decision's predicted window Ŵ and the W measured as the difference of the
    two sites' mean T_x (``means``), with the case and penalty bound where both are known."""
    windows = []
    for d in decs:
        if not d["kind"].startswith("reselect"):
            continue
        w_hat = d["window"] if d["window"] is not None else (
            None if d["tx_r"] is None or d["tx_r2"] is None else d["tx_r2"] - d["tx_r"])
        mr, mr2 = means.get(d["origin"]), means.get(d["target"])
        w = None if mr is None or mr2 is None else mr2 - mr
        row = {"seq": d["seq"], "time": d["time"], "task": d["task"], "origin": d["origin"], "target": d["target"],
               "w_hat": w_hat, "w": w, "case": None, "bound": None}
        if w is not None and w_hat is not None:
            row["case"], row["bound"] = window_bound(w, w_hat)
        windows.append(row)
    return windows


def _draw_tx_bars(ax1: Any, per_site: list[dict]) -> None:
    """Predicted T̂_x beside the measured mean ± sample std, per site."""
    xs = list(range(len(per_site)))
    unit = pick(v for p in per_site for v in (p["predicted"], (p["measured_mean"] or 0) + (p["measured_std"] or 0)))
    ax1.bar([x - 0.2 for x in xs], [unit.of(p["predicted"] or 0) for p in per_site], width=0.4,
            label="predicted T̂_x (LIM)", color="#9ecae1")
    ran = [(x, p) for x, p in zip(xs, per_site) if p["n"]]     # a site where no task ran has no measured bar
    ax1.bar([x + 0.2 for x, _ in ran], [unit.of(p["measured_mean"]) for _, p in ran], width=0.4,
            yerr=[unit.of(p["measured_std"] or 0) for _, p in ran], capsize=4,
            label="measured T_x (mean ± sample std)", color="#fd8d3c")
    for x, p in zip(xs, per_site):
        if not p["n"]:
            ax1.text(x + 0.2, 0, "no task\nran here", ha="center", va="bottom", fontsize=8, color="#666666")
    ax1.set_xticks(xs, [f"{p['site']}\n({p['n']} tasks)" for p in per_site])
    ax1.set_ylabel(unit.header("T_x per task"))
    ax1.set_title("predicted vs measured T_x per site")
    ax1.legend()
    ax1.grid(axis="y", alpha=0.3)


def _draw_windows(ax2: Any, windows: list[dict]) -> None:
    """Ŵ against W, one point per distinct pair per case (its area: how many decisions), with the
    lines the cases of eqs. 3.7–3.10 are read against."""
    pts = [r for r in windows if r["w"] is not None and r["w_hat"] is not None]
    wunit = pick(v for r in pts for v in (r["w"], r["w_hat"]))
    if pts:
        cases = sorted({r["case"] for r in pts})
        for c in cases:
            # many decisions share one (W, Ŵ) — W is measured per pair of sites — so each point is
            # drawn once, its area growing with how many decisions it stands for, and labelled ×N
            groups: dict[tuple[float, float], int] = {}
            for r in pts:
                if r["case"] == c:
                    key = (r["w"], r["w_hat"])
                    groups[key] = groups.get(key, 0) + 1
            ax2.scatter([wunit.of(w) for w, _ in groups], [wunit.of(h) for _, h in groups],
                        s=[18 + 6 * math.sqrt(n - 1) * 6 for n in groups.values()], alpha=0.75,
                        label=f"decisions, case {c} if wrong (bound eq. {_EQ[c]}); ×N: N decisions")
            for (w, h), n in groups.items():
                if n > 1:
                    ax2.annotate(f"×{n}", (wunit.of(w), wunit.of(h)), textcoords="offset points", xytext=(6, 6),
                                 fontsize=8)
        lo = wunit.of(min(min(r["w"] for r in pts), min(r["w_hat"] for r in pts), 0.0))
        hi = wunit.of(max(max(r["w"] for r in pts), max(r["w_hat"] for r in pts), 0.0))
        pad = 0.1 * (hi - lo or 1.0)
        lo, hi = lo - pad, hi + pad
        ax2.plot([lo, hi], [lo, hi], color="black", linewidth=1,
                 label="Ŵ = W (penalty bound |W − Ŵ| of eq. 3.9/3.10 is the distance to it)")
        ax2.axvline(0, color="#d62728", linestyle="--", linewidth=1, label="W = 0 (W ≤ 0: case 1, eq. 3.7)")
        ax2.axhline(0, color="#9467bd", linestyle=":", linewidth=1, label="Ŵ = 0 (Ŵ ≤ 0 < W: case 2a, eq. 3.8)")
        ax2.set_xlim(lo, hi)
        ax2.set_ylim(lo, hi)
        ax2.legend(fontsize=7, loc="upper left")
    else:
        _note(ax2, "no re-selection with both sites measured" if windows else "no re-selection decision")
    ax2.set_xlabel(wunit.header("measured W = T_x(r') − T_x(r)"))
    ax2.set_ylabel(wunit.header("predicted window Ŵ"))
    ax2.set_title("re-selection windows: Ŵ vs W")
    ax2.grid(alpha=0.3)


@plain_text
def predictions(db: Database, run_id: int) -> tuple[Figure, dict]:
    """Predicted vs measured T_x per site (Figs 4.4–4.5), and Ŵ vs W per re-selection.

    The prediction is LIM's T̂_x recorded with the decisions; the measurement is the mean ±
    sample std of T_x of the tasks that finished there. W per decision is measured as the
    difference of the two sites' mean T_x (the oracle's per-slot truth is not stored).

    Raises:
        ReselError: the run recorded no predictions.
    """
    run = load_run(db, run_id)
    decs = decisions(db, run_id)
    predicted: dict[str, float] = {}
    for d in decs:
        if d["tx_r"] is not None:
            predicted.setdefault(d["origin"], d["tx_r"])
        if d["tx_r2"] is not None and d["target"]:
            predicted.setdefault(d["target"], d["tx_r2"])
    if not predicted:
        raise ReselError(f"run {run_id} recorded no T_x predictions (no decision carries one), "
                         "so there is nothing to compare")
    measured_raw: dict[str, list[float]] = {}
    for t in finished_tasks(db, run):
        measured_raw.setdefault(t["site"], []).append(t["tx"])
    names = [s for s in site_names(run) if s in predicted or s in measured_raw]
    names += [s for s in list(predicted) + list(measured_raw) if s not in names]
    per_site = []
    for s in names:
        m = summarize(measured_raw.get(s, []))
        per_site.append({"site": s, "predicted": predicted.get(s), "measured_mean": None if not m["n"] else m["mean"],
                         "measured_std": None if not m["n"] else m["std"], "n": m["n"]})
    windows = _measured_windows(decs, {p["site"]: p["measured_mean"] for p in per_site})

    fig = Figure(figsize=(14, 5.2), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    _draw_tx_bars(ax1, per_site)
    _draw_windows(ax2, windows)
    fig.suptitle(f"run {run_id}: predictions against measurements")
    return fig, {"run_id": run_id, "per_site": per_site, "windows": windows}


_EQ = {"1": "3.7", "2a": "3.8", "2b": "3.9", "2c": "3.10"}

RUN_FIGURES = {"gantt": gantt, "cdfs": cdfs, "predictions": predictions}


@plain_text
def _save(fig: Figure, out_dir: Path, name: str, formats: Iterable[str],
          protect: Sequence[tuple[str, Any]] = ()) -> list[str]:
    """Write ``fig`` as ``out_dir/name.FORMAT`` files, each created 0600, none over ``protect``
    (``(what, path)`` of the inputs: see :func:`resel.outputs.refuse_inputs`)."""
    files = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        refuse_inputs(path, "a figure", protect)
        with create(path, "wb", option="--plot") as f:
            fig.savefig(f, format=fmt, dpi=110)
        files.append(str(path))
    return files


def run_figures(db: Database, run_id: int) -> dict[str, tuple[Figure | None, dict]]:
    """Every figure for a run (plus the experiment's size comparison when the run belongs to
    one with several runs); a figure that cannot be drawn becomes ``(None, {"error": why})``."""
    load_run(db, run_id)          # an unknown run is an error for the whole report
    out: dict[str, tuple[Figure | None, dict]] = {}
    for name, fn in RUN_FIGURES.items():
        try:
            out[name] = fn(db, run_id)
        except ReselError as exc:
            out[name] = (None, {"error": str(exc)})
    exp = load_run(db, run_id).get("experiment_id")
    if exp is not None and len(_experiment_runs(db, exp)) > 1:
        try:
            out["workload_by_size"] = workload_by_size(db, exp)
        except ReselError as exc:
            out["workload_by_size"] = (None, {"error": str(exc)})
    return out


def write_all(db: Database, run_id: int, out_dir: str | Path, formats: Iterable[str] = ("png", "svg"),
              protect: Sequence[tuple[str, Any]] = ()) -> dict[str, dict]:
    """Write every figure of a run into ``out_dir`` as ``<name>.<format>``; return name → data
    (with ``files`` listing what was written, or ``error`` saying why a figure is missing).
    ``out_dir`` is created 0700 if new; no file in ``protect`` is written over."""
    refuse_inputs(out_dir, "--plot", protect)
    out_dir = private_dir(out_dir)
    formats = tuple(formats)
    result = {}
    for name, (fig, data) in run_figures(db, run_id).items():
        if fig is not None:
            data = {**data, "files": _save(fig, out_dir, name, formats, protect)}
        result[name] = data
    return result


def write_experiment(db: Database, experiment_id: int, out_dir: str | Path,
                     formats: Iterable[str] = ("png", "svg"), protect: Sequence[tuple[str, Any]] = ()) -> dict:
    """The size comparison of one experiment (``resel simulate --plot DIR``)."""
    refuse_inputs(out_dir, "--plot", protect)
    out_dir = private_dir(out_dir)
    fig, data = workload_by_size(db, experiment_id)
    return {**data, "files": _save(fig, out_dir, "workload_by_size", tuple(formats), protect)}


def jsonable(value: Any) -> Any:
    """NaN/inf → None so the data can go through ``json.dumps`` strictly (the store's rule)."""
    return json_clean(value)
