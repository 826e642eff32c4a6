"""Before a live run's bag is submitted: every site asked at once whether it answers, its agent
shipped, its bandwidth probed where the sites file does not state it, and — for the
queue-aware strategy — when each pilot size would start (:mod:`resel.live.plan`)."""

from __future__ import annotations

from typing import Any

from resel.domain import Site
from resel.live.errors import describe
from resel.selection import Strategy


def preflight(coord: Any) -> tuple[dict[str, str], dict[str, float], dict[str, list[float | None]] | None]:
    """Ask every site for its availability and, for the queue-aware strategy, when each of
    its pilot sizes would start (twin, history bound or the scheduler's answer: resel.live.plan).

    Returns the sites that failed (with why), the full pilot's start estimate per site, and
    the estimates of every size of :meth:`Engine.probe_menu` (None without queue-awareness).
    A site that does not answer within ``check_timeout`` is one that failed.
    """
    strat = Strategy.parse(coord.options.strategy)
    want_estimates = strat.asks_waits or strat.base == "earliest"
    history = wait_errors = None
    if want_estimates:
        from resel.models.conditioned import load_wait_errors
        from resel.models.history import load_history
        history = load_history(coord.db)
        wait_errors = load_wait_errors(coord.db) if coord.options.objective == "p90" else None
    menu = coord.engine.probe_menu()
    # task data: a site whose bandwidth the sites file does not state is measured first
    unmeasured = {s.name for s in coord.sites if s.bandwidth is None} if coord.options.data else set()
    datas = {name: coord.task_data.site_data(name) for name in unmeasured}

    def check(i: int, site: Site) -> tuple[list[float | None] | None, tuple[float, float] | None]:
        ps = coord.site(site.name)
        ps.scheduler.availability()
        ps.ship_agent()
        probe = datas[site.name].probe() if site.name in datas else None
        if not (want_estimates and menu[i]):
            return None, probe
        from resel.live.plan import site_estimates
        from resel.planning import menu_waits
        opts = coord.options
        row = site_estimates(ps.scheduler, site, menu[i], coord.engine.tx[i], history,
                             quantile=opts.quantile, confidence=opts.confidence)
        return menu_waits(row, opts.estimate, opts.objective, wait_errors), probe

    answers = coord.polls.on_sites("check", {s.name: (lambda i=i, s=s: check(i, s)) for i, s in enumerate(coord.sites)},
                                   coord.options.check_timeout)
    failures, estimates, waits = {}, {}, {}
    for site in coord.sites:
        report = answers.get(site.name)
        if report is None:
            failures[site.name] = f"no answer within {coord.options.check_timeout:g} s"
        elif report.error is not None:
            failures[site.name] = describe(report.error)
        else:
            menu_waits, probe = report.result
            if probe is not None:
                coord.task_data.probed[site.name] = probe
            if menu_waits is not None:
                waits[site.name] = menu_waits
                if menu_waits[0] is not None:      # the full pilot comes first
                    estimates[site.name] = menu_waits[0]
        if site.name in failures:
            coord.health.views[site.name].error = failures[site.name]
    return failures, estimates, (waits if want_estimates else None)
