"""What the run store holds for calibration, checked before it is used.

A store is a file: whoever can write it (or a damaged disk) decides what its rows hold, and SQLite
keeps any value in any column — a string, a blob, an infinity, a time in the year 10^290. The fit
reads attempts' times, the sites stored with a run and earlier fits; a value of the wrong kind used
to end ``resel model fit`` or ``model show`` in a traceback (``TypeError``, ``OverflowError``) or,
worse, print a fit made of it. Here each is checked where it is read, and a bad one is a
:class:`~resel.errors.StoreError` naming the table, the row and the value.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from resel.errors import StoreError

#: the latest time an attempt may carry (epoch seconds, 9999-12-31): later ones have no date
MAX_EPOCH = 253402300799.0


def damaged(where: str, problem: str) -> StoreError:
    return StoreError(f"the run store is damaged: {where}: {problem}")


def shown(value: Any) -> str:
    """A stored value for a message, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool, a string or a blob)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def epoch(value: Any, where: str) -> float | None:
    """An attempt's start or end: None if not recorded, else epoch seconds from 0 to MAX_EPOCH."""
    if value is None:
        return None
    if not is_number(value) or not 0 <= value <= MAX_EPOCH:
        raise damaged(where, f"{shown(value)} is not a time (epoch seconds from 0 to {MAX_EPOCH:.0f})")
    return float(value)


def site_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise damaged(where, f"site {shown(value)} is not a site name")
    return value


def json_value(text: Any, where: str) -> Any:
    """A JSON column's value (None for NULL or empty)."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise damaged(where, f"{shown(text)} is not JSON text")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise damaged(where, f"{shown(text)} is not JSON") from None


def run_sites(text: Any, where: str, clock: str) -> dict[str, tuple[float, float]]:
    """The sites stored with a run (``runs.sites``): per site name, (κ, clock in GHz) for LIM;
    sites without a clock are left out (nothing to score LIM with)."""
    items = json_value(text, where)
    if items is None:
        return {}
    if not isinstance(items, list):
        raise damaged(where, "is not a list of sites")
    out: dict[str, tuple[float, float]] = {}
    for i, d in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(d, dict):
            raise damaged(at, f"{shown(d)} is not a site")
        name = site_name(d.get("name"), at)
        clk = d.get("clock") or {}
        if not isinstance(clk, dict):
            raise damaged(at, f"clock {shown(clk)} is not a table of GHz")
        ghz = clk.get(clock) if clk.get(clock) is not None else clk.get("base")
        kappa = d.get("kappa", 1.0)
        for what, value in (("clock", ghz), ("kappa", kappa)):
            if value is not None and not (is_number(value) and value > 0):
                raise damaged(at, f"{what} {shown(value)} is not a positive number")
        if ghz:
            out[name] = (float(kappa if kappa is not None else 1.0), float(ghz))
    return out


#: a stored SiteFit's fields: (kind, required); kinds: "rate" a finite number > 0, "count" an int
#: >= 0, "share" a finite number >= 0, "text" a string
_FIT_FIELDS = {
    "site": ("text", True), "rate_s_per_instr": ("rate", True), "clock_ghz_eff": ("rate", True),
    "kappa": ("rate", False), "ipc": ("rate", False), "clock_ghz": ("rate", False), "n": ("count", False),
    "n_counted": ("count", False), "spread": ("share", False), "application": ("text", False),
    "first": ("text", False), "last": ("text", False),
}


def _kind_ok(kind: str, value: Any) -> bool:
    if kind == "text":
        return isinstance(value, str)
    if kind == "count":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return is_number(value) and (value > 0 if kind == "rate" else value >= 0)


def site_fit(d: Any, where: str) -> dict:
    """A stored site fit (``model_fits.fit``'s value for one site), checked field by field."""
    if not isinstance(d, dict):
        raise damaged(where, f"{shown(d)} is not a site's fit")
    for key, (kind, required) in _FIT_FIELDS.items():
        value = d.get(key)
        if value is None and not required:
            continue
        if not _kind_ok(kind, value):
            raise damaged(where, f"{key} {shown(value)} is not {_WHAT[kind]}")
    methods = d.get("methods") or {}
    if not isinstance(methods, dict) or not all(isinstance(k, str) and _kind_ok("count", v) for k, v in methods.items()):
        raise damaged(where, f"methods {shown(methods)} is not a table of counts")
    runs = d.get("runs") or []
    if not isinstance(runs, list) or not all(_kind_ok("count", r) for r in runs):
        raise damaged(where, f"runs {shown(runs)} is not a list of run ids")
    residuals = d.get("residuals") or []
    if not isinstance(residuals, list) or not all(_kind_ok("rate", r) for r in residuals):
        raise damaged(where, f"residuals {shown(residuals)} is not a list of positive numbers")
    return d


_WHAT = {"text": "a string", "count": "a whole number >= 0", "share": "a number >= 0", "rate": "a number > 0"}


def fit_row(row: Mapping[str, Any]) -> dict:
    """A ``model_fits`` row with its JSON columns decoded and every value checked: what
    ``resel model show`` prints and ``predict``, ``run`` and ``simulate`` use."""
    where = f"model_fits row {shown(row.get('id'))}"
    out = dict(row)
    for key in ("created", "holdout", "baseline_label", "application"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise damaged(where, f"{key} {shown(out[key])} is not text")
    if not _kind_ok("count", out.get("n_evidence")):
        raise damaged(where, f"n_evidence {shown(out.get('n_evidence'))} is not a whole number >= 0")
    runs = json_value(out.get("runs"), f"{where}, runs")
    if not isinstance(runs or [], list) or not all(_kind_ok("count", r) for r in runs or []):
        raise damaged(where, f"runs {shown(runs)} is not a list of run ids")
    out["runs"] = runs or []
    fit = json_value(out.get("fit"), f"{where}, fit")
    if not isinstance(fit, dict):
        raise damaged(where, f"fit {shown(fit)} is not a table of sites")
    out["fit"] = {site_name(s, where): site_fit(d, f"{where}, fit of {s}") for s, d in fit.items()}
    lim = json_value(out.get("lim"), f"{where}, lim") or {}
    if not isinstance(lim, dict) or not all(
            isinstance(d, dict) and all(v is None or (is_number(v) and v > 0) for v in (d.get("kappa"), d.get("clock_ghz")))
            for d in lim.values()):
        raise damaged(where, f"lim {shown(lim)} is not a table of sites' kappa and clock")
    out["lim"] = lim
    out["evaluation"] = _evaluation(json_value(out.get("evaluation"), f"{where}, evaluation"), where)
    out.setdefault("application", None)
    return out


def _evaluation(ev: Any, where: str) -> dict | None:
    """A fit's held-out scores, in the shape ``model show`` prints (None: not evaluated)."""
    if ev is None:
        return None
    problem = None
    if not isinstance(ev, dict) or not _kind_ok("count", ev.get("n")):
        problem = "n"
    elif not isinstance(ev.get("fallback", []), list) or not all(isinstance(s, str) for s in ev.get("fallback", [])):
        problem = "fallback"
    else:
        for name in ("lim", "calibrated"):
            scores = ev.get(name)
            if not isinstance(scores, dict) or not all(
                    scores.get(k) is None or is_number(scores.get(k))
                    for k in ("mape", "tau_b", "window_error_mean", "window_error_max")) \
                    or not _kind_ok("count", scores.get("window_sign_errors")):
                problem = name
                break
    if problem:
        raise damaged(where, f"evaluation ({problem}) {shown(ev)} is not a fit's held-out scores")
    ev.setdefault("fallback", [])
    return ev
