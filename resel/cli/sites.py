"""``resel sites``: the sites file and LIM's predictions for it (``show``, ``defaults``); the
live subcommands (``check``, ``status``, ``probe``) are in :mod:`resel.cli.live`, loaded when
one of them runs."""

from __future__ import annotations

from pathlib import Path

import click

from resel.cli.common import LazyGroup, Table, fail_cleanly, json_option, out, print_json, sites_option
from resel.safe_text import markup as m

#: the ``resel sites`` commands defined in other modules, imported when the command runs (as
#: ``resel.cli.COMMANDS``); tests/test_imports.py checks this against live's register()
SITES_COMMANDS = {
    "check": "resel.cli.live:check_cmd",
    "status": "resel.cli.live:sites_status_cmd",
    "probe": "resel.cli.live:sites_probe_cmd",
}


@click.group("sites", cls=LazyGroup, lazy=SITES_COMMANDS)
def sites_group() -> None:
    """Inspect site files and LIM's predictions for them."""


@sites_group.command("show")
@sites_option
@click.option("--bag", "bag_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Bag whose predicted T_x to show (default: the embedded GROMACS bag).")
@click.option("--clock", type=click.Choice(["base", "avg"]), default="base", show_default=True,
              help="Site clock LIM predicts T̂x with: nominal (base) or measured average (avg).")
@json_option
@fail_cleanly
def sites_show(sites_file: Path | None, bag_file: Path | None, clock: str, as_json: bool) -> None:
    """List sites with clocks, κ, pilot policy, wait model and LIM's T̂x for a bag.

    \b
    Example:
      resel sites show --sites examples/sites-thesis.toml --clock avg
    """
    from resel.api import default_bag_path, default_sites_path
    from resel.config import load_bag, load_sites
    from resel.models.lim import site_rates
    site_list = load_sites(sites_file or default_sites_path())
    bag = load_bag(bag_file or default_bag_path())
    rates = site_rates(site_list, clock)
    rows = [{"name": s.name, "kind": s.kind, "cores": s.cores, "clock_base": s.clock.base, "clock_avg": s.clock.avg,
             "kappa": s.kappa, "tx_pred": rates[s.name].tx(bag.profile.instructions), "pilot_mode": s.pilot.mode,
             "max_pilots": s.pilot.max_pilots, "reselect_target": s.reselect_target,
             "wait": _wait_text(s), "notes": s.notes} for s in site_list]
    if as_json:
        print_json({"bag": bag.name, "clock": clock, "instructions": bag.profile.instructions,
                    "instructions_of": _instructions_of(bag), "sites": rows})
        return
    table = Table(title=f"T̂x = κ · {bag.profile.instructions:.3g} instructions{_table_note(bag)} / clock ({clock})",
                  title_justify="left")
    from resel.units import pick
    unit = pick(r["tx_pred"] for r in rows)
    for col in ("site", "cores", "base GHz", "avg GHz", "κ", m(unit.header("T̂x")), "pilots", "target",
                "queue wait (simulated)"):
        table.add_column(col, no_wrap=col != "queue wait (simulated)")
    for r in rows:
        table.add_row(m(r["name"]), str(r["cores"]), f"{r['clock_base']:.3f}",
                      "—" if r["clock_avg"] is None else f"{r['clock_avg']:.3f}", f"{r['kappa']:.2f}",
                      unit.fmt(r["tx_pred"]), m(r["pilot_mode"]), "yes" if r["reselect_target"] else "no",
                      m(r["wait"] or "—"))
    out.print(table)


def _instructions_of(bag) -> dict:
    """What the instructions T̂x is shown for are: every task's, or a task table's mean (a table
    bag's tasks each have their own T̂x; the column shows the mean task's, not any one task's)."""
    if not bag.tasks:
        return {"kind": "every task"}
    each = [t.instructions for t in bag.tasks]
    return {"kind": "mean of the task table", "tasks": len(each), "min": min(each), "max": max(each)}


def _table_note(bag) -> str:
    of = _instructions_of(bag)
    if of["kind"] == "every task":
        return ""
    return f" (the mean of {of['tasks']:,} tasks, {of['min']:.3g}–{of['max']:.3g} each)"


def _wait_text(site) -> str | None:
    if site.wait is not None:
        scale = f" × nodes^{site.wait.size_exponent:g}" if site.wait.size_exponent else ""
        return site.wait.dist.describe() + scale
    if site.queue is not None:
        q = site.queue
        return f"{q.policy} queue replaying {Path(q.trace).name} (load ×{q.load:g})"
    return None


@sites_group.command("defaults")
def sites_defaults() -> None:
    """Print the embedded default sites file, to copy and edit.

    \b
    Example:
      resel sites defaults > my-sites.toml
    """
    from resel.api import default_sites_path
    click.echo(default_sites_path().read_text(encoding="utf-8"), nl=False)
