"""``resel sites probe``: what a site's compute nodes really are, measured through its own queue.

The login node that ``resel sites check`` sees is often not what the batch jobs get. A probe
submits one single-core pilot through the site's backend (the same :class:`PilotSite` path a run
uses), gives its agent one reference task under ``perf stat``, and records what came back: the
node's CPU model and clock (the agent reads /proc/cpuinfo there), the reference task's
task-clock and — where the node has hardware counters — cycles and instructions, hence the
effective clock (cycles / task-clock). Rows go to the ``site_probes`` table; LIM can use the
latest probed clock of each site instead of the sites file's (``resel run --clock probed``).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any, Callable

from sqlite_utils import Database

from resel.backends.pilotsite import PilotSite
from resel.backends.waves import WaveCursor
from resel.domain import Clock, Site
from resel.store import utc_now

#: the reference workload: pure interpreter work, the same on every node, about a second
REFERENCE = "python3 -c 's = 0\nfor i in range(4 * 10**6): s += i * i\nprint(s)'"


def probe_site(site: Site, open_site: Callable[[Site], PilotSite], *, timeout: float = 300.0,
               poll: float = 0.5) -> dict[str, Any]:
    """Submit one probe pilot to ``site``, run the reference task, return what was measured.

    Never raises for a site problem: the row's ``error`` says what went wrong (the pilot did
    not start within ``timeout``, the site refused it, …), so one bad site does not stop a probe
    of the others.
    """
    row: dict[str, Any] = {"site": site.name, "kind": site.kind, "host": None, "cpu_model": None,
                           "cpu_mhz": None, "task_clock_s": None, "cycles": None, "instructions": None,
                           "clock_ghz": None, "clock_method": None, "wait_s": None, "wall_s": None,
                           "job_id": None, "error": None}
    run_key = f"r0-{secrets.token_hex(3)}"
    began = time.time()
    ps = job = None
    try:
        ps = open_site(site)
        job = ps.submit_pilot(run_key, 0, 1, max(120.0, min(site.pilot.walltime, 900.0)), 1)
        row["job_id"] = job
        ps.dispatch(run_key, 0, 0, 1, REFERENCE, perf=True)
        seen: set[str] = set()
        cursor = WaveCursor()   # on a pool, a result wave read half written is held and read again
        deadline = began + timeout
        while time.time() < deadline:
            found = ps.collect(run_key, 0, seen, cursor=cursor, whole=True)
            if found.agent:
                row["host"], row["cpu_model"] = found.agent.get("host"), found.agent.get("cpu_model")
                row["cpu_mhz"] = _float(found.agent.get("cpu_mhz"))
                row["wait_s"] = (_float(found.agent.get("started")) or began) - began
            if found.results:
                _measured(row, found.results[0])
                break
            info = ps.pilot_jobs([job]).get(job)
            if info is None or info.state.final:      # an unknown state is polled on
                if not ps.collect(run_key, 0, seen, cursor=cursor, whole=True).results:
                    row["error"] = f"probe job {job} ended ({info.shown if info else 'gone'}) without a result"
                    break
            time.sleep(poll)
        else:
            row["error"] = f"no result within {timeout:g} s (the probe pilot may still be queued)"
    except Exception as exc:   # noqa: BLE001 - reported in the site's row
        row["error"] = str(exc).strip() or type(exc).__name__
    finally:
        if ps is not None:
            if job is not None:
                try:
                    ps.stop_pilot(run_key, 0, job)
                except Exception:   # noqa: BLE001 - best effort; the pilot's walltime ends it anyway
                    pass
            try:
                ps.transport.close()
            except Exception:   # noqa: BLE001
                pass
    row["wall_s"] = time.time() - began
    return row


def _measured(row: dict[str, Any], result: dict) -> None:
    """Fill the row from the reference task's result; say how the clock was obtained."""
    if result.get("outcome") != "done":
        row["error"] = f"reference task {result.get('outcome')}: {result.get('reason')}"
        return
    perf = result.get("perf") or {}
    ms = _float(perf.get("task-clock-ms")) or _float(perf.get("task-clock"))
    row["task_clock_s"] = ms / 1000.0 if ms else None
    row["cycles"] = _float(perf.get("cycles:u")) or _float(perf.get("cycles"))
    row["instructions"] = _float(perf.get("instructions:u")) or _float(perf.get("instructions"))
    if row["cycles"] and row["task_clock_s"]:
        row["clock_ghz"], row["clock_method"] = row["cycles"] / row["task_clock_s"] / 1e9, "perf:cycles/task-clock"
    elif row["cpu_mhz"]:
        row["clock_ghz"], row["clock_method"] = row["cpu_mhz"] / 1000.0, "cpuinfo:cpu MHz"


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def save(db: Database, rows: list[dict[str, Any]]) -> None:
    db["site_probes"].insert_all(({"created": utc_now(), **r} for r in rows), alter=True)


def probed_sites(db: Database, sites: list[Site]) -> tuple[list[Site], dict[str, float]]:
    """The sites with ``clock.avg`` set to each one's latest probed clock (where one exists)."""
    latest: dict[str, float] = {}
    if db["site_probes"].exists():
        for r in db.query("select site, clock_ghz from site_probes where clock_ghz is not null "
                          "and error is null order by rowid"):
            latest[r["site"]] = r["clock_ghz"]
    out = [dataclasses.replace(s, clock=Clock(s.clock.base, latest[s.name])) if s.name in latest else s
           for s in sites]
    return out, latest
