"""Benchmark: what a private Dask cluster costs (issue 24: no unauthenticated pickle across users).

``resel simulate --dask local[:N]`` starts a ``LocalCluster`` that other users cannot reach: TLS
with certificates made for the run (``Security.temporary()``). Before issue 24 a user had to
start a plain ``tcp://`` cluster, which anyone on the machine can use to run code as them. This
puts the two side by side, and an ``inproc://`` cluster (``processes=False``: unreachable from
outside the process too, but its workers are threads of one process, so the repetitions share
one core), each in a fresh child process, ``--rounds`` times interleaved, medians reported:

* ``certs``: making the run's CA and key (TLS only);
* ``start``: the scheduler and N worker processes up, the client connected;
* ``sweep``: the repetitions of a small ``resel simulate`` (``--sizes``, ``--repeat``, strategies
  random,model,reselect) through the cluster's executor, results back in this process;
* ``close``: client and cluster closed;
* ``total``: all of it — what ``--dask local`` adds to a command, against ``tcp`` as the ratio.

Run:  python benchmarks/bench_dask_security.py [--rounds 3] [--workers 2] [--sizes 64,256] [--repeat 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

KINDS = ("tcp", "tls", "inproc")
PHASES = ("certs", "start", "sweep", "close", "total")

CHILD = r"""
import json, logging, sys, time
if __name__ == "__main__":
    kind, workers, sizes, repeat = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")], int(sys.argv[4])
    import resel
    from distributed import Client, LocalCluster
    from distributed.security import Security
    from resel.sim.experiment import run_experiment
    t0 = time.perf_counter()
    security = Security.temporary() if kind == "tls" else None
    t1 = time.perf_counter()
    extra = {"protocol": "tls://", "security": security} if kind == "tls" else {}
    if kind != "inproc":
        extra["host"] = "127.0.0.1"
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=kind != "inproc",
                           dashboard_address=None, silence_logs=logging.ERROR, **extra)
    client = Client(cluster, security=security)
    t2 = time.perf_counter()
    run_experiment(resel.default_bag(), resel.default_sites(), ["random", "model", "reselect"], sizes, repeat=repeat,
                   executor=client.get_executor(pure=False))
    t3 = time.perf_counter()
    client.close(); cluster.close()
    t4 = time.perf_counter()
    print(json.dumps({"certs": t1 - t0, "start": t2 - t1, "sweep": t3 - t2, "close": t4 - t3, "total": t4 - t0,
                      "address": cluster.scheduler_address.split("://")[0]}))
"""


def measure(kind: str, workers: int, sizes: str, repeat: int) -> dict:
    got = subprocess.run([sys.executable, "-c", CHILD, kind, str(workers), sizes, str(repeat)], capture_output=True,
                         text=True, timeout=1800)
    if got.returncode != 0:
        raise SystemExit(f"{kind}: the child failed:\n{got.stderr[-2000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sizes", default="64,256")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:
            runs[kind].append(measure(kind, args.workers, args.sizes, args.repeat))
    medians = {k: {p: statistics.median(r[p] for r in rs) for p in PHASES} for k, rs in runs.items()}
    for kind in KINDS:
        medians[kind]["transport"] = runs[kind][0]["address"]
    if args.json:
        print(json.dumps({"rounds": args.rounds, "workers": args.workers, "sizes": args.sizes, "repeat": args.repeat,
                          "medians_s": medians}, indent=1))
        return
    print(f"LocalCluster, {args.workers} workers; sweep: sizes {args.sizes} x {args.repeat} repetitions x 3 strategies; "
          f"medians of {args.rounds} rounds (s)")
    print("| cluster | transport | " + " | ".join(PHASES) + " | total vs tcp |")
    print("|---|---|" + "---:|" * (len(PHASES) + 1))
    for kind in KINDS:
        m = medians[kind]
        print(f"| {kind} | {m['transport']} | " + " | ".join(f"{m[p]:.2f}" for p in PHASES)
              + f" | {m['total'] / medians['tcp']['total']:.2f}x |")


if __name__ == "__main__":
    main()
