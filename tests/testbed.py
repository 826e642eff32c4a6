"""The live testbed that ``scripts/testbed.sh up`` builds, as the tests see it.

``up`` writes ``$RESEL_TB/testbed.env`` (default ``/tmp/resel-testbed``) last, only when every
daemon answers, as unquoted ``KEY=VALUE`` lines; :func:`load` reads it into a :class:`Testbed`.
Fields are the keys lowercased without their ``TB_`` prefix (``TB_SLURM_CONF_A`` →
``slurm_conf_a``); ``RESEL_TB`` is ``root``. Every value is the file's string (paths too, so
they go straight into environments and command lines), except the ports, ints.

The Debian 13 part (``scripts/testbed-trixie.sh``: Slurm 24.11 cluster ``tbc`` and an HTCondor
pool behind an access point's sshd) adds optional keys: an env file without them still loads,
with those fields None (``RESEL_TB_TRIXIE=0`` skips that part; :attr:`Testbed.has_trixie`).
Paths inside that root (``slurm_conf_c``, ``work_c``) are as a login on the access point sees
them; ``trixie_root`` is where the root is on this machine.

The Debian sid part (``scripts/testbed-sid.sh``: Slurm 26.05 cluster ``tbd``, an HTCondor 25 pool;
``RESEL_TB_SID=0`` skips it) writes the same values under ``TB_SID_*`` keys (:func:`root_key`).
:meth:`Testbed.debian_root` gives either root as a *view*: the testbed with that root's values in
the trixie fields (``trixie_ssh_config``, ``rest_url_c``, ``condor_collector``, …), so a test
written for one root runs on the other unchanged.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path

DEFAULT_ROOT = "/tmp/resel-testbed"
ENV_NAME = "testbed.env"


def env_path() -> Path:
    """Where the env file of the current testbed is (``$RESEL_TB/testbed.env``)."""
    return Path(os.environ.get("RESEL_TB") or DEFAULT_ROOT) / ENV_NAME


@dataclass(frozen=True)
class Testbed:
    __test__ = False      # not a test class, whatever pytest thinks of the name

    root: str             # RESEL_TB
    slurm_conf_a: str     # cluster A (tba): 8 CPUs, partitions debug + short, JWT for REST
    slurm_conf_b: str     # cluster B (tbb): 4 CPUs, partition debug, used over SSH
    cluster_a: str
    cluster_b: str
    host: str             # the node's name in both clusters (hostname -s)
    user: str             # the unprivileged user (SSH login, REST user)
    ssh_host: str
    ssh_port: int
    ssh_key: str          # private key of `user`
    known_hosts: str
    ssh_config: str       # Hosts tb-ssh, tb-jump, tb-via-jump (ProxyJump tb-jump)
    rest_url: str         # slurmrestd of cluster A
    rest_user: str
    rest_token_file: str
    work_a: str           # root's work directory for a site on cluster A
    work_b: str           # user's work directory (on the SSH side) for cluster B

    # The Debian 13 root (optional: None when scripts/testbed-trixie.sh did not run).
    trixie_root: str | None = None         # the root on this machine (its cache folder)
    trixie_dir: str | None = None          # the script's state on this machine; its processes' mark
    trixie_user: str | None = None         # the access point's unprivileged user (exists in the root only)
    trixie_ssh_port: int | None = None
    trixie_ssh_key: str | None = None
    trixie_known_hosts: str | None = None
    trixie_ssh_config: str | None = None   # Host tb-ap: the access point (HTCondor schedd, tbc's login)
    cluster_c: str | None = None           # cluster C (tbc): Slurm 24.11, 4 CPUs, partition debug
    slurm_conf_c: str | None = None        # inside the root: the login's default slurm.conf
    slurm_version_c: str | None = None
    rest_url_c: str | None = None          # slurmrestd of cluster C (API v0.0.40-v0.0.42)
    rest_user_c: str | None = None
    rest_token_file_c: str | None = None
    work_c: str | None = None              # trixie_user's work directory inside the root
    work_c_host: str | None = None         # the same directory from this machine (a path valid inside the root too)
    condor_collector: str | None = None    # host:port of the pool's collector
    condor_version: str | None = None
    condor_token_dir: str | None = None    # trixie_user's IDTOKEN, for htcondor2 clients on this machine

    # Accounting on cluster B (slurmdbd + MariaDB; None from a testbed.sh older than it).
    accounting_b: str | None = None        # "1": tbb's sacct and sacctmgr answer
    accounting_db_port: int | None = None  # MariaDB of tbb's slurmdbd, on 127.0.0.1 only
    account_b: str | None = None           # the account root and `user` submit under on tbb
    limit_qos: str | None = None           # a QOS on tbb only the limits tests use (the default QOS is unlimited)
    limit_qos_max_submit: int | None = None   # its MaxSubmitJobsPerUser
    limit_qos_max_jobs: int | None = None     # its MaxJobsPerUser

    # Not keys of the env file: which Debian root the trixie fields describe ("trixie", or "sid"
    # in the view debian_root("sid") gives), and the sid part's view (None when it is not up).
    debian_suite: str = "trixie"
    sid: Testbed | None = None

    @property
    def has_trixie(self) -> bool:
        """Whether the Debian 13 part (Slurm 24.11, HTCondor) is up."""
        return self.trixie_root is not None

    def debian_root(self, suite: str) -> Testbed | None:
        """The testbed seen through one Debian root (``"trixie"`` or ``"sid"``): its fields
        ``trixie_*``, ``*_c`` and ``condor_*`` hold that root's values; None if it is not up."""
        if suite == "trixie":
            return self if self.has_trixie and self.debian_suite == "trixie" else None
        if suite == "sid":
            return self.sid
        raise ValueError(f"no Debian root {suite!r} in the testbed (trixie, sid)")

    def slurm_env(self, cluster: str) -> dict[str, str]:
        """``os.environ`` with ``SLURM_CONF`` set for cluster ``"A"`` or ``"B"``."""
        conf = {"A": self.slurm_conf_a, "B": self.slurm_conf_b}[cluster.upper()]
        return {**os.environ, "SLURM_CONF": conf}


def _key(name: str) -> str:
    return "RESEL_TB" if name == "root" else "TB_" + name.upper()


#: the fields a Debian root's part sets (scripts/testbed-trixie.sh's env file), in its order
ROOT_FIELDS = ("trixie_root", "trixie_dir", "trixie_user", "trixie_ssh_port", "trixie_ssh_key",
               "trixie_known_hosts", "trixie_ssh_config", "cluster_c", "slurm_conf_c", "slurm_version_c",
               "rest_url_c", "rest_user_c", "rest_token_file_c", "work_c", "work_c_host",
               "condor_collector", "condor_version", "condor_token_dir")
#: the fields that are not strings
_INT = ("_port", "_max_submit", "_max_jobs")


def root_key(suite: str, name: str) -> str:
    """The env file's key for a root field of one suite: trixie's are the fields' own keys
    (``TB_TRIXIE_ROOT``, ``TB_REST_URL_C``), another suite's ``TB_<SUITE>_`` + the field without
    its ``trixie_`` and ``_c`` (``TB_SID_ROOT``, ``TB_SID_REST_URL``, ``TB_SID_WORK_HOST``)."""
    if suite == "trixie":
        return _key(name)
    what = "_".join(w for w in name.removeprefix("trixie_").split("_") if w != "c")
    return f"TB_{suite.upper()}_{what.upper()}"


def parse(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines (blank lines and ``#`` comments ignored) as a dict."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()
    return values


def load(path: str | os.PathLike | None = None) -> Testbed | None:
    """The testbed described by ``path`` (default: :func:`env_path`); None if there is none.

    A file that exists but lacks a key is an error, not "no testbed": it means the script and
    this module disagree.
    """
    path = Path(path) if path is not None else env_path()
    if not path.is_file():
        return None
    values = parse(path.read_text())
    missing = [_key(f.name) for f in fields(Testbed)
               if f.default is MISSING and _key(f.name) not in values]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}")
    kwargs = {f.name: _value(path, _key(f.name), values[_key(f.name)], f.name)
              for f in fields(Testbed) if _key(f.name) in values}     # absent: the default (None)
    tb = Testbed(**kwargs)
    if root_key("sid", "trixie_root") in values:
        keys = {name: root_key("sid", name) for name in ROOT_FIELDS}
        missing = [k for k in keys.values() if k not in values]
        if missing:
            raise ValueError(f"{path} lacks {', '.join(missing)}")
        sid = {name: _value(path, key, values[key], name) for name, key in keys.items()}
        tb = replace(tb, sid=replace(tb, **sid, debian_suite="sid"))
    return tb


def _value(path: Path, key: str, raw: str, name: str) -> str | int:
    if not name.endswith(_INT):
        return raw
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{path}: {key}={raw!r} is not a number") from None
