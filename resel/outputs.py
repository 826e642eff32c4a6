"""Files resel writes on request (reports, figures, schedules): never over an input, private.

``resel report 1 --db x.db --html x.db`` once replaced the run store with the report. Every
output option therefore checks, before opening anything for writing, that the file it would
write is not one the command reads — compared by device and inode, so another spelling of the
path, a symlink or a hard link to the store is caught too. Files and folders resel creates
are the user's alone (0600 and 0700, whatever the umask): reports hold site names, paths and
run details other users of a shared machine need not see.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from resel.errors import ReselError

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


def private_dir(folder: str | os.PathLike[str]) -> Path:
    """``folder``, created with any missing parents, each 0700 (an existing one is left as is).

    Raises:
        ReselError: a part of the path is a file, or a folder cannot be made.
    """
    folder = Path(folder)
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


def create(path: str | os.PathLike[str], mode: str = "w", *, parents: bool = False) -> IO:
    """Open ``path`` for writing (``"w"`` text, ``"wb"`` binary), created 0600 if new; with
    ``parents``, its missing folders are made (0700).

    Raises:
        ReselError: the file cannot be written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    if parents:
        private_dir(Path(path).parent)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise ReselError(f"cannot write {path}: {exc.strerror or exc}") from None
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8", newline="\n")
