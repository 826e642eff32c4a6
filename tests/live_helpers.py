"""Helpers for the tests that run resel on the real two-cluster testbed (scripts/testbed.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from resel.backends.connect import open_site
from resel.config import load_bag, load_sites
from resel.live.coordinator import Coordinator, LiveOptions
from resel.store import open_store
from agent_files import run_records
from waiting import poll, wait_until

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


def start(tmp_path: Path, sites: str, bag: str, *, opener=open_site, **options) -> Coordinator:
    sp, bp = write_inputs(tmp_path, sites, bag)
    opts = LiveOptions(**{"poll": 0.3, "strategy": "topk:2+reselect", **options})
    db = open_store(tmp_path / "resel.db")
    coord = Coordinator.start(db, load_bag(bp), load_sites(sp), opts, opener, bag_file=str(bp), sites_file=str(sp))
    STARTED_KEYS.add(coord.run_key)
    return coord


def start_with_data(tmp_path: Path, bag_path: Path, sites_text: str, **options) -> Coordinator:
    """A coordinator for a bag that carries its files (docs/data.md), as `resel run` starts one:
    its inputs checked and hashed first, its outputs home under ``tmp_path/results``."""
    from resel import task_data
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_text, encoding="utf-8")
    bag = load_bag(bag_path)
    manifest = task_data.build(bag)
    db = open_store(tmp_path / "resel.db")
    opts = LiveOptions(**{"poll": 0.3, "strategy": "topk:2", **options})
    return Coordinator.start(db, bag, load_sites(sites_path), opts, open_site, bag_file=str(bag_path),
                             sites_file=str(sites_path), manifest=manifest, results=str(tmp_path / "results"))


def run_with_data(tmp_path: Path, bag_text: str, sites_text: str, max_time: float,
                  **options) -> tuple[Coordinator, dict]:
    """``bag_text`` written as ``tmp_path/bag.toml`` and run to its end (at most ``max_time``
    seconds) by :func:`start_with_data`'s coordinator: the coordinator, closed, and its run's row."""
    bag_path = tmp_path / "bag.toml"
    bag_path.write_text(bag_text, encoding="utf-8")
    coord = start_with_data(tmp_path, bag_path, sites_text, **options)
    try:
        coord.run(max_time=max_time)
    finally:
        coord.close()
    return coord, coord.db["runs"].get(coord.run_id)


def held_job_of(tb, user, name: str) -> str:
    """A held job named ``name`` that a second real ``user`` (uid, gid: test_other_users.Users)
    submits on cluster A; the caller cancels it (``slurm(tb, "a", "scancel", job)``)."""
    done = subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups",
                           "sbatch", "--parsable", "--hold", f"--job-name={name}", "--wrap", "sleep 600"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "SLURM_CONF": tb.slurm_conf_a},
                          cwd="/tmp", timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def slurm(tb, cluster: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    conf = tb.slurm_conf_a if cluster == "a" else tb.slurm_conf_b
    return subprocess.run(list(argv), env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True,
                          check=check, timeout=60)


def fill(tb, cluster: str, cores: int, seconds: int) -> str:
    """Submit a job of another user holding ``cores`` for ``seconds``; wait until it runs."""
    job = slurm(tb, cluster, "sbatch", "--parsable", "-J", "filler", "-n", str(cores), "-t", "5",
                "-o", "/dev/null", "--wrap", f"sleep {seconds}").stdout.strip().split(";")[0]
    wait_until(lambda: slurm(tb, cluster, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", 30,
               f"filler job {job} to start on cluster {cluster}", every=0.3)
    return job


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
    for rec in agents_results(tb, run_key, work_b):
        if rec.get("outcome") == "done" and isinstance(rec.get("task"), int):
            counts[rec["task"]] = counts.get(rec["task"], 0) + 1
    return counts


#: run keys of the runs this test process started (``start``) — the only pilots it may cancel
STARTED_KEYS: set[str] = set()


def run_keys_under(root: Path) -> set[str]:
    """Run keys of every run stored in a ``*.db`` under ``root`` (runs a test made via the CLI)."""
    import sqlite3
    keys: set[str] = set()
    for db in Path(root).rglob("*.db"):
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                keys |= {row[0] for row in con.execute("select run_key from runs where run_key is not null")}
        except sqlite3.Error:
            continue
    return keys


def cancel_leftovers(tb, root: Path | None = None) -> list[str]:
    """Cancel the pilots this test left queued or running on the testbed: those of runs it
    started (``start``, or a run store under ``root``) — never another session's, since the
    testbed is shared by concurrent test sessions."""
    keys = STARTED_KEYS | (run_keys_under(root) if root is not None else set())
    left = []
    for cluster in ("a", "b"):
        lines = slurm(tb, cluster, "squeue", "-h", "-o", "%i %j %T", check=False).stdout.split("\n")
        ids = [ln.split()[0] for ln in lines if len(ln.split()) == 3
               and any(ln.split()[1].startswith(f"resel-{k}-") for k in keys)
               and ln.split()[2] in ("PENDING", "RUNNING", "CONFIGURING")]
        if ids:
            slurm(tb, cluster, "scancel", *ids, check=False)
            left += ids
    return left


def wait_for(check, timeout: float = 15.0, every: float = 0.3):
    """Poll until ``check()`` returns something truthy; that value, or the last one (the
    caller asserts on it)."""
    return poll(check, timeout, every)


# ---------------------------------------------------------------------- faults made with real parts
FORWARDER = r"""
import socket, sys, threading
target = (sys.argv[1], int(sys.argv[2]))
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 0))
server.listen(16)
print(server.getsockname()[1], flush=True)

def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

while True:
    client, _ = server.accept()
    upstream = socket.create_connection(target)
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
"""


class Forwarder:
    """A TCP forwarder in its own process: SSH to a site through it, then SIGSTOP it and the
    connection stalls as a hung network or server would (the kernel still accepts new
    connections on its port; nothing answers)."""

    def __init__(self, host: str, port: int):
        self.proc = subprocess.Popen([sys.executable, "-c", FORWARDER, host, str(port)], stdout=subprocess.PIPE,
                                     text=True)
        self.port = int(self.proc.stdout.readline())

    def stall(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.resume()
        self.proc.kill()
        self.proc.wait()


def queued_ports() -> set[int]:
    """Local ports of this machine's established IPv4 TCP connections (/proc/net/tcp): a
    connection to a stalled Forwarder is established by the kernel and waits there, unanswered."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01":                          # TCP_ESTABLISHED
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def forwarded_tbb(tb, fwd: Forwarder, tmp_path: Path) -> dict:
    """tbb's access table reaching its sshd through ``fwd`` (its own known_hosts: a new port)."""
    empty = tmp_path / "empty_ssh_config"
    empty.write_text("")
    known = tmp_path / "known_hosts_fwd"
    known.write_text("")
    return {"host": "127.0.0.1", "port": fwd.port, "user": tb.user, "key": tb.ssh_key, "ssh_config": str(empty),
            "known_hosts": str(known), "accept_new_host_keys": True}


class Rewriting:
    """A transport that runs every command for real and lets a test rewrite the output of some
    (``rule(argv, stdout) -> stdout``): the scheduler's real reply, in its real format, with one
    field changed — read by the real parser."""

    def __init__(self, inner, rule: Callable[[list[str], str], str]):
        self.inner, self.rule = inner, rule

    def run(self, argv, **kw):
        done = self.inner.run(argv, **kw)
        out = self.rule(list(argv), done.stdout)
        if out is done.stdout:
            return done
        from resel.backends.transport import Completed
        return Completed(done.argv, done.returncode, out, done.stderr)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def opener_with(rule: Callable[[list[str], str], str], sites: tuple[str, ...]):
    """``open_site`` whose scheduler commands for ``sites`` go through :class:`Rewriting`."""
    def opener(site):
        ps = open_site(site)
        if site.name in sites:
            ps.scheduler.transport = Rewriting(ps.scheduler.transport, rule)
        return ps
    return opener


def kill_ctld(tb, cluster: str) -> int:
    """kill -9 a testbed cluster's slurmctld (its pid file); returns the pid."""
    name = {"a": "tba", "b": "tbb"}[cluster]
    pid = int(Path(tb.root, "run", f"slurmctld-{name}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    return pid


def restart_ctld(cluster: str) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "testbed.sh"), "restart-ctld", cluster.upper()], check=True,
                   capture_output=True, timeout=120)


def agents_results(tb, run_key: str, work_b: str | None = None) -> list[dict]:
    """Every result file the agents of a run wrote, on both sites."""
    out = []
    for root in (tb.work_a, work_b or tb.work_b):
        out.extend(run_records(Path(root, run_key)))     # waves and per-key files alike
    return out


def placements_follow_decisions(db, run_id: int) -> list[dict]:
    """Check the stored tasks against the decision log and return the tasks' rows.

    By definition a task starts on its origin (the ``assign`` decision's target) and each later
    decision about it sends it to that decision's target, in the order the engine made them —
    a move-back's target being the origin again, so a provisional move rejected inside its
    window leaves the task where it began. Where it finished (tasks.site) must be the last
    target, its origin the first; a moved-back task ran twice (once on r', cancelled).

    For re-selection runs: a retry after a failure or loss that goes to another site (one more
    try elsewhere, its site gone) and the peers' moves of a whole site (task -1) are not per-task
    decisions; the attempts table has those."""
    tasks = list(db.query("select task, origin, site, attempts from tasks where run_id = ?", [run_id]))
    decisions = list(db.query("select * from decisions where run_id = ? order by seq", [run_id]))
    origin = {d["task"]: d["target"] for d in decisions if d["kind"] == "assign"}
    expected = dict(origin)
    for d in decisions:
        if d["kind"] != "assign" and d["task"] >= 0:
            expected[d["task"]] = d["target"]
    assert {t["task"]: t["site"] for t in tasks} == expected, decisions
    assert {t["task"]: t["origin"] for t in tasks} == origin
    backs = {d["task"] for d in decisions if d["kind"] == "move-back"}
    assert all(t["attempts"] >= 2 for t in tasks if t["task"] in backs), tasks
    return tasks
