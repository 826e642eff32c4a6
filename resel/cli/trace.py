"""``resel replay``: replay a workload trace on one simulated batch site."""

from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path
from typing import Any

import click

from resel.cli.common import COUNT, CORES, Finite
from resel.errors import ReselError
from resel.outputs import create, refuse_inputs
from resel.safe_text import terminal
from resel.sim.policies import POLICIES

# The replay and the SWF reader are imported when the command runs (`resel --help` loads this
# module to show its one-line help).


@click.command("replay")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--policy", type=click.Choice(list(POLICIES)), default="easy", show_default=True,
              help="The site's batch policy.")
@click.option("--cores", type=CORES, default=None,
              help="Cores of the site (default: the trace header's MaxProcs, else the TRACE.machines file "
                   "beside it, as wagap's and jaros' traces have).")
@click.option("--speed", type=Finite(min=1e-6, max=1e6), default=1.0, show_default=True,
              help="Site speed relative to the trace's machine: runs and requests are divided by it.")
@click.option("--kill/--no-kill", default=False, show_default=True,
              help="Kill jobs at their requested walltime (default: raise the request to the run).")
@click.option("--first", "first_n", type=COUNT, default=None, help="Replay only the first N jobs.")
@click.option("--status", "statuses", default=None,
              help="Keep only jobs with these SWF status codes, e.g. 1 or 0,1 (default: all).")
@click.option("--tau", "taus", default="10,60", show_default=True,
              help="Bounded-slowdown thresholds in seconds, comma-separated.")
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (and report how many) instead of stopping.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the simulated schedule as SWF (field 3 = simulated wait).")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON document.")
def replay_cmd(trace: Path, policy: str, cores: int | None, speed: float, kill: bool, first_n: int | None,
               statuses: str | None, taus: str, skip_bad: bool, output: Path | None, as_json: bool) -> None:
    """Replay TRACE (SWF) on one simulated site and summarise wait, response and slowdown.

    Jobs arrive at their submit times and are scheduled by the chosen policy seeing only their
    requested times; the metrics are mean, median, P95 and IQR over jobs, with bounded
    slowdown at τ = 10 s and 60 s.

    \b
    Example:
      resel replay ../shared/data/swf/hpc2n.swf --policy conservative --output hpc2n-cbf.swf
      resel replay ../shared/data/swf/wagap-2013.swf --policy easy-sjbf --first 5000 --json
    """
    from resel.cli.common import err
    from resel.cli.common import fail_cleanly as _fail_cleanly, print_json as _print_json
    from resel.sim.replay import replay
    from resel.sim.swf import read_swf, write_schedule
    from resel.sim.swf import site_cores as site_cores_of

    tau_values = _taus(taus)

    @_fail_cleanly
    def run() -> None:
        skipped_lines: list[tuple[int, str]] = []
        source = read_swf(trace, skip_bad=skip_bad, on_skip=lambda n, why: skipped_lines.append((n, why)))
        site_cores, cores_from = (cores, "--cores") if cores else site_cores_of(trace, source.header)
        if not site_cores:
            raise ReselError(f"{trace}: the header gives no MaxProcs and there is no {trace.name}.machines "
                             "beside it", hint="say how many cores the site has with --cores N")
        keep = _statuses(statuses)
        sink = _open_output(output, trace) if output else None
        schedule: list | None = None
        try:
            on_scheduled = None
            if sink is not None:
                on_scheduled, schedule = _start_output(sink, source.header, f"--policy {policy} --cores {site_cores} "
                                                       f"--speed {speed:g}{' --kill' if kill else ''}", skip_bad)
            # a spinner on a terminal only: elsewhere rich is not even imported (start-up)
            show = sys.stderr.isatty()
            with err.status("replaying…") if show else contextlib.nullcontext() as status:
                def progress(n: int) -> None:
                    status.update(f"replaying… {n:,} jobs read")
                # the Trace itself, filters as arguments: replay() then reads it by its fast reader
                result = replay(source, policy, site_cores, speed=speed, kill=kill, on_scheduled=on_scheduled,
                                taus=tau_values, first=first_n, statuses=keep, schedule=schedule,
                                on_progress=progress if show else None, trace_name=str(trace))
            if not result.summary()["jobs"]:    # nothing replayed is no summary (it printed dashes and exited 0)
                filters = [f for f, on in (("--first", first_n), ("--status", statuses), ("--skip-bad", skip_bad)) if on]
                left = f" left by {', '.join(filters)}" if filters else ""
                raise ReselError(f"{trace}: no job to replay (the trace has none{left}, or none that can run on "
                                 f"{site_cores:,} cores)", hint="give an SWF trace with jobs, or other filters")
            if schedule is not None:
                write_schedule(source, sink, schedule, keep)
        except BaseException:
            if sink is not None:
                sink.discard()          # a failed replay leaves an existing --output file as it was
            raise
        if sink is not None:
            sink.close()                # the schedule, renamed over --output
        summary = result.summary()
        summary.update({"trace": str(trace), "speed": speed, "kill": kill, "skipped_bad_lines": len(skipped_lines),
                        "output": str(output) if output else None, "cores_from": cores_from})
        if as_json:
            _print_json(summary)
            return
        _print_summary(summary)
        if skipped_lines:
            click.echo(terminal(f"skipped {len(skipped_lines)} malformed line(s), first at line "
                                f"{skipped_lines[0][0]}: {skipped_lines[0][1]}"), err=True)

    run()


def _taus(taus: str) -> tuple[float, ...]:
    """``--tau``'s bounded-slowdown thresholds: seconds > 0, comma-separated."""
    try:
        tau_values = tuple(float(t) for t in taus.split(",") if t.strip())
    except ValueError:
        raise click.BadParameter(f"{taus!r}: give seconds separated by commas, e.g. 10,60", param_hint="--tau") from None
    if not tau_values or any(not 0 < t < float("inf") for t in tau_values):
        raise click.BadParameter("give one or more thresholds > 0, e.g. 10,60", param_hint="--tau")
    return tau_values


def _statuses(statuses: str | None) -> set[int] | None:
    """``--status``'s SWF status codes (None: every job)."""
    if not statuses:
        return None
    try:
        return {int(s) for s in statuses.split(",") if s.strip()}
    except ValueError:
        raise click.BadParameter(f"{statuses!r}: give status codes such as 1 or 0,1", param_hint="--status") from None


def _start_output(sink: Any, trace_header: Any, options: str, skip_bad: bool) -> tuple[Any, list | None]:
    """Write the ``--output`` schedule's header (the trace's, noting how it was simulated: ``options``)
    and say how its jobs will follow: with ``skip_bad``, a writer the replay hands each job to as
    it reads it (the lines skipped are known only to the reader); else a list the replay fills with
    each job's (wait, run) by position, the trace's lines copied with them afterwards. Returns
    ``(on_scheduled, schedule)``, one of them None."""
    from resel.sim.swf import Header, write_swf
    header = Header(fields=dict(trace_header.fields), comments=list(trace_header.comments))
    header.comments.append(f"; Note: simulated schedule by resel replay {options}; "
                           "field 3 = simulated wait, field 4 = simulated run")
    write_swf(sink, [], header)
    if skip_bad:
        return _schedule_writer(sink), None
    return None, []


def _schedule_writer(sink):
    """``on_scheduled`` for :func:`replay`: each job's SWF line with the simulated wait and run
    (fields 3 and 4), written as it comes, without copying its record."""
    from resel.sim.swf import schedule_line
    write = sink.write

    def scheduled(job, wait: float, run: float) -> None:
        write(schedule_line(job, wait, run) + "\n")
    return scheduled


def _open_output(output: Path, trace: Path):
    """Open the schedule file (0600 if new), refusing to overwrite the trace being read."""
    refuse_inputs(output, "--output", [("the trace being replayed", trace)])
    return create(output, "w", option="--output")


def _print_summary(s: dict) -> None:
    """The replay's summary as plain text (no rich: its import would be a third of a wagap
    replay), one time unit for the table's waits and responses, named in the header."""
    from resel.units import pick, plain_table, span
    skipped = s["skipped_too_large"] + s["skipped_unknown_runtime"]
    lines = [f"{s['trace']}: {s['jobs']:,} jobs on {s['cores']:,} cores (from {s['cores_from']}), policy {s['policy']}, "
             f"speed {s['speed']:g}",
             f"utilisation {s['utilisation']:.1%}, killed {s['killed']}, makespan {span(s['makespan'])}"]
    unit = pick(s[key][k] for key in ("wait", "response") for k in ("mean", "median", "p95", "iqr", "max"))
    rows = [(unit.header("wait"), "wait", unit.cell), (unit.header("response"), "response", unit.cell),
            ("slowdown", "slowdown", _ratio)]
    rows += [(f"bounded slowdown, τ = {k[5:]} s", k, _ratio) for k in s if k.startswith("bsld_")]
    estimators = ("mean", "median", "p95", "iqr", "max")
    lines.append(plain_table(["metric", "mean", "median", "P95", "IQR", "max"],
                             [[label] + [fmt(s[key][e]) for e in estimators] for label, key, fmt in rows]))
    if skipped:
        lines.append(f"not replayed: {s['skipped_too_large']} job(s) larger than the site, "
                     f"{s['skipped_unknown_runtime']} with unknown run time or size")
    if s["output"]:
        lines.append(f"schedule written to {s['output']}")
    click.echo(terminal("\n".join(lines)))


def _ratio(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:,.2f}"
