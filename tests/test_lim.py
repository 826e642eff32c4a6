"""Tests of the Limited Information Model (resel.models.lim, eq. 3.2–3.6) and the thesis's ranking."""

from __future__ import annotations

import dataclasses

import pytest

from resel.domain import Clock, Site
from resel.errors import ModelError
from resel.formalism import res_select
from resel.models.lim import (
    GHZ, SiteRate, epsilon, exec_time, instructions_from, p2a_cy, percent_error, predict,
    predicted_cycles, site_rates,
)


# ------------------------------------------------------------------ equations
def test_eq_3_2_exec_time():
    """Eq. 3.2: 5e9 cycles at 2.5e9 cycles/s take 2 s."""
    assert exec_time(5e9, 2.5e9) == 2.0


def test_eq_3_3_instructions_from_cycles_and_ipc():
    """Eq. 3.3: 1e9 cycles at IPC 2.2 retire 2.2e9 instructions."""
    assert instructions_from(1e9, 2.2) == pytest.approx(2.2e9)


def test_predicted_cycles_is_baseline_instruction_count():
    """Eq. 3.4–3.5 on the baseline: 4e9 cycles × IPC 2.0 = 8e9 sequential cycles."""
    assert predicted_cycles(4e9, 2.0) == 8e9


def test_p2a_cy():
    """p2a_cy = predicted / actual cycles: 2.2e9 / 1e9 = 2.2."""
    assert p2a_cy(2.2e9, 1e9) == pytest.approx(2.2)


def test_p2a_cy_equals_actual_ipc_under_lim():
    """Eq. 3.5: with pred = instructions, p2a_cy = instructions / cycles = IPC."""
    cycles, ipc = 3e9, 2.1
    assert p2a_cy(predicted_cycles(cycles, ipc), cycles) == pytest.approx(ipc)


def test_epsilon_hand_value():
    """Eq. 3.6: p2a 2.0, IPC_act 1.9 -> |2.0 − 1.9| / 2.0 × 100 = 5 %."""
    assert epsilon(2.0, 1.9) == pytest.approx(5.0)


def test_epsilon_zero_when_ilp_explains_all():
    """ε = 0 when p2a_cy equals the actual IPC."""
    assert epsilon(2.25, 2.25) == 0.0


def test_predict_hand_value():
    """2.3e9 instructions at 2.3 GHz with κ 1.22 -> 1.22 s."""
    assert predict(2.3e9, 2.3, 1.22) == pytest.approx(1.22)


def test_predict_default_kappa_is_one():
    """Without κ: 1e10 instructions at 2 GHz -> 5 s."""
    assert predict(1e10, 2.0) == 5.0


@pytest.mark.parametrize("call", [
    lambda: predict(1e9, 0.0),
    lambda: predict(1e9, -2.0),
    lambda: predict(-1.0, 2.0),
    lambda: predict(1e9, 2.0, 0.0),
    lambda: exec_time(1e9, 0.0),
    lambda: p2a_cy(1e9, 0.0),
    lambda: epsilon(0.0, 1.0),
    lambda: percent_error(1.0, 0.0),
], ids=["clock-0", "clock-neg", "instr-neg", "kappa-0", "rate-0", "act-cycles-0", "p2a-0", "actual-0"])
def test_model_error_on_unusable_inputs(call):
    """Zero clocks and other unusable inputs raise ModelError, not ZeroDivisionError."""
    with pytest.raises(ModelError):
        call()


def test_site_rate_tx_and_seconds_per_instruction():
    """SiteRate(κ 1.22, 2.5 GHz): 1.22 / 2.5e9 s per instruction."""
    rate = SiteRate("osg", 1.22, 2.5)
    assert rate.seconds_per_instruction == pytest.approx(1.22 / (2.5 * GHZ))
    assert rate.tx(2.5e9) == pytest.approx(1.22)


def _site(name, base, avg=None, kappa=1.0):
    return Site(name, "simulated", 4, Clock(base, avg), kappa)


def test_site_rates_base_vs_avg_clock():
    """site_rates uses the base clock by default and the measured avg with clock="avg"."""
    sites = [_site("a", 2.8, 3.589), _site("b", 2.5, None, 1.22)]
    assert site_rates(sites) == {"a": SiteRate("a", 1.0, 2.8), "b": SiteRate("b", 1.22, 2.5)}
    assert site_rates(sites, "avg") == {"a": SiteRate("a", 1.0, 3.589), "b": SiteRate("b", 1.22, 2.5)}


def test_site_rates_rejects_unknown_clock():
    """clock must be base or avg."""
    with pytest.raises(ModelError):
        site_rates([_site("a", 2.0)], "turbo")


def test_percent_error():
    """(pred − act) / act × 100: 3 vs 2 is +50 %, 1 vs 2 is −50 %."""
    assert percent_error(3.0, 2.0) == 50.0
    assert percent_error(1.0, 2.0) == -50.0


def test_percent_error_reproduces_turbo_gap():
    """(1 + e_T) = IPC·f_avg/f_base: IPC 2.1 on SuperMIC (2.8 / 3.589 GHz) -> +169 %, as in §4.1."""
    instr, ipc, base, avg = 1e12, 2.1, 2.8, 3.589
    predicted = predict(instr, base)
    actual = instr / ipc / (avg * GHZ)
    assert percent_error(predicted, actual) == pytest.approx(169.175, abs=1e-3)


# ------------------------------------------------------------------ the thesis's ranking
def _predicted(sites, instructions):
    rates = site_rates(sites)
    return {s.name: rates[s.name].tx(instructions) for s in sites}


def test_default_site_ranking_with_kappa(default_sites, gromacs_bag):
    """With κ: supermic < comet < bridges < osg (2e13 instr: 7143, 8000, 8696, 9760 s)."""
    tx = _predicted(default_sites, gromacs_bag.profile.instructions)
    assert sorted(tx, key=tx.get) == ["supermic", "comet", "bridges", "osg"]
    assert tx["supermic"] == pytest.approx(2e13 / 2.8e9)
    assert tx["comet"] == pytest.approx(8000.0)
    assert tx["bridges"] == pytest.approx(2e13 / 2.3e9)
    assert tx["osg"] == pytest.approx(1.22 * 8000.0)


def test_default_site_ranking_inverts_without_osg_kappa(default_sites, gromacs_bag):
    """κ_osg = 1: osg ties comet (both 2.5 GHz) and ranks above bridges — the thesis's inversion."""
    plain = [dataclasses.replace(s, kappa=1.0) if s.name == "osg" else s for s in default_sites]
    tx = _predicted(plain, gromacs_bag.profile.instructions)
    assert tx["osg"] == tx["comet"]
    assert tx["osg"] < tx["bridges"]


def test_tie_goes_to_first_site_in_order(default_sites):
    """Uncorrected, comet and osg tie; Alg. 3 keeps the first in site order (comet)."""
    plain = [dataclasses.replace(s, kappa=1.0) for s in default_sites if s.name in ("comet", "osg")]
    rates = site_rates(plain)
    assert res_select(plain, lambda s: -rates[s.name].tx(1e13)).name == "comet"


def test_default_sites_prefer_supermic_with_avg_clock_too(default_sites):
    """With measured avg clocks the best site is still supermic (3.589 GHz)."""
    rates = site_rates(default_sites, "avg")
    best = min(default_sites, key=lambda s: rates[s.name].tx(1e13))
    assert best.name == "supermic"
