"""Which failures of a live site pass by themselves, and which do not.

The coordinator retries a *transient* failure (the connection dropped, a command timed out,
the scheduler is busy or restarting) on the next poll, and acts on any other at once: a pilot
the scheduler refuses gives its site up, a task that cannot be dispatched (a bad command
template, permission denied in the pilot's directory, a full disk) fails with the reason
instead of being retried forever. Explicit lists, not a catch-all: an error nobody foresaw is
not transient, so it is seen instead of looping.
"""

from __future__ import annotations

import errno
import re
import socket

from resel.errors import AuthError, HostKeyError, SchedulerError, SchedulerReplyError, TransportError

#: what schedulers say when they are busy, restarting or unreachable for a moment
_BUSY = re.compile(
    r"Socket timed out|Unable to contact slurm controller|Connection refused|temporarily unavailable|"
    r"try again|Zero Bytes were transmitted|Communication connection failure|Transport endpoint|"
    r"timed out|too many requests|server is busy|slurmctld.*(?:down|restart)|"
    r"cannot connect to (?:the )?server|pbs_iff|Failed to (?:connect|contact)|Failed to fetch ads|"
    r"SECMAN|Connection reset|Broken pipe|HTTP (?:502|503|504)",
    re.IGNORECASE)

#: file errors a retry will not mend (the next attempt meets the same)
_LASTING_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
                   errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL, errno.ENOSPC, errno.EDQUOT, errno.EEXIST}


def is_transient(exc: BaseException) -> bool:
    """True if trying the same again later may well succeed."""
    if isinstance(exc, (HostKeyError, AuthError)):
        return False                   # a key problem lasts until someone fixes it
    if isinstance(exc, TransportError):
        return True                    # unreachable, connection lost (ConnectionLost), timeouts
    if isinstance(exc, SchedulerReplyError):
        return True                    # an odd reply (cut short?): the next one may read
    if isinstance(exc, SchedulerError):
        said = f"{exc} {exc.reply or ''}"
        return bool(_BUSY.search(said))
    if isinstance(exc, (TimeoutError, socket.timeout, ConnectionError, EOFError)):
        return True
    if isinstance(exc, OSError):
        return exc.errno not in _LASTING_ERRNOS
    try:
        import paramiko
        if isinstance(exc, paramiko.SSHException):
            return True
    except ImportError:   # pragma: no cover - paramiko is a dependency
        pass
    return False


def describe(exc: BaseException) -> str:
    """An error as one short line for the log, a note or a stored reason (its first line when
    long: a scheduler's whole reply stays out of the table)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 300 else text
