"""A crash soak: kill -9 the live coordinator (and, less often, an agent, a pilot job, a Slurm
controller or the HTCondor schedd) at random points chosen by a seed, resume, and check after
every bag that nothing was lost, run twice at once or counted twice (issue 29 §1).

    scripts/testbed.sh up                                      # the live testbed (root)
    .venv/bin/python benchmarks/soak_crash.py --crashes 30     # [--seed 0] [--sites tba,tbb,tbc,pool]
    .venv/bin/python benchmarks/soak_crash.py --crashes 1000 --seed 1 --json

Bags of ``--tasks`` short stand-in tasks (``sleep --seconds``, which write their own start and
end stamps) run one after the other on the testbed's sites — tba (Slurm 22.05, local), tbb
(Slurm 22.05 over SSH), tbc (Slurm 24.11 through slurmrestd, files over SSH) and the HTCondor
23.9 pool (over SSH, tasks through condor_chirp) — spread over all of them (``topk:N``; equal
clocks). Each bag is started with ``resel run`` as a user would, in a process of its own.
``--strategy topk:4+reselect`` adds re-selection, which moves tasks handed ahead to a busy
pilot: it asks each back (a withdrawal its agent refuses once it started) and dispatches it
elsewhere once given back; and it hands other sites' tasks ahead to a drained busy site.
``--prefetch K|auto`` is the runs' hand-ahead depth per slot (``resel run``'s, default auto): with
1-s tasks auto stays at 1-2, so ``--seconds 0.05`` (auto reaches its cap, 16) or ``--prefetch 16``
fills every inbox deep (docs/benchmarks.md, "Deep hand-ahead").

The crash points are drawn from ``--seed``, one after the other (the same seed gives the same
sequence): a fault's kind (the coordinator 86 %, an agent, a pilot job, a slurmctld, the schedd
3-4 % each), then when — once the coordinator has written ``rows`` more rows to the run's journal
since it was (re)started (0 for a point in its start-up: loading, replaying, first contact with
the sites), plus ``delay`` seconds. At the point:

* **coordinator**: ``kill -9`` of the ``resel run`` process, then ``resel run --resume RUN``
  (a run killed before its row was stored is started again; a run already done is not
  resumed);
* **agent**: ``kill -9`` of one running pilot's agent (the pid in its heartbeat, checked to be
  that pilot's agent);
* **pilot**: its job cancelled through its scheduler (``scancel``, ``condor_rm``);
* **slurmctld**: tba's or tbb's controller killed, restarted ``down`` seconds later with its
  state (``scripts/testbed.sh restart-ctld``);
* **schedd**: the pool's ``condor_schedd`` killed; its master restarts it.

A fault with nothing to act on (no pilot running yet, no pool in ``--sites``) kills the
coordinator instead. A point the bag's end beats is carried to the next bag. After every bag
``benchmarks/soak_audit.py`` checks, from the agents' own files and the store: 0 tasks lost,
0 results lost, 0 tasks running twice at the same time, every duplicate completion counted
once. Also measured: the time from each ``--resume`` to the first dispatch that resumed
coordinator records (from the journal: its first ``DispatchTask`` row), goal ≤ 30 s at p99.

A failure prints the seed, the bag, the crash points it went through and what broke, and exits
1; ``--first N`` starts the same sequence at its N-th point. The table (or ``--json``) gives
the crashes by kind, the bags and tasks, the checks' counts and the resume-to-dispatch
percentiles. Nothing is left behind: the work directories are removed unless ``--keep``, and
every job of the soak's runs still queued is cancelled at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from live_helpers import REPO, _inline, bag_toml, cancel_leftovers  # noqa: E402
from soak_audit import audit_run  # noqa: E402
from soak_faults import (  # noqa: E402
    SoakSite, access_point, cancel_pilot, kill_agent, kill_schedd, kill_slurmctld, resume_drained, running_pilots,
)
from testbed import load  # noqa: E402

KINDS = {"coordinator": 0.86, "agent": 0.035, "pilot": 0.035, "slurmctld": 0.035, "schedd": 0.035}
#: a coordinator that writes no journal row for this long is stuck: a failure
STALL = 300.0
STAND_IN = ('s=$(date +%s.%N); echo "soak-start $s" > stamp; echo "soak-start $s"; sleep {seconds}; '
            'e=$(date +%s.%N); echo "soak-end $e" >> stamp; echo "soak-end $e"')


@dataclass(frozen=True)
class Point:
    """One crash point: what is hit, and when (module docstring)."""

    n: int
    kind: str
    rows: int
    delay: float
    pick: float        # which pilot or controller, among those there are at the time
    down: float        # a controller's time down

    def words(self) -> str:
        when = "in start-up" if self.rows == 0 else f"after {self.rows} journal rows"
        return f"#{self.n} {self.kind} {when} + {self.delay:.2f} s"


def crash_points(seed: int, count: int, first: int = 1) -> list[Point]:
    """Points ``first`` .. ``first + count - 1`` of the seed's sequence."""
    rng = random.Random(seed)
    out = []
    for n in range(1, first + count):
        kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        startup = kind == "coordinator" and rng.random() < 0.12
        rows = 0 if startup else rng.randint(1, 40)
        point = Point(n, kind, rows, rng.uniform(0.0, 2.0 if startup else 1.0), rng.random(), rng.uniform(1.0, 10.0))
        if n >= first:
            out.append(point)
    return out


class SoakFailure(Exception):
    pass


@dataclass
class Incarnation:
    """One ``resel run`` process of a bag: where the journal stood and when it was launched."""

    run_id: int | None
    base: int
    launched: float
    resumed: bool


@dataclass
class Tally:
    crashes: dict = field(default_factory=lambda: {k: 0 for k in KINDS})
    instead: int = 0                   # faults with nothing to act on: the coordinator killed instead
    startup_restarts: int = 0          # killed before the run's row was stored: started again
    bags: int = 0
    tasks: int = 0
    attempts: int = 0
    duplicates: int = 0
    orphans: int = 0
    lost: int = 0
    results_lost: int = 0
    concurrent: int = 0
    after_cancel: int = 0
    results: int = 0
    resume_to_dispatch: list = field(default_factory=list)
    resume_to_row: list = field(default_factory=list)
    censored: int = 0                  # resumed coordinators killed (or done) before any dispatch
    no_pilot: int = 0                  # resumed while no pilot of the run ran: not timed to a dispatch
    undrained: int = 0                 # nodes Slurm drained for a duplicate job id, resumed
    problems: list = field(default_factory=list)


class Soak:
    def __init__(self, tb, args, root: Path):
        self.tb, self.args, self.root = tb, args, root
        self.db = root / "soak.db"
        self.logs = root / "logs"
        self.logs.mkdir(parents=True)
        tag = f"soak{args.seed}-{os.getpid()}"
        self.sites = soak_sites(tb, args.sites, tag)
        (root / "sites.toml").write_text(sites_text(tb, self.sites))
        (root / "bag.toml").write_text(bag_toml(args.tasks, STAND_IN.format(seconds=f"{args.seconds:g}"),
                                                instructions=2e9 * args.seconds, name="soak"))
        self.tally = Tally()
        self.proc: subprocess.Popen | None = None
        self.runs: list[list] = []             # [run id, incarnations, crash points] per bag
        self.failures: list[tuple[SoakFailure, list[Point]]] = []   # with --keep-going

    # -------------------------------------------------------------- processes
    def launch(self, run_id: int | None) -> subprocess.Popen:
        n = len(list(self.logs.iterdir())) // 2
        if run_id is None:
            argv = ["run", str(self.root / "bag.toml"), "--sites", str(self.root / "sites.toml"),
                    "--strategy", self.args.strategy or f"topk:{len(self.sites)}", "--poll", f"{self.args.poll:g}",
                    "--prefetch", self.args.prefetch]
        else:
            argv = ["run", "--resume", str(run_id)]
        out = open(self.logs / f"{n:05d}.out", "wb")
        err = open(self.logs / f"{n:05d}.err", "wb")
        with out, err:
            self.proc = subprocess.Popen([sys.executable, "-m", "resel.cli", *argv, "--db", str(self.db), "--json",
                                          "--no-progress"], cwd=REPO, stdout=out, stderr=err)
        return self.proc

    def query(self, sql: str, params: list) -> list[tuple]:
        if not self.db.exists():
            return []
        try:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=60) as con:
                return con.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:      # a store still being created by the first run
            if "no such table" in str(exc):
                return []
            raise

    def newest_run(self) -> int | None:
        rows = self.query("select max(id) from runs", [])
        return rows[0][0] if rows else None

    def rows(self, run_id: int | None) -> int:
        found = self.query("select count(*) from events where run_id = ?", [run_id]) if run_id else []
        return found[0][0] if found else 0

    def waiting_for_a_queue(self, run_id: int | None) -> bool:
        """The run has pilots queued and none running: it waits for the site's scheduler (other
        users' jobs on the shared testbed), which is no stall of resel's."""
        if run_id is None:
            return False
        states = {r[0] for r in self.query("select state from live_pilots where run_id = ?", [run_id])}
        return "pending" in states and "running" not in states

    def administer(self) -> None:
        """The site administrator's round: resume a node Slurm drained for a duplicate job id
        (a restarted controller handed out again the id of a job it had lost)."""
        for what in resume_drained(self.tb):
            self.tally.undrained += 1
            self.log(f"  resumed {what}, drained by Slurm (Duplicate jobid: a restarted controller "
                     "handed out again the id of a job it had lost)")

    def wait_end(self, timeout: float) -> int:
        """The run's exit status, once it ends after its last crash point; the administrator's
        round every 5 s meanwhile (a node drained after the last point would hold the rest of
        the bag for ever: seen in the CI variant, seed 20, 2026-11-29)."""
        deadline, checked = time.monotonic() + timeout, time.monotonic()
        while (code := self.proc.poll()) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.proc.args, timeout)
            if time.monotonic() - checked > 5.0:
                checked = time.monotonic()
                self.administer()
            time.sleep(0.1)
        return code

    def wait_point(self, point: Point, run_of, base: int) -> bool:
        """Wait for the point (True) or the end of the process (False)."""
        last, since, checked = -1, time.monotonic(), time.monotonic()
        while True:
            if self.proc.poll() is not None:
                return False
            if time.monotonic() - checked > 5.0:       # the administrator's round
                checked = time.monotonic()
                self.administer()
            rows = self.rows(run_of()) - base
            if rows >= point.rows:
                break
            if rows != last:
                last, since = rows, time.monotonic()
            elif time.monotonic() - since > STALL and not self.waiting_for_a_queue(run_of()):
                raise SoakFailure(f"the coordinator wrote no journal row for {STALL:g} s")
            elif time.monotonic() - since > 6 * STALL:
                raise SoakFailure(f"no journal row for {6 * STALL:g} s, the run's pilots still queued")
            time.sleep(0.05)
        until = time.monotonic() + point.delay
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        return True

    # -------------------------------------------------------------- faults
    def inflict(self, point: Point, run_id: int | None) -> str:
        """Carry out a fault other than the coordinator's; the kind actually hit (the
        coordinator when there was nothing else to act on)."""
        if point.kind == "coordinator" or run_id is None:
            return "coordinator"
        what = None
        key = self.query("select run_key from runs where id = ?", [run_id])[0][0]
        if point.kind in ("agent", "pilot"):
            for _ in range(10):            # pilots may be about to start
                pilots = running_pilots(self.db, run_id, {s.name: s for s in self.sites})
                if pilots:
                    pilot = pilots[int(point.pick * len(pilots))]
                    site = next(s for s in self.sites if s.name == pilot["site"])
                    what = (kill_agent(pilot, site, key) if point.kind == "agent"
                            else cancel_pilot(self.tb, pilot, site))
                    if what:
                        break
                time.sleep(1.0)
        elif point.kind == "slurmctld":
            clusters = [s.kind[-1] for s in self.sites if s.kind in ("slurm-a", "slurm-b")]
            if clusters:
                what = kill_slurmctld(self.tb, clusters[int(point.pick * len(clusters))], point.down)
        elif point.kind == "schedd" and any(s.kind == "pool" for s in self.sites):
            what = kill_schedd(self.tb)
        if what is None:
            self.tally.instead += 1
            return "coordinator"
        self.log(f"  {point.words()}: {what}")
        return point.kind

    # -------------------------------------------------------------- one bag
    def bag(self, points: list[Point]) -> list[Point]:
        """Run one bag through as many of ``points`` as it lasts; returns the points left."""
        before = self.newest_run() or 0
        incarnations = [Incarnation(None, 0, time.time(), False)]
        went: list[Point] = []
        record = [None, incarnations, went]
        self.runs.append(record)
        self.launch(None)
        run_id: int | None = None
        mark = 0                             # journal rows the next point counts from

        def run_of() -> int | None:
            nonlocal run_id
            if run_id is None:
                newest = self.newest_run()
                run_id = newest if newest and newest > before else None
            return run_id
        while points:
            point = points[0]
            if not self.wait_point(point, run_of, mark):
                break
            points = points[1:]
            went.append(point)
            try:
                kind = self.inflict(point, run_of())
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                raise SoakFailure(f"the testbed did not come back after {point.words()}: {exc}") from exc
            self.tally.crashes[kind] += 1
            if kind != "coordinator":
                mark = self.rows(run_of())          # the next point counts from here
                continue
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            rid = run_of()
            if rid is None:                  # killed before the run was stored: start it again
                self.tally.startup_restarts += 1
                incarnations.append(Incarnation(None, 0, time.time(), False))
                mark = 0
                self.launch(None)
                continue
            record[0] = rid
            if self.query("select status from runs where id = ?", [rid])[0][0] == "done":
                break
            mark = self.rows(rid)
            incarnations.append(Incarnation(rid, mark, time.time(), True))
            self.launch(rid)
        code = self.wait_end(1800.0)
        rid = record[0] = run_of()
        status = self.query("select status from runs where id = ?", [rid])[0][0] if rid else None
        if status != "done":
            err = sorted(self.logs.glob("*.err"))[-1].read_text(errors="replace")[-3000:]
            raise SoakFailure(f"run {rid} ended with exit status {code} and status {status}:\n{err}")
        self.measure_resumes(rid, incarnations)
        audit = audit_run(self.db, rid, {s.name: s.host_dir for s in self.sites})
        t = self.tally
        t.bags += 1
        t.tasks += audit.tasks
        t.attempts += audit.attempts_started
        t.duplicates += audit.duplicates
        t.orphans += audit.orphans
        t.lost += audit.lost
        t.results_lost += audit.results_lost
        t.concurrent += audit.concurrent
        t.after_cancel += audit.after_cancel
        t.results += audit.results_read
        self.log(f"bag {t.bags}: run {rid}, {audit.tasks} tasks, {len(went)} crash point(s) "
                 f"({went[0].n}-{went[-1].n} of the seed's)" if went else
                 f"bag {t.bags}: run {rid}, {audit.tasks} tasks, no crash point")
        if audit.problems:
            t.problems += [f"run {rid}: {p}" for p in audit.problems]
            failure = SoakFailure(f"run {rid}:\n  " + "\n  ".join(audit.problems[:20]))
            if not self.args.keep_going:
                raise failure
            self.failures.append((failure, list(went)))
            self.log(f"FAILED (going on): {failure}")
        return points

    def measure_resumes(self, run_id: int, incarnations: list[Incarnation]) -> None:
        """Per resumed coordinator: launch -> the first row it wrote, and -> the first
        DispatchTask row it wrote. Only a coordinator resumed while a pilot of the run was
        running is timed to its dispatch (otherwise it waits for a pilot to start: the queue's
        time, other users' jobs on the shared testbed, not the resume's)."""
        t0 = self.query("select t0 from runs where id = ?", [run_id])[0][0]
        pilots = self.query("select started, ended from live_pilots where run_id = ? and started is not null",
                            [run_id])
        resumed = [inc for inc in incarnations if inc.resumed]
        for inc, nxt in zip(resumed, resumed[1:] + [None]):
            upper = nxt.base if nxt is not None else 1 << 62
            at = inc.launched - t0
            first = self.query("select min(time) from events where run_id = ? and seq >= ? and seq < ?",
                               [run_id, inc.base, upper])[0][0]
            if first is not None:
                self.tally.resume_to_row.append(t0 + first - inc.launched)
            if not any(s <= at and (e is None or e > at) for s, e in pilots):
                self.tally.no_pilot += 1
                continue
            dispatch = self.query("select min(time) from events where run_id = ? and kind = 'DispatchTask' "
                                  "and seq >= ? and seq < ?", [run_id, inc.base, upper])[0][0]
            if dispatch is not None:
                self.tally.resume_to_dispatch.append(t0 + dispatch - inc.launched)
            else:
                self.tally.censored += 1

    # -------------------------------------------------------------- the soak
    def run(self, points: list[Point], began: float) -> None:
        while points:
            points = self.bag(points)
            if self.args.report:              # the figures so far, after every bag
                Path(self.args.report).write_text(json.dumps(summary(self.tally, time.monotonic() - began,
                                                                     self.args), indent=1, default=str))

    def stop(self) -> None:
        """Leave nothing running: the coordinator, and every job of the soak's runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        cancel_leftovers(self.tb, self.root)               # tba and tbb: the runs in the soak's store
        keys = [r[0] for r in self.query("select run_key from runs where run_key is not null", [])]
        for key in keys:
            if self.tb.has_trixie:
                access_point(self.tb, f"condor_rm -constraint 'regexp(\"^resel-{key}-\", JobBatchName)' >/dev/null "
                                      f"2>&1; squeue -h -o '%i %j' | awk '$2 ~ /^resel-{key}-/ {{print $1}}' | "
                                      "xargs -r scancel")

    def log(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)


def soak_sites(tb, names: list[str], tag: str) -> list[SoakSite]:
    """The chosen sites, each in a work directory of the soak's own."""
    known = {
        "tba": SoakSite("tba", "slurm-a", f"{tb.work_a}/{tag}", Path(tb.work_a, tag)),
        "tbb": SoakSite("tbb", "slurm-b", str(Path(tb.work_b).parent / f"resel-work-{tag}"),
                        Path(tb.work_b).parent / f"resel-work-{tag}"),
    }
    if tb.has_trixie:
        for name, kind in (("tbc", "slurm-c"), ("pool", "pool")):
            workdir = f"{tb.work_c}/{tag}-{name}"
            known[name] = SoakSite(name, kind, workdir, Path(tb.trixie_root + workdir))
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"--sites: {', '.join(missing)} not on this testbed (it has {', '.join(known)}; "
                         "tbc and pool need its Debian 13 part)")
    return [known[n] for n in names]


def sites_text(tb, sites: list[SoakSite]) -> str:
    """The sites file: equal clocks (a re-selected task moves for good), 900-s pilots."""
    from trixie_helpers import pool_site, tbc_site
    out = []
    for s in sites:
        if s.kind in ("slurm-a", "slurm-b"):
            conf = tb.slurm_conf_a if s.kind == "slurm-a" else tb.slurm_conf_b
            cores = 8 if s.kind == "slurm-a" else 4
            access = ({"transport": "local"} if s.kind == "slurm-a" else
                      {"transport": "ssh", "host": "tb-ssh", "ssh_config": tb.ssh_config})
            access.update(workdir=s.workdir, env={"SLURM_CONF": conf})
            out.append(f'[[site]]\nname = "{s.name}"\nkind = "slurm"\ncores = {cores}\nclock = {{ base = 2.0 }}\n'
                       f'pilot = {{ mode = "single", max_cores = {cores}, walltime = 900 }}\n'
                       f"access = {_inline(access)}\n")
        elif s.kind == "slurm-c":
            out.append(tbc_site(tb, api="rest", workdir=s.workdir, walltime=900, clock=2.0))
        else:
            out.append(pool_site(tb, workdir=s.workdir, walltime=900, clock=2.0))
    return "\n".join(out)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest rank (p99 of 100 values is the 99th smallest)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(t: Tally, seconds: float, args) -> dict:
    crashes = sum(t.crashes.values())
    waits = t.resume_to_dispatch
    return {"seed": args.seed, "first": args.first, "crashes": crashes, "by_kind": t.crashes,
            "instead_of_nothing": t.instead, "startup_restarts": t.startup_restarts, "bags": t.bags,
            "tasks": t.tasks, "attempts_started": t.attempts, "results_read": t.results,
            "lost_tasks": t.lost, "lost_results": t.results_lost, "concurrent_duplicates": t.concurrent,
            "concurrent_after_cancel": t.after_cancel,
            "duplicate_completions": t.duplicates,
            "orphans": t.orphans, "resumes_measured": len(waits), "resumes_censored": t.censored,
            "resumes_without_pilot": t.no_pilot, "nodes_resumed": t.undrained, "resume_to_row_p50": percentile(t.resume_to_row, 0.5),
            "resume_to_row_p99": percentile(t.resume_to_row, 0.99),
            "resume_to_dispatch_p50": percentile(waits, 0.5), "resume_to_dispatch_p99": percentile(waits, 0.99),
            "resume_to_dispatch_max": max(waits) if waits else math.nan, "seconds": seconds,
            "seconds_per_crash": seconds / crashes if crashes else math.nan, "problems": t.problems}


def print_table(doc: dict, args) -> None:
    print(f"\ncrash soak: seed {doc['seed']}, points {doc['first']}-{doc['first'] + doc['crashes'] - 1}, "
          f"bags of {args.tasks} x sleep {args.seconds:g} s on {', '.join(args.sites)}, --poll {args.poll:g}, "
          f"--strategy {args.strategy or f'topk:{len(args.sites)}'}, --prefetch {args.prefetch}\n")
    kinds = ", ".join(f"{k} {n}" for k, n in doc["by_kind"].items())
    rows = [("crashes", f"{doc['crashes']} ({kinds}; {doc['instead_of_nothing']} with nothing to hit killed the "
                        f"coordinator instead; {doc['startup_restarts']} before the run was stored)", ""),
            ("bags (runs) / tasks / attempts started", f"{doc['bags']} / {doc['tasks']} / {doc['attempts_started']}", ""),
            ("tasks lost, results lost, tasks running twice at once",
             f"{doc['lost_tasks']}, {doc['lost_results']}, {doc['concurrent_duplicates']} "
             f"({doc['concurrent_after_cancel']} of them after the coordinator cancelled the first)", "0, 0, 0"),
            ("duplicate completions (each counted once)", str(doc["duplicate_completions"]), ""),
            ("attempts that outlived their agent", str(doc["orphans"]), ""),
            ("resume -> its first journal row p50 / p99 (s)",
             f"{doc['resume_to_row_p50']:.2f} / {doc['resume_to_row_p99']:.2f}", ""),
            ("resume -> next dispatch p50 / p99 / max (s)",
             f"{doc['resume_to_dispatch_p50']:.2f} / {doc['resume_to_dispatch_p99']:.2f} / "
             f"{doc['resume_to_dispatch_max']:.2f} ({doc['resumes_measured']} resumes; {doc['resumes_censored']} "
             f"killed or done before a dispatch; {doc['resumes_without_pilot']} while no pilot ran, not timed)",
             "p99 <= 30"),
            ("wall time (s) / per crash (s)", f"{doc['seconds']:.0f} / {doc['seconds_per_crash']:.1f}", "")]
    print("| measure | value | goal |\n|---|---|---|")
    for label, value, goal in rows:
        print(f"| {label} | {value} | {goal} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="The module docstring (benchmarks/soak_crash.py) says what each fault is.")
    ap.add_argument("--crashes", type=int, default=30, help="crash points to go through (default 30)")
    ap.add_argument("--seed", type=int, default=0, help="the seed of the crash points (default 0)")
    ap.add_argument("--first", type=int, default=1, help="start at this point of the seed's sequence (a replay)")
    ap.add_argument("--sites", default=None,
                    help="comma-separated, of tba,tbb,tbc,pool (default: all four, tba,tbb without the Debian 13 part)")
    ap.add_argument("--tasks", type=int, default=300, help="tasks per bag (default 300)")
    ap.add_argument("--seconds", type=float, default=1.0, help="each stand-in task sleeps this long (default 1)")
    ap.add_argument("--poll", type=float, default=0.5, help="the coordinator's --poll (default 0.5)")
    ap.add_argument("--strategy", default=None, help="the runs' --strategy (default topk:N, N the sites)")
    ap.add_argument("--prefetch", default="auto",
                    help="the runs' --prefetch, tasks handed ahead per slot: K or auto (default auto, as resel run's); "
                         "a fixed 16 fills every inbox deep from the first dispatch, even with 1-s tasks")
    ap.add_argument("--keep", action="store_true", help="keep the store, logs and work directories")
    ap.add_argument("--keep-going", action="store_true",
                    help="after a bag that fails its checks, go on with the next (all failures reported at the end)")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON document")
    ap.add_argument("--report", default=None, help="write the figures so far (JSON) to this file after every bag")
    args = ap.parse_args()
    if args.crashes < 1 or args.first < 1 or args.tasks < 1 or not args.seconds > 0:
        ap.error("--crashes, --first and --tasks must be at least 1, --seconds positive")
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    args.sites = args.sites.split(",") if args.sites else (["tba", "tbb", "tbc", "pool"] if tb.has_trixie
                                                           else ["tba", "tbb"])
    root = Path(tempfile.mkdtemp(prefix="resel-soak-"))
    soak = Soak(tb, args, root)

    def interrupted(signum, frame):        # SIGTERM, or SIGINT where a shell left it ignored
        raise KeyboardInterrupt
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, interrupted)
    points = crash_points(args.seed, args.crashes, args.first)
    began = time.monotonic()
    failed = None
    try:
        soak.run(points, began)
    except (SoakFailure, subprocess.TimeoutExpired) as exc:
        failed = exc
    except KeyboardInterrupt:
        failed = "interrupted"
    finally:
        soak.stop()
    doc = summary(soak.tally, time.monotonic() - began, args)
    for failure, went in soak.failures:
        print(f"SOAK FAILED: seed {args.seed}, crash points {' '.join(p.words() for p in went) or 'none'}\n{failure}",
              file=sys.stderr)
    if failed is None and soak.failures:
        failed = f"{len(soak.failures)} bag(s) failed their checks"
        print(f"store, logs and work directories kept in {root}", file=sys.stderr)
    elif failed is not None:
        last = soak.runs[-1] if soak.runs else (None, [], [])
        went = " ".join(p.words() for p in last[2]) or "none yet"
        print(f"SOAK FAILED: seed {args.seed}, bag {soak.tally.bags + 1} (run {last[0]}), its crash points: {went}\n"
              f"{failed}\nreplay: benchmarks/soak_crash.py --seed {args.seed} --first {last[2][0].n if last[2] else 1}"
              f" --sites {','.join(args.sites)} --tasks {args.tasks} --seconds {args.seconds:g}"
              f"{f' --strategy {args.strategy}' if args.strategy else ''} --prefetch {args.prefetch}\n"
              f"store, logs and work directories kept in {root}",
              file=sys.stderr)
    elif not args.keep:
        shutil.rmtree(root, ignore_errors=True)
        for s in soak.sites:
            shutil.rmtree(s.host_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print_table(doc, args)
    sys.exit(1 if failed is not None else 0)


if __name__ == "__main__":
    main()
