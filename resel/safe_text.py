"""Text from files and the store made safe to show: no terminal control, no rich markup.

Site and bag names, labels and scheduler replies come from files other people may write (a
shared sites file, a stored run, a trace). Printed as they are, ``[/x]`` crashes rich
(``MarkupError``), ``[link=…]`` or ``[on red]`` restyles the table, and an ESC sequence can
rewrite the user's terminal (title, cursor, even what a later command appears to print).
Everything shown in a rich table or line goes through :func:`markup`; everything printed
plainly through :func:`terminal`.
"""

from __future__ import annotations

import re
from typing import Any

#: C0 and C1 control characters and DEL (tab and newline are handled by the caller's choice)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ALL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _visible(match: re.Match) -> str:
    return f"\\x{ord(match.group(0)):02x}"


def terminal(value: Any, *, lines: bool = True) -> str:
    """``value`` as text whose control characters are shown as ``\\xNN`` instead of obeyed.

    With ``lines`` (messages), newlines and tabs are kept; without (a name, a table cell) they
    are escaped too, so one value stays on one line.
    """
    return (_CONTROL if lines else _CONTROL_ALL).sub(_visible, str(value))


def markup(value: Any) -> str:
    """``value`` for rich (a table cell, a title, ``console.print``): shown literally."""
    from rich.markup import escape   # here, not at the top: most commands print no rich text
    return escape(terminal(value, lines=False))

