"""Benchmark: trace replay throughput (jobs/s) of resel vs AccaSim 1.1.3, in-process and as whole
processes, and its memory.

Goals (issue 15): on hpc2n.swf and wagap-2013.swf, resel's replay reaches at least 50x
AccaSim's throughput in-process on the same trace and policy -- FCFS vs AccaSim's FIFO (the
schedules must be identical) and textbook EASY vs AccaSim's EASY (which is not textbook EASY;
see accasim_runner.py); ``resel replay`` as a whole process (the command a user types:
start-up, imports, reading, replaying, printing) at least 20x AccaSim's whole process on
wagap-2013.swf and 8x on hpc2n.swf; conservative backfilling >= 50,000 jobs/s in-process and
>= 10,000 jobs/s as a whole process on wagap; memory flat in the trace length (the trace is
streamed). (Issue 3's goals were 20x in-process and 5,000 jobs/s.)

``--baseline PYTHON`` measures a second installation of resel (e.g. a virtual environment of
the previous version) in the same run, interleaved with everything else, so a before/after
table comes from one run on one machine: its in-process children run this script under that
interpreter, its whole processes the ``resel`` command beside it.

What is measured, each in a fresh child process, ``--repeat`` times interleaved (every case
once, then every case again, ...), medians reported:

* resel: ``replay(read_swf(trace), policy, cores)`` for fcfs, easy, easy-sjbf and
  conservative. The timer covers reading and parsing the trace *and* replaying it (the
  trace is streamed, so the two are interleaved anyway), as AccaSim's ``start_simulation()``
  also parses its workload lazily. Python start-up and imports are not timed. A trace given
  to ``replay`` as it is, unfiltered, is read by its fast reader (``Trace.replay_rows``: no
  per-job ``Job`` record, 18 fields converted a block of lines at a time); a prefix
  (``trace[:N]`` rows, the memory prefixes) is first copied to a file, untimed, so that it
  is read the same way.
* AccaSim: ``benchmarks/accasim_runner.py`` (fifo and easy), its ``wall_s`` /
  ``jobs_per_s``. Its own untimed preprocessing (writing an 18-field copy of the trace)
  and the simulator's construction are not in ``wall_s``.
* jobs/s = jobs replayed / wall time on both sides; jobs replayed = the jobs of the
  (prefix of the) trace minus those with unknown runtime or size or larger than the site --
  both sides drop the same ones, and the script checks that the counts agree.

Which jobs each ratio compares: by default both sides replay the whole traces (AccaSim takes
~5 s a run on wagap with the real node layout; ~35 s with 1-core nodes, where
``--accasim-first`` can limit it). A ratio always divides resel's and AccaSim's throughput on the *same*
job lines: where AccaSim saw a prefix, resel is timed separately on that prefix, and the
table labels such rows ``trace[:N]``. ``--accasim-first 0`` gives AccaSim the whole traces
(affordable with the default node size below: ~5 s a run on wagap). Beware that on its 2,176
cores no job of wagap's first 5,000 ever waits, so on that prefix every policy's schedule is
"start at submit" and the ratio measures event handling, not scheduling; the table counts
the jobs that waited and prints a note when none did.

AccaSim's machine (``--node-cores``): accasim_runner models the site as nodes of C cores;
C does not change the schedule (jobs are split into 1-core requests) but changes AccaSim's
speed a lot (FirstFit scans nodes: in one run here, FIFO on wagap's first 5,000 jobs did
~540 jobs/s with C = 1 and ~7,000 jobs/s with C = 64). By default C = cores / nodes of the trace's
``.machines`` file, i.e. AccaSim gets as many nodes as the real machine had (hpc2n 120 x 2,
wagap 68 x 32), not an artificially slow 1-core-per-node machine; 1 where there is no
``.machines`` file. The table prints C. ``--node-cores 1`` reproduces accasim_runner's
default.

FCFS schedule check: once (untimed), resel's FCFS start times are compared job by job with
AccaSim FIFO's, and resel's EASY with AccaSim's EASY (these are expected to differ: AccaSim's
EASY never enforces its reservation). The FCFS goal only passes if the schedules match. The
start times are those of the timed code: FCFS and EASY of a whole trace run in the kernels of
resel/sim/closed.py (``kernel_schedule``), which the check also compares job by job with
BatchQueue's schedule ("kernel = BatchQueue n/N").

Memory: "peak MB" is the child's peak resident set size (``ru_maxrss`` from ``wait4``), i.e.
the whole process: interpreter, imports and replay. That is what a user pays, it costs
nothing to measure in the timed run itself, and it is measured the same way for AccaSim.
(Linux folds the RSS of the parent image a child was forked from into the child's
ru_maxrss, so the parent never imports resel and stays far below the children; the printed
"parent RSS" is that floor.) RSS is dominated by the ~40 MB of interpreter and imports and is
coarse (allocator arenas), so to show that the replay's own memory is flat in the trace
length, conservative is also run on the first 25 % / 50 % / 100 % of wagap and printed with
(a) peak RSS, (b) growth = the child's VmHWM after read+replay minus after its imports, and
(c) the tracemalloc peak of the Python heap during read+replay and what is still held at
the end, split into JobStats' per-job metric arrays and the rest -- measured in a separate
untimed child (tracemalloc slows allocation several-fold, so it is never mixed with the
timings), once per prefix since the replay is deterministic.

Noise: the timings are wall clock, as AccaSim's. On a busy machine both sides slow down;
interleaving keeps the ratios comparable, but absolute jobs/s (the conservative goal) drop.
The header prints the load average, and a warning appears when resel's runs got less than
90 % of a CPU (CPU time / wall time, recorded in the JSON as ``cpu_s``).

Traces: ``hpc2n.swf`` (cores from the header's MaxProcs) and ``wagap-2013.swf`` (no header:
cores from its ``.machines`` file, 2,176), in ``<repo>/../shared/data/swf`` or ``--traces``.
If accasim is not importable, only resel's numbers are printed (exit status 0).

Whole processes are timed from outside (``time.perf_counter`` around the child, start to
exit): ``resel replay TRACE --policy P`` for resel, ``accasim_runner.py`` for AccaSim (its
start-up, preprocessing, simulation and output). resel's command is timed in each form a user
types it (:data:`FORMS`): ``--json``, the table (no option), ``--output FILE`` (the schedule
written) and ``--status 0,1``, every one of them held to the whole-process goals (issue 28:
the table once cost a third more than ``--json``, ``--output`` 3.4 times as much); the cores
are not given, as the command reads them from the header or TRACE.machines. The start-up
floor, ``resel replay --help``, is printed with them.

Run:  python benchmarks/bench_replay.py [--repeat 3] [--accasim-first N] [--node-cores C] [--baseline PYTHON] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
RUNNER = HERE.parent / "accasim_runner.py"
DEFAULT_TRACES = HERE.parents[2] / "shared" / "data" / "swf"
TRACES = ("hpc2n.swf", "wagap-2013.swf")
POLICIES = ("fcfs", "easy", "easy-sjbf", "conservative")
ACCASIM_POLICY = {"fcfs": "fifo", "easy": "easy"}           # resel policy -> AccaSim dispatcher
DEFAULT_ACCASIM_FIRST: dict[str, int | None] = {name: None for name in ("hpc2n.swf", "wagap-2013.swf")}   # whole traces
SCALING_TRACE, SCALING_POLICY, SCALING_FRACTIONS = "wagap-2013.swf", "conservative", (0.25, 0.5, 1.0)
GOAL_RATIO, GOAL_CONSERVATIVE = 50.0, 50_000.0          # in-process (issue 15)
#: whole process: resel replay's wall time against AccaSim's whole run, per trace; conservative jobs/s
GOAL_WHOLE = {"hpc2n.swf": 8.0, "wagap-2013.swf": 20.0}
GOAL_CONSERVATIVE_WHOLE, GOAL_WHOLE_TRACE = 10_000.0, "wagap-2013.swf"


# ------------------------------------------------------------------ child side


def hwm_mb() -> float:
    """This process's own peak RSS in MB: VmHWM, which exec resets (ru_maxrss does not, see
    run_child), else ru_maxrss."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _jobs(trace: str, first_n: int):
    from resel.sim.swf import first, read_swf
    jobs = read_swf(trace)
    return first(jobs, first_n) if first_n else jobs


def one(trace: str, policy: str, cores: int, first_n: int) -> dict:
    """Time read+replay of ``trace`` (its first ``first_n`` jobs; 0 = all) in this process."""
    from resel.sim.replay import replay
    base_mb = hwm_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    result = replay(_jobs(trace, first_n), policy, cores)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    jobs = len(result.stats.wait)
    return {"jobs": jobs, "skipped": result.skipped_too_large + result.skipped_unknown,
            "events": result.events, "wall_s": wall, "cpu_s": cpu, "jobs_per_s": jobs / wall,
            "base_mb": base_mb, "self_peak_mb": hwm_mb()}


def traced(trace: str, policy: str, cores: int, first_n: int) -> dict:
    """Peak Python heap (tracemalloc) of read+replay; untimed."""
    import tracemalloc
    from resel.sim.replay import replay
    tracemalloc.start()
    result = replay(_jobs(trace, first_n), policy, cores)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the per-job arrays themselves (replay appends to them inline, so tracemalloc's
    # attribution by file would not find them in jobstats.py)
    stats_bytes = sum(sys.getsizeof(a) for a in (result.stats.wait, result.stats.run))
    return {"jobs": len(result.stats.wait), "traced_peak_mb": peak / 2**20,
            "retained_mb": current / 2**20, "retained_jobstats_mb": stats_bytes / 2**20}


def check(trace: str, policy: str, cores: int, first_n: int, accasim_json: str) -> dict:
    """Compare resel's start times, job by job (SWF job id), with those AccaSim wrote to
    ``accasim_json``; also count the jobs that waited at all (with no queueing every policy
    gives the same schedule). Done in a child so the parent never holds the start times.

    The start times compared are those of the code that is timed: for fcfs and easy, the
    kernel's (``kernel_schedule``, the path ``replay(read_swf(trace))`` takes); they are also
    compared with BatchQueue's (``on_done``, every policy's path), ``kernel_same`` of
    ``kernel_jobs``. A version without kernels compares BatchQueue's."""
    from resel.sim.replay import replay
    from resel.sim.swf import read_swf
    queue: dict[str, float] = {}

    def done(job) -> None:
        queue[str(job.id)] = job.submit + job.wait
    result = replay(_jobs(trace, first_n), policy, cores, on_done=done)
    mine, kernel = queue, {}
    try:
        from resel.sim.replay import kernel_schedule
    except ImportError:         # a version before the kernels
        kernel_schedule = None
    if kernel_schedule is not None and policy in ("fcfs", "easy"):
        kernel = {str(k): v for k, v in kernel_schedule(read_swf(trace), policy, cores).items()}
        if first_n:
            kernel = {k: v for k, v in kernel.items() if k in queue}
        mine = kernel
    with open(accasim_json) as fh:
        theirs = json.load(fh)["starts"]
    keys = mine.keys() | theirs.keys()
    same = sum(1 for k in keys if k in mine and k in theirs and mine[k] == theirs[k])
    return {"same_starts": same, "jobs": len(keys), "waited": sum(1 for w in result.stats.wait if w > 0),
            "kernel_same": sum(1 for k, v in kernel.items() if queue.get(k) == v),
            "kernel_jobs": len(kernel.keys() | queue.keys()) if kernel else 0}


# ------------------------------------------------------------------ parent side

#: wall time of the latest child, start to exit, measured from outside (the whole process),
#: and the CPU time (user + system) the kernel accounted to it
LAST_WHOLE_S = LAST_WHOLE_CPU = 0.0


def run_child(argv: list[str], tmp: str) -> tuple[str, float]:
    """Run a child to completion; its stdout and its peak RSS in MB (ru_maxrss via wait4).

    Linux carries the high-water RSS of the pre-exec image (a copy of this parent) into the
    child's ru_maxrss, so the figure is max(child's peak, this process's RSS): the parent
    therefore never imports resel (~25 MB) and stays at ~15 MB, below every child's peak.
    """
    out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    global LAST_WHOLE_S, LAST_WHOLE_CPU
    with open(out_path, "w") as out, open(err_path, "w") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        LAST_WHOLE_S = time.perf_counter() - t0
        LAST_WHOLE_CPU = usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
    with open(out_path) as fh:
        stdout = fh.read()
    if proc.returncode != 0:
        with open(err_path) as fh:
            raise RuntimeError(f"child failed ({proc.returncode}): {' '.join(argv)}\n{fh.read()}")
    return stdout, usage.ru_maxrss / 1024


def self_cmd(mode: str, trace: Path, policy: str, cores: int, first_n: int | None,
             python: str | None = None) -> list[str]:
    return [python or sys.executable, str(HERE), mode, str(trace), policy, str(cores), str(first_n or 0)]


def resel_run(trace: Path, policy: str, cores: int, first_n: int | None, tmp: str, python: str | None = None) -> dict:
    stdout, peak = run_child(self_cmd("--one", trace, policy, cores, first_n, python), tmp)
    return {**json.loads(stdout), "peak_mb": peak}


def resel_cli(python: str) -> str:
    """The ``resel`` command installed beside an interpreter (a virtual environment's bin/)."""
    return str(Path(python).parent / "resel")


#: the forms of ``resel replay`` timed as whole processes: the options after ``--policy P`` (the
#: site's cores are not given: the command reads them from the header or TRACE.machines, as a
#: user types it). ``json`` is the form the goals were first measured on; the others are what a
#: person types: the table, the schedule written to a file, a status filter (issue 28)
FORMS = {"json": ["--json"], "table": [], "output": ["--output", "{tmp}/schedule.swf"], "status": ["--status", "0,1"]}


def cli_run(trace: Path, policy: str, cores: int, tmp: str, python: str | None = None, form: str = "json") -> dict:
    """``resel replay TRACE --policy P`` in one of :data:`FORMS`, the command a user types, timed
    from outside: start-up, imports, reading, replaying and printing (or writing the schedule).
    The jobs replayed come from the JSON form, and the table's or the schedule file's are
    checked against a JSON run of the same options (untimed, by the caller's check_forms)."""
    argv = [resel_cli(python or sys.executable), "replay", str(trace), "--policy", policy,
            *(a.format(tmp=tmp) for a in FORMS[form])]
    if python is not None:      # a baseline: an older resel may not read TRACE.machines
        argv += ["--cores", str(cores)]
    stdout, peak = run_child(argv, tmp)
    out = {"whole_s": LAST_WHOLE_S, "whole_cpu_s": LAST_WHOLE_CPU, "peak_mb": peak, "form": form}
    if form == "json":
        doc = json.loads(stdout)
        if doc["cores"] != cores:
            raise RuntimeError(f"resel replay {trace} took {doc['cores']} cores, the benchmark's site has {cores}")
        out["jobs"] = doc["jobs"]
    elif form == "table":
        out["jobs"] = int(stdout.split(" jobs on ", 1)[0].rsplit(" ", 1)[1].replace(",", ""))
    elif form == "output":
        with open(os.path.join(tmp, "schedule.swf")) as fh:
            out["jobs"] = sum(1 for line in fh if line.strip() and not line.startswith(";"))
    else:
        out["jobs"] = int(stdout.split(" jobs on ", 1)[0].rsplit(" ", 1)[1].replace(",", ""))
    return out


def startup_run(tmp: str, python: str | None = None) -> dict:
    """``resel replay --help``: the start-up floor of the command (interpreter, imports)."""
    run_child([resel_cli(python or sys.executable), "replay", "--help"], tmp)
    return {"whole_s": LAST_WHOLE_S, "whole_cpu_s": LAST_WHOLE_CPU}


def accasim_run(trace: Path, policy: str, cores: int, first_n: int | None, node_cores: int, tmp: str) -> dict:
    """One accasim_runner.py child; its JSON without the start times (left in tmp/accasim.json)."""
    out = os.path.join(tmp, "accasim.json")
    argv = [sys.executable, str(RUNNER), str(trace), "--cores", str(cores), "--policy", policy,
            "--node-cores", str(node_cores), "--out", out]
    if first_n:
        argv += ["--first", str(first_n)]
    _, peak = run_child(argv, tmp)
    whole, whole_cpu = LAST_WHOLE_S, LAST_WHOLE_CPU   # AccaSim's whole process: start-up, preprocessing, simulation, output
    with open(out) as fh:
        text = fh.read()
    # parse only what precedes the start times (the runner writes them last), so that this
    # process stays small (see run_child); the whole document if that layout ever changes
    cut = text.find(', "starts": {')
    res = json.loads(text[:cut] + "}" if cut >= 0 else text)
    res.pop("starts", None)
    res["peak_mb"] = peak
    res["whole_s"], res["whole_cpu_s"] = whole, whole_cpu
    return res


def prefix_file(trace: Path, n: int | None, folder: str) -> Path:
    """The trace itself, or (n given) a copy of its header and first ``n`` job lines in
    ``folder``, written once and untimed: resel then reads every prefix from a file as it reads
    the whole trace, ``replay(read_swf(path))`` (a Trace given as it is goes through the
    replay's fast reader; ``first(read_swf(path), n)`` would not)."""
    if not n:
        return trace
    out = Path(folder) / f"{trace.stem}.first{n}{trace.suffix}"
    if not out.exists():
        with open(trace, encoding="utf-8", errors="replace") as src, open(out, "w", encoding="utf-8") as dst:
            for line in src:
                if line.strip() and not line.lstrip().startswith(";"):
                    if n == 0:
                        break
                    n -= 1
                dst.write(line)
    return out


def count_job_lines(path: Path) -> int:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return sum(1 for line in fh if line.strip() and not line.lstrip().startswith(";"))


def site_of(path: str) -> dict:
    """Cores from the header's MaxProcs, else the .machines file; nodes from that file.
    Run in a child, so that the parent does not import resel (see run_child)."""
    from resel.sim.swf import read_machines, read_swf
    machines_path = Path(str(path) + ".machines")
    machines = read_machines(machines_path) if machines_path.exists() else []
    cores = read_swf(path).header.max_procs or sum(m.cores for m in machines)
    return {"cores": cores, "nodes": sum(m.nodes for m in machines) or None}


def parse_first(text: str | None) -> dict[str, int | None]:
    """``N`` (every trace; 0 = whole) or ``trace=N,trace=N``; unnamed traces keep the default."""
    firsts = dict(DEFAULT_ACCASIM_FIRST)
    if text is None:
        return firsts
    for part in text.split(","):
        name, _, n = part.rpartition("=")
        if name:
            firsts[name] = int(n) or None
        else:
            firsts = {t: int(n) or None for t in TRACES}
    return firsts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help=f"trace directory (default {DEFAULT_TRACES})")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--accasim-first", default=None, metavar="N",
                    help="AccaSim (and the matching resel run) on the first N job lines: N for every trace "
                         "(0 = whole trace) or TRACE=N,... (default: whole traces)")
    ap.add_argument("--node-cores", type=int, default=None, metavar="C",
                    help="cores per AccaSim node (default: cores / nodes of the trace's .machines file)")
    ap.add_argument("--no-accasim", action="store_true", help="measure resel only")
    ap.add_argument("--baseline", metavar="PYTHON", default=None,
                    help="also measure the resel installed for this interpreter (e.g. a virtual environment of "
                         "the previous version), interleaved with the rest: a before/after table from one run")
    ap.add_argument("--json", action="store_true", help="print the raw measurements as JSON")
    for mode in ("--one", "--traced"):
        ap.add_argument(mode, nargs=4, metavar=("TRACE", "POLICY", "CORES", "FIRST"), help=argparse.SUPPRESS)
    ap.add_argument("--check", nargs=5, metavar=("TRACE", "POLICY", "CORES", "FIRST", "JSON"), help=argparse.SUPPRESS)
    ap.add_argument("--site", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.site:
        print(json.dumps(site_of(args.site)))
        return
    for mode, fn in (("one", one), ("traced", traced), ("check", check)):
        child = getattr(args, mode)
        if child:
            print(json.dumps(fn(child[0], child[1], int(child[2]), int(child[3]), *child[4:])))
            return
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    firsts = parse_first(args.accasim_first)
    traces = {name: args.traces / name for name in TRACES}
    for path in traces.values():
        if not path.exists():
            sys.exit(f"bench_replay: {path} not found (give the trace directory with --traces)")
    sites = {}
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:
        for name, path in traces.items():
            site = json.loads(run_child([sys.executable, str(HERE), "--site", str(path)], tmp)[0])
            if not site["cores"]:
                sys.exit(f"bench_replay: {path}: no MaxProcs in the header and no .machines file")
            sites[name] = (site["cores"], site["nodes"])
    lines = {name: count_job_lines(path) for name, path in traces.items()}
    for name in TRACES:     # a prefix at least as long as the trace is the whole trace
        if firsts.get(name) and firsts[name] >= lines[name]:
            firsts[name] = None
    node_cores = {}
    for name, (cores, nodes) in sites.items():
        c = args.node_cores or (cores // nodes if nodes and cores % nodes == 0 else 1)
        if cores % c:
            sys.exit(f"bench_replay: {name}: {cores} cores is not a multiple of --node-cores {c}")
        node_cores[name] = c

    have_accasim = not args.no_accasim and importlib.util.find_spec("accasim") is not None
    # cases: (kind, trace, policy, first job lines or None)
    cases: list[tuple[str, str, str, int | None]] = []
    for name in TRACES:
        cases += [("resel", name, p, None) for p in POLICIES]
        if have_accasim:
            if firsts.get(name):
                cases += [("resel", name, p, firsts[name]) for p in ACCASIM_POLICY]
            cases += [("accasim", name, p, firsts.get(name)) for p in ACCASIM_POLICY]
    scaling = [None if f == 1.0 else round(lines[SCALING_TRACE] * f) for f in SCALING_FRACTIONS]
    cases += [("resel", SCALING_TRACE, SCALING_POLICY, n) for n in scaling if n is not None]
    # whole processes: the command a user types, and the same for the baseline
    versions = [("", None)] + ([("base", args.baseline)] if args.baseline else [])
    for prefix, _ in versions:
        if prefix:
            cases += [(prefix, name, p, None) for name in TRACES for p in POLICIES]
        cases += [(prefix + "cli", name, p, None) for name in TRACES for p in POLICIES]
        cases += [(f"{prefix}cli:{form}", name, p, None) for name in TRACES for p in ACCASIM_POLICY
                  for form in FORMS if form != "json"]
        cases += [(prefix + "startup", "-", "-", None)]
    python_of = dict(versions)

    raw: dict[tuple, list[dict]] = {case: [] for case in cases}
    load_before = os.getloadavg()
    extra: dict = {"sites": {n: {"cores": sites[n][0], "nodes": sites[n][1], "job_lines": lines[n],
                                 "accasim_node_cores": node_cores[n]} for n in TRACES}}
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp, \
            tempfile.TemporaryDirectory(prefix="bench_replay_prefixes_") as prefixes:
        for rep in range(args.repeat):
            for case in cases:    # interleaved, so drift hits every case alike
                kind, name, policy, first_n = case
                cores = sites[name][0] if name in sites else 0
                if kind == "resel":
                    r = resel_run(prefix_file(traces[name], first_n, prefixes), policy, cores, None, tmp)
                elif kind == "base":
                    r = resel_run(traces[name], policy, cores, None, tmp, python_of["base"])
                elif kind.endswith("startup"):
                    r = startup_run(tmp, python_of[kind[:-len("startup")]])
                elif kind.endswith("cli"):
                    r = cli_run(traces[name], policy, sites[name][0], tmp, python_of[kind[:-len("cli")]])
                elif "cli:" in kind:
                    prefix, form = kind.split("cli:")
                    r = cli_run(traces[name], policy, sites[name][0], tmp, python_of[prefix], form)
                else:
                    r = accasim_run(traces[name], ACCASIM_POLICY[policy], cores, first_n, node_cores[name], tmp)
                raw[case].append(r)
                label = f"{kind} {name}{f'[:{first_n}]' if first_n else ''} {policy}"
                if "wall_s" in r:
                    print(f"  {label:<44} run {rep + 1}/{args.repeat}: {r['wall_s']:.3f} s, "
                          f"{r['jobs_per_s']:,.0f} jobs/s", file=sys.stderr)
                else:
                    print(f"  {label:<44} run {rep + 1}/{args.repeat}: whole process {r['whole_s']:.3f} s",
                          file=sys.stderr)
        # untimed: memory of the replay itself (tracemalloc) and the schedule checks
        traced_mb = {}
        for n in scaling:
            stdout, _ = run_child(self_cmd("--traced", prefix_file(traces[SCALING_TRACE], n, prefixes),
                                           SCALING_POLICY, sites[SCALING_TRACE][0], None), tmp)
            traced_mb[n] = json.loads(stdout)
        checks = {}
        kernel_checks: dict[tuple[str, str], tuple[int, int]] = {}
        if have_accasim:
            for name in TRACES:
                for policy, acc_policy in ACCASIM_POLICY.items():
                    cores, first_n = sites[name][0], firsts.get(name)
                    accasim_run(traces[name], acc_policy, cores, first_n, node_cores[name], tmp)
                    argv = (self_cmd("--check", prefix_file(traces[name], first_n, prefixes), policy, cores, None)
                            + [os.path.join(tmp, "accasim.json")])
                    c = json.loads(run_child(argv, tmp)[0])
                    checks[(name, policy)] = (c["same_starts"], c["jobs"], c["waited"])
                    kernel_checks[(name, policy)] = (c.get("kernel_same", 0), c.get("kernel_jobs", 0))
                    print(f"  schedule check {name} {policy}: {checks[(name, policy)][0]:,} of "
                          f"{checks[(name, policy)][1]:,} start times equal; kernel vs BatchQueue "
                          f"{kernel_checks[(name, policy)][0]:,} of {kernel_checks[(name, policy)][1]:,}",
                          file=sys.stderr)

    load_after = os.getloadavg()
    extra["load_avg_1min"] = {"before": load_before[0], "after": load_after[0]}
    if args.json:
        extra["parent_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({**extra, "repeat": args.repeat, "accasim_measured": have_accasim,
                          "runs": [{"kind": k, "trace": t, "policy": p, "first": f, "runs": rs}
                                   for (k, t, p, f), rs in raw.items()],
                          "traced": [{"trace": SCALING_TRACE, "policy": SCALING_POLICY, "first": n, **v}
                                     for n, v in traced_mb.items()],
                          "schedule_check": [{"trace": t, "policy": p, "first": firsts.get(t), "same_starts": s,
                                              "jobs": n, "resel_jobs_that_waited": w,
                                              "kernel_same_as_batchqueue": kernel_checks[(t, p)][0],
                                              "kernel_jobs": kernel_checks[(t, p)][1]}
                                             for (t, p), (s, n, w) in checks.items()]}, indent=2))
        return

    def med(case, key):
        return statistics.median(r[key] for r in raw[case])

    def label(name, first_n):
        return f"{name}[:{first_n:,}]" if first_n else name

    print(f"\nresel replay vs AccaSim 1.1.3, median of {args.repeat} run(s) each, read+replay timed "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 1-min load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after)")
    cpu_share = statistics.median(r["cpu_s"] / r["wall_s"] for k, rs in raw.items() if k[0] in ("resel", "base")
                                  for r in rs)
    if cpu_share < 0.9:
        print(f"WARNING: resel's runs got only {cpu_share:.0%} of a CPU (median CPU time / wall time): the machine "
              f"is busy, so jobs/s are low; ratios are interleaved and hurt less, but are noisier.")
    head = (f"{'trace':<22} {'policy':<13} {'jobs':>7} {'resel jobs/s':>13} {'AccaSim jobs/s':>15} "
            f"{'ratio':>7} {'peak MB':>8} {'AccaSim MB':>11}  schedule vs AccaSim")
    print(head)
    print("-" * len(head))
    ratios: dict[str, list[tuple[str, float, bool, bool]]] = {p: [] for p in ACCASIM_POLICY}
    conservative: list[tuple[str, float]] = []
    idle: set[str] = set()
    for name in TRACES:
        rows = [(p, None) for p in POLICIES]
        if have_accasim and firsts.get(name):
            rows += [(p, firsts[name]) for p in ACCASIM_POLICY]
        for policy, first_n in rows:
            case = ("resel", name, policy, first_n)
            jobs, jps, peak = med(case, "jobs"), med(case, "jobs_per_s"), med(case, "peak_mb")
            acc_case = ("accasim", name, policy, first_n)
            acc_txt = ratio_txt = acc_mb = sched = ""
            if have_accasim and acc_case in raw:
                acc_jps, acc_jobs = med(acc_case, "jobs_per_s"), med(acc_case, "jobs")
                ratio = jps / acc_jps
                acc_txt = f"{acc_jps:,.0f} {ACCASIM_POLICY[policy]:>4}"
                ratio_txt = f"{ratio:.1f}x"
                acc_mb = f"{med(acc_case, 'peak_mb'):.0f}"
                same, n, waited = checks[(name, policy)]
                sched = f"{'identical' if same == n else 'differs'} ({same:,}/{n:,} starts equal; {waited:,} waited)"
                k_same, k_jobs = kernel_checks.get((name, policy), (0, 0))
                if k_jobs:
                    sched += f"; kernel = BatchQueue {k_same:,}/{k_jobs:,}"
                if not waited:
                    idle.add(label(name, first_n))
                if acc_jobs != jobs:
                    sched += f" JOB COUNTS DIFFER: AccaSim {acc_jobs:,}"
                ratios[policy].append((label(name, first_n), ratio, acc_jobs == jobs, same == n))
            elif have_accasim and policy in ACCASIM_POLICY and firsts.get(name):
                acc_txt = f"see [:{firsts[name]:,}]"
            if policy == "conservative" and first_n is None:
                conservative.append((name, jps))
            print(f"{label(name, first_n):<22} {policy:<13} {jobs:>7,.0f} {jps:>13,.0f} {acc_txt:>15} "
                  f"{ratio_txt:>7} {peak:>8.1f} {acc_mb:>11}  {sched}".rstrip())
    print("jobs = jobs replayed (same on both sides); trace[:N] = the first N job lines only. Sites: "
          + "; ".join(f"{n} {sites[n][0]:,} cores, {lines[n]:,} job lines" for n in TRACES) + ".")
    if have_accasim:
        print("AccaSim machine: " + "; ".join(f"{n} {sites[n][0] // node_cores[n]} nodes x {node_cores[n]} cores"
                                               for n in TRACES)
              + " (--node-cores; AccaSim's speed depends on it, its schedule does not).")
        print("'N waited' = jobs with a wait > 0 in resel's schedule.")
        for t in sorted(idle):
            print(f"NOTE: on {t} no job ever waits, so no policy has anything to decide (every schedule is "
                  f"'start at submit'): its ratios measure event handling, not scheduling.")
    else:
        why = "--no-accasim" if args.no_accasim else "accasim is not importable (pip install accasim==1.1.3)"
        print(f"AccaSim was not measured: {why}.")

    # memory flat in the trace length
    print(f"\nmemory, {SCALING_POLICY} on prefixes of {SCALING_TRACE} (peak RSS of the timed child; "
          "growth = the child's own peak RSS (VmHWM) after read+replay minus after its imports; "
          "heap = tracemalloc of read+replay, separate untimed run):")
    points = []
    for frac, n in zip(SCALING_FRACTIONS, scaling):
        case = ("resel", SCALING_TRACE, SCALING_POLICY, n)
        jobs, peak = med(case, "jobs"), med(case, "peak_mb")
        growth = statistics.median(r["self_peak_mb"] - r["base_mb"] for r in raw[case])
        t = traced_mb[n]
        heap, kept, kept_stats = t["traced_peak_mb"], t["retained_mb"], t["retained_jobstats_mb"]
        points.append((jobs, heap, kept - kept_stats))
        print(f"  {frac:>4.0%} ({n or lines[SCALING_TRACE]:>6,} job lines, {jobs:>6,.0f} replayed): "
              f"peak RSS {peak:6.1f} MB, growth {growth:5.1f} MB, heap peak {heap:5.2f} MB; "
              f"retained at end {kept:5.2f} MB, of which per-job metric arrays (JobStats) {kept_stats:5.2f} MB")
    print(f"  (parent RSS, the floor of every peak MB above: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB)")
    (j0, h0, o0), (j1, h1, o1) = points[0], points[-1]
    if j1 > j0:
        print(f"  {SCALING_FRACTIONS[0]:.0%} -> 100% ({j1 - j0:+,.0f} jobs): heap peak {h1 - h0:+.2f} MB "
              f"= {(h1 - h0) * 2**20 / (j1 - j0):,.0f} bytes/job; retained outside JobStats "
              f"{o1 - o0:+.3f} MB = {(o1 - o0) * 2**20 / (j1 - j0):,.1f} bytes/job")

    side_by_side(raw, med, have_accasim, bool(args.baseline), checks)
    typed_forms(raw, med, have_accasim, bool(args.baseline))

    # goals
    print()
    for policy, what in (("fcfs", "FCFS vs AccaSim FIFO, identical schedule, in-process"),
                         ("easy", "EASY (textbook) vs AccaSim EASY, in-process")):
        if not have_accasim:
            print(f"goal {what} >= {GOAL_RATIO:g}x: not measured (no AccaSim)")
            continue
        items = ratios[policy]
        # FCFS must also reproduce AccaSim's schedule; both must have compared the same jobs
        valid = [same_jobs and (same_sched or policy != "fcfs") for _, _, same_jobs, same_sched in items]
        ok = bool(items) and all(r >= GOAL_RATIO and v for (_, r, _, _), v in zip(items, valid))
        text = ", ".join(f"{t} {r:.1f}x" + ("" if same_jobs else " (job counts differ)")
                         + (" (schedule differs)" if policy == "fcfs" and not same_sched else "")
                         for t, r, same_jobs, same_sched in items)
        print(f"goal {what} >= {GOAL_RATIO:g}x: {text} -> {'PASS' if ok else 'MISS'}")
    if have_accasim:
        for policy in ACCASIM_POLICY:
            for form in FORMS:
                items = [(t, med(("accasim", t, policy, None), "whole_s") / med(form_case(t, policy, form), "whole_s"))
                         for t in TRACES if ("accasim", t, policy, None) in raw]
                ok = all(r >= GOAL_WHOLE[t] for t, r in items)
                print(f"goal resel replay --policy {policy} {' '.join(FORMS[form]).format(tmp='DIR') or '(the table)'} "
                      "whole process vs AccaSim's whole process "
                      + ", ".join(f">= {GOAL_WHOLE[t]:g}x on {t}: {r:.1f}x" for t, r in items)
                      + f" -> {'PASS' if ok else 'MISS'}")
    ok = all(j >= GOAL_CONSERVATIVE for t, j in conservative if t == GOAL_WHOLE_TRACE)
    print(f"goal conservative >= {GOAL_CONSERVATIVE:,.0f} jobs/s in-process on {GOAL_WHOLE_TRACE}: "
          + ", ".join(f"{t} {j:,.0f}" for t, j in conservative) + f" -> {'PASS' if ok else 'MISS'}")
    case = ("cli", GOAL_WHOLE_TRACE, "conservative", None)
    whole = med(case, "jobs") / med(case, "whole_s")
    print(f"goal conservative >= {GOAL_CONSERVATIVE_WHOLE:,.0f} jobs/s whole process on {GOAL_WHOLE_TRACE}: "
          f"{whole:,.0f} -> {'PASS' if whole >= GOAL_CONSERVATIVE_WHOLE else 'MISS'}")
    # the same goals by CPU time, which a busy machine disturbs far less than wall time
    parts = []
    if have_accasim:
        for policy in ACCASIM_POLICY:
            for t in TRACES:
                acc = ("accasim", t, policy, None)
                if acc not in raw or not all("cpu_s" in r for r in raw[acc]):
                    continue
                inproc = med(acc, "cpu_s") / med(("resel", t, policy, None), "cpu_s")
                whole_r = med(acc, "whole_cpu_s") / med(("cli", t, policy, None), "whole_cpu_s")
                parts.append(f"{policy} {t} in-process {inproc:.1f}x (goal {GOAL_RATIO:g}x), "
                             f"whole {whole_r:.1f}x (goal {GOAL_WHOLE[t]:g}x)")
    c_in = med(("resel", GOAL_WHOLE_TRACE, "conservative", None), "jobs") / med(
        ("resel", GOAL_WHOLE_TRACE, "conservative", None), "cpu_s")
    c_whole = med(case, "jobs") / med(case, "whole_cpu_s")
    parts.append(f"conservative {GOAL_WHOLE_TRACE} {c_in:,.0f} jobs/s in-process, {c_whole:,.0f} whole")
    print("by CPU time: " + "; ".join(parts))


def form_case(trace: str, policy: str, form: str, prefix: str = "") -> tuple:
    """The case of ``resel replay`` in one of :data:`FORMS` (``json`` is the historical ``cli`` case)."""
    return (f"{prefix}cli" if form == "json" else f"{prefix}cli:{form}", trace, policy, None)


def typed_forms(raw: dict, med, have_accasim: bool, baseline: bool) -> None:
    """The command as typed: each form of :data:`FORMS` as a whole process beside AccaSim's."""
    print("\nthe command as typed, whole process (start-up to exit, timed from outside; medians of the same "
          "interleaved runs): resel replay TRACE --policy P [FORM], the cores from the trace's header or .machines")
    cols = ["trace", "policy", "form", "jobs", "resel s", "CPU s", "peak MB"] + (["before s"] if baseline else []) \
        + ["AccaSim s", "ratio", "goal"]
    widths = [15, 6, 22, 7, 8, 7, 8] + ([9] if baseline else []) + [10, 7, 6]
    print("  ".join(c.rjust(w) if i > 2 else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths))))
    for name in TRACES:
        for policy in ACCASIM_POLICY:
            acc = ("accasim", name, policy, None)
            has_acc = have_accasim and acc in raw
            for form in FORMS:
                case = form_case(name, policy, form)
                whole = med(case, "whole_s")
                row = [name, policy, " ".join(FORMS[form]).replace("{tmp}/", "") or "(table)",
                       f"{med(case, 'jobs'):,.0f}", f"{whole:.3f}", f"{med(case, 'whole_cpu_s'):.3f}",
                       f"{med(case, 'peak_mb'):.1f}"]
                if baseline:
                    base = form_case(name, policy, form, "base")
                    row.append(f"{med(base, 'whole_s'):.3f}" if base in raw else "")
                ratio = med(acc, "whole_s") / whole if has_acc else None
                row += [f"{med(acc, 'whole_s'):.3f}" if has_acc else "", f"{ratio:.1f}x" if has_acc else "",
                        "" if ratio is None else ("PASS" if ratio >= GOAL_WHOLE[name] else "MISS")]
                print("  ".join(c.rjust(w) if i > 2 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print("jobs: replayed (the table's and --status's as the table says, --output's the schedule's lines); "
          "--status 0,1 replays only the jobs the trace marks failed (0) or completed (1).")


def side_by_side(raw: dict, med, have_accasim: bool, baseline: bool, checks: dict) -> None:
    """In-process and whole process, resel (and the baseline) beside AccaSim, from this run."""
    print("\nin-process (read+replay timed inside the process) and whole process (the command, timed from "
          "outside: start-up, imports, reading, replaying, output), medians of the same interleaved runs")
    cols = ["trace", "policy", "jobs", "resel jobs/s"]
    if baseline:
        cols += ["before jobs/s"]
    cols += ["AccaSim jobs/s", "ratio"] + (["before"] if baseline else [])
    cols += ["resel s", "jobs/s"] + (["before s"] if baseline else []) + ["AccaSim s", "ratio"]
    cols += ["before"] if baseline else []
    widths = [15, 13, 7, 13] + ([13] if baseline else []) + [15, 7] + ([7] if baseline else []) \
        + [8, 8] + ([9] if baseline else []) + [10, 7] + ([7] if baseline else [])
    print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths))))
    for name in TRACES:
        for policy in POLICIES:
            row = [name, policy]
            jobs = med(("resel", name, policy, None), "jobs")
            jps = med(("resel", name, policy, None), "jobs_per_s")
            row += [f"{jobs:,.0f}", f"{jps:,.0f}"]
            if baseline:
                base_jps = med(("base", name, policy, None), "jobs_per_s")
                row.append(f"{base_jps:,.0f}")
            acc = ("accasim", name, policy, None)
            has_acc = have_accasim and acc in raw
            acc_jps = med(acc, "jobs_per_s") if has_acc else None
            row += [f"{acc_jps:,.0f}" if has_acc else "", f"{jps / acc_jps:.1f}x" if has_acc else ""]
            if baseline:
                row.append(f"{base_jps / acc_jps:.1f}x" if has_acc else "")
            whole = med(("cli", name, policy, None), "whole_s")
            row += [f"{whole:.3f}", f"{jobs / whole:,.0f}"]
            if baseline:
                base_whole = med(("basecli", name, policy, None), "whole_s")
                row.append(f"{base_whole:.3f}")
            acc_whole = med(acc, "whole_s") if has_acc else None
            row += [f"{acc_whole:.3f}" if has_acc else "", f"{acc_whole / whole:.1f}x" if has_acc else ""]
            if baseline:
                row.append(f"{acc_whole / base_whole:.1f}x" if has_acc else "")
            print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print("the same by CPU time (user + system, what the kernel accounted to each process: on a busy machine "
          "it moves far less than wall time); jobs/s in-process = jobs / CPU s of read+replay, whole = CPU s of "
          "the whole process")
    cols = ["trace", "policy", "resel jobs/s"] + (["before"] if baseline else []) + ["AccaSim", "ratio"] \
        + (["before"] if baseline else []) + ["resel s"] + (["before s"] if baseline else []) + ["AccaSim s", "ratio"] \
        + (["before"] if baseline else [])
    widths = [15, 13, 13] + ([9] if baseline else []) + [9, 7] + ([7] if baseline else []) + [8] \
        + ([9] if baseline else []) + [10, 7] + ([7] if baseline else [])
    print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths))))
    for name in TRACES:
        for policy in POLICIES:
            jobs = med(("resel", name, policy, None), "jobs")
            cps = jobs / med(("resel", name, policy, None), "cpu_s")
            row = [name, policy, f"{cps:,.0f}"]
            base_cps = jobs / med(("base", name, policy, None), "cpu_s") if baseline else None
            if baseline:
                row.append(f"{base_cps:,.0f}")
            acc = ("accasim", name, policy, None)
            has_acc = have_accasim and acc in raw and all("cpu_s" in r for r in raw[acc])
            acc_cps = jobs / med(acc, "cpu_s") if has_acc else None
            row += [f"{acc_cps:,.0f}" if has_acc else "", f"{cps / acc_cps:.1f}x" if has_acc else ""]
            if baseline:
                row.append(f"{base_cps / acc_cps:.1f}x" if has_acc else "")
            whole = med(("cli", name, policy, None), "whole_cpu_s")
            row.append(f"{whole:.3f}")
            if baseline:
                base_whole = med(("basecli", name, policy, None), "whole_cpu_s")
                row.append(f"{base_whole:.3f}")
            acc_whole = med(acc, "whole_cpu_s") if has_acc else None
            row += [f"{acc_whole:.3f}" if has_acc else "", f"{acc_whole / whole:.1f}x" if has_acc else ""]
            if baseline:
                row.append(f"{acc_whole / base_whole:.1f}x" if has_acc else "")
            print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    start = med(("startup", "-", "-", None), "whole_s")
    text = (f"start-up floor (resel replay --help, whole process): {start:.3f} s wall, "
            f"{med(('startup', '-', '-', None), 'whole_cpu_s'):.3f} s CPU")
    if baseline:
        text += (f"; before: {med(('basestartup', '-', '-', None), 'whole_s'):.3f} s wall, "
                 f"{med(('basestartup', '-', '-', None), 'whole_cpu_s'):.3f} s CPU")
    print(text)


if __name__ == "__main__":
    main()
