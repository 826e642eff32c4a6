"""The README's headline figures, held by measurement (issue 16 item 6).

Each figure the README states is re-measured here and asserted with the margin its measurement
needs, and the README is checked to still state it — so a change of behaviour that moves a
figure fails here until the README says the new one. The GROMACS figures are in
tests/test_gromacs_example.py; the coverage figures of docs/calibration.md in
tests/test_coverage_figures.py.

Margins: the simulated figures are means over 5 paired seeds of a stochastic simulation; the
README's own numbers come from those very seeds, so the margin only has to absorb deliberate
changes of the engine's tie-breaking (the textbook-exact policies of issue 15 move single
starts by seconds): a few points.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

import resel
from resel.sim.simulation import simulate
from resel.sim.experiment import run_experiment, split_spec

REPO = Path(__file__).resolve().parent.parent
README = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())


def test_simulate_headline_table():
    """The main job in the README (issue 26 item 7): resel's default finishes 256 tasks 73 %
    sooner than the best of the fastest clock, earliest, race and failover, and 1,024 tasks 49 %
    sooner, on the embedded queue sites (3 runs, the queues met 3 days later per run), and no
    run beats the oracle's bound; what `resel simulate` runs without options. (67 % and 38 %
    until 2026-11-29, when the queue-aware menu began to offer the pilot sizes between
    halvings: auto's mean TTC 2.31 → 1.93 h and 6.55 → 5.39 h, the peers unchanged.)"""
    for text in ("256 tasks in 1.93 h, 73% sooner than earliest", "1,024 tasks in 5.39 h, 49% sooner",
                 "auto ran as queue+reselect+learn"):
        assert text in README, text
    bag, sites = resel.default_bag(), resel.load_sites(resel.queue_sites_path())
    exp = run_experiment(bag, sites, ["auto", "model", "earliest", "race", "failover", "oracle"], [256, 1024],
                         repeat=3, seed=0, shift=3 * 86400, record=False)
    best, pct = exp.sooner(256)
    assert best == "earliest" and pct == pytest.approx(73, abs=4)
    best, pct = exp.sooner(1024)
    assert best == "earliest" and pct == pytest.approx(49, abs=4)
    for size in (256, 1024):
        bounds = exp.cells[("oracle", size)].runs
        for name in ("auto", "model", "earliest", "race", "failover"):
            for run, bound in zip(exp.cells[(name, size)].runs, bounds):
                assert run.metrics.ttc_wkd >= bound.metrics.ttc_wkd


def test_queue_aware_headline():
    """'In simulation on three queues replaying the real HPC2N trace it finishes bags 33–75 %
    sooner than the thesis's re-selection alone': traces-3q, twin estimates, 16/64/256 tasks,
    seeds 0–4 with the bag's arrival 3 days later per seed (benchmarks/eval_queue_aware.py)."""
    assert "33–75 % sooner than the thesis's re-selection alone" in README
    base = resel.load_sites(REPO / "examples" / "sites-traces-hpc.toml")
    gains = {}
    for size in (16, 64, 256):
        bag = resel.default_bag().resized(size)
        ratios = []
        for i in range(5):
            sites = [s if s.queue is None else dataclasses.replace(
                s, queue=dataclasses.replace(s.queue, offset=s.queue.offset + i * 3 * 86400)) for s in base]
            ttc = {}
            for spec in ("reselect", "queue+reselect@twin"):
                strat, source, _ = split_spec(spec)
                ttc[spec] = simulate(bag, sites, strat, seed=i, record=False, estimate=source,
                                     quantile=0.9, confidence=0.9).metrics.ttc_wkd
            ratios.append(ttc["queue+reselect@twin"] / ttc["reselect"])
        gains[size] = 100 * (1 - statistics.median(ratios))
    # documented 49 / 75 / 33 % (docs/queue-aware.md); the README's range with a few points' margin
    assert min(gains.values()) >= 33 - 5, gains
    assert max(gains.values()) <= 75 + 5, gains


def test_the_readme_shows_what_resel_simulate_prints(tmp_path):
    """The README's "What `resel simulate` shows" block is the command's own output: its header,
    rule and every row, and its legend and verdict, line for line: the main job as typed, without
    storing it."""
    from click.testing import CliRunner

    from resel.cli import cli
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## What `resel simulate` shows", 1)[1].split("```", 2)[1].strip("\n").splitlines()
    # a store of its own: the T̂x model line reads the default store's fits (none here)
    result = CliRunner().invoke(cli, ["simulate", "--no-store", "--db", str(tmp_path / "r.db")],
                                env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    printed = [line.rstrip() for line in result.stdout.splitlines()]
    shown = [line.rstrip() for line in block if line.strip() and line.strip() != "…"]
    table = [line for line in shown if not line.startswith(("stored as", "report RUN"))]   # the store's path differs
    for line in table:
        assert line in printed, f"the README shows a line resel simulate does not print:\n{line}"
    assert printed.index(table[0]) == 0 and "--no-store" in printed[-1]
