"""Run a file resel shipped only if it is, byte for byte, what resel shipped.

The agent (and on HTCondor the chirp wrapper) is copied to the site's work directory some time
before a pilot starts. Between the two, anyone able to write that file could swap it and the
pilot would run their code as you. The work directory is private (backends.workdir), and on top
of that every pilot verifies what it runs: resel writes the file's SHA-256 into the job itself
(the batch script Slurm and PBS keep, the job's arguments in the HTCondor schedd), where nobody
else can change it, and the job starts Python on a one-line program that

1. reads the file once,
2. compares its SHA-256 with the one in the job, exits 1 with a message on stderr (the pilot's
   output file) if they differ,
3. else executes exactly the bytes it read and checked, as ``__main__`` with the remaining
   arguments — there is no window between checking and running.

Python runs isolated (``-I``: no current directory or ``PYTHONPATH`` on ``sys.path``, no user
site), so nothing beside the file can slip in a module either. The program is Python 3.6+ and
standard library only, like the agent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["VERIFY", "digest", "parse_verified", "verified_argv"]

#: the program given to ``python -I -c``; argv: PATH SHA256 ARGS...
VERIFY = (
    "import hashlib,sys;p,h=sys.argv[1],sys.argv[2];f=open(p,'rb');s=f.read();f.close();"
    "d=hashlib.sha256(s).hexdigest();"
    "d==h or sys.exit('resel: refusing to run %s: its sha256 is %s, not %s as resel shipped it; "
    "it was changed after resel wrote it (see docs/security.md)'%(p,d,h));"
    "sys.argv=[p]+sys.argv[3:];"
    "exec(compile(s,p,'exec'),{'__name__':'__main__','__file__':p})"
)


def digest(text: str | bytes) -> str:
    """The SHA-256 (hex) of a shipped file's content, as the job compares it."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def verified_argv(python: str, path: str, sha256: str, args: Sequence[str]) -> list[str]:
    """argv that runs ``python path args...`` only if ``path`` has this SHA-256."""
    return [python, "-I", "-c", VERIFY, path, sha256, *args]


def parse_verified(argv: Sequence[str]) -> tuple[str, str, str, list[str]] | None:
    """(python, path, sha256, args) of a :func:`verified_argv` command line, or None."""
    if len(argv) >= 6 and tuple(argv[1:4]) == ("-I", "-c", VERIFY):
        return argv[0], argv[4], argv[5], list(argv[6:])
    return None
