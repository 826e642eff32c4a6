"""A bag whose tasks carry data, against the same bag without, on the real testbed (issue 25).

    scripts/testbed.sh up
    .venv/bin/python benchmarks/bench_data_bag.py            # [--tasks 256] [--seconds 10] [--repeat 1]
    .venv/bin/python benchmarks/bench_data_bag.py --tasks 64 --seconds 5     # a quicker look

Runs ``--tasks`` tasks of ``sleep --seconds`` across tba (local, 8 slots) and tbb (Slurm over
the testbed's sshd, 4 slots) with ``topk:2+reselect``, twice, in alternation, ``--repeat``
times each:

* **without data**: each task reads its own ``--in-mb`` input and one ``--shared-mb`` file
  every task shares, put beforehand where every site reads them (what users do without resel),
  and writes ``--out-mb`` of output that stays on the site;
* **with data**: the same work, but resel carries the files: each input reaches the site a
  task is bound to (the shared one once per site), and the output must come home, checked by
  sha256, before the task counts as done (docs/data.md).

It prints, per configuration, the bag's TTC (medians), the ratio with data / without (goal:
within 5 %, i.e. <= 1.05), and from the store what crossed to each site: the shared file's
count (goal: once per site and run) and the megabytes sent and fetched. Everything is read
from the run store; the sites' clocks stamp the tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from live_helpers import cancel_leftovers, sites_toml  # noqa: E402
from testbed import load  # noqa: E402

from resel import task_data  # noqa: E402
from resel.backends.connect import open_site  # noqa: E402
from resel.config import load_bag, load_sites  # noqa: E402
from resel.live.coordinator import Coordinator, LiveOptions  # noqa: E402
from resel.store import open_store  # noqa: E402


def write_files(root: Path, tasks: int, in_mb: float, shared_mb: float) -> None:
    """Each task's own input (distinct bytes: a counter first) and the shared file."""
    (root / "in").mkdir(parents=True, exist_ok=True)
    own = int(in_mb * 1e6)
    for i in range(tasks):
        (root / "in" / f"{i}.dat").write_bytes(i.to_bytes(8, "little") + os.urandom(16) * (own // 16))
    (root / "shared.dat").write_bytes(os.urandom(int(shared_mb * 1e6)))


def write_bag(root: Path, tasks: int, seconds: float, data: bool, in_mb: float, out_mb: float,
              shared_mb: float, placed: Path) -> Path:
    """The same work either way — read the task's input and the shared file, write the output:
    with data, resel carries the files; without, they were put beforehand where every site
    reads them (``placed``, as users do without resel) and the output stays on the site."""
    work = f"head -c {int(out_mb * 1e6)} /dev/zero > out.bin; cat %s %s | md5sum > md.log"
    if data:
        write_files(root, tasks, in_mb, shared_mb)
        cmd = f"sleep {seconds:g}; " + work % ("in.dat", "shared.dat")
        extra = ('inputs = [{ path = "in/{index}.dat", as = "in.dat" }, "shared.dat"]\n'
                 'outputs = ["out.bin", "md.log"]\n')
    else:
        cmd = f"sleep {seconds:g}; " + work % (f"{placed}/in/{{index}}.dat", f"{placed}/shared.dat")
        extra = ""
    bag = root / "bag.toml"
    bag.write_text(f'[bag]\nname = "bench-data"\ncommand = "{cmd}"\ncount = {tasks}\n{extra}'
                   '[bag.profile]\ninstructions = 4e9\n', encoding="utf-8")
    return bag


def one_run(tb, root: Path, tasks: int, seconds: float, data: bool, args, placed: Path) -> dict:
    root.mkdir(parents=True)
    bag_path = write_bag(root, tasks, seconds, data, args.in_mb, args.out_mb, args.shared_mb, placed)
    sites_path = root / "sites.toml"
    sites_path.write_text(sites_toml(tb), encoding="utf-8")
    bag = load_bag(bag_path)
    t0 = time.monotonic()
    manifest = task_data.build(bag) if data else None
    check_s = time.monotonic() - t0
    db = open_store(root / "resel.db")
    coord = Coordinator.start(db, bag, load_sites(sites_path), LiveOptions(poll=2.0, strategy="topk:2+reselect"),
                              open_site, manifest=manifest, results=str(root / "results") if data else None)
    try:
        coord.run(max_time=3600)
    finally:
        coord.close()
        cancel_leftovers(tb, root)
    run = db["runs"].get(coord.run_id)
    # the span from the first pilot's agent start to the bag's end: the pilots' queue waits
    # (other users' jobs on the shared testbed) left out, which TTC includes
    first = list(db.query("select min(agent_started) as a from live_pilots where run_id = ?", [coord.run_id]))[0]["a"]
    starts = {r["site"]: r["a"] - run["t0"] for r in db.query(
        "select site, min(agent_started) as a from live_pilots where run_id = ? group by site", [coord.run_id])
        if r["a"] is not None}
    out = {"data": data, "ttc": run["ttc_wkd"], "span": run["ttc_wkd"] - (first - run["t0"]) if first else None,
           "pilot_start": starts, "done": run["done"], "failed": run["failed"], "check_s": check_s}
    if data:
        shared = manifest.shared_files[0].sha256
        sent = list(db.query("select site, count(*) as files, sum(size) as bytes, sum(sha256 = ?) as shared "
                             "from site_files where run_id = ? group by site", [shared, coord.run_id]))
        got = list(db.query("select site, sum(size) as bytes, count(distinct task) as tasks from task_outputs "
                            "where run_id = ? group by site", [coord.run_id]))
        out["sites"] = {r["site"]: {"files_sent": r["files"], "mb_sent": r["bytes"] / 1e6, "shared_sent": r["shared"]}
                        for r in sent}
        for r in got:
            out["sites"].setdefault(r["site"], {}).update(mb_fetched=r["bytes"] / 1e6, tasks=r["tasks"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=256)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--in-mb", type=float, default=5.0)
    p.add_argument("--out-mb", type=float, default=20.0)
    p.add_argument("--shared-mb", type=float, default=100.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    tb = load()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        # the files the bag without data reads where they lie: readable by tbb's user too
        placed = Path(tmp) / "placed"
        write_files(placed, args.tasks, args.in_mb, args.shared_mb)
        for path in [Path(tmp), placed, placed / "in", *placed.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        for r in range(args.repeat):
            for data in (False, True):
                res = one_run(tb, Path(tmp) / f"r{r}-{'data' if data else 'none'}", args.tasks, args.seconds, data,
                              args, placed)
                runs.append(res)
                print(f"run {r + 1}/{args.repeat} {'with' if data else 'without'} data: TTC {res['ttc']:.1f} s, "
                      f"{res['done']} done, {res['failed']} failed", file=sys.stderr)
    without = statistics.median(x["ttc"] for x in runs if not x["data"])
    with_data = statistics.median(x["ttc"] for x in runs if x["data"])
    span_without = statistics.median(x["span"] for x in runs if not x["data"])
    span_with = statistics.median(x["span"] for x in runs if x["data"])
    summary = {"tasks": args.tasks, "seconds": args.seconds, "in_mb": args.in_mb, "out_mb": args.out_mb,
               "shared_mb": args.shared_mb, "ttc_without": without, "ttc_with": with_data,
               "ratio": with_data / without, "span_without": span_without, "span_with": span_with,
               "span_ratio": span_with / span_without, "load": os.getloadavg(), "runs": runs}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"\n{args.tasks} tasks of {args.seconds:g} s on tba (8 slots, local) + tbb (4 slots, SSH); "
          f"{args.repeat} run(s) each; load {os.getloadavg()[0]:.2f}")
    label = f"with data ({args.in_mb:g}+{args.shared_mb:g} MB in, {args.out_mb:g} MB out)"
    print(f"{'':40} {'TTC [s]':>9} {'span [s]':>9}")
    print(f"{'without data':40} {without:9.1f} {span_without:9.1f}")
    print(f"{label:40} {with_data:9.1f} {span_with:9.1f}")
    verdict = "PASS" if with_data / without <= 1.05 else "MISS"
    print(f"{'ratio (goal <= 1.05)':40} {with_data / without:9.3f} {span_with / span_without:9.3f}  {verdict} (TTC)")
    print("span: from the first pilot's agent start to the bag's end (the queue waits of pilots left out)")
    for x in runs:
        print(f"  {'with' if x['data'] else 'without'} data: pilots' agents started at "
              + ", ".join(f"{s} {v:.1f} s" for s, v in sorted(x["pilot_start"].items())))
    last = [x for x in runs if x["data"]][-1]
    print(f"\n{'site':6} {'tasks':>6} {'files sent':>11} {'shared sent':>12} {'MB sent':>9} {'MB fetched':>11}")
    for site, s in sorted(last["sites"].items()):
        print(f"{site:6} {s.get('tasks', 0):6} {s.get('files_sent', 0):11} {s.get('shared_sent', 0):12} "
              f"{s.get('mb_sent', 0):9.1f} {s.get('mb_fetched', 0):11.1f}")


if __name__ == "__main__":
    main()
