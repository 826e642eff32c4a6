"""``resel grid`` and ``resel scenario seed004`` (resel/cli/grid.py), driven through CliRunner.

The real traces under ../shared/data/swf are read-only inputs. hpc2n's first 1,500 jobs
simulate in well under a second per run, and seed004 on 1,500 jobs in a few seconds, so the
whole file stays fast. The hpc2n machine has 240 cores: on two 120-core clusters its wider
jobs cannot run anywhere and are counted as skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.sim.swf import drop_zero_runtime, first, read_swf, rebase

SWF = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"   # ../shared beside the checkout
HPC2N = SWF / "hpc2n.swf"
FIRST = 1500
CLUSTERS = ["--cluster", "a:120", "--cluster", "b:120:1.4"]
EXPECTED = "NAME:CORES[:SPEED[:POLICY]]"


def grid(*args):
    return CliRunner().invoke(cli, ["grid", str(HPC2N), *CLUSTERS, "--first", str(FIRST), "--json", *args])


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def replayable() -> int:
    """How many of hpc2n's first 1,500 replayable jobs fit a 120-core cluster."""
    jobs = list(first(rebase(drop_zero_runtime(read_swf(HPC2N))), FIRST))
    assert len(jobs) == FIRST
    return sum(1 for j in jobs if 0 < j.size <= 120)


@pytest.fixture(scope="module")
def baseline() -> dict:
    return as_json(grid())


@pytest.fixture(scope="module")
def regular() -> dict:
    return as_json(grid("--realloc", "regular"))


@pytest.fixture(scope="module")
def dry_run() -> dict:
    return as_json(grid("--realloc", "regular", "--dry-run"))


@pytest.fixture(scope="module")
def seed004() -> dict:
    result = CliRunner().invoke(cli, ["scenario", "seed004", "--first", str(FIRST), "--workers", "1", "--json"])
    return {r["variant"]: r for r in as_json(result)["rows"]}


# ---------------------------------------------------------------------------- resel grid

def test_grid_replays_every_job_that_fits(baseline, replayable):
    """without_reallocation.jobs is the number of jobs replayed; the rest are skipped."""
    s = baseline["without_reallocation"]
    assert s["jobs"] == replayable
    assert s["jobs"] + s["skipped"] == FIRST
    assert sum(s["per_cluster"].values()) == s["jobs"]


def test_grid_without_realloc_has_no_comparison_or_moves(baseline):
    """No --realloc: one run only, no with_reallocation, comparison or moves."""
    assert {"with_reallocation", "comparison", "moves"}.isdisjoint(baseline)
    assert baseline["without_reallocation"]["reallocation"] is None


def test_grid_echoes_the_clusters(baseline):
    """The clusters parsed from --cluster, speed defaulting to 1.0 and policy to conservative."""
    assert baseline["clusters"] == [{"name": "a", "cores": 120, "speed": 1.0, "policy": "conservative"},
                                    {"name": "b", "cores": 120, "speed": 1.4, "policy": "conservative"}]


def test_grid_regular_reports_comparison_and_moves(regular, baseline):
    """--realloc regular: a comparison over the same jobs and the moves made, each gaining > 60 s."""
    with_, moves = regular["with_reallocation"], regular["moves"]
    assert regular["without_reallocation"] == baseline["without_reallocation"]
    assert with_["jobs"] == baseline["without_reallocation"]["jobs"]
    assert with_["moves"] == len(moves) > 0
    assert regular["comparison"]["jobs"] == with_["jobs"]
    assert regular["comparison"]["reallocations_per_job"] == pytest.approx(len(moves) / with_["jobs"])
    assert all(m["new_ect"] + 60 < m["old_ect"] and m["source"] != m["target"] for m in moves)


def test_grid_dry_run_lists_moves_without_making_them(dry_run, baseline):
    """--dry-run: planned moves with old_ect > new_ect + margin, no comparison, the baseline schedule."""
    with_, moves = dry_run["with_reallocation"], dry_run["moves"]
    assert "comparison" not in dry_run
    assert moves and with_["moves"] == 0 and with_["planned_moves"] == len(moves)
    assert all(m["old_ect"] > m["new_ect"] + 60 for m in moves)
    base = baseline["without_reallocation"]
    for key in ("jobs", "per_cluster", "wait", "response"):
        assert with_[key] == base[key]


def test_grid_table_output_mentions_the_dry_run_moves():
    """Without --json the dry run prints a table titled with its move count."""
    result = CliRunner().invoke(cli, ["grid", str(HPC2N), *CLUSTERS, "--first", "300", "--realloc", "regular",
                                      "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "reallocation would make" in result.stdout


@pytest.mark.parametrize("value", ["a", "a:x", "a:120:fast", ":"])
def test_bad_cluster_syntax_exits_2_with_the_expected_form(value):
    """A malformed --cluster is a usage error showing NAME:CORES[:SPEED[:POLICY]]."""
    result = CliRunner().invoke(cli, ["grid", str(HPC2N), "--cluster", value])
    assert result.exit_code == 2
    assert EXPECTED in result.output


@pytest.mark.parametrize("value", ["a:0", "a:120:0", "a:120:-1", "a:120:1.0:bogus"])
def test_bad_cluster_values_exit_2(value):
    """No cores, a non-positive speed or an unknown policy is a usage error."""
    result = CliRunner().invoke(cli, ["grid", str(HPC2N), "--cluster", value])
    assert result.exit_code == 2
    assert "policy one of" in result.output


def test_grid_needs_a_cluster():
    """Without any --cluster the command refuses to run."""
    result = CliRunner().invoke(cli, ["grid", str(HPC2N)])
    assert result.exit_code == 2
    assert "--cluster" in result.output


@pytest.mark.parametrize("speed", ["nan", "inf"])
def test_a_non_finite_speed_is_a_usage_error(speed):
    """--cluster b:120:nan or :inf exits 2 like any other bad speed."""
    result = CliRunner().invoke(cli, ["grid", str(HPC2N), "--cluster", "a:120", "--cluster", f"b:120:{speed}",
                                      "--first", "200", "--json"])
    assert result.exit_code == 2


# ---------------------------------------------------------------------------- resel scenario seed004

def test_seed004_has_every_variant(seed004):
    """Rows for the baseline, each regular heuristic, all-cancel, exact, fcfs and the ISIS dispatchers."""
    assert set(seed004) == {
        "baseline", *(f"regular/{h}" for h in ("mct", "minmin", "maxmin", "maxgain", "maxrelgain", "sufferage")),
        "all-cancel/mct", "exact/baseline", "exact/regular/mct", "fcfs/baseline", "fcfs/regular/mct",
        *(f"isis/{d}" for d in ("less-waittime", "less-sld", "less-jobs-in-queue", "less-work-left",
                                "less-submitted-jobs", "random", "mct"))}


def test_seed004_every_variant_runs_every_job(seed004):
    """The same 1,500 jobs in every row, spread over zewura, zegox and seth."""
    for row in seed004.values():
        assert row["jobs"] == FIRST
        assert sum(row["per_cluster"].values()) == FIRST
        assert set(row["per_cluster"]) == {"zewura", "zegox", "seth"}


def test_seed004_exact_walltimes_make_no_moves(seed004):
    """exact/regular/mct: nothing to correct, so no move and no job impacted."""
    row = seed004["exact/regular/mct"]
    assert row["moves"] == 0 and row["impacted_pct"] == 0.0
    assert row["relative_mean_response"] == 1.0


def test_seed004_reallocation_rows_carry_the_comparison(seed004):
    """Rows with reallocation compare with their baseline; baselines and ISIS rows do not."""
    for label, row in seed004.items():
        has = "relative_mean_response" in row
        assert has == (label.startswith(("regular/", "all-cancel/")) or label.endswith("/regular/mct"))
        if has:
            assert row["earlier_pct"] + row["later_pct"] == pytest.approx(row["impacted_pct"])
            assert row["reallocations_per_job"] == pytest.approx(row["moves"] / row["jobs"])


def test_seed004_only_reallocating_variants_move_jobs(seed004):
    """Baselines and dispatch-only rows make no move; the requested-walltime ones on this subset do."""
    for label, row in seed004.items():
        if "relative_mean_response" not in row:
            assert row["moves"] == 0 and row["rounds"] == 0
    assert seed004["regular/mct"]["moves"] > 0 and seed004["all-cancel/mct"]["moves"] > 0


def test_seed004_isis_mct_is_the_baseline(seed004):
    """isis/mct is the same run as baseline (MCT, conservative, no reallocation)."""
    keys = ("per_cluster", "mean_response", "mean_wait", "mean_bsld_60")
    assert {k: seed004["isis/mct"][k] for k in keys} == {k: seed004["baseline"][k] for k in keys}
