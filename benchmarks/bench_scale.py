"""A big bag of ~0-s tasks, live: what limits the coordinator's throughput (issue 29 §2).

    scripts/testbed.sh up                                         # the live testbed (root)
    .venv/bin/python benchmarks/bench_scale.py --tasks 1000        # [--sites tba,tbb,tbc,pool] [--json]
    .venv/bin/python benchmarks/bench_scale.py --tasks 5000 --profile scale.prof   # + cProfile
    .venv/bin/python benchmarks/bench_scale.py --tasks 1000 --strace               # + fsync/exec counts
    .venv/bin/python benchmarks/bench_scale.py --tasks 3000 --sites tba,tbb,tbc --strategy topk:3 --prefetch 4

``resel run`` is started as a user starts it (its own process, ``--strategy topk:N+reselect``
over the chosen sites — with equal clocks ``topk:N`` alone leaves the pool, whose chirp pull
runs ~1 task/s, an equal share — ``--poll 0.5``) on a bag of ``--tasks`` tasks of ``true``. The sites are the
testbed's four, as the crash soak lays them out (benchmarks/soak_crash.py: tba Slurm 22.05
local, tbb Slurm 22.05 over SSH, tbc Slurm 24.11 through slurmrestd, the HTCondor 23.9 pool),
each in a work directory of its own. While it runs, this process measures from outside:

* **completed tasks per second**: from the agents' own end stamps (the store's ``attempts``),
  counted in 10-s windows (``--window``) from the first completion to the last; *sustained* is
  the median window (the last, partial one left out), *overall* the bag over the span from
  the coordinator's launch to its exit;
* **the coordinator's CPU seconds and peak RSS**: /proc/PID/stat (its own threads; the main
  thread apart, which alone runs the engine and the store) and /proc/PID/status VmHWM; the
  CPU of the scheduler commands it ran as subprocesses (``squeue`` for tba) is added from
  ``wait4``;
* **the machine's CPU**: /proc/stat over the run (busy share of all cores, CPU per task), and a
  census of who burnt it — every process's own CPU sampled each half second, classed by its
  command line (:data:`CENSUS`: the agents, Slurm, sshd, HTCondor, ``resel status``, the
  coordinator); what ended between two samples (each task's own ``sh -c``) is *unattributed*,
  and of that, what the agents reaped (their tasks' own CPU, the task's work and its process's
  start and end) is given apart as *tasks*; for the agents and the coordinator, the time their
  threads waited for a core (``run_queue_s``, /proc schedstat); the hypervisor's steal is not
  counted as busy (``steal_s``). It tells a rate bound by the machine's CPU from one bound by
  the pipeline;
* **the store's size per task**: the store file after the run, its write-ahead log folded back
  (``wal_checkpoint(truncate)``; the log's size as the coordinator left it is given apart), / N;
  the journal's rows by kind;
* **the poll cycle**: every job a site's worker thread runs is timed inside the coordinator
  (``resel.live.sites.SiteWorker``: the scheduler's poll, the read of the pilots' files, each
  dispatch); a site's poll is its scheduler's poll and its file read, which run at once on the
  site's two workers (as bench_live.py measures), and the cycle over the sites is the slowest
  site's. Also the wait of a read behind the jobs queued on the same worker (the dispatches),
  and the period between two reads of one site as the coordinator achieves it;
* **``resel status``** wall time, run every ``--status-every`` seconds during the run;
* **per task**: inbox files written, agent files read (waves since agent protocol 6, else one
  per record), stats (a wave's owner check), directory listings,
  scheduler polls, journal rows, store commits (each a write-ahead-log fsync in SQLite's WAL
  mode at its default synchronous=FULL), with ``--strace`` the fsync/fdatasync and execve
  system calls themselves;
* **exactly once**: benchmarks/soak_audit.py's check from the agents' files and the store:
  every task done, none lost, no two attempts of one task at once, each result as written.

The counting inside the coordinator is done by this same file started as
``bench_scale.py --child OUT [PROFILE] -- run ...``: it wraps a few methods with counters
(nothing in resel changes), optionally runs the command under cProfile (the main thread:
the engine, the journal, the store; the site threads only wait on I/O), then runs the CLI.
``--prefetch K|auto`` is passed to ``resel run --prefetch`` (default: the CLI's, ``auto``, the
depth the measured task time needs; issue 29 §2). Before the CLI had the option this harness
set it inside the child, to test whether the depth of the hand-ahead is what limits throughput
(docs/benchmarks.md: it is).
The load average (1 min) is given at the start and the end and as the mean of samples.
Nothing is left behind unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- the child
def child(out: str, profile: str, argv: list[str]) -> None:
    """Inside ``resel run``: count what the coordinator does per task, time each site job,
    then run the CLI (optionally under cProfile); write the figures to ``out`` at exit."""
    import collections
    import cProfile
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)    # `kill -USR1 PID`: every thread's stack

    from resel.backends import pilotsite, transport
    import resel.live.sites as live_sites

    lock = threading.Lock()
    counts: collections.Counter = collections.Counter()
    jobs: list[tuple] = []            # (site, role, kind, submitted, began, seconds, listings) monotonic
    here = threading.local()          # the folder listings the job running on this thread made
    sql: collections.Counter = collections.Counter()

    def counted(cls, name: str, label: str):
        original = getattr(cls, name, None)
        if original is None:
            return

        def wrapper(self, *a, **kw):
            with lock:
                counts[label] += 1
            if name in ("entries", "listdir"):
                here.listings = getattr(here, "listings", 0) + 1
            return original(self, *a, **kw)
        setattr(cls, name, wrapper)

    for name in ("inbox_file", "dispatch_many", "collect", "cancel_task", "withdraw_task", "pilot_jobs", "submit_pilot",
                 "stop_pilot"):
        counted(pilotsite.PilotSite, name, f"site.{name}")
    for cls in (transport.LocalTransport, transport.SSHTransport):
        for name in ("write_file", "write_files", "read_file", "entries", "listdir", "rename", "run", "exists", "remove", "stat"):
            counted(cls, name, f"{cls.__name__}.{name}")

    original_submit = live_sites.SiteWorker.submit

    class Timed:
        """A site job, timed; a job the worker may batch (``batch_key``) stays batchable:
        a batch is timed whole, each of its jobs counted with the batch's time."""

        def __init__(self, worker, kind, job):
            self.worker, self.kind, self.job = worker, kind, job
            self.submitted = time.monotonic()
            if getattr(job, "batch_key", None) is not None:
                self.batch_key = job.batch_key

        def _record(self, began: float) -> None:
            with lock:
                jobs.append((self.worker.site, self.worker.role, self.kind, self.submitted, began,
                             time.monotonic() - began, getattr(here, "listings", 0)))

        def __call__(self):
            began = time.monotonic()
            here.listings = 0
            try:
                return self.job()
            finally:
                self._record(began)

        def run_batch(self, batch):
            began = time.monotonic()
            here.listings = 0
            try:
                return self.job.run_batch([timed.job for timed in batch])
            finally:
                for timed in batch:
                    timed._record(began)

    def submit(self, kind, tag, job):
        return original_submit(self, kind, tag, Timed(self, kind, job))
    live_sites.SiteWorker.submit = submit

    from resel import store as store_mod
    original_open = store_mod.open_store

    def open_store(*a, **kw):
        db = original_open(*a, **kw)
        conn = getattr(db, "conn", None)
        if conn is not None:
            changes = [conn.total_changes]

            def trace(statement: str) -> None:
                word = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
                if word == "COMMIT" and conn.total_changes != changes[0]:   # one that wrote: a WAL fdatasync
                    changes[0] = conn.total_changes
                    sql["COMMIT writing"] += 1
                if word == "INSERT" or word == "REPLACE" or word == "UPDATE":
                    table = statement.split("INTO", 1)[-1].split()[0] if "INTO" in statement.upper() else "?"
                    sql[f"{word} {table.strip(chr(34)).strip('[]')}"] += 1
                sql[word] += 1
            conn.set_trace_callback(trace)
        return db
    store_mod.open_store = open_store
    import resel.cli.live as cli_live                       # it imported open_store by name
    if hasattr(cli_live, "open_store"):
        cli_live.open_store = open_store

    # the main thread's busy time: each turn of the loop (Coordinator.step) less its wait for
    # the sites' reports (_wait) — the engine, the store and its commits' fdatasyncs, the polls
    # started; what bounds the coordinator's rate whatever the sites do
    import resel.live.coordinator as live_coord
    turns = {"steps": 0, "step_s": 0.0, "wait_s": 0.0}
    original_step, original_wait = live_coord.Coordinator.step, live_coord.Coordinator._wait

    def step(self, *a, **kw):
        began = time.perf_counter()
        try:
            return original_step(self, *a, **kw)
        finally:
            turns["steps"] += 1
            turns["step_s"] += time.perf_counter() - began

    def wait(self, *a, **kw):
        began = time.perf_counter()
        try:
            return original_wait(self, *a, **kw)
        finally:
            turns["wait_s"] += time.perf_counter() - began
    live_coord.Coordinator.step, live_coord.Coordinator._wait = step, wait

    # the interpreter's garbage collections: a full one walks every object the run holds, with
    # the GIL, so every thread (the sites' reads too) waits for it
    import gc
    pauses: dict[str, list[float]] = {"0": [], "1": [], "2": []}
    gc_began = [0.0]

    def gc_timed(phase: str, info: dict) -> None:
        if phase == "start":
            gc_began[0] = time.perf_counter()
        else:
            pauses[str(info.get("generation"))].append(time.perf_counter() - gc_began[0])
    gc.callbacks.append(gc_timed)

    began = time.monotonic()

    def dump() -> None:
        threads = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
        cpu = {}
        for task in Path("/proc/self/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                cpu[threads.get(int(task.name), "main" if int(task.name) == os.getpid() else task.name)] = \
                    (int(fields[11]) + int(fields[12])) / TICK
            except (OSError, IndexError, ValueError):
                continue
        doc = {"counts": dict(counts), "sql": dict(sql), "jobs": jobs, "began": began, "thread_cpu": cpu,
               "turns": turns,
               "gc": {gen: {"count": len(v), "seconds": sum(v), "max": max(v, default=0.0)}
                      for gen, v in pauses.items()}}
        Path(out).write_text(json.dumps(doc))

    from resel.cli import main
    sys.argv = ["resel", *argv]
    prof = cProfile.Profile() if profile else None
    try:
        if prof is not None:
            prof.enable()
        main()
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile)
        dump()


# ---------------------------------------------------------------------------- the run
#: who burns the machine's CPU while the bag runs, by a process's command line (first match)
CENSUS = (("agents", "resel-agent-v"), ("slurm", "slurm"), ("sshd", "sshd"), ("htcondor", "condor_"),
          ("resel status", "resel.cli status"), ("coordinator", "bench_scale.py --child"))


def machine_ticks() -> tuple[int, int, int]:
    """The machine's CPU ticks since boot: all, idle + iowait, and steal (/proc/stat's first
    line; steal: time a virtual CPU wanted to run while the hypervisor ran something else)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4], fields[7] if len(fields) > 7 else 0


#: the classes whose time waiting for a core is read (each of their threads' /proc schedstat)
QUEUED_KINDS = ("agents", "coordinator")


def run_queue_s(d: Path) -> float:
    """Seconds the process's threads have waited on a run queue, runnable but without a core
    (/proc/PID/task/TID/schedstat's second field, ns; 0 where the kernel keeps no schedstats)."""
    total = 0
    for t in (d / "task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def census() -> dict[tuple[int, str], tuple[str, float, float, float]]:
    """Every live process's own CPU seconds (user + system), keyed by pid and start time, with its
    :data:`CENSUS` class; apart, its reaped children's (cutime + cstime: for an agent, its tasks,
    which end between two samples and so are in no process's own figure), and for the
    :data:`QUEUED_KINDS` the seconds it waited for a core (:func:`run_queue_s`; else 0)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            kind = next((k for k, needle in CENSUS if needle in cmd), "other")
            queued = run_queue_s(d) if kind in QUEUED_KINDS else 0.0
        except (OSError, IndexError):
            continue
        out[(int(d.name), stat[19])] = (kind, (int(stat[11]) + int(stat[12])) / TICK,
                                        (int(stat[13]) + int(stat[14])) / TICK, queued)
    return out


class Sampler(threading.Thread):
    """Every half second: the coordinator's CPU (its own, per thread: main and the rest) and
    RSS, the load average, and every process's own CPU (a census: what the agents, the
    schedulers' daemons and sshd burn beside the coordinator on the same cores); every
    ``status_every`` seconds, ``resel status``'s wall time."""

    def __init__(self, pid: int, db: Path, status_every: float):
        super().__init__(daemon=True)
        self.pid, self.db, self.status_every = pid, db, status_every
        self.stop = threading.Event()
        self.cpu = 0.0
        self.main_cpu = 0.0
        self.hwm_kb = 0
        self.loads: list[float] = []
        self.status: list[tuple[float, float, int, float]] = []   # (at, seconds, exit code, its CPU s)
        self.first = census()                                   # what each process had burnt before
        self.last: dict[tuple[int, str], tuple[str, float, float, float]] = dict(self.first)
        self.ticks0 = machine_ticks()

    def run(self) -> None:
        nxt = time.monotonic() + self.status_every
        while not self.stop.is_set():
            self.sample()
            if time.monotonic() >= nxt and self.db.exists():
                t = time.monotonic()
                proc = subprocess.Popen([sys.executable, "-m", "resel.cli", "status", "--db", str(self.db), "--json"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE.parent)
                _, code, usage = os.wait4(proc.pid, 0)      # its own CPU: what it did against what it waited
                proc.returncode = os.waitstatus_to_exitcode(code)
                self.status.append((t, time.monotonic() - t, proc.returncode, usage.ru_utime + usage.ru_stime))
                nxt = time.monotonic() + self.status_every
            self.stop.wait(0.5)
        self.ticks1 = machine_ticks()

    def sample(self) -> None:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            self.cpu = (int(fields[11]) + int(fields[12])) / TICK
            main = Path(f"/proc/{self.pid}/task/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            self.main_cpu = (int(main[11]) + int(main[12])) / TICK
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.hwm_kb = max(self.hwm_kb, int(line.split()[1]))
        except (OSError, IndexError, ValueError):
            pass
        self.loads.append(os.getloadavg()[0])
        self.last.update(census())

    def cpu_census(self) -> dict:
        """CPU seconds burnt during the run: the machine's (/proc/stat, everything but the
        hypervisor's ``steal_s``), and each class's as sampled; what ended between two samples
        (each task's own ``sh -c``, a short ``squeue``) is in the machine's figure only:
        ``unattributed``, of which the agents' reaped children are ``tasks``; and the seconds the
        :data:`QUEUED_KINDS` waited for a core (``run_queue_s``)."""
        total1, idle1, steal1 = self.ticks1
        steal = (steal1 - self.ticks0[2]) / TICK
        busy = ((total1 - self.ticks0[0]) - (idle1 - self.ticks0[1])) / TICK - steal
        wall = (total1 - self.ticks0[0]) / TICK
        by_kind: dict[str, float] = {}
        tasks = 0.0
        queued: dict[str, float] = {}
        for key, (kind, cpu, children, waited) in self.last.items():
            _, cpu0, children0, waited0 = self.first.get(key, (kind, 0.0, 0.0, 0.0))
            by_kind[kind] = by_kind.get(kind, 0.0) + cpu - cpu0
            if kind == "agents":    # what the agents reaped: their tasks, each too short to be sampled
                tasks += children - children0
            if kind in QUEUED_KINDS:
                queued[kind] = queued.get(kind, 0.0) + waited - waited0
        by_kind = {k: round(v, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])}
        rest = busy - sum(by_kind.values())
        return {"busy_cpu_s": busy, "cpu_s_available": wall, "busy_share": busy / wall if wall else None,
                "steal_s": steal,
                "by_kind": by_kind, "unattributed": rest, "tasks": round(tasks, 2),
                "unattributed_besides_tasks": rest - tasks,
                "run_queue_s": {k: round(v, 2) for k, v in queued.items()}}


def python_pid(root_pid: int) -> int:
    """The coordinator's pid: ``root_pid`` itself, or its python descendant under strace."""
    for _ in range(100):
        try:
            children = Path(f"/proc/{root_pid}/task/{root_pid}/children").read_text().split()
        except OSError:
            return root_pid
        if children:
            return int(children[0])
        time.sleep(0.05)
    return root_pid


def run_once(tb, args, root: Path) -> dict:
    from live_helpers import bag_toml
    from soak_audit import audit_run
    from soak_crash import sites_text, soak_sites

    tag = f"scale-{os.getpid()}"
    sites = soak_sites(tb, args.sites, tag)
    (root / "sites.toml").write_text(sites_text(tb, sites))
    (root / "bag.toml").write_text(bag_toml(args.tasks, args.command, instructions=1e6, name="scale"))
    db = root / "scale.db"
    out = root / "child.json"
    argv = ["run", str(root / "bag.toml"), "--sites", str(root / "sites.toml"), "--db", str(db),
            "--strategy", args.strategy or f"topk:{len(sites)}+reselect", "--poll", f"{args.poll:g}", "--json",
            "--progress" if args.progress else "--no-progress"]
    if args.prefetch is not None:
        argv += ["--prefetch", args.prefetch]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), args.profile or "", "--", *argv]
    if args.strace:
        cmd = ["strace", "-f", "-c", "-o", str(root / "strace.txt"), "-e",
               "trace=fsync,fdatasync,execve,rename,renameat,renameat2", *cmd]
    env = dict(os.environ)
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    wall0 = time.time()
    with open(root / "run.out", "wb") as so, open(root / "run.err", "wb") as se:
        proc = subprocess.Popen(cmd, cwd=HERE.parent, stdout=so, stderr=se, env=env)
    pid = python_pid(proc.pid) if args.strace else proc.pid
    sampler = Sampler(pid, db, args.status_every)
    sampler.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        sampler.stop.set()
        sampler.join()
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - t0
    load1 = os.getloadavg()[0]
    if proc.returncode != 0:
        keys = [r[0] for r in sqlite3.connect(db).execute("select run_key from runs")] if db.exists() else []
        for key in keys:
            cleanup(tb, root, sites, key, keep=True)
        raise SystemExit(f"resel run exited {proc.returncode} (files kept in {root}):\n"
                         f"{(root / 'run.err').read_text(errors='replace')[-3000:]}")
    inside = json.loads(out.read_text())
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    run = dict(con.execute("select * from runs order by id desc limit 1").fetchone())
    ends = sorted(r[0] for r in con.execute(
        "select end from attempts where run_id = ? and outcome = 'done' and end is not null", [run["id"]]))
    first_dispatch = con.execute("select min(time) from events where run_id = ? and kind = 'DispatchTask'",
                                 [run["id"]]).fetchone()[0]
    per_site = {r[0]: {"done": r[1], "first_start": r[2] - run["t0"], "last_end": r[3] - run["t0"],
                       "per_s": r[1] / (r[3] - r[2]) if r[3] > r[2] else None}
                for r in con.execute("select site, count(*), min(start), max(end) from attempts where run_id = ? "
                                     "and outcome = 'done' group by site", [run["id"]])}
    lags = latencies(con, run)
    kinds = {r[0]: r[1] for r in con.execute("select kind, count(*) from events where run_id = ? group by kind",
                                             [run["id"]])}
    tables = {}
    for table in ("events", "attempts", "tasks", "live_pilots", "runs"):
        try:
            tables[table] = con.execute(f"select count(*) from {table}").fetchone()[0]
        except sqlite3.OperationalError:
            pass
    try:
        per_table = {r[0]: r[1] for r in con.execute(
            "select name, sum(pgsize) from dbstat group by name order by 2 desc limit 8")}
    except sqlite3.OperationalError:
        per_table = {}
    con.close()
    wal = root / "scale.db-wal"
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    with sqlite3.connect(db) as rw:          # the store at rest: its write-ahead log folded back
        rw.execute("pragma wal_checkpoint(truncate)")
    store_bytes = db.stat().st_size
    audit = audit_run(db, run["id"], {s.name: s.host_dir for s in sites})
    files = agent_files(sites, run["run_key"])
    doc = {"tasks": args.tasks, "sites": args.sites, "poll": args.poll, "prefetch": args.prefetch, "progress": args.progress,
           "strategy": args.strategy or f"topk:{len(sites)}+reselect", "status": run["status"], "done": run["done"],
           "elapsed": elapsed, "t0_to_first_dispatch": first_dispatch, "per_site": per_site, "latency": lags,
           "load_start": load0, "load_end": load1,
           "load_mean": statistics.fmean(sampler.loads) if sampler.loads else None,
           **rates(ends, args.window, args.tasks, elapsed),
           "cpu_own": sampler.cpu, "cpu_main_thread": sampler.main_cpu,
           "cpu_with_children": usage.ru_utime + usage.ru_stime,
           "thread_cpu": inside["thread_cpu"], "machine_cpu": sampler.cpu_census(),
           "peak_rss_mb": (sampler.hwm_kb or usage.ru_maxrss) / 1024,
           "store_bytes": store_bytes, "store_bytes_per_task": store_bytes / args.tasks, "wal_bytes_at_exit": wal_bytes,
           "store_tables": tables, "store_table_bytes": per_table, "journal_rows": kinds,
           "counts": inside["counts"], "sql": inside["sql"], "turns": inside.get("turns"), "gc": inside.get("gc"),
           **poll_figures(inside["jobs"], inside["began"]),
           **status_figures(sampler.status),
           "agent_files": files,
           "exactly_once": {"lost": audit.lost, "results_lost": audit.results_lost,
                            "concurrent": audit.concurrent, "duplicates": audit.duplicates,
                            "attempts_started": audit.attempts_started, "problems": audit.problems[:10]},
           "wall_start": wall0}
    if args.strace:
        doc["strace"] = strace_counts(root / "strace.txt")
    cleanup(tb, root, sites, run["run_key"], keep=args.keep)
    return doc


def rates(ends: list[float], window: float, n: int, elapsed: float) -> dict:
    """Completions per second: per ``window`` from the first end to the last (median of the
    full windows: sustained), and the bag over the coordinator's life (overall)."""
    if not ends:
        return {"sustained": None, "overall": None, "windows": []}
    first, last = ends[0], ends[-1]
    buckets = [0] * (int((last - first) // window) + 1)
    for e in ends:
        buckets[int((e - first) // window)] += 1
    full = buckets[:-1] if len(buckets) > 1 else buckets
    per_s = [b / window for b in buckets]
    return {"sustained": statistics.median(b / window for b in full), "peak_window": max(per_s),
            "overall": n / elapsed, "over_span": n / (last - first) if last > first else None,
            "windows": per_s, "completion_span": last - first}


def latencies(con, run: dict) -> dict:
    """Per site, medians (s): the coordinator's dispatch -> the agent's start (includes the
    wait of a task handed ahead for its slot), the run time, the agent's end -> the journal's
    TaskFinished (the coordinator saw it), and the agent's start -> the TaskStarted row."""
    t0, rid = run["t0"], run["id"]
    sent = {(r[0], r[1]): r[2] for r in con.execute(
        "select json_extract(data, '$.task'), json_extract(data, '$.attempt'), time from events "
        "where run_id = ? and kind = 'DispatchTask'", [rid])}
    seen = {(r[0], r[1]): r[2] for r in con.execute(
        "select json_extract(data, '$.task'), json_extract(data, '$.attempt'), time from events "
        "where run_id = ? and kind = 'TaskFinished'", [rid])}
    out: dict[str, dict[str, list]] = {}
    for task, attempt, site, start, end in con.execute(
            "select task, attempt, site, start, end from attempts where run_id = ? and outcome = 'done'", [rid]):
        d = out.setdefault(site, {"dispatch_to_start": [], "run": [], "end_to_seen": []})
        if (task, attempt) in sent and start is not None:
            d["dispatch_to_start"].append(start - t0 - sent[(task, attempt)])
        if start is not None and end is not None:
            d["run"].append(end - start)
        if (task, attempt) in seen and end is not None:
            d["end_to_seen"].append(t0 + seen[(task, attempt)] - end)
    return {site: {k: _q(v, 0.5) for k, v in d.items()} for site, d in out.items()}


def _q(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def poll_figures(jobs: list, began: float) -> dict:
    """Per site: the scheduler's poll and the file read (seconds on the worker), the read's wait
    behind the worker's queue, the period between two reads; the cycle is the slowest site's."""
    per: dict[str, dict] = {}
    by_site: dict[str, dict[str, list]] = {}
    for site, role, kind, submitted, started, seconds, *listings in jobs:
        by_site.setdefault(site, {}).setdefault(kind, []).append((submitted, started, seconds, sum(listings)))
    for site, kinds in by_site.items():
        polls = [s for _, _, s, _ in kinds.get("poll", [])]
        reads = kinds.get("read", [])
        read_s = [s for _, _, s, _ in reads]
        listed = [s for _, _, s, n in reads if n]
        waits = [b - a for a, b, _, _ in reads]
        starts = sorted(b for _, b, _, _ in reads)
        periods = [b - a for a, b in zip(starts, starts[1:])]
        late = read_s[-max(1, len(read_s) // 10):]
        per[site] = {"polls": len(polls), "poll_p50": _q(polls, 0.5), "poll_p95": _q(polls, 0.95),
                     "poll_max": max(polls, default=None),
                     "reads": len(read_s), "read_p50": _q(read_s, 0.5), "read_p95": _q(read_s, 0.95),
                     "read_max": max(read_s, default=None), "read_last_tenth_p50": _q(late, 0.5),
                     # reads that listed a pilot's folders (a pool's backstop, a new incarnation, a
                     # whole read) against the others: what a listing costs the cycle
                     "reads_listing": len(listed), "read_listing_p50": _q(listed, 0.5),
                     "read_listing_max": max(listed, default=None),
                     "read_plain_max": max((s for _, _, s, n in reads if not n), default=None),
                     "read_wait_p50": _q(waits, 0.5), "read_wait_p95": _q(waits, 0.95),
                     "read_period_p50": _q(periods, 0.5), "read_period_p95": _q(periods, 0.95),
                     "jobs": {k: len(v) for k, v in kinds.items()},
                     "job_seconds": {k: sum(s for _, _, s, _ in v) for k, v in kinds.items()}}

    def cycle(key: str) -> float | None:
        values = [max(v.get(f"poll_{key}") or 0.0, v.get(f"read_{key}") or 0.0) for v in per.values()]
        return max(values) if values else None
    return {"poll_sites": per, "poll_cycle_p50": cycle("p50"), "poll_cycle_p95": cycle("p95"),
            "poll_cycle_max": cycle("max")}


def status_figures(samples: list[tuple[float, float, int, float]]) -> dict:
    """``resel status``'s wall times, and its own CPU beside them: a sample whose wall time is
    far above its CPU time waited (for a core, or for the store), one close to it worked."""
    secs = [s for _, s, _, _ in samples]
    cpus = [c for *_, c in samples]
    return {"status_series": [(round(t - samples[0][0], 1), round(s, 3), round(c, 3)) for t, s, _, c in samples],
            "status_samples": len(secs), "status_p50": _q(secs, 0.5), "status_max": max(secs, default=None),
            "status_cpu_p50": _q(cpus, 0.5), "status_cpu_max": max(cpus, default=None),
            "status_failed": sum(1 for _, _, rc, _ in samples if rc != 0)}


def agent_files(sites, run_key: str) -> dict:
    """Files the agents left per kind (inbox, claimed, started, results, task folders), and the
    records in started/ and results/ (since agent protocol 6 a file there is a wave of records)."""
    from resel.shipped.agent import folder_records
    out: dict[str, int] = {}
    for s in sites:
        for pdir in Path(s.host_dir, run_key).glob("p*"):
            for sub in ("inbox", "claimed", "started", "results", "tasks", "cancel"):
                d = pdir / sub
                if d.is_dir():
                    out[sub] = out.get(sub, 0) + sum(1 for _ in d.iterdir())
                if sub in ("started", "results"):
                    out[f"{sub}_records"] = out.get(f"{sub}_records", 0) + len(folder_records(str(d), own_only=False))
    return out


def strace_counts(path: Path) -> dict:
    out = {}
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[-1] in ("fsync", "fdatasync", "execve", "rename", "renameat", "renameat2"):
                out[parts[-1]] = int(parts[3])
    except OSError:
        pass
    return out


def cleanup(tb, root: Path, sites, run_key: str, *, keep: bool) -> None:
    from live_helpers import cancel_leftovers
    from soak_faults import access_point
    cancel_leftovers(tb, root)
    if tb.has_trixie:
        access_point(tb, f"condor_rm -constraint 'regexp(\"^resel-{run_key}-\", JobBatchName)' >/dev/null 2>&1; "
                         f"squeue -h -o '%i %j' | awk '$2 ~ /^resel-{run_key}-/ {{print $1}}' | xargs -r scancel")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
        for s in sites:
            shutil.rmtree(s.host_dir, ignore_errors=True)


# ---------------------------------------------------------------------------- the table
def fmt(v, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def machine_rows(m: dict | None, n: int) -> list[tuple[str, str, str]]:
    """The census's rows: how busy the machine was, and its CPU per task by who burnt it."""
    if not m:
        return []
    parts = ", ".join(f"{k} {1000 * v / n:.2f}" for k, v in m["by_kind"].items() if v >= 0.005 * n / 1000)
    rows = [("machine CPU busy: s / share of all its cores over the run"
             + (" / taken by the hypervisor (steal), s" if "steal_s" in m else ""),
             f"{m['busy_cpu_s']:.1f} / {100 * m['busy_share']:.0f} %"
             + (f" / {m['steal_s']:.1f}" if "steal_s" in m else ""), ""),
            ("machine CPU ms per task: all / by who (ended between samples: unattributed)",
             f"{1000 * m['busy_cpu_s'] / n:.2f} / {parts}, unattributed {1000 * m['unattributed'] / n:.2f}", "")]
    if "tasks" in m:
        rows.append(("of the unattributed: the tasks' own processes (reaped by the agents) / the rest",
                     f"{1000 * m['tasks'] / n:.2f} / {1000 * m['unattributed_besides_tasks'] / n:.2f}", ""))
    if m.get("run_queue_s"):
        rows.append(("ms per task waiting for a core (runnable, on a run queue): "
                     + " / ".join(m["run_queue_s"]),
                     " / ".join(f"{1000 * v / n:.2f}" for v in m["run_queue_s"].values()), ""))
    return rows


def print_table(doc: dict) -> None:
    n = doc["tasks"]
    c, sql = doc["counts"], doc["sql"]
    per = lambda v: fmt((v or 0) / n, ".2f")        # noqa: E731
    rows = [
        ("bag", f"{n:,} x `true` on {', '.join(doc['sites'])}, {doc['strategy']}, --poll {doc['poll']:g}"
                + (", --progress" if doc.get("progress") else "")
                + (f", prefetch {doc['prefetch']}" if doc.get("prefetch") is not None else ""), ""),
        ("load average 1 min: start / mean / end", f"{doc['load_start']:.2f} / {fmt(doc['load_mean'])} / "
                                                    f"{doc['load_end']:.2f}", ""),
        ("coordinator launch -> exit (s)", fmt(doc["elapsed"], ".1f"), ""),
        ("completed tasks/s, sustained (median 10-s window)", fmt(doc["sustained"], ".1f"), ">= 500"),
        ("completed tasks/s, best window / over the completions / overall",
         f"{fmt(doc.get('peak_window'), '.1f')} / {fmt(doc.get('over_span'), '.1f')} / {fmt(doc['overall'], '.1f')}", ""),
        ("coordinator CPU s: own (main thread) / with its subprocesses",
         f"{doc['cpu_own']:.1f} ({doc['cpu_main_thread']:.1f}) / {doc['cpu_with_children']:.1f}", ""),
        ("coordinator CPU ms per task (own)", fmt(1000 * doc["cpu_own"] / n, ".2f"), "<= 2 for 500/s"),
        ("coordinator peak RSS (MB)", fmt(doc["peak_rss_mb"], ".0f"), "<= 1024"),
        *machine_rows(doc.get("machine_cpu"), n),
        ("store bytes per task (at rest; the WAL at exit, bytes)", f"{fmt(doc['store_bytes_per_task'], '.0f')} "
                                                                   f"({doc.get('wal_bytes_at_exit', '—')})", "<= 2048"),
        ("poll cycle p50 / p95 / max (s)", f"{fmt(doc['poll_cycle_p50'], '.3f')} / {fmt(doc['poll_cycle_p95'], '.3f')}"
                                           f" / {fmt(doc['poll_cycle_max'], '.3f')}", "<= 0.3"),
        ("`resel status` p50 / max (s), samples", f"{fmt(doc['status_p50'], '.2f')} / {fmt(doc['status_max'], '.2f')}"
                                                  f", {doc['status_samples']} ({doc['status_failed']} failed)", "<= 1"),
        ("`resel status`'s own CPU p50 / max (s)", f"{fmt(doc.get('status_cpu_p50'), '.2f')} / "
                                                   f"{fmt(doc.get('status_cpu_max'), '.2f')}", ""),
        ("per task: inbox files written (dispatch) / their batches",   # (runs before the batches: dispatch)
         f"{per(c.get('site.inbox_file', c.get('site.dispatch')))} / {per(c.get('site.dispatch_many'))}", ""),
        ("per task: agent files read (read_file: waves or per-key records, heartbeats)",
         per(c.get("LocalTransport.read_file", 0) + c.get("SSHTransport.read_file", 0)), ""),
        ("per task: stats (a wave's owner check; one per folder finds the end)",
         per(c.get("LocalTransport.stat", 0) + c.get("SSHTransport.stat", 0)), ""),
        ("per task: directory listings (entries)",
         per(c.get("LocalTransport.entries", 0) + c.get("SSHTransport.entries", 0)), ""),
        ("per task: scheduler polls", per(c.get("site.pilot_jobs")), ""),
        ("per task: journal rows / store statements written / commits",
         f"{per(sum(doc['journal_rows'].values()))} / "
         f"{per(sum(v for k, v in sql.items() if k.split()[0] in ('INSERT', 'UPDATE', 'REPLACE') and ' ' in k))}"
         f" / {per(sql.get('COMMIT'))}" + (f" ({per(sql.get('COMMIT writing'))} that wrote)"
                                            if "COMMIT writing" in sql else ""), ""),
        ("main thread busy in the loop's turns (less their waits): ms per task / turns",
         f"{fmt(1000 * (doc['turns']['step_s'] - doc['turns']['wait_s']) / n, '.2f')} / {doc['turns']['steps']}"
         if doc.get("turns") else "—", ""),
        ("commits per turn (that wrote)", f"{fmt((sql.get('COMMIT') or 0) / doc['turns']['steps'])} "
         f"({fmt((sql.get('COMMIT writing') or 0) / doc['turns']['steps'])})" if doc.get("turns") else "—", ""),
        ("exactly once: lost / results lost / twice at once / duplicates",
         "{lost} / {results_lost} / {concurrent} / {duplicates}".format(**doc["exactly_once"]), "0 / 0 / 0 / -"),
    ]
    if "strace" in doc:
        rows.append(("per task (strace): fsync+fdatasync / execve",
                     f"{per(doc['strace'].get('fsync', 0) + doc['strace'].get('fdatasync', 0))} / "
                     f"{per(doc['strace'].get('execve'))}", ""))
    print("| measure | value | goal |\n|---|---|---|")
    for label, value, goal in rows:
        print(f"| {label} | {value} | {goal} |")
    print("\n| site | polls | poll p50/p95 s | reads | read p50/p95 s (last tenth p50) | read waits p50/p95 s | "
          "read period p50/p95 s |\n|---|---|---|---|---|---|---|")
    for site, v in sorted(doc["poll_sites"].items()):
        print(f"| {site} | {v['polls']} | {fmt(v['poll_p50'], '.3f')}/{fmt(v['poll_p95'], '.3f')} | {v['reads']} | "
              f"{fmt(v['read_p50'], '.3f')}/{fmt(v['read_p95'], '.3f')} ({fmt(v['read_last_tenth_p50'], '.3f')}) | "
              f"{fmt(v['read_wait_p50'], '.3f')}/{fmt(v['read_wait_p95'], '.3f')} | "
              f"{fmt(v['read_period_p50'], '.3f')}/{fmt(v['read_period_p95'], '.3f')} |")
    print("\n| site | tasks done | first start -> last end (s, from the run's t0) | tasks/s over that span | "
          "dispatch -> start p50 (s) | run p50 (s) | end -> coordinator saw it p50 (s) |\n|---|---|---|---|---|---|---|")
    for site, v in sorted(doc["per_site"].items()):
        lag = doc.get("latency", {}).get(site, {})
        print(f"| {site} | {v['done']} | {v['first_start']:.1f} -> {v['last_end']:.1f} | {fmt(v['per_s'], '.1f')} | "
              f"{fmt(lag.get('dispatch_to_start'), '.3f')} | {fmt(lag.get('run'), '.3f')} | "
              f"{fmt(lag.get('end_to_seen'), '.3f')} |")
    print(f"\njournal rows by kind: {json.dumps(doc['journal_rows'])}")
    print(f"store tables (rows): {json.dumps(doc['store_tables'])}; bytes: {json.dumps(doc['store_table_bytes'])}")
    print(f"thread CPU (s): {json.dumps({k: round(v, 2) for k, v in doc['thread_cpu'].items() if v >= 0.05})}")
    print(f"agent files left: {json.dumps(doc['agent_files'])}")
    if doc["exactly_once"]["problems"]:
        print("PROBLEMS:\n  " + "\n  ".join(doc["exactly_once"]["problems"]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sep = sys.argv.index("--")
        child(sys.argv[2], sys.argv[3], sys.argv[sep + 1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1000, help="tasks in the bag (default 1000)")
    ap.add_argument("--sites", default=None, help="comma-separated, of tba,tbb,tbc,pool (default: all four)")
    ap.add_argument("--command", default="true", help="each task's command (default: true)")
    ap.add_argument("--poll", type=float, default=0.5, help="the coordinator's --poll (default 0.5)")
    ap.add_argument("--strategy", default=None, help="--strategy (default topk:N+reselect, N the sites)")
    ap.add_argument("--prefetch", default=None,
                    help="resel run --prefetch: K tasks handed ahead per slot, or auto (default: the CLI's, auto)")
    ap.add_argument("--window", type=float, default=10.0, help="seconds per throughput window (default 10)")
    ap.add_argument("--status-every", type=float, default=5.0, help="run `resel status` this often (default 5 s)")
    ap.add_argument("--profile", default=None, help="write the coordinator's cProfile (main thread) here")
    ap.add_argument("--strace", action="store_true", help="count fsync/fdatasync/execve/rename with strace -f -c")
    ap.add_argument("--progress", action="store_true",
                    help="run with the live table a user at a terminal sees (resel run --progress; default: without)")
    ap.add_argument("--keep", action="store_true", help="keep the store and the work directories")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    ap.add_argument("--show", default=None, help="print the table of a run saved with --json, and exit")
    args = ap.parse_args()
    if args.show:
        print_table(json.loads(Path(args.show).read_text()))
        return
    if args.tasks < 1 or not args.poll > 0 or not args.window > 0:
        ap.error("--tasks must be at least 1, --poll and --window positive")
    if args.profile:
        args.profile = str(Path(args.profile).resolve())
    from testbed import load
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    args.sites = args.sites.split(",") if args.sites else (["tba", "tbb", "tbc", "pool"] if tb.has_trixie
                                                           else ["tba", "tbb"])
    root = Path(tempfile.mkdtemp(prefix="resel-scale-"))
    doc = run_once(tb, args, root)
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print_table(doc)


if __name__ == "__main__":
    main()
