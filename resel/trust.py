"""Whom a file resel reads can be changed by: nobody but you (or root) may, before resel trusts it.

What resel reads can carry a command. The run store holds each live run's sites — the
environment of every scheduler command (a ``PATH`` there chooses which ``squeue`` runs), the
Python that starts the agent, the ssh config and keys, extra scheduler options — and its bag's
commands; ``resel cancel``, ``status`` and ``run --resume`` read them back and act on them as
you. A slurmrestd token is a password for your whole Slurm account. So before either is used:

* the store file must be yours (or root's) and writable by nobody else;
* its own folder too — even a sticky one such as /tmp: whoever can create files beside the
  store can plant its ``-journal`` or ``-wal`` file, whose pages SQLite copies into the store
  when it opens it;
* every folder above must be yours or root's, and writable by others only with the sticky bit
  (/tmp's ``chmod +t``: there nobody else may rename your folder and put theirs in its place);
* a symbolic link on the way must be yours or root's (its owner could point it elsewhere);
* the store must still be the file resel opened each time resel writes it or acts on what it
  read (compared by device and inode): a store moved away under a running command would
  otherwise take its writes with it.

This is OpenSSH's ``StrictModes`` walk (``safe_path``: every folder up to ``/`` owned by the
user or root, not group- or other-writable), relaxed only for sticky folders *above* the
store's own. A secret (the slurmrestd token) must also be unreadable by group and others.
Every refusal says what is wrong and the command that fixes it. The checks cost a few
``lstat`` calls (docs/security.md, docs/benchmarks.md).
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from resel.errors import ReselError, StoreError

#: SQLite's companion files of a store (its write-ahead log, shared memory, rollback journal)
SIDECARS = ("-wal", "-shm", "-journal")


def who(uid: int) -> str:
    """A uid as a person reads it: ``root``, ``user alice (uid 1001)`` or ``uid 1001``."""
    if uid == 0:
        return "root"
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def writers(mode: int) -> str | None:
    """Who besides the owner may write: "its group", "other users", both, or None."""
    group, other = bool(mode & stat.S_IWGRP), bool(mode & stat.S_IWOTH)
    if group and other:
        return "its group and by other users"
    return "its group" if group else "other users" if other else None


def trusted_owner(uid: int, me: int) -> bool:
    """Files of yours and of root's are trusted (root can change anything anyway)."""
    return uid in (me, 0)


class StoreIdentity:
    """The store file resel checked and opened: its real path and (device, inode). (A plain
    class: ``dataclasses`` would cost every command that writes an output 15 ms of imports.)"""

    __slots__ = ("path", "dev", "ino")

    def __init__(self, path: str, dev: int, ino: int) -> None:
        self.path, self.dev, self.ino = path, dev, ino

    def verify(self, shown: str | os.PathLike[str]) -> None:
        """Raise unless the real path still names the file opened (``shown`` names it in the error).

        Raises:
            StoreError: the store was moved, deleted or replaced since it was opened.
        """
        try:
            st = os.stat(self.path)
            same = (st.st_dev, st.st_ino) == (self.dev, self.ino)
        except OSError:
            same = False
        if not same:
            raise StoreError(f"run store {shown} was moved, deleted or replaced since resel opened it: nothing more "
                             "is written to it, and nothing it says is acted on. Find out who changed it, then run "
                             "the command again")


def _refuse(target: Path | str, problem: str, fix: str) -> StoreError:
    return StoreError(f"run store {target}: {problem}; what a store holds (a live run's sites, their environment "
                      f"and commands) runs as you, so resel refuses it. {fix}")


_OWN_FOLDER = ("keep the store in a folder only you can write, e.g. the default ~/.local/share/resel/resel.db, or "
               "`mkdir -m 700 ~/resel` and --db ~/resel/NAME.db")


def foreign_link_on_the_way(target: str | os.PathLike[str], me: int) -> tuple[str, int] | None:
    """The first symbolic link the path as given goes through that is neither the user's nor
    root's, as (its path, its owner's uid); None if there is none. A part not there yet ends the
    walk (what resel makes below it is checked as the real path)."""
    prefix = ""
    for part in os.path.abspath(target).split(os.sep)[1:]:
        prefix = f"{prefix}{os.sep}{part}"
        try:
            st = os.lstat(prefix)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode) and not trusted_owner(st.st_uid, me):
            return prefix, st.st_uid
    return None


def _links_on_the_way(target: Path, me: int) -> None:
    """Every symbolic link the path as given goes through must be the user's or root's."""
    foreign = foreign_link_on_the_way(target, me)
    if foreign is not None:
        raise _refuse(target, f"{foreign[0]} is a symbolic link owned by {who(foreign[1])}, who can point it at a "
                              "store of theirs", "Give the real path with --db, or " + _OWN_FOLDER)


def check_store_folders(target: Path) -> str:
    """Refuse a store whose folders someone else owns or can write; return its real path.

    Called before the store file is created, so nothing is left in a folder that is refused.

    Raises:
        StoreError: naming the folder, who can change it and the fix.
    """
    me = os.geteuid()
    _links_on_the_way(target, me)
    real = os.path.realpath(target)
    folder = os.path.dirname(real)
    st = os.stat(folder)
    if not trusted_owner(st.st_uid, me):
        raise _refuse(target, f"its folder {folder} belongs to {who(st.st_uid)}, who could replace the store",
                      _OWN_FOLDER[0].upper() + _OWN_FOLDER[1:])
    can = writers(st.st_mode)
    if can:
        fix = (f"Run `chmod go-w {shlex.quote(folder)}`, or {_OWN_FOLDER}" if st.st_uid == me
               else _OWN_FOLDER[0].upper() + _OWN_FOLDER[1:])
        raise _refuse(target, f"its folder {folder} is writable by {can} (mode {stat.S_IMODE(st.st_mode):04o}), who "
                              "could replace the store or plant its -journal or -wal file (SQLite copies their pages "
                              "into the store)" + (" — the sticky bit does not prevent that" if st.st_mode & stat.S_ISVTX
                                                   else ""), fix)
    unsafe = unsafe_folder_above(folder, me)
    if unsafe is not None:
        above, st = unsafe
        if not trusted_owner(st.st_uid, me):
            raise _refuse(target, f"{above}, a folder above it, belongs to {who(st.st_uid)}, who could rename the "
                                  "store's folder and put theirs in its place", "Keep the store under folders only "
                                  "you or root own, e.g. the default ~/.local/share/resel/resel.db")
        raise _refuse(target, f"{above}, a folder above it, is writable by {writers(st.st_mode)} and has no sticky bit "
                              f"(mode {stat.S_IMODE(st.st_mode):04o}), so they could rename the store's folder and put "
                              "theirs in its place", f"Run `chmod go-w {shlex.quote(above)}` (or `chmod +t`, as "
                              "/tmp has) if it is yours, or " + _OWN_FOLDER)
    return real


def unsafe_folder_above(folder: str, me: int) -> tuple[str, os.stat_result] | None:
    """The first folder above ``folder`` (a real path) through which someone else could rename
    it and put theirs in its place — one neither ``me``'s nor root's, or one writable by others
    without the sticky bit — with its stat; None if every folder up to ``/`` is safe.

    Raises:
        OSError: a folder above cannot be looked at.
    """
    above = folder
    while above != "/":
        above = os.path.dirname(above)
        st = os.stat(above)
        if not trusted_owner(st.st_uid, me) or (writers(st.st_mode) and not st.st_mode & stat.S_ISVTX):
            return above, st
    return None


def check_store_file(target: Path, real: str) -> StoreIdentity:
    """Refuse a store file (or a companion file of it) someone else owns or can write; return
    its identity, which :meth:`StoreIdentity.verify` compares later.

    Raises:
        StoreError: naming the file, who can change it and the fix.
    """
    me = os.geteuid()
    st = os.lstat(real)
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"run store {target} is not a file; give the path of a store file with --db")
    if not trusted_owner(st.st_uid, me):
        raise _refuse(target, f"the file belongs to {who(st.st_uid)}, who can change it",
                      "Use a store of your own (--db or $RESEL_DB). To look at theirs, copy it first "
                      f"(`cp {shlex.quote(str(target))} ~/theirs.db`): the copy is yours, and holds what they wrote")
    can = writers(st.st_mode)
    if can:
        raise _refuse(target, f"the file is writable by {can} (mode {stat.S_IMODE(st.st_mode):04o})",
                      f"Run `chmod go-w {shlex.quote(str(target))}`")
    for suffix in SIDECARS:
        try:
            side = os.lstat(real + suffix)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(side.st_mode) or not stat.S_ISREG(side.st_mode):
            raise _refuse(target, f"its companion {real + suffix} is not a regular file",
                          "Remove it if no resel is running on this store")
        if not trusted_owner(side.st_uid, me) or writers(side.st_mode):
            raise _refuse(target, f"its companion {real + suffix} belongs to {who(side.st_uid)} (mode "
                                  f"{stat.S_IMODE(side.st_mode):04o}); SQLite would copy its pages into the store",
                          "Remove it if no resel is running on this store, and " + _OWN_FOLDER)
    return StoreIdentity(real, st.st_dev, st.st_ino)


def code_file_problem(path: str | os.PathLike[str], st: os.stat_result,
                      harm: str = "what it runs as you") -> str | None:
    """Why a file that can carry commands (a sites file, a bag, its task table), opened as
    ``path`` and with ``st`` the ``fstat`` of the opened file, may not be trusted; None if it may.

    Its ``access.env`` chooses which ``squeue`` runs as you, a bag's command and arguments run
    as you: so the file must be yours (or root's), and a regular file must be writable by
    nobody else, reached through no other user's link, in folders nobody else may rename it
    from (yours or root's, writable by others only with the sticky bit) — the store's rules,
    except that its own folder may be sticky (nothing beside it is read). ``harm`` says what
    whoever else can change it chooses (a known_hosts file: which key stands for a host).
    """
    me = os.geteuid()
    if not trusted_owner(st.st_uid, me):
        return (f"belongs to {who(st.st_uid)}, who can change {harm}; copy it (the copy is yours), "
                "read it, and give your copy")
    if not stat.S_ISREG(st.st_mode):
        return None                               # a pipe of yours (--sites <(…)): nobody else's
    can = writers(st.st_mode)
    shown = shlex.quote(os.fspath(path))
    if can:
        return (f"is writable by {can} (mode {stat.S_IMODE(st.st_mode):04o}), who could change {harm}; "
                f"run `chmod go-w {shown}`")
    foreign = foreign_link_on_the_way(path, me)
    if foreign is not None:
        return f"{foreign[0]} is a symbolic link owned by {who(foreign[1])}, who can point it at a file of theirs; " \
               "give the real path"
    real = os.path.realpath(path)
    try:
        same = os.stat(real)
        unsafe = unsafe_folder_above(real, me)
    except OSError:
        return "changed while it was read; run the command again"
    if (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):
        return "changed while it was read; run the command again"
    if unsafe is not None:
        above, fst = unsafe
        if not trusted_owner(fst.st_uid, me):
            return (f"its folder {above} belongs to {who(fst.st_uid)}, who could rename the file and put theirs in "
                    "its place; keep it in a folder of your own")
        return (f"its folder {above} is writable by {writers(fst.st_mode)} and has no sticky bit (mode "
                f"{stat.S_IMODE(fst.st_mode):04o}), so they could rename the file and put theirs in its place; run "
                f"`chmod go-w {shlex.quote(above)}` if it is yours, or keep the file in a folder of your own")
    return None


def read_secret(path: str | os.PathLike[str], what: str) -> str:
    """The text of a secret file (a token) that only the user can read and write.

    Opened once, without following a final symbolic link another user could swap; the checks
    are made on the opened file itself.

    Raises:
        ReselError: the file is missing, another user's, readable or writable by others — with
            the ``chmod`` that fixes it.
    """
    path = os.path.expanduser(os.fspath(path))
    me = os.geteuid()
    try:
        link = os.lstat(path)
        if stat.S_ISLNK(link.st_mode) and not trusted_owner(link.st_uid, me):
            raise ReselError(f"{what} {path} is a symbolic link owned by {who(link.st_uid)}, who can point it at a "
                             "file of theirs; give the real file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ReselError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ReselError(f"{what} {path} is not a regular file")
        if not trusted_owner(st.st_uid, me):
            raise ReselError(f"{what} {path} belongs to {who(st.st_uid)}, not to you: they know it and can change "
                             "it; keep your own copy, made by you, readable by you alone (`chmod 600 FILE`)")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise ReselError(f"{what} {path} can be read or written by other users (mode {mode:04o}): it is a "
                             f"password; run `chmod 600 {shlex.quote(path)}` (and get a new one if others may "
                             "have read it)")
        data = f.read(1 << 16)
    return data.decode("utf-8", errors="replace")
