"""The coverage figures docs/calibration.md reports, re-measured (issue 16 items 5–6).

* Recorded HPC2N (every job after a 10 % warm-up predicted from what was known at its
  submission, judged against its recorded wait): the conditioned twin's 90 % wait interval
  covers 90.0 % of the jobs that waited (goal 88–92 %); its likeliest ±10 min start hits 32.0 %
  of them against the scheduler's 18.5 % (1.73×). The computation is deterministic, so the
  margin is only the rounding of the documented figures.
* Recorded HPC2N, the ±10 min hits of docs/calibration.md §5.3 (resel.sim.hit_eval): the learned
  start 35.2 % (1.91× the scheduler; the goal of 3× is missed, and said so), "always 10 min"
  35.0 %, the clairvoyant twin 25.4 % and 37.9 % with the oracle hedge — each row of the
  documented table re-measured, and the hit counts re-derived from the definition here.
  (These are the figures of the textbook-exact EASY twin of issue 15; the pre-merge code gave
  90.1 %, 32.1 % and 14.36 h — docs/calibration.md §5 says why they moved.)
* GROMACS: the held-out scores of the committed measurements (benchmarks/data), re-analysed by
  resel's model code — deterministic too; the figures are those of docs/calibration.md.

wagap (17,181 probes, minutes of CPU) is left to the benchmark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from resel.sim import finish_eval as fe
from resel.sim import hit_eval as he
from resel.sim import wait_eval as we
from resel.sim.swf import Trace

REPO = Path(__file__).resolve().parent.parent
HPC2N = REPO.parent / "shared" / "data" / "swf" / "hpc2n.swf"
DOC = " ".join((REPO / "docs" / "calibration.md").read_text(encoding="utf-8").split())
README = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())


@pytest.fixture(scope="module")
def hpc2n_probes():
    trace = Trace(HPC2N)
    return fe.recorded_probes(we.load_recorded(trace, 240), "easy", 240, hits=True,
                              clock_offset=he.clock_offset(trace))


@pytest.fixture(scope="module")
def hpc2n_rows(hpc2n_probes):
    return fe.conditioned_rows(hpc2n_probes, "twin")


def test_conditioned_wait_interval_covers_ninety_percent_of_recorded_hpc2n_waits(hpc2n_rows):
    waited = fe.score([r for r in hpc2n_rows if r.real > 0], "waited")
    assert waited.probes == 2972 and waited.predicted == 2925
    assert waited.wait_cov90 == pytest.approx(0.900, abs=0.0006)
    assert 0.88 <= waited.wait_cov90 <= 0.92
    assert waited.wait_width_med / 3600 == pytest.approx(14.17, abs=0.006)
    assert "| twin (waited) | 2972 | 2925 | 90.0 % | 14.17 h |" in DOC
    assert "90.0 % / 90.0 % (median width 14.17 h)" in DOC


def test_likeliest_start_hit_rate_against_the_scheduler_on_hpc2n(hpc2n_rows):
    waited = fe.score([r for r in hpc2n_rows if r.real > 0], "waited")
    assert waited.hit_likeliest == pytest.approx(0.320, abs=0.0006)
    assert waited.hit_scheduler == pytest.approx(0.185, abs=0.0006)
    assert waited.hit_likeliest / waited.hit_scheduler == pytest.approx(1.73, abs=0.006)


#: docs/calibration.md §5.3, hpc2n's rows: (predictor, hits, share, × scheduler, ≥ 10 min share, ×)
HPC2N_HITS = [
    ("scheduler", 541, "18.5 %", "1.00×", "4.1 %", "1.00×"),
    ("twin", 595, "20.3 %", "1.10×", "4.5 %", "1.09×"),
    ("conditioned median", 687, "23.5 %", "1.27×", "7.1 %", "1.73×"),
    ("conditioned likeliest", 936, "32.0 %", "1.73×", "8.7 %", "2.13×"),
    ("learned start (new)", 1031, "35.2 %", "1.91×", "10.6 %", "2.58×"),
    ("always now", 832, "28.4 %", "1.54×", "0.0 %", "0.00×"),
    ("always 10 min", 1023, "35.0 %", "1.89×", "9.1 %", "2.22×"),
    ("clairvoyant twin", 742, "25.4 %", "1.37×", "7.1 %", "1.73×"),
    ("clairvoyant twin, oracle hedge", 1110, "37.9 %", "2.05×", "13.3 %", "3.23×"),
]


def test_start_hits_of_every_predictor_on_hpc2n_as_documented(hpc2n_probes, hpc2n_rows):
    rates = he.hit_rates(hpc2n_probes, "hpc2n.swf")
    by_name = {r.predictor: r for r in rates}
    waited = [(p, r) for p, r in zip(sorted(hpc2n_probes, key=lambda p: p.at), hpc2n_rows)
              if r.cond is not None and p.real > 0]
    assert len(waited) == 2925
    # the counts that need no model, from the definition: |prediction − real| <= 600 s
    assert by_name["scheduler"].hits == sum(abs(p.estimates["scheduler"] - p.real) <= 600 for p, _ in waited)
    assert by_name["always now"].hits == sum(p.real <= 600 for p, _ in waited)
    assert by_name["always 10 min"].hits == sum(p.real <= 1200 for p, _ in waited)
    assert by_name["clairvoyant twin"].hits == sum(abs(p.estimates["clairvoyant"] - p.real) <= 600 for p, _ in waited)
    for name, hits, share, ratio, share_long, ratio_long in HPC2N_HITS:
        assert by_name[name].jobs == 2925 and by_name[name].hits == hits, name
        assert f"| hpc2n.swf | {name} | {by_name[name].knows} | 2925 | {hits} | {share} | {ratio} | {share_long} " \
               f"| {ratio_long} |" in DOC, name
    v = he.verdict(rates)
    assert not v["pass"] and v["goal_above_references"]
    assert v["ratio"] == pytest.approx(1.91, abs=0.006) and v["goal"] == pytest.approx(0.555, abs=0.0006)
    assert "learned start 35.2 % (1.91×): **MISS**" in DOC
    assert "±10-minute hits by wait bucket as information" in README.replace("\n  ", " ")   # no longer a goal (§5.5)
    assert "**Goal (≥ 3× the scheduler estimate's hit rate on both traces): MISS on both.**" in DOC


def test_gromacs_held_out_figures_of_the_committed_measurements():
    """100 real runs (50 × gmx, 50 × gmx_d, nsteps 1030–93450) re-analysed by resel's model code:
    the figures of docs/calibration.md, each against the issue's goal."""
    from resel.sim import runtime_eval as rt
    res = rt.evaluate(rt.read(REPO / "benchmarks" / "data" / "gromacs-runtime.jsonl"))
    loo, split = res["pooled"]["loo"], res["pooled"]["split"]
    assert (loo["n"], split["n"]) == (100, 50)
    assert loo["mdape"] == pytest.approx(1.33, abs=0.006) and loo["mdape"] <= 5
    assert loo["mape"] == pytest.approx(1.49, abs=0.006) and loo["mape"] <= 8
    assert loo["p90_ape"] == pytest.approx(2.97, abs=0.006) and loo["p90_ape"] <= 15
    assert loo["coverage"] == pytest.approx(0.91) and 0.88 <= loo["coverage"] <= 0.92
    assert split["coverage"] == pytest.approx(0.92)
    for cfg in ("gmx", "gmx_d"):
        assert res["configs"][cfg]["runs"] == 50
        assert res["configs"][cfg]["lim_uncalibrated"]["mape"] > 300      # LIM's IPC = 1 on this host
    for text in ("1.33 %", "1.49 %", "2.97 %", "91.0 % ± 2.9"):
        assert text in DOC, text
