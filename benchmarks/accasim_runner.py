"""Run AccaSim 1.1.3 (``pip install accasim==1.1.3``) on an SWF trace; write per-job start times.

Reference for resel's batch replay: check resel's FCFS job by job against AccaSim's FIFO and
compare speed. AccaSim is only used as a library; nothing of it is copied here.

Run:  python benchmarks/accasim_runner.py TRACE.swf --cores N --policy fifo|easy
          [--first N] [--node-cores C] --out starts.json

Output JSON: {"policy", "jobs" (jobs simulated), "wall_s" and "cpu_s" (time of ``start_simulation()``
only: AccaSim parses the workload lazily inside it, so SWF parsing of the preprocessed copy
is included, but not our preprocessing nor the simulator's construction), "jobs_per_s",
"starts": {"<SWF job id>": start time in the trace's own submit time base}} plus "cores",
"node_cores" and "skipped" counts.

Preprocessing (a copy in a temp dir; the trace itself is never modified):

* only job lines are kept (``;`` header/comment and blank lines dropped; AccaSim would skip
  ``;`` lines itself) and only the 18 standard fields (wagap's 3 extra columns are cut);
* ``--first N`` keeps the first N job lines of the trace, before any filtering;
* dropped, as resel's replay drops them: runtime (field 4) < 0, size <= 0, size > --cores.
  size = requested processors (field 8) if > 0, else allocated (field 5) -- resel's
  ``Job.size``; it is written to field 8, which AccaSim's parser prefers;
* requested time (field 9, AccaSim's ``expected_duration``, only used by EASY) = field 9 if
  > 0, else the runtime; raised to the runtime if the job ran longer (resel's default,
  ``kill=False``);
* memory fields 7 (used) and 10 (requested) equal to -1 become 1. AccaSim takes the job's
  memory from field 10, else field 7, else none; its JobFactory decides from the FIRST job
  whether requests carry ``mem`` and then assumes every job does the same -- a mix of jobs
  with and without memory crashes (KeyError in ``event_class.JobFactory.factory``);
* submit times are shifted by +SHIFT via the system config's ``start_time`` and shifted
  back in the output. Reason: ``EventManager.load_event`` tests ``if not self.current_time``,
  so a simulation clock of 0 (a trace whose first submit is 0 or 1, like hpc2n) is taken as
  "clock not set" and rewinds the clock.

System model: ``--cores N`` as N/C nodes of C cores (``--node-cores C``, default 1), and
``core`` is the only resource (memory requests are therefore ignored by AccaSim's
JobFactory). The default SWF tweaker turns a job of k processors into k requests of 1 core
each, and FirstFit may place several of them on one node (``ALLOW_MAPPING_SAME_NODE``), so a
job needs k free cores anywhere: a pure core pool for every C, no fragmentation effect on
start times. C only changes speed (FirstFit scans nodes; fewer, bigger nodes scan faster).

Policies: ``fifo`` = ``FirstInFirstOut(FirstFit())``: queue sorted by submit time, the
allocator stops at the first job that does not fit -- strict FCFS. ``easy`` =
``EASYBackfilling(FirstFit())``, which is NOT textbook EASY (accasim/base/scheduler_class.py,
accasim/base/allocator_class.py, version 1.1.3):

* the reservation is never enforced: backfilling passes ``reserved_nodes=[]``
  (scheduler_class.py:497-501) and ``FirstFit._compute_reservation_overlaps`` returns that
  empty list even when the candidate would run past the shadow time
  (allocator_class.py:354-361), so ``backfilling_overlap`` is False and any queued job that
  fits now starts (allocator_class.py:277-287). Backfilled jobs can delay the head job
  arbitrarily: it is first-fit list scheduling with the head excluded;
* the head (blocked) job is retried only once the clock reaches its reservation time,
  computed once from requested times (scheduler_class.py:439-460, 470-475); cores freed by
  early finishes before then go to later jobs. If it still does not fit at that time the
  stale reservation is kept and it is retried at every later event
  (``_reserved_slot[0] <= cur_time`` stays true) while all other jobs keep backfilling;
* the retry assumes the head is ``queued_jobs[0]`` (the check is commented out, line 443);
* the reservation time is not added as an event (event_class.py:575 skips ``None`` times), so
  when no job ends before it the clock advances 1 s per step (event_class.py:509): on a
  2-job test (head blocked from t=100 to its reservation at t=1000) the scheduler ran 903 times.

Checked on these traces: AccaSim's FIFO start times equal resel's ``fcfs`` replay for every
job (hpc2n 3,145 jobs; wagap 3,000 and all 17,898), and are non-decreasing in submit order.

Also: AccaSim 1.1.3 imports ``collections.Mapping`` (removed in Python 3.10); this runner
aliases it to ``collections.abc.Mapping`` before importing accasim.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

SHIFT = 1000  # seconds added to every submit time inside AccaSim (see docstring)


def import_accasim():
    import collections
    import collections.abc
    if not hasattr(collections, "Mapping"):  # accasim/utils/misc.py: from collections import Mapping
        collections.Mapping = collections.abc.Mapping
    try:
        from accasim.base.additional_data import AdditionalData
        from accasim.base.allocator_class import FirstFit
        from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut
        from accasim.base.simulator_class import Simulator
    except ImportError as exc:
        sys.exit(f"accasim_runner: cannot import accasim ({exc}). Install it: pip install accasim==1.1.3")
    return AdditionalData, FirstFit, EASYBackfilling, FirstInFirstOut, Simulator


def preprocess(trace: str, out_path: str, cores: int, first: int | None) -> tuple[int, dict]:
    """Write the AccaSim-ready copy of ``trace`` to ``out_path``; return (jobs, skipped)."""
    skipped = {"runtime_unknown": 0, "size_unknown": 0, "too_large": 0}
    seen, n_lines, last_submit = set(), 0, None
    with open(trace, encoding="utf-8", errors="replace") as src, open(out_path, "w") as dst:
        for line in src:
            tok = line.split()
            if not tok or tok[0].startswith(";"):
                continue
            if first is not None and n_lines >= first:
                break
            n_lines += 1
            f = tok[:18]
            if len(f) < 18:
                sys.exit(f"accasim_runner: {trace}: job line {n_lines} has {len(f)} fields, expected 18")
            num = [float(x) for x in f]
            run, procs, req_procs, req_time = num[3], num[4], num[7], num[8]
            size = req_procs if req_procs > 0 else procs
            if run < 0:
                skipped["runtime_unknown"] += 1
                continue
            if size <= 0:
                skipped["size_unknown"] += 1
                continue
            if size > cores:
                skipped["too_large"] += 1
                continue
            if f[0] in seen:
                sys.exit(f"accasim_runner: {trace}: duplicate job id {f[0]}")
            if last_submit is not None and num[1] < last_submit:
                sys.exit(f"accasim_runner: {trace}: job {f[0]} not in submit order")
            seen.add(f[0])
            last_submit = num[1]
            f[3] = str(int(run))
            f[7] = str(int(size))
            f[8] = str(int(max(req_time if req_time > 0 else run, run)))
            for i in (6, 9):  # used / requested memory
                if num[i] == -1:
                    f[i] = "1"
            dst.write(" ".join(f) + "\n")
    return len(seen), skipped


def run(trace: str, cores: int, policy: str, first: int | None, node_cores: int) -> dict:
    if cores % node_cores:
        sys.exit(f"accasim_runner: --cores {cores} is not a multiple of --node-cores {node_cores}")
    with tempfile.TemporaryDirectory(prefix="accasim_") as tmp:
        return _run_in(tmp, trace, cores, policy, first, node_cores)


def _run_in(tmp, trace, cores, policy, first, node_cores):
    AdditionalData, FirstFit, EASYBackfilling, FirstInFirstOut, Simulator = import_accasim()
    workload = os.path.join(tmp, "workload.swf")
    n_jobs, skipped = preprocess(trace, workload, cores, first)
    sys_config = os.path.join(tmp, "sys_config.json")
    with open(sys_config, "w") as fh:
        json.dump({"groups": {"n": {"core": node_cores}}, "resources": {"n": cores // node_cores},
                   "equivalence": {"processor": {"core": 1}}, "start_time": SHIFT}, fh)

    starts: dict[str, float] = {}

    class StartRecorder(AdditionalData):
        """Collects each finished job's start time (AccaSim hook, called on completion)."""
        def exec_after_completion(self, removed_jobs):
            for job in removed_jobs:
                starts[job.id] = job.start_time - SHIFT
        def exec_before_dispatching(self, job_dict, queued_jobs): pass
        def exec_after_dispatching(self, job_dict, to_dispatch_jobs, rejected_jobs): pass
        def exec_before_submission(self, *args, **kwargs): pass
        def exec_after_submission(self, *args, **kwargs): pass
        def exec_before_completion(self, *args, **kwargs): pass
        def stop(self): pass

    dispatcher = FirstInFirstOut(FirstFit()) if policy == "fifo" else EASYBackfilling(FirstFit())
    # pass the class: 1.1.3 binds instances before its EventManager exists (AssertionError)
    sim = Simulator(workload, sys_config, dispatcher, additional_data=[StartRecorder],
                    scheduling_output=False, pprint_output=False, benchmark_output=False,
                    statistics_output=False, show_statistics=False,
                    RESULTS_FOLDER_PATH=os.path.join(tmp, "results"), LOG_LEVEL="WARNING")
    t0, c0 = time.perf_counter(), time.process_time()
    sim.start_simulation()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if len(starts) != n_jobs:
        print(f"accasim_runner: warning: {n_jobs - len(starts)} of {n_jobs} jobs have no start time",
              file=sys.stderr)
    return {"policy": policy, "jobs": n_jobs, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
            "jobs_per_s": round(n_jobs / wall, 1) if wall > 0 else None,
            "cores": cores, "node_cores": node_cores, "skipped": skipped,
            "starts": {k: int(v) if float(v).is_integer() else v for k, v in starts.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--cores", type=int, required=True)
    ap.add_argument("--policy", choices=("fifo", "easy"), required=True)
    ap.add_argument("--first", type=int, default=None, help="only the first N job lines")
    ap.add_argument("--node-cores", type=int, default=1, help="cores per AccaSim node (default 1)")
    ap.add_argument("--out", required=True, help="JSON output path")
    a = ap.parse_args()
    res = run(a.trace, a.cores, a.policy, a.first, a.node_cores)
    with open(a.out, "w") as fh:
        json.dump(res, fh)
    print(f"{a.policy}: {res['jobs']} jobs, {res['wall_s']} s, {res['jobs_per_s']} jobs/s, "
          f"skipped {res['skipped']} -> {a.out}")


if __name__ == "__main__":
    main()
