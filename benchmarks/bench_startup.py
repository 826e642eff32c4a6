"""Benchmark: start-up of the ``resel`` commands a user types, as whole processes, before and after.

Goal (issue 15 item 4): ``resel --help``, ``resel runs`` and ``resel status`` each take at most
0.25 s as a whole process (start to exit), beside ``python -c pass`` as the floor no command
can go under; ``resel replay``'s start-up as small as it can be.

Each command is run ``--repeat`` times as a fresh child process, every command of every
version once per round (interleaved, so a busy minute of the shared machine hits all of them
alike); the table shows medians of wall time (fork to exit, as a user waits) and of CPU time
(user + system of the child, from ``wait4``: a loaded machine disturbs it far less).

Before and after are two installations of resel, each a regular (non-editable) ``pip
install`` in a virtual environment of its own: an editable install adds an import hook that
costs every start-up 10-25 ms, which would blur the comparison.

* ``--before REV`` / ``--after REV`` (defaults ``main`` and ``HEAD``): the script checks each
  revision out in a scratch worktree (``git worktree add --detach``) and installs it in a
  virtual environment beside it, under ``$TMPDIR/resel-bench-startup/<commit>/`` (made once,
  reused by later runs; delete the folder to rebuild). A revision equal to the other is
  measured once.
* ``--baseline PYTHON`` / ``--python PYTHON``: an interpreter of an existing installation
  instead (its ``resel`` command beside it), e.g. ``.venv/bin/python``.

What the commands read is made first, untimed, by the "after" installation in a temporary
folder: a store with three simulated runs and one live run (``resel status`` replays a live
run's recorded events into a fresh engine; the live run here is a simulated run of 64 tasks
stored as a live one, with its events), and the replay's trace is hpc2n.swf from the shared
data (``--traces DIR``).

Before timing, every command is run once more by each version with its output captured: the
table says whether before and after printed the same bytes (stdout, stderr and exit status) —
the start-up work must not change what a command shows.

Drawing (``--plot``, ``--html``) imports matplotlib, a dependency since issue 28, and is the only
thing that does: the table shows the import itself and ``resel report RUN --html FILE`` beside
the commands above, whose start-up it must not change (an installation without matplotlib, as
main before issue 28, cannot draw: its rows say n/a). ``--install N`` measures instead what the
dependency adds to ``pip install .``: N fresh installs of before and after, and their size.

Run:  python benchmarks/bench_startup.py [--repeat 15] [--before REV] [--after REV] [--json]
      python benchmarks/bench_startup.py --install 3 [--before REV] [--after REV]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
GOAL_S = 0.25
#: the commands whose whole process must stay within GOAL_S
GOAL_COMMANDS = ("resel --help", "resel runs", "resel status")


def commands(tmp: Path, traces: Path) -> list[tuple[str, list[str]]]:
    """(label, argv after the program) of every measured command; '' = ``python -c pass``."""
    db = str(tmp / "store.db")
    return [
        ("python -c pass", ["-c", "pass"]),
        ("resel --help", ["--help"]),
        ("resel runs", ["runs", "--db", db]),
        ("resel status", ["status", "--db", db]),
        ("resel report RUN", ["report", "1", "--db", db]),
        ("resel sites show", ["sites", "show"]),
        ("resel replay --help", ["replay", "--help"]),
        ("resel replay hpc2n.swf --json", ["replay", str(traces / "hpc2n.swf"), "--policy", "fcfs", "--json"]),
        ("resel simulate --help", ["simulate", "--help"]),
        # drawing: the only commands that import matplotlib (a dependency since issue 28); an
        # installation without it (before) cannot run them, and its rows say n/a
        ("import matplotlib (Agg) + Figure", ["-c", "import matplotlib; matplotlib.use('Agg'); "
                                                     "from matplotlib.figure import Figure"]),
        ("resel report RUN --html FILE", ["report", "1", "--db", db, "--html", str(tmp / "report.html")]),
    ]


def make_inputs(db: str) -> None:
    """(Run in a child under the "after" interpreter.) Three simulated runs and one live run."""
    import dataclasses

    import resel
    from resel.live.coordinator import LiveOptions
    from resel.store import open_store, save_run

    store = open_store(db)
    bag, sites = resel.default_bag(), resel.default_sites()
    for strategy in ("random", "model", "reselect"):
        save_run(store, resel.simulate(bag.resized(64), sites, strategy, seed=1))
    live = save_run(store, resel.simulate(bag.resized(64), sites, "model+reselect", seed=2))
    options = LiveOptions(strategy="model+reselect", seed=2, clock="base", prefetch=0)
    store["runs"].update(live, {"mode": "live", "status": "running", "t0": time.time() - 60,
                                "options": json.dumps(dataclasses.asdict(options))})


def installed(rev: str, cache: Path) -> str:
    """The interpreter of a regular install of ``rev`` (made once in ``cache``)."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    home = cache / sha[:12]
    python = home / "venv" / "bin" / "python"
    if (home / "ok").exists():
        return str(python)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    print(f"installing {rev} ({sha[:12]}) in {home} ...", file=sys.stderr, flush=True)
    src = home / "src"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(src), sha], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(src)], check=True)
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(src)], check=True,
                   capture_output=True)
    (home / "ok").write_text(sha + "\n")
    return str(python)


def install_times(before: str, after: str, n: int) -> None:
    """Time ``pip install`` of two revisions into fresh virtual environments, ``n`` times each,
    interleaved; print the medians and each environment's size (site-packages, bytes on disk).
    The first round also warms pip's cache, so the medians are of installs from the cache: what
    a user's second install pays, and what the wheels alone cost; the download of a first
    install (matplotlib's wheels: ~9 MB) comes on top, at the network's speed."""
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp_s:
        tmp = Path(tmp_s)
        srcs = {}
        for name, rev in (("before", before), ("after", after)):
            srcs[name] = tmp / f"src-{name}"
            srcs[name].mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(srcs[name])], input=archive, check=True)
        times: dict[str, list[float]] = {"before": [], "after": []}
        sizes: dict[str, int] = {}
        for i in range(n + 1):          # round 0 warms the cache and is not counted
            for name, src in srcs.items():
                venv = tmp / f"venv-{name}-{i}"
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                t0 = time.perf_counter()
                subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)], check=True,
                               capture_output=True)
                if i:
                    times[name].append(time.perf_counter() - t0)
                sizes[name] = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file())
                shutil.rmtree(venv)
    print(f"pip install . into a fresh virtual environment, median of {n} (pip's cache warm; python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    for name, rev in (("before", before), ("after", after)):
        print(f"  {name:6s} {rev:>12s}: {statistics.median(times[name]):6.1f} s  "
              f"(runs: {', '.join(f'{t:.1f}' for t in times[name])}); environment {sizes[name] / 2**20:,.0f} MiB")
    print(f"  after - before: {statistics.median(times['after']) - statistics.median(times['before']):+.1f} s, "
          f"{(sizes['after'] - sizes['before']) / 2**20:+,.0f} MiB")


def run_once(argv: list[str], env: dict) -> tuple[float, float]:
    """Wall and CPU seconds of one child, fork to exit; it must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"failed: {' '.join(argv)}\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def program(python: str, label: str) -> str:
    """The executable a measured command runs: the interpreter itself, or ``resel`` beside it."""
    return python if label.startswith(("python", "import")) else str(Path(python).parent / "resel")


def runs(python: str, label: str, tail: list[str], env: dict) -> bool:
    """Whether an installation can run a command at all (one without matplotlib cannot draw)."""
    return subprocess.run([program(python, label), *tail], capture_output=True, env=env, timeout=300).returncode == 0


def same_output(versions: dict[str, str], cmds: list[tuple[str, list[str]]], env: dict) -> dict[str, bool]:
    """Per command: did every version print the same stdout and stderr, with the same exit status?"""
    same = {}
    for label, tail in cmds:
        seen = set()
        for python in versions.values():
            proc = subprocess.run([program(python, label), *tail], capture_output=True, env=env, timeout=300)
            seen.add((proc.returncode, proc.stdout, proc.stderr))
        same[label] = len(seen) == 1
    return same


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15, help="whole-process runs of each command (default 15)")
    ap.add_argument("--before", default="main", help="git revision measured as before (default main)")
    ap.add_argument("--after", default="HEAD", help="git revision measured as after (default HEAD)")
    ap.add_argument("--baseline", metavar="PYTHON", help="interpreter of the before installation (instead of --before)")
    ap.add_argument("--python", metavar="PYTHON", help="interpreter of the after installation (instead of --after)")
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "swf",
                    help="folder of hpc2n.swf (default ../shared/data/swf)")
    ap.add_argument("--json", action="store_true", help="print the raw figures as one JSON document")
    ap.add_argument("--install", type=int, metavar="N", default=0,
                    help="instead: time N fresh `pip install` runs of before and after each, interleaved, and "
                         "their size on disk (pip's cache warm: what a second install pays)")
    ap.add_argument("--make-inputs", metavar="DB", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make_inputs:
        make_inputs(args.make_inputs)
        return
    if args.install:
        install_times(args.before, args.after, args.install)
        return
    if not (args.traces / "hpc2n.swf").is_file():
        sys.exit(f"bench_startup: {args.traces / 'hpc2n.swf'} not found (give the trace folder with --traces)")
    cache = Path(tempfile.gettempdir()) / "resel-bench-startup"
    after = args.python or installed(args.after, cache)
    before = args.baseline or installed(args.before, cache)
    versions = {"after": after} if os.path.abspath(before) == os.path.abspath(after) else \
        {"before": before, "after": after}

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp_s:
        tmp = Path(tmp_s)
        subprocess.run([after, str(HERE), "--make-inputs", str(tmp / "store.db")], check=True)
        env = {**os.environ, "RESEL_DB": str(tmp / "store.db"), "HOME": str(tmp)}
        env.pop("PYTHONPATH", None)
        cmds = commands(tmp, args.traces)
        able = {(v, label) for v, python in versions.items() for label, tail in cmds if runs(python, label, tail, env)}
        same = same_output({v: p for v, p in versions.items()}, [c for c in cmds
                                                                  if all((v, c[0]) in able for v in versions)], env)
        samples = {(v, label): ([], []) for v in versions for label, _ in cmds if (v, label) in able}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for label, tail in cmds:
                for version, python in versions.items():
                    if (version, label) not in able:
                        continue
                    wall, cpu = run_once([program(python, label), *tail], env)
                    samples[(version, label)][0].append(wall)
                    samples[(version, label)][1].append(cpu)
        load_after = os.getloadavg()[0]

    med = {key: (statistics.median(w), statistics.median(c)) for key, (w, c) in samples.items()}
    if args.json:
        print(json.dumps({"repeat": args.repeat, "python": sys.version.split()[0], "cpus": os.cpu_count(),
                          "load": [load_before, load_after], "versions": versions,
                          "same_output": same,
                          "median": {f"{v} | {label}": {"wall_s": w, "cpu_s": c} for (v, label), (w, c) in med.items()},
                          "samples": {f"{v} | {label}": {"wall_s": w, "cpu_s": c}
                                      for (v, label), (w, c) in samples.items()}}, indent=2))
        return
    has_before = "before" in versions
    print(f"whole-process start-up, median of {args.repeat} runs each, interleaved (python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, 1-min load average {load_before:.1f} before, {load_after:.1f} after)")
    if has_before:
        print(f"before: {args.baseline or args.before}   after: {args.python or args.after}")
    head = f"{'command':34s} {'after s':>8s} {'CPU s':>7s} {'- floor':>8s}"
    if has_before:
        head += f" {'before s':>9s} {'CPU s':>7s} {'- floor':>8s} {'after/before':>13s} {'output':>8s}"
    print(head)
    floor = {v: med[(v, "python -c pass")] for v in versions}
    for label, _ in cmds:
        w, c = med[("after", label)]
        line = f"{label:34s} {w:8.3f} {c:7.3f} {w - floor['after'][0]:8.3f}"
        if has_before and ("before", label) in med:
            bw, bc = med[("before", label)]
            line += (f" {bw:9.3f} {bc:7.3f} {bw - floor['before'][0]:8.3f} {w / bw:12.2f}x"
                     f" {'same' if same.get(label) else 'DIFFERS':>8s}")
        elif has_before:
            line += f" {'n/a':>9s} {'':7s} {'':8s} {'':13s} {'':8s}  (before cannot run it)"
        print(line)
    print("wall = fork to exit as a user waits; CPU = user + system of the child; - floor = wall minus "
          "`python -c pass`'s" + ("; output = stdout, stderr and exit status of after and before compared"
                                  if has_before else ""))
    for label in GOAL_COMMANDS:
        w, c = med[("after", label)]
        verdict = "PASS" if w <= GOAL_S else "MISS"
        print(f"goal {label} whole process <= {GOAL_S} s: {w:.3f} s wall ({c:.3f} s CPU) -> {verdict}")


if __name__ == "__main__":
    main()
