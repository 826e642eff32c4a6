"""``resel history``: import past queue waits per site and show the wait bounds they give.

Thin wrappers over :mod:`resel.models.history`; the waits live in the run store's
``wait_history`` table, beside resel's own pilots (``live_pilots``), which are read too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from resel.cli.common import Table   # rich, imported on first use
from resel.cli.common import fail_cleanly as _fail_cleanly
from resel.cli.common import COUNT, CORES, Finite, json_option, out
from resel.cli.common import print_json as _print_json
from resel.errors import ReselError
from resel.safe_text import markup as m
from resel.safe_text import terminal
from resel.units import pick

db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Run store (default: $RESEL_DB or ~/.local/share/resel/resel.db).")
_unit = Finite(0, 1, min_open=True, max_open=True)


@click.group("history", context_settings={"help_option_names": ["-h", "--help"]})
def history_group() -> None:
    """Queue waits of past jobs per site, and the wait bounds they give.

    A bound says: with CONFIDENCE, at least QUANTILE of jobs of this shape start within B.
    It is distribution-free (QBETS: an order statistic of the past waits) and follows a queue
    whose behaviour shifts (a run of waits over the bound cuts the history to the new regime).
    Waits are grouped by site and shape class (cores in power-of-two buckets, requested
    walltime in ≤1h/≤4h/≤12h/≤24h/>24h buckets); a 95 % bound at 95 % confidence needs 59 waits
    in a group, and a thin class falls back to the site's jobs of the same cores, then to all.

    Resel's own pilots count automatically; import a site's accounting for a richer history.

    \b
    Example:
      ssh mycluster "SLURM_TIME_FORMAT=%s sacct -a -X -P -S now-30days \\
        -o JobID,State,Submit,Start,AllocCPUS,TimelimitRaw,Partition" > sacct.txt
      resel history import --site mycluster --sacct sacct.txt
      resel history show --site mycluster
      resel history show --site mycluster --cores 4 --walltime 7200
    """


def _site_name(value: str) -> str:
    """A site's name as a sites file accepts it: the waits of ``--site ""`` (or of a name with a
    newline) were stored under a name no sites file can give, so no plan would ever use them."""
    from resel.config import _CONTROL
    if not value or _CONTROL.search(value):
        raise click.BadParameter(f"{value!r}: give the site's name as in the sites file (not empty, no control "
                                 "characters)")
    return value


@history_group.command("import", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--site", required=True, callback=lambda _ctx, _param, value: _site_name(value),
              help="Site name the waits belong to (as in the sites file).")
@click.option("--sacct", "sacct_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Saved sacct output: `sacct --json`, `sacct -P` with its header line, or a recorded "
                   "command {command, stdout}. The kind is detected from the content.")
@click.option("--swf", "swf_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A Standard Workload Format trace (field 3 = wait, 9 = requested time).")
@click.option("--limit", type=COUNT, default=None, help="SWF: import at most N jobs.")
@click.option("--cores-if-unknown", "default_cores", type=CORES, default=None,
              help="sacct: cores to assume for jobs without a CPU column (default: skip them).")
@db_option
@json_option
@_fail_cleanly
def import_cmd(site, sacct_file, swf_file, limit, default_cores, db_path, as_json) -> None:
    """Read the waits of the jobs that started from a sacct reply or an SWF trace, and store them.

    Importing the same file again adds nothing (jobs are keyed by site, source and job id).
    Jobs that never started, or lack a submit/start time, are skipped and counted.

    \b
    Example:
      resel history import --site mycluster --sacct sacct.txt
      resel history import --site seth --swf examples/traces/hpc2n.swf --limit 5000 --json
    """
    from resel.models import history as wh
    from resel.store import default_path, open_store
    if (sacct_file is None) == (swf_file is None):
        raise click.UsageError("give exactly one of --sacct FILE or --swf FILE")
    db = open_store(db_path)    # a store that cannot take the waits fails before the file is read
    if sacct_file is not None:
        got = wh.records_from_sacct_file(sacct_file, site, default_cores=default_cores)
    else:
        got = wh.records_from_swf(swf_file, site, limit=limit)
    new = wh.save_records(db, got.records)
    if as_json:
        _print_json({"site": site, "file": str(sacct_file or swf_file), "read": len(got.records), "new": new,
                     "skipped": dict(got.skipped)})
        return
    click.echo(terminal(f"{site}: {got.describe()}; {new} new, {len(got.records) - new} already stored "
                        f"(in {db_path or default_path()})"))


@history_group.command("show", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--site", default=None, help="Only this site (default: every site with history).")
@click.option("--cores", type=CORES, default=None,
              help="Bound for a job of this many cores (with --walltime: of that shape).")
@click.option("--walltime", type=Finite(min=0, min_open=True, max=1e12), default=None,
              help="Requested walltime in seconds of the job to bound (needs --cores).")
@click.option("--quantile", type=_unit, default=0.95, show_default=True,
              help="Share of jobs that should start within the bound.")
@click.option("--confidence", type=_unit, default=0.95, show_default=True,
              help="Probability that the bound really covers that share.")
@click.option("--alarm", type=_unit, default=0.01, show_default=True,
              help="A run of waits over the bound this unlikely under a stable queue is a change point.")
@db_option
@json_option
@_fail_cleanly
def show_cmd(site, cores, walltime, quantile, confidence, alarm, db_path, as_json) -> None:
    """Per site and shape class: history size, median wait, bound, change points.

    With --cores (and --walltime), one bound per site for a job of that shape, with the group
    it came from and, when there is none, why.

    \b
    Example:
      resel history show
      resel history show --site seth --quantile 0.9
      resel history show --cores 4 --walltime 7200 --json
    """
    from resel.models import history as wh
    from resel.models.qbets import min_history
    from resel.store import default_path, open_store
    if walltime is not None and cores is None:
        raise click.UsageError("--walltime needs --cores: the bound is for a job shape")
    history = wh.load_history(open_store(db_path, write=False), site)
    if not len(history):
        where = f" for {site}" if site else ""
        raise ReselError(f"no wait history{where} in {db_path or default_path()}",
                         hint="import some with `resel history import --site NAME --sacct FILE` (or --swf FILE)")
    head = (f"{quantile * 100:g} % bound at {confidence * 100:g} % confidence "
            f"(needs ≥ {min_history(quantile, confidence)} waits per group)")
    if cores is not None:
        bounds = [history.bound(s, cores, walltime, quantile, confidence, alarm)
                  for s in ([site] if site else history.sites())]
        if as_json:
            _print_json({"cores": cores, "walltime": walltime, "bounds": [b.as_dict() for b in bounds]})
            return
        shape = wh.shape_class(cores, walltime) if walltime is not None else f"{wh.cores_class(cores)}c, any walltime"
        unit = pick(b.seconds for b in bounds)
        t = Table(title=f"{head}, {cores}-core job ({m(shape)})", title_justify="left")
        for col in ("site", unit.header("bound"), "from", "waits used", "change points", "note"):
            t.add_column(m(col), justify="left" if col in ("site", "from", "note") else "right")
        for b in bounds:
            t.add_row(m(b.site), unit.cell(b.seconds), m(f"{b.group} ({b.level})") if b.level else "—", str(b.n),
                      str(b.change_points), m(b.reason))
        out.print(t)
        return
    rows = history.summary(site, quantile, confidence, alarm)
    if as_json:
        _print_json({"quantile": quantile, "confidence": confidence, "alarm": alarm,
                     "classes": [r.as_dict() for r in rows]})
        return
    unit = pick(v for r in rows for v in (r.median_wait, r.bound))
    t = Table(title=head, title_justify="left")
    for col in ("site", "shape", "waits", unit.header("median wait"), unit.header("bound"), "waits used",
                "change points"):
        t.add_column(m(col), justify="left" if col in ("site", "shape") else "right")
    for r in rows:
        t.add_row(m(r.site), m(r.shape), str(r.n), unit.cell(r.median_wait), unit.cell(r.bound), str(r.used),
                  str(r.change_points))
    out.print(t)


@history_group.command("fetch", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Sites file with live Slurm sites; each one's accounting is asked.")
@click.option("--days", type=Finite(min=0, min_open=True, max=36500), default=30.0, show_default=True,
              help="How far back to read (sacct -S).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Run store (default: $RESEL_DB or ~/.local/share/resel/resel.db).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@_fail_cleanly
def fetch_cmd(sites_file: Path, days: float, db_path: Path | None, as_json: bool) -> None:
    """Read every user's recent jobs from each live Slurm site's accounting (sacct -a -X) and
    store their waits — what `import --sacct` does with a file, without the file.

    A site without accounting (AccountingStorageType=none), of another kind, or unreachable is
    listed with the reason; the others are imported.

    \b
    Example:
      resel history fetch --sites my-sites.toml --days 14
    """
    from resel.models import history as wh
    import time

    from resel.backends.connect import close_quietly, open_site
    from resel.config import LIVE_KINDS, load_sites
    from resel.store import open_store
    site_list = load_sites(sites_file)
    if all(s.kind not in LIVE_KINDS for s in site_list):
        from resel.cli.common import live_sites_from
        live_sites_from(sites_file, "resel history fetch")     # raises, saying what to type instead
    db = open_store(db_path)
    rows = []
    for site in site_list:
        row: dict[str, Any] = {"site": site.name, "read": 0, "new": 0, "skipped": {}, "problem": None}
        ps = None
        try:
            if site.kind != "slurm" or site.access is None or site.access.api != "cli":
                raise ReselError(f"only live Slurm sites through the CLI keep a history resel can read "
                                 f"(this one is {site.kind}); import a file with `resel history import`")
            ps = open_site(site)
            jobs = ps.scheduler.history(time.time() - days * 86400)
            if not jobs and ps.scheduler.accounting_enabled is False:
                raise ReselError("the site keeps no accounting (sacct: accounting storage is disabled)")
            got = wh.records_from_jobs(jobs, site.name, origin=f"sacct on {site.name}")
            row.update(read=len(got.records), new=wh.save_records(db, got.records), skipped=dict(got.skipped))
        except Exception as exc:   # noqa: BLE001 - one row per site; the others go on
            row["problem"] = str(exc).strip() or type(exc).__name__
        finally:
            close_quietly(ps)
        rows.append(row)
    failed = [r["site"] for r in rows if r["problem"]]
    problem = f"{len(failed)} of {len(rows)} site(s) imported nothing: {', '.join(failed)}" if failed else None
    hint = "each site's line says why; `resel history import --site NAME --sacct FILE` reads a saved sacct reply"
    if as_json:
        if problem:
            from resel.cli.common import fail_json
            fail_json({"days": days, "sites": rows}, problem, hint)
        _print_json({"days": days, "sites": rows})
        return
    for r in rows:
        if r["problem"]:
            click.echo(terminal(f"{r['site']}: nothing imported — {r['problem']}"))
        else:
            click.echo(terminal(f"{r['site']}: {r['read']} wait(s) read, {r['new']} new"
                                + (f", skipped {r['skipped']}" if r["skipped"] else "")))
    if problem:
        raise ReselError(problem, hint=hint)


@history_group.command("learn", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--site", required=True, help="Site name the errors belong to (as in the sites file).")
@click.option("--swf", "swf_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), required=True,
              help="The site's workload trace (SWF) with recorded waits.")
@click.option("--cores", type=CORES, default=None,
              help="The machine's cores (default: the trace header's MaxProcs, else its .machines file).")
@click.option("--policy", type=click.Choice(["fcfs", "easy", "easy-sjbf", "conservative"]), default="easy",
              show_default=True, help="The policy the twin and the scheduler's estimate model the queue with.")
@db_option
@json_option
@_fail_cleanly
def learn_cmd(site, swf_file, cores, policy, db_path, as_json) -> None:
    """Learn how wrong the twin's and the scheduler's start estimates are on a site, from its
    trace: every job's estimate at its submission (the queue rebuilt from the trace) against its
    recorded wait. `resel plan` then corrects those estimates with these errors (per shape class)
    and shows the wait's P50/P90 instead of a point.

    \b
    Example:
      resel history learn --site seth --swf ../shared/data/swf/hpc2n.swf
      resel history learn --site meta --swf ../shared/data/swf/wagap-2013.swf --json
    """
    from resel.sim import finish_eval as fe
    from resel.sim import wait_eval as we
    from resel.models.conditioned import save_errors
    from resel.store import open_store
    from resel.sim.swf import Trace
    from resel.sim.swf import site_cores
    trace = Trace(swf_file)
    cores = cores or site_cores(swf_file, trace.header)[0]
    if not cores:
        raise ReselError(f"{swf_file}: the header names no MaxProcs and there is no {swf_file.name}.machines "
                         "beside it", hint="give the site's cores with --cores N")
    jobs = we.load_recorded(trace, cores)
    probes = fe.recorded_probes(jobs, policy, cores, warmup=0.0)
    rows = [{"site": site, "source": src, "origin": f"swf:{swf_file.name}", "job": k, "cores": p.shape.cores,
             "walltime": p.shape.walltime, "estimate": p.estimates[src], "real": p.real, "submit": p.at}
            for k, p in enumerate(probes) for src in ("twin", "scheduler") if p.estimates.get(src) is not None]
    n = save_errors(open_store(db_path), rows)
    sizes = {src: error_sizes([r["real"] - r["estimate"] for r in rows if r["source"] == src])
             for src in ("twin", "scheduler")}
    doc = {"site": site, "trace": str(swf_file), "cores": cores, "policy": policy, "jobs": len(probes), "errors": n,
           "sizes": sizes}
    if as_json:
        _print_json(doc)
        return
    out.print(f"{m(site)}: {n:,} errors of the twin's and the scheduler's start estimates stored, from "
              f"{len(probes):,} jobs of {m(swf_file.name)} ({cores:,} cores, {policy} model); `resel plan` now "
              "shows each wait there as P50/P90")
    unit = pick(v for d in sizes.values() for v in (d["p10"], d["p90"], d["mean_abs"]))
    t = Table(title="error = recorded wait − estimate (positive: the job waited longer than estimated)",
              title_justify="left")
    for col in ("estimate", "errors", unit.header("P10"), unit.header("median"), unit.header("P90"),
                unit.header("mean |error|"), "within ±10 min"):
        t.add_column(m(col), justify="left" if col == "estimate" else "right")
    for src, d in sizes.items():
        t.add_row(src, f"{d['n']:,}", unit.cell(d["p10"]), unit.cell(d["p50"]), unit.cell(d["p90"]),
                  unit.cell(d["mean_abs"]), "—" if d["within_10min"] is None else f"{d['within_10min']:.0%}")
    out.print(t)


def error_sizes(errors: list[float]) -> dict:
    """How large the errors of one estimate are: count, P10/median/P90 (type-7 quantiles, as
    :func:`statistics.quantiles` with ``method="inclusive"``), mean absolute error and the share
    within ±10 minutes (the start-hit window of docs/calibration.md); None where there are none."""
    import statistics
    if not errors:
        return {"n": 0, "p10": None, "p50": None, "p90": None, "mean_abs": None, "within_10min": None}
    qs = statistics.quantiles(errors, n=10, method="inclusive") if len(errors) > 1 else [errors[0]] * 9
    return {"n": len(errors), "p10": qs[0], "p50": statistics.median(errors), "p90": qs[8],
            "mean_abs": statistics.fmean(abs(e) for e in errors),
            "within_10min": sum(abs(e) <= 600 for e in errors) / len(errors)}


def register(cli: click.Group) -> None:
    """Add ``resel history`` to a group (tests/test_imports.py checks ``resel.cli.COMMANDS``
    against it)."""
    cli.add_command(history_group)
