"""A real GROMACS campaign whose files travel with its tasks (issue 25, docs/data.md), on every
live backend of the testbed at once:

* ``tba``    — Slurm 22.05, local (this machine's GROMACS 2022.5);
* ``tbb``    — Slurm 22.05 over SSH;
* ``tbc``    — Slurm 24.11 through slurmrestd, files over SSH (the Debian 13 root's GROMACS 2025.2);
* ``torque`` — Debian's Torque wrappers over tba's Slurm;
* ``pool``   — the HTCondor 23.9.6 pool, no shared filesystem: inputs and outputs cross through
  the pilot's input files and condor_chirp (the Debian 13 root's GROMACS).

Water boxes of three sizes are built here with examples/gromacs/make_system.sh; each task gets
its own ``.tpr`` (the box of size ``index % 3``) and the one shared ``md.mdp`` (which sets the
steps), and writes md.log, md.edr, md.gro and md.cpt. Checked from what came home: every output
is there with the sha256 its agent recorded, each task's md.log and md.gro show that task's
own system (its atom count), the shared file crossed to each site once — and again after a
``kill -9`` of the coordinator while files were in flight, and ``--resume``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from live_helpers import REPO, _inline, cancel_leftovers, wait_for
from trixie_helpers import ap, pool_site, tbc_site, trixie  # noqa: F401
from resel.store import open_store

RESEL = [sys.executable, "-m", "resel.cli"]
SITES = ("tba", "tbb", "tbc", "torque", "pool")
BOXES = (2.4, 2.8, 3.1)        # nm: over twice the 1.0 nm cut-off, stable without minimisation (2.6, 3.0 blow up)
COUNT = 15
COMMAND = ("gmx -quiet convert-tpr -s topol.tpr -nsteps $(awk '$1 == \"nsteps\" {print $3}' md.mdp) -o run.tpr "
           "&& gmx -quiet mdrun -s run.tpr -deffnm md -c md.gro -ntmpi 1 -ntomp 1 -nb cpu")
OUTPUTS = ["md.log", "md.edr", "md.gro", "md.cpt"]


@pytest.fixture(scope="module")
def systems(tmp_path_factory) -> dict[float, tuple[Path, int]]:
    """The three water boxes (their .tpr, their atom count), built with this machine's gmx."""
    if shutil.which("gmx") is None:
        pytest.fail("gmx is not installed (scripts/test.sh installs Debian's gromacs)", pytrace=False)
    root = tmp_path_factory.mktemp("boxes")
    out = {}
    for box in BOXES:
        folder = root / f"box{box}"
        subprocess.run(["bash", str(REPO / "examples" / "gromacs" / "make_system.sh"), str(folder), "100"],
                       env={**os.environ, "BOX": str(box)}, check=True, capture_output=True, timeout=300)
        atoms = int((folder / "conf.gro").read_text().splitlines()[1])
        out[box] = (folder / "topol.tpr", atoms)
    return out


def campaign(tmp_path: Path, tb, systems, tag: str) -> tuple[Path, Path, dict[int, int]]:
    """The bag and its files, and the five sites; returns (bag, sites file, expected atoms per task)."""
    (tmp_path / "systems").mkdir()
    atoms = {}
    for i in range(COUNT):
        tpr, n = systems[BOXES[i % 3]]
        shutil.copyfile(tpr, tmp_path / "systems" / f"{i}.tpr")
        atoms[i] = n
    (tmp_path / "md.mdp").write_text("; the campaign's shared parameters (resel task data test)\nnsteps = 300\n")
    bag = tmp_path / "bag.toml"
    bag.write_text(f'[bag]\nname = "water-campaign"\ncommand = {json.dumps(COMMAND)}\ncount = {COUNT}\n'
                   'inputs = [{ path = "systems/{index}.tpr", as = "topol.tpr" }, "md.mdp"]\n'
                   f'outputs = {json.dumps(OUTPUTS)[:-1]}, {{ glob = "md.xtc", optional = true }}]\n'
                   '[bag.profile]\ninstructions = 2e9\n', encoding="utf-8")
    tba = {"transport": "local", "workdir": f"{tb.work_a}/{tag}-tba", "env": {"SLURM_CONF": tb.slurm_conf_a}}
    tbb = {"transport": "ssh", "host": "tb-ssh", "ssh_config": tb.ssh_config, "workdir": f"~/resel-work-{tag}",
           "env": {"SLURM_CONF": tb.slurm_conf_b}}
    torque = {"transport": "local", "workdir": f"{tb.work_a}/{tag}-torque", "env": {"SLURM_CONF": tb.slurm_conf_a},
              "dialect": "torque"}

    def batch(name: str, kind: str, cores: int, access: dict) -> str:
        return (f'[[site]]\nname = "{name}"\nkind = "{kind}"\ncores = {cores}\nclock = {{ base = 2.0 }}\n'
                f'pilot = {{ mode = "single", max_cores = {cores}, walltime = 600 }}\naccess = {_inline(access)}\n\n')
    text = (batch("tba", "slurm", 4, tba) + batch("tbb", "slurm", 4, tbb)
            + tbc_site(tb, api="rest", workdir=f"{tb.work_c}/{tag}-tbc", walltime=600) + "\n"
            + batch("torque", "pbs", 4, torque) + pool_site(tb, workdir=f"{tb.work_c}/{tag}-pool", walltime=600))
    sites = tmp_path / "sites.toml"
    sites.write_text(text, encoding="utf-8")
    return bag, sites, atoms


@pytest.fixture(autouse=True)
def _nothing_left(trixie, tmp_path):
    keys: list[str] = []
    yield keys
    cancel_leftovers(trixie, tmp_path)
    for key in keys:
        ap(trixie, f"condor_rm -constraint 'regexp(\"^resel-{key}-\", JobBatchName)' >/dev/null 2>&1; "
                   f"squeue -h -o '%i %j' | awk '$2 ~ /^resel-{key}-/ {{print $1}}' | xargs -r scancel", check=False)


def check_campaign(db, run_id: int, atoms: dict[int, int], db_path: Path) -> dict[str, int]:
    """Everything home and right; returns how many tasks each site ran."""
    import hashlib
    run = db["runs"].get(run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", COUNT, 0), run
    rows = list(db.query("select task, name, size, sha256, path, site from task_outputs where run_id = ?", [run_id]))
    assert sorted((r["task"], r["name"]) for r in rows) == sorted((i, n) for i in range(COUNT) for n in OUTPUTS)
    for r in rows:
        data = Path(r["path"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (r["size"], r["sha256"]), r["path"]
    per_site: dict[str, int] = {}
    for i in range(COUNT):
        site = next(r["site"] for r in rows if r["task"] == i)
        per_site[site] = per_site.get(site, 0) + 1
        home = Path(run["results"]) / f"task-{i:02d}"
        log = (home / "md.log").read_text(errors="replace")
        assert f"There are: {atoms[i]} Atoms" in log, (i, site)            # this task's own system
        assert int((home / "md.gro").read_text().splitlines()[1]) == atoms[i]
        version = re.search(r"GROMACS version:\s+(\S+)", log).group(1)
        assert version.startswith("2025" if site in ("tbc", "pool") else "2022"), (site, version)
    mdp = hashlib.sha256(Path(run["results"]).parent.parent.joinpath("md.mdp").read_bytes()).hexdigest()
    sent = list(db.query("select site, count(*) as n from site_files where run_id = ? and sha256 = ? group by site",
                         [run_id, mdp]))
    assert {s["site"]: s["n"] for s in sent} == {s: 1 for s in per_site}, "the shared .mdp crossed more than once"
    res = subprocess.run(RESEL + ["results", str(run_id), "--db", str(db_path), "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["counts"] == {"ok": COUNT * len(OUTPUTS), "missing": 0, "changed": 0}
    return per_site


def test_gromacs_campaign_files_travel_to_every_backend_and_come_home(tmp_path, trixie, systems, _nothing_left):
    bag, sites, atoms = campaign(tmp_path, trixie, systems, tag="gmxdata")
    db_path = tmp_path / "resel.db"
    res = subprocess.run(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db_path), "--poll", "0.5",
                                  "--strategy", "topk:5", "--results", str(tmp_path / "results"), "--json",
                                  "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=900)
    db = open_store(db_path)
    run_id = list(db.query("select id, run_key from runs order by id desc limit 1"))[0]
    _nothing_left.append(run_id["run_key"])
    assert res.returncode == 0, res.stderr[-3000:]
    per_site = check_campaign(db, run_id["id"], atoms, db_path)
    assert set(per_site) == set(SITES), per_site
    print(f"GROMACS campaign: tasks per site {per_site}")


def test_gromacs_campaign_survives_kill_9_while_files_are_in_flight(tmp_path, trixie, systems, _nothing_left):
    bag, sites, atoms = campaign(tmp_path, trixie, systems, tag="gmxkill")
    db_path = tmp_path / "resel.db"
    run = subprocess.Popen(RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db_path), "--poll", "0.5",
                                    "--strategy", "topk:5", "--results", str(tmp_path / "results"), "--no-progress"],
                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def in_flight():       # an attempt ended and its outputs are not all home yet
            if not db_path.exists():
                return False
            rows = list(open_store(db_path).query(
                "select (select count(*) from events where kind = 'TaskFetching') as f, "
                "(select count(*) from events where kind = 'TaskDelivered') as d"))
            return rows[0]["f"] > rows[0]["d"] and rows[0]["f"] >= 3
        assert wait_for(in_flight, 600, every=0.05), "no output was ever on its way home"
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.wait()
    db = open_store(db_path)
    row = list(db.query("select id, run_key from runs order by id desc limit 1"))[0]
    _nothing_left.append(row["run_key"])
    res = subprocess.run(RESEL + ["run", "--resume", str(row["id"]), "--db", str(db_path), "--poll", "0.5", "--json",
                                  "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    check_campaign(db, row["id"], atoms, db_path)
    done = list(db.query("select task, count(*) as n from attempts where run_id = ? and outcome = 'done' group by task",
                         [row["id"]]))
    assert {d["task"]: d["n"] for d in done} == {i: 1 for i in range(COUNT)}, "a task ran again"
