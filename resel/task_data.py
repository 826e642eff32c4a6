"""A bag's task data made concrete: which files each task reads, their sizes and sha256s.

The bag file says it with patterns (``inputs``: files or globs relative to the bag file, with
``{index}``/``{name}`` per task; docs/data.md). Before a live run submits anything, the
patterns are expanded for every task, every file found, read and hashed — the run's
*manifest* — so a missing or unreadable input is one clear error naming it and nothing
starts, and so every later copy of a file can be checked against what was checked here. An
input the same for every task (one name and one sha256 in all of them) is *shared*: found by
content, not declared. The manifest is stored with the run (``task_inputs``) so ``--resume``
checks against the same digests.

Local filesystem reads and hashing only; nothing here talks to a site.
"""

from __future__ import annotations

import glob as globmod
import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Callable, Iterable

from resel.backends.files import NotRegularFile, open_source
from resel.command_template import fill_path
from resel.config import relative_path_problem
from resel.domain import Bag
from resel.errors import InputError

#: the files the agent makes in a task's folder: an input there under one of these names would
#: be replaced before the command runs (resel.shipped.agent's OWN_FILES)
AGENT_FILES = ("stdout", "stderr", "perf.csv")
#: characters that make a pattern a glob (glob.has_magic's own test)
_MAGIC = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input of a task: its name in the task's folder, where it is on this machine, and
    what it must be (size, sha256)."""

    name: str
    path: str
    size: int
    sha256: str


@dataclass
class Manifest:
    """Every task's inputs (index → files, in the bag's order) and which of them are shared."""

    tasks: list[tuple[InputFile, ...]]
    #: (name, sha256) of the inputs every task has
    shared: frozenset[tuple[str, str]]

    def inputs(self, index: int) -> tuple[InputFile, ...]:
        return self.tasks[index] if 0 <= index < len(self.tasks) else ()

    def is_shared(self, f: InputFile) -> bool:
        return (f.name, f.sha256) in self.shared

    @property
    def shared_files(self) -> tuple[InputFile, ...]:
        """The shared inputs, once each (as the first task names them)."""
        return tuple(f for f in (self.tasks[0] if self.tasks else ()) if self.is_shared(f))

    @property
    def shared_bytes(self) -> int:
        return sum(f.size for f in self.shared_files)

    @property
    def own_bytes_mean(self) -> float:
        """Mean bytes of a task's own (not shared) inputs: what moving one task costs."""
        if not self.tasks:
            return 0.0
        return sum(f.size for files in self.tasks for f in files if not self.is_shared(f)) / len(self.tasks)

    @property
    def distinct_files(self) -> dict[str, InputFile]:
        """sha256 → one file with that content (what a site's cache holds at most); a file not
        read (a dry run: no digest) counts once by its path."""
        out: dict[str, InputFile] = {}
        for files in self.tasks:
            for f in files:
                out.setdefault(f.sha256 or f.path, f)
        return out

    def rows(self, run_id: int) -> Iterable[dict]:
        """The store's ``task_inputs`` rows: a shared file once, as task −1."""
        for f in self.shared_files:
            yield {"run_id": run_id, "task": -1, "name": f.name, "path": f.path, "size": f.size, "sha256": f.sha256}
        for index, files in enumerate(self.tasks):
            for f in files:
                if not self.is_shared(f):
                    yield {"run_id": run_id, "task": index, "name": f.name, "path": f.path, "size": f.size,
                           "sha256": f.sha256}

    @classmethod
    def from_rows(cls, rows: Iterable[dict], count: int) -> "Manifest":
        """A stored manifest back (``--resume``): shared files first in every task, as built."""
        shared: list[InputFile] = []
        own: list[list[InputFile]] = [[] for _ in range(count)]
        for r in rows:
            f = InputFile(r["name"], r["path"], int(r["size"]), r["sha256"])
            if r["task"] == -1:
                shared.append(f)
            elif 0 <= r["task"] < count:
                own[r["task"]].append(f)
        keys = frozenset((f.name, f.sha256) for f in shared) if count > 1 else frozenset()
        return cls([tuple(shared) + tuple(o) for o in own], keys)


def task_folder(index: int, count: int) -> str:
    """The name of a task's results folder: ``task-0007`` (the index padded to the bag's width)."""
    return f"task-{index:0{len(str(max(count - 1, 0)))}d}"


def build(bag: Bag, *, progress: Callable[[int, int], None] | None = None, hashed: bool = True) -> Manifest:
    """Expand, check and hash every task's inputs (docs/data.md).

    ``progress(bytes hashed, bytes in all)`` is called as the files are read. Without
    ``hashed`` (a dry run) the files are found and checked but not read: digests are empty and
    nothing is shared.

    Raises:
        InputError: naming the bag file, the pattern (``bag.inputs[i]``), the task and what is
            wrong — no file matches, a folder, an unreadable file, two inputs under one name.
    """
    data = bag.data
    if data is None or not data.files:           # URL inputs are the site's to fetch (resel.url_inputs)
        return Manifest([() for _ in range(bag.count)], frozenset())
    found: dict[str, tuple[str, ...]] = {}        # filled pattern -> matching paths (globbed once)
    sizes: dict[str, int] = {}                    # path -> size, checked readable regular files
    named: list[list[tuple[str, str]]] = []       # per task: (name, path)
    for index in range(bag.count):
        names: dict[str, int] = {}
        files: list[tuple[str, str]] = []
        for j, spec in enumerate(data.inputs):
            where = f"bag.inputs[{j}]"
            if spec.is_url:      # fetched by the site, never here: only its name is taken in the folder
                _take_name(bag, where, index, names, spec.file_name, j)
                continue
            row = bag.tasks[index] if bag.tasks else None
            pattern = fill_path(spec.pattern, index, bag.name,
                                None if row is None else (row.name, row.size, row.args))
            full = os.path.join(data.base, os.path.expanduser(pattern))
            paths = found.get(full)
            if paths is None:
                paths = found[full] = _expand(bag, where, index, spec.pattern, full, sizes)
            if spec.name is not None and len(paths) != 1:
                raise InputError(bag.source, where, f"task {index}: 'as = {spec.name!r}' renames one file, but "
                                 f"{spec.pattern!r} matches {len(paths)}", "a pattern that matches one file")
            for path in paths:
                name = spec.name if spec.name is not None else os.path.basename(path)
                why = relative_path_problem(name, glob=True)   # the agent refuses such a name
                if not why and name in AGENT_FILES:
                    why = "the agent writes its own file under that name, so the task would not read the input"
                if why:
                    raise InputError(bag.source, where, f"task {index}: input {path}: its name {name!r} cannot be a "
                                     f"file name in the task's folder ({why})", "rename the file, or `as = NAME`")
                _take_name(bag, where, index, names, name, j)
                files.append((name, path))
        named.append(files)
    digests = _hash_all(bag, sizes, progress) if hashed else {path: "" for path in sizes}
    tasks = [tuple(InputFile(name, path, sizes[path], digests[path]) for name, path in files) for files in named]
    shared: frozenset[tuple[str, str]] = frozenset()
    if len(tasks) > 1 and hashed:
        common = set((f.name, f.sha256) for f in tasks[0])
        for files in tasks[1:]:
            common &= {(f.name, f.sha256) for f in files}
            if not common:
                break
        shared = frozenset(common)
    return Manifest(tasks, shared)


def _take_name(bag: Bag, where: str, index: int, names: dict[str, int], name: str, j: int) -> None:
    """Give input ``j`` its name in task ``index``'s folder, unless another input has it."""
    if name in names:
        raise InputError(bag.source, where, f"task {index}: two inputs are named {name!r} in its "
                         f"folder (from bag.inputs[{names[name]}] and bag.inputs[{j}])",
                         "names that differ (`as = ...` renames one)")
    names[name] = j


def _expand(bag: Bag, where: str, index: int, written: str, full: str, sizes: dict[str, int]) -> tuple[str, ...]:
    """The files one filled-in pattern names, each checked to be a readable regular file."""
    if _MAGIC & set(full):
        paths = sorted(p for p in globmod.glob(full) if not os.path.isdir(p))
        if not paths:
            raise InputError(bag.source, where, f"task {index}: {written!r} ({full}) matches no file",
                             "a file or glob relative to the bag file")
    else:
        paths = [full]
    for path in paths:
        if path in sizes:
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise InputError(bag.source, where, f"task {index}: input {path} not found",
                             "a file relative to the bag file") from None
        except OSError as e:
            raise InputError(bag.source, where, f"task {index}: input {path} cannot be read: {e.strerror or e}") from None
        if stat.S_ISDIR(st.st_mode):
            raise InputError(bag.source, where, f"task {index}: input {path} is a folder",
                             "files; name a folder's files with a glob (folder/*)")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(bag.source, where, f"task {index}: input {path} is not a regular file")
        if not os.access(path, os.R_OK):
            raise InputError(bag.source, where, f"task {index}: input {path} cannot be read: permission denied")
        sizes[path] = st.st_size
    return tuple(paths)


def _hash_all(bag: Bag, sizes: dict[str, int], progress: Callable[[int, int], None] | None) -> dict[str, str]:
    total, done, out = sum(sizes.values()), 0, {}
    for path in sizes:
        digest, size = hashlib.sha256(), 0
        try:
            with open_source(path) as f:         # a FIFO swapped in since the check is refused, not waited on
                while block := f.read(1 << 20):
                    digest.update(block)
                    size += len(block)
                    if progress is not None:
                        progress(done + size, total)
        except NotRegularFile as e:
            raise InputError(bag.source, "bag.inputs", f"input {path} is {e.kind}, not a regular file") from None
        except OSError as e:
            raise InputError(bag.source, "bag.inputs", f"input {path} cannot be read: {e.strerror or e}") from None
        sizes[path] = size
        out[path] = digest.hexdigest()
        done += size
    return out
