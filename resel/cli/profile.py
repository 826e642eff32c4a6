"""``resel profile``: measure a command's instructions, clock and times, and store them for LIM."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING

import click

from resel.cli.common import Table   # rich, imported on first use
from resel.errors import ReselError
from resel.cli.common import Finite, db_option, fail_cleanly, fail_json, json_option, out
from resel.json_safe import clean as _clean
from resel.safe_text import markup as m

if TYPE_CHECKING:
    from resel.probes.profile import ProfileSummary

# The profilers and the store (sqlite_utils) are imported when the command runs.

#: each figure's name in the table, its unit in brackets (the stored column names end in _s, _ghz)
_LABELS = {"instructions": "instructions", "cycles": "cycles", "ipc": "IPC", "task_clock_s": "task-clock [s]",
           "avg_ghz": "average clock [GHz]", "wall_s": "wall time [s]"}


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4g}"


def _table(summary: ProfileSummary) -> Table:
    cpu = summary.cpu
    clocks = ", ".join(f"{name} clock {getattr(cpu, k):.3f} GHz ({cpu.methods.get(k)})"
                       for k, name in (("base_ghz", "base"), ("max_ghz", "max")) if getattr(cpu, k) is not None)
    t = Table(title=m(f"{summary.label} — {len(summary.runs)} run(s) on {summary.host}: {cpu.model or '?'}; "
                      f"{clocks or 'clocks unknown'}"), title_justify="left")
    t.add_column("figure")
    t.add_column("mean", justify="right")
    t.add_column("± std", justify="right")
    t.add_column("n", justify="right")
    t.add_column("method")
    for name, s in summary.stats.items():
        t.add_row(m(_LABELS.get(name, name)), _fmt(s.mean), _fmt(s.std), str(s.n), m(s.method or "not measured"))
    statuses = sorted({r.exit_status for r in summary.runs}, key=lambda x: (x is None, x))
    t.caption = f"exit status: {', '.join(str(s) for s in statuses)}"
    return t


@click.command("profile", context_settings={"ignore_unknown_options": True})
@click.option("--repeat", type=click.IntRange(1, 10_000), default=1, show_default=True, help="Runs of the command.")
@click.option("--label", default=None, help="Name stored with the runs (default: the command line).")
@click.option("--reduced", default=None,
              help="A smaller problem for callgrind when perf cannot count instructions, as one "
                   "quoted command line (split like a shell would, but never run by one).")
@click.option("--scale", type=Finite(min=0, min_open=True, max=1e12), default=None,
              help="instructions(full) = instructions(--reduced) × SCALE, e.g. the ratio of GROMACS nsteps.")
@click.option("--no-callgrind", is_flag=True, help="Do not fall back to valgrind for instruction counts.")
@click.option("--app-log", default=None, type=click.Path(dir_okay=False),
              help="GROMACS md.log the command writes: last-resort source of wall time.")
@db_option
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@fail_cleanly
def profile_cmd(repeat: int, label: str | None, reduced: str | None, scale: float | None, no_callgrind: bool,
                app_log: str | None, db: str | None, as_json: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND under perf stat REPEAT times; store instructions, cycles, IPC, clock and times.

    Where the machine has no hardware counters (VMs), instructions come from valgrind callgrind
    (on --reduced, scaled by --scale) and the clock from task-clock plus sampled cpu MHz; each
    figure is shown and stored with the method that produced it.

    \b
    Example:
      resel profile --repeat 3 -- python3 -c "sum(range(10**6))"
      resel profile --reduced "gmx mdrun -s w20.tpr" --scale 100 -- gmx mdrun -s w2000.tpr
      resel profile --json --db /tmp/p.db -- /bin/true
    """
    try:
        reduced_argv = shlex.split(reduced) if reduced else None
    except ValueError as exc:
        raise click.BadParameter(f"{reduced!r}: {exc}", param_hint="--reduced") from None
    if scale is not None and not reduced_argv:
        raise click.BadParameter("--scale needs --reduced (the smaller problem it scales)", param_hint="--scale")
    from resel.probes.profile import profile, save
    from resel.store import open_store
    store = open_store(db)    # a store that cannot take the runs fails before anything runs
    summary = profile(list(command), repeat=repeat, label=label, reduced_argv=reduced_argv, scale=scale,
                      callgrind=not no_callgrind, app_log=app_log)
    failed = [i for i, r in enumerate(summary.runs, start=1) if r.exit_status != 0]
    problem = hint = None
    if failed:     # perf stat exits with the command's status; a failed run measures something else
        statuses = sorted({"unknown (perf lost it)" if summary.runs[i - 1].exit_status is None
                           else str(summary.runs[i - 1].exit_status) for i in failed})
        problem = (f"{shlex.join(command)} exited with status {', '.join(statuses)} in {len(failed)} of "
                   f"{len(summary.runs)} run(s): nothing stored — the counts of a run that failed do not "
                   "describe the task")
        hint = "run the command alone to see why it fails, then profile it again"
        ids: list[int] = []
    else:
        ids = save(store, summary)
    if as_json:
        doc = summary.to_dict()
        doc["row_ids"] = ids
        if problem:
            fail_json(doc, problem, hint)
        click.echo(json.dumps(_clean(doc), indent=2))
        return
    out.print(_table(summary))
    if problem:
        raise ReselError(problem, hint=hint)
    click.echo(f"stored {len(ids)} row(s) in profiles (ids {ids[0]}–{ids[-1]})")
