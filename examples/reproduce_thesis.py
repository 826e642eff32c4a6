"""Reproduce Ha (2018) experiments 2 and 3 on the embedded default sites; print Markdown.

Experiment 2 compares "model" (every task to the lowest LIM T̂x, with OSG's κ = 1.22) with
"random"; experiment 3 replays the random runs with re-selection ("reselect" = random +
re-selection, XSEDE -> OSG only). Repetition i of every strategy uses seed i (paired).

Run:  python examples/reproduce_thesis.py [--repeat 30] > table.md
"""

from __future__ import annotations

import argparse

import resel

PUBLISHED = {  # seeds/003 §4.2–4.3 (ranges over sizes; no per-size numbers are published)
    "model_ttc": "67–85 %", "model_tx": "67–78 %",
    "resel_ttc_small": "≈ 0 % (random 0–4 % better)", "resel_ttc_large": "33–73 %",
    "resel_tq_small": "0–9 %", "resel_tq_large": "97–99 %",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sizes = [64, 128, 256, 512, 1024]
    exp = resel.run_experiment(resel.default_bag(), resel.default_sites(), ["random", "model", "reselect"],
                               sizes, repeat=args.repeat, seed=args.seed)
    print(f"{args.repeat} paired runs per strategy and size, seeds {args.seed}–{args.seed + args.repeat - 1}; "
          "reductions are of the mean, against random (positive = less time).\n")
    print("| size | TTC_wkd random h | model h | reselect h | model vs random: TTC_wkd | T_x,wkd "
          "| reselect vs random: TTC_wkd | T_q,wkd | tasks moved | P_RESEL ≠ RESEL |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        def h(strategy: str) -> str:
            s = exp.cell(strategy, n).summary("ttc_wkd")
            return f"{s['mean'] / 3600:.2f} ± {s['std'] / 3600:.2f}"
        cell = exp.cell("reselect", n).as_dict()
        rs = cell["reselection"]
        print(f"| {n} | {h('random')} | {h('model')} | {h('reselect')} "
              f"| {exp.change('model', 'random', n):.0f} % | {exp.change('model', 'random', n, 'tx_wkd'):.0f} % "
              f"| {exp.change('reselect', 'random', n):.0f} % | {exp.change('reselect', 'random', n, 'tq_wkd'):.0f} % "
              f"| {cell['reassigned']:.0f} of {n} | {rs['incorrect']} of {rs['judged']} "
              f"({100 * rs['incorrect'] / max(1, rs['judged']):.0f} %) |")
    print(f"| thesis | | | | {PUBLISHED['model_ttc']} | {PUBLISHED['model_tx']} "
          f"| 64–128: {PUBLISHED['resel_ttc_small']}; ≥ 256: {PUBLISHED['resel_ttc_large']} "
          f"| 64–128: {PUBLISHED['resel_tq_small']}; ≥ 256: {PUBLISHED['resel_tq_large']} | | |")


if __name__ == "__main__":
    main()
