"""What the pilot-size ladder costs live: the start estimates of every size, asked of real sites
(issue 26, docs/peers.md "The pilot-size ladder").

    .venv/bin/python benchmarks/bench_menu_live.py              # the testbed's four sites, 5 rounds
    .venv/bin/python benchmarks/bench_menu_live.py --repeat 9 --json

The queue-aware split weighs every size of :meth:`Engine.probe_menu`, each with its start
estimate. Since 2026-11-29 the menu is a ladder, each size 2^(-1/2) of the one before
(:func:`resel.engine_pilots.menu_ladder`: 15 sizes for a 240-slot site) instead of the halvings
(:func:`~resel.engine_pilots.halving_menu`: 6). Live, ``resel plan`` and a run's preflight ask
each size's estimates one after another within a site (the sites at once): the twin (computed
here from one queue snapshot) and the scheduler's own answer (``sbatch --test-only`` and its
kin, one call per size; slurmrestd and HTCondor have none, so there the scheduler's answer is
None without a request). This measures both menus of a 240-slot site, interleaved, on each
testbed site (the sizes clipped to the site's cores: the testbed's sites have 4-8; what is
timed is the calls, not the answers): :func:`resel.live.plan.site_estimates` on an open site
(``test_only`` asked once per size: ``calls`` in the JSON), median and range of ``--repeat`` rounds. Then the whole
``resel plan`` process, as a user types it, on the four sites with each menu (its own sizes:
8, 5, 4, 2, 1 against 8, 4, 2, 1 on tba's 8 cores), interleaved.

Needs the testbed (``scripts/testbed.sh up``; its Debian 13 part for tbc and the pool).
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]

#: the full pilot of a Seth queue (HPC2N's trace sites): the menus measured are this one's
FULL = 240
#: a child that runs the CLI with the menu chosen by RESEL_BENCH_MENU_STEPS (1: the halvings)
CHILD = ("import os, sys; import resel.engine_pilots as e; "
         "e.MENU_STEPS = int(os.environ['RESEL_BENCH_MENU_STEPS']); "
         "from resel.cli import main; sys.argv[0] = 'resel'; main()")


def menus() -> dict[str, list[int]]:
    from resel.engine_pilots import halving_menu, menu_ladder
    return {"halvings": halving_menu(FULL), "ladder": menu_ladder(FULL)}


def time_estimates(sites: list, repeat: int) -> dict[str, Any]:
    """Per site and menu: site_estimates' wall time (median, min, max) and its scheduler calls."""
    from resel.backends.connect import close_quietly, open_site
    from resel.live.plan import site_estimates
    out: dict[str, Any] = {}
    for site in sites:
        ps = open_site(site)
        try:
            calls = [0]
            asked = ps.scheduler.test_only

            def counted(*a: Any, _asked: Any = asked, **k: Any) -> Any:
                calls[0] += 1
                return _asked(*a, **k)
            ps.scheduler.test_only = counted     # type: ignore[method-assign]
            seconds: dict[str, list[float]] = {name: [] for name in menus()}
            made: dict[str, int] = {}
            notes: dict[str, Any] = {}
            for _ in range(repeat):
                for name, sizes in menus().items():
                    shapes = [(min(k, site.cores), 1, 900.0) for k in sizes]
                    calls[0] = 0
                    t = time.perf_counter()
                    row = site_estimates(ps.scheduler, site, shapes, 10.0, None, quantile=0.95, confidence=0.95)
                    seconds[name].append(time.perf_counter() - t)
                    made[name] = calls[0]
                    notes = {"scheduler": row.menu[0].get("scheduler_note"), "twin": row.menu[0].get("twin_note")}
            out[site.name] = {"kind": site.kind, "notes": notes,
                              **{name: {"sizes": len(menus()[name]), "calls": made[name],
                                        "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
                                 for name, v in seconds.items()}}
        finally:
            close_quietly(ps)
    return out


def time_plans(bag: Path, sites_file: Path, repeat: int, workdir: Path) -> dict[str, Any]:
    """The whole ``resel plan --json`` process with each menu, interleaved; the plans' menus."""
    runs: dict[str, list[float]] = {"halvings": [], "ladder": []}
    sizes: dict[str, Any] = {}
    for _ in range(repeat):
        for name, steps in (("halvings", 1), ("ladder", 2)):
            env = dict(os.environ, RESEL_BENCH_MENU_STEPS=str(steps), RESEL_CACHE_DIR="off")
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", CHILD, "plan", str(bag), "--sites", str(sites_file),
                                   "--db", str(workdir / "plan.db"), "--json"],
                                  env=env, capture_output=True, text=True, cwd=workdir)
            runs[name].append(time.perf_counter() - t)
            if done.returncode != 0:
                raise SystemExit(f"resel plan ({name}) failed ({done.returncode}):\n{done.stderr[-2000:]}")
            doc = json.loads(done.stdout)
            sizes[name] = {r.get("site"): len(r.get("menu") or []) for r in doc.get("sites", [])
                           if isinstance(r, dict)}
    return {name: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "menu_sizes": sizes.get(name)}
            for name, v in runs.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="rounds of each menu, interleaved (default 5)")
    ap.add_argument("--sites", default="tba,tbb,tbc,pool", help="testbed sites (default tba,tbb,tbc,pool)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    from live_helpers import bag_toml
    from soak_crash import sites_text, soak_sites
    from testbed import load

    from resel.config import load_sites
    tb = load()
    if tb is None:
        raise SystemExit("no testbed: run `scripts/testbed.sh up` first")
    work = Path(tempfile.mkdtemp(prefix="resel-menu-"))
    try:
        chosen = soak_sites(tb, args.sites.split(","), f"menu-{os.getpid()}")
        sites_file, bag = work / "sites.toml", work / "bag.toml"
        sites_file.write_text(sites_text(tb, chosen))
        bag.write_text(bag_toml(200, "sleep 1", instructions=1e9, name="menu"))
        doc = {"full": FULL, "menus": menus(), "load_start": os.getloadavg()[0],
               "estimates": time_estimates(load_sites(sites_file), args.repeat),
               "plan": time_plans(bag, sites_file, args.repeat, work), "load_end": os.getloadavg()[0]}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"start estimates of a {FULL}-slot site's menu: halvings {menus()['halvings']}, ladder {len(menus()['ladder'])} sizes")
    print(f"{'site':<6} {'kind':<9} {'halvings s (min-max)':>22} {'ladder s (min-max)':>22} {'+ per size ms':>14}  scheduler's answer")
    for name, r in doc["estimates"].items():
        h, lad = r["halvings"], r["ladder"]
        extra = (lad["median_s"] - h["median_s"]) / (lad["sizes"] - h["sizes"]) * 1000
        said = r["notes"].get("scheduler") or "a start time"
        print(f"{name:<6} {r['kind']:<9} "
              f"{h['median_s']:>7.3f} ({h['min_s']:.3f}-{h['max_s']:.3f}) {lad['median_s']:>7.3f} ({lad['min_s']:.3f}-{lad['max_s']:.3f}) "
              f"{extra:>13.1f}  {said}")
    print(f"whole `resel plan --json` on {args.sites} (the testbed's own menus):")
    for name, r in doc["plan"].items():
        print(f"  {name:<9} {r['median_s']:.2f} s ({r['min_s']:.2f}-{r['max_s']:.2f}); sizes per site {r['menu_sizes']}")
    print(f"load average {doc['load_start']:.2f} -> {doc['load_end']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
