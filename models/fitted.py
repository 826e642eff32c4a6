"""Which T̂x model a run, a simulation or a plan uses: LIM, or the stored fit (issue 16 item 1).

``--model lim`` predicts with LIM (κ · instructions / clock from the sites file);
``--model fitted`` with the newest stored fit (``resel model fit``) of the bag's application
on each site; the default ``auto`` takes the fit where one exists for the site and the bag's
application, else LIM — and every output says which (:meth:`RuntimeModel.summary`).

The spread around each point (:mod:`resel.models.runtime`) comes from the fit's leave-one-out
residuals; for a site without a fit, from its slots' clocks where they differ (a pool's
collector ads, the probes' and pilots' measured clocks, or a simulated pool's published slot
clocks); otherwise there is none, and the output says that too.
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Mapping, Sequence

from resel.errors import ModelError
from resel.models.calibration import SiteFit, application_of
from resel.models.stored_records import fit_row
from resel.models.lim import site_rates
from resel.models.runtime import RuntimeModel, SiteRuntime, rate_from_seconds_per_instruction, slot_ratios, thin

MODELS = ("auto", "lim", "fitted")
#: slots a simulated pool is taken to publish (its truth's clock distribution, drawn once)
SIM_SLOTS = 200


def stored_fits(db: Any, application: str) -> dict[str, tuple[int, str, SiteFit]]:
    """Per site, the newest stored fit of ``application``: (fit id, created, fit).

    Fits made before fits were kept per application (no ``application``) are never used for a
    bag: their rate may come from another program.
    """
    if db is None or "model_fits" not in db.table_names():
        return {}
    if "application" not in db["model_fits"].columns_dict:
        return {}
    out: dict[str, tuple[int, str, SiteFit]] = {}
    for row in db.query("select * from model_fits where application = ? order by id desc", [application]):
        checked = fit_row(row)
        for site, d in checked["fit"].items():
            if site not in out:
                out[site] = (row["id"], checked["created"], SiteFit.from_dict(d))
    return out


def measured_clocks(db: Any, site: str) -> list[float]:
    """The clocks (GHz) the site's slots showed: ``resel sites probe`` rows and the pilots'
    own /proc/cpuinfo (``live_pilots.cpu_mhz``), one value per probe or pilot."""
    out: list[float] = []
    if db is None:
        return out
    names = db.table_names()
    if "site_probes" in names:
        for r in db.query("select clock_ghz, cpu_mhz from site_probes where site = ? and error is null", [site]):
            ghz = r["clock_ghz"] or (r["cpu_mhz"] / 1000.0 if r["cpu_mhz"] else None)
            if ghz and ghz > 0:
                out.append(float(ghz))
    if "live_pilots" in names and "cpu_mhz" in db["live_pilots"].columns_dict:
        for r in db.query("select cpu_mhz from live_pilots where site = ? and cpu_mhz > 0", [site]):
            out.append(float(r["cpu_mhz"]) / 1000.0)
    return out


def slot_speeds_from_ads(slots: Iterable[Any]) -> tuple[list[float], list[float], str] | None:
    """Per-slot speeds from a pool's slot ads (:class:`~resel.backends.htcondor.formats.Slot`):
    ``Mips`` (a measured benchmark) where slots publish it, else the advertised clock (or the
    ``@ x.xxGHz`` of the CPU model); weights are the slots' cpus (a partitionable slot's free
    ones plus its dynamic slots' cover the machine once). Slots without the figure are left
    out, and the description says how many cpus it covers. None when no slot publishes either
    (the recorded pool does not)."""
    slots = [s for s in slots if (getattr(s, "cpus", 1) or 0) > 0]
    total = sum(getattr(s, "cpus", 1) or 1 for s in slots)
    for attr, what in (("mips", "collector Mips"), ("clock_mhz", "collector clocks")):
        known = [(float(getattr(s, attr)), float(getattr(s, "cpus", 1) or 1)) for s in slots if getattr(s, attr)]
        if known:
            covered = sum(w for _, w in known)
            note = what if covered == total else f"{what} of {covered:g} of {total:g} cpus"
            return [v for v, _ in known], [w for _, w in known], note
    return None


def simulated_slot_clocks(site: Any, seed: int = 0, n: int = SIM_SLOTS) -> list[float]:
    """A simulated pool's published slot clocks: ``n`` draws of its truth's clock distribution,
    from a stream of their own (what its collector would advertise; IPC is not advertised)."""
    truth = getattr(site, "truth", None)
    if truth is None:
        return []
    draw = truth.clock.sampler(random.Random(f"{seed}:{site.name}:ads"))
    return [max(0.1, draw()) for _ in range(n)]


def _distinct(values: Sequence[float]) -> bool:
    return len({round(v, 6) for v in values}) > 1


def runtime_model(bag: Any, sites: Sequence[Any], *, model: str = "auto", db: Any = None, clock: str = "base",
                  slot_speeds: Mapping[str, tuple[Sequence[float], Sequence[float] | None, str]] | None = None,
                  simulated_ads: bool = False, seed: int = 0) -> RuntimeModel:
    """Every site's runtime model for ``bag``.

    Args:
        model: ``auto`` (fit where stored, else LIM), ``lim`` or ``fitted`` (LIM only for
            sites without a fit, each said so; an error if no site has one).
        db: the run store with ``model_fits`` (None: LIM only).
        slot_speeds: per site name, (speeds, weights, where from) read from a live pool's ads.
        simulated_ads: take a simulated pool's slot clocks from its truth (:func:`simulated_slot_clocks`).

    Raises:
        ModelError: ``fitted`` was asked for and no site has a fit of the bag's application.
    """
    if model not in MODELS:
        raise ModelError(f"unknown model {model!r}; one of {', '.join(MODELS)}")
    app = application_of(bag.command)
    fits = stored_fits(db, app) if model != "lim" else {}
    if model == "fitted" and not any(s.name in fits for s in sites):
        raise ModelError(f"--model fitted: no stored fit for application {app!r} on "
                         f"{', '.join(s.name for s in sites)} (run the bag live, then `resel model fit`)")
    lim = site_rates(list(sites), clock)
    out: dict[str, SiteRuntime] = {}
    notes: list[str] = []
    instr = bag.profile.instructions
    for s in sites:
        if s.name in fits:
            fid, created, f = fits[s.name]
            rate = rate_from_seconds_per_instruction(s.name, f.rate_s_per_instr, f.kappa)
            detail = (f"fit {fid} of {app} ({created}): {f.n} task(s) of run(s) "
                      f"{', '.join(map(str, f.runs)) or '?'}" + (f", {f.first} to {f.last}" if f.first else ""))
            ratios = thin(sorted(f.residuals))
            spread = f"calibration residuals (n={len(f.residuals)})" if ratios else ""
            out[s.name] = SiteRuntime(s.name, rate, "fit", detail, ratios, spread)
            continue
        if model == "fitted":
            notes.append(f"{s.name}: no fit of {app}; LIM")
        r = lim[s.name]
        detail = f"LIM: κ {r.kappa:g} · {instr:.3g} instructions / {r.clock_ghz:g} GHz ({clock} clock)"
        speeds, weights, what = None, None, ""
        if slot_speeds and s.name in slot_speeds:
            speeds, weights, what = slot_speeds[s.name]
        elif simulated_ads and getattr(s, "pilot", None) is not None and s.pilot.mode == "per-task":
            speeds, weights, what = simulated_slot_clocks(s, seed), None, "the pool's published slot clocks"
        elif db is not None:
            speeds, weights, what = measured_clocks(db, s.name), None, "measured slot clocks (probes, pilots)"
        ratios: tuple[float, ...] = ()
        spread = ""
        if speeds and _distinct(speeds):
            ratios = slot_ratios(list(speeds), list(weights) if weights else None)
            spread = f"{what} (n={len(speeds)})"
        out[s.name] = SiteRuntime(s.name, r, "lim", detail, ratios, spread)
    return RuntimeModel(out, model, app, notes)
