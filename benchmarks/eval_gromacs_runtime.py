"""Held-out accuracy and interval coverage of the calibrated runtime model on real GROMACS.

    .venv/bin/python benchmarks/eval_gromacs_runtime.py [--data benchmarks/data/gromacs-runtime.jsonl]

Reads the measurements of ``benchmarks/measure_gromacs_runtime.py`` (real ``gmx`` and ``gmx_d``
runs of examples/gromacs at nsteps 10^3–10^5 on this machine) and scores resel's model code on
them (resel.sim.runtime_eval): median, mean and 90th-percentile absolute error of held-out runs, and
how often the 90 % interval from the calibration residuals covered them. Prints a markdown
table; ``--json`` the whole result; ``--ratios FILE`` writes the training residuals and held-out
ratios that benchmarks/eval_finish_coverage.py combines with replayed waits.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:                                    # an installed resel first (pip install .): the checkout's
    import resel  # noqa: F401          # resel/ lacks resel.probes/models/backends, which an
except ImportError:                     # install maps from probes/, models/, backends/
    sys.path.insert(0, str(ROOT))

from resel.sim import runtime_eval as rt  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "gromacs-runtime.jsonl"
RATIOS = ROOT / "benchmarks" / "data" / "gromacs-runtime-ratios.json"

GOALS = {"mdape": 5.0, "mape": 8.0, "p90_ape": 15.0, "coverage": (0.88, 0.92)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--ratios", type=Path, default=None, help=f"write run-time ratios here (e.g. {RATIOS.name})")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = rt.evaluate(rt.read(args.data))
    if args.ratios:
        args.ratios.write_text(json.dumps(res["ratios"]) + "\n")
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "ratios"}, indent=1, default=str))
        return 0
    h = res["host"]
    print(f"host {h.get('model')} ({h.get('base_ghz')} GHz, {h.get('cpus')} cpus), GROMACS {h.get('gromacs')}, "
          f"{h.get('atoms')} atoms; load average while measuring: median {res['load']['median']}, "
          f"max {res['load']['max']}")
    for cfg, c in res["instructions"].items():
        print(f"{cfg}: I(n) = {c['setup'] / 1e6:.1f} M + {c['per_step'] / 1e6:.3f} M·n (callgrind)")
    for cfg, c in res["configs"].items():
        sp = c.get("split") or {}
        print(f"{cfg}: {c['runs']} runs, nsteps {c['nsteps'][0]}–{c['nsteps'][1]}; split fit: "
              f"{sp.get('rate_ginstr_s', float('nan')):.3f} G instructions/s, 90 % interval ×"
              f"{sp.get('interval_ratio', [float('nan')] * 2)[0]:.3f}–{sp.get('interval_ratio', [float('nan')] * 2)[1]:.3f}")
    print()
    print(rt.markdown(res))
    print()
    print(f"goals: median ≤ {GOALS['mdape']} %, mean ≤ {GOALS['mape']} %, P90 ≤ {GOALS['p90_ape']} %, "
          f"90 % interval covering {100 * GOALS['coverage'][0]:.0f}–{100 * GOALS['coverage'][1]:.0f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
