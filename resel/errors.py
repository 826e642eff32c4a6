"""The one error tree of resel.

Every error the tool raises on purpose derives from :class:`ReselError`, so a caller (the CLI,
a script using the Python API) can catch all of them at once and print the message without a
traceback. Anything else escaping is a bug.
"""

from __future__ import annotations


class ReselError(Exception):
    """Base of every error resel raises on purpose.

    ``hint`` (optional) says what to type or change next when the message itself does not:
    the command line prints it under the message, and ``--json`` puts it in the error
    object's ``hint`` (resel/cli/common.py).
    """

    hint: str | None = None

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        if hint is not None:
            self.hint = hint


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

    def __reduce__(self):
        # pickled with the constructor's own arguments: the default (the message alone) cannot be
        # unpickled, and an InputError raised in a worker process broke the pool
        return type(self), (self.path, self.where, self.problem, self.expected)


class IllegalTransition(ReselError):
    """The engine was fed an event that its state does not allow; its state is unchanged."""


class ModelError(ReselError):
    """A prediction was asked for with inputs the model cannot use (e.g. a zero clock)."""


class StoreError(ReselError):
    """The run store cannot be opened or does not hold what was asked for."""


class TransportError(ReselError):
    """A command or file operation on a site could not be carried out.

    The message names the site (``ssh:alias`` or ``local``) and the host:port, and says what
    to do about it; the subclasses below let a caller tell the cases apart.
    """


class HostKeyError(TransportError):
    """The site's SSH host key is unknown (and not to be accepted) or has CHANGED."""


class AuthError(TransportError):
    """The SSH server refused every key offered for the user."""


class ConnectionLost(TransportError):
    """The connection died after a command was sent: it may or may not have run.

    Raised instead of re-sending, since commands such as ``sbatch`` are not idempotent; the
    caller decides (e.g. by looking for the job by name) whether to try again.
    """


class SchedulerError(ReselError):
    """The scheduler refused or failed a request; the message says what it said and what to do.

    ``command`` is the command or endpoint, ``reply`` the scheduler's own words (kept so a
    caller can log them verbatim), ``hint`` what the user can do about it.
    """

    def __init__(self, message: str, *, command: str | None = None, reply: str | None = None,
                 hint: str | None = None):
        self.message = message
        self.command = command
        self.reply = reply
        self.hint = hint
        text = message
        if hint:
            text += f" — {hint}"
        super().__init__(text)

    def __reduce__(self):
        return _rebuild, (type(self), self.__dict__.copy(), str(self))


class SchedulerReplyError(SchedulerError):
    """The scheduler answered, but not in a shape resel understands (a format it did not expect).

    Distinct from :class:`SchedulerError` so a caller can tell "the site said no" from "resel
    cannot read this site's Slurm version" (a bug report with the command and the problem).
    """

    def __init__(self, command: str, problem: str):
        self.problem = problem
        super().__init__(f"{command}: unexpected reply: {problem}", command=command)


def _rebuild(cls: type, state: dict, text: str) -> Exception:
    """An error of ``cls`` with ``state`` as attributes, without calling its ``__init__`` (whose
    arguments differ between classes): what unpickling an error from a worker needs."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, text)
    exc.__dict__.update(state)
    return exc
