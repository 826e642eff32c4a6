"""Files resel writes on request (reports, figures, schedules): never over an input, never
through a link, private.

``resel report 1 --db x.db --html x.db`` once replaced the run store with the report. Every
output option therefore checks, before opening anything for writing, that the file it would
write is not one the command reads — compared by device and inode, so another spelling of the
path, a symlink or a hard link to the store is caught too. Files and folders resel creates
are the user's alone (0600 and 0700, whatever the umask): reports hold site names, paths and
run details other users of a shared machine need not see.

Nothing is written through a symbolic link (issue 24, Seen 4: another user's link in a
world-writable folder, ``/tmp/report.html -> ~/.bashrc``, had ``report --html``, ``--plot`` and
``replay --output`` overwrite the user's own files, where ``fs.protected_symlinks`` is off). Each
output is written to a fresh temporary file in the target's folder, created
``O_CREAT|O_EXCL|O_NOFOLLOW`` and 0600, then renamed over the target — a rename replaces a link,
never follows it, and a reader never sees half a file; a command that fails leaves the old
file as it was. An existing link at the target is refused with a clear error, as is a target
folder that is a link another user owns (they could point it anywhere).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from resel.errors import ReselError
from resel.trust import trusted_owner, who

#: SQLite's companions of a store file: writing over them damages the store as surely
_SIDECARS = ("-wal", "-shm", "-journal")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def refuse_inputs(output: str | os.PathLike[str], option: str,
                  inputs: Iterable[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """Raise if ``output`` is (or links to) one of ``inputs``, given as ``(what, path)`` pairs.

    Raises:
        ReselError: naming the option, the file and what it is (``the run store``, ``the trace``).
    """
    target = _identity(Path(output))
    if target is None:
        return
    for what, path in inputs:
        if path is None:
            continue
        candidates = [Path(path)]
        if what == "the run store":
            candidates += [Path(f"{path}{suffix}") for suffix in _SIDECARS]
        if any(_identity(c) == target for c in candidates):
            raise ReselError(f"{option} {output} is {what} ({path}): writing there would destroy it; "
                             "choose another file")


#: the files a ``--plot`` folder receives (resel.report.plots writes them; checked before any work)
FIGURES = ("gantt", "cdfs", "predictions", "workload_by_size")
FIGURE_FORMATS = ("png", "svg")


def refuse_plot_inputs(folder: str | os.PathLike[str],
                       inputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
                       names: Iterable[str] = FIGURES) -> None:
    """:func:`refuse_inputs` for a ``--plot`` folder and every figure file it would receive."""
    inputs = list(inputs)
    refuse_inputs(folder, "--plot", inputs)
    for name in names:
        for fmt in FIGURE_FORMATS:
            refuse_inputs(Path(folder) / f"{name}.{fmt}", "--plot", inputs)


def refuse_foreign_link(folder: str | os.PathLike[str], option: str) -> None:
    """Raise if ``folder`` is a symbolic link that another user (not root) owns: they could
    point it at a folder of the user's, and resel's files would land there.

    Raises:
        ReselError: naming the option, the link and its owner.
    """
    try:
        st = os.lstat(folder)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) and not trusted_owner(st.st_uid, os.geteuid()):
        raise ReselError(f"{option} {folder} is a symbolic link owned by {who(st.st_uid)}, who can point it "
                         "anywhere; give a folder of your own")


def private_dir(folder: str | os.PathLike[str], option: str = "--plot") -> Path:
    """``folder``, created with any missing parents, each 0700 (an existing one is left as is).

    Raises:
        ReselError: a part of the path is a file, a folder cannot be made, or ``folder`` is a
            link another user owns.
    """
    folder = Path(folder)
    refuse_foreign_link(folder, option)
    missing = []
    for parent in (folder, *folder.parents):
        if parent.is_dir():
            break
        missing.append(parent)
    try:
        for parent in reversed(missing):
            try:
                os.mkdir(parent, 0o700)
            except FileExistsError:
                if not parent.is_dir():
                    raise
    except OSError as exc:
        raise ReselError(f"cannot make folder {folder}: {exc.strerror or exc}") from None
    return folder


class Output:
    """A file being written for the user: a private temporary file beside the target, renamed
    over it by :meth:`close` (or discarded by :meth:`discard`, or by leaving a ``with`` block
    through an exception). Any other attribute is the open file's (``write``, ``flush``, …:
    matplotlib's ``savefig`` writes to it as to any file)."""

    def __init__(self, target: Path, temporary: Path, file: IO, option: str) -> None:
        self.target, self.temporary, self.file, self.option = target, temporary, file, option
        self.done = False

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> "Output":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()

    def close(self) -> None:
        """Finish the file (flushed to disk) and rename it over the target.

        Raises:
            ReselError: the file cannot be finished or put in place (the target is then unchanged).
        """
        if self.done:
            return
        self.done = True
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.temporary, self.target)
        except OSError as exc:
            self._remove()
            raise ReselError(f"cannot write {self.option} {self.target}: {_why(exc, self.target)}") from None

    def discard(self) -> None:
        """Drop what was written; the target stays as it was."""
        if self.done:
            return
        self.done = True
        try:
            self.file.close()
        except OSError:
            pass
        self._remove()

    def _remove(self) -> None:
        try:
            os.unlink(self.temporary)
        except OSError:
            pass


def _why(exc: OSError, target: Path) -> str:
    """An OSError in words; replacing another user's file in a sticky folder says so."""
    if isinstance(exc, PermissionError):
        try:
            st = os.lstat(target)
            if not trusted_owner(st.st_uid, os.geteuid()):
                return (f"it belongs to {who(st.st_uid)}, and resel does not write another user's file; "
                        "give another path")
        except OSError:
            pass
    return exc.strerror or str(exc)


def create(path: str | os.PathLike[str], mode: str = "w", *, parents: bool = False,
           option: str = "the output") -> Output:
    """An :class:`Output` for ``path`` (``"w"`` text, ``"wb"`` binary): a temporary file in its
    folder, created 0600 without following a link, renamed over ``path`` when closed; with
    ``parents``, missing folders are made (0700). ``option`` names it in errors (``--html``).

    Raises:
        ReselError: ``path`` is a symbolic link, a folder, a device, pipe or socket, its folder a
            link of another user's, or the file cannot be created.
    """
    target = Path(path)
    try:
        st = os.lstat(target)
    except OSError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            points = os.readlink(target)
        except OSError:
            points = "?"
        raise ReselError(f"{option} {target} is a symbolic link (to {points}): resel does not write through links; "
                         "remove it or give another path")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ReselError(f"{option} {target} is a folder; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # the rename would replace it: /dev/full (or a FIFO another program reads) became a file
        raise ReselError(f"{option} {target} is a device, pipe or socket, not a file: resel writes a new file and "
                         "renames it over the target, which would replace it; give a file name")
    folder = target.parent
    if parents:
        private_dir(folder, option)
    else:
        refuse_foreign_link(folder, option)
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    temporary = folder / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(temporary, flags, 0o600)
    except OSError as exc:
        raise ReselError(f"cannot write {option} {target}: {exc.strerror or exc}") from None
    if "b" in mode:
        file = os.fdopen(fd, mode)
    else:
        file = os.fdopen(fd, mode, encoding="utf-8", newline="\n")
    return Output(target, temporary, file, option)
