"""The scheduler half of a poll, before and after polling our own jobs only (issue 14 §6).

    .venv/bin/python benchmarks/bench_live.py --polls [--repeat 15] [--json]

On each live site of the testbed — tba (Slurm 22.05 CLI, local), tbb (Slurm 22.05 CLI over SSH),
tba's slurmrestd (22.05), tbb's Torque wrappers (local), tbc's slurmrestd (24.11) and the
HTCondor pool (CLI over SSH) — two of our jobs are submitted (``sleep 120``), then, ``--repeat``
times, interleaved so both see the same queue:

* **before**: what a poll asked until now — every user's jobs (``squeue --json --states=all``,
  ``GET /jobs``, ``qstat -f``), then picked by id; the HTCondor client already asked
  ``condor_q ID…``, so its *before* is the same call;
* **after**: ``jobs(our ids)`` — ``squeue --jobs=…``, ``GET /job/{id}``, ``qstat -f ID…``,
  ``condor_q ID…``.

It prints per site the median seconds and reply bytes of each, and the poll cycle: all sites
asked at once, each on its own thread as the coordinator does (median of the slowest site). The
reply bytes grow with the queue the testbed happens to hold (other sessions' jobs); the table
says how many jobs the all-users listing held. Our jobs are cancelled at the end (by id).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from resel.backends.pbs.cli import PBSCLI  # noqa: E402
from resel.backends.slurm.cli import SlurmCLI  # noqa: E402
from resel.backends.slurm.rest import SlurmREST  # noqa: E402
from resel.backends.transport import LocalTransport, SSHTransport  # noqa: E402

SLEEP = "#!/bin/sh\n# resel poll benchmark\nsleep 120\n"


class Counting:
    """A transport (or requests session) wrapper adding up the bytes of every reply."""

    def __init__(self, inner: Any):
        self.inner, self.bytes = inner, 0

    def run(self, argv, **kw):
        done = self.inner.run(argv, **kw)
        self.bytes += len(done.stdout.encode())
        return done

    def request(self, method, url, **kw):
        reply = self.inner.request(method, url, **kw)
        self.bytes += len(reply.content)
        return reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _token(path: str) -> str:
    return Path(path).read_text().strip().removeprefix("SLURM_JWT=")


def sites(tb) -> list[tuple[str, Any, Counting, str, Callable[[], None]]]:
    """(name, client, its byte counter, work directory, close) for every live site."""
    import requests
    out = []
    local = Counting(LocalTransport())
    out.append(("tba slurm cli", SlurmCLI(local, env={"SLURM_CONF": tb.slurm_conf_a}), local, tb.work_a, lambda: None))
    ssh_b = SSHTransport("tb-ssh", ssh_config=tb.ssh_config)
    cb = Counting(ssh_b)
    out.append(("tbb slurm cli (ssh)", SlurmCLI(cb, env={"SLURM_CONF": tb.slurm_conf_b}), cb, tb.work_b, ssh_b.close))
    sa = Counting(requests.Session())
    out.append(("tba slurmrestd 22.05", SlurmREST(tb.rest_url, tb.rest_user, _token(tb.rest_token_file),
                                                  api_version="auto", session=sa), sa, "/tmp", lambda: None))
    lt = Counting(LocalTransport())
    out.append(("tbb torque wrappers", PBSCLI(lt, env={"SLURM_CONF": tb.slurm_conf_b}, dialect="torque"), lt, "/tmp",
                lambda: None))
    if tb.has_trixie:
        from resel.backends.htcondor.client import HTCondorCLI
        sc = Counting(requests.Session())
        out.append(("tbc slurmrestd 24.11", SlurmREST(tb.rest_url_c, tb.rest_user_c, _token(tb.rest_token_file_c),
                                                      api_version="auto", session=sc), sc, "/tmp", lambda: None))
        ssh_ap = SSHTransport("tb-ap", ssh_config=tb.trixie_ssh_config)
        cp = Counting(ssh_ap)
        out.append(("pool htcondor cli (ssh)", HTCondorCLI(cp), cp, "", ssh_ap.close))
    return out


def _submit(client: Any, workdir: str) -> list[str]:
    """Two of our jobs. On the pool, plain held jobs (``condor_submit``: the client submits
    only resel pilots, and a held job takes no slot from the tests sharing the pool)."""
    if not workdir:
        done = client.transport.run(["condor_submit", "-terse", "-"], input=(
            "executable = /bin/sleep\narguments = 120\nhold = true\nqueue 2\n"), idempotent=False)
        first, last = done.stdout.strip().split(" - ")
        cluster = first.split(".")[0]
        return [f"{cluster}.{p}" for p in range(int(first.split(".")[1]), int(last.split(".")[1]) + 1)]
    return [client.submit(SLEEP, name=f"resel-bench-{i}", cores=1, walltime=300, workdir=workdir) for i in range(2)]


def _before(client: Any, ids: list[str]) -> dict:
    """The poll as it was: every user's jobs, then ours picked out."""
    if isinstance(client, (SlurmCLI, SlurmREST, PBSCLI)):
        everyone = client._all_jobs()
        return {j: everyone[j] for j in ids if j in everyone} | {"__listed": len(everyone)}
    return client.jobs(ids)


def _timed(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def measure(tb, repeat: int) -> dict:
    """Medians per site of before/after (seconds, reply bytes) and of the whole cycle."""
    rows: dict[str, dict] = {}
    entries = sites(tb)
    submitted: list[tuple[Any, list[str]]] = []
    try:
        for name, client, counter, workdir, _ in entries:
            ids = _submit(client, workdir)
            submitted.append((client, ids))
            rows[name] = {"before_s": [], "after_s": [], "before_bytes": [], "after_bytes": [], "listed": []}
        cycles: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(repeat):
            for kind in ("before", "after"):
                def one(entry, ids, kind=kind):
                    name, client, counter, _, _ = entry
                    counter.bytes = 0
                    began = time.perf_counter()
                    got = _before(client, ids) if kind == "before" else client.jobs(ids)
                    took = time.perf_counter() - began
                    rows[name][f"{kind}_s"].append(took)
                    rows[name][f"{kind}_bytes"].append(counter.bytes)
                    if kind == "before" and "__listed" in got:
                        rows[name]["listed"].append(got["__listed"])
                    return took
                with ThreadPoolExecutor(len(entries)) as pool:
                    began = time.perf_counter()
                    list(pool.map(lambda pair: one(*pair), zip(entries, [ids for _, ids in submitted])))
                    cycles[kind].append(time.perf_counter() - began)
    finally:
        for client, ids in submitted:
            try:
                client.cancel(ids)
            except Exception as exc:   # noqa: BLE001 - a benchmark reports, the walltime ends them anyway
                print(f"could not cancel {ids}: {exc}", file=sys.stderr)
        for entry in entries:
            entry[4]()
    out = {name: {k: (statistics.median(v) if v else None) for k, v in r.items()} for name, r in rows.items()}
    out["cycle"] = {f"{k}_s": statistics.median(v) for k, v in cycles.items()}
    return out


def table(result: dict, repeat: int) -> str:
    lines = [f"poll of two of our jobs per site, {repeat} rounds, before/after interleaved (medians)", "",
             "| site | before s | after s | before bytes | after bytes | jobs listed before |",
             "|---|---|---|---|---|---|"]
    for name, r in result.items():
        if name == "cycle":
            continue
        listed = "" if r["listed"] is None else f"{r['listed']:.0f}"
        lines.append(f"| {name} | {r['before_s']:.3f} | {r['after_s']:.3f} | {r['before_bytes']:.0f} | "
                     f"{r['after_bytes']:.0f} | {listed} |")
    c = result["cycle"]
    lines.append(f"| **poll cycle** (all sites at once) | {c['before_s']:.3f} | {c['after_s']:.3f} | | | |")
    return "\n".join(lines)


def run(tb, repeat: int, as_json: bool) -> None:
    result = measure(tb, repeat)
    print(json.dumps(result, indent=2) if as_json else table(result, repeat))
