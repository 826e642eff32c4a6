"""The probes learned on a trace site, kept between runs of ``resel plan``.

Why: a simulated site whose queue replays a trace teaches the plan how wrong the twin's and the
scheduler's wait estimates are there (:func:`resel.sim.plan.learn_queue_errors`): 120 probe
instants, each shape of the site's pilot menu replayed forward on a copy of the queue until
it starts. That is 97 % of a ``resel plan`` on the example trace sites — 5 to 15 s each time,
though nothing it depends on changed. What the probes find depends only on

* the trace's bytes (its sha256),
* the site's queue: policy, cores, the bag's offset into the trace, its load and speed,
* the pilot shapes probed and the number of probe instants,
* resel's replay code: the sha256 of every source file of ``resel.sim`` and ``resel.models``
  (a changed policy, queue or estimate gives other probes),

so a probe set is stored under the sha256 of exactly that, and a later plan with the same
inputs reads it back instead of replaying (the plan is the same to the last digit:
tests/test_probe_cache.py). The stored document repeats its inputs, and a file whose inputs
differ from the ones asked for is not used.

Trust: a probe set steers the plan's spread and so the pilots a user asks for; whoever can
write it could make a site look fast. It is used only from a folder of this user's (or
root's) that nobody else can write, under folders that others cannot rename (owned by this
user or root, not writable by others unless sticky: :mod:`resel.trust`'s walk), and only if
the file itself is this user's, a regular file (not through a link) and writable by nobody
else. Anything else — a folder someone else can write, a planted file, a file that is not a
probe set — is not read: the probes are replayed as if there were no cache (and a folder
refused is said once on stderr, with the fix). Files are written 0600 in a 0700 folder,
atomically (a reader sees the old set or the new one).

Where: ``$RESEL_CACHE_DIR`` if set (empty or ``off``: no cache), else
``$XDG_CACHE_HOME/resel`` or ``~/.cache/resel``. It is only a cache: removing it costs the
next plan its replays. It does not grow for ever: a set is ~100 KB, and every new resel (its
code digest) or trace makes new ones that the old never replace; so each time a set is stored,
sets not used for :data:`KEEP_DAYS` days are removed, and the least recently used ones while
the folder holds more than :data:`KEEP_BYTES` (a set read is marked used: its mtime).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shlex
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from resel.trust import trusted_owner, unsafe_folder_above, who, writers

#: the environment variable that moves the cache (empty or ``off``: no cache)
ENV = "RESEL_CACHE_DIR"
#: the version of the stored document; another one is not read
FORMAT = 1
#: the longest probe set read (a few thousand probes are ~100 KB)
LIMIT = 16 << 20
#: a probe set not used for this many days is removed when another is stored
KEEP_DAYS = 30
#: the most the folder's probe sets may hold; the least recently used go first
KEEP_BYTES = 64 << 20
#: the sources whose estimates a probe holds
SOURCES = ("scheduler", "twin")

_said: set[str] = set()


def cache_dir() -> Path | None:
    """The cache folder asked for (not yet checked), or None when the cache is off."""
    given = os.environ.get(ENV)
    if given is not None:
        return None if given.strip() in ("", "off") else Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "resel"


@functools.cache
def code_digest() -> str:
    """sha256 of resel's replay and estimate code: every ``.py`` of ``resel.sim`` and
    ``resel.models``, by name and content (a change in any of them gives other probes)."""
    import resel.models
    import resel.sim

    h = hashlib.sha256()
    for package in (resel.sim, resel.models):
        for folder in package.__path__:
            for path in sorted(Path(folder).glob("*.py")):
                h.update(f"{package.__name__}.{path.name}\0".encode())
                h.update(path.read_bytes())
                h.update(b"\0")
    return h.hexdigest()


def trace_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a trace file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def inputs(trace: str, policy: str, cores: int, offset: float, load: float, speed: float,
           shapes: list[tuple[int, float]], points: int) -> dict[str, Any]:
    """Everything a site's probes depend on, as the stored document repeats it."""
    return {"format": FORMAT, "code": code_digest(), "trace_sha256": trace_digest(trace), "policy": policy,
            "cores": int(cores), "offset": float(offset), "load": float(load), "speed": float(speed),
            "shapes": [[int(c), float(w)] for c, w in shapes], "points": int(points)}


def _name(key: dict[str, Any]) -> str:
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return "probes-" + hashlib.sha256(text.encode()).hexdigest() + ".json"


def _say(folder: Path, problem: str, fix: str) -> None:
    """Say once per process why a cache folder is not used, and what fixes it."""
    text = f"resel: not using the probe cache {folder}: {problem}; the probes are replayed instead. {fix}"
    if text not in _said:
        _said.add(text)
        print(text, file=sys.stderr)


def _usable(folder: Path, *, make: bool) -> bool:
    """Whether probe sets may be read from (and written to) ``folder``: this user's (or
    root's), writable by nobody else, under folders nobody else can rename. With ``make`` a
    missing folder is created (0700, its parents as ``mkdir -p`` would)."""
    me = os.geteuid()
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        if not make:
            return False
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(folder)
        except OSError as e:
            _say(folder, f"it cannot be made ({e.strerror})", f"Set {ENV} to a folder of yours, or to off.")
            return False
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) and trusted_owner(st.st_uid, me):   # a link of yours: where it points
        try:
            st = os.stat(folder)
        except OSError:
            return False
    fix = f"Run `chmod go-w {shlex.quote(str(folder))}`, or set {ENV} to a folder only you can write (or to off)."
    if not stat.S_ISDIR(st.st_mode):
        _say(folder, "it is not a folder (or a link of someone else's)", f"Remove it, or set {ENV} to a folder of yours.")
        return False
    if not trusted_owner(st.st_uid, me):
        _say(folder, f"it belongs to {who(st.st_uid)}, who could plant probe sets", f"Set {ENV} to a folder of yours.")
        return False
    can = writers(st.st_mode)
    if can:
        _say(folder, f"it is writable by {can} (mode {stat.S_IMODE(st.st_mode):04o}), who could plant probe sets", fix)
        return False
    try:
        unsafe = unsafe_folder_above(os.path.realpath(folder), me)
    except OSError:
        return False
    if unsafe is not None:
        above, up = unsafe
        whose = (f"belongs to {who(up.st_uid)}" if not trusted_owner(up.st_uid, me)
                 else f"is writable by {writers(up.st_mode)} without the sticky bit")
        _say(folder, f"{above}, a folder above it, {whose}, who could rename the cache folder and put theirs "
                     "in its place", f"Set {ENV} to a folder under folders only you or root own (or to off).")
        return False
    return True


def _probe_rows(doc: Any, key: dict[str, Any]) -> list[tuple[int, float, str, float, float]] | None:
    """The probe set a stored document holds if it is one, for exactly ``key``; else None."""
    if not isinstance(doc, dict) or doc.get("inputs") != key or not isinstance(doc.get("probes"), list):
        return None
    rows = []
    for row in doc["probes"]:
        if not (isinstance(row, list) and len(row) == 5):
            return None
        cores, walltime, source, estimate, real = row
        numbers = (walltime, estimate, real)
        if (not isinstance(cores, int) or isinstance(cores, bool) or source not in SOURCES
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)
                           for x in numbers)):
            return None
        rows.append((cores, float(walltime), source, float(estimate), float(real)))
    return rows


def load(key: dict[str, Any]) -> list[tuple[int, float, str, float, float]] | None:
    """The probe set stored for ``key`` — (cores, walltime, source, estimate, real wait) in the
    order they were learned — or None: no cache, none stored, or one that may not be trusted."""
    folder = cache_dir()
    if folder is None or not _usable(folder, make=False):
        return None
    path = folder / _name(key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or not trusted_owner(st.st_uid, os.geteuid()) or writers(st.st_mode)
                or st.st_size > LIMIT):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(LIMIT + 1)
        try:
            os.utime(fd)      # used now: kept by the pruning (on the file opened, not a name)
        except OSError:
            pass
    finally:
        os.close(fd)
    try:
        return _probe_rows(json.loads(raw.decode("utf-8")), key)
    except (ValueError, UnicodeDecodeError, RecursionError):   # (a file of ours nested past the parser)
        return None


def save(key: dict[str, Any], rows: list[tuple[int, float, str, float, float]]) -> None:
    """Store a probe set for ``key`` (0600, atomically); a cache that cannot be written is
    passed over (it is only a cache)."""
    folder = cache_dir()
    if folder is None or not _usable(folder, make=True):
        return
    text = json.dumps({"inputs": key, "probes": [list(r) for r in rows]}, separators=(",", ":"))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".probes-", suffix=".tmp")
    except OSError:
        return
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode())
        os.replace(tmp, folder / _name(key))
    except OSError:      # a full or read-only disk: the next plan replays again
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return
    prune(folder)


def prune(folder: Path, now: float | None = None) -> list[str]:
    """Remove from ``folder`` (already checked private) the probe sets not used for
    :data:`KEEP_DAYS` days, then the least recently used while they hold more than
    :data:`KEEP_BYTES`; returns the names removed. Only this user's regular files named as
    probe sets are touched: nothing else in the folder, no link."""
    now = time.time() if now is None else now
    sets: list[tuple[float, int, str]] = []
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if not (e.name.startswith("probes-") and e.name.endswith(".json")):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    sets.append((st.st_mtime, st.st_size, e.name))
    except OSError:
        return []
    removed, held = [], 0
    for mtime, size, name in sorted(sets, reverse=True):     # the most recently used first
        held += size
        if now - mtime > KEEP_DAYS * 86400 or held > KEEP_BYTES:
            try:
                os.unlink(folder / name)
                removed.append(name)
            except OSError:
                pass
    return removed
