"""A site's work directory must be private: nobody else may change what runs there as you.

The agent, its inbox and every task's command live in the work directory on a filesystem that
other users share. Whoever can write there (or owns the folder) can swap the agent before a
pilot starts or drop a task file in an inbox, and the pilot then runs their code under your
account. So before resel ships anything it makes sure that

* the work directory belongs to you and is not writable by its group or by others (resel
  creates it 0700; an existing one that fails is refused, with the ``chmod`` that fixes it);
* every folder above it that resel had to create is yours too (a folder another user made
  just before resel did is refused the same way);
* no folder above it is writable by everybody without the sticky bit (as /tmp has): there
  anyone could rename the work directory and put their own in its place.

A parent folder that is merely group-writable (a group project folder) or a sticky shared one
(/tmp, /scratch) is accepted: resel's own folders inside it are 0700, and the agent checks its
pilot directory again on the compute node (resel/shipped/agent.py). docs/security.md has the threat
model.
"""

from __future__ import annotations

import posixpath
import shlex
import stat
from typing import Any

from resel.errors import ReselError
from resel.trust import writers as _writers

__all__ = ["WorkdirError", "prepare_workdir"]


class WorkdirError(ReselError):
    """The work directory (or a folder resel made above it) is not private to the user."""


def _who(uid: int) -> str:
    """A uid of the site (not looked up here: this machine's names may not be the site's)."""
    return "root" if uid == 0 else f"uid {uid}"


def _ancestors(path: str) -> list[str]:
    """The folders above path, nearest first: /a/b/c -> [/a/b, /a, /]; a relative path (taken
    from the login directory) stops at its first component: a/b -> [a]."""
    out = []
    while True:
        parent = posixpath.dirname(path)
        if parent in (path, ""):
            return out
        out.append(parent)
        path = parent


def _stat(transport: Any, path: str, follow: bool) -> Any | None:
    try:
        return transport.stat(path, follow=follow)
    except FileNotFoundError:
        return None


def prepare_workdir(transport: Any, path: str, *, site: str) -> None:
    """Create ``path`` (0700, with any missing parents) and refuse it unless it is private.

    Raises :class:`WorkdirError` with what is wrong and how to fix it. ``path`` is as
    :attr:`PilotSite.workdir` gives it (``~`` expanded; a relative path is taken from the login
    directory, as SFTP does).
    """
    above = _ancestors(path)
    before = {folder: _stat(transport, folder, follow=True) for folder in above}
    for folder, st in before.items():
        if st is not None and st.mode & stat.S_IWOTH and not st.mode & stat.S_ISVTX:
            raise WorkdirError(
                f"site {site}: {folder}, a folder above the work directory {path}, is writable by "
                f"every user and has no sticky bit (mode {stat.S_IMODE(st.mode):04o}): anyone could "
                "rename the work directory and put their own in its place. Ask its owner to run "
                f"`chmod +t {shlex.quote(folder)}` (as /tmp is), or choose a workdir elsewhere")
    transport.makedirs(path)
    me = transport.uid()
    _check_own(transport, path, me, site, made=False)
    for folder in above:
        if before[folder] is None:      # resel just made it: it must be ours
            _check_own(transport, folder, me, site, made=True)


def _check_own(transport: Any, folder: str, me: int, site: str, *, made: bool) -> None:
    """``folder`` must be a directory of ours that only we may write (through a symlink of
    ours or root's: the link's owner could point it elsewhere)."""
    st = transport.stat(folder, follow=False)
    what = "a folder resel made above the work directory" if made else "the work directory"
    if st.is_link:
        if st.uid not in (me, 0):
            raise WorkdirError(
                f"site {site}: {what} {folder} is a symbolic link owned by {_who(st.uid)}, who can "
                "point it anywhere. Give the real directory as workdir in the sites file, or choose "
                "one of your own (e.g. workdir = \"~/resel-work\")")
        st = transport.stat(folder, follow=True)
    if not st.is_dir:
        raise WorkdirError(f"site {site}: {what} {folder} is not a directory")
    if st.uid != me:
        raise WorkdirError(
            f"site {site}: {what} {folder} belongs to {_who(st.uid)}, not to you ({_who(me)}): its "
            "owner could change the agent and the tasks resel runs there as you. Choose a workdir "
            "of your own in the sites file (e.g. workdir = \"~/resel-work\"), or remove "
            f"{folder} if it is a leftover")
    writers = _writers(st.mode)   # the site's modes, read as resel.trust reads local ones
    if writers:
        raise WorkdirError(
            f"site {site}: {what} {folder} is writable by {writers} (mode "
            f"{stat.S_IMODE(st.mode):04o}): they could change the agent or put tasks in it, and "
            f"those would run as you. Run `chmod go-w {shlex.quote(folder)}` on the site (resel "
            "makes its own folders 0700), or choose another workdir")
