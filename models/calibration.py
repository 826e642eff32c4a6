"""Calibrating LIM per site from what resel measured (issue 6 item 5; seeds/003 §3.2, §4.1).

LIM predicts T̂x = κ_site · I / clock_site with IPC taken as 1, which is why the thesis
over-predicted by 157–171 % on XSEDE (real IPC > 1, and base rather than running clocks).
The full model behind it is::

    T_x(task, site) = κ_site · I_task / (IPC_site · f_site)

with I_task the task's instruction count on the baseline. From execution times alone only the
product κ / (IPC · f) is identifiable, as one *effective rate* r_site = T_x / I (seconds per
baseline instruction); that rate is what predictions and re-selection windows need. Where perf
ran on the site, its counters split the rate: κ = I_site / I_baseline, f = cycles / task-clock
and IPC = I_site / cycles. ``clock_ghz_eff`` is the clock that, plugged into LIM's own formula
with the fitted (or unit) κ, reproduces the calibrated rate: κ / (r · 1e9) = IPC · f.

Evaluation is on held-out runs and reports what re-selection actually depends on: besides
MAPE, the Kendall τ-b of the site ranking (P_RESEL picks by order) and the window error
|Ŵ − W| per pair of sites, which bounds the penalty of a wrong re-selection (eq. 3.7–3.10).
The same numbers for uncalibrated LIM are computed beside them so the gain is visible.

A fit belongs to one **application** (:func:`application_of`: the program a bag's command
runs, e.g. ``gmx`` or ``sleep``): an effective rate folds in the application's IPC, so a rate
learned from ``sleep`` tasks says nothing about ``gmx``. Each site's fit records its evidence —
the runs, the dates of the first and last task, and the leave-one-out residual ratios
measured / predicted — which :mod:`resel.models.runtime` turns into prediction intervals.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from resel.errors import ModelError
from resel.models.lim import GHZ, SiteRate, site_rates
from resel.models.stored_records import damaged, epoch, is_number, run_sites, shown, site_name


@dataclass(frozen=True, slots=True)
class Evidence:
    """One finished task on one site: what was measured, and how.

    ``instructions_baseline`` is the task's count on the baseline machine (bag profile or a
    ``profiles`` label); the ``*_site`` figures and ``task_clock`` (CPU seconds) exist only
    where perf counted on the site. ``method`` names where T_x came from.
    """

    site: str
    instructions_baseline: float
    tx_measured: float
    instructions_site: float | None = None
    cycles_site: float | None = None
    task_clock: float | None = None
    method: str = "attempt:end-start"
    run_id: int | None = None
    task: int | None = None
    application: str = ""
    at: float | None = None           # when the task ended (epoch seconds), for the fit's dates


#: programs that only start another one: the application is what they run
WRAPPERS = frozenset({"env", "exec", "nice", "time", "nohup", "stdbuf", "taskset", "chrt", "ionice"})


#: one piece of a shell word, or the blanks between words, as shlex.split reads them (POSIX
#: mode, no comments): each alternative starts with its own character, so a match never backtracks
#: into another and the whole text is matched in linear time, in C
_PIECE = re.compile(r"""(?P<blank>[ \t\r\n]+)|(?P<plain>[^ \t\r\n'"\\]+)|'(?P<single>[^']*)'"""
                    r"""|"(?P<double>(?:[^"\\]|\\.)*)"|\\(?P<escaped>.)""", re.S)
_ESCAPED_IN_DOUBLE = re.compile(r'\\(["\\])')


def shell_words(text: str) -> list[str]:
    """``shlex.split(text, comments=False)``, in time linear in ``text``: shlex appends a
    character at a time to a string attribute (copying it), so a one-word command of 1 MB took
    12 s and 10 MB more than 10 minutes. A piece at a time here (a run of plain characters, a
    quoted string, an escaped character), each matched by one regular expression.

    Raises:
        ValueError: an unclosed quotation or a backslash at the end, as shlex.
    """
    words: list[str] = []
    word: list[str] | None = None
    at, end = 0, len(text)
    while at < end:
        match = _PIECE.match(text, at)
        if match is None:
            raise ValueError("No closing quotation" if text[at] in "'\"" else "No escaped character")
        at = match.end()
        kind = match.lastgroup
        if kind == "blank":
            if word is not None:
                words.append("".join(word))
                word = None
            continue
        piece = match.group(kind)
        if kind == "double":
            piece = _ESCAPED_IN_DOUBLE.sub(r"\1", piece)
        if word is None:
            word = []
        word.append(piece)
    if word is not None:
        words.append("".join(word))
    return words


def application_of(command: str) -> str:
    """The application a bag's command runs: the base name of its first program, after any
    ``VAR=value`` assignments and wrappers such as ``env`` or ``nice`` (with their options).

    ``gmx mdrun -s topol.tpr`` → ``gmx``; ``OMP_NUM_THREADS=1 /opt/bin/gmx_d mdrun`` → ``gmx_d``;
    ``sleep 2; echo done`` → ``sleep``. A command that cannot be split (unbalanced quotes) is
    read up to its first blank.
    """
    try:
        words = shell_words(command)
    except ValueError:
        words = command.split()
    for w in words:
        w = w.rstrip(";&|")
        if not w or w.startswith("-") or ("=" in w and not w.startswith(("/", "."))
                                         and w.split("=", 1)[0].replace("_", "").isalnum()):
            continue
        if w.isdigit():                   # an option's value (nice -n 10)
            continue
        name = os.path.basename(w)
        if name in WRAPPERS:
            continue
        return name
    return ""


@dataclass(frozen=True, slots=True)
class SiteFit:
    """A site's calibrated model; ``None`` marks a parameter the evidence cannot identify."""

    site: str
    rate_s_per_instr: float           # median of T_x / I_baseline
    clock_ghz_eff: float              # κ / (rate · 1e9) = IPC · f: the clock LIM would need
    kappa: float | None = None        # median of I_site / I_baseline (perf on the site)
    ipc: float | None = None          # median of I_site / cycles
    clock_ghz: float | None = None    # median of cycles / task-clock (the running clock)
    n: int = 0                        # evidence rows behind the rate
    n_counted: int = 0                # rows with perf instruction counts on the site
    spread: float = 0.0               # median |ratio/median − 1| of the rate ratios (MAD, relative)
    methods: dict[str, int] = field(default_factory=dict)
    application: str = ""             # the program the evidence ran (application_of)
    runs: list[int] = field(default_factory=list)              # live runs the evidence came from
    first: str | None = None          # UTC date-time of the first and last task of the evidence
    last: str | None = None
    #: leave-one-out residuals, measured / predicted T_x, ascending (the runtime interval)
    residuals: list[float] = field(default_factory=list)

    def tx(self, instructions: float) -> float:
        return self.rate_s_per_instr * instructions

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SiteFit":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# ------------------------------------------------------------------ loading evidence
def _perf_counts(perf: Mapping[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """(instructions, cycles, task-clock s) from an agent's perf record, or Nones.

    User-space ``:u`` counts are preferred and paired with cycles of the same kind, as
    ``resel profile`` does (probes/perf.py), so site and baseline counts are comparable.
    """
    if not perf or "error" in perf:
        return None, None, None

    def num(key: str) -> float | None:
        v = perf.get(key)
        return float(v) if is_number(v) and v > 0 else None

    instr = cycles = None
    for i_key, c_key in (("instructions:u", "cycles:u"), ("instructions", "cycles")):
        if num(i_key) is not None:
            instr, cycles = num(i_key), num(c_key)
            break
    if cycles is None:
        cycles = num("cycles:u") or num("cycles")
    tc_ms = num("task-clock-ms")
    return instr, cycles, tc_ms / 1000.0 if tc_ms else None


def baseline_from_profiles(db, label: str) -> float:
    """Median instruction count of the ``profiles`` rows stored under ``label``.

    Raises:
        ModelError: no such label, or none of its rows has an instruction count.
    """
    if "profiles" not in db.table_names():
        raise ModelError(f"no profiles in the store (run `resel profile --label {label} -- CMD`)")
    vals = []
    for r in db.query("select id, instructions from profiles where label = ?", [label]):
        if r["instructions"] is not None and not (is_number(r["instructions"]) and r["instructions"] > 0):
            raise damaged(f"profiles row {shown(r['id'])}", f"instructions {shown(r['instructions'])} is not a count")
        if r["instructions"]:
            vals.append(r["instructions"])
    if not vals:
        raise ModelError(f"no profile labelled {label!r} with an instruction count")
    return statistics.median(vals)


def live_runs(db, runs: Sequence[int] | None = None) -> list[dict]:
    """The live runs to learn from (all of them by default), checked to exist.

    Raises:
        ModelError: a requested run is missing or not live.
    """
    if "runs" not in db.table_names():
        return []
    if runs is None:
        return list(db.query("select * from runs where mode = 'live' order by id"))
    out = []
    for rid in runs:
        rows = list(db.query("select * from runs where id = ?", [rid]))
        if not rows:
            raise ModelError(f"no run {rid} in the store (list them with `resel runs`)")
        if rows[0]["mode"] != "live":
            raise ModelError(f"run {rid} is a {rows[0]['mode']} run: only live runs measure T_x")
        out.append(rows[0])
    return out


def load_evidence(db, runs: Sequence[int] | None = None, *, baseline_label: str | None = None) -> list[Evidence]:
    """Evidence rows from the ``attempts`` of live runs: outcome 'done', T_x = end − start.

    I_baseline is the run's bag profile (``bag_spec.profile.instructions``) unless
    ``baseline_label`` names ``profiles`` rows to take it from. Attempts without both times
    are skipped: a task still running or lost says nothing about its execution time.
    """
    override = baseline_from_profiles(db, baseline_label) if baseline_label else None
    out: list[Evidence] = []
    if "attempts" not in db.table_names():
        return out
    for run in live_runs(db, runs):
        try:
            spec = json.loads(run["bag_spec"])
            base = override or float(spec["profile"]["instructions"])
        except (TypeError, KeyError, ValueError):
            continue
        app = application_of(str(spec.get("command") or ""))
        for a in db.query("select * from attempts where run_id = ? and outcome = 'done' order by task, attempt",
                          [run["id"]]):
            where = f"attempts of run {run['id']}, task {shown(a['task'])}"
            start, end = epoch(a["start"], f"{where}, start"), epoch(a["end"], f"{where}, end")
            if start is None or end is None or end <= start:
                continue
            site = site_name(a["site"], where)
            try:
                perf = json.loads(a["perf"]) if a["perf"] else None
            except ValueError:
                perf = None
            instr, cycles, tc = _perf_counts(perf if isinstance(perf, dict) else None)
            out.append(Evidence(site, base, end - start, instr, cycles, tc,
                                "attempt:end-start" + ("+perf" if instr else ""), run["id"], a["task"],
                                app, end))
    return out


def lim_rates_from_runs(db, runs: Sequence[int] | None = None, clock: str = "base") -> dict[str, SiteRate]:
    """Uncalibrated LIM per site from the sites stored with the runs (latest run wins)."""
    out: dict[str, SiteRate] = {}
    for run in live_runs(db, runs):
        for name, (kappa, ghz) in run_sites(run["sites"], f"runs.sites of run {run['id']}", clock).items():
            out[name] = SiteRate(name, kappa, ghz)
    return out


# ------------------------------------------------------------------ fitting
def _median_ratio(pairs: Iterable[tuple[float | None, float | None]]) -> tuple[float | None, list[float]]:
    # (a ratio of two finite numbers may still overflow: 1e308 / 1e-308)
    ratios = [r for r in (a / b for a, b in pairs if a is not None and b is not None and b > 0)
              if 0 < r < math.inf]
    return (statistics.median(ratios) if ratios else None), ratios


def loo_ratios(ratios: Sequence[float]) -> list[float]:
    """Leave-one-out residuals: each ratio divided by the median of the *others*, ascending.

    A task's own time must not pull the rate it is judged against, or small fits would look
    tighter than they predict; with one ratio there is nothing to compare (empty).
    """
    n = len(ratios)
    if n < 2:
        return []
    s = sorted(ratios)
    out = []
    for k, v in enumerate(s):
        rest = s[:k] + s[k + 1:]
        out.append(v / statistics.median(rest))
    return sorted(out)


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat(timespec="seconds")


def by_application(evidence: Iterable[Evidence]) -> dict[str, list[Evidence]]:
    """Evidence grouped by application, in first-seen order."""
    out: dict[str, list[Evidence]] = {}
    for e in evidence:
        out.setdefault(e.application, []).append(e)
    return out


def fit(evidence: Iterable[Evidence]) -> dict[str, SiteFit]:
    """Per-site calibration by medians of ratios.

    Why medians of per-task ratios rather than least squares: live execution times have heavy
    right tails (a noisy neighbour on a shared node, a slow slot in a pool, a straggler after a
    restart), and a least-squares slope through the origin is pulled by exactly those and by
    the largest tasks; the median of T_x / I ignores up to half the rows being bad and weighs
    every task alike whatever its size. The same holds for κ, IPC and the clock from perf.

    Raises:
        ModelError: no evidence at all.
    """
    by_site: dict[str, list[Evidence]] = defaultdict(list)
    for e in evidence:
        if e.tx_measured > 0 and e.instructions_baseline > 0:
            by_site[e.site].append(e)
    if not by_site:
        raise ModelError("no evidence to fit: no finished live task with a bag instruction count "
                         "(run a bag on live sites first: `resel run BAG --sites FILE`)")
    fits: dict[str, SiteFit] = {}
    for site, rows in sorted(by_site.items()):
        rate, ratios = _median_ratio((e.tx_measured, e.instructions_baseline) for e in rows)
        spread = statistics.median(abs(r / rate - 1.0) for r in ratios)
        kappa, counted = _median_ratio((e.instructions_site, e.instructions_baseline) for e in rows)
        ipc, _ = _median_ratio((e.instructions_site, e.cycles_site) for e in rows)
        hz, _ = _median_ratio((e.cycles_site, e.task_clock) for e in rows)
        clock_eff = (kappa or 1.0) / (rate * GHZ)
        apps = sorted({e.application for e in rows})
        ats = [e.at for e in rows if e.at is not None]
        fits[site] = SiteFit(site, rate, clock_eff, kappa, ipc, hz / GHZ if hz else None, len(rows),
                             len(counted), spread, dict(Counter(e.method for e in rows)),
                             ",".join(apps), sorted({e.run_id for e in rows if e.run_id is not None}),
                             _iso(min(ats)) if ats else None, _iso(max(ats)) if ats else None,
                             loo_ratios(ratios))
    return fits


def predict(fits: Mapping[str, SiteFit], instructions: float,
            fallback: Mapping[str, SiteRate] | None = None) -> dict[str, float]:
    """T̂x per site: calibrated where fitted, else LIM from ``fallback`` (if given)."""
    if instructions < 0:
        raise ModelError(f"instructions must be >= 0, got {instructions}")
    out = {s: f.tx(instructions) for s, f in fits.items()}
    for s, r in (fallback or {}).items():
        out.setdefault(s, r.tx(instructions))
    return out


# ------------------------------------------------------------------ evaluation
def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ-b (ties in either ranking corrected for); NaN if undefined (n < 2 or all tied)."""
    if len(x) != len(y):
        raise ModelError("kendall_tau_b needs two sequences of the same length")
    conc = disc = tie_x = tie_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tie_x += 1
            elif dy == 0:
                tie_y += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tie_x) * (conc + disc + tie_y))
    return (conc - disc) / denom if denom else math.nan


def mape(pred: Sequence[float], actual: Sequence[float]) -> float:
    """Mean absolute percentage error, in percent."""
    pairs = [(p, a) for p, a in zip(pred, actual) if a]
    if not pairs:
        return math.nan
    return 100.0 * statistics.fmean(abs(p - a) / abs(a) for p, a in pairs)


def _scores(model: Mapping[str, float], rows: list[Evidence]) -> dict[str, Any]:
    """MAPE, τ-b and window errors of a model given as seconds-per-instruction per site."""
    rows = [e for e in rows if e.site in model]
    if not rows:
        return {"n": 0, "mape": math.nan, "tau_b": math.nan, "windows": [], "window_error_mean": math.nan,
                "window_error_max": math.nan, "window_sign_errors": 0}
    pct = mape([model[e.site] * e.instructions_baseline for e in rows], [e.tx_measured for e in rows])
    measured_rate = {s: statistics.median(e.tx_measured / e.instructions_baseline for e in rows if e.site == s)
                     for s in sorted({e.site for e in rows})}
    sites = list(measured_rate)
    tau = kendall_tau_b([model[s] for s in sites], [measured_rate[s] for s in sites])
    # W per pair of sites within each task size: measured medians, as re-selection sees them.
    med: dict[tuple[float, str], float] = {}
    groups: dict[tuple[float, str], list[float]] = defaultdict(list)
    for e in rows:
        groups[(e.instructions_baseline, e.site)].append(e.tx_measured)
    for k, v in groups.items():
        med[k] = statistics.median(v)
    windows = []
    for instr in sorted({k[0] for k in med}):
        here = sorted(s for (i, s) in med if i == instr)
        for ai, a in enumerate(here):
            for b in here[ai + 1:]:
                w = med[(instr, b)] - med[(instr, a)]
                w_hat = (model[b] - model[a]) * instr
                windows.append({"r": a, "r2": b, "instructions": instr, "w": w, "w_hat": w_hat,
                                "error": abs(w_hat - w), "sign_ok": (w > 0) == (w_hat > 0)})
    errs = [w["error"] for w in windows]
    return {"n": len(rows), "mape": pct, "tau_b": tau, "windows": windows,
            "window_error_mean": statistics.fmean(errs) if errs else math.nan,
            "window_error_max": max(errs) if errs else math.nan,
            "window_sign_errors": sum(not w["sign_ok"] for w in windows)}


def evaluate(fits: Mapping[str, SiteFit], evidence_heldout: Iterable[Evidence],
             sites: Mapping[str, SiteRate] | Iterable, clock: str = "base") -> dict[str, Any]:
    """Score calibrated and uncalibrated LIM on held-out evidence.

    ``sites`` is LIM's view: a mapping site → :class:`SiteRate`, or domain Sites (read with
    ``clock``). Only rows of sites LIM knows are scored, so both columns use the same rows;
    sites without a fit are predicted by LIM in the calibrated column too (listed in
    ``fallback``).
    """
    lim = dict(sites) if isinstance(sites, Mapping) else site_rates(list(sites), clock)
    rows = [e for e in evidence_heldout if e.site in lim and e.instructions_baseline > 0 and e.tx_measured > 0]
    if not rows:
        raise ModelError("no held-out evidence on sites LIM knows: nothing to evaluate")
    lim_rate = {s: r.seconds_per_instruction for s, r in lim.items()}
    cal_rate = {s: (fits[s].rate_s_per_instr if s in fits else lim_rate[s]) for s in lim}
    return {"n": len(rows), "runs": sorted({e.run_id for e in rows if e.run_id is not None}),
            "fallback": sorted({e.site for e in rows} - set(fits)),
            "lim": _scores(lim_rate, rows), "calibrated": _scores(cal_rate, rows)}


def split(evidence: Sequence[Evidence], holdout: float) -> tuple[list[Evidence], list[Evidence], str]:
    """Training and held-out evidence: the latest runs if there are several, else every k-th task.

    Holding out whole runs tests what matters — predicting a future run — including its
    run-to-run drift; with a single run, a deterministic stride over tasks is the next best.
    """
    if not 0 <= holdout < 1:
        raise ModelError(f"holdout must be in [0, 1), got {holdout}")
    if holdout == 0:
        return list(evidence), [], "none"
    runs = sorted({e.run_id for e in evidence})
    if len(runs) >= 2:
        k = min(len(runs) - 1, max(1, round(holdout * len(runs))))
        test_runs = set(runs[-k:])
        return ([e for e in evidence if e.run_id not in test_runs], [e for e in evidence if e.run_id in test_runs],
                "runs " + ",".join(str(r) for r in sorted(test_runs)))
    train, test = [], []
    for i, e in enumerate(evidence):
        (test if int((i + 1) * holdout) > int(i * holdout) else train).append(e)
    if not train:
        raise ModelError("nothing left to fit after holding out: lower --holdout")
    return train, test, f"every {round(1 / holdout)}th task of run {runs[0]}"
