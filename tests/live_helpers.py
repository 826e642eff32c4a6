"""Helpers for the tests that run resel on the real two-cluster testbed (scripts/testbed.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from resel.backends.connect import open_site
from resel.config import load_bag, load_sites
from resel.live import Coordinator, LiveOptions
from resel.store import open_store

REPO = Path(__file__).resolve().parents[1]


def sites_toml(tb, *, a: dict | None = None, b: dict | None = None, clock_a: float = 2.0, clock_b: float = 0.5,
               walltime_a: float = 600, walltime_b: float = 600, cores_a: int = 8, kind_b: str = "slurm") -> str:
    """The testbed's two sites: tba local (8 cores), tbb over SSH (4 cores); overrides per site."""
    acc_a = {"transport": "local", "workdir": tb.work_a, "env": {"SLURM_CONF": tb.slurm_conf_a}}
    acc_b = {"transport": "ssh", "host": "tb-ssh", "ssh_config": tb.ssh_config, "workdir": tb.work_b,
             "env": {"SLURM_CONF": tb.slurm_conf_b}}
    acc_a.update(a or {})
    acc_b.update(b or {})
    return (_site("tba", cores_a, clock_a, walltime_a, acc_a) + "\n"
            + _site("tbb", 4, clock_b, walltime_b, acc_b).replace('kind = "slurm"', f'kind = "{kind_b}"'))


def _site(name: str, cores: int, clock: float, walltime: float, access: dict) -> str:
    return (f'[[site]]\nname = "{name}"\nkind = "slurm"\ncores = {cores}\nclock = {{ base = {clock} }}\n'
            f'pilot = {{ mode = "single", max_cores = {cores}, walltime = {walltime} }}\n'
            f'access = {_inline(access)}\n')


def _inline(d: dict) -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, dict):
            parts.append(f"{k} = {_inline(v)}")
        elif isinstance(v, bool):
            parts.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            parts.append(f"{k} = {v}")
        elif isinstance(v, list):
            parts.append(f"{k} = {json.dumps(v)}")
        else:
            parts.append(f"{k} = {json.dumps(str(v))}")
    return "{ " + ", ".join(parts) + " }"


def bag_toml(count: int, command: str, *, instructions: float = 4e9, name: str = "t") -> str:
    return (f'[bag]\nname = "{name}"\ncommand = {json.dumps(command)}\ncount = {count}\n\n'
            f'[bag.profile]\ninstructions = {instructions}\n')


def write_inputs(tmp_path: Path, sites: str, bag: str) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    sp, bp = tmp_path / "sites.toml", tmp_path / "bag.toml"
    sp.write_text(sites, encoding="utf-8")
    bp.write_text(bag, encoding="utf-8")
    return sp, bp


def start(tmp_path: Path, sites: str, bag: str, **options) -> Coordinator:
    sp, bp = write_inputs(tmp_path, sites, bag)
    opts = LiveOptions(**{"poll": 0.3, "strategy": "topk:2+reselect", **options})
    db = open_store(tmp_path / "resel.db")
    return Coordinator.start(db, load_bag(bp), load_sites(sp), opts, open_site, bag_file=str(bp), sites_file=str(sp))


def slurm(tb, cluster: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    conf = tb.slurm_conf_a if cluster == "a" else tb.slurm_conf_b
    return subprocess.run(list(argv), env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True,
                          check=check, timeout=60)


def fill(tb, cluster: str, cores: int, seconds: int) -> str:
    """Submit a job of another user holding ``cores`` for ``seconds``; wait until it runs."""
    job = slurm(tb, cluster, "sbatch", "--parsable", "-J", "filler", "-n", str(cores), "-t", "5",
                "-o", "/dev/null", "--wrap", f"sleep {seconds}").stdout.strip().split(";")[0]
    deadline = time.time() + 30
    while time.time() < deadline:
        state = slurm(tb, cluster, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
        if state == "RUNNING":
            return job
        time.sleep(0.3)
    raise AssertionError(f"filler job {job} did not start on cluster {cluster}")


def our_jobs(tb, run_key: str) -> list[str]:
    """Jobs of a run still listed by either cluster's squeue (pending or running)."""
    left = []
    for cluster in ("a", "b"):
        out = slurm(tb, cluster, "squeue", "-h", "-o", "%j %T").stdout.split("\n")
        left += [line for line in out if line.startswith(f"resel-{run_key}-") and
                 line.split()[-1] in ("PENDING", "RUNNING", "CONFIGURING")]
    return left


def done_results(tb, run_key: str, work_b: str | None = None) -> dict[int, int]:
    """From the agents' own files on both sites: how many attempts of each task finished done."""
    counts: dict[int, int] = {}
    for root in (tb.work_a, work_b or tb.work_b):
        for res in Path(root, run_key).glob("p*/results/*.json"):
            rec = json.loads(res.read_text())
            if rec["outcome"] == "done":
                counts[rec["task"]] = counts.get(rec["task"], 0) + 1
    return counts


def cancel_leftovers(tb) -> list[str]:
    """Cancel every resel pilot still queued or running on the testbed (after a failed test)."""
    left = []
    for cluster in ("a", "b"):
        lines = slurm(tb, cluster, "squeue", "-h", "-o", "%i %j %T", check=False).stdout.split("\n")
        ids = [ln.split()[0] for ln in lines if ln.strip() and ln.split()[1].startswith("resel-r")
               and ln.split()[2] in ("PENDING", "RUNNING", "CONFIGURING")]
        if ids:
            slurm(tb, cluster, "scancel", *ids, check=False)
            left += ids
    return left


def wait_for(check, timeout: float = 15.0, every: float = 0.3):
    """Poll until ``check()`` returns something truthy; that value, or the last one."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)
