"""Named multi-cluster scenarios built from the real traces in ../shared/data (seed 004, seed 000).

``seed004`` maps seed 004's heterogeneous platform ("PWA + Grid'5000": Bordeaux 650 cores at
speed 1.0, CTC-SP2 430 at 1.2, SDSC-SP2 128 at 1.4 — largest slowest, smallest fastest) onto
the three real clusters our traces come from: MetaCentrum's zewura (1,600 cores) at 1.0 and
zegox (576) at 1.2 (both in wagap-2013.swf), and HPC2N's Seth (240, hpc2n.swf) at 1.4. The
two traces are rebased to start together and fused; every job goes through the MCT
meta-scheduler, every cluster runs conservative backfilling, as in seed 004. ``load``
compresses inter-arrival times (2.0 = arrivals twice as dense) to reach the queue lengths at
which reallocation matters.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterator

from resel.errors import InputError, ReselError
from resel.sim.grid import HEURISTICS, Cluster, Grid, GridResult, Reallocation, compare
from resel.sim.swf import Job, drop_zero_runtime, first, fuse, in_submit_order, read_swf, rebase

SEED004_CLUSTERS = [Cluster("zewura", 1600, 1.0), Cluster("zegox", 576, 1.2), Cluster("seth", 240, 1.4)]


def shared_swf_dir() -> Path:
    """Where the real traces are: ``$RESEL_TRACES`` or ../shared/data/swf beside the checkout."""
    if os.environ.get("RESEL_TRACES"):
        return Path(os.environ["RESEL_TRACES"])
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data" / "swf"
        if candidate.is_dir() and _trusted(candidate, parent):
            return candidate
    raise ReselError("cannot find the real traces (../shared/data/swf); set RESEL_TRACES to their folder")


def _trusted(candidate: Path, top: Path) -> bool:
    """A found traces folder is used only if it and the folders down to it (``shared``,
    ``data``) belong to this user or root and no one else can write them: searching upwards
    from an install in /tmp would otherwise read traces any user can leave in /tmp/shared."""
    me = os.getuid()
    folder = candidate
    while True:
        try:
            st = folder.stat()
        except OSError:
            return False
        if st.st_uid not in (me, 0) or st.st_mode & 0o022:
            return False
        if folder == top / "shared":
            return True
        folder = folder.parent


def fused_jobs(traces: dict[str, Path], load: float = 1.0, limit: int | None = None) -> Iterator[Job]:
    """Several traces, each without zero-run jobs and rebased to 0, fused by submit time
    (tagged with their key), with submit times divided by ``load``, the first ``limit`` only."""
    streams = {name: rebase(drop_zero_runtime(in_submit_order(read_swf(path), str(path))))
               for name, path in traces.items()}
    jobs: Iterator[Job] = fuse(streams) if len(streams) > 1 else next(iter(streams.values()))
    if load != 1.0:
        jobs = (dataclasses.replace(j, submit=round(j.submit / load, 3)) for j in jobs)
    return first(jobs, limit) if limit else jobs


def seed004_jobs(load: float = 1.0, limit: int | None = None, swf_dir: Path | None = None) -> Iterator[Job]:
    """wagap-2013 and hpc2n, each rebased to 0, fused by submit time, arrivals / ``load``."""
    folder = swf_dir or shared_swf_dir()
    return fused_jobs({"wagap": folder / "wagap-2013.swf", "hpc2n": folder / "hpc2n.swf"}, load, limit)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One run of a scenario: a label, the reallocation (None: baseline) and options."""

    label: str
    reallocation: Reallocation | None
    exact: bool = False
    policy: str = "conservative"
    dispatcher: str = "mct"


def seed004_variants(period: float, heuristics: tuple[str, ...] = HEURISTICS) -> list[Variant]:
    out = [Variant("baseline", None)]
    out += [Variant(f"regular/{h}", Reallocation("regular", h, period)) for h in heuristics]
    out += [Variant(f"all-cancel/{h}", Reallocation("all-cancel", h, period)) for h in ("mct",)]
    out += [Variant("exact/baseline", None, exact=True), Variant("exact/regular/mct", Reallocation("regular", "mct", period), exact=True)]
    out += [Variant("fcfs/baseline", None, policy="fcfs"), Variant("fcfs/regular/mct", Reallocation("regular", "mct", period), policy="fcfs")]
    return out


def isis_variants() -> list[Variant]:
    return [Variant(f"isis/{d}", None, dispatcher=d) for d in
            ("less-waittime", "less-sld", "less-jobs-in-queue", "less-work-left", "less-submitted-jobs", "random", "mct")]


def _run(args: tuple) -> tuple[str, GridResult]:
    variant, load, limit, swf_dir = args
    clusters = [dataclasses.replace(c, policy=variant.policy) for c in SEED004_CLUSTERS]
    grid = Grid(clusters, variant.dispatcher, variant.reallocation, exact_walltimes=variant.exact)
    return variant.label, grid.run(seed004_jobs(load, limit, swf_dir))


def run_seed004(load: float = 1.5, period: float = 3600.0, limit: int | None = None, workers: int = 2,
                isis: bool = True, swf_dir: Path | None = None,
                on_done: Callable[[str, int, int], None] | None = None) -> dict:
    """Every variant of the seed 004 scenario (and the ISIS dispatchers); paired comparisons.

    ``on_done(label, done, total)`` is called in this process as each variant's run ends (in
    the order they end, not the table's): the whole scenario takes minutes, and a caller that
    shows progress needs to hear from every run, not only from the last."""
    variants = seed004_variants(period) + (isis_variants() if isis else [])
    folder = swf_dir or shared_swf_dir()
    for name in ("wagap-2013.swf", "hpc2n.swf"):   # before any worker starts: one clear error
        if not (folder / name).is_file():
            where = "$RESEL_TRACES" if swf_dir is None and os.environ.get("RESEL_TRACES") else "the traces folder"
            raise InputError(str(folder / name), None, "file not found",
                             f"the real trace {name} in {where} (../shared/data/swf)")
        read_swf(folder / name)     # its header: a trace that cannot be opened fails here too
    jobs = [(v, load, limit, folder) for v in variants]
    results: dict[str, GridResult] = {}

    def done(label: str, result: GridResult) -> None:
        results[label] = result
        if on_done is not None:
            on_done(label, len(results), len(jobs))

    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for future in as_completed([pool.submit(_run, j) for j in jobs]):
                done(*future.result())
    else:
        for j in jobs:
            done(*_run(j))
    rows = []
    for v in variants:
        r = results[v.label]
        base_label = ("exact/baseline" if v.exact else "fcfs/baseline" if v.policy == "fcfs" else "baseline")
        row = {"variant": v.label, **{k: r.summary()[k] for k in ("jobs", "moves", "rounds", "per_cluster")},
               "mean_response": r.stats.summary(1)["response"]["mean"],
               "mean_wait": r.stats.summary(1)["wait"]["mean"],
               "mean_bsld_60": r.stats.summary(1)["bsld_60"]["mean"]}
        if v.reallocation is not None:
            row.update(compare(results[base_label], r))
        rows.append(row)
    return {"scenario": "seed004", "load": load, "period": period, "limit": limit,
            "clusters": [dataclasses.asdict(c) for c in SEED004_CLUSTERS], "rows": rows}
