"""The Limited Information Model (seeds/003 §3.2, eq. 3.2–3.6).

LIM predicts a single-threaded, compute-bound task's execution time on a site from two numbers
that are cheap to collect: the task's retired-instruction count measured once on a baseline
(perf ``instructions``) and the site's clock. It deliberately ignores instruction-level
parallelism (IPC is taken as 1), so absolute predictions are off — the thesis saw +157–171 %
on XSEDE with base clocks — but the *ranking* of sites, and with a constant offset the
re-selection windows, survive. A per-site factor κ corrects software builds that execute more
instructions than the baseline (the OSG's GROMACS: +22 %).

Closed form used throughout resel::

    T̂x(task, site) = κ_site · instructions(task) / clock_site
"""

from __future__ import annotations

from dataclasses import dataclass

from resel.errors import ModelError

GHZ = 1e9


def exec_time(total_cycles: float, rate_cycles_per_s: float) -> float:
    """Eq. 3.2: T_x = total_cy / rate_cy (seconds)."""
    if rate_cycles_per_s <= 0:
        raise ModelError(f"clock rate must be > 0 cycles/s, got {rate_cycles_per_s}")
    return total_cycles / rate_cycles_per_s


def instructions_from(cycles: float, ipc: float) -> float:
    """Eq. 3.3: #instr = #cycles × IPC — the fixed instruction count of a task."""
    return cycles * ipc


def predicted_cycles(act_cycles_baseline: float, ipc_baseline: float) -> float:
    """Eq. 3.4–3.5 on the baseline: LIM's sequential cycles = measured cycles × IPC.

    With an assumed IPC of 1 this is the baseline's instruction count.
    """
    return instructions_from(act_cycles_baseline, ipc_baseline)


def p2a_cy(pred_num_cycles: float, act_num_cycles: float) -> float:
    """p2a_cy = predicted / actual cycles (eq. 3.4); equals the actual IPC under LIM (3.5)."""
    if act_num_cycles <= 0:
        raise ModelError(f"actual cycles must be > 0, got {act_num_cycles}")
    return pred_num_cycles / act_num_cycles


def epsilon(p2a: float, instr_rate_act: float) -> float:
    """Eq. 3.6: ε = |p2a_cy − IPC_act| / p2a_cy × 100 — how much of the cycle error ILP explains.

    ε = 0 means ILP explains all of it; in closed form ε is the instruction-count difference
    between baseline and target, in percent.
    """
    if p2a == 0:
        raise ModelError("p2a_cy must be non-zero")
    return abs(p2a - instr_rate_act) / p2a * 100.0


def predict(instructions: float, clock_ghz: float, kappa: float = 1.0) -> float:
    """T̂x = κ · instructions / clock, in seconds (clock in GHz)."""
    if clock_ghz <= 0:
        raise ModelError(f"clock must be > 0 GHz, got {clock_ghz}")
    if instructions < 0 or kappa <= 0:
        raise ModelError(f"instructions must be >= 0 and kappa > 0 (got {instructions}, {kappa})")
    return kappa * instructions / (clock_ghz * GHZ)


@dataclass(frozen=True, slots=True)
class SiteRate:
    """A site as LIM sees it: seconds per instruction, κ / clock (so T̂x = rate · instructions).

    Every site's rate is a constant, so the ranking of sites is the same for every task and a
    window Ŵ scales with the task's instruction count.
    """

    site: str
    kappa: float
    clock_ghz: float

    @property
    def seconds_per_instruction(self) -> float:
        return self.kappa / (self.clock_ghz * GHZ)

    def tx(self, instructions: float) -> float:
        return predict(instructions, self.clock_ghz, self.kappa)


def site_rates(sites, clock: str = "base") -> dict[str, SiteRate]:
    """LIM's view of every site, with the ``base`` (thesis) or measured ``avg`` clock."""
    if clock not in ("base", "avg"):
        raise ModelError(f"clock must be 'base' or 'avg', got {clock!r}")
    return {s.name: SiteRate(s.name, s.kappa, s.clock.get(clock)) for s in sites}


def percent_error(predicted: float, actual: float) -> float:
    """(pred − act) / act × 100: positive means over-prediction, as the thesis reports it."""
    if actual == 0:
        raise ModelError("actual value must be non-zero")
    return (predicted - actual) / actual * 100.0
