"""Figures and the HTML report from a stored LIVE run (the real testbed), not only simulated ones."""

from __future__ import annotations

import pytest

from live_helpers import bag_toml, cancel_leftovers, fill, sites_toml, slurm, start
from resel.report import plots
from resel.report.html import html_report


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def test_figures_from_a_live_run(tmp_path, testbed):
    filler = fill(testbed, "a", 8, 8)
    try:
        coord = start(tmp_path, sites_toml(testbed), bag_toml(12, "sleep 1"))
        coord.run(max_time=120)
        coord.close()
    finally:
        slurm(testbed, "a", "scancel", filler, check=False)
    db, run_id = coord.db, coord.run_id
    _, g = plots.gantt(db, run_id)
    assert g["lanes"] == ["tba", "tbb"]
    attempts = list(db.query("select count(*) as n from attempts where run_id = ?", [run_id]))[0]["n"]
    assert len(g["segments"]) == attempts >= 12
    assert sum(1 for s in g["segments"] if s["outcome"] == "done") == 12
    _, c = plots.cdfs(db, run_id)
    assert c                                                   # per-site CDF data from the agents' stamps
    written = plots.write_all(db, run_id, tmp_path / "figs", formats=("png",))
    assert {"gantt", "cdfs", "predictions"} <= set(written)
    assert (tmp_path / "figs" / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html_report(db, run_id)
    assert "<img" in page and "http://" not in page and "https://" not in page
