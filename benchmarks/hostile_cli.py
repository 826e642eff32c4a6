"""Hostile inputs through the installed ``resel`` command: tracebacks, hangs and wrong exits.

Several hundred malformed or hostile inputs — bags, sites files, SWF traces, run stores and option
values — each run as a whole ``resel`` process with a time limit (10 s by default), the way a user
or a script meets them. Each case says what a correct resel does with it: refuse it (``fail``: an
exit status other than 0, one clear error, no traceback), take it (``ok``: exit 0), or either
(``any``: the input is odd but legal). The table counts per family:

* **traceback**: a Python traceback on stdout or stderr (an error resel did not expect);
* **hang**: still running at the time limit (killed);
* **wrong exit 0**: a ``fail`` case that exited 0 (bad input taken silently);
* **refused**: an ``ok`` case that failed (good input refused).

``--resel PATH`` runs another installation (e.g. ``/tmp/before/bin/resel`` for the code before a
change) on the very same cases, so a before/after table comes from two runs of one script.

    python benchmarks/hostile_cli.py                              # the resel beside this interpreter
    python benchmarks/hostile_cli.py --resel /tmp/before/bin/resel --json > before.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"
JOB = "%d %d 5 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 1 -1 -1\n"


@dataclass
class Case:
    family: str
    name: str
    argv: list[str]
    expect: str                      # fail | ok | any
    outcome: str = ""
    seconds: float = 0.0
    detail: str = ""
    rc: int | None = None


@dataclass
class Cases:
    root: Path
    items: list[Case] = field(default_factory=list)

    def add(self, family: str, name: str, argv: list[str], expect: str = "fail") -> None:
        self.items.append(Case(family, name, [str(a) for a in argv], expect))

    def file(self, name: str, content: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogatepass")
        path.write_bytes(content)
        return path


# ------------------------------------------------------------------ bags


def bag(command: str = "true", *, name: str = "b", count: str = "4", profile: str = "instructions = 1e12",
        extra: str = "") -> str:
    return f'[bag]\nname = {json.dumps(name)}\ncommand = {json.dumps(command)}\ncount = {count}\n{extra}\n[bag.profile]\n{profile}\n'


def bag_cases(c: Cases) -> None:
    sim = ["simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--no-store"]
    bad = {
        "blank command": bag("   "), "empty command": bag(""), "tab-newline command": bag("\t\n"),
        "command 1 MB": bag("a" * (1 << 20)), "command 10 MB": bag("a" * (10 << 20)),
        "command 200 KB of words": bag("x " * 100_000),
        "width placeholder": bag("echo {index:999999999}"), "huge width digits": bag("echo {index:" + "9" * 5000 + "}"),
        "bad format spec": bag("echo {index:q}"), "dollar placeholder": bag("echo ${index}"),
        "old escape": bag("echo ${{HOME}}"), "misspelt placeholder": bag("echo {idx}"),
        "count 0": bag(count="0"), "count -1": bag(count="-1"), "count huge": bag(count="99999999999999999999"),
        "count float": bag(count="4.5"), "count string": bag(count='"4"'), "count bool": bag(count="true"),
        "count 2e9": bag(count="2000000000"),
        "instructions nan": bag(profile="instructions = nan"), "instructions inf": bag(profile="instructions = inf"),
        "instructions 0": bag(profile="instructions = 0"), "instructions -1": bag(profile="instructions = -1"),
        "instructions 1e300": bag(profile="instructions = 1e300"), "instructions string": bag(profile='instructions = "x"'),
        "ipc 0": bag(profile="instructions = 1e9\nipc = 0"), "ipc nan": bag(profile="instructions = 1e9\nipc = nan"),
        "no profile": '[bag]\nname = "b"\ncommand = "true"\ncount = 4\n',
        "no bag": "x = 1\n", "unknown key": bag(extra="colour = 1"), "name control chars": bag(name="a\x1b[31mb"),
        "name empty": bag(name=""), "cores_per_task 0": bag(extra="cores_per_task = 0"),
        "cores_per_task huge": bag(extra="cores_per_task = 99999999999"),
        "perf_every -1": bag(extra="perf_every = -1"),
        "site_commands not table": bag(extra='site_commands = "x"'),
        "site_commands blank": bag(extra='[bag.site_commands]\nx = "  "'),
        "site_commands unknown site": bag(extra='[bag.site_commands]\nnosuch = "true"'),
        "site_commands long": bag(extra='[bag.site_commands]\nbridges = "' + "a" * 200_000 + '"'),
        "toml syntax": "[bag\nname=",
        "deep nesting": "x = " + "[" * 5000 + "]" * 5000 + "\n",
        "deep tables": "".join(f"[{'a.' * i}b]\n" for i in range(1, 200)),
        "not utf8": b"[bag]\nname = \"\xff\xfe\"\n",
        "nul bytes": "[bag]\nname = \"a\x00b\"\n",
        "empty file": "", "only comment": "# nothing\n",
        "huge file": "# " + "x" * (17 << 20) + "\n",
        "binary": bytes(range(256)) * 100,
        "bom": "\ufeff" + bag(),
        "bag is array": "bag = [1, 2]\n",
        "isa number": bag(extra="isa = 5"),
    }
    for name, text in bad.items():
        expect = "ok" if name in ("bom",) else "fail"
        c.add("bag", name, [*sim, c.file(f"bags/{len(c.items)}.toml", text)], expect)
    c.add("bag", "bag is a folder", [*sim, c.root], "fail")
    c.add("bag", "bag missing", [*sim, c.root / "nope.toml"], "fail")
    c.add("bag", "bag /dev/zero", [*sim, "/dev/zero"], "fail")
    c.add("bag", "bag /dev/null", [*sim, "/dev/null"], "fail")
    good = c.file("bags/good.toml", bag("gmx mdrun -deffnm md{index:04d}"))
    c.add("bag", "good bag", [*sim, good], "ok")
    c.add("bag", "model predict good bag", ["model", "predict", good, "--db", c.root / "empty.db"], "fail")


# ------------------------------------------------------------------ sites


def site(kind: str = "simulated", extra: str = "", *, name: str = "s", cores: str = "8", clock: str = "{ base = 2.0 }",
         access: str = "") -> str:
    text = f'[[site]]\nname = {json.dumps(name)}\nkind = "{kind}"\ncores = {cores}\nclock = {clock}\n{extra}\n'
    if access:
        text += f"[site.access]\n{access}\n"
    return text


def live(kind: str, access: str) -> str:
    return site(kind, 'pilot = { mode = "single", max_cores = 2, walltime = 600 }',
                access='transport = "local"\nworkdir = "/tmp/resel-hostile-w"\n' + access)


def sites_cases(c: Cases) -> None:
    show = ["sites", "show"]
    sim_sites = ["simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model,reselect", "--no-store"]
    bad = {
        "kind unknown": site("cloud"), "cores 0": site(cores="0"), "cores -4": site(cores="-4"),
        "cores huge": site(cores="99999999999999"), "cores float": site(cores="2.5"),
        "clock nan": site(clock="{ base = nan }"), "clock 0": site(clock="{ base = 0 }"),
        "clock inf": site(clock="{ base = inf }"), "clock string": site(clock='{ base = "fast" }'),
        "clock missing base": site(clock="{ avg = 2.0 }"), "clock number": site(clock="2.0"),
        "kappa 0": site(extra="kappa = 0"), "kappa 1e308": site(extra="kappa = 1e308"),
        "wait -1": site(extra="wait = -1"), "wait nan": site(extra="wait = nan"),
        "wait lognormal sigma huge": site(extra='wait = { dist = "lognormal", mu = 1, sigma = 1e10 }'),
        "wait unknown dist": site(extra='wait = { dist = "cauchy" }'),
        "wait empirical empty": site(extra='wait = { dist = "empirical", values = [] }'),
        "wait empirical strings": site(extra='wait = { dist = "empirical", values = ["a"] }'),
        "wait uniform reversed": site(extra='wait = { dist = "uniform", low = 10, high = 1 }'),
        "truth fail 2": site(extra="[site.truth]\nfail = 2"), "truth ipc 0": site(extra="[site.truth]\nipc = 0"),
        "truth clock -1": site(extra="[site.truth]\nclock = -1"),
        "pilot max_cores 0": site(extra='pilot = { mode = "single", max_cores = 0 }'),
        "pilot mode bad": site(extra='pilot = { mode = "many" }'),
        "pilot walltime nan": site(extra='pilot = { mode = "single", walltime = nan }'),
        "queue trace missing": site(extra='[site.queue]\npolicy = "easy"\ntrace = "nope.swf"'),
        "queue policy bad": site(extra='[site.queue]\npolicy = "lifo"\ntrace = "x.swf"'),
        "queue load 0": site(extra='[site.queue]\npolicy = "easy"\ntrace = "x.swf"\nload = 0'),
        "name duplicate": site(name="a") + site(name="a"), "no sites": "x = 1\n", "site not table": "site = 5\n",
        "name control": site(name="a\x07b"),
        "sbatch -vo": live("slurm", 'sbatch_options = ["-vo/tmp/x"]'),
        "sbatch -vJ1": live("slurm", 'sbatch_options = ["-vJ1"]'),
        "sbatch positional": live("slurm", 'sbatch_options = ["/tmp/evil.sh"]'),
        "sbatch exclusive user": live("slurm", 'sbatch_options = ["--exclusive", "user"]'),
        "sbatch comment last": live("slurm", 'sbatch_options = ["--comment"]'),
        "sbatch double dash": live("slurm", 'sbatch_options = ["--"]'),
        "sbatch colon": live("slurm", 'sbatch_options = [":"]'),
        "sbatch newline": live("slurm", 'sbatch_options = ["--comment=a\\n#SBATCH -o /tmp/x"]'),
        "sbatch --out": live("slurm", 'sbatch_options = ["--out=x"]'),
        "sbatch ambiguous": live("slurm", 'sbatch_options = ["--no"]'),
        "sbatch unknown": live("slurm", 'sbatch_options = ["--frobnicate=1"]'),
        "sbatch -M": live("slurm", 'sbatch_options = ["-M", "other"]'),
        "sbatch empty item": live("slurm", 'sbatch_options = [""]'),
        "sbatch not list": live("slurm", 'sbatch_options = "--mem=1G"'),
        "qsub positional": live("pbs", 'qsub_options = ["/tmp/evil.sh"]'),
        "qsub -hN": live("pbs", 'qsub_options = ["-hN", "x"]'),
        "qsub walltime": live("pbs", 'qsub_options = ["-l", "walltime=1:00:00"]'),
        "qsub -pe": live("pbs", 'dialect = "torque"\nqsub_options = ["-pe", "shm", "4"]'),
        "qsub block": live("pbs", 'qsub_options = ["-W", "block=true"]'),
        "qsub -l last": live("pbs", 'qsub_options = ["-l"]'),
        "qsub torque shell": live("pbs", 'dialect = "torque"\nqsub_options = ["-M", "a;touch /tmp/x"]'),
        "condor executable": live("htcondor", 'submit_lines = { executable = "/bin/sh" }'),
        "condor initialdir": live("htcondor", 'submit_lines = { initialdir = "/tmp" }'),
        "condor +JobBatchName": live("htcondor", "submit_lines = { \"+JobBatchName\" = '\"x\"' }"),
        "condor acct user": live("htcondor", 'submit_lines = { accounting_group_user = "x" }'),
        "condor container_image": live("htcondor", 'submit_lines = { container_image = "/tmp/x.sif" }'),
        "condor newline": live("htcondor", 'submit_lines = { request_memory = "1GB\\nexecutable = /bin/sh" }'),
        "condor bad key": live("htcondor", 'submit_lines = { "request memory" = "1GB" }'),
        "setup newline": live("slurm", 'setup = ["a\\nb"]'), "setup blank": live("slurm", 'setup = ["  "]'),
        "env bad name": live("slurm", 'env = { "A-B" = "1" }'), "port 0": live("slurm", 'port = 0'),
        "transport bad": live("slurm", 'transport = "telnet"').replace('transport = "local"\n', "", 1),
        "rest url file": live("slurm", 'api = "rest"\nrest_url = "file:///etc/passwd"'),
        "user shell": live("slurm", 'user = "a;b"'), "partition shell": live("slurm", 'partition = "a b"'),
        "workdir missing": site("slurm", 'pilot = { mode = "single", max_cores = 2, walltime = 600 }',
                                access='transport = "local"'),
        "api wrong kind": live("pbs", 'api = "rest"'), "dialect bad": live("pbs", 'dialect = "sge"'),
        "sbatch on pbs": live("pbs", 'sbatch_options = ["--mem=1G"]'),
        "not utf8": b'[[site]]\nname = "\xff"\n', "empty": "", "huge": "#" + "x" * (17 << 20),
    }
    for name, text in bad.items():
        path = c.file(f"sites/{len(c.items)}.toml", text)
        c.add("sites", name, [*show, "--sites", path], "fail")
    ok = {
        "sbatch fine": live("slurm", 'sbatch_options = ["--mem=8G", "--comment", "/tmp/x", "--exclusive=user", "-vk"]'),
        "qsub fine": live("pbs", 'qsub_options = ["-l", "mem=4gb", "-m", "n"]'),
        "condor fine": live("htcondor", 'submit_lines = { request_memory = "4GB", "+SingularityImage" = \'"/cvmfs/x"\' }'),
        "simulated fine": site(extra="wait = 60"),
    }
    for name, text in ok.items():
        c.add("sites", name, [*show, "--sites", c.file(f"sites/{len(c.items)}.toml", text)], "ok")
    # a queue-driven site on a hostile trace, through a whole simulation
    for name, trace in (("no newline 8 MB", b"1 " * (4 << 20)), ("maxprocs -5", b"; MaxProcs: -5\n" + JOB.encode() % (1, 1)),
                        ("garbage", os.urandom(4096)), ("empty", b"")):
        tpath = c.file(f"sites/trace-{len(c.items)}.swf", trace)
        spath = c.file(f"sites/{len(c.items)}.toml", site(extra=f'[site.queue]\npolicy = "easy"\ntrace = "{tpath}"'))
        c.add("sites", f"queue trace {name}", [*sim_sites, "--sites", spath],
              "fail" if name not in ("maxprocs -5", "empty") else "any")


# ------------------------------------------------------------------ SWF traces


def swf_cases(c: Cases) -> None:
    jobs = "".join(JOB % (i, i) for i in range(1, 6))
    head = "; MaxProcs: 8\n"
    files = {
        "no newline 8 MB": (b"1 " * (4 << 20), "fail"), "no newline 64 MB": (b"1 " * (32 << 20), "fail"),
        "comment 8 MB no newline": (b"; " + b"x" * (8 << 20), "fail"),
        "header 5 MB of comments": (b"; Note: x\n" * 520_000 + jobs.encode(), "fail"),
        "maxprocs -5": (("; MaxProcs: -5\n" + jobs).encode(), "fail"), "maxprocs 0": (("; MaxProcs: 0\n" + jobs).encode(), "fail"),
        "maxprocs abc": (("; MaxProcs: abc\n" + jobs).encode(), "fail"),
        "maxprocs huge": (("; MaxProcs: 99999999999999999999999\n" + jobs).encode(), "fail"),
        "maxprocs -1": (("; MaxProcs: -1\n" + jobs).encode(), "fail"), "no maxprocs": (jobs.encode(), "fail"),
        "empty": (b"", "fail"), "only comments": (b"; x\n; y\n", "fail"), "binary": (os.urandom(65536), "fail"),
        "nul bytes": ((head + jobs).encode().replace(b" ", b"\x00", 3), "fail"),
        "17 fields": ((head + "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n").encode(), "fail"),
        "huge number": ((head + "1 " + "9" * 5000 + " 5 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 1 -1 -1\n").encode(), "fail"),
        "inf field": ((head + JOB.replace("%d %d", "1 inf") ).encode(), "fail"),
        "nan field": ((head + JOB.replace("%d %d", "1 nan")).encode(), "fail"),
        "unsorted": ((head + JOB % (1, 100) + JOB % (2, 5)).encode(), "fail"),
        "not utf8": ((head + jobs).encode() + b"\xff\xfe 1 2\n", "fail"),
        "crlf": ((head + jobs).replace("\n", "\r\n").encode(), "ok"), "bom": (b"\xef\xbb\xbf" + (head + jobs).encode(), "ok"),
        "tabs": ((head + jobs).replace(" ", "\t").encode(), "ok"),
        "gz damaged": (gzip.compress((head + jobs).encode())[:30], "fail"), "zstd": (b"\x28\xb5\x2f\xfd" + b"x" * 20, "fail"),
        "negative run": ((head + JOB.replace(" 5 100 ", " 5 -100 ") % (1, 1)).encode(), "any"),
        "negative submit": ((head + JOB % (1, -5)).encode(), "any"),
        "prev list": ((head + JOB.replace(" 1 -1 -1\n", " 1 1&2&3 -1\n") % (1, 1)).encode(), "ok"),
        "many repeated keys": (b"".join(b"; Queue: q%d\n" % i for i in range(100_000)) + (head + jobs).encode(), "ok"),
        "200k jobs": ((head + "".join(JOB % (i, i) for i in range(1, 200_001))).encode(), "ok"),
        "20k jobs all waiting": ((head + "".join(JOB % (i, i) for i in range(1, 20_001))).encode(), "ok"),
    }
    for name, (content, expect) in files.items():
        path = c.file(f"swf/{len(c.items)}.swf", content)
        # 200k jobs that all wait: EASY scans the queue at every pass (see the report), FCFS does not
        c.add("swf", f"replay {name}", ["replay", path, "--policy", "fcfs" if name == "200k jobs" else "easy"], expect)
        if name in ("no newline 8 MB", "maxprocs -5", "binary", "unsorted", "empty"):
            # with --cores the header's MaxProcs is not read, and an empty trace is 0 jobs
            legal = "any" if name in ("maxprocs -5", "empty") else "fail"
            c.add("swf", f"replay fcfs {name}", ["replay", path, "--policy", "fcfs", "--cores", "8"], legal)
            c.add("swf", f"replay conservative {name}", ["replay", path, "--policy", "conservative", "--cores", "8",
                                                         "--status", "1"], legal)
    tail = c.file("swf/first.swf", (head + jobs).encode() + b"7 " * (32 << 20))
    for policy in ("fcfs", "easy", "conservative"):
        c.add("swf", f"--first 3 before a 64 MB line ({policy})", ["replay", tail, "--policy", policy, "--first", "3"], "ok")
    c.add("swf", "--first 3 with --status", ["replay", tail, "--first", "3", "--status", "1"], "ok")
    good = c.file("swf/good.swf", (head + jobs).encode())
    for opt in (["--cores", "0"], ["--cores", "-1"], ["--cores", "99999999999999999999"], ["--speed", "nan"],
                ["--speed", "inf"], ["--speed", "0"], ["--speed", "-1"], ["--tau", "nan"], ["--tau", "0"],
                ["--tau", "a,b"], ["--first", "0"], ["--first", "-1"], ["--first", "99999999999999999999999"],
                ["--status", "a"], ["--policy", "lifo"],
                ["--output", c.root], ["--output", good], ["--skip-bad", "--first", "nan"]):
        c.add("swf", f"replay {' '.join(map(str, opt))}", ["replay", good, *opt], "fail")
    c.add("swf", "replay good", ["replay", good, "--json"], "ok")
    c.add("swf", "replay /dev/zero", ["replay", "/dev/zero", "--cores", "8"], "fail")
    c.add("swf", "replay a folder", ["replay", c.root, "--cores", "8"], "fail")
    c.add("swf", "replay missing", ["replay", c.root / "nope.swf"], "fail")
    for spec in ("a:0", "a:-1", "a:nan", "a:8:0", "a:8:nan", "a:8:1:lifo", "a", "a:8:1:easy:x", ":8",
                 "a:99999999999999999999"):
        c.add("swf", f"grid --cluster {spec}", ["grid", good, "--cluster", spec, "--cluster", "b:8"], "fail")
    c.add("swf", "grid no newline", ["grid", c.root / "swf/0.swf", "--cluster", "a:8", "--cluster", "b:8"], "fail")
    c.add("swf", "grid --first 3 before a 64 MB line", ["grid", tail, "--cluster", "a:8", "--cluster", "b:8",
                                                        "--first", "3"], "ok")
    c.add("swf", "history import no newline", ["history", "import", c.root / "swf/0.swf", "--site", "x", "--db",
                                               c.root / "hist.db"], "fail")
    c.add("swf", "history import maxprocs -5", ["history", "import", c.root / "swf/8.swf", "--site", "x", "--db",
                                                c.root / "hist.db"], "any")
    if TRACES.is_dir():
        c.add("swf", "replay wagap", ["replay", TRACES / "wagap-2013.swf", "--policy", "easy", "--cores", "2176"], "ok")


# ------------------------------------------------------------------ option values


def option_cases(c: Cases) -> None:
    sim = ["simulate", "--sizes", "4", "--repeat", "1", "--no-store"]
    values = {
        "--risk": ["nan", "inf", "-inf", "0.3", "1", "x", "0.99999"], "--sizes": ["0", "-1", "nan", "", ",", "1e30",
                                                                             "99999999999999999999", "4,a"],
        "--repeat": ["0", "-1", "99999999", "x"], "--seed": ["99999999999999999999999", "x", "nan"],
        "--workers": ["0", "-1", "99999"], "--clock": ["turbo"], "--objective": ["p99"], "--walltime": ["x"],
        "--model": ["x"], "--strategies": ["failover:1000000", "failover:10000000", "failover:10000001",
                                          "failover:-1", "failover:nan", "failover:1e3", "topk:0", "topk:-1",
                                          "topk:99999999999999999999", "race:0", "rebroker:nan", "queue:x", "x",
                                          "", ",", "model+model", "random+reselect+reselect", "topk:2.5",
                                          "failover:inf", "race:99999999999999999999999"],
        "--dask": ["tls://127.0.0.1:1", "ucx://x", "", "127.0.0.1:0"],
        "--plot": ["/dev/null/x"], "--sites": ["/dev/null", "/dev/zero"],
    }
    ok_values = {("--strategies", "failover:1000000"), ("--strategies", "failover:10000000"),
                 ("--strategies", "failover:1e3"), ("--risk", "0.99")}
    # K beyond the sites there are is every site: legal
    legal = {("--strategies", "topk:99999999999999999999"), ("--strategies", "race:99999999999999999999999")}
    for opt, vals in values.items():
        for v in vals:
            expect = "ok" if (opt, v) in ok_values else "any" if (opt, v) in legal else "fail"
            # --dask is the other half of issue 24: its own family, so that it can be told apart
            c.add("dask" if opt == "--dask" else "options", f"simulate {opt} {v!r}", [*sim, opt, v], expect)
    for cmd in (["run"], ["plan"]):
        for v in ("nan", "inf", "0.3"):
            c.add("options", f"{cmd[0]} --risk {v}", [*cmd, "x.toml", "--risk", v], "fail")
    db = c.root / "opt.db"
    for opt in (["runs", "--limit", "0"], ["runs", "--limit", "99999999999999999999999"], ["report", "0"],
                ["report", "99999999999999999999999"], ["report", "-1"], ["report", "x"], ["report", "1", "--decisions", "-1"],
                ["model", "fit", "--runs", "99999999999999999999999"], ["model", "fit", "--runs", "a,b"],
                ["model", "fit", "--runs", "-1"], ["model", "fit", "--runs", "0"], ["model", "fit", "--holdout", "nan"],
                ["model", "fit", "--holdout", "1"], ["model", "predict", "x.toml", "--level", "nan"],
                ["status", "99999999999999999999999"], ["cancel", "99999999999999999999999"],
                ["history", "show", "--site", "x"]):
        c.add("options", " ".join(opt), [*opt, "--db", db], "fail")


# ------------------------------------------------------------------ run stores


def store_cases(c: Cases, resel: str) -> None:
    base = c.root / "base.db"
    subprocess.run([resel, "simulate", "--sizes", "4", "--repeat", "1", "--strategies", "model", "--db", base, "--json"],
                   capture_output=True, timeout=120)
    if not base.exists():
        return
    bag_spec = json.dumps({"name": "gmx", "command": "gmx mdrun", "count": 4, "cores_per_task": 1,
                           "profile": {"instructions": 1e12, "cycles": None, "ipc": None, "baseline": "x"}})
    sites = json.dumps([{"name": "s", "kind": "slurm", "cores": 8, "clock": {"base": 2.0, "avg": None}, "kappa": 1.0}])

    def variant(name: str, *, bag: str = bag_spec, site_json: str = sites, rows: list[tuple] | None = None,
                sql: str = "") -> Path:
        path = c.root / f"stores/{name.replace(' ', '_')}.db"
        path.parent.mkdir(exist_ok=True)
        shutil.copy(base, path)
        con = sqlite3.connect(path)
        rid = con.execute("insert into runs (created, mode, bag, strategy, size, status, bag_spec, sites) values "
                          "('2024-01-01T00:00:00', 'live', 'gmx', 'model', 4, 'done', ?, ?)", (bag, site_json)).lastrowid
        for task, (site, start, end, perf) in enumerate(rows or [("s", 0.0, 100.0, None), ("s", 0.0, 110.0, None),
                                                                 ("s", 0.0, 90.0, None)]):
            con.execute("insert into attempts (run_id, task, attempt, site, pilot, start, end, outcome, perf) "
                        "values (?, ?, 1, ?, 1, ?, ?, 'done', ?)", (rid, task, site, start, end, perf))
        if sql:
            con.executescript(sql.replace("RID", str(rid)))
        con.commit()
        con.close()
        return path

    hostile = {
        "good live run": (variant("good"), "ok"),
        "attempt times strings": (variant("s", rows=[("s", "abc", "xyz", None)] * 3), "fail"),
        "attempt end inf": (variant("inf", rows=[("s", 0.0, float("inf"), None)] * 3), "fail"),
        "attempt end -inf": (variant("-inf", rows=[("s", float("-inf"), 5.0, None)] * 3), "fail"),
        "attempt end 1e300": (variant("huge", rows=[("s", 0.0, 1e300, None)] * 3), "fail"),
        "attempt end 2**70": (variant("huge int", rows=[("s", 0, 2 ** 62, None)] * 3), "any"),
        "attempt end blob": (variant("blob", rows=[("s", 0.0, b"\x00\x01", None)] * 3), "fail"),
        "attempt site blob": (variant("site blob", rows=[(b"\xff\x00", 0.0, 10.0, None)] * 3), "fail"),
        # (the column is TEXT: SQLite stores 5 as '5', a legal name)
        "attempt site int": (variant("site int", rows=[(5, 0.0, 10.0, None)] * 3), "any"),
        "attempt site null": (variant("site null", rows=[(None, 0.0, 10.0, None)] * 3), "fail"),
        "perf not dict": (variant("perf", rows=[("s", 0.0, 10.0, "[1, 2]")] * 3), "any"),
        "perf strings": (variant("perf2", rows=[("s", 0.0, 10.0, '{"instructions": "x", "cycles": "y"}')] * 3), "any"),
        "perf huge": (variant("perf3", rows=[("s", 0.0, 10.0, '{"instructions": 1e308, "cycles": 1e-308}')] * 3), "any"),
        "perf nan": (variant("perf4", rows=[("s", 0.0, 10.0, '{"instructions": NaN, "cycles": Infinity}')] * 3), "any"),
        "sites not json": (variant("sj", site_json="not json"), "fail"),
        "sites a number": (variant("sj2", site_json="5"), "fail"),
        "sites list of ints": (variant("sj3", site_json="[1, 2]"), "fail"),
        "sites dict": (variant("sj4", site_json='{"a": 1}'), "fail"),
        "sites name int": (variant("sj5", site_json='[{"name": 5, "clock": {"base": 2}}]'), "fail"),
        "sites no name": (variant("sj6", site_json='[{"clock": {"base": 2}}]'), "fail"),
        "sites clock string": (variant("sj7", site_json='[{"name": "s", "clock": "fast"}]'), "fail"),
        "sites clock nan": (variant("sj8", site_json='[{"name": "s", "clock": {"base": NaN}}]'), "fail"),
        "sites kappa string": (variant("sj9", site_json='[{"name": "s", "clock": {"base": 2}, "kappa": "x"}]'), "fail"),
        "bag_spec not json": (variant("bj", bag="nope"), "fail"),
        "bag_spec list": (variant("bj2", bag="[]"), "fail"),
        "bag_spec instructions string": (variant("bj3", bag='{"command": "x", "profile": {"instructions": "x"}}'), "fail"),
        "bag_spec instructions nan": (variant("bj4", bag='{"command": "x", "profile": {"instructions": NaN}}'), "fail"),
        "bag_spec command int": (variant("bj5", bag='{"command": 5, "profile": {"instructions": 1e9}}'), "any"),
        "bag_spec command 10 MB": (variant("bj6", bag=json.dumps({"command": "a" * (10 << 20), "profile": {"instructions": 1e9}})), "any"),
        "run id blob": (variant("rb", sql="update attempts set run_id = X'00' where task = 0"), "any"),
        "mode blob": (variant("mb", sql="update runs set mode = X'6c697665' where id = RID"), "any"),
    }
    for name, (path, expect) in hostile.items():
        c.add("store", f"model fit: {name}", ["model", "fit", "--db", path], expect)
    fitted = variant("fitted")
    subprocess.run([resel, "model", "fit", "--db", fitted], capture_output=True, timeout=120)
    fits = {
        "fit not json": "update model_fits set fit = 'nope'",
        "fit a list": "update model_fits set fit = '[1]'",
        "fit site not dict": "update model_fits set fit = '{\"s\": 5}'",
        "fit values strings": "update model_fits set fit = '{\"s\": {\"kappa\": \"x\", \"clock_ghz_eff\": \"y\", \"ipc\": \"z\", \"clock_ghz\": \"w\", \"rate_s_per_instr\": \"v\", \"n\": \"u\", \"n_counted\": \"t\", \"methods\": 5, \"residuals\": [\"a\"]}}'",
        "fit residuals strings": "update model_fits set fit = json_set(fit, '$.s.residuals', json('[\"a\", \"b\"]'))",
        "fit residuals nan": "update model_fits set fit = json_set(fit, '$.s.residuals', json('[1e999, 1]'))",
        "runs not json": "update model_fits set runs = 'x'",
        "runs dict": "update model_fits set runs = '{\"a\": 1}'",
        "application blob": "update model_fits set application = X'ff00'",
        "label blob": "update model_fits set baseline_label = X'ff00'",
        "created blob": "update model_fits set created = X'ff00'",
        "n_evidence string": "update model_fits set n_evidence = 'x'",
        "evaluation bad": "update model_fits set evaluation = '{\"n\": 1}'",
        "lim bad": "update model_fits set lim = '[1]'",
    }
    for name, sql in fits.items():
        path = c.root / f"stores/fit-{len(c.items)}.db"
        shutil.copy(fitted, path)
        con = sqlite3.connect(path)
        try:
            con.executescript(sql)
        except sqlite3.Error:
            pass
        con.commit()
        con.close()
        c.add("store", f"model show: {name}", ["model", "show", "--db", path], "fail")
        c.add("store", f"model show --json: {name}", ["model", "show", "--json", "--db", path], "fail")
        c.add("store", f"model predict: {name}", ["model", "predict", c.root / "bags/good.toml", "--db", path], "fail")
    c.add("store", "model show good", ["model", "show", "--db", fitted], "ok")
    for name, sql in {"bag blob": "update runs set bag = X'ff00'", "ttc string": "update runs set ttc_wkd = 'x'",
                      "per_site bad": "update runs set per_site = '[1'", "audit bad": "update runs set audit = '5'",
                      "created blob": "update runs set created = X'00'", "size huge": "update runs set size = 9e999",
                      "strategy blob": "update runs set strategy = X'1b5b33316d'"}.items():
        path = c.root / f"stores/run-{len(c.items)}.db"
        shutil.copy(base, path)
        con = sqlite3.connect(path)
        con.executescript(sql)
        con.commit()
        con.close()
        c.add("store", f"runs: {name}", ["runs", "--db", path], "any")
        c.add("store", f"report 1: {name}", ["report", "1", "--db", path], "any")
    for name, content in {"not sqlite": b"hello", "empty": b"", "sqlite foreign": None}.items():
        path = c.root / f"stores/x-{len(c.items)}.db"
        if content is None:
            con = sqlite3.connect(path)
            con.execute("create table t (a)")
            con.commit()
            con.close()
        else:
            path.write_bytes(content)
        c.add("store", f"runs on {name}", ["runs", "--db", path], "fail" if name != "empty" else "any")
        c.add("store", f"model fit on {name}", ["model", "fit", "--db", path], "fail")


# ------------------------------------------------------------------ running


def run_case(resel: str, case: Case, timeout: float, cwd: Path) -> Case:
    start = time.monotonic()
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "RESEL_DB": str(cwd / "default.db")}
    env.pop("RESEL_LOG", None)
    try:
        done = subprocess.run([resel, *case.argv], capture_output=True, timeout=timeout, cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        case.outcome, case.seconds = "hang", time.monotonic() - start
        return case
    case.seconds, case.rc = time.monotonic() - start, done.returncode
    text = (done.stdout[-20000:] + done.stderr[-20000:]).decode("utf-8", "replace")
    if "Traceback (most recent call last)" in text:
        case.outcome = "traceback"
        lines = [line for line in text.splitlines() if line.strip()]
        case.detail = lines[-1][:200] if lines else ""
    elif case.expect == "fail" and done.returncode == 0:
        case.outcome = "wrong exit 0"
    elif case.expect == "ok" and done.returncode != 0:
        case.outcome, case.detail = "refused", text.strip().splitlines()[-1][:200] if text.strip() else ""
    else:
        case.outcome = "ok"
    return case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resel", default=str(Path(sys.executable).with_name("resel")), help="the resel command to run")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a case may take (default 10)")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--only", default=None, help="only the families (comma-separated) or names holding this text")
    ap.add_argument("--json", action="store_true", help="print every case as JSON")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="resel-hostile-") as tmp:
        c = Cases(Path(tmp))
        for make in (bag_cases, sites_cases, swf_cases, option_cases):
            make(c)
        store_cases(c, args.resel)
        cases = [x for x in c.items if not args.only or x.family in args.only.split(",") or args.only in x.name]
        started = time.monotonic()
        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda x: run_case(args.resel, x, args.timeout, c.root), cases))
        wall = time.monotonic() - started
    if args.json:
        print(json.dumps([vars(x) for x in done], indent=1))
        return
    families = sorted({x.family for x in done})
    kinds = ("traceback", "hang", "wrong exit 0", "refused")
    print(f"resel: {args.resel}; {len(done)} cases, {args.timeout:g} s each at most, {wall:.0f} s in all")
    print(f"{'family':<10}{'cases':>7}" + "".join(f"{k:>14}" for k in kinds) + f"{'slowest s':>11}")
    for fam in [*families, "all"]:
        sel = [x for x in done if fam in ("all", x.family)]
        print(f"{fam:<10}{len(sel):>7}" + "".join(f"{sum(x.outcome == k for x in sel):>14}" for k in kinds)
              + f"{max(x.seconds for x in sel):>11.1f}")
    bad = [x for x in done if x.outcome != "ok"]
    if bad:
        print("\nnot as expected:")
        for x in bad:
            print(f"  [{x.outcome}] {x.family}: {x.name} ({x.seconds:.1f} s, exit {x.rc}) {x.detail}")


if __name__ == "__main__":
    main()
