"""A site's read of its pilots' files over SSH: pilot after pilot (``PilotSite.collect`` each,
as the coordinator read until 2026-11-29) against all at once (``PilotSite.collect_many``).

    .venv/bin/python benchmarks/bench_site_read.py                  # 1, 4, 16 and 64 pilots, 15 rounds
    .venv/bin/python benchmarks/bench_site_read.py --pilots 4,256 --rounds 9 --json

A pool's pilots are many and one-core each: the coordinator reads every running pilot's
heartbeat and new waves at each poll (docs/live.md). Read pilot after pilot, a read costs a
few SFTP round trips *per pilot* (the heartbeat, a round of ``lstat`` for the next wave names,
the waves found); read at once, the same few round trips for the whole site, each batch's
requests in flight together. This measures both on the testbed's SSH site (tbb's login, a
real sshd on localhost: a round trip here is the least it will ever be), with the pilot
directories written by real agents (``resel/shipped/agent.py``'s own ``Agent``, in this
process: its ``agent.json``, heartbeat and result waves, each a real task's record) and made
the SSH user's, as a pilot's are. Each round, every pilot's agent writes one new result wave
and a heartbeat; then both ways read it (each with its own cursors, in alternating order), and
read again with nothing new (a quiet poll). Both must find the same records, or the script
fails. Medians and ranges of ``--rounds`` rounds, per pilot count.

Needs the testbed (``scripts/testbed.sh up``) and root (the files are chowned to its SSH user).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]


def own(path: Path, uid: int, gid: int) -> None:
    """The pilot directory the SSH user's, as its agent's would be. Run as root in a folder
    that user can write: a link they put there is never followed (its target's owner would
    change), only the link itself is chowned."""
    for root, dirs, files in os.walk(path):
        os.chown(root, uid, gid, follow_symlinks=False)
        for name in files + dirs:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def agents(pdirs: list[Path]) -> list[Any]:
    from resel.shipped import agent as agent_module
    out = []
    for pdir in pdirs:
        args = agent_module.parse_args(["--dir", str(pdir), "--pilot", pdir.name.lstrip("p"), "--slots", "1",
                                        "--walltime", "3600"])
        a = agent_module.Agent(args)
        a.setup()
        a.heartbeat()
        out.append(a)
    return out


class Tbb:
    """The testbed's SSH site tbb, opened for a benchmark run as root: ``site`` (its
    ``PilotSite``), ``user`` (the SSH user's passwd entry), a private folder for its sites
    file; :meth:`close` removes what was made."""

    def __init__(self, tag: str) -> None:
        import pwd

        from soak_crash import sites_text, soak_sites
        from testbed import load

        from resel.backends.connect import open_site
        from resel.config import load_sites
        tb = load()
        if tb is None:
            raise SystemExit("no testbed: run `scripts/testbed.sh up` first")
        if os.geteuid() != 0:
            raise SystemExit("run as root: the pilot files are made the SSH user's")
        self.user = pwd.getpwnam(tb.user)
        self.chosen = soak_sites(tb, ["tbb"], f"{tag}-{os.getpid()}")
        self.work = Path(tempfile.mkdtemp(prefix=f"resel-{tag}-"))    # private, not a name another user can take first
        self.site = None
        try:
            sites_file = self.work / "sites.toml"
            sites_file.write_text(sites_text(tb, self.chosen))
            self.site = open_site(load_sites(sites_file)[0])
        except BaseException:      # nothing left behind when tbb cannot be opened
            self.close()
            raise

    def close(self) -> None:
        from resel.backends.connect import close_quietly
        if self.site is not None:
            close_quietly(self.site)
        shutil.rmtree(self.chosen[0].host_dir, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)


def read_one_by_one(ps: Any, run_key: str, state: list[tuple[int, set, Any]]) -> dict[int, Any]:
    return {p: ps.collect(run_key, p, seen, heartbeat=True, cursor=cursor) for p, seen, cursor in state}


def read_at_once(ps: Any, run_key: str, state: list[tuple[int, set, Any]]) -> dict[int, Any]:
    return ps.collect_many(run_key, state, heartbeat=True)


def keys(found: dict[int, Any]) -> dict[int, list[tuple[int, int]]]:
    return {p: sorted((r["task"], r["attempt"]) for r in f.results) for p, f in found.items()}


def measure(ps: Any, run_key: str, count: int, rounds: int, uid: int, gid: int) -> dict[str, Any]:
    from resel.backends.waves import WaveCursor
    base = Path(ps.pilot_dir(run_key, 0)).parent
    pdirs = [Path(ps.pilot_dir(run_key, p)) for p in range(count)]
    for pdir in pdirs:
        pdir.mkdir(parents=True, exist_ok=True)
        os.chmod(pdir, 0o700)
    made = agents(pdirs)
    own(base, uid, gid)
    ways = {"one by one": read_one_by_one, "at once": read_at_once}
    states = {w: [(p, set(), WaveCursor()) for p in range(count)] for w in ways}
    for w, how in ways.items():
        how(ps, run_key, states[w])            # the first read: each incarnation listed once
    seconds: dict[str, dict[str, list[float]]] = {w: {"new": [], "quiet": []} for w in ways}
    task = 0
    for r in range(rounds):
        for a in made:
            a.result(task, 1, "done", None, start=time.time() - 0.01, exit_code=0)
            a.write_waves()
            a.heartbeat()
            task += 1
        own(base, uid, gid)
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        found = {}
        for kind in ("new", "quiet"):
            for w in order:
                t = time.perf_counter()
                found[(w, kind)] = ways[w](ps, run_key, states[w])
                seconds[w][kind].append(time.perf_counter() - t)
        for kind in ("new", "quiet"):
            if keys(found[("one by one", kind)]) != keys(found[("at once", kind)]):
                raise SystemExit(f"{count} pilots, round {r}: the two reads found different records ({kind})")
        if any(len(v) != 1 for v in keys(found[("at once", "new")]).values()):
            raise SystemExit(f"{count} pilots, round {r}: a pilot's new wave was not found")
    return {w: {kind: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
                for kind, v in by.items()} for w, by in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pilots", default="1,4,16,64", help="pilot counts to measure (default 1,4,16,64)")
    ap.add_argument("--rounds", type=int, default=15, help="reads of each way per pilot count (default 15)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    tbb = Tbb("read")
    ps, user = tbb.site, tbb.user
    doc: dict[str, Any] = {"site": "tbb", "transport": "ssh", "rounds": args.rounds,
                           "load_start": os.getloadavg()[0], "by_pilots": {}}
    try:
        for count in (int(x) for x in args.pilots.split(",")):
            run_key = f"r9-{count:06x}"
            try:
                doc["by_pilots"][count] = measure(ps, run_key, count, args.rounds, user.pw_uid, user.pw_gid)
            finally:
                shutil.rmtree(Path(ps.pilot_dir(run_key, 0)).parent, ignore_errors=True)
    finally:
        tbb.close()
    doc["load_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"a site's read over SSH (tbb), median (min-max) of {args.rounds} rounds, s")
    print(f"{'pilots':>6}  {'new wave: one by one':>24} {'at once':>22} {'ratio':>6}   {'quiet: one by one':>22} {'at once':>22} {'ratio':>6}")
    for count, r in doc["by_pilots"].items():
        cells = []
        for kind in ("new", "quiet"):
            a, b = r["one by one"][kind], r["at once"][kind]
            cells.append(f"{a['median_s']:>8.4f} ({a['min_s']:.4f}-{a['max_s']:.4f}) {b['median_s']:>8.4f} "
                         f"({b['min_s']:.4f}-{b['max_s']:.4f}) {b['median_s'] / a['median_s']:>6.2f}")
        print(f"{count:>6}  {cells[0]}   {cells[1]}")
    print(f"load average {doc['load_start']:.2f} -> {doc['load_end']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
