"""Calibration of LIM (models/calibration.py) and ``resel model`` on a real SQLite store.

The scenario is synthetic but physically consistent: every finished attempt's T_x is
κ · I / (IPC · f) times a small lognormal noise, with a few stragglers (×3) that a mean would
follow and a median ignores. Four sites:

* bridges  κ 1.00, IPC 1.6, f 2.3 GHz (site file: base 2.1)
* comet    κ 1.00, IPC 1.5, f 2.5 GHz (base 2.5)
* osg      κ 1.22, IPC 1.4, f 2.0 GHz (base 2.6, κ 1 in the site file: LIM ranks it 2nd, truly last)
* supermic κ 1.05, IPC 1.25, f 2.8 GHz (base 2.8), perf counts on every task

Three live runs with bag sizes 1e11, 2e11 and 4e11 instructions; the held-out run is the
largest, so the evaluation also tests extrapolation in task size.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.errors import ModelError
from resel.models import calibration as cal
from resel.models.lim import SiteRate
from resel.store import open_store

TRUE = {  # site: (kappa, ipc, f_ghz, base_ghz, perf)
    "bridges": (1.00, 1.6, 2.3, 2.1, False),
    "comet": (1.00, 1.5, 2.5, 2.5, False),
    "osg": (1.22, 1.4, 2.0, 2.6, False),
    "supermic": (1.05, 1.25, 2.8, 2.8, True),
}
SIZES = (1e11, 2e11, 4e11)
TASKS_PER_SITE = 12


def true_rate(site: str) -> float:
    kappa, ipc, f, _, _ = TRUE[site]
    return kappa / (ipc * f * 1e9)


def _sites_json() -> list[dict]:
    return [{"name": s, "kind": "slurm", "cores": 64, "clock": {"base": base, "avg": None}, "kappa": 1.0,
             "pilot": {"mode": "single"}} for s, (_, _, _, base, _) in TRUE.items()]


def populate(db, seed: int = 7) -> list[int]:
    """Insert three live runs with their attempts; returns the run ids."""
    rng = random.Random(seed)
    ids = []
    for size in SIZES:
        bag = {"name": "gmx", "command": "gmx mdrun", "count": TASKS_PER_SITE * len(TRUE), "cores_per_task": 1,
               "profile": {"instructions": size, "cycles": None, "ipc": None, "baseline": "amarel"}}
        rid = db["runs"].insert({"created": "2024-01-01T00:00:00", "mode": "live", "bag": "gmx",
                                 "strategy": "resel", "size": bag["count"], "status": "done",
                                 "bag_spec": json.dumps(bag), "sites": json.dumps(_sites_json())}).last_pk
        ids.append(rid)
        task, t = 0, 1000.0
        for site, (kappa, ipc, f, _, perf) in TRUE.items():
            for k in range(TASKS_PER_SITE):
                noise = math.exp(rng.gauss(0, 0.03)) * (3.0 if k == 5 else 1.0)   # one straggler per site
                instr_site = kappa * size * math.exp(rng.gauss(0, 0.005))
                cycles = instr_site / ipc
                tx = cycles / (f * 1e9) * noise
                perf_doc = None
                if perf:
                    perf_doc = {"instructions:u": instr_site, "cycles:u": cycles, "instructions": instr_site * 1.01,
                                "cycles": cycles * 1.01, "task-clock": tx * 1000, "task-clock-ms": cycles / (f * 1e9) * 1000}
                db["attempts"].insert({"run_id": rid, "task": task, "attempt": 1, "site": site, "pilot": 1,
                                       "host": f"{site}-n1", "start": t, "end": t + tx, "exit_code": 0,
                                       "outcome": "done", "perf": json.dumps(perf_doc) if perf_doc else None})
                task += 1
        # a failed attempt and a lost one: never evidence
        db["attempts"].insert({"run_id": rid, "task": task, "attempt": 1, "site": "comet", "pilot": 1,
                               "start": t, "end": t + 1, "exit_code": 1, "outcome": "failed"})
        db["attempts"].insert({"run_id": rid, "task": task + 1, "attempt": 1, "site": "comet", "pilot": 1,
                               "start": t, "end": None, "outcome": None})
    return ids


@pytest.fixture
def store(tmp_path):
    db = open_store(tmp_path / "db")
    ids = populate(db)
    return db, ids, tmp_path / "db"


# ------------------------------------------------------------------ loading and fitting
def test_load_evidence_reads_done_attempts_with_bag_instructions_and_perf(store):
    db, ids, _ = store
    ev = cal.load_evidence(db)
    assert len(ev) == len(SIZES) * len(TRUE) * TASKS_PER_SITE
    assert {e.run_id for e in ev} == set(ids)
    assert {e.instructions_baseline for e in ev} == set(SIZES)
    sm = [e for e in ev if e.site == "supermic"]
    assert all(e.instructions_site and e.cycles_site and e.task_clock for e in sm)
    # the :u counts are preferred (the 1.01 variants are the kernel-inclusive ones)
    assert sm[0].instructions_site / sm[0].instructions_baseline == pytest.approx(1.05, rel=0.02)
    assert all(e.instructions_site is None for e in ev if e.site != "supermic")
    assert len(cal.load_evidence(db, [ids[0]])) == len(TRUE) * TASKS_PER_SITE


def test_fit_recovers_rates_kappa_ipc_and_clock(store):
    db, _, _ = store
    fits = cal.fit(cal.load_evidence(db))
    assert set(fits) == set(TRUE)
    for site, f in fits.items():
        assert f.rate_s_per_instr == pytest.approx(true_rate(site), rel=0.03), site
        assert f.n == len(SIZES) * TASKS_PER_SITE
    sm = fits["supermic"]
    assert sm.kappa == pytest.approx(1.05, rel=0.01)
    assert sm.ipc == pytest.approx(1.25, rel=0.01)
    assert sm.clock_ghz == pytest.approx(2.8, rel=0.01)
    assert sm.clock_ghz_eff == pytest.approx(1.25 * 2.8, rel=0.03)      # IPC · f
    assert sm.n_counted == sm.n and sm.methods == {"attempt:end-start+perf": sm.n}
    osg = fits["osg"]
    assert osg.kappa is None and osg.ipc is None and osg.clock_ghz is None   # not identifiable without perf
    assert osg.clock_ghz_eff == pytest.approx(1.4 * 2.0 / 1.22, rel=0.03)  # with κ taken as 1


def test_median_resists_stragglers_where_a_mean_would_not(store):
    db, _, _ = store
    ev = [e for e in cal.load_evidence(db) if e.site == "comet"]
    mean_rate = sum(e.tx_measured / e.instructions_baseline for e in ev) / len(ev)
    assert mean_rate / true_rate("comet") > 1.12            # one ×3 straggler in 12 moves a mean by ~17 %
    assert cal.fit(ev)["comet"].rate_s_per_instr == pytest.approx(true_rate("comet"), rel=0.03)


def test_predict_uses_fit_and_falls_back_to_lim():
    fits = cal.fit([cal.Evidence("a", 1e9, 2.0), cal.Evidence("a", 1e9, 4.0), cal.Evidence("a", 1e9, 3.0)])
    out = cal.predict(fits, 2e9, fallback={"a": SiteRate("a", 1.0, 1.0), "z": SiteRate("z", 1.0, 2.0)})
    assert out == pytest.approx({"a": 6.0, "z": 1.0})
    with pytest.raises(ModelError):
        cal.predict(fits, -1)


def test_fit_without_evidence_is_a_model_error():
    with pytest.raises(ModelError, match="no evidence"):
        cal.fit([])


# ------------------------------------------------------------------ evaluation
def test_kendall_tau_b_by_hand():
    assert cal.kendall_tau_b([1, 2, 3], [1, 2, 3]) == 1.0
    assert cal.kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert cal.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # ties: 4 concordant, 1 tie in x only, 1 tie in y only -> 4 / sqrt(5 · 5)
    assert cal.kendall_tau_b([1, 2, 2, 3], [1, 2, 3, 3]) == pytest.approx(0.8)
    assert math.isnan(cal.kendall_tau_b([1], [1]))
    assert math.isnan(cal.kendall_tau_b([1, 1], [1, 2]))


def test_evaluate_small_case_exactly():
    """Fit a: 3e-9 s/instr, b: 1e-9. LIM: a 1 GHz (1e-9), b 0.5 GHz (2e-9). Held out: a 3 s, b 1.5 s."""
    train = [cal.Evidence("a", 1e9, 2.0), cal.Evidence("a", 1e9, 4.0), cal.Evidence("a", 1e9, 3.0),
             cal.Evidence("b", 1e9, 1.0), cal.Evidence("b", 1e9, 1.0)]
    fits = cal.fit(train)
    test = [cal.Evidence("a", 1e9, 3.0, run_id=9), cal.Evidence("b", 1e9, 1.5, run_id=9)]
    ev = cal.evaluate(fits, test, {"a": SiteRate("a", 1.0, 1.0), "b": SiteRate("b", 1.0, 0.5)})
    c, lim = ev["calibrated"], ev["lim"]
    assert c["mape"] == pytest.approx((0 + 0.5 / 1.5) / 2 * 100)        # 16.67 %
    assert lim["mape"] == pytest.approx((2 / 3 + 0.5 / 1.5) / 2 * 100)  # 50 %
    assert c["tau_b"] == 1.0 and lim["tau_b"] == -1.0
    (wc,), (wl,) = c["windows"], lim["windows"]
    assert (wc["r"], wc["r2"], wc["w"]) == ("a", "b", pytest.approx(-1.5))
    assert wc["w_hat"] == pytest.approx(-2.0) and wc["error"] == pytest.approx(0.5) and wc["sign_ok"]
    assert wl["w_hat"] == pytest.approx(1.0) and wl["error"] == pytest.approx(2.5) and not wl["sign_ok"]
    assert c["window_sign_errors"] == 0 and lim["window_sign_errors"] == 1
    assert ev["runs"] == [9] and ev["fallback"] == []


def test_calibration_beats_uncalibrated_lim_on_the_held_out_run(store):
    db, ids, _ = store
    train, test, how = cal.split(cal.load_evidence(db), 0.3)
    assert how == f"runs {ids[-1]}" and {e.run_id for e in test} == {ids[-1]}
    ev = cal.evaluate(cal.fit(train), test, cal.lim_rates_from_runs(db))
    lim, c = ev["lim"], ev["calibrated"]
    assert lim["mape"] > 30          # ignoring IPC: LIM over-predicts by 30–80 % here
    assert c["mape"] < 15            # stragglers (1 in 12, ×3) dominate what is left
    # true order comet < bridges < supermic < osg; LIM (base clocks, κ 1) says
    # supermic < osg < comet < bridges: 2 concordant pairs, 4 discordant -> τ = −1/3
    assert lim["tau_b"] == pytest.approx(-1 / 3)
    assert c["tau_b"] == 1.0
    assert c["window_error_mean"] < lim["window_error_mean"] / 10
    assert lim["window_sign_errors"] >= 2 and c["window_sign_errors"] == 0
    assert len(c["windows"]) == 6    # every pair of the 4 sites


def test_split_single_run_strides_over_tasks():
    ev = [cal.Evidence("a", 1e9, 1.0, run_id=1, task=i) for i in range(8)]
    train, test, how = cal.split(ev, 0.25)
    assert len(test) == 2 and len(train) == 6 and "every 4th task" in how
    assert cal.split(ev, 0) == (ev, [], "none")
    with pytest.raises(ModelError):
        cal.split(ev, 1.0)


def test_evaluate_falls_back_to_lim_for_sites_without_fit():
    fits = cal.fit([cal.Evidence("a", 1e9, 1.0)])
    ev = cal.evaluate(fits, [cal.Evidence("a", 1e9, 1.0), cal.Evidence("b", 1e9, 4.0)],
                      {"a": SiteRate("a", 1, 1), "b": SiteRate("b", 1, 0.5)})
    assert ev["fallback"] == ["b"]
    assert ev["calibrated"]["mape"] == pytest.approx(25.0)   # a exact, b 2 s vs 4 s


# ------------------------------------------------------------------ CLI
def _run(args, **kw):
    """Through the real `resel` group (a stand-in root would leave click's cached help option
    on model_group without `-h` for every later test)."""
    return CliRunner().invoke(cli, args, **kw)


def test_cli_fit_show_predict_json(store, tmp_path):
    _, ids, path = store
    r = _run(["model", "fit", "--db", str(path), "--holdout", "0.3", "--json"])
    assert r.exit_code == 0, r.output
    fits = json.loads(r.output)["fits"]
    assert [d["application"] for d in fits] == ["gmx"]       # one fit per application
    doc = fits[0]
    assert doc["runs"] == ids and doc["n_evidence"] == 144
    assert doc["fit"]["supermic"]["kappa"] == pytest.approx(1.05, rel=0.01)
    assert doc["evaluation"]["calibrated"]["mape"] < doc["evaluation"]["lim"]["mape"]
    assert doc["lim"]["osg"] == {"kappa": 1.0, "clock_ghz": 2.6}

    # the fit records its evidence: runs, dates, leave-one-out residuals
    osg = doc["fit"]["osg"]
    assert osg["runs"] == ids and osg["application"] == "gmx"
    db = open_store(path)
    ends = [r["end"] for r in db.query("select end from attempts where site = 'osg' and outcome = 'done'")]
    import datetime as dt
    iso = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    assert (osg["first"], osg["last"]) == (iso(min(ends)), iso(max(ends)))
    assert len(osg["residuals"]) == 36 and osg["residuals"] == sorted(osg["residuals"])

    r = _run(["model", "show", "--db", str(path), "--json"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.output)["fits"][0]
    assert shown["id"] == doc["id"] and shown["n_evidence"] == 144 and shown["application"] == "gmx"
    assert shown["fit"]["osg"]["methods"] == {"attempt:end-start": 36}

    bag = tmp_path / "bag.toml"
    bag.write_text('[bag]\nname = "gmx"\ncommand = "gmx mdrun"\ncount = 4\n[bag.profile]\ninstructions = 1e11\n')
    r = _run(["model", "predict", str(bag), "--db", str(path), "--json"])
    assert r.exit_code == 0, r.output
    pred = {s["site"]: s for s in json.loads(r.output)["sites"]}
    assert pred["osg"]["tx"] == pytest.approx(true_rate("osg") * 1e11, rel=0.03)
    assert pred["osg"]["lim_tx"] == pytest.approx(1e11 / 2.6e9)
    assert all(s["source"] == "fit" for s in pred.values())
    # the interval comes from the residuals: the straggler (×3) lies outside the 90 % interval
    lo, hi = pred["osg"]["tx_interval"]
    assert lo < pred["osg"]["tx"] < hi < 3 * pred["osg"]["tx"]

    sites = tmp_path / "sites.toml"
    sites.write_text('[[site]]\nname = "comet"\nkind = "simulated"\ncores = 8\nclock = { base = 2.5 }\n'
                     'wait = { dist = "fixed", value = 1 }\n'
                     '[[site]]\nname = "new"\nkind = "simulated"\ncores = 8\nclock = { base = 2.0 }\n'
                     'wait = { dist = "fixed", value = 1 }\n')
    r = _run(["model", "predict", str(bag), "--sites", str(sites), "--db", str(path), "--json"])
    assert r.exit_code == 0, r.output
    pred = {s["site"]: s for s in json.loads(r.output)["sites"]}
    assert set(pred) == {"comet", "new"}
    assert pred["new"]["tx"] == pytest.approx(50.0) and pred["new"]["lim_tx"] == pytest.approx(50.0)
    assert pred["new"]["source"] == "lim" and pred["new"]["tx_interval"] is None   # nothing measured
    assert pred["comet"]["source"] == "fit"
    # --model lim ignores the fit
    r = _run(["model", "predict", str(bag), "--sites", str(sites), "--db", str(path), "--json", "--model", "lim"])
    pred = {s["site"]: s for s in json.loads(r.output)["sites"]}
    assert pred["comet"]["source"] == "lim" and pred["comet"]["tx"] == pytest.approx(1e11 / 2.5e9)
    # another application has no fit: auto is LIM, fitted is an error naming it
    other = tmp_path / "other.toml"
    other.write_text('[bag]\nname = "s"\ncommand = "sleep 1"\ncount = 1\n[bag.profile]\ninstructions = 1e11\n')
    r = _run(["model", "predict", str(other), "--sites", str(sites), "--db", str(path), "--json"])
    assert r.exit_code == 0 and {s["source"] for s in json.loads(r.output)["sites"]} == {"lim"}
    r = _run(["model", "predict", str(other), "--sites", str(sites), "--db", str(path), "--model", "fitted"])
    assert r.exit_code == 1 and "no stored fit for application 'sleep'" in r.output


def test_cli_text_output(store, tmp_path):
    _, _, path = store
    r = _run(["model", "fit", "--db", str(path), "--runs", "1,2,3"])
    assert r.exit_code == 0, r.output
    assert "supermic" in r.output and "calibrated" in r.output and "lim" in r.output
    r = _run(["model", "show", "--db", str(path)])
    assert r.exit_code == 0 and "fit 1" in r.output


@pytest.mark.parametrize("args, message", [
    (["model", "fit"], "no evidence to fit"),
    (["model", "fit", "--runs", "42"], "no run 42"),
    (["model", "fit", "--runs", "x"], "comma-separated"),
    (["model", "show"], "no model fit in the store"),
    (["model", "fit", "--label", "nope"], "no profile labelled 'nope'"),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
    r = _run(args + ["--db", str(tmp_path / "empty.db")])
    assert r.exit_code != 0
    assert message in r.output
    assert "Traceback" not in r.output and not isinstance(r.exception, (ModelError, KeyError, TypeError))


def test_cli_predict_without_fit(tmp_path):
    bag = tmp_path / "bag.toml"
    bag.write_text('[bag]\nname = "b"\ncommand = "x"\ncount = 1\n[bag.profile]\ninstructions = 1e9\n')
    r = _run(["model", "predict", str(bag), "--db", str(tmp_path / "e.db")])
    assert r.exit_code == 1 and "no model fit" in r.output


def test_help_examples_start_with_resel_model_sub():
    for sub in ("fit", "show", "predict"):
        r = _run(["model", sub, "--help"])
        assert r.exit_code == 0
        examples = [l.strip() for l in r.output.split("Example:")[1].splitlines() if l.strip().startswith("resel")]
        assert examples and all(l.startswith(f"resel model {sub}") for l in examples), (sub, examples)


def test_store_migrations_create_model_fits(tmp_path):
    db = open_store(tmp_path / "db")
    open_store(tmp_path / "db")                  # applying the migrations twice is harmless
    assert "model_fits" in db.table_names()
