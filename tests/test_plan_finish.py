"""``resel plan`` with finish-time distributions and the runtime model, on simulated sites
(issue 16 items 1 and 4). The live counterpart is in tests/test_plan_live.py.

The thesis sites: SuperMIC is the origin of the model strategy (fastest LIM), its waits are
drawn (independent), so its wait percentiles are those of its past pilots and — with no
runtime spread on a cluster that publishes nothing — its share finishes at W + waves · T̂x:
the share's P50/P90 are the wait's P50/P90 plus that constant.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import REPO
from resel.cli import cli
from resel.models.calibration import SiteFit
from resel.store import open_store

BAG = str(REPO / "examples" / "gromacs-bag.toml")
THESIS = str(REPO / "examples" / "sites-thesis.toml")


def _plan(tmp_path, *extra):
    r = CliRunner().invoke(cli, ["plan", BAG, "--sites", THESIS, "--db", str(tmp_path / "r.db"), "--json",
                                 "--strategy", "model+reselect", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_plan_on_simulated_sites_shows_p50_p90_and_the_model(tmp_path):
    doc = _plan(tmp_path)
    assert doc["sites_kind"] == "simulated" and doc["model"]["used"] == "lim"
    rows = {r["site"]: r for r in doc["sites"]}
    origin = rows["supermic"]
    assert origin["role"] == "origin" and origin["tasks"] == 1024 and origin["tx_model"] == "lim"
    # the wait's percentiles are those of the site's past drawn pilots; F = W + waves · T̂x
    waves = -(-origin["tasks"] // (origin["pilots"][0]))
    run = waves * origin["tx"]
    assert origin["finish_p50"] == pytest.approx(origin["wait_p50"] + run, rel=0.02)
    assert origin["finish_p90"] == pytest.approx(origin["wait_p90"] + run, rel=0.02)
    assert origin["finish_p50"] <= origin["finish_p90"]
    assert "drawn waits are independent" in origin["wait_note"]
    # the plan is done when its only origin is
    assert doc["finish_p50_s"] == pytest.approx(origin["finish_p50"]) and doc["finish_p90_s"] >= doc["finish_p50_s"]
    # T̂x intervals: the pool's from its published slot clocks, none for a cluster
    assert rows["osg"]["tx_interval"][0] < rows["osg"]["tx"] < rows["osg"]["tx_interval"][1]
    assert rows["bridges"]["tx_interval"] is None and "nothing measured" in rows["bridges"]["tx_detail"]


def test_plan_text_names_model_and_percentiles(tmp_path):
    r = CliRunner().invoke(cli, ["plan", BAG, "--sites", THESIS, "--db", str(tmp_path / "r.db"),
                                 "--strategy", "model+reselect"])
    assert r.exit_code == 0, r.output
    assert "T̂x model lim (LIM on bridges, comet, osg, supermic)" in r.output
    assert "P50 [h]" in r.output and "P90 [h]" in r.output and "(P50) /" in r.output and "(P90)" in r.output
    assert "2.3" in r.output and "done by 2." in r.output


def test_plan_uses_the_stored_fit_of_the_bags_application(tmp_path):
    """A fit of gmx on comet making it 4× faster than LIM says: auto uses it (the model column
    and the summary say so), and the model strategy moves the bag there; --model lim does not."""
    db = open_store(tmp_path / "r.db")
    lim_rate = 1.0 / 2.5e9                          # comet: κ 1, base clock 2.5 GHz
    fit = SiteFit("comet", lim_rate / 4, 10.0, n=30, application="gmx", runs=[7],
                  residuals=[0.95 + 0.1 * i / 29 for i in range(30)])
    db["model_fits"].insert({"created": "2026-11-26T00:00:00+00:00", "runs": "[7]", "n_evidence": 30,
                             "fit": json.dumps({"comet": fit.as_dict()}), "application": "gmx"}, alter=True)
    doc = _plan(tmp_path)
    rows = {r["site"]: r for r in doc["sites"]}
    assert doc["model"]["used"] == "mixed" and "fitted on comet" in doc["model"]["summary"]
    assert rows["comet"]["tx_model"] == "fit" and rows["comet"]["tx"] == pytest.approx(2e13 * lim_rate / 4)
    assert rows["comet"]["role"] == "origin"
    lo, hi = rows["comet"]["tx_interval"]
    assert lo < rows["comet"]["tx"] < hi
    doc = _plan(tmp_path, "--model", "lim")
    assert {r["site"]: r for r in doc["sites"]}["comet"]["tx_model"] == "lim"


def test_plan_objective_and_risk_are_recorded(tmp_path):
    doc = _plan(tmp_path, "--objective", "p90", "--risk", "0.9")
    assert doc["objective"] == "p90" and doc["risk"] == 0.9


def test_plan_fitted_without_a_fit_is_one_line(tmp_path):
    r = CliRunner().invoke(cli, ["plan", BAG, "--sites", THESIS, "--db", str(tmp_path / "r.db"), "--model", "fitted"])
    assert r.exit_code == 1 and "no stored fit for application 'gmx'" in r.output
    assert "Traceback" not in r.output


def test_queue_aware_split_on_p90(tmp_path):
    """On replayed queues, the split with --objective p90 weighs each size's P90 wait: the plan
    still finishes, and its P90 is never below its P50."""
    sites = str(REPO / "examples" / "sites-traces-hpc.toml")
    r = CliRunner().invoke(cli, ["plan", BAG, "--sites", sites, "--db", str(tmp_path / "r.db"), "--json",
                                 "--objective", "p90"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["objective"] == "p90" and doc["problem"] is None
    assert doc["finish_p50_s"] is not None and doc["finish_p50_s"] <= doc["finish_p90_s"]
    notes = [r["wait_note"] for r in doc["sites"] if r["tasks"]]
    assert notes and all("past errors" in n or "too few" in n or "no error history" in n for n in notes)


def test_simulate_says_which_model_and_passes_risk_windows(tmp_path):
    """`resel simulate --risk 0.9 --json`: the document names the model per site (the pool's
    spread from its published slot clocks), and the runs' decisions log the risk windows."""
    r = CliRunner().invoke(cli, ["simulate", "--sizes", "16", "--repeat", "1", "--strategies", "reselect",
                                 "--risk", "0.9", "--db", str(tmp_path / "s.db"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["model"]["used"] == "lim" and doc["risk"] == 0.9
    osg = doc["model"]["sites"]["osg"]
    assert osg["n_ratios"] > 0 and "slot clocks" in osg["spread"]
    db = open_store(tmp_path / "s.db")
    windows = {(d["origin"], d["window"]) for d in db.query(
        "select origin, window from decisions where kind like 'reselect%' and target = 'osg'")}
    from resel.models.fitted import runtime_model
    from resel.models.runtime import window_quantile
    import resel
    rm = runtime_model(resel.default_bag(), resel.default_sites(), model="lim", simulated_ads=True)
    expect = {o: window_quantile(rm.sites["osg"], rm.sites[o], 2e13, 0.9) for o, _ in windows}
    assert windows and all(w == pytest.approx(expect[o]) for o, w in windows)
