"""A Slurm site through pyslurm (Python bindings to libslurm), where resel runs on the login node.

pyslurm links against one Slurm release: its version follows Slurm's (pyslurm 22.5.x is
built for Slurm 22.05, 23.2.x for 23.02, …) and a mismatched build fails inside libslurm in
ways that are hard to read. So constructing :class:`SlurmPySlurm` checks first — pyslurm
importable, its major.minor equal to the cluster's — and otherwise raises
:class:`PySlurmUnavailable` saying which pyslurm to install, or to use ``api = "cli"``.

PyPI carries only a few pyslurm builds (old 17/18 ones and the newest), so on most clusters
pyslurm has to be built from source against the site's Slurm; the CLI backend
(:class:`~resel.backends.slurm.cli.SlurmCLI`) needs nothing and is the default. This adapter uses
pyslurm's object API (``JobSubmitDescription``, ``Jobs``, ``Job``; ``Partitions``/``Nodes``
where present, the older ``partition()``/``node()`` dictionaries otherwise); it is only
exercised up to the version guard in the test suite, since no matching pyslurm exists here.
"""

from __future__ import annotations

import importlib
import os
import pwd
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from typing import Any

from resel.backends.slurm import formats as fmt
from resel.backends.slurm.cli import check_job_ids, check_job_name, walltime_minutes
from resel.backends.slurm.formats import (
    Availability,
    JobInfo,
    JobState,
    NodeCpus,
    PartitionMeta,
    SchedulerError,
)

__all__ = ["PySlurmUnavailable", "SlurmPySlurm", "major_minor"]


class PySlurmUnavailable(SchedulerError):
    """pyslurm is missing or built for another Slurm release than the cluster's."""


def major_minor(version: str) -> tuple[int, int] | None:
    """``"22.05.8"`` and pyslurm's ``"22.5.1"`` → ``(22, 5)``; None if not a version."""
    m = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _cluster_version() -> str:
    """The local Slurm release (pyslurm talks to the cluster this host belongs to)."""
    try:
        out = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PySlurmUnavailable(f"cannot tell the cluster's Slurm version: sinfo --version: {e}") from e
    return fmt.parse_version(out.stdout)


def _advice(cluster: tuple[int, int]) -> str:
    wanted = f"{cluster[0]}.{cluster[1]}"
    return (f"install pyslurm {wanted}.x, built against this cluster's Slurm "
            f"(pip install 'pyslurm=={wanted}.*' where such a build exists, else from "
            f"https://github.com/PySlurm/pyslurm at tag v{wanted}.x), or use api = \"cli\"")


class SlurmPySlurm:
    """Slurm via pyslurm, with the same methods as SlurmCLI (no test_only: libslurm's
    will-run call is not wrapped by pyslurm)."""

    scheduler = "pyslurm"

    def __init__(self, *, partition: str | None = None, account: str | None = None,
                 qos: str | None = None, slurm_version: str | None = None, module: Any = None):
        try:
            self.pyslurm = module if module is not None else importlib.import_module("pyslurm")
        except ImportError as e:
            cluster = major_minor(slurm_version or _cluster_version())
            raise PySlurmUnavailable(
                f"pyslurm is not installed ({e}); pyslurm's version must match the cluster's "
                f"Slurm {cluster[0]}.{cluster[1]:02d}" if cluster else f"pyslurm is not installed ({e})",
                hint=_advice(cluster) if cluster else "or use api = \"cli\"") from None
        mine_text = str(getattr(self.pyslurm, "__version__", "") or "")
        if not mine_text and hasattr(self.pyslurm, "version"):
            mine_text = str(self.pyslurm.version())
        mine = major_minor(mine_text)
        cluster_text = slurm_version or _cluster_version()
        cluster = major_minor(cluster_text)
        if cluster is None:
            raise PySlurmUnavailable(f"cannot read the cluster's Slurm version from {cluster_text!r}")
        if mine != cluster:
            raise PySlurmUnavailable(
                f"pyslurm {mine_text or '(unknown version)'} is built for Slurm "
                f"{f'{mine[0]}.{mine[1]:02d}' if mine else '?'}, but the cluster runs Slurm {cluster_text}; "
                f"only pyslurm {cluster[0]}.{cluster[1]}.x works with it", hint=_advice(cluster))
        self.slurm_version = cluster_text
        self.partition, self.account, self.qos = partition, account, qos

    # ------------------------------------------------------------------ queries

    def version(self) -> str:
        return self.slurm_version

    def _partition_metas(self) -> dict[str, PartitionMeta]:
        ps = self.pyslurm
        out = {}
        if hasattr(ps, "Partitions"):                               # pyslurm ≥ 23.2
            for name, p in ps.Partitions.load().items():
                limit = getattr(p, "max_time", None)                # minutes, or "UNLIMITED"
                out[name] = PartitionMeta(
                    name, str(getattr(p, "state", "UNKNOWN")).upper(),
                    fmt.minutes(limit if isinstance(limit, (int, float)) else None),
                    bool(getattr(p, "is_default", False)), getattr(p, "total_cpus", None),
                    getattr(p, "total_nodes", None))
            return out
        for name, p in ps.partition().get().items():                # the 22.5 dictionary API
            limit = p.get("max_time")
            flags = p.get("flags") or {}
            out[name] = PartitionMeta(
                name, str(p.get("state", "UNKNOWN")).upper(),
                fmt.minutes(limit if isinstance(limit, (int, float)) else None),
                bool(flags.get("Default")) if isinstance(flags, dict) else "DEFAULT" in str(flags).upper(),
                p.get("total_cpus"), p.get("total_nodes"))
        return out

    def _nodes(self) -> list[NodeCpus]:
        ps = self.pyslurm
        rows = []
        if hasattr(ps, "Nodes"):
            for name, n in ps.Nodes.load().items():
                rows.append({"name": name, "cpus": n.total_cpus, "alloc_cpus": n.allocated_cpus,
                             "idle_cpus": n.idle_cpus, "state": n.state, "partitions": n.partitions})
        else:
            for name, n in ps.node().get().items():
                rows.append({"name": name, "cpus": n.get("cpus"), "alloc_cpus": n.get("alloc_cpus"),
                             "state": n.get("state"), "partitions": n.get("partitions") or []})
        return fmt.parse_nodes_json({"nodes": rows}, "pyslurm nodes")

    def availability(self) -> Availability:
        metas, nodes = self._partition_metas(), self._nodes()
        if self.partition and self.partition not in metas:
            raise SchedulerError(f"partition {self.partition} not found; the site has: {', '.join(metas)}")
        return fmt.make_availability(self.scheduler, self.slurm_version, fmt.combine_partitions(metas, nodes),
                                     self._all_jobs().values(), time.time(), target=self.partition, nodes=nodes)

    def _all_jobs(self) -> dict[str, JobInfo]:
        out = {}
        for jid, j in self.pyslurm.Jobs.load().items():
            states = fmt.job_state_fields(str(getattr(j, "state", "UNKNOWN")), "pyslurm")
            out[str(jid)] = fmt.JobInfo(
                job_id=str(jid), name=str(getattr(j, "name", "") or ""), **states,
                submit=fmt.timestamp(getattr(j, "submit_time", None)),
                start=fmt.timestamp(getattr(j, "start_time", None)),
                end=fmt.timestamp(getattr(j, "end_time", None)),
                time_limit=fmt.minutes(getattr(j, "time_limit", None)
                                       if isinstance(getattr(j, "time_limit", None), (int, float)) else None),
                cpus=getattr(j, "cpus", None), **fmt.reason_fields(getattr(j, "state_reason", None), states["state"]),
                user=getattr(j, "user_name", None), partition=getattr(j, "partition", None))
        return out

    def jobs(self, ids: Iterable[str] | None = None, *, user: str | None = None,
             name_prefix: str | None = None) -> dict[str, JobInfo]:
        """Jobs libslurm lists (every user's); a name lookup without ``user`` keeps this user's
        own, as the CLI's ``--me`` does: pilot names are public, and another user's job named
        as a pilot would be taken for it."""
        wanted = set(check_job_ids(ids)) if ids is not None else None
        if name_prefix is not None and user is None:
            user = pwd.getpwuid(os.geteuid()).pw_name
        return {jid: j for jid, j in self._all_jobs().items()
                if (wanted is None or jid in wanted) and (user is None or j.user == user)
                and (name_prefix is None or j.name.startswith(name_prefix))}

    def test_only(self, cores: int, walltime: float) -> float | None:
        return None

    def start_estimates(self, ids: Iterable[str]) -> dict[str, float | None]:
        wanted = check_job_ids(ids)
        jobs = self.jobs(wanted)
        return {jid: jobs[jid].start if jid in jobs and jobs[jid].state is JobState.PENDING else None
                for jid in wanted}

    def accounting(self, ids: Iterable[str]) -> dict[str, JobInfo]:
        return {}

    # ------------------------------------------------------------------ actions

    def submit(self, script: str, *, name: str, cores: int, walltime: float, workdir: str,
               output: str | None = None) -> str:
        check_job_name(name)
        options: dict[str, Any] = {
            "name": name, "ntasks": 1, "cpus_per_task": int(cores),
            "time_limit": walltime_minutes(walltime), "working_directory": workdir, "script": script}
        if output:
            options["standard_output"] = output
        for key, value in (("partition", self.partition), ("account", self.account), ("qos", self.qos)):
            if value:
                options[key] = value
        try:
            return str(self.pyslurm.JobSubmitDescription(**options).submit())
        except Exception as e:          # pyslurm raises RPCError with libslurm's message
            raise fmt.sbatch_error(str(e), "pyslurm submit") from e

    def cancel(self, ids: Sequence[str]) -> None:
        for jid in check_job_ids(ids):
            try:
                self.pyslurm.Job(int(jid.split("_")[0])).cancel()
            except Exception as e:
                if fmt.scancel_problems("error: " + str(e)):
                    raise SchedulerError(f"pyslurm cancel {jid} failed: {e}") from e
