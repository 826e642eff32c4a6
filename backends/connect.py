"""Open a live site from its ``[site.access]`` table: transport, scheduler API, pilot exchange.

The one place that knows which class serves which ``kind``/``api`` pair, so the coordinator,
``resel sites check`` and ``resel run --dry-run`` open sites the same way.
"""

from __future__ import annotations

import time
from typing import Any

from resel.backends.jobs import CpuReader, Scheduler
from resel.backends.pilotsite import PilotSite
from resel.backends.transport import make_transport
from resel.domain import HTCondorOptions, PBSOptions, Site, SlurmOptions
from resel.errors import ReselError


def open_scheduler(site: Site, transport: Any) -> Scheduler:
    """The scheduler client for a site (nothing is contacted yet)."""
    acc = site.access
    if acc is None:
        raise ReselError(f"site {site.name!r} has no [site.access] table")
    if site.kind == "slurm":
        opt = acc.options(SlurmOptions)
        if acc.api == "cli":
            from resel.backends.slurm.cli import SlurmCLI
            return SlurmCLI(transport, env=dict(acc.env) or None, partition=opt.partition, account=opt.account,
                            qos=opt.qos, extra_sbatch=opt.sbatch_options, requeue=acc.requeue)
        if acc.api == "rest":
            from resel.backends.slurm.rest import SlurmREST
            from resel.trust import read_secret
            try:   # a password for the whole Slurm account: the user's file, readable by nobody else
                token = read_secret(opt.rest_token_file or "", f"site {site.name!r}: rest_token_file").strip()
            except ReselError as exc:
                raise ReselError(f"{exc} (get a token with `scontrol token` on the cluster, and keep it in a "
                                 "file only you can read: `umask 077; scontrol token > FILE`)") from None
            if token.startswith("SLURM_JWT="):
                token = token.split("=", 1)[1]
            # "auto": the newest API version the site's slurmrestd serves (Slurm 24.11 no longer serves v0.0.38)
            return SlurmREST(opt.rest_url, opt.rest_user, token, api_version="auto", partition=opt.partition,
                             account=opt.account, requeue=acc.requeue)
        if acc.api == "pyslurm":
            from resel.backends.slurm.pyslurm import SlurmPySlurm
            return SlurmPySlurm(partition=opt.partition, account=opt.account)
    if site.kind == "pbs":
        from resel.backends.pbs.cli import PBSCLI
        opt = acc.options(PBSOptions)
        return PBSCLI(transport, env=dict(acc.env) or None, queue=opt.queue, account=opt.account,
                      dialect=opt.dialect, extra_qsub=opt.qsub_options, rerunnable=acc.requeue)
    if site.kind == "htcondor":
        opt = acc.options(HTCondorOptions)
        if acc.api == "bindings":
            from resel.backends.htcondor.client import HTCondorBindings
            # the transport ships the chirp wrapper and makes the pilot's directories before a submit
            return HTCondorBindings(transport, project=opt.project, accounting_group=opt.accounting_group,
                                    extra_submit=opt.submit_lines, requeue=acc.requeue, setup=acc.setup)
        from resel.backends.htcondor.client import HTCondorCLI
        return HTCondorCLI(transport, env=dict(acc.env) or None, project=opt.project,
                           accounting_group=opt.accounting_group, extra_submit=opt.submit_lines,
                           requeue=acc.requeue, setup=acc.setup)
    raise ReselError(f"site {site.name!r}: no live backend for kind {site.kind!r} with api {acc.api!r}")


def open_site(site: Site) -> PilotSite:
    """Transport + scheduler + pilot exchange for one live site (SSH connects lazily)."""
    if site.access is None:
        raise ReselError(f"site {site.name!r} has no [site.access] table; it cannot run live")
    transport = make_transport(site.access.transport.table())
    return PilotSite(site, transport, open_scheduler(site, transport))


def check_site(site: Site) -> dict[str, Any]:
    """``resel sites check``: everything resel needs to know about a site, or why it can't."""
    row: dict[str, Any] = {"site": site.name, "kind": site.kind, "reachable": False, "scheduler": None,
                           "version": None, "partitions": [], "free_cores": None, "total_cores": None,
                           "start_estimate_s": None, "pilot_cores": None, "cpu": None, "error": None,
                           "seconds": None}
    began = time.monotonic()
    ps = None
    try:
        ps = open_site(site)
        sched = ps.scheduler
        row["version"] = sched.version()
        row["reachable"] = True
        av = sched.availability()
        row["scheduler"] = av.scheduler
        row["partitions"] = [{"name": p.name, "state": p.state, "total_cpus": p.total_cpus,
                              "idle_cpus": p.idle_cpus, "max_time": p.max_time, "default": p.default}
                             for p in av.partitions]
        row["free_cores"], row["total_cores"] = av.free_cores, av.total_cores
        cores = min(site.cores, site.pilot.max_cores or site.cores)
        row["pilot_cores"] = cores
        start = sched.test_only(cores, site.pilot.walltime)
        row["start_estimate_s"] = None if start is None else max(0.0, start - time.time())
        try:
            row["cpu"] = _cpu(ps)
        except Exception as exc:   # noqa: BLE001 - a missing lscpu is not a broken site
            row["cpu"] = {"error": str(exc)}
        ps.ship_agent()
    except Exception as exc:   # noqa: BLE001 - reported per site, never a traceback
        row["error"] = str(exc).strip() or type(exc).__name__
    finally:
        close_quietly(ps)
    row["seconds"] = round(time.monotonic() - began, 3)
    return row


def site_status(site: Site) -> dict[str, Any]:
    """``resel sites status``: one site's availability now, or the error that prevented it."""
    row: dict[str, Any] = {"site": site.name, "kind": site.kind, "scheduler": None, "version": None,
                           "free_cores": None, "total_cores": None, "running_jobs": None, "pending_jobs": None,
                           "partitions": [], "error": None, "seconds": None}
    began = time.monotonic()
    ps = None
    try:
        ps = open_site(site)
        av = ps.scheduler.availability()
        row.update(scheduler=av.scheduler, version=av.version, free_cores=av.free_cores,
                   total_cores=av.total_cores, running_jobs=av.running_jobs, pending_jobs=av.pending_jobs,
                   partitions=[p.name for p in av.partitions])
    except Exception as exc:   # noqa: BLE001 - shown in its row; the other sites go on
        row["error"] = str(exc).strip() or type(exc).__name__
    finally:
        close_quietly(ps)
    row["seconds"] = round(time.monotonic() - began, 3)
    return row


def close_quietly(ps: PilotSite | None) -> None:
    """Close a site's connection; a report is being made, a failing close must not spoil it."""
    if ps is not None:
        try:
            ps.transport.close()
        except Exception:   # noqa: BLE001
            pass


def _cpu(ps: PilotSite) -> dict[str, Any]:
    """CPU model and clock of the site's login node (lscpu / /proc/cpuinfo) via its transport."""
    info = ps.scheduler.cpu_info() if isinstance(ps.scheduler, CpuReader) else None
    if info is None:
        from resel.backends.slurm.cli import SlurmCLI
        info = SlurmCLI(ps.transport).cpu_info()
    return info
