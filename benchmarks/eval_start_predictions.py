"""Start predictions judged where they matter (issue 26 item 6): on HPC2N and wagap, walk-forward,
scored on the jobs whose recorded wait was at least 10 minutes.

    nice .venv/bin/python benchmarks/eval_start_predictions.py --cache /tmp/probes
    nice .venv/bin/python benchmarks/eval_start_predictions.py --trace hpc2n --json

Per trace and predictor: the share of point predictions within a factor of 2 of the real wait
(goal ≥ 50 %), the P90's coverage (goal 88–92 %) and its median ratio to the real wait (goal ≤ 4),
the pinball-loss skill over a per-queue empirical-quantile baseline (goal ≥ 25 %); then the
±10-minute hits by bucket of the real wait (information). resel/sim/start_eval.py says how.

The probes (the queue rebuilt at each job's submission, the twin's and the scheduler's
estimates) are the slow part: wagap's take minutes. ``--cache DIR`` keeps them, keyed by the
trace, the policy and a digest of the code that makes them.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:                                    # an installed resel first (pip install .)
    import resel  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data" / "swf"
KNOWN = {"hpc2n": (DATA / "hpc2n.swf", 240), "wagap": (DATA / "wagap-2013.swf", 2176)}
def code_digest() -> str:
    """The cache key's digest of the code that makes the probes: the same code as
    eval_finish_coverage.py's probes, so its digest."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from eval_finish_coverage import code_digest as digest
    return digest()


def judged_for(name: str, policy: str, cache: Path | None) -> tuple[list, dict]:
    """One trace's judged jobs and how long the parts took."""
    from resel.sim import start_eval as se
    from resel.sim.hit_eval import clock_offset
    from resel.sim.swf import Trace
    path, cores = KNOWN[name]
    trace = Trace(path)
    jobs = list(trace)
    offset = clock_offset(trace)
    t0 = time.perf_counter()
    probes = None
    key = cache / f"start-probes-{name}-{policy}-{code_digest()}.pkl" if cache else None
    if key is not None and key.exists():
        probes = pickle.loads(key.read_bytes())
    if probes is None:
        probes = se.probes_of(se.trace_jobs(jobs, cores).recorded, cores, policy=policy, clock_offset=offset)
        if key is not None:
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_bytes(pickle.dumps(probes))
    t1 = time.perf_counter()
    judged = se.judge_trace(jobs, cores, policy=policy, clock_offset=offset, probes=probes)
    t2 = time.perf_counter()
    return judged, {"probes_s": t1 - t0, "predict_s": t2 - t1, "jobs": len(jobs), "cores": cores}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="hpc2n,wagap", help="comma-separated: hpc2n, wagap")
    ap.add_argument("--policy", default="easy", help="the policy the queue is rebuilt with")
    ap.add_argument("--cache", type=Path, default=None, help="keep the probes here and reuse them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from resel.sim import start_eval as se
    scores, times = [], {}
    for name in args.trace.split(","):
        if name not in KNOWN:
            ap.error(f"unknown trace {name!r}; one of {', '.join(KNOWN)}")
        judged, took = judged_for(name, args.policy, args.cache)
        times[name] = took
        scores.append(se.score(judged, KNOWN[name][0].name))
    if args.json:
        print(json.dumps({"scores": [s.as_dict() for s in scores], "times": times}, indent=1))
        return 0
    for name, t in times.items():
        print(f"{KNOWN[name][0].name}: {t['cores']} cores, {t['jobs']} jobs, probes {t['probes_s']:.0f} s, "
              f"predictions {t['predict_s']:.0f} s")
    print()
    print(se.markdown(scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
