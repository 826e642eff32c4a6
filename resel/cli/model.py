"""``resel model``: calibrate LIM per site from stored live runs, show the fit, predict a bag.

The fit is stored in the ``model_fits`` table (one row per ``resel model fit``) so ``show`` and
``predict`` work later without re-reading the evidence, and earlier fits stay comparable.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path

import click

from resel.cli.common import INT64_MAX, Finite, fail_cleanly
from resel.errors import ModelError, ReselError
from resel.json_safe import clean as _clean
from resel.safe_text import terminal

db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Run store (default: $RESEL_DB or ~/.local/share/resel/resel.db).")
from resel.cli.common import json_option  # noqa: E402 - one --json help for every command


def _open(db_path, write: bool = True):
    from resel.store import open_store
    return open_store(db_path, write=write)   # migrations create model_fits


def _runs_arg(value: str | None) -> list[int] | None:
    """``--runs 1,2``: run ids, each a whole number from 1 to the store's largest (SQLite's
    64-bit integers: a larger one ended in OverflowError at the query)."""
    if not value:
        return None
    try:
        runs = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        runs = []
    if not runs or not all(1 <= r <= INT64_MAX for r in runs):
        raise click.BadParameter(f"{value!r} is not a comma-separated list of run ids (whole numbers from 1 "
                                 f"to {INT64_MAX:,}), e.g. 1,2", param_hint="--runs") from None
    return runs


def _g(v: float | None, fmt: str = ".4g") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _decode(row: dict) -> dict:
    from resel.models.stored_records import fit_row
    return fit_row(row)


def latest_fit(db) -> dict:
    """The newest ``model_fits`` row, decoded. Raises ReselError when there is none."""
    rows = list(db.query("select * from model_fits order by id desc limit 1"))
    if not rows:
        raise ReselError("no model fit in the store", hint="run `resel model fit` first (`resel model --help`: "
                         "what it learns from, and how to get some on the testbed)")
    return _decode(rows[0])


def latest_fits(db, application: str | None = None) -> list[dict]:
    """The newest fit of each application (or of ``application``), newest first.

    Raises:
        ReselError: none stored (for that application).
    """
    has_app = "application" in db["model_fits"].columns_dict
    rows = [_decode(r) for r in db.query("select * from model_fits order by id desc")]
    seen: set = set()
    out = []
    for r in rows:
        app = r["application"] if has_app else None
        if app in seen or (application is not None and app != application):
            continue
        seen.add(app)
        out.append(r)
    if not out:
        raise ReselError("no model fit in the store" + (f" for application {application!r}" if application else ""),
                         hint="run `resel model fit` first (`resel model --help`: what it learns from, and how to "
                              "get some on the testbed)")
    return out


def refit(db, runs: list[int] | None = None, *, holdout: float = 0.25, baseline_label: str | None = None,
          clock: str = "base", application: str | None = None) -> list[dict]:
    """Fit every application found in the runs' evidence (or only ``application``) and store
    one ``model_fits`` row per application, with its evidence; returns the stored documents.

    ``resel model fit`` and ``resel run --refit`` (after a live run) both come here.

    Raises:
        ModelError: no evidence at all (for that application).
    """
    from resel.models import calibration as cal
    evidence = cal.load_evidence(db, runs, baseline_label=baseline_label)
    groups = cal.by_application(evidence)
    if application is not None:
        groups = {a: e for a, e in groups.items() if a == application}
    if not groups:
        cal.fit([])    # raises the one clear "no evidence" error
    lim = cal.lim_rates_from_runs(db, runs, clock)
    lim_doc = {s: {"kappa": r.kappa, "clock_ghz": r.clock_ghz} for s, r in lim.items()}
    docs = []
    for app, rows in groups.items():
        fits = cal.fit(rows)
        train, test, how = cal.split(rows, holdout)
        evaluation = None
        if test and lim:
            try:
                evaluation = cal.evaluate(cal.fit(train), test, lim)
            except ModelError as exc:
                how += f" — not evaluated: {exc}"
        fit_doc = {s: f.as_dict() for s, f in fits.items()}
        used_runs = sorted({e.run_id for e in rows if e.run_id is not None})
        row_id = db["model_fits"].insert({
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "runs": json.dumps(used_runs), "holdout": how, "baseline_label": baseline_label,
            "n_evidence": len(rows), "fit": json.dumps(_clean(fit_doc)), "lim": json.dumps(lim_doc),
            "evaluation": json.dumps(_clean(evaluation)) if evaluation else None, "application": app},
            alter=True).last_pk
        docs.append({"id": row_id, "application": app, "runs": used_runs, "n_evidence": len(rows),
                     "holdout": how, "fit": fit_doc, "lim": lim_doc, "evaluation": evaluation})
    return docs


def _echo_fit(fits: dict) -> None:
    """Per site: κ, effective and running clock, IPC, rate, how many tasks (and how many with
    counters), and the methods the evidence came from."""
    from resel.cli.common import Table, out
    from resel.safe_text import markup as m
    t = Table()
    for col in ("site", "κ", "clock_eff [GHz]", "IPC", "clock [GHz]", "rate [s/instr]", "tasks", "with perf",
                "methods"):
        t.add_column(m(col), justify="left" if col in ("site", "methods") else "right", no_wrap=col != "methods")
    for s, f in fits.items():
        t.add_row(m(s), _g(f["kappa"], ".3f"), _g(f["clock_ghz_eff"], ".3f"), _g(f["ipc"], ".2f"),
                  _g(f["clock_ghz"], ".2f"), _g(f["rate_s_per_instr"], ".4g"), str(f["n"]), str(f["n_counted"]),
                  m(", ".join(f"{k}×{v}" for k, v in f["methods"].items())))
    out.print(t)


def _echo_eval(ev: dict | None, holdout: str) -> None:
    """The held-out scores of uncalibrated LIM and of the fit, side by side."""
    if not ev:
        click.echo(f"held-out evaluation: none ({holdout})")
        return
    from resel.cli.common import Table, out
    from resel.safe_text import markup as m
    from resel.units import pick
    click.echo(f"held-out evaluation ({holdout}; {ev['n']} task(s)"
               + (f"; LIM fallback for {terminal(', '.join(ev['fallback']))}" if ev["fallback"] else "") + "):")
    unit = pick(v for name in ("lim", "calibrated") for v in (ev[name]["window_error_mean"], ev[name]["window_error_max"]))
    t = Table()
    for col in ("model", "MAPE [%]", "Kendall τ-b", unit.header("|Ŵ − W| mean"), unit.header("|Ŵ − W| max"),
                "sign errors"):
        t.add_column(m(col), justify="left" if col == "model" else "right")
    for name in ("lim", "calibrated"):
        sc = ev[name]
        t.add_row(name, _g(sc["mape"], ".1f"), _g(sc["tau_b"], ".2f"), unit.cell(sc["window_error_mean"]),
                  unit.cell(sc["window_error_max"]), str(sc["window_sign_errors"]))
    out.print(t)


@click.group("model")
def model_group() -> None:
    """Calibrate LIM per site from measured runs, and predict with it.

    A fit learns from the finished tasks of live runs (`resel run`); `resel model predict BAG
    --sites FILE` works before any (LIM alone). Without clusters of your own, the testbed
    gives a fit something to learn from in a few minutes:

    \b
      sudo scripts/testbed.sh up
      resel run examples/sleep-bag.toml --sites examples/sites-testbed.toml
      resel model fit && resel model show

    \b
    Example:
      resel model fit --holdout 0.25
      resel model show
      resel model predict examples/gromacs-bag.toml --sites examples/sites-thesis.toml
    """


@model_group.command("fit")
@db_option
@click.option("--runs", "runs_opt", default=None, help="Live runs to learn from, e.g. 1,2 (default: all).")
@click.option("--holdout", type=Finite(0, 1, max_open=True), default=0.25, show_default=True,
              help="Share held out for evaluation: the latest runs, or every k-th task of a single run.")
@click.option("--label", "baseline_label", default=None,
              help="Take the baseline instruction count from `resel profile --label` rows instead of the bag.")
@click.option("--application", default=None,
              help="Fit only this application (the program a bag's command runs, e.g. gmx); default: each found.")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True,
              help="Site clock uncalibrated LIM is scored with.")
@json_option
@fail_cleanly
def fit_cmd(db_path, runs_opt, holdout, baseline_label, application, clock, as_json) -> None:
    """Fit per site κ, effective clock, IPC and rate from finished live tasks; store the fit.

    One fit per application (the program the bags ran: gmx, sleep, …), since a rate folds in
    the program's IPC. Each site's fit keeps its evidence: runs, dates, and the leave-one-out
    residuals that give `resel model predict` and `resel plan` their runtime intervals.
    The stored fit uses all evidence; the held-out numbers come from a fit on the rest, beside
    uncalibrated LIM (site file clocks and κ), so the gain is visible.

    \b
    Example:
      resel model fit
      resel model fit --runs 3,4 --holdout 0.5 --json
      resel model fit --label water-2000 --db /tmp/r.db
    """
    runs = _runs_arg(runs_opt)
    docs = refit(_open(db_path), runs, holdout=holdout, baseline_label=baseline_label, clock=clock,
                 application=application)
    if as_json:
        click.echo(json.dumps(_clean({"fits": docs}), indent=2))
        return
    for doc in docs:
        click.echo(f"fit {doc['id']} of {doc['application'] or '?'} from {doc['n_evidence']} finished task(s) "
                   f"of run(s) {', '.join(map(str, doc['runs']))}")
        _echo_fit(doc["fit"])
        _echo_eval(doc["evaluation"], doc["holdout"])


@model_group.command("show")
@db_option
@click.option("--application", default=None, help="Only this application's latest fit.")
@json_option
@fail_cleanly
def show_cmd(db_path, application, as_json) -> None:
    """Print the latest fit of each application: per-site parameters, evidence, held-out scores.

    \b
    Example:
      resel model show
      resel model show --application gmx --json
    """
    rows = latest_fits(_open(db_path, write=False), application)
    if as_json:
        click.echo(json.dumps({"fits": rows}, indent=2))
        return
    for row in rows:
        click.echo(f"fit {row['id']} ({row['created']}) of {row['application'] or '? (made before fits were kept per application: not used)'}"
                   f" from {row['n_evidence']} task(s) of run(s) {', '.join(map(str, row['runs']))}"
                   + (f", baseline from profiles {row['baseline_label']!r}" if row["baseline_label"] else ""))
        _echo_fit(row["fit"])
        _echo_evidence(row["fit"])
        _echo_eval(row["evaluation"], row["holdout"])


def _echo_evidence(fits: dict) -> None:
    for s, f in fits.items():
        res = sorted(f.get("residuals") or [])
        if not res:
            continue
        from resel.models.runtime import quantile
        click.echo(f"  {s}: evidence {f.get('first') or '?'} to {f.get('last') or '?'}; residuals measured/predicted "
                   f"P5 {quantile(res, 0.05):.3f}, P50 {quantile(res, 0.5):.3f}, P95 {quantile(res, 0.95):.3f} "
                   f"(n={len(res)}, leave-one-out)")


@model_group.command("predict")
@click.argument("bag", type=click.Path(exists=True, dir_okay=False))
@click.option("--sites", "sites_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Sites file: predict for its sites, LIM from its clocks (default: the sites of the fits).")
@click.option("--model", "model", type=click.Choice(["auto", "lim", "fitted"]), default="auto", show_default=True,
              help="auto: the stored fit of the bag's application where one exists for the site, else LIM.")
@click.option("--level", type=Finite(0.5, 0.99), default=0.9, show_default=True,
              help="Prediction interval level (from the fit's residuals or the slots' clocks).")
@db_option
@json_option
@fail_cleanly
def predict_cmd(bag, sites_file, model, level, db_path, as_json) -> None:
    """T̂x of one task of BAG per site, with its prediction interval and uncalibrated LIM beside it.

    Each row says which model produced it (the fit's id and evidence, or LIM) and where its
    interval comes from; a site with nothing measured has no interval, and says so.

    \b
    Example:
      resel model predict examples/gromacs-bag.toml
      resel model predict examples/gromacs-bag.toml --sites examples/sites-testbed.toml --json
      resel model predict examples/sleep-bag.toml --model lim
    """
    from resel.models.lim import site_rates
    from resel.models import calibration as cal
    from resel.config import load_bag, load_sites
    from resel.domain import Clock, Site
    from resel.models.fitted import runtime_model, stored_fits
    db = _open(db_path, write=False)
    b = load_bag(bag)
    app = cal.application_of(b.command)
    if sites_file:
        site_list = load_sites(sites_file)
    else:
        fits = stored_fits(db, app)
        lim_rows = {}
        for row in (latest_fits(db, app) if fits else []):
            lim_rows.update(row["lim"] or {})
        names = sorted(set(fits) | set(lim_rows))
        if not names:
            raise ReselError(f"no model fit of application {app!r} in the store: give --sites FILE "
                             "(LIM from its clocks) or run `resel model fit` first")
        site_list = [Site(n, "slurm", 1, Clock(lim_rows.get(n, {}).get("clock_ghz") or 1.0),
                          kappa=lim_rows.get(n, {}).get("kappa") or 1.0) for n in names]
    from resel.config import LIVE_KINDS
    simulated = bool(sites_file) and all(s.kind not in LIVE_KINDS for s in site_list)
    rm = runtime_model(b, site_list, model=model, db=db, simulated_ads=simulated)
    instr = b.profile.instructions
    lim = site_rates(site_list, "base")
    out = []
    for s in site_list:
        r = rm.sites[s.name]
        d = r.as_dict(instr, level)
        out.append({"site": s.name, "tx": d["tx"], "tx_interval": d["tx_interval"], "lim_tx": lim[s.name].tx(instr),
                    "source": r.source, "detail": r.detail, "spread": r.spread or None, "n_ratios": len(r.ratios),
                    "interval_ok": r.enough(level) if r.ratios else None})
    if as_json:
        click.echo(json.dumps(_clean({"bag": b.name, "application": app, "instructions": instr, "model": model,
                                      "used": rm.used, "level": level, "notes": rm.notes, "sites": out}), indent=2))
        return
    from resel.cli.common import Table
    from resel.cli.common import out as console
    from resel.safe_text import markup as m
    from resel.units import pick
    click.echo(f"{terminal(b.name)} ({terminal(app)}): {instr:.4g} instructions per task — {terminal(rm.summary())}")
    unit = pick(v for r in out for v in (r["tx"], r["lim_tx"], *(r["tx_interval"] or ())))
    t = Table()
    for col in ("site", unit.header("T̂x"), unit.header(f"{level:.0%} interval"), unit.header("LIM"), "model"):
        t.add_column(m(col), justify="left" if col in ("site", "model") else "right")
    notes = []
    for r in out:
        iv = r["tx_interval"]
        iv_text = f"{unit.cell(iv[0])}–{unit.cell(iv[1])}" if iv else "— (nothing measured)"
        t.add_row(m(r["site"]), unit.cell(r["tx"]), iv_text, unit.cell(r["lim_tx"]),
                  "fit" if r["source"] == "fit" else "LIM")
        notes.append(f"{r['site']}: {r['detail']}" + (f"; interval from {r['spread']}" if r["spread"] else "")
                     + ("" if r["interval_ok"] in (None, True) else " (too few for the interval's ranks)"))
    console.print(t)
    for n in notes + list(rm.notes):
        click.echo(f"  {terminal(n)}")
