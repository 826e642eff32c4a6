"""The limits a site puts on one user, read from what its scheduler says (pure parsers).

Sites cap what one user may hold: Slurm through associations and QOS (``sacctmgr``: MaxJobs,
MaxSubmit, MaxWall, GrpTRES, MaxTRESPU, …), PBS through queue attributes (``max_queued``,
``max_run``, ``max_run_res.ncpus``, ``resources_max.*``; Torque's ``max_user_run``), HTCondor
through the schedd's configuration (``MAX_JOBS_PER_OWNER``, ``MAX_JOBS_PER_SUBMISSION``,
``MAX_JOBS_RUNNING``). A pilot beyond them is refused at submission
(``QOSMaxSubmitJobPerUserLimit``) or waits for ever (``QOSMaxJobsPerUserLimit``,
``AssocGrpCpuLimit``), so resel sizes and counts its pilots within them
(:mod:`resel.live.site_limits`).

Everything here is a pure function of the text a command printed, so it is tested on real
output (tests/data/limits/README.md says where each sample comes from). Each limit keeps the
words that set it (``QOS normal: MaxSubmitPU=10``) for ``resel plan --explain``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from resel.backends.pbs.formats import QUEUE_HEADER, text_blocks, flatten, parse_walltime
from resel.backends.slurm.formats import parse_duration
from resel.errors import SchedulerReplyError

__all__ = ["Limits", "condor_limits", "parse_sacctmgr", "pbs_limit_value", "pbs_queue_limits",
           "slurm_assoc_limits", "slurm_qos_limits", "tres_cpus"]


@dataclass(frozen=True)
class Limits:
    """What one user may hold on a site (None: no limit, or none said).

    ``max_submit``: jobs queued and running at once; ``max_running``: jobs running at once;
    ``max_cores_per_job``; ``max_cores``: cores running at once over all the user's jobs;
    ``max_walltime`` in seconds. ``why`` maps each field set to the words that set it.
    """

    max_submit: int | None = None
    max_running: int | None = None
    max_cores_per_job: int | None = None
    max_cores: int | None = None
    max_walltime: float | None = None
    why: Mapping[str, str] = field(default_factory=dict)

    def tightest(self, other: "Limits") -> "Limits":
        """Both sets at once: the smaller of each limit, with the words of the one that won."""
        values: dict[str, Any] = {}
        why = dict(self.why)
        for f in fields(self):
            if f.name == "why":
                continue
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if theirs is not None and (mine is None or theirs < mine):
                values[f.name] = theirs
                why[f.name] = other.why.get(f.name, "")
            else:
                values[f.name] = mine
        return Limits(**values, why=why)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: (dict(getattr(self, f.name)) if f.name == "why" else getattr(self, f.name))
                for f in fields(self)}

    @property
    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self) if f.name != "why")


def _limit(**kv: tuple[Any, str] | None) -> Limits:
    values = {k: v[0] for k, v in kv.items() if v is not None and v[0] is not None}
    why = {k: v[1] for k, v in kv.items() if v is not None and v[0] is not None}
    return Limits(**values, why=why)


# ---------------------------------------------------------------------------- Slurm


def parse_sacctmgr(text: str, command: str = "sacctmgr -P show") -> list[dict[str, str]]:
    """``sacctmgr -P`` (``--parsable2``) or ``-p`` (a trailing ``|``) output with its header
    line → one dict per row, keyed by the header's words (``Def QOS``, ``MaxSubmitPU``, …)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    trailing = lines[0].endswith("|")     # -p ends every line with "|"; -P only a row whose last field is empty

    def split(line: str) -> list[str]:
        cells = line.split("|")
        return cells[:-1] if trailing and line.endswith("|") else cells
    header = split(lines[0])
    if not any(h in header for h in ("User", "Name", "Account")):
        raise SchedulerReplyError(command, f"expected a header line (User|Account|… or Name|…), got {lines[0][:80]!r}")
    rows = []
    for lineno, line in enumerate(lines[1:], 2):
        cells = split(line)
        if len(cells) != len(header):
            raise SchedulerReplyError(command, f"line {lineno}: {len(cells)} fields, the header has {len(header)}")
        rows.append(dict(zip(header, cells)))
    return rows


def tres_cpus(text: str) -> int | None:
    """The ``cpu=N`` of a TRES list (``cpu=1000,mem=4G,gres/gpu=2``), or None."""
    for part in (text or "").split(","):
        key, _, value = part.partition("=")
        if key.strip() == "cpu" and value.strip().isdigit():
            return int(value)
    return None


def _count(row: Mapping[str, str], *keys: str) -> tuple[int, str] | None:
    """The smallest of the counts set under ``keys`` (0 is a limit: nothing may be submitted)."""
    found = [(int(v), f"{k}={v}") for k in keys for v in [(row.get(k) or "").strip()] if v.isdigit()]
    return min(found) if found else None


def _wall(row: Mapping[str, str], key: str, command: str) -> tuple[float, str] | None:
    value = (row.get(key) or "").strip()
    if not value:
        return None
    seconds = parse_duration(value, key, command)
    return (seconds, f"{key}={value}") if seconds is not None else None


def _cpus(row: Mapping[str, str], *keys: str) -> tuple[int, str] | None:
    """The smallest ``cpu=N`` among the TRES lists under ``keys``."""
    found = [(n, f"{k}={row.get(k)}") for k in keys for n in [tres_cpus(row.get(k) or "")] if n is not None]
    return min(found) if found else None


def _tagged(value: tuple[Any, str] | None, tag: str) -> tuple[Any, str] | None:
    return None if value is None else (value[0], f"{tag}: {value[1]}")


def slurm_assoc_limits(rows: Sequence[Mapping[str, str]], user: str, *, account: str | None = None,
                       partition: str | None = None, command: str = "sacctmgr -P show assoc") -> tuple[Limits, list[str]]:
    """The user's association limits, and the QOS names it allows (its default first).

    The rows of ``user`` are kept (of ``account`` if given; of ``partition`` or of no
    partition); several rows (accounts, partitions) give the tightest of each limit, since
    resel does not know which one Slurm will pick when the site file names none.
    """
    mine = [r for r in rows if r.get("User") == user and (account is None or r.get("Account") == account)
            and (not r.get("Partition") or partition is None or r.get("Partition") == partition)]
    limits = Limits()
    qos: list[str] = []
    for r in mine:
        tag = f"association {r.get('Account', '?')}/{user}" + (f"/{r['Partition']}" if r.get("Partition") else "")
        limits = limits.tightest(_limit(
            max_submit=_tagged(_count(r, "MaxSubmit", "MaxSubmitJobs", "GrpSubmit"), tag),
            max_running=_tagged(_count(r, "MaxJobs", "GrpJobs"), tag),
            max_cores_per_job=_tagged(_cpus(r, "MaxTRES"), tag),
            max_cores=_tagged(_cpus(r, "GrpTRES"), tag),
            max_walltime=_tagged(_wall(r, "MaxWall", command) or _wall(r, "MaxWallDurationPerJob", command), tag)))
        default = (r.get("Def QOS") or "").strip()
        names = [q for q in (r.get("QOS") or "").split(",") if q]
        for q in ([default] if default else []) + names:
            if q not in qos:
                qos.append(q)
    return limits, qos


def slurm_qos_limits(rows: Sequence[Mapping[str, str]], name: str,
                     command: str = "sacctmgr -P show qos") -> Limits:
    """The limits of QOS ``name`` on one user: per user (``…PU``), and the totals per account
    (``…PA``) and of the whole QOS (``Grp…``), which bound one user as well."""
    for r in rows:
        if r.get("Name") != name:
            continue
        tag = f"QOS {name}"
        return _limit(
            max_submit=_tagged(_count(r, "MaxSubmitPU", "MaxSubmitJobsPerUser", "MaxSubmitPA", "GrpSubmit"), tag),
            max_running=_tagged(_count(r, "MaxJobsPU", "MaxJobsPerUser", "MaxJobsPA", "GrpJobs"), tag),
            max_cores_per_job=_tagged(_cpus(r, "MaxTRES"), tag),
            max_cores=_tagged(_cpus(r, "MaxTRESPU", "MaxTRESPA", "GrpTRES"), tag),
            max_walltime=_tagged(_wall(r, "MaxWall", command), tag))
    return Limits()


# ---------------------------------------------------------------------------- PBS

_ENTRY = re.compile(r"\[\s*([ugpo]):\s*(\"[^\"]*\"|'[^']*'|[^=\]]+?)\s*=\s*(\d+)\s*\]")


def pbs_limit_value(value: Any, user: str) -> int | None:
    """One user's bound in a PBS limit attribute.

    ``[u:PBS_GENERIC=100]`` (every user), ``[u:alice=5]`` (a named user: wins over the
    generic one for alice), ``[o:PBS_ALL=50]`` (everybody together: a bound for one user too);
    the entries may come in any order. Group and project entries (``g:``, ``p:``) are not the
    user's own and are left out. An old-style plain number is a bound for everyone.
    """
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    named = generic = overall = None
    for kind, who, n in _ENTRY.findall(text):
        who = who.strip("\"'")
        if kind == "u" and who == user:
            named = int(n)
        elif kind == "u" and who == "PBS_GENERIC":
            generic = int(n)
        elif kind == "o" and who == "PBS_ALL":
            overall = int(n)
    own = named if named is not None else generic
    bounds = [b for b in (own, overall) if b is not None]
    return min(bounds) if bounds else None


def pbs_queue_limits(attrs: Mapping[str, Any], queue: str, user: str, command: str = "qstat -Q -f") -> Limits:
    """One queue's limits on ``user`` from its attributes (``qstat -Q -f`` text or ``-F json``,
    flattened: ``resources_max.walltime``). PBS Pro: ``max_queued``, ``max_run``,
    ``max_run_res.ncpus``, ``resources_max.ncpus/walltime``; Torque: ``max_user_queuable``,
    ``max_user_run``, ``max_running``."""
    flat = flatten(attrs) if any(isinstance(v, Mapping) for v in attrs.values()) else dict(attrs)
    tag = f"queue {queue}"

    def bound(*keys: str) -> tuple[int, str] | None:
        found = [(n, f"{tag}: {k} = {flat[k]}") for k in keys if k in flat
                 for n in [pbs_limit_value(flat[k], user)] if n is not None]
        return min(found) if found else None

    wall = flat.get("resources_max.walltime")
    seconds = parse_walltime(wall, f"queue {queue}: resources_max.walltime", command) if wall is not None else None
    ncpus = flat.get("resources_max.ncpus")
    return _limit(
        max_submit=bound("max_queued", "max_user_queuable", "max_queuable"),
        max_running=bound("max_run", "max_user_run", "max_running"),
        max_cores_per_job=(int(ncpus), f"{tag}: resources_max.ncpus = {ncpus}") if str(ncpus or "").isdigit() else None,
        max_cores=bound("max_run_res.ncpus"),
        max_walltime=(seconds, f"{tag}: resources_max.walltime = {wall}") if seconds is not None else None)


def pbs_queues_text(text: str, command: str = "qstat -Q -f") -> dict[str, dict[str, str]]:
    """``qstat -Q -f`` text → each queue's attributes (wrapped values joined)."""
    return dict(text_blocks(text, QUEUE_HEADER, command))


# ---------------------------------------------------------------------------- HTCondor

#: the schedd's knobs resel reads, and the limit each sets
CONDOR_KNOBS = {"MAX_JOBS_PER_OWNER": "max_submit", "MAX_JOBS_PER_SUBMISSION": "max_submit",
                "MAX_JOBS_RUNNING": "max_running"}
_MIN_OF = re.compile(r"^MIN\(\{\s*([\d\s,]+)\}\)$")


def condor_value(text: str) -> int | None:
    """A knob's value as ``condor_config_val`` prints it: a number, or a ``MIN({a, b})`` of
    numbers (HTCondor 23's default for MAX_JOBS_RUNNING); anything else (an expression
    resel does not evaluate) is None."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    m = _MIN_OF.match(t)
    if m:
        nums = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
        return min(nums) if nums else None
    return None


def condor_limits(values: Mapping[str, str]) -> Limits:
    """``{KNOB: printed value}`` → limits. MAX_JOBS_RUNNING caps the whole schedd (every user
    together), so it bounds one user's running pilots too."""
    out = Limits()
    for knob, key in CONDOR_KNOBS.items():
        if knob in values:
            n = condor_value(values[knob])
            if n is not None:
                out = out.tightest(Limits(**{key: n}, why={key: f"schedd: {knob} = {values[knob].strip()}"}))
    return out


def parse_condor_config_val(knobs: Iterable[str], stdout: str) -> dict[str, str]:
    """``condor_config_val K1 K2 …`` prints one line per defined knob, in order, and ``Not
    defined: K`` on stderr for the others (exit 1); so it is asked one knob at a time by the
    backend, and this pairs one knob with its one line."""
    knobs = list(knobs)
    lines = [line for line in stdout.splitlines() if line.strip()]
    if len(lines) != len(knobs):
        raise SchedulerReplyError("condor_config_val", f"expected {len(knobs)} lines, got {len(lines)}")
    return dict(zip(knobs, lines))
