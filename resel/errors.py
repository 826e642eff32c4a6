"""The one error tree of resel.

Every error the tool raises on purpose derives from :class:`ReselError`, so a caller (the CLI,
a script using the Python API) can catch all of them at once and print the message without a
traceback. Anything else escaping is a bug.
"""

from __future__ import annotations


class ReselError(Exception):
    """Base of every error resel raises on purpose."""


class InputError(ReselError):
    """A user-supplied file (bag, sites, trace) is malformed.

    The message names the file, where in it (line or key) and what was expected, so the
    user can fix it without reading code.
    """

    def __init__(self, path: str, where: str | None, problem: str, expected: str | None = None):
        self.path = path
        self.where = where
        self.problem = problem
        self.expected = expected
        location = f"{path}: {where}" if where else path
        text = f"{location}: {problem}"
        if expected:
            text += f" (expected {expected})"
        super().__init__(text)


class IllegalTransition(ReselError):
    """The engine was fed an event that its state does not allow; its state is unchanged."""


class ModelError(ReselError):
    """A prediction was asked for with inputs the model cannot use (e.g. a zero clock)."""


class StoreError(ReselError):
    """The run store cannot be opened or does not hold what was asked for."""
