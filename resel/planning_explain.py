"""``resel plan --explain``: why each site was chosen, given extra pilots, or left out.

The plan is the engine's first step (:mod:`resel.live.plan`); this module reads its outcome back per
site and says which rule decided, with the numbers it decided on — so a user can tell "this
site is slow" from "this site is full", "over my QOS limit" or "unreachable":

========================  ==============================================================
verdict                   when
========================  ==============================================================
``chosen``                the engine gave the site tasks (its share, wait, T̂x, finish)
``extra pilots``          no tasks of its own, but pilots for tasks waiting elsewhere: a
                          re-selection target by the sites file (``reselect_target``) or
                          held by the queue-aware strategy (which makes every site it
                          holds one, whatever the sites file says — the sentence says which)
``rejected: limit``       the user's limits leave no room for a pilot (MaxSubmitPU=0, a
                          full quota; :mod:`resel.live.site_limits`)
``rejected: quarantined`` the engine holds the site in quarantine as a black hole
                          (:func:`quarantined`; the rule in docs/engine.md)
``rejected: unreachable`` the site did not answer: no estimate at all
``rejected: walltime``    one task's T̂x is longer than the pilot's walltime (a site the
                          engine still gives tasks or pilots keeps its verdict, with a warning)
``rejected: no estimate`` reachable, but no start estimate where the strategy needs one
``not chosen: too slow``  everything known, and another site finishes sooner: the numbers
                          compared (T̂x, wait, the bag alone on it vs the plan)
========================  ==============================================================

Pure: rows in (as :meth:`SitePlan.as_dict` gives them), explanations out. Every number a
sentence gives is a field of its row — the pilot the plan asks for there, its wait, its task
slots, the share's finish — never recomputed here, so the table, ``--explain`` and ``--json``
say the same (tests/test_plan_agree.py compares them).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from resel.units import TimeUnit, pick


def plan_unit(rows: Iterable[Mapping[str, Any]]) -> TimeUnit:
    """The one time unit of a plan's table and of its explanations: picked from the times the
    plan is about (start estimates, T̂x, the bag alone, the shares' finish), so ``resel plan``
    and ``--explain`` speak the same unit."""
    return pick(v for r in rows for v in (r.get("history_s"), r.get("twin_s"), r.get("scheduler_s"), r.get("tx"),
                                          r.get("ttc_s"), r.get("finish_s"), r.get("finish_p50"), r.get("finish_p90")))


def quarantined(engine: Any) -> dict[str, str]:
    """Sites the engine holds in quarantine as black holes (:attr:`Engine.quarantined`, the
    rule in docs/engine.md), each with the counts that decided it and when it is retried."""
    state = getattr(engine, "quarantined", None) or {}      # a plan without an engine has none
    return {str(k): _health_text(v) for k, v in state.items()}


def _health_text(health: Any) -> str:
    """A :class:`~resel.blackhole.SiteHealth` as words (a plain string is kept as it is)."""
    reason = getattr(health, "reason", None)
    if reason is None:
        return str(health)
    until = getattr(health, "until", None)
    return f"{reason or 'black hole'}" + (f"; retried at {until:,.0f} s" if until is not None else "")


def _groups(cores: list[int]) -> list[tuple[int, int]]:
    """(size, how many) of a list of pilot sizes, in order of each size's first pilot."""
    counts: dict[int, int] = {}
    for size in cores:
        counts[size] = counts.get(size, 0) + 1
    return list(counts.items())


def pilots_text(cores: list[int]) -> str:
    """A list of pilot sizes as the table prints it: ``240``, ``1,024 × 1`` (a pool's one-task
    pilots), ``240, 2 × 120``; ``—`` for none."""
    if not cores:
        return "—"
    return ", ".join(f"{size:,}" if n == 1 else f"{n:,} × {size:,}" for size, n in _groups(cores))


def pilots_words(cores: list[int]) -> str:
    """The same in words: ``1 pilot of 240 cores``, ``1,024 pilots of 1 core``."""
    if not cores:
        return "no pilot"
    return " and ".join(f"{n:,} pilot{'s' if n != 1 else ''} of {size:,} core{'s' if size != 1 else ''}"
                        for size, n in _groups(cores))


def _target_reason(row: Mapping[str, Any], strategy: str) -> str:
    """Why a site with no tasks of its own holds pilots for the tasks of others: the sites file
    made it a re-selection target, or — the engine's only other way to one, whatever the
    strategy is called (``queue…``, or ``auto`` running as it) — a queue-aware selection holds it."""
    if row.get("reselect_target"):
        return "a re-selection target (its reselect_target is true)"
    return (f"an extra site held by {strategy}, which moves waiting tasks to any site it holds whose pilot "
            "starts first (the sites file's reselect_target = false binds only the other strategies)")


def _data_text(row: Mapping[str, Any], _s: Any) -> str:
    """`` + data …`` when the bag moves data: a task's own inputs and outputs, the shared inputs once."""
    d = row.get("data")
    if not d:
        return ""
    return (f"; data: {_s(d['shared_in_s'])} of shared inputs first, then {_s(d['own_in_s'])} in and "
            f"{_s(d['out_s'])} out per task")


def explain_site(row: Mapping[str, Any], *, strategy: str, plan_ttc: float | None,
                 best: Mapping[str, Any] | None, quarantine: Mapping[str, str],
                 unit: TimeUnit | None = None) -> dict[str, Any]:
    """One site's verdict, its reasons (sentences) and the numbers they rest on (seconds).

    ``best`` is the row with the lowest T̂x among the sites given tasks (what a slower site is
    compared with); ``plan_ttc`` the plan's predicted TTC; ``unit`` the unit the sentences
    give times in (default: the row's own :func:`plan_unit`).
    """
    _s = (unit or plan_unit([row])).say
    name = row["site"]
    numbers: dict[str, Any] = {"tx_s": row["tx"], "walltime_s": row["walltime"], "wait_s": row["wait_s"],
                               "wait_from": row["used"], "bag_alone_s": row["ttc_s"], "tasks": row["tasks"],
                               "pilots": list(row["pilots"]), "pilot_cores": row.get("pilot_cores"),
                               "slots": row.get("slots", 0)}
    if row.get("data"):
        numbers["data_s"] = dict(row["data"])
    lim = row.get("limits") or {}
    why: list[str] = []
    if lim.get("changes"):
        why.append("pilots sized within the site's limits: " + "; ".join(lim["changes"]))
    if lim.get("pending_reasons"):
        why.append("your jobs already pending there wait for: "
                   + ", ".join(f"{r} ×{n}" for r, n in sorted(lim["pending_reasons"].items())))

    def out(verdict: str, reason: str) -> dict[str, Any]:
        return {"verdict": verdict, "why": [reason, *why], "numbers": numbers}

    if lim.get("blocked"):
        return out("rejected: limit", lim["blocked"])
    if name in quarantine:
        return out("rejected: quarantined", f"quarantined: {quarantine[name]}")
    if row.get("error"):
        return out("rejected: unreachable", f"no estimate: the site did not answer ({row['error']})")
    too_long = row["tx"] > row["walltime"]
    walltime = (f"walltime too short: one task's T̂x {_s(row['tx'])} is longer than the pilot's walltime "
                f"{_s(row['walltime'])}")
    if too_long and (row["tasks"] or row["role"] == "extra pilot"):
        why.append(f"warning: {walltime}: its tasks would be killed at the walltime")
    elif too_long:
        return out("rejected: walltime", walltime)
    if row["tasks"]:
        return out("chosen", _chosen_reason(row, numbers, strategy, _s))
    if row["role"] == "extra pilot":
        return out("extra pilots", f"no tasks of its own; {pilots_words(row['pilots'])} for tasks waiting "
                                   f"elsewhere, {_target_reason(row, strategy)}: wait {_s(numbers['wait_s'])} "
                                   f"({row['used'] or 'no estimate'}), T̂x {_s(row['tx'])}")
    if row["used"] is None and strategy.startswith("queue"):
        return out("rejected: no estimate", "no start estimate (history, twin and scheduler all unknown): "
                                            "the queue-aware strategy ranks it last")
    parts = []
    if best is not None:
        numbers["best_site"], numbers["best_tx_s"] = best["site"], best["tx"]
        parts.append(f"T̂x {_s(row['tx'])} against {_s(best['tx'])} on {best['site']}")
    if row["ttc_s"] is not None and plan_ttc is not None:
        numbers["plan_ttc_s"] = plan_ttc
        parts.append(f"the bag alone would take {_s(row['ttc_s'])} here (wait {_s(numbers['wait_s'])} + waves of "
                     f"T̂x), the plan {_s(plan_ttc)}")
    return out("not chosen: too slow", "too slow: " + ("; ".join(parts) if parts else "another site finishes sooner"))


def _chosen_reason(row: Mapping[str, Any], numbers: dict[str, Any], strategy: str,
                   _s: Callable[..., str]) -> str:
    """Why a site given tasks was chosen, and when its share is done: a pool's tasks of several
    sizes each on its own pilot, several widths packed into the pilots' cores, or waves of one
    T̂x. Fills ``numbers`` with what the sentence rests on (finish, waves, run)."""
    packed = row.get("packed")
    if packed and packed.get("pool"):     # a pool's tasks of several sizes, each its own pilot
        numbers["finish_s"], numbers["waves"], numbers["run_s"] = row["finish_s"], packed["waves"], packed["run_s"]
        return (f"chosen by {strategy}: {row['tasks']:,} task(s) of several sizes on "
                f"{pilots_words(row['pilots'])}, {packed['pilot_units']:,} at a time, each its own "
                f"T̂x in the order they wait and its own pilot's wait {_s(numbers['wait_s'])} "
                f"({row['used'] or 'no estimate'}): the last ends at {_s(packed['run_s'])}"
                f"{_data_text(row, _s)}; its share done at {_s(row['finish_s'])}")
    if packed:                            # several widths packed into the pilots' cores
        numbers["finish_s"], numbers["waves"], numbers["run_s"] = row["finish_s"], packed["waves"], packed["run_s"]
        width = f"{packed['unit_cores']}-core"
        return (f"chosen by {strategy}: {row['tasks']:,} task(s) of several widths on "
                f"{pilots_words(row['pilots'])}, packed by cores ({packed['units']:,} {width} units "
                f"into {packed['pilot_units']:,}); wait {_s(numbers['wait_s'])} "
                f"({row['used'] or 'no estimate'}) + {_s(packed['run_s'])} of tasks packed, "
                f"each its own T̂x ({packed['waves']:,} wave(s)' worth){_data_text(row, _s)}; "
                f"its share done at {_s(row['finish_s'])}")
    slots = row.get("slots") or 0
    waves = -(-row["tasks"] // slots) if slots else None
    numbers["finish_s"] = row["finish_s"]
    numbers["waves"] = waves
    return (f"chosen by {strategy}: {row['tasks']:,} task(s) on {pilots_words(row['pilots'])}, "
            f"{slots:,} at a time; wait {_s(numbers['wait_s'])} ({row['used'] or 'no estimate'}) + "
            f"{'?' if waves is None else f'{waves:,}'} wave(s) of T̂x {_s(row['tx'])}{_data_text(row, _s)}; "
            f"its share done at {_s(row['finish_s'])}")


def explain(rows: list[Mapping[str, Any]], *, strategy: str, plan_ttc: float | None,
            engine: Any = None) -> dict[str, dict[str, Any]]:
    """Every site's explanation, by name."""
    chosen = [r for r in rows if r["tasks"]]
    best = min(chosen, key=lambda r: r["tx"]) if chosen else None
    quarantine = quarantined(engine)
    unit = plan_unit(rows)
    return {r["site"]: explain_site(r, strategy=strategy, plan_ttc=plan_ttc, best=best, quarantine=quarantine,
                                    unit=unit)
            for r in rows}
