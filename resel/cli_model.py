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

from resel.cli_common import Finite
from resel.errors import ModelError, ReselError
from resel.models import calibration as cal
from resel.models.lim import SiteRate, site_rates
from resel.safe_text import terminal
from resel.store import _clean, open_store, stored_json

db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Run store (default: $RESEL_DB or ~/.local/share/resel/resel.db).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")


def _open(db_path, write: bool = True):
    return open_store(db_path, write=write)   # migrations create model_fits


def _runs_arg(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of run ids", param_hint="--runs") from None


def _g(v: float | None, fmt: str = ".4g") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def latest_fit(db) -> dict:
    """The newest ``model_fits`` row, decoded. Raises ReselError when there is none."""
    rows = list(db.query("select * from model_fits order by id desc limit 1"))
    if not rows:
        raise ReselError("no model fit in the store: run `resel model fit` first")
    row = dict(rows[0])
    for k in ("runs", "fit", "lim", "evaluation"):
        row[k] = stored_json(row[k], f"model_fits.{k} of fit {row['id']}")
    return row


def _echo_fit(fits: dict) -> None:
    click.echo(f"{'site':<16}{'kappa':>8}{'clock_eff GHz':>15}{'IPC':>8}{'f GHz':>8}{'s/instr':>12}{'n':>6}"
               f"{'perf':>6}  methods")
    for s, f in fits.items():
        click.echo(f"{terminal(s):<16}{_g(f['kappa'], '.3f'):>8}{_g(f['clock_ghz_eff'], '.3f'):>15}{_g(f['ipc'], '.2f'):>8}"
                   f"{_g(f['clock_ghz'], '.2f'):>8}{_g(f['rate_s_per_instr'], '.4g'):>12}{f['n']:>6}"
                   f"{f['n_counted']:>6}  {', '.join(f'{k}×{v}' for k, v in f['methods'].items())}")


def _echo_eval(ev: dict | None, holdout: str) -> None:
    if not ev:
        click.echo(f"held-out evaluation: none ({holdout})")
        return
    click.echo(f"held-out evaluation ({holdout}; {ev['n']} task(s)"
               + (f"; LIM fallback for {terminal(', '.join(ev['fallback']))}" if ev["fallback"] else "") + "):")
    click.echo(f"  {'':<12}{'MAPE %':>10}{'tau-b':>8}{'|W^-W| mean s':>15}{'max s':>10}{'sign errors':>13}")
    for name in ("lim", "calibrated"):
        s = ev[name]
        click.echo(f"  {name:<12}{_g(s['mape'], '.1f'):>10}{_g(s['tau_b'], '.2f'):>8}"
                   f"{_g(s['window_error_mean'], '.3g'):>15}{_g(s['window_error_max'], '.3g'):>10}"
                   f"{s['window_sign_errors']:>13}")


@click.group("model")
def model_group() -> None:
    """Calibrate LIM per site from measured runs, and predict with it.

    \b
    Example:
      resel model fit --holdout 0.25
      resel model show
      resel model predict examples/gromacs-bag.toml
    """


@model_group.command("fit")
@db_option
@click.option("--runs", "runs_opt", default=None, help="Live runs to learn from, e.g. 1,2 (default: all).")
@click.option("--holdout", type=Finite(0, 1, max_open=True), default=0.25, show_default=True,
              help="Share held out for evaluation: the latest runs, or every k-th task of a single run.")
@click.option("--label", "baseline_label", default=None,
              help="Take the baseline instruction count from `resel profile --label` rows instead of the bag.")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True,
              help="Site clock uncalibrated LIM is scored with.")
@json_option
def fit_cmd(db_path, runs_opt, holdout, baseline_label, clock, as_json) -> None:
    """Fit per site κ, effective clock, IPC and rate from finished live tasks; store the fit.

    The stored fit uses all evidence; the held-out numbers come from a fit on the rest, beside
    uncalibrated LIM (site file clocks and κ), so the gain is visible.

    \b
    Example:
      resel model fit
      resel model fit --runs 3,4 --holdout 0.5 --json
      resel model fit --label water-2000 --db /tmp/r.db
    """
    runs = _runs_arg(runs_opt)
    try:
        db = _open(db_path)
        evidence = cal.load_evidence(db, runs, baseline_label=baseline_label)
        fits = cal.fit(evidence)
        lim = cal.lim_rates_from_runs(db, runs, clock)
        train, test, how = cal.split(evidence, holdout)
        evaluation = None
        if test and lim:
            try:
                evaluation = cal.evaluate(cal.fit(train), test, lim)
            except ModelError as exc:
                how += f" — not evaluated: {exc}"
    except ReselError as exc:
        raise click.ClickException(str(exc)) from None
    fit_doc = {s: f.as_dict() for s, f in fits.items()}
    lim_doc = {s: {"kappa": r.kappa, "clock_ghz": r.clock_ghz} for s, r in lim.items()}
    used_runs = sorted({e.run_id for e in evidence})
    row_id = db["model_fits"].insert({
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": json.dumps(used_runs), "holdout": how, "baseline_label": baseline_label,
        "n_evidence": len(evidence), "fit": json.dumps(_clean(fit_doc)), "lim": json.dumps(lim_doc),
        "evaluation": json.dumps(_clean(evaluation)) if evaluation else None}).last_pk
    if as_json:
        click.echo(json.dumps(_clean({"id": row_id, "runs": used_runs, "n_evidence": len(evidence), "holdout": how,
                                      "fit": fit_doc, "lim": lim_doc, "evaluation": evaluation}), indent=2))
        return
    click.echo(f"fit {row_id} from {len(evidence)} finished task(s) of run(s) {', '.join(map(str, used_runs))}")
    _echo_fit(fit_doc)
    _echo_eval(evaluation, how)


@model_group.command("show")
@db_option
@json_option
def show_cmd(db_path, as_json) -> None:
    """Print the latest fit: per-site parameters, evidence counts and methods, held-out scores.

    \b
    Example:
      resel model show
      resel model show --json
    """
    try:
        row = latest_fit(_open(db_path, write=False))
    except ReselError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(row, indent=2))
        return
    click.echo(f"fit {row['id']} ({row['created']}) from {row['n_evidence']} task(s) of run(s) "
               f"{', '.join(map(str, row['runs']))}"
               + (f", baseline from profiles {row['baseline_label']!r}" if row["baseline_label"] else ""))
    _echo_fit(row["fit"])
    _echo_eval(row["evaluation"], row["holdout"])


@model_group.command("predict")
@click.argument("bag", type=click.Path(exists=True, dir_okay=False))
@click.option("--sites", "sites_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Sites file: predict for its sites, LIM from its clocks (default: the sites of the fit).")
@db_option
@json_option
def predict_cmd(bag, sites_file, db_path, as_json) -> None:
    """T̂x of one task of BAG per site from the latest fit, with uncalibrated LIM beside it.

    Sites without a fit fall back to LIM and are marked so.

    \b
    Example:
      resel model predict examples/gromacs-bag.toml
      resel model predict examples/gromacs-bag.toml --sites examples/sites-testbed.toml --json
    """
    from resel.config import load_bag, load_sites
    try:
        row = latest_fit(_open(db_path, write=False))
        b = load_bag(bag)
        if sites_file:
            lim = site_rates(load_sites(sites_file), "base")
        else:
            lim = {s: SiteRate(s, d["kappa"], d["clock_ghz"]) for s, d in row["lim"].items()}
    except ReselError as exc:
        raise click.ClickException(str(exc)) from None
    fits = {s: cal.SiteFit.from_dict(d) for s, d in row["fit"].items()}
    names = list(lim) if sites_file else sorted(set(fits) | set(lim))
    instr = b.profile.instructions
    out = []
    for s in names:
        calibrated = fits[s].tx(instr) if s in fits else (lim[s].tx(instr) if s in lim else None)
        out.append({"site": s, "tx": calibrated, "lim_tx": lim[s].tx(instr) if s in lim else None,
                    "source": "fit" if s in fits else "LIM (no fit)"})
    if as_json:
        click.echo(json.dumps(_clean({"bag": b.name, "instructions": instr, "fit_id": row["id"], "sites": out}),
                              indent=2))
        return
    click.echo(f"{terminal(b.name)}: {instr:.4g} instructions per task (fit {row['id']})")
    click.echo(f"{'site':<16}{'T^x s':>12}{'LIM s':>12}  source")
    for r in out:
        click.echo(f"{terminal(r['site']):<16}{_g(r['tx'], '.4g'):>12}{_g(r['lim_tx'], '.4g'):>12}  {r['source']}")
