#!/usr/bin/env python3
"""resel pilot agent: runs task attempts inside a batch job, driven only by files.

This file is self-contained (Python standard library only) and runs on Python 3.6 and later.
The coordinator ships it (``source()``) to a site's work directory as ``resel-agent.py`` and
starts it inside a batch job (a *pilot*)::

    python3 resel-agent.py --dir PILOTDIR --pilot ID --slots N --walltime SECONDS
        [--drain SECONDS (60)] [--heartbeat SECONDS (5)] [--poll SECONDS (0.5)]
        [--idle-exit SECONDS (0 = never)]

Protocol (version 6; docs/agent.md says the same with examples and what changed since 1)
----------------------------------------------------------------

Agent and coordinator talk only through files in PILOTDIR on the site's shared filesystem.
Every file either side writes appears atomically: written under a temporary name in the same
directory (the agent's start with ``.`` and never end in ``.json``), fsync'ed, then renamed.
The key of a task attempt is ``t{task}-a{attempt}``, e.g. ``t12-a1`` (attempts count from 1).
All times are epoch seconds (floats).

* Start: create ``inbox/ claimed/ started/ results/ cancel/ tasks/`` if missing. An agent
  relaunched in the same PILOTDIR (the batch job was requeued or restarted under the same id)
  first writes a result "lost" (reason "agent restarted") for every attempt in ``claimed/``
  that has none: its predecessor took them and is gone. Then it writes
  ``agent.json`` = {"pilot", "host", "pid", "started", "slots", "walltime", "python" ("3.x.y"),
  "job_id" ($SLURM_JOB_ID, $PBS_JOBID, $CONDOR_JOBID, ... or null), "cpu_model", "cpu_mhz"
  (from /proc/cpuinfo, or null), "incarnation" (a random id of this agent process),
  "previous" (the incarnation it replaced, or null), "restart_count" ($SLURM_RESTART_COUNT,
  $PBS_RUN_COUNT or null), "protocol"}.
* Heartbeat at most once per loop turn, after that turn's waves (below): every --heartbeat s,
  and in the turn after a change of state: ``heartbeat.json`` =
  {"time", "state": "running" | "draining" | "stopping", "running": [keys], "free": slots - taken,
  "incarnation", "started", "pid", "protocol" (7)}. The coordinator reads it every poll: a new
  incarnation means the agent was relaunched.
* Waves (protocol 6): the start and result records below are not files of their own. Everything
  that started during one turn of the agent's loop goes into one file
  ``started/{incarnation}-{n}.json``, everything that ended into one
  ``results/{incarnation}-{n}.json``: a JSON list of records (each with its task and attempt),
  written atomically at the end of the turn; ``n`` counts the waves this incarnation wrote in
  that folder, from 1 and without a gap (an empty turn writes nothing), so the coordinator
  reads ``…-{n}``, ``…-{n+1}``, … until one is missing, without listing the folder. A wave
  over about 1 MiB is cut in two. An agent killed before a wave was renamed into place leaves
  its attempts in ``claimed/`` without a result: its successor reports them (Start, above).
  Before protocol 6 each record was a file ``started/{key}.json`` / ``results/{key}.json``; an
  agent reads those too when it starts in a folder an older one used.
* Superseded: an agent that finds another incarnation in ``agent.json`` stops at once (exit
  reason "superseded"): it kills its attempts and writes no result the newer agent wrote.
* Inbox: the coordinator writes ``inbox/{key}.json`` = {"task": int, "attempt": int,
  "command": str, "env": {str: str}, "perf": bool, "timeout": float or null, "slots": int
  (protocol 5, optional, default 1: how many of the pilot's --slots the attempt takes — a task
  of several cores in a pilot counted in cores), "order": int (protocol 7, optional: the
  attempt's place in the coordinator's handing order)}. The agent takes files in ``order``
  (files without one after, by mtime and name) while their slots fit: at most --slots taken
  at once; a file whose slots do not fit
  what is free waits, and a later one that fits is taken first (a file asking more than --slots
  fails: "bad task file"). It claims one by renaming it to ``claimed/{key}.json`` (a file gone
  meanwhile is skipped). Names not ending in ``.json``
  (and dot-files) are ignored: they are temporary files.
* Running: the command runs as ``/bin/sh -c COMMAND`` (the command is one argument, never
  interpolated) in ``tasks/{key}/``, stdout to ``tasks/{key}/stdout``, stderr to
  ``tasks/{key}/stderr``, stdin from /dev/null, in its own session and process group. Its
  environment is the agent's plus "env" plus RESEL_TASK, RESEL_ATTEMPT, RESEL_PILOT. When it
  starts the agent records {"task", "attempt", "time", "host"} in that turn's started wave.
* perf: with "perf": true and ``perf`` on PATH (and usable), the command runs under
  ``perf stat -x, -o tasks/{key}/perf.csv -e task-clock,cycles,instructions,cycles:u,instructions:u``;
  with ``--control fd:N`` (a pipe never written to) where perf takes it, so that perf waits for
  a command that ends at once; the CSV becomes {event: float or null (``<not supported>``, ``<not counted>``), ...,
  "task-clock-ms": float or null}. Without perf: {"error": "perf not found"}. perf stat hides
  a signal death of its child, so under perf a shell status above 128 is reported as
  signal = status - 128.
* Result: a record in that turn's results wave when the attempt ends = {"task", "attempt", "exit_code": int
  or null, "signal": int or null, "start", "end", "host", "outcome", "reason": str or null,
  "perf": dict or null, "stdout_tail", "stderr_tail" (last 2000 bytes, UTF-8, bad bytes
  replaced), "incarnation" (of the agent that wrote it)}. A result is written once: the agent keeps the
  keys it has an outcome for (at start: every key of results/, waves and older per-key files)
  and never writes a second; the first word on an attempt is the only one. (Two agents alive
  at once on one directory — the older not yet superseded — may each write one; the
  coordinator takes the first it reads.) outcome is "done" (exit 0), "failed" (nonzero exit: reason "exit code N" or
  "signal N"; timeout: reason "timeout"; unusable task file: reason "bad task file: ...";
  could not start: reason "start failed: ..."; an inbox file whose name is no key gets a result
  with task and attempt null and its name as "file"), "cancelled" (reason "cancelled" or "stopped")
  or "lost" (reason "walltime", "terminated", "agent restarted" or "superseded"). An attempt
  that never started has
  start == end == the time the agent gave up on it, exit_code and signal null.
* Timeout: "timeout" seconds after its start the attempt's process group gets SIGTERM, then
  SIGKILL 5 s later; outcome "failed", reason "timeout".
* Cancel: the coordinator creates ``cancel/{key}`` (any content but ``withdraw``). A running
  attempt: its process group gets SIGTERM (SIGKILL after 5 s) and its result says "cancelled".
  An attempt still in the inbox (or arriving there later): moved to ``claimed/``, result
  "cancelled" without running. A finished attempt: nothing happens.
* Withdraw (protocol 4): ``cancel/{key}`` whose content is ``withdraw`` asks for an attempt
  back only if it has not started: still in the inbox, claimed but not launched, or arriving
  later — removed, result "cancelled", reason "withdrawn", start == end, never run. Already
  running or finished: refused, nothing is written (its ``started/`` record already tells the
  coordinator it runs).
* Slots: the agent wakes as soon as an attempt's process exits (SIGCHLD), reaps it and starts
  the next inbox file in the freed slot, so a task handed ahead starts within milliseconds.
* Drain: when the remaining walltime (W - time since the agent started) falls below --drain,
  the agent stops claiming (state "draining"). Below 5 s, or on SIGTERM / SIGINT (what scancel
  and the walltime kill send), it kills the running attempts (results "lost", reason
  "walltime" or "terminated"), writes ``exit.json`` = {"time", "reason"} and exits 0.
  scancel signals every process of the job in no set order: an attempt that dies of SIGTERM or
  SIGINT (or exits 128+N for them) that the agent did not send is held up to 1 s before its
  result is written; if the agent's own signal arrives meanwhile the attempt is "lost"
  ("terminated"), not "failed".
* Stop: when ``stop`` exists the agent stops claiming. If its content is ``drain`` it lets the
  running attempts finish, then exits (reason "drained"); otherwise it kills them (results
  "cancelled", reason "stopped") and exits (reason "stopped"). A ``drain`` stop rewritten to
  anything else becomes a hard stop.
* --idle-exit T > 0: exit (reason "idle") after T s with nothing running and an empty inbox.
* exit.json reasons: "walltime", "terminated", "stopped", "drained", "idle", "superseded". The agent appends
  timestamped lines to ``agent.log`` (append-only, not atomic). A bad task file or an error
  in one loop iteration is logged and never stops the agent.
* An agent killed outright (kill -9, the OOM killer) takes its running attempts with it: at
  start it forks a guard, a child that only reads a pipe on which the agent names the process
  group of each attempt it starts and of each it is done with; when the pipe closes — the agent
  is gone, however it ended — the guard kills the groups still named, then exits. Without it
  the attempts would run on as orphans wherever the batch system tracks a job's processes by
  parentage (Slurm's proctrack/linuxproc), while the coordinator, seeing the pilot gone, runs
  them again elsewhere: twice at once. The guard ignores SIGTERM and SIGINT (the batch system
  signals every process of the job; the agent answers them).

Other users (docs/security.md)
------------------------------

The agent runs everything it finds in its inbox as its own user, so nobody else may be able to
put a file there. It refuses to start (message on stderr, exit status 2, nothing written in
PILOTDIR) when PILOTDIR or one of its sub-folders is not a directory of its own user or is
writable by group or others; folders it creates are 0700 whatever the umask. An inbox, cancel
or ``stop`` file that is not a regular file of its user (another user's, or a symlink) is
never acted on: it is logged and counted in ``rejected.json`` = {"count": N, "files":
[{"name", "uid", "why", "time"}, ... the last 100]} and in the heartbeat's "rejected". The
agent never writes through a symlink: atomic writes use a temporary file made with
``O_CREAT|O_EXCL|O_NOFOLLOW`` under a random name, then ``rename`` (which replaces a link, never
follows it); ``agent.log`` is opened ``O_NOFOLLOW`` (a planted link is removed first); a task's
stdout, stderr and perf.csv are new files (whatever was at that name is unlinked first).
"""

import argparse
import binascii
import errno
import fnmatch
import hashlib
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import traceback

PROTOCOL_VERSION = 7

SUBDIRS = ("inbox", "claimed", "started", "results", "cancel", "tasks")
KEY_RE = re.compile(r"^t(\d+)-a(\d+)$")
#: a wave (protocol 6): ``{incarnation}-{n}.json`` in started/ or results/, n from 1
WAVE_RE = re.compile(r"^([0-9a-f]{1,64})-([1-9][0-9]{0,17})$")
#: a wave is cut before it grows past this many bytes (the coordinator reads at most twice it)
WAVE_BYTES = 1 << 20
SAFE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
PERF_EVENTS = "task-clock,cycles,instructions,cycles:u,instructions:u"
TAIL_BYTES = 2000
KILL_GRACE = 5.0       # SIGTERM -> SIGKILL for cancel and timeout
FINAL_MARGIN = 5.0     # exit when less walltime than this remains
SHUTDOWN_GRACE = 2.0   # SIGTERM -> SIGKILL when the agent itself exits
TERM_HOLD = 1.0        # how long a task killed by an outside SIGTERM waits for the agent's own
OUTSIDE_KILLS = (signal.SIGTERM, signal.SIGINT)
JOB_ID_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "CONDOR_JOBID", "CONDOR_JOB_ID",
               "LSB_JOBID", "JOB_ID")
RESTART_VARS = ("SLURM_RESTART_COUNT", "PBS_RUN_COUNT")
# perf stat reports a child killed by a signal as exit 0: an outer shell keeps the status.
PERF_WRAPPER = '/bin/sh -c "$1"'
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
REJECTED_KEPT = 100    # rejected.json lists the last this many files
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# what an output's name may not hold to be carried home (resel.config.relative_path_problem)
UNSENDABLE_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")
MAX_WALK = 100000      # entries of a task's folder looked at for outputs
MAX_OUTPUTS = 100000   # the most outputs one result may list (resel.backends.pilotsite.MAX_OUTPUTS)
RESULT_BYTES = 30 << 20   # the most bytes of outputs one result may list (below pilotsite.WAVE_LIMIT)
REFUSED_LISTED = 1000  # a result names at most this many refused files
CACHE = "cache"        # the run's content-addressed inputs: a folder beside PILOTDIR
OWN_FILES = ("stdout", "stderr", "perf.csv")   # what the agent makes in a task's folder (never an input)


def source() -> str:
    """This file's text, for the coordinator to ship to a site."""
    with open(os.path.abspath(__file__), "r", encoding="utf-8") as f:
        return f.read()


def task_key(task, attempt):
    return "t%d-a%d" % (task, attempt)


# ---------------------------------------------------------------- files others cannot steer


class Refused(Exception):
    """PILOTDIR (or a folder in it) is not private to this user: the agent will not run there."""


class Foreign(Exception):
    """A file that is not a regular file of this user's: never read, run or written through."""

    def __init__(self, path, st):
        self.uid = st.st_uid
        if stat.S_ISLNK(st.st_mode):
            why = "a symbolic link"
        elif not stat.S_ISREG(st.st_mode):
            why = "not a regular file"
        else:
            why = "owned by uid %d, not by this agent's user (uid %d)" % (st.st_uid, os.geteuid())
        self.why = why
        Exception.__init__(self, "%s is %s" % (path, why))


def mine(st):
    """Whether a stat result is a regular file of this process's user."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def own_file(path):
    """Whether path is a regular file of this user's (not a link, not someone else's)."""
    try:
        return mine(os.lstat(path))
    except OSError:
        return False


def dir_problem(path):
    """Why path is not a directory only this user controls, or None if it is one."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return "cannot look at it (%s)" % (e.strerror or e)
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return "it belongs to uid %d, not to this agent's user (uid %d)" % (st.st_uid, os.geteuid())
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "it is writable by its group or by other users (mode %04o)" % stat.S_IMODE(st.st_mode)
    return None


def make_private_dir(path):
    """mkdir path 0700 whatever the umask (an existing one is kept); Refused unless it is a
    directory only this user controls."""
    try:
        os.mkdir(path, PRIVATE_DIR)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
    else:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, PRIVATE_DIR)
        finally:
            os.close(fd)
    problem = dir_problem(path)
    if problem:
        raise Refused("%s: %s" % (path, problem))


def make_private_dirs(path):
    """mkdir -p whose new folders are 0700; the last one must be private (make_private_dir)."""
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        make_private_dirs(parent)
    make_private_dir(path)


def random_name():
    return binascii.hexlify(os.urandom(8)).decode("ascii")


def write_atomic(path, data):
    """Write bytes to path: a new temporary file (random name, O_EXCL|O_NOFOLLOW, 0600) in the
    same directory, fsync, rename over path (a link at path is replaced, never followed)."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, ".%s.%s.tmp" % (name, random_name()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def write_json_atomic(path, obj):
    """Write obj as JSON to path, atomically (write_atomic)."""
    write_atomic(path, json.dumps(obj, sort_keys=True).encode("utf-8"))


def open_new(path):
    """A new, empty file at path (0600) for writing in binary: whatever was there (a planted
    link, an old file) is unlinked first, so nothing is ever truncated or written through."""
    try:
        os.unlink(path)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
    return os.fdopen(fd, "wb")


def open_log(path):
    """agent.log, to append to: never through a link (a planted one is removed), and only a
    regular file of this user's."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, PRIVATE_FILE)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        os.unlink(path)
        fd = os.open(path, flags | os.O_EXCL, PRIVATE_FILE)
    st = os.fstat(fd)
    if not mine(st):
        os.close(fd)
        raise Foreign(path, st)
    return os.fdopen(fd, "a", encoding="utf-8")


def read_own(path, limit=None, tail=False):
    """Bytes of path if it is a regular file of this user's: not through a link (O_NOFOLLOW),
    never blocking on a FIFO; Foreign otherwise. With ``limit``, at most that many bytes, the
    last ones if ``tail``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Foreign(path, os.lstat(path))
        raise
    try:
        st = os.fstat(fd)
        if not mine(st):
            raise Foreign(path, st)
        if tail and limit is not None and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks = []
        left = limit if limit is not None else -1
        while left != 0:
            chunk = os.read(fd, 1 << 16 if left < 0 else min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            if left > 0:
                left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def wave_chunk(records, limit=WAVE_BYTES):
    """The first records that go into one wave: as many as fit in ``limit`` bytes of JSON (at
    least one), so no wave outgrows what the coordinator reads."""
    size = 0
    for i, rec in enumerate(records):
        size += len(json.dumps(rec, sort_keys=True)) + 2
        if i and size > limit:
            return records[:i]
    return list(records)


def folder_records(folder, own_only=True):
    """Every record in a started/ or results/ folder, as [(file name, record)]: the per-key
    files of protocol 5 and earlier (``t12-a1.json``, sorted by name) and then the waves of
    protocol 6 (``{incarnation}-{n}.json``, a list each, by incarnation and n). Dot-files
    (temporary names, a torn wave), other names and files that are not a regular file of this
    user's are left out; a record that is not a JSON object is returned as it is, for the
    reader to refuse. For whoever reads the folder where it lies: the agent itself at start,
    the crash soak's checker and the tests (these, ``own_only`` False, read another user's
    files too: the testbed's agents run as their own user)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    keyed, waves = [], []
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        stem = name[:-len(".json")]
        if KEY_RE.match(stem):
            keyed.append(name)
        else:
            m = WAVE_RE.match(stem)
            if m:
                waves.append((m.group(1), int(m.group(2)), name))
    out, per_key = [], set(keyed)
    for name in keyed + [w[2] for w in sorted(waves)]:
        try:
            if own_only:
                raw = read_own(os.path.join(folder, name))
            else:
                with open(os.path.join(folder, name), "rb") as f:
                    raw = f.read()
            doc = json.loads(raw.decode("utf-8"))
        except (OSError, IOError, ValueError, Foreign):
            continue
        for rec in (doc if isinstance(doc, list) and name not in per_key else [doc]):
            out.append((name, rec))
    return out


def result_keys(folder):
    """The keys of the attempts with a result in a results/ folder (folder_records)."""
    keys = set()
    for name, rec in folder_records(folder):
        if isinstance(rec, dict) and KEY_RE.match(name[:-len(".json")]):
            keys.add(name[:-len(".json")])
        elif isinstance(rec, dict) and isinstance(rec.get("task"), int) and isinstance(rec.get("attempt"), int):
            keys.add(task_key(rec["task"], rec["attempt"]))
    return keys


def new_incarnation():
    """A random id for this agent process: tells a relaunched agent from its predecessor."""
    return binascii.hexlify(os.urandom(8)).decode("ascii")


def restart_count():
    for var in RESTART_VARS:
        value = os.environ.get(var)
        if value and value.isdigit():
            return int(value)
    return None


def read_tail(path, limit=TAIL_BYTES):
    try:
        data = read_own(path, limit, tail=True)
    except (OSError, IOError, Foreign):
        return ""
    return data.decode("utf-8", "replace")


def perf_control_pipe(exe):
    """A pipe whose read end goes to ``perf stat --control fd:N``, or None where perf (older than
    5.9) does not take the option.

    Why: without a control fd perf stat does not wait for a command that ended before perf got to
    its wait (its SIGCHLD handler sets the pid to -1 and the wait is skipped), and then reports
    exit status 0 whatever the command returned: a failed short task would be taken as done. With
    one it reaps the command in its event loop whatever the order. The pipe is never written to;
    the agent holds both ends for its life (a closed write end would wake perf's poll forever)."""
    r, w = os.pipe()
    probe = None
    try:
        probe = subprocess.Popen([exe, "stat", "-x,", "-o", os.devnull, "--control", "fd:%d" % r,
                                  "-e", "task-clock", "--", "/bin/true"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, pass_fds=(r,))
        probe.wait(timeout=20)
        if probe.returncode == 0:
            return (r, w)
    except Exception:
        if probe is not None and probe.poll() is None:      # a perf that hangs: not left behind
            probe.kill()
            probe.wait()
    os.close(r)
    os.close(w)
    return None


def perf_lost_end(path):
    """True if perf's CSV shows the signature of a skipped wait (perf_control_pipe): task-clock
    over an elapsed time of microseconds, "CPUs utilized" beyond the CPUs there are."""
    try:
        lines = read_own(path).decode("utf-8", "replace").splitlines()
    except (OSError, IOError, Foreign):
        return False
    for line in lines:
        parts = line.split(",")
        if len(parts) > 6 and parts[2].split(":")[0].strip() == "task-clock" \
                and parts[6].strip() == "CPUs utilized":
            try:
                return float(parts[5]) > (os.cpu_count() or 1) + 0.5
            except ValueError:
                return False
    return False


def parse_perf_csv(path):
    """perf stat -x, output -> {event: float or None, ..., "task-clock-ms": float or None}."""
    try:
        lines = read_own(path).decode("utf-8", "replace").splitlines()
    except (OSError, IOError, Foreign):
        return {"error": "no perf output"}
    out = {}
    task_clock_ms = None
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(",")
        if len(parts) < 3 or not parts[2]:
            continue
        raw, unit, event = parts[0].strip(), parts[1].strip(), parts[2].strip()
        value = None
        if not raw.startswith("<"):
            try:
                value = float(raw)
            except ValueError:
                value = None
        out[event] = value
        if event.split(":")[0] == "task-clock" and task_clock_ms is None and value is not None:
            scale = {"msec": 1.0, "ms": 1.0, "usec": 1e-3, "us": 1e-3, "nsec": 1e-6, "ns": 1e-6,
                     "sec": 1e3, "s": 1e3}
            task_clock_ms = value * scale.get(unit, 1.0)
    if not out:
        return {"error": "perf output unparsable"}
    out["task-clock-ms"] = task_clock_ms
    return out


def cpu_info():
    model = mhz = None
    try:
        with open("/proc/cpuinfo", "r", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if not sep:
                    continue
                name, value = name.strip(), value.strip()
                if name == "model name" and model is None:
                    model = value
                elif name == "cpu MHz" and mhz is None:
                    try:
                        mhz = float(value)
                    except ValueError:
                        pass
                if model is not None and mhz is not None:
                    break
    except (OSError, IOError):
        pass
    return model, mhz


def batch_job_id():
    for var in JOB_ID_VARS:
        value = os.environ.get(var)
        if value:
            return value
    ad = os.environ.get("_CONDOR_JOB_AD")
    if ad:
        found = {}
        try:
            with open(ad, "r", encoding="utf-8", errors="replace") as f:
                for line in f:
                    name, sep, value = line.partition("=")
                    if sep:
                        found[name.strip()] = value.strip().strip('"')
        except (OSError, IOError):
            return None
        if "ClusterId" in found:
            return "%s.%s" % (found["ClusterId"], found.get("ProcId", "0"))
        return found.get("GlobalJobId")
    return None


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return False
    return True


def signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


class BadTask(Exception):
    pass


def validate_task(doc, stem):
    """The inbox document, checked; returns (task, attempt, command, env, perf, timeout)."""
    if not isinstance(doc, dict):
        raise BadTask("not a JSON object")
    task, attempt = doc.get("task"), doc.get("attempt")
    for name, value in (("task", task), ("attempt", attempt)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadTask("%r must be a non-negative integer, not %r" % (name, value))
    if task_key(task, attempt) != stem:
        raise BadTask("file name %s.json does not match task %d attempt %d" % (stem, task, attempt))
    command = doc.get("command")
    if not isinstance(command, str) or not command.strip():
        raise BadTask("'command' must be a non-empty string")
    env = doc.get("env")
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise BadTask("'env' must be an object")
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise BadTask("'env' must map strings to strings")
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise BadTask("bad environment variable %r" % (name,))
    perf = doc.get("perf", False)
    if perf is None:
        perf = False
    if not isinstance(perf, bool):
        raise BadTask("'perf' must be true or false")
    timeout = doc.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise BadTask("'timeout' must be a positive number or null")
        timeout = float(timeout)
    return task, attempt, command, env, perf, timeout


def task_order(doc):
    """The inbox document's ``order`` (protocol 7: where the coordinator put the attempt in
    its handing order, a non-negative integer), checked; None when left out."""
    order = doc.get("order") if isinstance(doc, dict) else None
    if order is None:
        return None
    if not isinstance(order, int) or isinstance(order, bool) or order < 0:
        raise BadTask("'order' must be a non-negative integer, not %r" % (order,))
    return order


def task_slots(doc):
    """The inbox document's ``slots`` (protocol 5: the pilot slots an attempt takes), checked;
    1 when left out."""
    slots = doc.get("slots", 1) if isinstance(doc, dict) else 1
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        raise BadTask("'slots' must be a positive integer, not %r" % (slots,))
    return slots


def validate_data(doc):
    """The inbox document's ``inputs`` and ``outputs`` (protocol 3, docs/data.md), checked;
    returns (inputs, outputs) as lists of dicts (empty when absent)."""
    inputs = doc.get("inputs") or []
    outputs = doc.get("outputs") or []
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise BadTask("'inputs' and 'outputs' must be lists")
    names = set()
    for item in inputs:
        if not isinstance(item, dict):
            raise BadTask("an input must be an object")
        name, digest, size = item.get("name"), item.get("sha256"), item.get("size")
        why = relative_problem(name, True)      # a name, not a pattern: run[0].tpr is a file
        if not why and name in OWN_FILES:
            why = "the name of a file the agent writes in the task's folder (the task would read that, not the input)"
        if why:
            raise BadTask("input name %r: %s" % (name, why))
        if "url" in item:           # fetched by the site (an HTCondor pool's transfer plugins)
            url = item["url"]
            if not isinstance(url, str) or "://" not in url or CONTROL_RE.search(url) or "sha256" in item:
                raise BadTask("input %s: 'url' must be a URL (and then no 'sha256')" % name)
        elif not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise BadTask("input %s: 'sha256' must be 64 hexadecimal digits" % name)
        if "url" not in item and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise BadTask("input %s: 'size' must be a non-negative integer" % name)
        if name in names:
            raise BadTask("input %s is named twice" % name)
        names.add(name)
    for item in outputs:
        if not isinstance(item, dict):
            raise BadTask("an output must be an object")
        why = relative_problem(item.get("glob"), True)
        if why:
            raise BadTask("output %r: %s" % (item.get("glob"), why))
        if not isinstance(item.get("optional", False), bool):
            raise BadTask("output %s: 'optional' must be true or false" % item.get("glob"))
    return inputs, outputs


def url_cache_name(url):
    """Where an input given by URL waits in the cache: ``url-`` + the URL's sha256 (the chirp
    wrapper puts there what HTCondor's transfer plugins fetched)."""
    return "url-" + hashlib.sha256(url.encode("utf-8")).hexdigest()


def relative_problem(path, glob):
    """Why path cannot name a file inside a task's folder, or None (resel.config checks the same)."""
    if not isinstance(path, str) or not path:
        return "must be a non-empty string"
    if CONTROL_RE.search(path):
        return "control characters"
    if path.startswith("/") or "\\" in path:
        return "an absolute path or a backslash"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "an empty, '.' or '..' part"
    if not glob and any(ch in path for ch in "*?["):
        return "glob characters in a name"
    return None


def match_path(parts, pattern):
    """Whether a relative path (its parts) matches a glob (its parts): fnmatch per part,
    ``**`` for any number of folders (none included)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(match_path(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and match_path(parts[1:], pattern[1:])


def unsendable(rel):
    """Why a file's name cannot go home as an output, or None. The coordinator takes a result
    only if each output's name is UTF-8 text without control characters or backslashes (it
    skipped the whole record otherwise, and a name that is not UTF-8 stopped it when stored):
    such a file is refused, as a link is, and the task's other outputs go."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "a name resel cannot carry home (not UTF-8)"
    if UNSENDABLE_RE.search(rel):
        return "a name resel cannot carry home (a control character or a backslash)"
    return None


def shown(rel):
    """A file's name as a result may carry it: itself, or its bytes escaped when it cannot go home."""
    return ascii(os.fsencode(rel))[2:-1] if unsendable(rel) else rel


def too_many_outputs(outputs, refused):
    """Why a result cannot list these outputs, or None: the coordinator reads a result of at most
    MAX_OUTPUTS outputs in at most RESULT_BYTES of JSON (resel.backends.pilotsite) and skipped a
    larger one whole, so the attempt never ended for it (30,000 files did). Failed instead, saying so."""
    size = len(json.dumps(outputs)) + len(json.dumps(refused))
    if len(outputs) > MAX_OUTPUTS or size > RESULT_BYTES:
        return ("too many outputs: %d files match the output globs (%d bytes to list; a result lists at most "
                "%d files in %d bytes): gather them into fewer files, e.g. an archive" %
                (len(outputs), size, MAX_OUTPUTS, RESULT_BYTES))
    return None


def walk_task_dir(tdir, limit=MAX_WALK):
    """Every entry under the task's folder as (relative path, lstat), never through a link:
    a link to a folder is an entry, not a folder to enter."""
    out, stack = [], [""]
    while stack and len(out) < limit:
        rel = stack.pop()
        try:
            names = sorted(os.listdir(os.path.join(tdir, rel) if rel else tdir))
        except OSError:
            continue
        for name in names:
            sub = rel + "/" + name if rel else name
            try:
                st = os.lstat(os.path.join(tdir, sub))
            except OSError:
                continue
            out.append((sub, st))
            if stat.S_ISDIR(st.st_mode):
                stack.append(sub)
    return out


def file_sha256(fd):
    """(size, hex sha256) of an open file, read from its start."""
    digest, size = hashlib.sha256(), 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        block = os.read(fd, 1 << 20)
        if not block:
            return size, digest.hexdigest()
        digest.update(block)
        size += len(block)


class BadInput(Exception):
    """An input could not be put in the task's folder: the attempt fails, never runs on wrong data."""


# ---------------------------------------------------------------- the agent


class Guard(object):
    """The agent's guard (module docstring): a forked child that kills the process groups of
    the attempts still running once the agent is gone. ``track``/``untrack`` name a group to it."""

    def __init__(self, log):
        self.log = log                  # used once the agent has checked its directory (setup)
        self.fd = None
        self.pid = None
        self.error = None
        try:
            r, w = os.pipe()            # neither end is inherited by the tasks (close_fds, non-inheritable)
            pid = os.fork()
        except OSError as e:
            self.error = "no guard for the attempts (%s): an agent killed outright leaves them running" % e
            return
        if pid == 0:                    # the guard
            code = 0
            try:
                os.close(w)
                guard(r)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(r)
        self.fd, self.pid = w, pid

    def _say(self, line):
        if self.fd is None:
            return
        try:
            os.write(self.fd, line.encode("ascii"))
        except OSError as e:
            self.log("guard gone (%s): an agent killed outright would leave its attempts running" % e)
            self.close()

    def track(self, pgid):
        self._say("+%d\n" % pgid)

    def untrack(self, pgid):
        self._say("-%d\n" % pgid)

    def close(self):
        """The agent exits: the guard finds nothing left to kill and ends (reaped if it can be)."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
        if self.pid is not None:
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except OSError:
                pass


def guard(fd):
    """The guard's life: keep the groups the agent names, kill those left when the pipe closes."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    groups = set()
    with os.fdopen(fd, "rb", 0) as pipe:
        for line in iter(pipe.readline, b""):
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line[:1] == b"+":
                groups.add(pgid)
            else:
                groups.discard(pgid)
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)


class Attempt(object):
    def __init__(self, key, task, attempt, proc, start, deadline, perf, tdir, files, data=((), ())):
        self.key = key
        self.task = task
        self.attempt = attempt
        self.proc = proc
        self.pgid = proc.pid
        self.start = start
        self.deadline = deadline          # monotonic timeout, or None
        self.perf = perf                  # None: not requested; dict: error; True: under perf
        self.tdir = tdir
        self.files = files
        self.inputs, self.outputs = data      # protocol 3: what was put in tdir, what to send home
        self.kill_outcome = None
        self.kill_reason = None
        self.kill_deadline = None         # monotonic SIGKILL time once terminated
        self.hard_killed = False
        self.hold_until = None            # monotonic: an outside kill waits for the agent's signal
        self.slots = 1                    # the pilot slots it takes (protocol 5)


class Agent(object):
    def __init__(self, args):
        self.dir = os.path.abspath(args.dir)
        self.pilot = args.pilot
        self.slots = args.slots
        self.walltime = args.walltime
        self.drain = args.drain
        self.heartbeat_every = args.heartbeat
        self.poll = args.poll
        self.idle_exit = args.idle_exit
        self.host = socket.gethostname()
        self.t0 = time.monotonic()
        self.started = time.time()
        self.running = {}
        self.finished = set()
        self.cancel_done = set()
        self.lingering = []               # [(pgid, monotonic SIGKILL time, task)]
        self.state = "running"
        self.stop_drain = False
        self.signalled = None
        self.idle_since = self.t0
        self.last_heartbeat = None
        self.perf_exe = None
        self.perf_error = None
        self.perf_checked = False
        self.perf_control = None          # (read, write) of a pipe for perf stat --control (perf_control_pipe)
        self.log_file = None
        self.rejected = []                # [{"name", "uid", "why", "time"}], oldest first
        self.rejected_names = set()
        self.inbox_seen = {}       # inbox name -> (its place, its slots), read once (inbox_entries)
        self.incarnation = new_incarnation()
        self.verified = {}                # (dev, ino, size, mtime_ns) of a cached input -> its sha256
        self.previous = None              # the incarnation this agent replaced, if any
        self.agent_json_stat = None       # (inode, mtime_ns) of the agent.json we wrote
        self.wake_r = self.wake_w = None  # self-pipe: SIGCHLD wakes the loop when a task ends
        self.guard = None                 # kills the attempts if the agent is killed outright
        self.outbox = {"started": [], "results": []}   # records of this turn, not yet in a wave
        self.waves = {"started": 0, "results": 0}      # the waves written per folder (the last n)

    # -- helpers

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def log(self, message):
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)) + ".%03d" % int(now % 1 * 1000)
        line = "%s %s\n" % (stamp, message.rstrip())
        try:
            if self.log_file is None:
                self.log_file = open_log(self.path("agent.log"))
            self.log_file.write(line)
            self.log_file.flush()
        except (OSError, IOError, Foreign):
            sys.stderr.write(line)

    def safely(self, what, fn, *args):
        try:
            return fn(*args)
        except Exception:
            self.log("error in %s: %s" % (what, traceback.format_exc()))
            return None

    def remaining(self):
        return self.walltime - (time.monotonic() - self.t0)

    # -- other users' files

    def reject(self, name, error):
        """Leave a file alone that is not a regular file of ours (Foreign): log it once, and
        count it in rejected.json and the heartbeat for the coordinator."""
        if name in self.rejected_names:
            return
        self.rejected_names.add(name)
        self.rejected.append({"name": name, "uid": error.uid, "why": error.why, "time": time.time()})
        self.log("rejected %s: it is %s; it is left alone, not run" % (name, error.why))
        self.safely("writing rejected.json", write_json_atomic, self.path("rejected.json"),
                    {"count": len(self.rejected), "files": self.rejected[-REJECTED_KEPT:]})
        self.last_heartbeat = None

    # -- start

    def make_dirs(self):
        """PILOTDIR and its folders, 0700; Refused if one exists and is not private."""
        if not os.path.lexists(self.dir):
            make_private_dirs(self.dir)
        for d in [self.dir] + [self.path(sub) for sub in SUBDIRS if os.path.lexists(self.path(sub))]:
            problem = dir_problem(d)
            if problem:               # checked before anything is made: nothing is left there
                raise Refused("%s: %s" % (d, problem))
        for sub in SUBDIRS:
            make_private_dir(self.path(sub))

    def setup(self):
        self.make_dirs()
        self.finished |= set(self.safely("reading the results written before", result_keys, self.path("results"))
                             or ())
        self.safely("recovering a previous incarnation", self.recover_previous)
        model, mhz = cpu_info()
        info = {
            "pilot": self.pilot, "host": self.host, "pid": os.getpid(), "started": self.started,
            "slots": self.slots, "walltime": self.walltime, "python": platform.python_version(),
            "job_id": batch_job_id(), "cpu_model": model, "cpu_mhz": mhz,
            "protocol": PROTOCOL_VERSION, "incarnation": self.incarnation, "previous": self.previous,
            "restart_count": restart_count(),
        }
        write_json_atomic(self.path("agent.json"), info)
        self.agent_json_stat = self.stat_key(self.path("agent.json"))
        self.log("agent started: pilot %s on %s, pid %d, %d slot(s), walltime %gs, python %s, incarnation %s"
                 % (self.pilot, self.host, os.getpid(), self.slots, self.walltime,
                    platform.python_version(), self.incarnation))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        self.safely("wake-up pipe", self.setup_wakeup)
        self.safely("writing the first waves", self.write_waves)   # the predecessor's lost attempts
        self.heartbeat()

    # -- incarnations

    @staticmethod
    def stat_key(path):
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_ino, getattr(st, "st_mtime_ns", st.st_mtime))

    def recover_previous(self):
        """A relaunch in the same PILOTDIR: what the previous agent took and never finished is
        lost with it; say so, once per attempt, so the coordinator runs it again."""
        try:
            with open(self.path("agent.json"), "rb") as f:
                before = json.loads(f.read().decode("utf-8"))
        except (OSError, IOError, ValueError):
            before = None
        if isinstance(before, dict):
            self.previous = before.get("incarnation") or "%s:%s" % (before.get("host"), before.get("pid"))
            self.log("relaunched: the previous agent (incarnation %s, pid %s on %s) is gone"
                     % (self.previous, before.get("pid"), before.get("host")))
        try:
            names = sorted(os.listdir(self.path("claimed")))
        except OSError:
            return
        for name in names:
            stem = name[:-len(".json")] if name.endswith(".json") else None
            m = KEY_RE.match(stem or "")
            if not m or stem in self.finished:
                continue
            self.result(int(m.group(1)), int(m.group(2)), "lost", "agent restarted")

    def superseded(self):
        """True when agent.json names another incarnation: a newer agent owns this directory."""
        key = self.stat_key(self.path("agent.json"))
        if key is None or key == self.agent_json_stat:
            return False
        try:
            with open(self.path("agent.json"), "rb") as f:
                doc = json.loads(f.read().decode("utf-8"))
        except (OSError, IOError, ValueError):
            return False
        if isinstance(doc, dict) and doc.get("incarnation") not in (None, self.incarnation):
            self.log("superseded by incarnation %s (pid %s on %s)" % (doc.get("incarnation"), doc.get("pid"),
                                                                      doc.get("host")))
            return True
        self.agent_json_stat = key
        return False

    # -- waking up

    def setup_wakeup(self):
        """SIGCHLD (a task ended) and SIGTERM/SIGINT write a byte to a pipe the loop sleeps on,
        so a freed slot is filled at once instead of at the next --poll."""
        r, w = os.pipe()
        for fd in (r, w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(w)
        signal.signal(signal.SIGCHLD, self.on_child)
        self.wake_r, self.wake_w = r, w

    def on_child(self, signum, frame):
        pass   # the wake-up byte is the point

    def sleep(self, seconds):
        if self.wake_r is None:
            time.sleep(seconds)
            return
        try:
            ready, _, _ = select.select([self.wake_r], [], [], seconds)
        except (OSError, ValueError):
            time.sleep(seconds)
            return
        if ready:
            try:
                while os.read(self.wake_r, 512):
                    pass
            except OSError:
                pass

    def on_signal(self, signum, frame):
        if self.signalled is None:
            self.signalled = signum

    def heartbeat(self):
        write_json_atomic(self.path("heartbeat.json"), {
            "time": time.time(), "state": self.state, "running": sorted(self.running),
            "free": max(0, self.slots - self.taken()), "rejected": len(self.rejected),
            "incarnation": self.incarnation, "started": self.started, "pid": os.getpid(),
            "protocol": PROTOCOL_VERSION,
        })
        self.last_heartbeat = time.monotonic()

    # -- results

    def result(self, task, attempt, outcome, reason, start=None, end=None, exit_code=None,
               sig=None, perf=None, tdir=None, name=None, outputs=None, refused=None):
        end = time.time() if end is None else end
        doc = {
            "task": task, "attempt": attempt, "exit_code": exit_code, "signal": sig,
            "start": end if start is None else start, "end": end, "host": self.host,
            "outcome": outcome, "reason": reason, "perf": perf, "incarnation": self.incarnation,
            "stdout_tail": read_tail(os.path.join(tdir, "stdout")) if tdir else "",
            "stderr_tail": read_tail(os.path.join(tdir, "stderr")) if tdir else "",
        }
        if outputs is not None:
            doc["outputs"] = outputs
        if refused:
            doc["refused"] = refused
        if name is not None:       # a bad inbox file whose name is no key: the result says which
            doc["file"] = name + ".json"
        key = name if name is not None else task_key(task, attempt)
        if key in self.finished:
            self.log("result %s: %s%s not written: a result was there first" % (key, outcome, " (%s)" % reason if reason else ""))
            return
        self.finished.add(key)
        self.outbox["results"].append(doc)
        self.log("result %s: %s%s" % (key, outcome, " (%s)" % reason if reason else ""))

    def write_waves(self):
        """Everything that started and everything that ended since the last call, one file
        each (protocol 6): ``started/{incarnation}-{n}.json`` and ``results/{incarnation}-{n}.json``,
        a JSON list of records, written atomically; ``n`` counts the waves written in that
        folder by this incarnation (from 1, without a gap: the coordinator reads n, n+1, ...
        until one is missing). Nothing is written for an empty turn. A wave that cannot be
        written stays in the outbox for the next turn, under the same n."""
        for sub in ("started", "results"):
            pending = self.outbox[sub]
            while pending:
                chunk = wave_chunk(pending)
                n = self.waves[sub] + 1
                write_json_atomic(self.path(sub, "%s-%d.json" % (self.incarnation, n)), chunk)
                self.waves[sub] = n
                del pending[:len(chunk)]

    def finish(self, a, returncode):
        end = time.time()
        for f in a.files:
            try:
                f.close()
            except (OSError, IOError):
                pass
        exit_code = sig = None
        if returncode is None:
            pass
        elif returncode < 0:
            sig = -returncode
        elif a.perf is True and returncode > 128 and a.kill_reason is None:
            sig = returncode - 128
        else:
            exit_code = returncode
        if a.kill_reason is not None:
            outcome, reason = a.kill_outcome, a.kill_reason
        elif self.signalled is not None:
            # scancel and the walltime kill signal the whole job: the task may die of it before
            # the agent's own handler runs — or only a child of it may, and its shell carries
            # on to exit 0. Cut short or not, nobody can tell: lost with the pilot, never done
            outcome, reason = "lost", "terminated"
        elif exit_code == 0:
            outcome, reason = "done", None
        elif exit_code is not None:
            outcome, reason = "failed", "exit code %d" % exit_code
        else:
            outcome, reason = "failed", "signal %d" % sig if sig is not None else "unknown status"
        if a.perf is True:
            perf = parse_perf_csv(os.path.join(a.tdir, "perf.csv"))
            if (not self.perf_control and exit_code == 0 and a.kill_reason is None
                    and perf_lost_end(os.path.join(a.tdir, "perf.csv"))):
                # an old perf skipped its wait (perf_control_pipe): status 0 is not the task's
                outcome, reason, exit_code = "lost", "perf lost the exit status", None
        else:
            perf = a.perf
        self.running.pop(a.key, None)
        if a.kill_reason is not None and group_alive(a.pgid):
            deadline = a.kill_deadline if a.kill_deadline is not None else time.monotonic()
            self.lingering.append((a.pgid, deadline, a.task))
        elif self.guard is not None:
            self.guard.untrack(a.pgid)
        outputs = refused = None
        if outcome == "done" and a.outputs:
            outputs, refused, missing = self.collect_outputs(a)
            if missing:
                outcome, reason = "failed", "missing output: %s" % ", ".join(missing)
            refused = refused[:REFUSED_LISTED]
            too_many = too_many_outputs(outputs, refused)
            if too_many:
                outcome, reason, outputs = "failed", too_many, []
        self.result(a.task, a.attempt, outcome, reason, start=a.start, end=end,
                    exit_code=exit_code, sig=sig, perf=perf, tdir=a.tdir, outputs=outputs, refused=refused)

    def terminate(self, a, outcome, reason, grace=KILL_GRACE):
        if a.kill_reason is None:
            a.kill_outcome, a.kill_reason = outcome, reason
            a.kill_deadline = time.monotonic() + grace
            self.log("terminating %s (%s)" % (a.key, reason))
            signal_group(a.pgid, signal.SIGTERM)

    # -- loop phases

    def killed_from_outside(self, a, rc):
        """Did the attempt die of a SIGTERM/SIGINT the agent did not send (its shell's 128+N
        included)? scancel and the walltime kill signal the whole job in no set order, so the
        task can be reaped before the agent's own signal handler runs."""
        if a.kill_reason is not None or self.signalled is not None:
            return False
        return -rc in OUTSIDE_KILLS or rc - 128 in OUTSIDE_KILLS

    def reap(self, final=False):
        """Finish every attempt whose process has exited. Not ``final``, one killed from outside
        is held TERM_HOLD s first: if the agent's own signal follows, it was lost with the pilot."""
        for key, a in list(self.running.items()):
            try:
                rc = a.proc.poll()
            except Exception:
                self.log("poll %s: %s" % (key, traceback.format_exc()))
                continue
            if rc is not None and not final and self.killed_from_outside(a, rc):
                now = time.monotonic()
                if a.hold_until is None:
                    a.hold_until = now + TERM_HOLD
                    self.log("%s ended by signal %d from outside: waiting %.0f s for ours" % (
                        key, -rc if rc < 0 else rc - 128, TERM_HOLD))
                if now < a.hold_until:
                    continue
            if rc is not None:
                self.safely("finishing " + key, self.finish, a, rc)
                self.running.pop(key, None)

    def enforce_deadlines(self):
        now = time.monotonic()
        for a in list(self.running.values()):
            if a.kill_reason is None and a.deadline is not None and now >= a.deadline:
                self.terminate(a, "failed", "timeout")
            if a.kill_deadline is not None and not a.hard_killed and now >= a.kill_deadline:
                a.hard_killed = True
                self.log("killing %s (SIGKILL)" % a.key)
                signal_group(a.pgid, signal.SIGKILL)
        keep = []
        for pgid, deadline, task in self.lingering:
            if group_alive(pgid) and now >= deadline:
                signal_group(pgid, signal.SIGKILL)
            elif group_alive(pgid):
                keep.append((pgid, deadline, task))
                continue
            if self.guard is not None:
                self.guard.untrack(pgid)
        self.lingering = keep

    def own_entries(self, sub, wanted):
        """(name, lstat) of the entries of folder ``sub`` whose names ``wanted`` accepts and
        that are ours; another user's entry is rejected (and reported), never read."""
        try:
            names = os.listdir(self.path(sub))
        except OSError:
            return
        for name in names:
            if not wanted(name):
                continue
            try:
                st = os.lstat(self.path(sub, name))
            except OSError:
                continue
            if not mine(st):
                self.reject(sub + "/" + name, Foreign(self.path(sub, name), st))
                continue
            yield name, st

    def cancel_kind(self, key):
        """What ``cancel/{key}`` asks: "withdraw" (only if not started) or "cancel"."""
        try:
            content = read_own(self.path("cancel", key), 64)
        except (OSError, IOError, Foreign):
            return "cancel"
        return "withdraw" if content.decode("utf-8", "replace").strip() == "withdraw" else "cancel"

    def handle_cancels(self):
        for key, _ in self.own_entries("cancel", lambda k: k not in self.cancel_done and KEY_RE.match(k)):
            m = KEY_RE.match(key)
            withdraw = self.cancel_kind(key) == "withdraw"
            if key in self.running:
                if withdraw:   # it started: the request is refused, its started record says so
                    self.log("withdraw of %s refused: it is running" % key)
                else:
                    self.terminate(self.running[key], "cancelled", "cancelled")
                self.cancel_done.add(key)
                continue
            if key in self.finished:
                self.cancel_done.add(key)
                continue
            inboxed = self.path("inbox", key + ".json")
            if os.path.exists(inboxed):
                try:   # claimed, not removed: killed before its wave, the successor says lost
                    os.rename(inboxed, self.path("claimed", key + ".json"))
                except OSError as e:
                    if e.errno != errno.ENOENT:
                        raise
                    continue
                self.cancel_done.add(key)
                self.result(int(m.group(1)), int(m.group(2)), "cancelled", "withdrawn" if withdraw else "cancelled")
            # otherwise not seen yet: checked again, and when claimed

    def inbox_entries(self):
        """(place, name) of the inbox files that are ours, first to take first. The folder is
        listed every loop turn, but a file is looked at (lstat, then read) only the first turn
        its name is there: with hundreds of attempts handed ahead, an lstat of every waiting
        file at each turn (a turn per ended task) cost more than the tasks (docs/benchmarks.md).
        The claim checks the file itself again (read_own), so a file changed after its first
        look is still never run unless it is a regular file of ours.

        The place is the file's ``order`` (protocol 7), the coordinator's handing order: files
        of one coordinator turn are written together (on threads, or pipelined over SFTP), so
        their modification times are out of order or equal to the clock tick, and a largest
        first hand-out would run in the order of the names. A file without ``order`` (an older
        coordinator's) comes after those with one, by (mtime, name)."""
        try:
            names = os.listdir(self.path("inbox"))
        except OSError:
            return []
        seen = {}
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            look = self.inbox_seen.get(name)
            if look is None:
                try:
                    st = os.lstat(self.path("inbox", name))
                except OSError:
                    continue
                if not mine(st):
                    self.reject("inbox/" + name, Foreign(self.path("inbox", name), st))
                    continue
                look = self.first_look(name, st)
            seen[name] = look
        self.inbox_seen = seen
        return sorted((place, name) for name, (place, _slots) in seen.items())

    def first_look(self, name, st):
        """(place, slots) of an inbox file of ours, read once: its place in the order the
        agent takes files (inbox_entries), and the slots it asks for — 1 when it cannot be read
        or says nothing usable (claiming it then reports what is wrong), and --slots when it
        asks more than the pilot has (claimed, it fails as a bad task file)."""
        order, slots = None, 1
        try:
            doc = json.loads(read_own(self.path("inbox", name), limit=1 << 20).decode("utf-8"))
        except Exception:
            doc = None
        try:
            order = task_order(doc)
        except BadTask:
            pass
        try:
            slots = min(task_slots(doc), self.slots)
        except BadTask:
            pass
        return ((0, order) if order is not None else (1, st.st_mtime)), slots

    def taken(self):
        """The slots the running attempts take (each its ``slots``: 1 unless it asked more)."""
        return sum(a.slots for a in self.running.values())

    def peek_slots(self, name):
        """The slots an inbox file asks for, before claiming it (protocol 5): as its first
        look read them (:meth:`first_look`)."""
        look = self.inbox_seen.get(name)
        return look[1] if look is not None else 1

    def claim(self, entries):
        """Claim inbox files into free slots, oldest first; one whose slots do not fit what is
        free waits while a later one that fits is taken. A task with an attempt still running
        here (or still dying: cancelled, its group not yet gone) waits in the inbox: this agent
        never runs two attempts of one task at once, whatever the coordinator asked (a pilot it
        took for requeued is handed the attempt it just cancelled again, as the next one)."""
        busy = {a.task for a in self.running.values()} | {task for _pgid, _deadline, task in self.lingering}
        free = self.slots - self.taken()
        for _place, name in entries:
            if free <= 0:
                break
            m = KEY_RE.match(name[:-len(".json")])
            if m and int(m.group(1)) in busy:
                continue
            width = self.peek_slots(name) if self.slots > 1 else 1
            if width > free:
                continue
            src, dst = self.path("inbox", name), self.path("claimed", name)
            try:
                os.rename(src, dst)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    self.log("cannot claim %s: %s" % (name, e))
                continue
            self.safely("starting " + name, self.start_claimed, name, dst)
            free = self.slots - self.taken()

    def start_claimed(self, name, path):
        stem = name[:-len(".json")]
        m = KEY_RE.match(stem)
        try:
            raw = read_own(path)
        except Foreign as e:
            self.reject("claimed/" + name, e)
            return
        try:
            try:
                doc = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                raise BadTask("not valid JSON: %s" % e)
            task, attempt, command, env, perf, timeout = validate_task(doc, stem)
            data = validate_data(doc)
            slots = task_slots(doc)
            task_order(doc)
            if slots > self.slots:
                raise BadTask("'slots' %d is more than this pilot's %d" % (slots, self.slots))
        except BadTask as e:
            self.bad_task(stem, m, str(e))
            return
        key = stem
        if key in self.running or key in self.finished:
            self.log("ignoring %s: this attempt already ran here" % key)
            return
        if own_file(self.path("cancel", key)):
            self.cancel_done.add(key)
            self.result(task, attempt, "cancelled", "withdrawn" if self.cancel_kind(key) == "withdraw" else "cancelled")
            return
        self.launch(key, task, attempt, command, env, perf, timeout, data)
        if key in self.running:
            self.running[key].slots = slots

    def bad_task(self, stem, m, reason):
        reason = "bad task file: " + reason
        if m:
            self.result(int(m.group(1)), int(m.group(2)), "failed", reason)
        elif SAFE_NAME_RE.match(stem):
            self.result(None, None, "failed", reason, name=stem)
        else:
            self.log("ignoring %s.json: %s" % (stem, reason))

    def check_perf(self):
        if not self.perf_checked:
            self.perf_checked = True
            exe = shutil.which("perf")
            if exe is None:
                self.perf_error = "perf not found"
            else:
                try:
                    probe = subprocess.Popen(
                        [exe, "stat", "-x,", "-o", os.devnull, "-e", PERF_EVENTS, "--", "/bin/sh", "-c", "true"],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                    out, _ = probe.communicate(timeout=20)
                    if probe.returncode == 0:
                        self.perf_exe = exe
                        self.perf_control = perf_control_pipe(exe)
                    else:
                        text = out.decode("utf-8", "replace").strip().splitlines()
                        self.perf_error = "perf unusable: %s" % (text[-1] if text else "exit %d" % probe.returncode)
                except Exception as e:
                    self.perf_error = "perf unusable: %s" % e
            self.log("perf: %s%s" % (self.perf_exe or self.perf_error,
                                     "" if self.perf_control or not self.perf_exe else " (no --control)"))
        return self.perf_exe

    def launch(self, key, task, attempt, command, env, perf, timeout, data=((), ())):
        tdir = self.path("tasks", key)
        inputs, outputs = data
        try:
            make_private_dir(tdir)
            if perf:
                open_new(os.path.join(tdir, "perf.csv")).close()   # perf stat -o follows links
        except (OSError, Refused) as e:
            self.result(task, attempt, "failed", "start failed: %s" % e)
            return
        try:
            self.stage_inputs(tdir, inputs)
        except BadInput as e:
            self.result(task, attempt, "failed", str(e))
            return
        except (OSError, Refused) as e:
            self.result(task, attempt, "failed", "start failed: inputs: %s" % e)
            return
        full_env = dict(os.environ)
        full_env.update(env)
        full_env["RESEL_TASK"] = str(task)
        full_env["RESEL_ATTEMPT"] = str(attempt)
        full_env["RESEL_PILOT"] = str(self.pilot)
        perf_state = None
        argv = ["/bin/sh", "-c", command]
        if perf:
            exe = self.check_perf()
            if exe:
                perf_state = True
                ctl = ["--control", "fd:%d" % self.perf_control[0]] if self.perf_control else []
                argv = [exe, "stat", "-x,", "-o", os.path.join(tdir, "perf.csv")] + ctl + [
                    "-e", PERF_EVENTS, "--", "/bin/sh", "-c", PERF_WRAPPER, "sh", command]
            else:
                perf_state = {"error": self.perf_error}
        files = []
        start = time.time()
        try:
            files.append(open_new(os.path.join(tdir, "stdout")))
            files.append(open_new(os.path.join(tdir, "stderr")))
            proc = subprocess.Popen(argv, cwd=tdir, env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=files[0], stderr=files[1], close_fds=True,
                                    start_new_session=True,
                                    pass_fds=self.perf_control[:1] if perf_state is True and self.perf_control
                                    else ())
        except Exception as e:
            for f in files:
                f.close()
            self.result(task, attempt, "failed", "start failed: %s" % e, start=start,
                        perf=perf_state if isinstance(perf_state, dict) else None, tdir=tdir)
            return
        deadline = time.monotonic() + timeout if timeout is not None else None
        a = Attempt(key, task, attempt, proc, start, deadline, perf_state, tdir, files,
                    (tuple(i["name"] for i in inputs), tuple(outputs)))
        self.running[key] = a
        if self.guard is not None:
            self.guard.track(a.pgid)
        self.log("started %s: pid %d%s" % (key, proc.pid, " under perf" if perf_state is True else ""))
        self.outbox["started"].append({"task": task, "attempt": attempt, "time": start, "host": self.host})

    # -- task data (protocol 3, docs/data.md)

    def stage_inputs(self, tdir, inputs):
        """Put each input in the task's folder: the file of the run's cache named by its sha256,
        checked (a regular file of this user's with that digest; remembered by device, inode,
        size and mtime, so a shared file is hashed once per pilot) and hard-linked — copied
        from the checked file where a link cannot be made. An input given by ``url`` is the
        cache's ``url-SHA256(URL)`` (what the site fetched; only its owner is checked).
        BadInput if one is missing or wrong."""
        if not inputs:
            return
        cache = os.path.join(os.path.dirname(self.dir), CACHE)
        problem = dir_problem(cache)
        if problem:
            raise BadInput("inputs: the cache folder %s: %s" % (cache, problem))
        for item in inputs:
            name, url = item["name"], item.get("url")
            digest, size = item.get("sha256"), item.get("size")
            src = os.path.join(cache, url_cache_name(url) if url else digest)
            try:
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as e:
                if e.errno == errno.ENOENT and url:
                    raise BadInput("input %s: not in the site's cache (URL %s: resel has URL inputs fetched "
                                   "only by an HTCondor pool's file transfer; elsewhere the site's setup "
                                   "lines fetch them, see docs/data.md)" % (name, url))
                if e.errno == errno.ENOENT:
                    raise BadInput("input %s: not in the site's cache (sha256 %s)" % (name, digest))
                if e.errno == errno.ELOOP:
                    raise BadInput("input %s: the cache holds a symbolic link under its sha256; refused" % name)
                raise BadInput("input %s: cannot be read from the cache (%s)" % (name, e.strerror or e))
            try:
                st = os.fstat(fd)
                if not mine(st):
                    raise BadInput("input %s: %s" % (name, Foreign(src, st).why))
                key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                if url is None and self.verified.get(key) != digest:   # a URL's bytes: the site's
                    got_size, got = file_sha256(fd)
                    if (got_size, got) != (size, digest):
                        raise BadInput("input %s: the cached file's sha256 is %s (%d bytes), not the expected "
                                       "%s (%d bytes)" % (name, got, got_size, digest, size))
                    self.verified[key] = digest
                dst = os.path.join(tdir, name)
                if os.path.dirname(dst) != tdir:
                    make_private_dirs(os.path.dirname(dst))
                self.place(fd, st, src, dst)
            finally:
                os.close(fd)

    @staticmethod
    def place(fd, st, src, dst):
        """Hard-link the checked cache file to dst; if the name at src changed meanwhile, or no
        link can be made (another filesystem), copy the checked file's bytes instead."""
        try:
            os.link(src, dst)
            linked = os.lstat(dst)
            if (linked.st_dev, linked.st_ino) == (st.st_dev, st.st_ino):
                return
            os.unlink(dst)
        except OSError:
            pass
        os.lseek(fd, 0, os.SEEK_SET)
        with open_new(dst) as out:
            while True:
                block = os.read(fd, 1 << 20)
                if not block:
                    break
                out.write(block)

    def collect_outputs(self, a):
        """The declared outputs of an attempt that exited 0: (outputs, refused, missing).
        Matched inside its folder without following a link; a match that is a link, a device
        or a pipe is refused (listed, never sent); a folder is looked into, not sent; the inputs
        put there are never outputs. Each output's size and sha256 are taken here, from the
        file opened without following a link."""
        entries = walk_task_dir(a.tdir)
        inputs = set(a.inputs)
        found, refused, missing = {}, {}, []
        for spec in a.outputs:
            pattern = spec["glob"].split("/")
            hit = False
            for rel, st in entries:
                if rel in inputs or not match_path(rel.split("/"), pattern):
                    continue
                if stat.S_ISREG(st.st_mode) and unsendable(rel):
                    refused[rel] = unsendable(rel)
                elif stat.S_ISREG(st.st_mode):
                    found[rel] = st
                    hit = True
                elif not stat.S_ISDIR(st.st_mode):
                    refused[rel] = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            if not hit and not spec.get("optional", False):
                missing.append(spec["glob"])
        outputs = []
        for rel in sorted(found):
            try:
                fd = os.open(os.path.join(a.tdir, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as e:
                refused[rel] = "cannot be read (%s)" % (e.strerror or e)
                continue
            try:
                st = os.fstat(fd)
                if not mine(st):
                    refused[rel] = Foreign(rel, st).why
                    continue
                size, digest = file_sha256(fd)
            finally:
                os.close(fd)
            outputs.append({"name": rel, "size": size, "sha256": digest})
        return outputs, [{"name": shown(n), "why": w} for n, w in sorted(refused.items())], missing

    def read_stop(self):
        try:
            content = read_own(self.path("stop"), 4096)
        except Foreign as e:
            self.reject("stop", e)
            return None
        except (OSError, IOError):
            return None
        return "drain" if content.decode("utf-8", "replace").strip() == "drain" else "stop"

    # -- main loop

    def step(self):
        """One loop iteration; returns the exit reason or None."""
        if self.signalled is not None:
            return "terminated"
        if self.remaining() < FINAL_MARGIN:
            return "walltime"
        if self.safely("checking agent.json", self.superseded):
            return "superseded"
        self.safely("reaping", self.reap)
        self.safely("cancels", self.handle_cancels)
        self.safely("deadlines", self.enforce_deadlines)
        stop = self.safely("stop file", self.read_stop)
        if stop == "stop":
            return "stopped"
        if stop == "drain" and not self.stop_drain:
            self.stop_drain = True
            self.log("stop requested: draining")
        state = "draining" if self.stop_drain or self.remaining() < self.drain else "running"
        if self.stop_drain and not self.running:
            return "drained"
        entries = self.safely("listing inbox", self.inbox_entries) or []
        if state == "running":
            self.safely("claiming", self.claim, entries)
        if state != self.state:
            self.log("state %s -> %s" % (self.state, state))
            self.state = state
            self.last_heartbeat = None
        self.safely("writing waves", self.write_waves)   # before the heartbeat that names them
        if self.last_heartbeat is None or time.monotonic() - self.last_heartbeat >= self.heartbeat_every:
            self.safely("heartbeat", self.heartbeat)
        now = time.monotonic()
        if self.running or entries:
            self.idle_since = now
        elif self.idle_exit > 0 and now - self.idle_since >= self.idle_exit:
            return "idle"
        return None

    def run(self):
        self.guard = Guard(self.log)      # forked first: before any handler or file of the loop
        self.setup()
        if self.guard.error:
            self.log(self.guard.error)
        reason = None
        while reason is None:
            try:
                reason = self.step()
            except Exception:
                self.log("error in loop: %s" % traceback.format_exc())
                reason = None
            if reason is None:
                self.sleep(self.next_wake())
        self.shutdown(reason)
        return 0

    def next_wake(self):
        """Sleep --poll, or less when a held attempt's hold ends sooner."""
        holds = [a.hold_until for a in self.running.values() if a.hold_until is not None]
        if not holds:
            return self.poll
        return max(0.01, min(self.poll, min(holds) - time.monotonic()))

    def shutdown(self, reason):
        self.log("exiting: %s" % reason)
        self.state = "stopping"
        owner = reason != "superseded"   # a superseded agent leaves the newer one's files alone
        self.safely("reaping", self.reap, True)
        if owner:
            self.safely("heartbeat", self.heartbeat)
        outcome = {"walltime": "lost", "terminated": "lost", "stopped": "cancelled", "superseded": "lost"}.get(reason)
        if self.running and outcome is not None:
            for a in list(self.running.values()):
                a.kill_outcome, a.kill_reason = outcome, reason
                a.kill_deadline = time.monotonic()
                signal_group(a.pgid, signal.SIGTERM)
            deadline = time.monotonic() + SHUTDOWN_GRACE
            while time.monotonic() < deadline and any(a.proc.poll() is None for a in self.running.values()):
                time.sleep(0.02)
            for a in list(self.running.values()):
                signal_group(a.pgid, signal.SIGKILL)
                try:
                    a.proc.wait(timeout=5)
                except Exception:
                    pass
                self.safely("finishing " + a.key, self.finish, a, a.proc.poll())
                self.running.pop(a.key, None)
        for pgid, _deadline, _task in self.lingering:
            signal_group(pgid, signal.SIGKILL)
        if self.guard is not None:
            self.guard.close()
        if owner:
            self.safely("writing the last waves", self.write_waves)
            self.safely("exit file", write_json_atomic, self.path("exit.json"),
                        {"time": time.time(), "reason": reason})
            self.safely("heartbeat", self.heartbeat)
        self.log("exited: %s" % reason)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="resel-agent.py", description="resel pilot agent (protocol %d)" % PROTOCOL_VERSION)
    p.add_argument("--dir", required=True, help="the pilot directory on the shared filesystem")
    p.add_argument("--pilot", required=True, help="this pilot's id")
    p.add_argument("--slots", type=int, required=True, help="how many attempts run at once")
    p.add_argument("--walltime", type=float, required=True, help="seconds this pilot may run")
    p.add_argument("--drain", type=float, default=60.0, help="stop claiming when less walltime remains (60)")
    p.add_argument("--heartbeat", type=float, default=5.0, help="seconds between heartbeats (5)")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between loop iterations (0.5)")
    p.add_argument("--idle-exit", type=float, default=0.0, help="exit after this long idle (0: never)")
    args = p.parse_args(argv)
    if args.slots < 1:
        p.error("--slots must be at least 1")
    if not args.walltime > 0:
        p.error("--walltime must be positive")
    if not args.poll > 0 or not args.heartbeat > 0:
        p.error("--poll and --heartbeat must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    agent = Agent(args)
    try:
        return agent.run()
    except Refused as e:
        # nothing is written in a folder others control: the message goes to the job's output
        sys.stderr.write("resel agent: refusing to start: %s. Another user could put tasks there "
                         "that would run as you; make it yours with `chmod go-w` (resel makes its "
                         "folders 0700) or choose another workdir (docs/security.md)\n" % e)
        return 2
    except Exception:
        agent.log("agent crashed: %s" % traceback.format_exc())
        try:
            agent.write_waves()       # what ended before the crash still counts
        except Exception:
            pass
        try:
            write_json_atomic(agent.path("exit.json"), {"time": time.time(), "reason": "crashed"})
        except Exception:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main())
