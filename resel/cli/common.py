"""What every ``resel`` command module shares: the consoles (``out``, ``err``), the common
options, the option types, the lazy command group, errors and JSON output.

Command modules import this module and each other, never the package root :mod:`resel.cli`
(which names them in its lazy command map): tests/test_cli_layout.py checks that.

**One error style.** Every error a command ends with goes through :class:`CommandError`: on a
terminal (or a pipe) one ``Error: …`` line on stderr, and a ``Hint: …`` line when the error
carries a hint of its own that its message does not already give (what to type next); with ``--json`` one JSON object on stdout
instead, ``{"error": …, "hint": …}``, so ``resel X --json | python -m json.tool`` always
reads JSON. Either way the exit status is 1 (2 for bad usage, as click's). Commands wrap
their body in :func:`fail_cleanly`; the root group (:class:`CleanErrors`) turns what escapes
them — and the usage errors click raises while it parses — into the same.

Start-up matters here: every command imports this module, so it loads click and the standard
library only (the store, for its JSON cleaning and busy timeout, is imported where used; even
sqlite3 only by the commands that open a store — see :func:`expected_errors`).
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import click

from resel.errors import ReselError
from resel.json_safe import clean
from resel.safe_text import terminal


#: SQLite's INTEGER: a run id, a limit or a count beyond it cannot even be looked up
INT64_MAX = 2**63 - 1
#: a bound beyond this is a limit of the store, not a choice a user makes: help leaves it out
_HUGE = 10**12


def _readable_bound(value: int) -> str:
    """``2^62``, ``-2^62`` or ``2^63-1`` for the store's limits; the number itself otherwise."""
    for power in (62, 63):
        for text, bound in ((f"2^{power}", 2**power), (f"2^{power}-1", 2**power - 1)):
            if abs(value) == bound:
                return ("-" if value < 0 else "") + text
    return f"{value:,}" if abs(value) > _HUGE else str(value)


def described_range(rng: Any, guard: float, show: Callable[[Any], str]) -> str:
    """A range type's bounds for --help (``x>=1``, ``0<x<=1``), leaving out a bound at or beyond
    ``guard``: such a bound is a guard against absurd values, not a choice a user makes."""
    lo = None if rng.min is None or abs(rng.min) >= guard else show(rng.min)
    hi = None if rng.max is None or abs(rng.max) >= guard else show(rng.max)
    if lo is None and hi is None:
        return ""
    if lo is None:
        return f"x{'<' if rng.max_open else '<='}{hi}"
    if hi is None:
        return f"x{'>' if rng.min_open else '>='}{lo}"
    return f"{lo}{'<' if rng.min_open else '<='}x{'<' if rng.max_open else '<='}{hi}"


class Whole(click.IntRange):
    """An ``IntRange`` whose help shows only the bounds a user chooses within: the store's own
    limits (2^62, 2^63-1) printed as ``-4611686018427387904<=x<=4611686018427387904`` in every
    ``--help``; they still apply, and a value beyond them is refused naming them readably."""

    def _describe_range(self) -> str:
        return described_range(self, _HUGE, str)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            if "not in the range" not in exc.message:
                raise
            lo = "" if self.min is None else f"{_readable_bound(self.min)} to "
            hi = "any" if self.max is None else _readable_bound(self.max)
            self.fail(f"{value!r} is out of range: give a whole number from {lo}{hi}"
                      if lo else f"{value!r} is out of range: give a whole number up to {hi}", param, ctx)


#: run ids (and the --resume option): what the store can hold
RUN_ID = Whole(1, INT64_MAX)
#: a random seed (repetitions add their number to it; the store keeps it as an INTEGER)
SEED = Whole(-(2**62), 2**62)
#: cores of a site or cluster given on the command line (as a sites file's ``cores``)
CORES = Whole(1, 10**9)
#: a count or limit given on the command line (at least 1, at most what SQLite holds)
COUNT = Whole(1, INT64_MAX)


class Finite(click.FloatRange):
    """A ``FloatRange`` that also refuses ``nan`` and ``inf``: every range comparison with NaN is
    false, so ``--load nan`` passed ``FloatRange(min=0)`` and ran a whole simulation on it.
    Its help shows the bounds as a person writes them (``0<x``, ``1e-06<=x<=1e+06``), leaving
    out a bound that is only a guard against absurd values (10^9 and beyond)."""

    name = "finite float range"

    def _describe_range(self) -> str:
        return described_range(self, 1e9, lambda v: f"{v:g}")

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
    """A ``rich.table.Table`` in resel's one table style — ``squeue``'s and ``condor_q``'s
    brevity: a rule under the header and none around, columns two spaces apart, a title
    flush left — unless the caller asks otherwise. rich is imported on the first call, not when
    a command module is loaded (``resel --help`` loads them all and prints no table)."""
    from rich import box
    from rich.table import Table as RichTable
    for key, value in (("box", box.SIMPLE_HEAD), ("show_edge", False), ("pad_edge", False),
                       ("padding", (0, 1, 0, 0)), ("title_justify", "left")):
        kwargs.setdefault(key, value)
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


#: verbs a remedy starts with, after "; ", " — " or "(" in resel's messages: the part of a
#: message that is the hint (``--json`` gives it its own field)
_REMEDY = re.compile(r"(?:;\s+|\s+—\s+|\s+-\s+|\(|:\s+)((?:give|use|try|run|start|import|drop|choose|upgrade|install|"
                     r"open|fix|pass|list|set|check|copy|remove|make|put|wait|say|add|see|ask|store|"
                     r"pip install|chmod|resel|`)[^;()]*?)\)?\.?$", re.IGNORECASE)


def hint_of(exc: BaseException, message: str | None = None) -> str | None:
    """What to type or change next: the error's own ``hint``, else the remedy its message ends
    with (``…; give a writable store with --db``), else None."""
    hint = getattr(exc, "hint", None)
    if hint:
        return str(hint)
    text = message if message is not None else str(exc)
    found = _REMEDY.search(text.strip())
    return found.group(1).strip() if found else None


class CommandError(click.ClickException):
    """The one way a ``resel`` command ends with an error (see the module's docstring).

    ``as_json``: print ``{"error": message, "hint": hint}`` on stdout instead of the text lines
    on stderr. ``usage``: the error is bad usage (exit status 2, as click's own).
    """

    def __init__(self, message: str, hint: str | None = None, *, as_json: bool = False, exit_code: int = 1,
                 said: bool = True) -> None:
        super().__init__(message)
        self.hint = hint
        self.as_json = as_json
        self.exit_code = exit_code
        #: the hint is printed under the message on a terminal (False: a general pointer, such as
        #: the command's --help, that only --json's object carries — the text keeps to one line)
        self.said = said

    def doc(self) -> dict:
        return {"error": self.message, "hint": self.hint}

    def show(self, file: IO[Any] | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps(clean(self.doc()), indent=2), file=file or sys.stdout)
            return
        text = f"Error: {self.message}"
        if self.said and self.hint and self.hint not in self.message:
            text += f"\nHint: {self.hint}"
        click.echo(text, file=file or sys.stderr)


def command_error(exc: BaseException, *, as_json: bool, ctx: click.Context | None = None) -> CommandError:
    """:class:`CommandError` for an error resel expects (ReselError, a store's DatabaseError)
    or for one of click's (bad usage, a missing file): the same message, its hint (else, what
    to read next: the command's ``--help``), the same exit status."""
    if isinstance(exc, CommandError):
        exc.as_json = exc.as_json or as_json
        return exc
    if isinstance(exc, click.ClickException):
        message = exc.format_message()
        where = (exc.ctx if isinstance(exc, click.UsageError) and exc.ctx is not None else ctx)
        hint = f"`{where.command_path if where is not None else 'resel'} --help` lists the options, with examples"
        return CommandError(message, hint, as_json=as_json, exit_code=exc.exit_code, said=False)
    message = error_message(exc)
    hint = hint_of(exc, message)
    said = hint is not None
    if hint is None and getattr(exc, "problem", None) == "file not found":
        hint = "check the path (a relative one starts from the current folder)"
    if hint is None and ctx is not None and ctx.command_path:
        hint = f"`{ctx.command_path} --help` explains the command and its options"
    return CommandError(message, hint, as_json=as_json, said=said)


def _json_asked(ctx: click.Context | None) -> bool:
    """The command being run was given ``--json``: its parsed ``as_json``, else (an error while
    click parsed its options) ``--json`` among the words typed before any ``--``."""
    if ctx is not None and ctx.params.get("as_json"):
        return True
    argv = (ctx.find_root().meta.get("resel.argv") if ctx is not None else None) or []
    if "--" in argv:
        argv = argv[:argv.index("--")]
    return "--json" in argv


class CleanErrors(LazyGroup):
    """The root command group: whatever error escapes a command — an expected one (see
    :func:`expected_errors`) or bad usage click found while parsing — ends as a
    :class:`CommandError` (one line, or the JSON object with ``--json``).

    Catching here, around every subcommand, covers the commands that do not use
    :func:`fail_cleanly` themselves.
    """

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        argv = list(args)
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta["resel.argv"] = argv      # what was typed, for _json_asked after a usage error
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CommandError:
            raise
        except click.NoSuchOption as exc:
            if exc.option_name == "--json":     # the command has no --json: say so in words
                raise
            raise command_error(exc, as_json=_json_asked(ctx)) from None
        except click.ClickException as exc:
            raise command_error(exc, as_json=_json_asked(ctx)) from None
        except expected_errors() as exc:
            raise command_error(exc, as_json=_json_asked(ctx)) from None


def fail_cleanly(fn: Callable) -> Callable:
    """End a command's expected errors (ReselError, a damaged store) and the usage errors it
    raises itself as a :class:`CommandError`: one line, no traceback — or, when the command
    was given ``--json``, the JSON error object on stdout."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CommandError:
            raise
        except click.ClickException as exc:
            ctx = click.get_current_context(silent=True)
            if not _json_asked(ctx):
                raise
            raise command_error(exc, as_json=True, ctx=ctx) from None
        except expected_errors() as exc:
            ctx = click.get_current_context(silent=True)
            raise command_error(exc, as_json=_json_asked(ctx), ctx=ctx) from None
    return wrapper


def fail_json(doc: dict, message: str, hint: str | None = None) -> None:
    """A command that has a result to show *and* failed (a site unreachable, a task failed):
    the result with ``error`` and ``hint`` added, on stdout, and exit status 1."""
    doc = {**doc, "error": message, "hint": hint}
    print_json(doc)
    sys.exit(1)


def print_json(doc: Any) -> None:
    """One JSON document on stdout; NaN and infinities become null."""
    click.echo(json.dumps(clean(doc), indent=2))


#: the width a table is made for where no terminal says otherwise (a pipe, a file): every
#: resel table fits it; wider details are behind --wide or --json
TABLE_WIDTH = 100


def table_width(stream: IO[Any] | None = None) -> int | None:
    """The width for a console on ``stream`` (stdout): None on a terminal (rich asks it, and
    honours ``COLUMNS``), ``COLUMNS`` when set, else :data:`TABLE_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if (stream or sys.stdout).isatty() else TABLE_WIDTH


def console_kwargs(stderr: bool = False) -> dict:
    """How resel's consoles are made: no highlighting of numbers, the width of
    :func:`table_width` (rich itself honours ``NO_COLOR`` and strips styles in a pipe)."""
    return {"highlight": False, "stderr": stderr, "width": table_width(sys.stderr if stderr else sys.stdout)}


out = LazyConsole(**console_kwargs())
err = LazyConsole(**console_kwargs(stderr=True))

def print_table(table: Any, wide: bool = False, console: Any = None) -> None:
    """Print a rich table on ``console`` (default :data:`out`): within the console's width
    (:func:`table_width`), or with ``wide`` as wide as its cells need (``--wide``)."""
    console = console if console is not None else out
    if not wide:
        console.print(table)
        return
    from rich.measure import Measurement
    need = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if need <= console.width:
        console.print(table)
        return
    from rich.console import Console as RichConsole
    RichConsole(file=console.file, width=need, highlight=False, no_color=console.no_color,
                force_terminal=console.is_terminal, color_system=console.color_system).print(table)


db_option = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                         help="Run store (SQLite). Default: $RESEL_DB or ~/.local/share/resel/resel.db.")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document instead of tables (an error too: {\"error\", \"hint\"}).")
seed_option = click.option("--seed", default=0, show_default=True, type=SEED,
                           help="Random seed of the simulated parts (waits, run times) and of random choices.")
wide_option = click.option("--wide", is_flag=True,
                           help="Show every column, however wide the table gets (default: what fits 100 columns).")
sites_option = click.option("--sites", "sites_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                            help="Sites file (TOML). Default: the embedded thesis sites (`resel sites defaults`).")


#: what to type instead, per command, when a sites file holds simulated sites
_FOR_SIMULATED = {
    "resel run": "`resel simulate BAG --sites {file}` runs a bag on simulated sites; "
                 "`resel plan BAG --sites {file}` (or `resel run BAG --sites {file} --dry-run`) shows the plan",
    "resel sites check": "`resel sites show --sites {file}` shows simulated sites",
    "resel sites status": "`resel sites show --sites {file}` shows simulated sites",
    "resel sites probe": "simulated sites have nothing to probe; `resel sites show --sites {file}` shows them",
    "resel history fetch": "simulated sites keep no accounting; `resel history import --swf TRACE` reads a trace",
}


def live_sites_from(sites_file: Path, command: str = "resel run") -> list:
    """The sites of ``sites_file``, refused whole if any is simulated: what ``resel run`` and
    the live ``resel sites`` commands start from (``resel plan`` plans simulated sites too).

    Raises:
        ReselError: naming the simulated sites, and (as its hint) what to type instead.
    """
    from resel.config import LIVE_KINDS, load_sites
    site_list = load_sites(sites_file)
    offline = [s.name for s in site_list if s.kind not in LIVE_KINDS]
    if offline and len(offline) == len(site_list):
        hint = _FOR_SIMULATED.get(command, "`resel simulate BAG --sites {file}` runs simulated sites").format(file=sites_file)
        raise ReselError(f"{sites_file}: every site is simulated, and `{command}` asks live sites "
                         f"(kind = {' / '.join(LIVE_KINDS)}, with an [site.access] table)", hint=hint)
    if offline:
        raise ReselError(f"{sites_file}: sites {', '.join(offline)} are simulated and the others live; "
                         f"`{command}` asks live sites only",
                         hint="put the live sites in a file of their own (docs/configuration.md)")
    return site_list
