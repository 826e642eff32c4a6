"""The ``resel`` command line: thin wrappers over the Python API (resel/api.py).

Each command parses options, calls the API and formats the result — a rich table for people,
``--json`` for scripts. Every error resel raises on purpose is printed as one line without a
traceback (exit status 1); bad usage exits 2 as usual for click.

This package root holds the command group, the map of its commands and the console-script
entry point, nothing else: every command lives in a module of its family (``simulate``,
``stored``, ``sites``, ``live``, ...) that imports only :mod:`resel.cli.common` and its
siblings, never this root (tests/test_cli_layout.py checks it), so there is no import cycle.
"""

from __future__ import annotations

import gc
import os
import sys

import click

from resel import __version__
from resel.cli.common import CleanErrors

# Start-up: every command module is imported only when its command runs or its help is shown
# (LazyGroup), and each keeps the store, the simulator and rich inside the functions that use
# them: `resel --help` and `resel runs` stay a fraction of a second (docs/benchmarks.md).

#: every command: name -> "module:command", imported when the command runs (or when its help
#: is shown); tests/test_imports.py checks this against the modules' register()
COMMANDS = {
    "simulate": "resel.cli.simulate:simulate",
    "runs": "resel.cli.stored:runs",
    "report": "resel.cli.stored:report",
    "prune": "resel.cli.stored:prune",
    "sites": "resel.cli.sites:sites_group",
    "replay": "resel.cli.trace:replay_cmd",
    "profile": "resel.cli.profile:profile_cmd",
    "model": "resel.cli.model:model_group",
    "run": "resel.cli.live:run_cmd",
    "status": "resel.cli.live:status_cmd",
    "cancel": "resel.cli.live:cancel_cmd",
    "plan": "resel.cli.plan:plan_cmd",
    "history": "resel.cli.history:history_group",
    "grid": "resel.cli.grid:grid_cmd",
    "scenario": "resel.cli.grid:scenario_group",
    "results": "resel.cli.results:results_cmd",
    "fetch": "resel.cli.results:fetch_cmd",
}


@click.group(cls=CleanErrors, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="resel")
def cli() -> None:
    """Run bags of tasks across several sites and finish them sooner.

    resel predicts each task's run time on each site from its instruction count and the
    site's clock (the Limited Information Model), acquires cores with pilot jobs, and moves
    waiting tasks to whichever acquired site finishes them first (re-selection windows).
    The simulator runs the very same decisions in virtual time.

    \b
    Start here:
      resel simulate                      # 1,024 GROMACS-style tasks on 4 thesis sites
      resel sites show                    # the sites, their clocks and LIM's predictions
      resel runs / resel report RUN       # what was stored (resel prune: remove old runs)
      resel sites check --sites S.toml    # can resel reach your live sites?
      resel run BAG --sites S.toml        # run a bag on live Slurm sites (status, cancel, --resume)
    """


def main() -> None:
    """Console-script entry point. ``RESEL_LOG=debug`` (or ``info``) shows on stderr what resel
    does that the tables do not: every command it runs on a site with its exit code and time."""
    from resel.cli.startup import leave_numpy_out_of_sqlite_utils
    leave_numpy_out_of_sqlite_utils()       # ~60 ms of every command that writes a store
    level = os.environ.get("RESEL_LOG", "").strip().upper()
    if level:
        import logging
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            from resel.cli.common import CommandError
            error = CommandError(f"RESEL_LOG={level.lower()!r} is not a log level",
                                 "give RESEL_LOG=debug, info, warning or error", as_json="--json" in sys.argv[1:])
            error.show()
            raise SystemExit(error.exit_code)
        # resel's own loggers only: paramiko's and urllib3's debug would bury what resel did
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("resel").setLevel(level)
    try:
        cli(prog_name="resel")
    finally:
        _exit_quickly()


def _exit_quickly() -> None:
    """Make the interpreter's exit cheaper: it collects garbage over every object the imports
    made (click, typing, inspect), several times — ~6 ms of each command, a sixteenth of
    `resel replay` on wagap (docs/benchmarks.md). One collection here finishes what the command
    left unreachable (a run store's connection is closed, so SQLite folds its write-ahead log
    back, as before); the objects still alive are then frozen, which the exit's collections
    skip. Atexit handlers, threads, open files and modules are finished as before."""
    gc.collect()
    gc.freeze()
