"""The faults the crash soak (benchmarks/soak_crash.py) inflicts on the live testbed, besides
killing the coordinator: an agent killed (kill -9), a pilot job cancelled by its scheduler, a
Slurm controller killed and restarted, the HTCondor schedd killed.

Each function acts on real processes and real schedulers, and only on what the soak's own run
owns (an agent is killed only if its command line names the run's pilot) or on the testbed's
daemons (which the testbed's scripts restart). Each returns one line saying what it did, or
None when there was nothing to act on (no pilot running on any of the soak's sites).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SoakSite:
    """One site of the soak: its name, kind, work directory as the site sees it and as this
    machine sees it, and how its scheduler is reached for a fault."""

    name: str
    kind: str              # "slurm-a", "slurm-b", "slurm-c" (the trixie root's), "pool"
    workdir: str           # as the site sees it (what the sites file says)
    host_dir: Path         # the same directory from this machine


def running_pilots(db: Path, run_id: int, sites: dict[str, SoakSite]) -> list[dict]:
    """The run's pilots the store shows running on the soak's sites (pilot, site, job_id)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        con.row_factory = sqlite3.Row
        rows = con.execute("select pilot, site, job_id from live_pilots where run_id = ? and state = 'running' "
                           "and job_id is not null order by pilot", [run_id]).fetchall()
    return [dict(r) for r in rows if r["site"] in sites]


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _condor_job(pid: int) -> str | None:
    """The HTCondor job (``cluster.proc``) a process runs in, from its job ad."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    ad = next((e.split("=", 1)[1] for e in env if e.startswith("_CONDOR_JOB_AD=")), None)
    if not ad:
        return None
    try:
        text = Path(f"/proc/{pid}/root{ad}").read_text(errors="replace")
    except OSError:
        return None
    found = {k.strip(): v.strip().strip('"') for k, _, v in (line.partition("=") for line in text.splitlines())}
    return f"{found.get('ClusterId')}.{found.get('ProcId', '0')}" if "ClusterId" in found else None


def kill_agent(pilot: dict, site: SoakSite, run_key: str) -> str | None:
    """kill -9 the agent of one running pilot: its pid from the pilot's heartbeat, checked to be
    that pilot's agent (its command line names the pilot, and its directory or HTCondor job)."""
    pdir = f"{site.workdir}/{run_key}/p{pilot['pilot']}"
    try:
        beat = json.loads((site.host_dir / run_key / f"p{pilot['pilot']}" / "heartbeat.json").read_text())
        pid = int(beat["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    argv = _cmdline(pid)
    ours = (any("resel-agent" in a for a in argv) and "--pilot" in argv
            and argv[argv.index("--pilot") + 1:argv.index("--pilot") + 2] == [str(pilot["pilot"])])
    if ours and site.kind == "pool":
        ours = _condor_job(pid) == pilot["job_id"]
    elif ours:
        ours = "--dir" in argv and argv[argv.index("--dir") + 1:argv.index("--dir") + 2] == [pdir]
    if not ours:
        return None
    os.kill(pid, signal.SIGKILL)
    return f"killed the agent of pilot {pilot['pilot']} on {site.name} (pid {pid})"


def cancel_pilot(tb, pilot: dict, site: SoakSite) -> str | None:
    """The pilot's job cancelled by its scheduler, as its owner or an administrator would."""
    job = str(pilot["job_id"])
    if site.kind in ("slurm-a", "slurm-b"):
        conf = tb.slurm_conf_a if site.kind == "slurm-a" else tb.slurm_conf_b
        subprocess.run(["scancel", job], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, timeout=60)
        return f"scancel {job} (pilot {pilot['pilot']} on {site.name})"
    command = f"condor_rm {job}" if site.kind == "pool" else f"scancel {job}"
    access_point(tb, command)
    return f"{command} (pilot {pilot['pilot']} on {site.name})"


def access_point(tb, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """One shell command on the Debian 13 access point, as its user (what the tests' ``ap`` does)."""
    return subprocess.run(["ssh", "-F", tb.trixie_ssh_config, "tb-ap", command], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def kill_slurmctld(tb, cluster: str, down: float) -> str:
    """kill -9 a Slurm 22.05 cluster's controller (``a`` or ``b``), ``down`` seconds later
    restart it with its saved state (``scripts/testbed.sh restart-ctld``)."""
    name = {"a": "tba", "b": "tbb"}[cluster]
    pid = int(Path(tb.root, "run", f"slurmctld-{name}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    try:
        time.sleep(down)
    finally:                                 # interrupted or not, the cluster comes back
        subprocess.run(["bash", str(REPO / "scripts" / "testbed.sh"), "restart-ctld", cluster.upper()],
                       check=True, capture_output=True, timeout=180)
    return f"killed {name}'s slurmctld (pid {pid}), restarted it {down:.1f} s later"


def resume_drained(tb) -> list[str]:
    """What a site's administrator does after a controller lost its newest jobs (killed before
    it saved them): it hands their ids out again, the node still runs the old one, and Slurm
    drains the node ("Duplicate jobid"). Resumed here, on tba and tbb; returns what was."""
    done = []
    for name, conf in (("tba", tb.slurm_conf_a), ("tbb", tb.slurm_conf_b)):
        env = {**os.environ, "SLURM_CONF": conf}
        out = subprocess.run(["sinfo", "-h", "-R", "-o", "%n|%E"], env=env, capture_output=True, text=True,
                             timeout=60).stdout
        for line in out.splitlines():
            node, _, reason = line.partition("|")
            if reason.startswith("Duplicate jobid"):
                subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env,
                               capture_output=True, timeout=60)
                done.append(f"{name}'s node {node}")
    return done


def _schedd_pid(root: str) -> int | None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() == "condor_schedd" and os.readlink(proc / "root") == root:
                return int(proc.name)
        except OSError:
            continue
    return None


def kill_schedd(tb, wait: float = 120.0) -> str | None:
    """kill -9 the pool's condor_schedd; its condor_master starts a new one (its job queue is
    on disk). Waits until the schedd answers again; if the master has not brought it back
    within ``wait`` seconds, ``testbed-trixie.sh restart-schedd`` does."""
    pid = _schedd_pid(tb.trixie_root)
    if pid is None:
        return None
    os.kill(pid, signal.SIGKILL)
    began = time.monotonic()
    while time.monotonic() - began < wait:
        time.sleep(1.0)
        if _schedd_pid(tb.trixie_root) not in (None, pid) and access_point(tb, "condor_q -totals").returncode == 0:
            return f"killed condor_schedd (pid {pid}); its master restarted it in {time.monotonic() - began:.0f} s"
    subprocess.run(["bash", str(REPO / "scripts" / "testbed-trixie.sh"), "restart-schedd"], check=True,
                   capture_output=True, timeout=300)
    return f"killed condor_schedd (pid {pid}); restarted by testbed-trixie.sh after {wait:.0f} s"
