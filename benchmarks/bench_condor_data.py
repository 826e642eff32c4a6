"""Task data on an HTCondor pool: condor_chirp against HTCondor's own file transfer (issue 25).

    scripts/testbed.sh up                                   # the Debian 13 part: the HTCondor pool
    .venv/bin/python benchmarks/bench_condor_data.py        # [--repeat 3] [--tasks 8,32] [--in-mb 5] [--out-mb 20] [--root sid]
    .venv/bin/python benchmarks/bench_condor_data.py --host ap40 --ssh-config ~/.ssh/config --workdir ~/resel-bench

A pilot's slot shares no filesystem with the access point (AP). A task's files can reach it
three ways, and this script measures each in the pool, side by side, and prints one table:

1. **per file, in a running job** (one job, in its slot): ``condor_chirp fetch`` of a file of
   the run's cache (``../cache/NAME``) and ``condor_chirp put`` of one back, for each size of
   ``--sizes`` (10 KB … 100 MB), ``--repeat`` times each; plus the wrapper's atomic put (put
   to a temporary name, remove, link, remove) and a ``getdir``. Medians: seconds per call and
   MB/s. This is how the chirp wrapper moves a task's own inputs and outputs
   (resel/shipped/chirp_sync.py).
2. **per job, by HTCondor's file transfer**: one job per size whose ``transfer_input_files``
   names a file of that size and whose ``transfer_output_files`` brings one back — how a
   pilot gets the bag's shared inputs (``submit(..., inputs=...)``), and how a per-task job
   would move its files. Seconds from the shadow's own transfer statistics
   (``SHADOW_STATS_LOG``, 10 ms resolution; where the log cannot be read, the job ad's
   transfer dates, 1 s), and the job's whole life from submission to completion.
3. **a data-heavy bag both ways**: ``--tasks`` tasks (8 and 32: 2 and 8 per pilot), each with ``--in-mb`` MB of its own
   input and ``--out-mb`` MB of output (``sha256sum`` of the input, random bytes out),
   (a) as one HTCondor job per task (its own ``transfer_input_files``/``transfer_output_files``,
   all queued at once), (b) on ``--pilots`` resel pilots (resel's own PilotSite and
   HTCondorCLI, the chirp wrapper and agent as a run ships them), the inputs sent to the
   run's cache first and every task handed ahead, and (c) the same pilots running the same
   commands without any declared file (the data's share of (b)). Makespan from the first
   submission until every output is on the AP, median of ``--repeat`` interleaved rounds; and
   what each task more costs a slot (from the two bag sizes: the pilots' and jobs' start-up
   cancels out).

The pool must be idle: the script waits for that (``--wait-idle``) and stops if another user's
job appears, or if one of its jobs is removed by someone else (the testbed's pool is shared by
the test sessions). Everything it made on the AP is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import posixpath
import re
import shlex
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from resel.backends.htcondor.client import HTCondorCLI  # noqa: E402
from resel.backends.pilotsite import PilotSite  # noqa: E402
from resel.backends.transport import SSHTransport  # noqa: E402
from resel.config import load_sites  # noqa: E402
from resel.errors import SchedulerError  # noqa: E402

MB = 1_000_000
SIZES = "10K,100K,1M,10M,100M"
RUN_KEY = "r25-be7c00"
#: what the per-file job runs in the slot (python3, as the chirp wrapper): JSON lines on stdout
SLOT_PROBE = r'''
import json, os, statistics, subprocess, sys, time
CHIRP = next((p for p in ("/usr/libexec/condor/condor_chirp", "/usr/lib/condor/libexec/condor_chirp")
              if os.access(p, os.X_OK)), "condor_chirp")
def call(*args):
    began = time.perf_counter()
    done = subprocess.run([CHIRP] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if done.returncode != 0 and args[0] not in ("getdir", "remove"):   # getdir exits 1 after a listing
        raise SystemExit("condor_chirp %s: %s" % (" ".join(args), done.stderr.decode()))
    return time.perf_counter() - began
sizes, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
for size in sizes:
    name = "f%d" % size
    for i in range(repeat):
        print(json.dumps({"op": "fetch", "size": size, "s": call("fetch", "../cache/" + name, name)}), flush=True)
    for i in range(repeat):
        print(json.dumps({"op": "put", "size": size, "s": call("put", "-perm", "600", name, "outputs/p%d.%d" % (size, i))}), flush=True)
    for i in range(repeat):
        tmp, final = "outputs/.a%d.%d.tmp" % (size, i), "outputs/a%d.%d" % (size, i)
        began = time.perf_counter()
        call("put", "-perm", "600", name, tmp); call("remove", final); call("link", tmp, final); call("remove", tmp)
        print(json.dumps({"op": "put_atomic", "size": size, "s": time.perf_counter() - began}), flush=True)
    os.remove(name)
for i in range(repeat):
    print(json.dumps({"op": "getdir", "size": 0, "s": call("getdir", "outputs")}), flush=True)
'''


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise SystemExit(f"bad size {text!r}: a number with K, M or G (decimal)")
    return int(m.group(1)) * {"": 1, "K": 1000, "M": MB, "G": 1000 * MB}[m.group(2)]


def human(size: int) -> str:
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} B"


class AP:
    """The access point over SSH (resel's transport), and the pool through resel's CLI client."""

    def __init__(self, args):
        if args.host:
            self.t = SSHTransport(args.host, ssh_config=args.ssh_config)
            base = args.workdir
        else:
            from testbed import load
            tb = load().debian_root(args.root)
            if tb is None:
                raise SystemExit(f"the testbed has no {args.root} root with an HTCondor pool (scripts/testbed.sh up)")
            self.t = SSHTransport("tb-ap", ssh_config=tb.trixie_ssh_config)
            base = tb.work_c
        self.base = posixpath.join(base.replace("~", self.t.home(), 1) if base.startswith("~") else base,
                                   f"bench-data-{uuid.uuid4().hex[:8]}")
        self.cli = HTCondorCLI(self.t)
        self.jobs: set[str] = set()

    def sh(self, command: str, *, input: str | None = None, timeout: float = 900) -> str:
        done = self.t.run(["sh", "-c", command], input=input, timeout=timeout)
        if done.returncode != 0:
            raise SystemExit(f"on the access point: {command!r} exited {done.returncode}: {done.stderr or done.stdout}")
        return done.stdout

    def query(self, command: str, *, patience: float = 120) -> str:
        """A read-only command (condor_q, condor_history, ls), asked again while it fails: the
        schedd of a shared pool may be restarted or busy for a few seconds (a test of another
        session restarts it)."""
        deadline = time.monotonic() + patience
        while True:
            done = self.t.run(["sh", "-c", command], timeout=120, idempotent=True)
            if done.returncode == 0:
                return done.stdout
            if time.monotonic() > deadline:
                raise SystemExit(f"on the access point: {command!r} kept failing: {done.stderr or done.stdout}")
            time.sleep(2)

    def make_file(self, path: str, size: int) -> None:
        self.sh(f"umask 077 && head -c {size} /dev/urandom > {shlex.quote(path)}")

    def submit(self, desc: str, count: int = 1) -> list[str]:
        out = self.sh("condor_submit -terse", input=desc + f"\nqueue {count}\n")
        first, _, last = out.strip().partition(" - ")
        cluster = first.split(".")[0]
        ids = [f"{cluster}.{p}" for p in range(int(first.split(".")[1]), int(last.split(".")[1]) + 1)]
        self.jobs |= set(ids)
        return ids

    def foreign_jobs(self) -> list[str]:
        """Jobs in the pool's queue that are not this script's (another session's tests), held
        ones left out (they take no core and may stay for long)."""
        out = self.query("condor_q -allusers -af ClusterId ProcId JobStatus")
        ids = {".".join(line.split()[:2]) for line in out.splitlines() if line.strip() and line.split()[2:3] != ["5"]}
        return sorted(ids - self.jobs)

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                av = self.cli.availability()
            except SchedulerError:        # the schedd restarted or busy: ask again
                time.sleep(5)
                continue
            if av.free_cores == av.total_cores and not self.foreign_jobs():
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the pool is not idle after {timeout:g} s ({av.free_cores} of {av.total_cores} "
                                 f"cores free; jobs {self.foreign_jobs()}): run the benchmark when nobody uses it")
            time.sleep(5)

    def wait_done(self, ids: list[str], timeout: float = 900) -> dict[str, dict]:
        """Wait until the jobs completed; their history ads. A job removed or held stops the run."""
        attrs = "ClusterId ProcId JobStatus QDate JobStartDate CompletionDate RemoveReason HoldReason " \
                "JobCurrentStartTransferInputDate JobCurrentFinishTransferInputDate"
        deadline = time.monotonic() + timeout
        while True:
            live = self.query(f"condor_q {' '.join(ids)} -af JobStatus HoldReason").splitlines()
            if any(line.startswith("5 ") for line in live):
                raise SystemExit(f"a benchmark job is held: {live}")
            if not live:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"benchmark jobs {ids} did not finish in {timeout:g} s")
            time.sleep(0.2)
        out = self.query(f"condor_history {' '.join(ids)} -json -attributes {attrs.replace(' ', ',')}")
        ads = {f"{a['ClusterId']}.{a['ProcId']}": a for a in json.loads(out or "[]")}
        for jid, ad in ads.items():
            if ad.get("JobStatus") != 4:
                raise SystemExit(f"job {jid} did not complete ({ad.get('RemoveReason')}): someone removed it? rerun")
        return ads

    def xfer_seconds(self, jid: str, ad: dict) -> tuple[float | None, float | None, str]:
        """(input seconds, output seconds, source) of one job: the shadow's own statistics when
        its log can be read, else the job ad's input transfer dates (whole seconds)."""
        log = self.sh("condor_config_val SHADOW_STATS_LOG 2>/dev/null || true").strip()
        text = self.sh(f"grep -F {shlex.quote(f'({jid}) (')} {shlex.quote(log)} 2>/dev/null || true") if log else ""
        found = {}
        for line in text.splitlines():
            m = re.search(r"\): File Transfer (Upload|Download): JobId: \S+ files: \d+ bytes: (\d+) seconds: ([\d.]+)",
                          line)
            if m and "peer stats" not in line:
                found[m.group(1)] = float(m.group(3))
        if found:
            return found.get("Upload"), found.get("Download"), "shadow"
        start, end = ad.get("JobCurrentStartTransferInputDate"), ad.get("JobCurrentFinishTransferInputDate")
        return (end - start if start and end else None), None, "job ad"

    def close(self) -> None:
        """Remove this script's jobs still queued (only its own) and everything it wrote."""
        ids = " ".join(sorted(self.jobs))
        deadline = time.monotonic() + 120
        while ids:        # again while the schedd does not answer: a job left behind in a
            self.t.run(["sh", "-c", f"condor_rm {ids}"], timeout=60)   # removed folder would sit held
            done = self.t.run(["sh", "-c", f"condor_q {ids} -af JobStatus"], timeout=60)
            if done.returncode == 0 and set(done.stdout.split()) <= {"3"}:
                break
            if time.monotonic() > deadline:
                print(f"could not remove the jobs {ids}; the folder {self.base} is left", file=sys.stderr)
                return
            time.sleep(3)
        self.t.run(["rm", "-rf", self.base], timeout=300)
        self.t.close()


# ---------------------------------------------------------------------------- 1. chirp per file

def chirp_per_file(ap: AP, sizes: list[int], repeat: int) -> list[dict]:
    run = posixpath.join(ap.base, "chirp")
    for sub in ("cache", "p1/outputs"):
        ap.sh(f"mkdir -p {shlex.quote(posixpath.join(run, sub))}")
    for size in sizes:
        ap.make_file(posixpath.join(run, "cache", f"f{size}"), size)
    probe = posixpath.join(run, "probe.py")
    ap.t.write_file(probe, SLOT_PROBE.encode(), mode=0o600)
    pdir = posixpath.join(run, "p1")
    desc = "\n".join([
        "universe = vanilla", "executable = /usr/bin/env", "transfer_executable = false",
        f"arguments = \"python3 probe.py '{json.dumps(sizes, separators=(',', ':'))}' {repeat}\"",
        f"transfer_input_files = {probe}", f"initialdir = {pdir}",
        "should_transfer_files = YES", "when_to_transfer_output = ON_EXIT", "+WantIOProxy = true",
        "output = probe.out", "error = probe.err", "log = probe.log",
        "request_cpus = 1", "request_memory = 1GB", f"request_disk = {max(sizes) * 3 // 1000 + 100000}"])
    ids = ap.submit(desc)
    ap.wait_done(ids)
    text = ap.sh(f"cat {shlex.quote(posixpath.join(pdir, 'probe.out'))}")
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    if not rows:
        raise SystemExit("the chirp probe printed nothing: " + ap.sh(f"cat {shlex.quote(posixpath.join(pdir, 'probe.err'))}"))
    return rows


# ---------------------------------------------------------------------------- 2. file transfer per job

def transfer_per_job(ap: AP, sizes: list[int], repeat: int) -> list[dict]:
    run = posixpath.join(ap.base, "xfer")
    ap.sh(f"mkdir -p {shlex.quote(run)}")
    rows = []
    for size in sizes:
        src = posixpath.join(run, f"f{size}")
        ap.make_file(src, size)
        for i in range(repeat):
            pdir = posixpath.join(run, f"j{size}-{i}")
            ap.sh(f"mkdir -p {shlex.quote(pdir)}")
            desc = "\n".join([
                "universe = vanilla", "executable = /bin/sh", "transfer_executable = false",
                f"arguments = \"-c 'head -c {size} /dev/urandom > out.bin'\"",
                f"transfer_input_files = {src}", "transfer_output_files = out.bin", f"initialdir = {pdir}",
                "should_transfer_files = YES", "when_to_transfer_output = ON_EXIT",
                "log = job.log", "request_cpus = 1", "request_memory = 256MB",
                f"request_disk = {size * 3 // 1000 + 100000}"])
            began = time.time()
            [jid] = ap.submit(desc)
            ad = ap.wait_done([jid])[jid]
            wall = time.time() - began
            t_in, t_out, source = ap.xfer_seconds(jid, ad)
            rows.append({"size": size, "in": t_in, "out": t_out, "source": source, "wall": wall})
    return rows


# ---------------------------------------------------------------------------- 3. a data-heavy bag

def per_task_jobs(ap: AP, tag: str, tasks: int, in_bytes: int, out_bytes: int) -> float:
    run = posixpath.join(ap.base, f"jobs-{tag}")
    ap.sh(f"mkdir -p {shlex.quote(run)} && cd {shlex.quote(run)} && for i in $(seq 0 {tasks - 1}); do "
          f"mkdir -p t$i && head -c {in_bytes} /dev/urandom > t$i/in.bin; done")
    desc = "\n".join([
        "universe = vanilla", "executable = /bin/sh", "transfer_executable = false",
        f"arguments = \"-c 'sha256sum in.bin > md.log && head -c {out_bytes} /dev/urandom > out.bin'\"",
        f"initialdir = {run}/t$(Process)", "transfer_input_files = in.bin",
        "transfer_output_files = md.log, out.bin", "should_transfer_files = YES",
        "when_to_transfer_output = ON_EXIT", f"log = {run}/jobs.log", "request_cpus = 1",
        "request_memory = 256MB", f"request_disk = {(in_bytes + out_bytes) * 2 // 1000 + 100000}"])
    began = time.time()
    ids = ap.submit(desc, tasks)
    ap.wait_done(ids)
    span = time.time() - began
    sizes = ap.sh(f"cd {shlex.quote(run)} && stat -c %s t*/out.bin").split()
    if sizes != [str(out_bytes)] * tasks:
        raise SystemExit(f"per-task jobs: outputs {sizes}, expected {tasks} x {out_bytes}")
    return span


def pilot_site(ap: AP, tmp: Path, tag: str, pilots: int) -> PilotSite:
    sites = tmp / f"sites-{tag}.toml"
    # the transport is the script's own (SSHTransport): the access table only names the folder
    access = f'{{ transport = "ssh", host = "{ap.t.host}", workdir = "{posixpath.join(ap.base, "pilots-" + tag)}" }}'
    sites.write_text(f'[[site]]\nname = "pool"\nkind = "htcondor"\ncores = {pilots}\nclock = {{ base = 2.0 }}\n'
                     f'pilot = {{ mode = "per-task", max_cores = 1, max_pilots = {pilots}, walltime = 900 }}\n'
                     f'access = {access}\n')
    return PilotSite(load_sites(sites)[0], ap.t, ap.cli)


def pilots_run(ap: AP, tmp: Path, tag: str, tasks: int, pilots: int, in_bytes: int, out_bytes: int,
               data: bool) -> float:
    """The bag on resel pilots: inputs sent to the run's cache, every task handed ahead
    round-robin, makespan until every result (its outputs put before it) is on the AP."""
    site = pilot_site(ap, tmp, tag, pilots)
    site.ship_agent()
    cache = posixpath.join(site.run_dir(RUN_KEY), "cache")
    ap.t.makedirs(cache)
    inputs = []
    for i in range(tasks):
        if data:               # sent as the coordinator sends an input: to cache/SHA256, 0400
            local = tmp / f"in-{tag}-{i}"
            blob = os.urandom(in_bytes)
            local.write_bytes(blob)
            digest = hashlib.sha256(blob).hexdigest()
            ap.t.put_file(str(local), posixpath.join(cache, digest), mode=0o400, size=in_bytes, sha256=digest)
            local.unlink()
            inputs.append([{"name": "in.bin", "sha256": digest, "size": in_bytes}])
        else:
            inputs.append([])
    keys: dict[int, list[str]] = {p: [] for p in range(pilots)}
    began = time.time()
    for i in range(tasks):
        p = i % pilots
        site.make_pilot_dir(RUN_KEY, p)
        command = (f"sha256sum in.bin > md.log && head -c {out_bytes} /dev/urandom > out.bin" if data else
                   f"head -c {in_bytes} /dev/urandom | sha256sum > md.log && head -c {out_bytes} /dev/urandom > out.bin")
        doc = {"task": i, "attempt": 0, "command": command, "env": {}, "perf": False, "timeout": None,
               "inputs": inputs[i], "outputs": [{"glob": "md.log"}, {"glob": "out.bin"}] if data else []}
        ap.t.write_file(posixpath.join(site.pilot_dir(RUN_KEY, p), "inbox", f"t{i}-a0.json"), json.dumps(doc).encode())
        keys[p].append(f"t{i}-a0.json")
    jobs = [site.submit_pilot(RUN_KEY, p, 1, 900) for p in range(pilots)]
    ap.jobs |= set(jobs)
    pdirs = [site.pilot_dir(RUN_KEY, p) for p in range(pilots)]
    listing = " ".join(shlex.quote(posixpath.join(d, "results")) for d in pdirs)
    while True:
        found = sum(1 for n in ap.query(f"ls {listing} 2>/dev/null || true").split() if re.fullmatch(r"t\d+-a0\.json", n))
        if found >= tasks:
            break
        if time.time() - began > 900:
            raise SystemExit(f"pilots ({tag}): {found} of {tasks} results after 900 s")
        time.sleep(0.2)
    span = time.time() - began
    for p, d in enumerate(pdirs):
        for name in keys[p]:
            rec = json.loads(ap.t.read_file(posixpath.join(d, "results", name)))
            if rec["outcome"] != "done":
                raise SystemExit(f"pilots ({tag}): {name} {rec['outcome']} ({rec.get('reason')})")
            if data:           # fetched home as the coordinator does, checked against the agent's sha256
                for i, out in enumerate(rec["outputs"]):
                    ap.t.get_file(site.output_path(RUN_KEY, p, name[:-len(".json")], i, out["name"]),
                                  str(tmp / "fetched"), size=out["size"], sha256=out["sha256"])
                if rec["outputs"][1]["size"] != out_bytes:
                    raise SystemExit(f"pilots ({tag}): {name}'s outputs are {rec['outputs']}")
    for p, d in enumerate(pdirs):
        ap.t.write_file(posixpath.join(d, "stop"), b"stop\n")
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if not any(j.state.phase in ("pending", "running") for j in ap.cli.jobs(jobs).values()):
                break
        except SchedulerError:            # the schedd restarted or busy: ask again
            pass
        time.sleep(1)
    return span


# ---------------------------------------------------------------------------- the table

def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(args, sizes, chirp_rows, xfer_rows, bag) -> str:
    out = []
    out.append(f"HTCondor {args.version} pool at {args.where}; {args.repeat} repeats, medians; MB = 10^6 bytes")
    out.append("")
    if chirp_rows:
        out.append("per file                condor_chirp in a running job               HTCondor file transfer, one job per size")
        out.append("size        fetch s   MB/s     put s   MB/s  put+link s   |   input s   MB/s   output s   MB/s   job wall s")
        for size in sizes:
            c = {op: med([r["s"] for r in chirp_rows if r["op"] == op and r["size"] == size])
                 for op in ("fetch", "put", "put_atomic")}
            x = [r for r in xfer_rows if r["size"] == size]
            xin, xout = med([r["in"] for r in x if r["in"] is not None]), med([r["out"] for r in x if r["out"] is not None])
            rate = lambda s: f"{size / MB / s:6.1f}" if s and s > 0 else "     -"   # noqa: E731
            out.append(f"{human(size):>9}  {c['fetch']:8.3f} {rate(c['fetch'])}  {c['put']:8.3f} {rate(c['put'])}"
                       f"  {c['put_atomic']:10.3f}   |  {xin:8.2f} {rate(xin)}   {xout:8.2f} {rate(xout)}"
                       f"   {med([r['wall'] for r in x]):9.2f}")
        getdir = med([r["s"] for r in chirp_rows if r["op"] == "getdir"])
        source = sorted({r["source"] for r in xfer_rows})
        out.append(f"chirp getdir: {getdir:.3f} s.  File transfer seconds from: {', '.join(source)} "
                   "(the shadow's SHADOW_STATS_LOG, 10 ms steps: 0.00 means under 5 ms).")
        out.append("")
    kinds = (("jobs", "one HTCondor job per task (transfer_input/output_files)"),
             ("chirp", "resel pilots, the files over condor_chirp"),
             ("nodata", "resel pilots, same commands, no files declared"))
    counts = sorted(n for n in bag if bag[n]["jobs"])
    if counts:
        out.append(f"a bag of N tasks, {args.in_mb:g} MB in and {args.out_mb:g} MB out each, on {args.pilots} cores "
                   f"({args.pilots} pilots): makespan s, submission -> every output on the AP")
        for n in counts:
            base = med(bag[n]["jobs"])
            out.append(f"N = {n}")
            for kind, name in kinds:
                spans = bag[n][kind]
                out.append(f"  {name:<56} {med(spans):7.2f}  {med(spans) / base:5.2f}x   (runs: "
                           + ", ".join(f"{x:.2f}" for x in spans) + ")")
            share = med(bag[n]["chirp"]) - med(bag[n]["nodata"])
            mb = n * (args.in_mb + args.out_mb)
            out.append(f"  the files' share on the pilots: {share:+.2f} s for {mb:g} MB")
        if len(counts) > 1:
            lo, hi = counts[0], counts[-1]
            per = (hi - lo) / args.pilots
            out.append(f"each task more, per slot (N = {lo} -> {hi}: the start-up of pilots and jobs cancels out): "
                       + ", ".join(f"{kind} {(med(bag[hi][kind]) - med(bag[lo][kind])) / per:.2f} s" for kind, _ in kinds))
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--repeat", type=int, default=3, help="measurements of each kind (3)")
    p.add_argument("--sizes", default=SIZES, help=f"file sizes, decimal K/M/G ({SIZES})")
    p.add_argument("--tasks", default="8,32", help="tasks in the data-heavy bag, one or more sizes (8,32)")
    p.add_argument("--parts", default="files,bag", help="what to measure: files (1 and 2), bag (3) (files,bag)")
    p.add_argument("--pilots", type=int, default=4, help="pilots for the bag, one core each (4: the testbed's pool)")
    p.add_argument("--in-mb", type=float, default=5, help="each task's own input, MB (5)")
    p.add_argument("--out-mb", type=float, default=20, help="each task's output, MB (20)")
    p.add_argument("--root", default="trixie", choices=("trixie", "sid"),
                   help="the testbed's pool: Debian 13's HTCondor 23.9 or sid's 25 (trixie)")
    p.add_argument("--host", help="an access point's SSH alias (default: the testbed's)")
    p.add_argument("--ssh-config", help="the SSH config that names --host")
    p.add_argument("--workdir", default="~/resel-bench", help="a private folder on the access point (with --host)")
    p.add_argument("--wait-idle", type=float, default=900, help="seconds to wait for an idle pool (900)")
    p.add_argument("--json", action="store_true", help="print the raw measurements as JSON too")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    parts = set(args.parts.split(","))
    ap = AP(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # then `finally` removes what it made
    args.version = ap.cli.version()
    args.where = args.host or f"the testbed's {args.root} access point"
    try:
        ap.wait_idle(args.wait_idle)
        ap.sh(f"mkdir -p {shlex.quote(ap.base)} && chmod 700 {shlex.quote(ap.base)}")
        chirp_rows = chirp_per_file(ap, sizes, args.repeat) if "files" in parts else []
        xfer_rows = transfer_per_job(ap, sizes, args.repeat) if "files" in parts else []
        counts = [int(n) for n in args.tasks.split(",")]
        bag: dict[int, dict[str, list[float]]] = {n: {"jobs": [], "chirp": [], "nodata": []} for n in counts}
        in_b, out_b = int(args.in_mb * MB), int(args.out_mb * MB)
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeat if "bag" in parts else 0):     # interleaved: a busy minute hits all
                for n in counts:
                    tag = f"{n}-{r}"
                    ap.wait_idle(args.wait_idle)
                    bag[n]["jobs"].append(per_task_jobs(ap, tag, n, in_b, out_b))
                    ap.wait_idle(args.wait_idle)
                    bag[n]["chirp"].append(pilots_run(ap, Path(tmp), "c" + tag, n, args.pilots, in_b, out_b, True))
                    ap.wait_idle(args.wait_idle)
                    bag[n]["nodata"].append(pilots_run(ap, Path(tmp), "n" + tag, n, args.pilots, in_b, out_b, False))
        print(table(args, sizes, chirp_rows, xfer_rows, bag))
        if args.json:
            print(json.dumps({"chirp": chirp_rows, "transfer": xfer_rows, "bag": bag}))
    finally:
        ap.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
