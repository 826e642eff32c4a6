"""What every ``resel`` command module shares, importable without :mod:`resel.cli` (which
imports the command modules, so they cannot import it back at load time)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from resel.errors import ReselError
from resel.store import _clean


def fail_cleanly(fn: Callable) -> Callable:
    """Turn ReselError into a one-line ClickException (no traceback)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ReselError as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


def print_json(doc: Any) -> None:
    """One JSON document on stdout; NaN and infinities become null."""
    click.echo(json.dumps(_clean(doc), indent=2))
