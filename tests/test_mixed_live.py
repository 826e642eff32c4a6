"""One bag across every live backend family at once (issue 14 §4), on the real testbed:

* ``tbb``   — Slurm 22.05 over SSH (the CLI: sbatch/squeue/scancel), 4 CPUs;
* ``tbc``   — Slurm 24.11 through slurmrestd (JWT; API v0.0.40+), files over SSH, 4 CPUs;
* ``torque`` — Debian's Torque wrappers (qsub/qstat/qdel) over cluster tba's Slurm, 8 CPUs;
* ``pool``  — the HTCondor 23.9.6 pool behind its access point, single-core pilots whose tasks
  travel through condor_chirp.

tbb is filled by another job first: queue-aware selection (``queue+reselect``) reads every
site's queue (the twins of Slurm 22.05, 24.11, the Torque wrappers and the pool) and gives tbb
no task; re-selection then moves waiting tasks to whichever site started (on the shared testbed
the twins are often wrong — other sessions' jobs come and go — and re-selection fixes that:
the first recorded run moved 12 of tbc's tasks to torque and the pool). Checked from what
really happened: every task done exactly once in the store and in the agents' own result files
on each site's disk, every re-selection decision against the window rule (docs/engine.md), and
``resel report --html`` of the run, opened in headless Chromium as tests/test_plots.py does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_files import run_records
from live_helpers import REPO, _inline, bag_toml, cancel_leftovers, fill, placements_follow_decisions, slurm, start
from trixie_helpers import ap, host_path, pool_site, tbc_site, trixie  # noqa: F401

SITES = ("tbb", "tbc", "torque", "pool")


def mixed_sites(tb, *, tag: str, clocks: dict[str, float] | None = None) -> tuple[str, dict[str, Path]]:
    """The four sites' TOML, and where each site's pilot directories are seen from this machine."""
    clocks = {"tbb": 2.0, "tbc": 2.0, "torque": 2.0, "pool": 2.0, **(clocks or {})}
    work_b = f"~/resel-work-{tag}"
    tbb = {"transport": "ssh", "host": "tb-ssh", "ssh_config": tb.ssh_config, "workdir": work_b,
           "env": {"SLURM_CONF": tb.slurm_conf_b}}
    torque_dir = f"{tb.work_a}/{tag}-torque"
    torque = {"transport": "local", "workdir": torque_dir, "env": {"SLURM_CONF": tb.slurm_conf_a},
              "dialect": "torque"}
    text = (f'[[site]]\nname = "tbb"\nkind = "slurm"\ncores = 4\nclock = {{ base = {clocks["tbb"]} }}\n'
            f'pilot = {{ mode = "single", max_cores = 4, walltime = 600 }}\naccess = {_inline(tbb)}\n\n'
            + tbc_site(tb, api="rest", workdir=f"{tb.work_c}/{tag}-tbc", clock=clocks["tbc"]) + "\n"
            + f'[[site]]\nname = "torque"\nkind = "pbs"\ncores = 8\nclock = {{ base = {clocks["torque"]} }}\n'
              f'pilot = {{ mode = "single", max_cores = 8, walltime = 600 }}\naccess = {_inline(torque)}\n\n'
            + pool_site(tb, workdir=f"{tb.work_c}/{tag}-pool", clock=clocks["pool"]))
    dirs = {"tbb": Path(tb.work_b.replace("resel-work", f"resel-work-{tag}")),
            "tbc": host_path(tb, f"{tb.work_c}/{tag}-tbc"), "torque": Path(torque_dir),
            "pool": host_path(tb, f"{tb.work_c}/{tag}-pool")}
    return text, dirs


def agents_done(dirs: dict[str, Path], run_key: str) -> dict[int, list[str]]:
    """From the agents' own result files on every site: the sites where each task finished done."""
    done: dict[int, list[str]] = {}
    for site, root in dirs.items():
        for rec in run_records(root.joinpath(run_key)):
            if rec.get("outcome") == "done":
                done.setdefault(rec["task"], []).append(site)
    return done


@pytest.fixture(autouse=True)
def _nothing_left(trixie, tmp_path):
    keys: list[str] = []
    yield keys
    cancel_leftovers(trixie, tmp_path)                      # tbb and tba (the Torque site)
    for key in keys:                                        # tbc and the pool: this test's runs only
        ap(trixie, f"condor_rm -constraint 'regexp(\"^resel-{key}-\", JobBatchName)' >/dev/null 2>&1; "
                   f"squeue -h -o '%i %j' | awk '$2 ~ /^resel-{key}-/ {{print $1}}' | xargs -r scancel",
           check=False)


def test_one_bag_on_slurm_22_and_24_torque_and_htcondor(tmp_path, trixie, _nothing_left):
    sites, dirs = mixed_sites(trixie, tag="mixed")
    filler = fill(trixie, "b", 4, 25)                        # tbb's pilot waits ~25 s behind it
    try:
        coord = start(tmp_path, sites, bag_toml(32, "sleep 2; echo task $RESEL_TASK on $RESEL_SITE"),
                      strategy="queue+reselect")
        _nothing_left.append(coord.run_key)
        coord.run(max_time=420)
        coord.close()
    finally:
        slurm(trixie, "b", "scancel", filler, check=False)
    db, run_id = coord.db, coord.run_id
    run = db["runs"].get(run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", 32, 0), run
    rows = list(db.query("select task, site, count(*) as n from attempts where run_id = ? and outcome = 'done' "
                         "group by task", [run_id]))
    assert {r["task"]: r["n"] for r in rows} == {i: 1 for i in range(32)}
    done = agents_done(dirs, coord.run_key)
    assert {t: len(s) for t, s in done.items()} == {i: 1 for i in range(32)}, done
    assert {t: s[0] for t, s in done.items()} == {r["task"]: r["site"] for r in rows}   # the store agrees
    ran_on = {r["site"] for r in rows}
    assert len(ran_on) >= 2 and ran_on <= set(SITES) - {"tbb"}, ran_on
    # the queue-aware split, and the moves checked against the window rule (docs/engine.md)
    decisions = list(db.query("select * from decisions where run_id = ? and kind != 'assign'", [run_id]))
    assigned = {r["site"] for r in db.query("select target as site from decisions where run_id = ? and kind = 'assign'",
                                            [run_id])}
    assert "tbb" not in assigned, assigned                   # its twin saw it full: no task waits there
    for d in decisions:
        if d["kind"] == "move-back":
            assert d["a_r"] is not None and d["a_r"] - d["a_r2"] < d["window"], d
        elif d["kind"] == "window-commit":
            assert d["a_r"] is None or d["a_r"] - d["a_r2"] >= d["window"] - 1e-9, d
        assert d["target"] in SITES and d["origin"] in assigned, d
    tasks = placements_follow_decisions(db, run_id)         # where each task ends follows from its decisions
    moved = [t for t in tasks if t["origin"] != t["site"]]  # (a move rejected in its window leaves none)
    if not any(d["kind"].startswith("reselect") for d in decisions):
        assert not moved, moved                             # every origin started at once: nothing to fix
    print(f"mixed run: tasks per site {dict((s, sum(r['site'] == s for r in rows)) for s in SITES)}, "
          f"moved {len(moved)}, decisions {sorted({d['kind'] for d in decisions})}")
    # each backend family through its own scheduler
    psites = coord.psites
    assert type(psites["tbb"].scheduler).__name__ == "SlurmCLI"
    assert type(psites["tbc"].scheduler).__name__ == "SlurmREST"
    assert psites["torque"].scheduler.dialect == "torque"
    assert type(psites["pool"].scheduler).__name__ == "HTCondorCLI"
    # resel report --html of the run, opened in a real browser
    page = tmp_path / "mixed.html"
    rep = subprocess.run([sys.executable, "-m", "resel.cli", "report", str(run_id), "--db", str(tmp_path / "resel.db"),
                          "--html", str(page)], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert rep.returncode == 0, rep.stderr
    html = page.read_text(encoding="utf-8")
    assert all(name in html for name in SITES)
    assert not any(f'{attr}="http' in html for attr in ("src", "href")), "the report loads something from outside"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is not installed: apt-get install -y chromium (Debian package 'chromium')"
    shot = tmp_path / "shot.png"
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
                          capture_output=True, text=True, timeout=90)
    assert shot.exists(), f"chromium wrote no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
    import matplotlib.image as mpimg
    import numpy as np
    pixels = mpimg.imread(shot)
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 50, "the screenshot is blank"
