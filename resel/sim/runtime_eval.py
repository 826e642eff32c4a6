"""How good is the calibrated runtime model on real runs? The GROMACS evaluation (issue 16 item 5).

Input: the records of ``benchmarks/measure_gromacs_runtime.py`` — callgrind instruction counts of
``gmx`` and ``gmx_d`` at a few small nsteps, and timed runs (perf task-clock) at nsteps from
10^3 to 10^5. Everything below goes through resel's own model code, the code ``resel model fit``
and ``resel model predict`` run:

* the baseline instruction count of a run, I(n) = setup + per_step · n, by least squares on
  the callgrind counts (the affine rule of docs/experiment1.md);
* each timed run is one :class:`~resel.models.calibration.Evidence` row of site ``this-vm`` and
  application ``gmx`` or ``gmx_d``; :func:`~resel.models.calibration.fit` fits the rate (a
  median of T_x / I) and its leave-one-out residuals;
* a held-out run is predicted as rate · I(n), with the 90 % interval of
  :class:`~resel.models.runtime.SiteRuntime` from those residuals.

Two held-out designs, both reported:

* **split**: every second run of each configuration (in measurement order, so both halves saw
  the same load over the hours) fits, the others are held out (half and half: a 90 % interval
  needs 19 residuals for its ranks, so 50 runs per configuration leave 25);
* **leave-one-out**: every run predicted by a fit on all the other runs of its configuration —
  the most held-out predictions the data allow, which is what a coverage figure needs.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterable, Sequence

from resel.models.calibration import Evidence, fit
from resel.models.runtime import SiteRuntime, quantile, rate_from_seconds_per_instruction

SITE = "this-vm"
LEVEL = 0.9


def read(path: str | Path) -> list[dict]:
    """The JSONL records (host, callgrind, run)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def affine(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (setup, per_step) of I(n) = setup + per_step · n."""
    n = len(points)
    if n < 2:
        raise ValueError("need two callgrind sizes at least")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def instructions(records: Iterable[dict]) -> dict[str, tuple[float, float]]:
    """Per configuration, (setup, per_step) from its callgrind records."""
    pts: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if r["kind"] == "callgrind":
            pts.setdefault(r["config"], []).append((float(r["nsteps"]), float(r["instructions"])))
    return {cfg: affine(p) for cfg, p in pts.items()}


def evidence(records: Iterable[dict], counts: dict[str, tuple[float, float]]) -> list[Evidence]:
    out = []
    for r in records:
        if r["kind"] != "run" or r["config"] not in counts:
            continue
        setup, per = counts[r["config"]]
        out.append(Evidence(SITE, setup + per * r["nsteps"], float(r["task_clock_s"]), method="perf:task-clock",
                            run_id=int(r["index"]), task=int(r["nsteps"]), application=r["config"]))
    return out


def _errors(pairs: Sequence[tuple[float, float, tuple[float, float] | None]]) -> dict[str, Any]:
    """Absolute percentage errors and interval coverage of (predicted, measured, interval)."""
    ape = sorted(100.0 * abs(p - m) / m for p, m, _ in pairs)
    inside = [lo <= m <= hi for _, m, iv in pairs if iv for lo, hi in [iv]]
    n = len(ape)
    cov = sum(inside) / len(inside) if inside else math.nan
    return {"n": n, "mdape": statistics.median(ape) if ape else math.nan,
            "mape": statistics.fmean(ape) if ape else math.nan,
            "p90_ape": quantile(ape, 0.9) if ape else math.nan, "max_ape": ape[-1] if ape else math.nan,
            "coverage": cov, "coverage_n": len(inside),
            # binomial standard error of the coverage, to read it against 88–92 %
            "coverage_se": math.sqrt(cov * (1 - cov) / len(inside)) if inside else math.nan}


def _model(train: Sequence[Evidence]) -> SiteRuntime:
    f = fit(train)[SITE]
    return SiteRuntime(SITE, rate_from_seconds_per_instruction(SITE, f.rate_s_per_instr), "fit",
                       f"{len(train)} runs", tuple(f.residuals), "calibration residuals")


def evaluate(records: Sequence[dict], *, every: int = 2, level: float = LEVEL) -> dict[str, Any]:
    """Split and leave-one-out scores per configuration and pooled, plus uncalibrated LIM."""
    counts = instructions(records)
    ev = evidence(records, counts)
    host = next((r for r in records if r["kind"] == "host"), {})
    clock = host.get("base_ghz")
    out: dict[str, Any] = {"host": host, "instructions": {c: {"setup": a, "per_step": b} for c, (a, b) in counts.items()},
                           "configs": {}, "level": level}
    pooled_split, pooled_loo, train_ratios, test_ratios = [], [], [], []
    for cfg in sorted({e.application for e in ev}):
        rows = sorted((e for e in ev if e.application == cfg), key=lambda e: e.run_id)
        train = [e for e in rows if e.run_id % every == 0]
        test = [e for e in rows if e.run_id % every != 0]
        res: dict[str, Any] = {"runs": len(rows), "nsteps": [min(e.task for e in rows), max(e.task for e in rows)]}
        if len(train) >= 2 and test:
            m = _model(train)
            pairs = [(m.tx(e.instructions_baseline), e.tx_measured, m.interval(e.instructions_baseline, level))
                     for e in test]
            res["split"] = _errors(pairs) | {"train": len(train), "rate_ginstr_s": 1e-9 / m.rate.seconds_per_instruction,
                                             "interval_ratio": [quantile(m.ratios, (1 - level) / 2),
                                                                quantile(m.ratios, (1 + level) / 2)]}
            pooled_split += pairs
            train_ratios += list(m.ratios)
            test_ratios += [e.tx_measured / m.tx(e.instructions_baseline) for e in test]
        if len(rows) >= 3:
            loo = []
            for i, e in enumerate(rows):
                m = _model(rows[:i] + rows[i + 1:])
                loo.append((m.tx(e.instructions_baseline), e.tx_measured, m.interval(e.instructions_baseline, level)))
            res["loo"] = _errors(loo)
            pooled_loo += loo
        if clock:
            res["lim_uncalibrated"] = _errors([(e.instructions_baseline / (clock * 1e9), e.tx_measured, None)
                                               for e in rows])
        out["configs"][cfg] = res
    out["pooled"] = {"split": _errors(pooled_split) if pooled_split else None,
                     "loo": _errors(pooled_loo) if pooled_loo else None}
    out["ratios"] = {"train": sorted(train_ratios), "test": test_ratios}
    loads = [r.get("load_before") for r in records if r["kind"] == "run" and r.get("load_before") is not None]
    out["load"] = {"median": statistics.median(loads), "max": max(loads)} if loads else None
    return out


def markdown(res: dict) -> str:
    lines = ["| config | design | held-out runs | median abs error | mean | P90 | max | 90 % interval covers |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]

    def row(cfg: str, design: str, s: dict | None) -> None:
        if not s:
            return
        cov = "–" if math.isnan(s["coverage"]) else f"{100 * s['coverage']:.1f} % ± {100 * s['coverage_se']:.1f}"
        lines.append(f"| {cfg} | {design} | {s['n']} | {s['mdape']:.2f} % | {s['mape']:.2f} % | {s['p90_ape']:.2f} % "
                     f"| {s['max_ape']:.2f} % | {cov} |")

    for cfg, c in res["configs"].items():
        row(cfg, "split (1 in 2 fits)", c.get("split"))
        row(cfg, "leave-one-out", c.get("loo"))
        row(cfg, "uncalibrated LIM", c.get("lim_uncalibrated"))
    row("both", "split (1 in 2 fits)", res["pooled"]["split"])
    row("both", "leave-one-out", res["pooled"]["loo"])
    return "\n".join(lines)
