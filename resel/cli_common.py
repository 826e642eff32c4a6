"""What every ``resel`` command module shares, importable without :mod:`resel.cli` (which
imports the command modules, so they cannot import it back at load time)."""

from __future__ import annotations

import functools
import json
import math
import sqlite3
from collections.abc import Callable
from typing import Any

import click

from resel.errors import ReselError
from resel.safe_text import terminal
from resel.store import BUSY_TIMEOUT_S, _clean


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


def error_message(exc: BaseException) -> str:
    """The one line (or few) a user sees for an error resel expects: ReselError's own message,
    or what a damaged or busy run store means — with control characters made visible, since
    messages quote names and replies from files other people may write."""
    if isinstance(exc, sqlite3.DatabaseError):
        text = str(exc)
        if "locked" in text or "busy" in text:
            text = (f"the run store is busy: another process held it for more than {BUSY_TIMEOUT_S:.0f} s "
                    f"({text}); try again, or give this command its own store with --db")
        else:
            text = (f"the run store cannot be read: {text} (a damaged store? `sqlite3 STORE 'pragma "
                    "integrity_check'` tells; give another store with --db)")
        return terminal(text)
    return terminal(str(exc))


class CleanErrors(click.Group):
    """A command group whose commands end expected errors with one line and exit status 1.

    Catching here, around every subcommand, covers the commands that do not use
    :func:`fail_cleanly` themselves.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ReselError, sqlite3.DatabaseError) as exc:
            raise click.ClickException(error_message(exc)) from None


def fail_cleanly(fn: Callable) -> Callable:
    """Turn ReselError into a one-line ClickException (no traceback)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ReselError, sqlite3.DatabaseError) as exc:
            raise click.ClickException(error_message(exc)) from None
    return wrapper


def print_json(doc: Any) -> None:
    """One JSON document on stdout; NaN and infinities become null."""
    click.echo(json.dumps(_clean(doc), indent=2))
