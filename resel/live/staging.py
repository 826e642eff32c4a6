"""A live run's task data on one site: inputs into the site's cache, outputs home (docs/data.md).

Everything here runs on the site's worker thread (:mod:`resel.live.sites`), called by the
coordinator for an action or a result; it touches the site (through the transport) and the
results folder on this machine, never the engine or the store — it returns what it moved and
the coordinator records it.

* :meth:`SiteData.stage` puts a task's inputs in ``WORKDIR/RUN/cache/SHA256`` unless the site
  holds them already for this run: each file is read from this machine, hashed as it is sent
  and renamed into place only when its sha256 is the manifest's. A file changed on disk since
  the run started is refused (:class:`InputChanged`): the task must never run on other data.
* :meth:`SiteData.fetch` brings an attempt's outputs to ``RESULTS/task-NNNN/NAME``: each read
  from the site only if it is a regular file there (``lstat``), into a temporary name, hashed
  as it arrives, renamed only when size and sha256 are the agent's. An output already home with
  the right content (a fetch a crash interrupted after it) is kept.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from resel.backends.files import ContentMismatch, NotRegularFile, sha256_file, temporary_prefix
from resel.backends.pilotsite import PilotSite, task_key
from resel.errors import ReselError
from resel.task_data import InputFile

#: the run's inputs on a site: a folder beside the pilots' folders (the agent's ``../cache``)
CACHE = "cache"
#: the mode of a cached input: read-only, so a task cannot change it for the next one
CACHED_MODE = 0o400
#: the probe file that measures a site's bandwidth before the run's own transfers (4 MB: a
#: few tenths of a second on a slow link, enough to leave the SFTP session's start-up behind)
PROBE_BYTES = 4_000_000


class InputChanged(ReselError):
    """An input's bytes are no longer those checked when the run started (a file edited or
    replaced meanwhile): refused, never sent — the run's inputs are the ones it checked."""


class OutputsNotDelivered(ReselError):
    """An attempt's outputs cannot come home: gone from the site, not a regular file there, or
    other bytes than the agent recorded. The attempt counts as failed; the task runs again."""


class ResultsFolderRefused(ReselError):
    """A folder outputs would be written into is not private to the user: a symbolic link,
    another user's folder, or one others may write. Another user could point it at a folder of
    yours (and an output would replace a file there) or take the outputs; nothing is written."""


class ResultsDiskFull(ReselError):
    """The results folder's disk is full (or over quota): fetching stops, nothing is lost —
    the outputs stay on the site until ``--resume`` finds room."""


@dataclass(frozen=True)
class Sent:
    """One input sent to a site's cache."""

    sha256: str
    size: int
    seconds: float


@dataclass(frozen=True)
class Fetched:
    """One output home: its name in the task's folder, where it is now, what it is."""

    name: str
    path: str
    size: int
    sha256: str
    seconds: float


class SiteData:
    """One site's task data for one run: what its cache holds, sending inputs, fetching outputs.

    Args:
        psite: the site (transport, paths), or a callable giving it on first use (the
            coordinator opens sites on their own threads).
        run_key: the run's key (its folder on the site).
        held: sha256s the store says the site's cache holds for this run (``site_files``).
    """

    def __init__(self, psite: PilotSite | Callable[[], PilotSite], run_key: str, held: Iterable[str] = ()):
        self._psite = psite
        self.run_key = run_key
        self._held = set(held)
        self._lock = threading.Lock()
        self._cache_made = False

    @property
    def psite(self) -> PilotSite:
        if not isinstance(self._psite, PilotSite):
            self._psite = self._psite()
        return self._psite

    @property
    def cache_dir(self) -> str:
        return posixpath.join(self.psite.run_dir(self.run_key), CACHE)

    def holds(self, sha256: str) -> bool:
        with self._lock:
            return sha256 in self._held

    def forget(self, digests: Iterable[str]) -> None:
        """The site's copy of these files is not to be trusted (an agent found one missing or
        wrong): they are sent again with the next task that needs them."""
        with self._lock:
            self._held.difference_update(digests)

    def cache_path(self, sha256: str) -> str:
        return posixpath.join(self.cache_dir, sha256)

    def stage(self, files: Iterable[InputFile]) -> list[Sent]:
        """Make sure the site's cache holds each file; returns what was sent now.

        Raises:
            InputChanged: a file's bytes differ from the manifest's (nothing is left under its
                digest's name).
        """
        todo = [f for f in {f.sha256: f for f in files}.values() if not self.holds(f.sha256)]
        if not todo:
            return []
        transport = self.psite.transport
        if not self._cache_made:
            transport.makedirs(self.cache_dir)
            self._cache_made = True
        began = time.monotonic()
        results = transport.put_files([(f.path, self.cache_path(f.sha256), f.size, f.sha256) for f in todo],
                                      mode=CACHED_MODE)
        seconds = time.monotonic() - began
        total = sum(f.size for f in todo) or 1
        sent: list[Sent] = []
        for f, result in zip(todo, results):
            if isinstance(result, ContentMismatch):
                raise InputChanged(f"input {f.name} ({f.path}) changed since the run started: {result.what} is "
                                   f"{result.got}, not {result.expected}; it is not sent (docs/data.md)")
            if isinstance(result, NotRegularFile):
                raise InputChanged(f"input {f.name} ({f.path}) changed since the run started: {result}; "
                                   "it is not sent (docs/data.md)")
            if isinstance(result, FileNotFoundError) and not os.path.exists(f.path):
                raise InputChanged(f"input {f.name} ({f.path}) is gone since the run started; "
                                   "it is not sent (docs/data.md)")
            if isinstance(result, Exception):
                raise result
            # one batch, one clock: each file's share of it by its bytes (what pricing needs)
            sent.append(Sent(f.sha256, f.size, seconds * (f.size or 1) / total))
            with self._lock:
                self._held.add(f.sha256)
        return sent

    def fetch(self, pilot: int, task: int, attempt: int, outputs: list[dict[str, Any]], dest: str) -> list[Fetched]:
        """Bring an attempt's outputs home into ``dest`` (the task's results folder).

        Raises:
            OutputsNotDelivered: an output is gone, not a regular file, or not the agent's bytes.
            ResultsDiskFull: no room at home (nothing is lost: the outputs stay on the site).
            Anything transient (a connection lost) as the transport raises it: the caller tries
            again later.
        """
        key = task_key(task, attempt)
        why = results_root_problem(os.path.dirname(os.path.dirname(dest)))
        if why:
            raise ResultsFolderRefused(f"{why}; nothing was written")
        got: list[Fetched] = []
        todo: list[tuple[int, dict, str]] = []
        new: set[str] = set()             # outputs not home before this fetch (a repaired one was)
        for index, out in enumerate(outputs):
            parts = out["name"].split("/") if isinstance(out.get("name"), str) else []
            if not parts or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
                raise OutputsNotDelivered(f"output {out.get('name')!r} of {key}: not a relative path inside "
                                          "the task's folder; refused")
            local = os.path.join(dest, *parts)
            try:
                private_folders(os.path.dirname(dest), [os.path.basename(dest), *parts[:-1]])
            except OSError as e:
                self._refuse_full(e, dest)
                raise
            _drop_leftovers(local)
            if _already_home(local, int(out["size"]), out["sha256"]):
                got.append(Fetched(out["name"], local, int(out["size"]), out["sha256"], 0.0))
            else:
                todo.append((index, out, local))
                if not os.path.lexists(local):
                    new.add(local)
        if todo:
            began = time.monotonic()
            results = self.psite.transport.get_files(
                [(self.psite.output_path(self.run_key, pilot, key, index, out["name"]), local, int(out["size"]),
                  out["sha256"]) for index, out, local in todo])
            seconds = time.monotonic() - began
            total = sum(int(out["size"]) for _, out, _ in todo) or 1
            refused = next((OutputsNotDelivered(f"output {out['name']} of {key}: {result}")
                            if isinstance(result, (ContentMismatch, NotRegularFile)) else
                            OutputsNotDelivered(f"output {out['name']} of {key} is gone from the site")
                            for (_, out, _), result in zip(todo, results)
                            if isinstance(result, (ContentMismatch, NotRegularFile, FileNotFoundError))), None)
            if refused is not None:
                # the attempt is not delivered: what this fetch newly put home of it goes too, so the
                # task's folder never shows a failed attempt's file beside the outputs of the one that
                # delivers (one that was home, damaged, and is now repaired stays)
                for (_, out, local), result in zip(todo, results):
                    if not isinstance(result, Exception) and local in new:
                        _remove_own(local)
                raise refused
            for (index, out, local), result in zip(todo, results):
                name = out["name"]
                if isinstance(result, OSError):
                    self._refuse_full(result, dest)
                if isinstance(result, Exception):
                    raise result
                got.append(Fetched(name, local, int(out["size"]), out["sha256"],
                                   seconds * (int(out["size"]) or 1) / total))
        order = {out["name"]: i for i, out in enumerate(outputs)}
        return sorted(got, key=lambda f: order[f.name])

    @staticmethod
    def _refuse_full(e: OSError, dest: str) -> None:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ResultsDiskFull(f"the results folder {dest} is full ({e.strerror}): fetching stopped; the "
                                  "outputs stay on the site — free some space, then `resel run --resume`") from None

    def probe(self, size: int = PROBE_BYTES) -> tuple[float, float]:
        """(MB/s to the site, MB/s from it), measured with one file of ``size`` random bytes sent
        to the run's folder and fetched back — what prices a site's data before the run's own
        transfers do (docs/data.md). The file is removed from both sides."""
        import tempfile
        transport = self.psite.transport
        folder = self.psite.run_dir(self.run_key)
        transport.makedirs(folder)
        remote = posixpath.join(folder, f".resel-probe-{os.getpid()}")
        with tempfile.TemporaryDirectory(prefix="resel-probe-") as tmp:
            local, back = os.path.join(tmp, "out"), os.path.join(tmp, "back")
            with open(local, "wb") as f:
                f.write(os.urandom(size))
            try:
                began = time.monotonic()
                transport.put_file(local, remote)
                sent = time.monotonic() - began
                began = time.monotonic()
                transport.get_file(remote, back, size=size)
                got = time.monotonic() - began
            finally:
                transport.remove_tree(remote)
        return size / 1e6 / max(sent, 1e-6), size / 1e6 / max(got, 1e-6)

    def clean(self, pilot: int, task: int, attempt: int, count: int) -> None:
        """Remove a delivered attempt's files from the site (its task folder; on a pool, the
        outputs the wrapper pushed to the access point)."""
        for path in self.psite.task_files(self.run_key, pilot, task_key(task, attempt), count):
            self.psite.transport.remove_tree(path)


def results_root_problem(root: str) -> str | None:
    """Why the results folder ``root`` (the one above ``RESULTS/RUN``) may not receive outputs,
    or None — the one check of `resel run` at its start (resel.cli.live._results_root, before and
    after it makes the folder) and of every fetch, since a stored run's folder may have changed
    hands or modes (``--resume``, ``resel fetch``). It must be yours or root's, and neither it nor
    a folder above it writable by everybody without the sticky bit (anyone could rename the
    run's folder and put theirs, or a link, in its place); a link on the way must be yours or
    root's. A folder not made yet passes (it is made 0700). The caller says what follows."""
    from resel.trust import foreign_link_on_the_way, trusted_owner, who, writers
    me = os.geteuid()
    foreign = foreign_link_on_the_way(root, me)
    if foreign is not None:
        return (f"the results folder {root}: {foreign[0]} is a symbolic link owned by {who(foreign[1])}, who can "
                "point it anywhere")
    real = os.path.realpath(root)
    above = real
    while above != os.path.dirname(above):
        above = os.path.dirname(above)
        try:
            st = os.stat(above)
        except OSError:
            continue                      # made below, 0700
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            return (f"{above}, a folder above the results folder {real}, is writable by every user and has no "
                    f"sticky bit (mode {stat.S_IMODE(st.st_mode):04o}): anyone could rename the results folder and "
                    "put theirs in its place")
    try:
        st = os.stat(real)
    except OSError:
        return None                       # made below, 0700
    if not trusted_owner(st.st_uid, me):
        return (f"the results folder {real} belongs to {who(st.st_uid)}, who could rename the run's folder and "
                "put theirs (or a link) in its place")
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return (f"the results folder {real} is writable by {writers(st.st_mode)} and has no sticky bit (mode "
                f"{stat.S_IMODE(st.st_mode):04o}): anyone could rename the run's folder and put theirs in its place; "
                f"`chmod o-w {real}` (or `chmod +t`)")
    return None


def private_folders(base: str, parts: list[str]) -> str:
    """``base/parts[0]/parts[1]/…``, each folder made 0700 where missing (and ``base``'s parents,
    the results folder the user chose), and every one of
    them, ``base`` included, refused unless it is a directory of this user (not a link) that
    nobody else may write — so an output renamed into the last one lands where resel chose,
    not where a link another user planted points (docs/data.md). Returns the last folder.

    Raises:
        ResultsFolderRefused: a folder is a link, not a directory, another user's, or writable
            by others; OSError as ``mkdir`` raises it (a full disk: the caller says so).
    """
    from resel.trust import who, writers
    me = os.geteuid()
    os.makedirs(os.path.dirname(base) or ".", mode=0o700, exist_ok=True)
    path = base
    for part in [None, *parts]:
        if part is not None:
            path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise ResultsFolderRefused(
                f"the results folder {path} is a symbolic link (to {os.readlink(path)}): resel does not write "
                "outputs through links; nothing was written: remove the link (or choose another --results folder)")
        if not stat.S_ISDIR(st.st_mode):
            raise ResultsFolderRefused(f"the results folder {path} is not a directory; nothing was written: "
                                       "remove it (or choose another --results folder)")
        if st.st_uid != me:
            raise ResultsFolderRefused(
                f"the results folder {path} belongs to {who(st.st_uid)}, not to you: they could take or "
                "replace the outputs; nothing was written: choose a --results folder of your own (resel makes "
                "its folders 0700), or remove it if it is a leftover")
        others = writers(st.st_mode)
        if others:
            raise ResultsFolderRefused(
                f"the results folder {path} is writable by {others} (mode {stat.S_IMODE(st.st_mode):04o}): "
                f"they could put a link in it and have an output replace a file of yours; run "
                f"`chmod go-w {path}` (or choose another --results folder)")
    return path


def _drop_leftovers(path: str) -> None:
    """Temporary files an interrupted fetch of this output left (``.NAME.part-XXXXXXXX``, the
    names :func:`resel.backends.files.temporary_name` makes): never taken for the output, removed
    before it is fetched again. Only our own regular files are touched."""
    folder, base = os.path.split(path)
    prefix = temporary_prefix(base)
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and len(n) == len(prefix) + 8
                 and all(c in "0123456789abcdef" for c in n[len(prefix):])]
    except OSError:
        return
    for name in names:
        _remove_own(os.path.join(folder, name))


def _remove_own(path: str) -> None:
    """Remove a regular file of ours (never a link or another user's file); gone already is fine."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            os.unlink(path)
    except OSError:
        pass


def _already_home(path: str, size: int, digest: str) -> bool:
    """An output a crash left home complete (renamed only after its check): keep it."""
    try:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) != size:
            return False
        return sha256_file(path).sha256 == digest
    except OSError:
        return False
