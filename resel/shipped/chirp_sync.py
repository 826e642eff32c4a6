#!/usr/bin/env python3
"""resel chirp wrapper: runs the pilot agent in an HTCondor slot with no shared filesystem.

This file is self-contained (Python standard library only) and runs on Python 3.6 and later,
like resel/live/agent.py, because it runs where the agent runs. The coordinator ships it to the
access point as ``resel-chirp-sync-v3.py``; HTCondor transfers it and the agent into the job's
scratch directory, and starts it as the job's executable::

    resel-chirp-sync.py --agent resel-agent-v3.py --agent-sha256 HEX [--python python3]
        [--interval 2] [--chirp condor_chirp] [--local pilot] [--shared SHA256]... [--url URL]...
        -- AGENT_OPTIONS...

Why: an OSG slot does not see the access point's disk, and HTCondor's own file transfer moves
files only when a job starts and ends. A pilot lives for hours and exchanges task files all the
time, so this wrapper mirrors the pilot directory at run time through ``condor_chirp``, the
job's I/O proxy to its shadow (the submit description sets ``+WantIOProxy = true``). Remote
paths are relative to the job's ``initialdir``, which is the pilot directory on the access
point: the coordinator reads and writes that directory over its transport exactly as on a
shared filesystem, and the agent reads and writes its local mirror ``--local`` exactly as on
one. Neither knows about the other.

Every ``--interval`` seconds, and once more after the agent exits:

* pull (access point → slot): new ``inbox/*.json`` (each fetched once, to a dot-name, then
  renamed: the agent never sees half a file), new ``cancel/*`` files (their content: ``withdraw``
  or a cancel), and ``stop`` (fetched again
  whenever it is listed: ``drain`` may become a hard stop);
* push (slot → access point): ``agent.json``, ``heartbeat.json`` (when it changed),
  ``started/*.json``, ``results/*.json`` (the agent's waves, agent protocol 6: each file a list
  of records; per-key files of older agents alike), ``exit.json``, and ``agent.log`` at the end. A file
  appears atomically: ``put`` to ``.NAME.chirp.tmp``, ``link`` to NAME, ``remove`` the
  temporary name (condor_chirp has no rename; a replaced file is removed just before the link).
  Where ``link`` is refused, the file is put under its name directly, which a reader may catch
  half written; this is logged.

condor_chirp makes no directories: the coordinator creates ``inbox cancel started results
outputs`` in the pilot directory before it submits (resel.backends.htcondor.client does).

Task data (docs/data.md, "The HTCondor pool: no shared filesystem"). The slot keeps its own
``cache/`` beside the mirror (``./cache`` next to ``./pilot``: the agent's ``../cache``, as on a
shared filesystem, so the agent is unchanged):

* inputs: before an inbox file is handed to the agent, each input it names by sha256 that the
  slot's cache does not hold yet is fetched from the run's cache on the access point
  (``../cache/SHA256``, relative to the pilot directory), hashed, and renamed into ``cache/``
  only if its size and sha256 are the named ones. Once per slot and file. A fetch that fails
  or brings other bytes is logged and the task still goes to the agent, which reports it
  (``input NAME: not in the site's cache``) so the coordinator sends the file again and the
  task runs elsewhere or again;
* shared inputs (``--shared SHA256``) come with the job's own file transfer into the scratch
  directory under their sha256 and are moved into ``cache/`` at start, checked the same way;
* URL inputs (``--url URL``) are fetched by HTCondor's transfer plugins into the scratch
  directory under the URL's last path part, and moved to ``cache/url-SHA256(URL)``, which is
  where the agent looks for an input given by ``url`` (their content is not checked: resel
  never saw it);
* outputs: before a results wave is pushed, for each ``done`` result in it each file of its ``outputs`` list (the agent's
  ``tasks/KEY/NAME``) is put to ``outputs/KEY.I`` on the access point (I: its place in the
  list), atomically and 0600, and then removed from the slot (its disk is the job's
  ``request_disk``). An output that cannot be put holds its result back for a few rounds,
  then the result goes without it: the coordinator finds the output missing, and the task
  runs again.

At start the wrapper lists the remote ``results/`` and ``started/`` (and fetches their waves, to
know the attempts they name): attempts with a result are never fetched again, and an attempt
started by an earlier run of this job (an eviction) without a result gets one, outcome ``lost``,
reason ``evicted``, as a file of its own ``results/{key}.json`` (the coordinator lists a pool's
pilot when a new incarnation shows up, when its state changes and now and then, so it reads
those beside the waves), so nothing waits for it forever. A
listing that fails is not an empty one: until both listings have succeeded (tried again every
``--interval``) nothing is pulled from the inbox — else a transient failure would give a
finished attempt a second result over its first, or leave the evicted ones waiting.

SIGTERM and SIGINT (what condor_rm and an eviction send) are passed to the agent, which ends its
attempts as ``lost``; the wrapper pushes their results and exits with the agent's status. Its
own log is ``resel-chirp.log`` in the scratch directory, the one output file transferred back
(it is transferred in empty with the wrapper, so it is there to go back however early the job
ends: see resel.backends.htcondor.client.log_seed).

Nothing another user changed runs: the job starts this wrapper only if its SHA-256 is the one
in the job's arguments (resel.backends.verified), and the wrapper starts the agent only if the
agent's SHA-256 is ``--agent-sha256`` (else it exits 3 with the reason in its log and on
stderr). The local mirror's folders are 0700 and its files are written under random temporary
names with ``O_EXCL|O_NOFOLLOW``, as the agent does.
"""

import argparse
import binascii
import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

#: 2: a 'withdraw' cancel passed on (agent protocol 4), recovery before any pull;
#: 3: task data (inputs into the slot's cache, outputs to outputs/KEY.I, --shared, --url);
#: 4: the agent's records come in waves (agent protocol 6: ``{incarnation}-{n}.json``, a list each)
PROTOCOL_VERSION = 4
LOG_NAME = "resel-chirp.log"
SUBDIRS = ("inbox", "claimed", "started", "results", "cancel", "tasks")
#: the slot's content-addressed inputs, beside the mirror (the agent's ../cache) and, on the
#: access point, beside the pilot directory (the run's cache: ../cache from the initialdir)
CACHE = "cache"
#: where a done attempt's outputs go on the access point: outputs/KEY.I (made at submission)
OUTPUTS = "outputs"
#: where condor_chirp lives when it is not on the job's PATH (it is a libexec tool)
CHIRP_CANDIDATES = ("/usr/libexec/condor/condor_chirp", "/usr/lib/condor/libexec/condor_chirp")
CHIRP_TIMEOUT = 120.0
#: bytes per second a file transfer is given at least, on top of CHIRP_TIMEOUT (a 1 GB
#: output gets 120 + 1000 s; measured in the testbed's pool: 50-100 MB/s)
CHIRP_MIN_RATE = 1e6
#: rounds a done result waits for an output that cannot be put before it goes without it
OUTPUT_TRIES = 3
#: the longest inbox file read for its inputs (the agent reads the file itself)
INBOX_LIMIT = 1 << 20
SHA256_CHARS = frozenset("0123456789abcdef")
#: exit status when the agent is not the file resel shipped
EXIT_MODIFIED = 3


def source():
    """This file's text, for the coordinator to ship to the access point."""
    with open(os.path.abspath(__file__), "r", encoding="utf-8") as f:
        return f.read()


class ChirpError(Exception):
    """condor_chirp failed (exit status 1, or it could not be run)."""


class Chirp(object):
    """condor_chirp's file commands, remote paths relative to the job's initialdir."""

    def __init__(self, program, log):
        self.program = program
        self.log = log
        self.calls = 0

    def call(self, *args, **kw):
        """Run condor_chirp; the finished process, whatever its exit status. ``size``: bytes
        the call moves, which lengthen its timeout (CHIRP_MIN_RATE)."""
        self.calls += 1
        timeout = CHIRP_TIMEOUT + kw.get("size", 0) / CHIRP_MIN_RATE
        try:
            return subprocess.run([self.program] + list(args), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            raise ChirpError("%s %s: %s" % (self.program, " ".join(args), e))

    def failed(self, args, done):
        return ChirpError("%s %s: exit %d: %s" % (self.program, " ".join(args), done.returncode,
                                                  (done.stderr or done.stdout).strip()[:300]))

    def run(self, *args, **kw):
        done = self.call(*args, **kw)
        if done.returncode != 0:
            raise self.failed(args, done)
        return done.stdout

    def getdir(self, remote):
        """Names in a remote directory (``.`` and ``..`` left out).

        getdir's exit status carries no meaning: HTCondor 23.9's condor_chirp sets it to the
        truth value of ``chirp_client_getdir(...) >= 0`` (it exits 1 after printing a listing),
        HTCondor 25's to the listing's length in bytes, modulo 256 (33 for a listing of 33
        bytes, 168 for one of 1,192; both seen in live pools). A failure is told by its
        message, ``chirp: couldn't getdir: REASON`` on stderr (with status 1, in both). So: a
        listing when stderr is empty, whatever the status; never from a condor_chirp killed by
        a signal.
        """
        done = self.call("getdir", remote)
        if done.returncode < 0 or done.stderr.strip():
            raise self.failed(("getdir", remote), done)
        return [n.strip() for n in done.stdout.splitlines() if n.strip() and n.strip() not in (".", "..")]

    def fetch(self, remote, local, size=0):
        self.run("fetch", remote, local, size=size)

    def put(self, local, remote, size=0, perm=None):
        """``perm``: the new file's mode on the access point, octal text (condor_chirp's
        default makes it 0755 there)."""
        self.run(*(["put"] + (["-perm", perm] if perm else []) + [local, remote]), size=size)

    def remove(self, remote):
        self.run("remove", remote)

    def link(self, old, new):
        self.run("link", old, new)


def find_chirp(given):
    if given:
        return given
    found = shutil.which("condor_chirp")
    if found:
        return found
    libexec = os.environ.get("CONDOR_LIBEXEC")
    candidates = ([os.path.join(libexec, "condor_chirp")] if libexec else []) + list(CHIRP_CANDIDATES)
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return "condor_chirp"


def write_atomic(path, data):
    """A new temporary file (random name, O_EXCL|O_NOFOLLOW, 0600), then rename over path."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, ".%s.%s.sync" % (name, binascii.hexlify(os.urandom(8)).decode("ascii")))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def make_private_dirs(path):
    """mkdir -p; new folders 0700 whatever the umask (the agent refuses group-writable ones)."""
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        make_private_dirs(parent)
    try:
        os.mkdir(path, 0o700)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
        return
    os.chmod(path, 0o700)


def agent_problem(path, expected):
    """Why the agent file must not run (its SHA-256 is not the one resel shipped), or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, IOError) as e:
        return "cannot read %s: %s" % (path, e)
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        return ("refusing to run %s: its sha256 is %s, not %s as resel shipped it; it was changed "
                "after resel wrote it (see docs/security.md)" % (path, found, expected))
    return None


def key_of(name):
    return name[:-len(".json")] if name.endswith(".json") else name


def is_key(name):
    """Whether a started/ or results/ name is a per-key record (``t12-a1.json``, agent protocol 5
    and earlier, and this wrapper's own ``evicted`` results) rather than a wave."""
    stem = key_of(name)
    task, sep, attempt = stem.partition("-a")
    return name.endswith(".json") and sep == "-a" and task[:1] == "t" and task[1:].isdigit() and attempt.isdigit()


def records_in(name, path):
    """The records of a started/ or results/ file read from ``path``: one for a per-key file,
    the list a wave holds (agent protocol 6); [] for what cannot be read."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return []
    docs = [doc] if is_key(name) else (doc if isinstance(doc, list) else [])
    return [d for d in docs if isinstance(d, dict)]


def record_key(rec):
    task, attempt = rec.get("task"), rec.get("attempt")
    if isinstance(task, int) and isinstance(attempt, int) and not isinstance(task, bool) \
            and not isinstance(attempt, bool):
        return "t%d-a%d" % (task, attempt)
    return None


def is_digest(text):
    """Whether text is a sha256 as resel writes it (64 lowercase hex digits): the only remote
    names built from what an inbox file says."""
    return isinstance(text, str) and len(text) == 64 and set(text) <= SHA256_CHARS


def output_problem(name):
    """Why an output's name (from the agent's result) cannot be a file in its task's folder."""
    if not isinstance(name, str) or not name:
        return "no name"
    if name.startswith("/") or "\\" in name or any(ord(c) < 32 for c in name):
        return "not a relative name"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "an empty, '.' or '..' part"
    return None


def url_file_name(url):
    """The name HTCondor's file transfer gives a URL input in the scratch directory: the last
    part of the URL's path, without its query or fragment (seen in the testbed's pool:
    ``file:///tmp/a.dat?x=1`` arrives as ``a.dat``). resel.config refuses a URL whose name is
    empty or not plain (letters, digits, ``._+-``)."""
    path = url.split("#", 1)[0].split("?", 1)[0]
    if "://" in path:
        path = path.split("://", 1)[1]
        path = path[path.find("/"):] if "/" in path else ""
    return path.rsplit("/", 1)[-1]      # "" for a path ending in "/" (a folder, no file)


def url_cache_name(url):
    """The slot cache's name for a URL input (the agent computes the same)."""
    return "url-" + hashlib.sha256(url.encode("utf-8")).hexdigest()


def file_sha256(path):
    """(size, sha256) of a regular file of this user's, opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "not a regular file of this user's")
        h = hashlib.sha256()
        size = 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            h.update(block)
            size += len(block)
        return size, h.hexdigest()
    finally:
        os.close(fd)


def remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


class Sync(object):
    """One pilot's mirror: pull what the coordinator writes, push what the agent writes."""

    def __init__(self, chirp, local, log):
        self.chirp = chirp
        self.local = local
        self.log = log
        self.cache = os.path.join(os.path.dirname(local), CACHE)
        self.fetched = set()       # inbox names taken (never fetched twice)
        self.cancelled = set()
        self.done = set()          # keys with a result on the access point
        self.pushed = {}           # local relative path -> mtime pushed
        self.held = set()          # sha256 of the inputs in the slot's cache (checked)
        self.sent = set()          # (key, index) of the outputs on the access point
        self.output_tries = {}     # key -> rounds its outputs could not all be put
        self.stop_data = None
        self.link_ok = True

    def path(self, *parts):
        return os.path.join(self.local, *parts)

    # ------------------------------------------------------------ task data

    def adopt(self, source, digest):
        """Move a file the job's transfer brought (``--shared``) into the cache, if its
        sha256 is its name; else leave it to a fetch when a task names it."""
        try:
            size, got = file_sha256(source)
        except OSError as e:
            self.log("shared input %s: not in the scratch directory (%s); fetched when a task needs it"
                     % (digest, e.strerror or e))
            return
        if got != digest:
            self.log("shared input %s: its sha256 is %s; fetched when a task needs it" % (digest, got))
            return
        os.chmod(source, 0o400)
        os.rename(source, os.path.join(self.cache, digest))
        self.held.add(digest)
        self.log("shared input %s (%d bytes) in the cache, from the job's file transfer" % (digest, size))

    def adopt_url(self, url):
        """Move a URL input HTCondor's plugins fetched into the scratch directory to
        ``cache/url-SHA256(URL)`` (not checked: resel never saw its bytes)."""
        source = url_file_name(url)
        try:
            st = os.lstat(source)
        except OSError as e:
            self.log("URL input %s: %s is not in the scratch directory (%s)" % (url, source, e.strerror or e))
            return
        if not stat.S_ISREG(st.st_mode):
            self.log("URL input %s: %s is not a regular file; left out" % (url, source))
            return
        os.chmod(source, 0o400)
        os.rename(source, os.path.join(self.cache, url_cache_name(url)))
        self.log("URL input %s (%d bytes) in the cache" % (url, st.st_size))

    def inputs_of(self, inbox_file):
        """(sha256, size) of every input an inbox file names by sha256 (nothing if it cannot
        be read: the agent reports a bad task file)."""
        try:
            with open(inbox_file, "rb") as f:
                doc = json.loads(f.read(INBOX_LIMIT).decode("utf-8"))
        except (OSError, ValueError):
            return []
        items = doc.get("inputs") if isinstance(doc, dict) else None
        out = []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and is_digest(item.get("sha256")):
                size = item.get("size")
                out.append((item["sha256"], size if isinstance(size, int) and size >= 0 else 0))
        return out

    def bring(self, digest, size):
        """Fetch ``../cache/SHA256`` from the run's cache on the access point into the slot's
        cache, kept only if its size and sha256 are right. True if the cache holds it."""
        if digest in self.held:
            return True
        tmp = os.path.join(self.cache, ".%s.%s.fetch" % (digest, binascii.hexlify(os.urandom(4)).decode("ascii")))
        began = time.time()
        try:
            self.chirp.fetch("../%s/%s" % (CACHE, digest), tmp, size=size)
            got_size, got = file_sha256(tmp)
            if (got_size, got) != (size, digest):
                self.log("input %s: fetched %d bytes with sha256 %s, not %d bytes with that sha256; dropped"
                         % (digest, got_size, got, size))
                return False
            os.chmod(tmp, 0o400)
            os.rename(tmp, os.path.join(self.cache, digest))
        except (ChirpError, OSError) as e:
            self.log("input %s: cannot fetch ../%s/%s: %s" % (digest, CACHE, digest, e))
            return False
        finally:
            remove_quietly(tmp)
        self.held.add(digest)
        self.log("input %s (%d bytes) fetched into the cache in %.2f s" % (digest, size, time.time() - began))
        return True

    def push_outputs(self, key, doc):
        """Put every output of the done result ``doc`` of attempt ``key`` to ``outputs/KEY.I``
        on the access point, each then removed from the slot. True when the result may go: all
        are there, the result names none, or they failed OUTPUT_TRIES rounds (the coordinator
        then finds one missing and runs the task again)."""
        if key is None:
            return True
        outputs = doc.get("outputs") if isinstance(doc, dict) and doc.get("outcome") == "done" else None
        if not isinstance(outputs, list):
            return True
        failed = []
        for index, item in enumerate(outputs):
            if (key, index) in self.sent:
                continue
            name = item.get("name") if isinstance(item, dict) else None
            problem = output_problem(name)
            local = self.path("tasks", key, *name.split("/")) if not problem else None
            try:
                if problem:
                    raise OSError(errno.EINVAL, problem)
                st = os.lstat(local)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(errno.EPERM, "not a regular file")
                self.put_atomic(local, "%s/%s.%d" % (OUTPUTS, key, index), replace=True, size=st.st_size,
                                perm="600")
            except (ChirpError, OSError) as e:
                failed.append("%s (%s)" % (name, e))
                continue
            self.sent.add((key, index))
            remove_quietly(local)
        if not failed:
            self.output_tries.pop(key, None)
            return True
        tries = self.output_tries.get(key, 0) + 1
        self.output_tries[key] = tries
        if tries < OUTPUT_TRIES:
            self.log("%s: cannot put %s; trying again next round" % (key, "; ".join(failed)))
            return False
        self.log("%s: cannot put %s after %d rounds; the result goes without it" % (key, "; ".join(failed), tries))
        return True

    def listdir(self, remote):
        try:
            return self.chirp.getdir(remote)
        except ChirpError as e:
            self.log("cannot list %s: %s" % (remote, e))
            return []

    # ------------------------------------------------------------ start

    def recover(self):
        """Attempts an earlier run of this job started but never finished: result ``lost``.

        Returns False, having done nothing, when a listing fails: the caller tries again and
        pulls nothing meanwhile (a failed listing is not "nothing to recover")."""
        try:
            results = set()
            for name in self.chirp.getdir("results"):
                if name.startswith(".") or not name.endswith(".json"):
                    continue
                results |= ({key_of(name)} if is_key(name) else self.remote_keys("results/" + name))
            started = []
            for name in self.chirp.getdir("started"):
                if name.startswith(".") or not name.endswith(".json") or "started/" + name in self.pushed:
                    continue                                   # this run's own (a retried recovery)
                started.extend(self.remote_records("started/" + name))
        except ChirpError as e:
            self.log("cannot list results/ and started/ to recover an earlier run (tried again): %s" % e)
            return False
        self.done |= results
        for rec in started:
            key = record_key(rec)
            if key is None or key in results or key in self.done:
                continue
            name = key + ".json"
            tmp = self.path(".recover-" + name)
            try:
                now = time.time()
                result = {"task": rec.get("task"), "attempt": rec.get("attempt"), "exit_code": None,
                          "signal": None, "start": rec.get("time"), "end": now,
                          "host": rec.get("host"), "outcome": "lost", "reason": "evicted",
                          "perf": None, "stdout_tail": "", "stderr_tail": ""}
                with open(tmp, "w") as f:
                    json.dump(result, f, sort_keys=True)
                self.put_atomic(tmp, "results/" + name, replace=False)
                self.done.add(key_of(name))
                self.log("attempt %s of an earlier run reported lost (evicted)" % key_of(name))
            except (ChirpError, OSError, ValueError) as e:
                self.log("cannot recover %s: %s" % (name, e))
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
        return True

    def remote_records(self, remote):
        """The records of a started/ or results/ file on the access point (fetched to a
        temporary file); ChirpError if it cannot be fetched (the recovery is tried again)."""
        name = remote.rsplit("/", 1)[-1]
        tmp = self.path(".recover-read-" + name)
        try:
            self.chirp.fetch(remote, tmp)
            return records_in(name, tmp)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def remote_keys(self, remote):
        return set(k for k in (record_key(r) for r in self.remote_records(remote)) if k)

    # ------------------------------------------------------------ pull

    def pull(self):
        for name in self.listdir("inbox"):
            if not name.endswith(".json") or name.startswith(".") or name in self.fetched:
                continue
            if key_of(name) in self.done:
                self.fetched.add(name)
                continue
            tmp = self.path("inbox", ".%s.fetch" % name)
            try:
                self.chirp.fetch("inbox/" + name, tmp)
                for digest, size in self.inputs_of(tmp):   # its inputs first: then the task
                    self.bring(digest, size)
                os.rename(tmp, self.path("inbox", name))
                self.fetched.add(name)
            except (ChirpError, OSError) as e:
                self.log("cannot fetch inbox/%s: %s" % (name, e))
        for name in self.listdir("cancel"):
            if name.startswith(".") or name in self.cancelled:
                continue
            tmp = self.path("cancel", ".%s.fetch" % name)
            try:   # its content says cancel or withdraw (only if not started: agent protocol 4)
                self.chirp.fetch("cancel/" + name, tmp)
                with open(tmp, "rb") as f:
                    kind = b"withdraw\n" if f.read(64).strip() == b"withdraw" else b"cancel\n"
            except (ChirpError, OSError) as e:
                self.log("cannot fetch cancel/%s (taken as a cancel): %s" % (name, e))
                kind = b"cancel\n"
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            try:
                write_atomic(self.path("cancel", name), kind)
                self.cancelled.add(name)
            except OSError as e:
                self.log("cannot write cancel/%s: %s" % (name, e))
        if "stop" in self.listdir("."):
            tmp = self.path(".stop.fetch")
            try:
                self.chirp.fetch("stop", tmp)
                with open(tmp, "rb") as f:
                    data = f.read()
                if data != self.stop_data:
                    os.rename(tmp, self.path("stop"))
                    self.stop_data = data
                    self.log("stop: %r" % data.strip()[:20])
            except (ChirpError, OSError) as e:
                self.log("cannot fetch stop: %s" % e)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)

    # ------------------------------------------------------------ push

    def put_atomic(self, local, remote, replace, size=0, perm=None):
        directory, name = os.path.split(remote)
        tmp = (directory + "/" if directory else "") + ".%s.chirp.tmp" % name
        if not self.link_ok:
            self.chirp.put(local, remote, size=size, perm=perm)
            return
        self.chirp.put(local, tmp, size=size, perm=perm)
        if replace:
            try:
                self.chirp.remove(remote)
            except ChirpError:
                pass               # not there yet
        try:
            self.chirp.link(tmp, remote)
        except ChirpError as e:
            self.link_ok = False
            self.log("link refused (%s): files are put under their names from now on" % e)
            self.chirp.put(local, remote, size=size, perm=perm)
        try:
            self.chirp.remove(tmp)
        except ChirpError:
            pass

    def push_file(self, rel, replace):
        local = self.path(*rel.split("/"))
        try:
            mtime = os.stat(local).st_mtime
        except OSError:
            return False
        if rel in self.pushed and (not replace or self.pushed[rel] == mtime):
            return False
        try:
            self.put_atomic(local, rel, replace)
        except ChirpError as e:
            self.log("cannot push %s: %s" % (rel, e))
            return False
        self.pushed[rel] = mtime
        return True

    def push(self):
        self.push_file("agent.json", replace=True)
        for sub in ("started", "results"):
            try:
                names = sorted(os.listdir(self.path(sub)))
            except OSError:
                names = []
            for name in names:
                if not name.endswith(".json") or name.startswith(".") or sub + "/" + name in self.pushed:
                    continue
                recs = records_in(name, self.path(sub, name)) if sub == "results" else []
                if not all([self.push_outputs(record_key(r), r) for r in recs]):
                    continue           # its outputs first: the results wait for the next round
                if self.push_file(sub + "/" + name, replace=False) and sub == "results":
                    self.done |= set(k for k in (record_key(r) for r in recs) if k)
        self.push_file("heartbeat.json", replace=True)
        self.push_file("exit.json", replace=True)

    def push_log(self):
        try:
            if os.path.exists(self.path("agent.log")):
                self.chirp.put(self.path("agent.log"), "agent.log")
        except ChirpError as e:
            self.log("cannot push agent.log: %s" % e)


def agent_argv(args, local):
    """The agent's command line; with setup lines, /bin/sh runs them first (each stopping the
    pilot with a message if it fails) and then execs the agent, so the environment they leave
    (module load, conda activate) is the agent's and its tasks'. The lines come from the job's
    arguments, which the schedd keeps; the agent's path and options are passed as "$@", never
    pasted into the shell text."""
    command = [args.python, "-I", args.agent, "--dir", local] + list(args.agent_args)
    if not args.setup:
        return command
    text = ""
    for n, line in enumerate(args.setup, 1):
        said = "resel: pilot setup line %d failed: %s" % (n, line)
        text += "{ %s\n} || { echo '%s' >&2; exit 1; }\n" % (line, said.replace("'", "'\\''"))
    return ["/bin/sh", "-c", text + 'exec "$@"\n', "resel-setup"] + command


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="resel-chirp-sync.py",
                                description="run the resel agent, mirroring its directory with condor_chirp")
    p.add_argument("--agent", required=True, help="the agent file (in the scratch directory)")
    p.add_argument("--agent-sha256", required=True, help="the agent's SHA-256: anything else is not run")
    p.add_argument("--python", default=sys.executable, help="the Python that runs the agent")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between two syncs (2)")
    p.add_argument("--chirp", default=None, help="condor_chirp (default: PATH, then libexec)")
    p.add_argument("--local", default="pilot", help="the local pilot directory (pilot)")
    p.add_argument("--setup", action="append", default=[],
                   help="a shell line run before the agent, in the shell that then execs it (repeatable)")
    p.add_argument("--shared", action="append", default=[], metavar="SHA256",
                   help="a shared input the job's file transfer brought under its sha256 (repeatable)")
    p.add_argument("--url", action="append", default=[], metavar="URL",
                   help="a URL input HTCondor's transfer plugins fetched (repeatable)")
    p.add_argument("agent_args", nargs=argparse.REMAINDER, help="-- then the agent's options (no --dir)")
    args = p.parse_args(argv)
    if args.agent_args and args.agent_args[0] == "--":
        args.agent_args = args.agent_args[1:]
    if not args.interval > 0:
        p.error("--interval must be positive")
    for digest in args.shared:
        if not is_digest(digest):
            p.error("--shared %r is not a sha256 (64 lowercase hex digits)" % digest)
    for url in args.url:
        if not url_file_name(url):
            p.error("--url %r names no file" % url)
    return args


def main(argv=None):
    args = parse_args(argv)
    log_file = os.fdopen(os.open(LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "a")

    def log(message):
        log_file.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), message))
        log_file.flush()

    problem = agent_problem(args.agent, args.agent_sha256)
    if problem:
        log(problem)
        sys.stderr.write("resel chirp wrapper: %s\n" % problem)
        log_file.close()
        return EXIT_MODIFIED
    local = os.path.abspath(args.local)
    for sub in SUBDIRS:
        make_private_dirs(os.path.join(local, sub))
    chirp = Chirp(find_chirp(args.chirp), log)
    sync = Sync(chirp, local, log)
    make_private_dirs(sync.cache)
    log("start on %s: chirp %s, agent %s %s" % (socket.gethostname(), chirp.program, args.agent,
                                                " ".join(args.agent_args)))
    for digest in args.shared:
        sync.adopt(digest, digest)
    for url in args.url:
        sync.adopt_url(url)
    recovered = sync.recover()
    if recovered:
        sync.pull()    # tasks already waiting are there when the agent first looks
    agent = subprocess.Popen(agent_argv(args, local))
    signals = []

    def forward(signum, frame):
        signals.append(signum)
        try:
            agent.send_signal(signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while agent.poll() is None:
        try:
            recovered = recovered or sync.recover()
        except Exception as e:
            log("sync error: %r" % (e,))
        for step in ((sync.pull, sync.push) if recovered else (sync.push,)):
            try:
                step()
            except Exception as e:    # one bad round never stops the pilot
                log("sync error: %r" % (e,))
        deadline = time.time() + args.interval
        while agent.poll() is None and time.time() < deadline:
            time.sleep(min(0.1, args.interval))
    code = agent.returncode
    log("agent exited with %s%s" % (code, " after signal %s" % signals[0] if signals else ""))
    if not recovered:   # the job's last chance to report an evicted run's attempts
        try:
            sync.recover()
        except Exception as e:
            log("final recovery error: %r" % (e,))
    try:
        sync.push()
    except Exception as e:
        log("final push error: %r" % (e,))
    sync.push_log()
    log("done: %d chirp calls" % chirp.calls)
    log_file.close()
    return code if code is not None and code >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
