"""An agent's small files over SSH, one at a time against one batch (issue 29 §2).

    scripts/testbed.sh up                                # sshd on 127.0.0.1:2222 for reseltb (root)
    .venv/bin/python benchmarks/bench_records.py         # [--files 200] [--rounds 5] [--json]

What the coordinator does with a site's agents at hundreds of tasks a second: writes inbox
files (a few hundred bytes each), looks at wave files (lstat: the owner check) and reads them.
Each is measured both ways over the testbed's sshd (the ``tb-ssh`` alias) and on this machine:
*one at a time* — ``write_file``, ``stat``, ``read_file`` per file, what the coordinator did
before the batches — and *batched* — ``write_files``, ``stat_files``, ``read_files``, every
file's requests in flight together. Rounds interleave the two so a busy minute hits both.

Figures per file, medians over the rounds: wall time, and this process's CPU (all its threads:
paramiko's reader included; ``time.process_time``), which tells the client's cost from the
machine's load. The machine has 2 cores, shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from testbed import load  # noqa: E402

from resel.backends.transport import LocalTransport, SSHTransport  # noqa: E402

HOST = "tb-ssh"
#: an inbox file's size: a task spec with its command, environment and outputs
RECORD = 320


def timed(work: Callable[[], object], files: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per file of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return (1000 * (time.perf_counter() - wall) / files, 1000 * (time.process_time() - cpu) / files)


def one_round(t, folder: str, files: int) -> dict[str, tuple[float, float]]:
    """Each operation both ways, on ``files`` fresh files of folder."""
    data = [os.urandom(RECORD // 2).hex().encode()[:RECORD] for _ in range(files)]
    paths = [f"{folder}/w{uuid.uuid4().hex[:8]}-{i}.json" for i in range(files)]
    single, batch = paths[:files], [p + ".b" for p in paths]
    out = {}
    out["write, one at a time"] = timed(lambda: [t.write_file(p, d) for p, d in zip(single, data)], files)
    out["write, batched"] = timed(lambda: t.write_files(list(zip(batch, data))), files)
    out["lstat, one at a time"] = timed(lambda: [t.stat(p) for p in single], files)
    out["lstat, batched"] = timed(lambda: t.stat_files(batch), files)
    out["read, one at a time"] = timed(lambda: [t.read_file(p, limit=1 << 20) for p in single], files)
    out["read, batched"] = timed(lambda: t.read_files([(p, 1 << 20) for p in batch]), files)
    got = t.read_files([(p, 1 << 20) for p in batch])
    if got != data:
        raise SystemExit("a batched read did not give back what was written: stopping")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=200, help="files per operation and round (default 200)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = ap.parse_args()
    tb = load()
    if tb is None:
        sys.exit("the testbed is not up: run `scripts/testbed.sh up` first (as root)")
    ssh = SSHTransport(HOST, ssh_config=tb.ssh_config)
    remote = f"{tb.work_b}/bench-records-{uuid.uuid4().hex[:8]}"
    ssh.makedirs(remote)
    local_dir = tempfile.mkdtemp(prefix="resel-bench-records-")
    sites = {"ssh (tb-ssh)": (ssh, remote), "local": (LocalTransport(), local_dir)}
    load_before = os.getloadavg()[0]
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {s: {} for s in sites}
    try:
        for _ in range(args.rounds):
            for site, (t, folder) in sites.items():
                for op, figure in one_round(t, folder, args.files).items():
                    samples[site].setdefault(op, []).append(figure)
    finally:
        ssh.run(["rm", "-rf", "--", remote], idempotent=True)
        ssh.close()
        for name in os.listdir(local_dir):
            os.unlink(os.path.join(local_dir, name))
        os.rmdir(local_dir)
    rows = []
    for site, ops in samples.items():
        for op, figures in ops.items():
            rows.append({"site": site, "operation": op,
                         "wall_ms": statistics.median(w for w, _ in figures),
                         "cpu_ms": statistics.median(c for _, c in figures)})
    doc = {"files": args.files, "rounds": args.rounds, "load_before": load_before,
           "load_after": os.getloadavg()[0], "rows": rows}
    if args.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"{args.files} files of {RECORD} bytes per operation, {args.rounds} rounds; load average "
          f"{load_before:.2f} before, {doc['load_after']:.2f} after")
    print("| site | operation | wall ms per file | CPU ms per file | batched / one at a time (wall, CPU) |")
    print("|---|---|---:|---:|---:|")
    by = {(r["site"], r["operation"]): r for r in rows}
    for r in rows:
        ratio = ""
        if r["operation"].endswith("batched"):
            one = by[(r["site"], r["operation"].replace("batched", "one at a time"))]
            ratio = f"{r['wall_ms'] / one['wall_ms']:.2f}, {r['cpu_ms'] / max(one['cpu_ms'], 1e-9):.2f}"
        print(f"| {r['site']} | {r['operation']} | {r['wall_ms']:.3f} | {r['cpu_ms']:.3f} | {ratio} |")


if __name__ == "__main__":
    main()
