"""What every ``resel`` command module shares: the consoles (``out``, ``err``), the common
options, the option types, the lazy command group, clean one-line errors and JSON output.

Command modules import this module and each other, never the package root :mod:`resel.cli`
(which names them in its lazy command map): tests/test_cli_layout.py checks that.

Start-up matters here: every command imports this module, so it loads click and the standard
library only (the store, for its JSON cleaning and busy timeout, is imported where used; even
sqlite3 only by the commands that open a store — see :func:`expected_errors`).
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from resel.errors import ReselError
from resel.json_safe import clean
from resel.safe_text import terminal


#: SQLite's INTEGER: a run id, a limit or a count beyond it cannot even be looked up
INT64_MAX = 2**63 - 1
#: run ids (and the --resume option): what the store can hold
RUN_ID = click.IntRange(1, INT64_MAX)
#: a random seed (repetitions add their number to it; the store keeps it as an INTEGER)
SEED = click.IntRange(-(2**62), 2**62)
#: cores of a site or cluster given on the command line (as a sites file's ``cores``)
CORES = click.IntRange(1, 10**9)


class Finite(click.FloatRange):
    """A ``FloatRange`` that also refuses ``nan`` and ``inf``: every range comparison with NaN is
    false, so ``--load nan`` passed ``FloatRange(min=0)`` and ran a whole simulation on it."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def expected_errors() -> tuple[type[BaseException], ...]:
    """The errors a command ends with one line: ReselError, and a damaged or busy run store's
    ``sqlite3.DatabaseError`` once sqlite3 is loaded — a command that never imported it (``resel
    replay``, ``resel --help``) cannot have raised it, and its import is ~1 ms of their start-up."""
    sqlite3 = sys.modules.get("sqlite3")
    return (ReselError,) if sqlite3 is None else (ReselError, sqlite3.DatabaseError)


def error_message(exc: BaseException) -> str:
    """The one line (or few) a user sees for an error resel expects: ReselError's own message,
    or what a damaged or busy run store means — with control characters made visible, since
    messages quote names and replies from files other people may write."""
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.DatabaseError):
        from resel.store import BUSY_TIMEOUT_S
        text = str(exc)
        if "locked" in text or "busy" in text:
            text = (f"the run store is busy: another process held it for more than {BUSY_TIMEOUT_S:.0f} s "
                    f"({text}); try again, or give this command its own store with --db")
        else:
            text = (f"the run store cannot be read: {text} (a damaged store? `sqlite3 STORE 'pragma "
                    "integrity_check'` tells; give another store with --db)")
        return terminal(text)
    return terminal(str(exc))


def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands in for rich's class
    """A ``rich.table.Table``; rich is imported on the first call, not when a command module is
    loaded (``resel --help`` loads them all and prints no table)."""
    from rich.table import Table as RichTable
    return RichTable(*args, **kwargs)


def Console(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands in for rich's class
    """A ``rich.console.Console``, rich imported on the first call (as :func:`Table`)."""
    from rich.console import Console as RichConsole
    return RichConsole(*args, **kwargs)


class LazyConsole:
    """A module's console (``resel.cli.common.out``, ``err``) that becomes a rich ``Console`` on first use.

    Its arguments are fixed when the module is loaded, as they were for the console made there
    before; at the first attribute read (or ``with``) the object turns itself into a genuine
    ``Console`` initialised with them (its class is swapped, then ``Console.__init__`` runs on
    it), so from then on it *is* one — rich's ``Live`` and ``Progress``, which use it as a
    context manager, included — and only commands that print through rich import rich.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._console_kwargs = kwargs

    def _become_console(self) -> None:
        from rich.console import Console as RichConsole
        kwargs = self.__dict__.pop("_console_kwargs")
        self.__class__ = RichConsole
        RichConsole.__init__(self, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "_console_kwargs" not in self.__dict__:
            raise AttributeError(name)
        self._become_console()
        return getattr(self, name)

    def __enter__(self) -> Any:
        self._become_console()
        return self.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        # `with` looks both methods up before calling __enter__, which made this a Console
        return type(self).__exit__(self, *exc)


class LazyGroup(click.Group):
    """A command group that imports a subcommand's module only when the subcommand is used.

    ``lazy`` maps a command name to ``"module:attribute"`` (click's documented lazy-loading
    pattern). ``resel runs`` thus never imports the live coordinator, the trace replay or the
    profilers, and each command module keeps its heavy imports (the store, sqlite_utils and
    numpy, paramiko) inside the functions that use them, so that listing every command's short
    help (``resel --help``) stays cheap too. The listing and the help text are the same as if
    every command had been added with ``add_command``.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise RuntimeError(f"{self.lazy[cmd_name]} is not the command {cmd_name!r}")
            self.add_command(command)   # loaded once; later look-ups find it in self.commands
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """As click's, but a mistyped name is matched against every command, loaded or not,
        for its "Did you mean …?" (click 8.4+ looks only at the loaded ones)."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            no_such = getattr(click.exceptions, "NoSuchCommand", None)
            if no_such is None or not isinstance(exc, no_such):
                raise
            raise no_such(exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None


class CleanErrors(LazyGroup):
    """A command group whose commands end expected errors with one line and exit status 1.

    Catching here, around every subcommand, covers the commands that do not use
    :func:`fail_cleanly` themselves.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except expected_errors() as exc:
            raise click.ClickException(error_message(exc)) from None


def fail_cleanly(fn: Callable) -> Callable:
    """Turn ReselError into a one-line ClickException (no traceback)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except expected_errors() as exc:
            raise click.ClickException(error_message(exc)) from None
    return wrapper


def print_json(doc: Any) -> None:
    """One JSON document on stdout; NaN and infinities become null."""
    click.echo(json.dumps(clean(doc), indent=2))


# Piped output (a file, a pager) gets wide lines rather than 80-column wrapping.
out = LazyConsole(highlight=False, width=None if sys.stdout.isatty() else 150)
err = LazyConsole(stderr=True, highlight=False)

db_option = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Run store (SQLite). Default: $RESEL_DB or ~/.local/share/resel/resel.db.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
sites_option = click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                            help="Sites file (TOML). Default: the embedded thesis sites (`resel sites defaults`).")


def live_sites_from(sites_file: Path) -> list:
    """The sites of ``sites_file``, refused whole if any is simulated: what ``resel run``,
    ``resel plan`` and the live ``resel sites`` commands start from."""
    from resel.config import LIVE_KINDS, load_sites
    site_list = load_sites(sites_file)
    offline = [s.name for s in site_list if s.kind not in LIVE_KINDS]
    if offline:
        raise ReselError(f"{sites_file}: sites {', '.join(offline)} are simulated; `resel run` and `resel plan` need live sites "
                         f"(kind = one of {', '.join(LIVE_KINDS)}) — use `resel simulate` for simulated ones")
    return site_list
