"""The glue between ``resel report`` / ``resel simulate`` and the figures: what to write, what
to print, and what to check before any work. Kept apart from the commands so that the CLI
imports :mod:`resel.report` and matplotlib only when figures are asked for (matplotlib is a
dependency of resel since issue 28, but costs ~0.3 s to import: only drawing pays it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from sqlite_utils import Database

from resel.errors import ReselError
from resel.outputs import create, refuse_inputs, refuse_plot_inputs
from resel.safe_text import terminal


def _need_matplotlib() -> None:
    """matplotlib is a dependency of resel (since issue 28), imported only to draw; an install
    that lost it is told how to get it back, before any work."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise ReselError("figures need matplotlib, which this installation of resel lacks",
                         hint="pip install 'matplotlib>=3.7' into resel's environment (or reinstall resel)")


def ready_to_draw(plot_dir: Path | None, html_file: Path | None, protect: Sequence[tuple[str, Any]],
                  names: Sequence[str] | None = None) -> None:
    """Everything that can stop the figures or the report from being written, checked before
    any work (a 40-second `resel simulate --plot DIR` once failed at its end): matplotlib, no
    output over an input, the folder made (0700) and writable, the report's folder writable.

    Raises:
        ReselError: naming what is wrong and what to do.
    """
    from resel.outputs import FIGURES, private_dir
    _need_matplotlib()
    if html_file is not None:
        refuse_inputs(html_file, "--html", protect)
        _writable_folder(Path(html_file).parent if str(Path(html_file).parent) else Path("."), "--html", html_file)
    if plot_dir is not None:
        refuse_plot_inputs(plot_dir, protect, names=list(names or FIGURES))
        _writable_folder(Path(plot_dir), "--plot", plot_dir)
        private_dir(plot_dir)


def _writable_folder(folder: Path, option: str, target: Path) -> None:
    """Raise unless this user may create files in ``folder`` (an existing folder it cannot
    write, or one that does not exist yet under a parent it cannot write)."""
    import os
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ReselError(f"{option} {target}: {probe} is a file, not a folder", hint=f"give {option} another path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ReselError(f"{option} {target}: this user cannot write in {probe}",
                         hint=f"give {option} a folder you can write, or fix its permissions")


def emit(db: Database, run_id: int, plot_dir: Path | None, html_file: Path | None, as_json: bool,
         protect: Sequence[tuple[str, Any]] = ()) -> dict:
    """Write the run's figures into ``plot_dir`` and/or its HTML report into ``html_file``.

    Returns the numbers behind every figure (for the ``--json`` document); unless ``as_json``,
    also prints one line per file written and one per figure that could not be drawn, so the
    user knows why a figure is missing instead of finding a gap.

    ``protect`` lists the command's inputs as ``(what, path)``: no output is written over one
    (checked for every file before anything is drawn).

    Raises:
        ReselError: no such run, matplotlib missing, an output is an input, or the files cannot
            be written.
    """
    if plot_dir is None and html_file is None:
        return {}
    ready_to_draw(plot_dir, html_file, protect)
    from resel.report.plots import jsonable, write_all
    from resel.report.html import html_report

    doc: dict = {}
    try:
        if plot_dir is not None:
            figures = write_all(db, run_id, plot_dir, protect=protect)
            doc["figures"] = jsonable(figures)
            if not as_json:
                for name, data in figures.items():
                    if data.get("error"):
                        click.echo(terminal(f"{name}: not drawn: {data['error']}"), err=True)
                    else:
                        click.echo(terminal(f"{name}: {', '.join(data['files'])}"))
                        if data.get("note"):
                            click.echo(terminal(f"  note: {data['note']}"), err=True)
        if html_file is not None:
            page = html_report(db, run_id)
            with create(html_file, "w", parents=True, option="--html") as f:
                f.write(page)
            doc["html"] = str(html_file)
            if not as_json:
                click.echo(terminal(f"report: {html_file}"))
    except OSError as exc:
        raise ReselError(f"cannot write the figures or report: {exc}") from None
    return doc


def write_experiment(db: Database, experiment_id: int, out_dir: Path, as_json: bool = False,
                     protect: Sequence[tuple[str, Any]] = ()) -> dict:
    """``resel simulate --plot DIR``: the experiment's T_q/T_x/TTC against size figure."""
    _need_matplotlib()
    from resel.report.plots import jsonable
    from resel.report.plots import write_experiment as _write

    try:
        data = jsonable(_write(db, experiment_id, out_dir, protect=protect))
    except OSError as exc:
        raise ReselError(f"cannot write the figures into {out_dir}: {exc}") from None
    if not as_json:
        click.echo(terminal(f"workload_by_size: {', '.join(data['files'])}"))
    return data
