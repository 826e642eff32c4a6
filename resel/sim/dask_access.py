"""Where ``--dask`` sends the repetitions, and that nobody else can reach them there.

Dask trusts whoever is connected: a scheduler runs any function a client submits, in its
workers, as the workers' user; a client unpickles whatever result comes back — and unpickling
can run code. Over plain ``tcp://`` nobody is authenticated, so another user of the machine
(issue 24, Seen 3) could, through the user's own scheduler, run code in its workers as the
user; or listen first on the port the user gives and answer as a scheduler, with a "result"
that runs their code in resel as the user. So ``--dask`` takes three kinds of address:

* ``local`` or ``local:N`` — resel starts a Dask ``LocalCluster`` for this one command: N
  worker processes on this machine (default: ``--workers``, else every core), listening on
  127.0.0.1 over TLS with certificates made for this run by ``Security.temporary()`` (a CA and
  one key, in memory, never on disk). The scheduler and workers accept only connections that
  present that certificate, and resel only a scheduler that does: other users cannot connect,
  nor pose as it. (An ``inproc://`` cluster, which nobody else can reach either, runs in one
  process, so the repetitions would share one core: no faster than ``--workers 1``.)
* ``tls://HOST:PORT`` — a scheduler the user started with TLS (``dask scheduler --tls-ca-file
  … --tls-cert … --tls-key …``, dask-jobqueue's ``security=``). resel connects with Dask's own
  TLS settings, read from Dask's configuration (``~/.config/dask/*.yaml`` or the
  ``DASK_DISTRIBUTED__COMM__TLS__…`` variables): ``distributed.comm.tls.ca-file``,
  ``distributed.comm.tls.client.cert`` and ``distributed.comm.tls.client.key``. They must be
  set, the key file must be the user's and unreadable by others, and the CA and certificate
  files the user's (or root's) and writable by nobody else — whoever could change the CA could
  make resel trust their scheduler.
* ``tcp://HOST:PORT`` (or a bare ``HOST:PORT``) — only with ``--dask-insecure``, which says
  the user accepts that anyone who can reach that port runs code as them (a cluster on
  machines no one else uses, behind a firewall). A warning repeats it.

Anything else (``ucx://``, ``ws://``, ``inproc://``) is refused with the forms above.
docs/security.md has the threat model; benchmarks/bench_dask_security.py what TLS costs.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from resel.errors import ReselError
from resel.trust import read_secret, trusted_owner, who, writers

#: the Dask configuration keys a ``tls://`` address needs (docs/peers.md shows a file setting them)
TLS_KEYS = ("distributed.comm.tls.ca-file", "distributed.comm.tls.client.cert", "distributed.comm.tls.client.key")
FORMS = ("local[:N] (a private cluster resel starts on this machine), tls://HOST:PORT (with Dask's TLS settings: "
         f"{', '.join(TLS_KEYS)}), or tcp://HOST:PORT with --dask-insecure")
_LOCAL = re.compile(r"local(?::(\d{1,12}))?\Z")
_HOST_PORT = re.compile(r"[A-Za-z0-9_.\-\[\]:]+:\d{1,5}\Z")


@dataclass(frozen=True)
class DaskTarget:
    """What ``--dask`` asked for: ``kind`` local, tls or tcp; the address; the local workers."""

    kind: str
    address: str | None = None
    workers: int | None = None


def parse_target(address: str, *, insecure: bool = False) -> DaskTarget:
    """``--dask ADDRESS`` checked before any work.

    Raises:
        ReselError: an unknown scheme, a malformed address, or ``tcp://`` without ``insecure``.
    """
    text = address.strip()
    local = _LOCAL.match(text)
    if text.startswith("local:") and not local:
        raise ReselError(f"--dask {address}: give local or local:N (N worker processes), e.g. local:4")
    if local:
        n = int(local.group(1)) if local.group(1) else None
        if n is not None and not 1 <= n <= 1024:
            raise ReselError(f"--dask {address}: give 1 to 1024 local workers, e.g. local:4")
        return DaskTarget("local", workers=n)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text         # Dask's default for a bare HOST:PORT
    scheme = scheme.lower()
    if scheme not in ("tls", "tcp"):
        raise ReselError(f"--dask {address}: resel does not connect over {scheme}://; give {FORMS}")
    if not _HOST_PORT.match(rest) or not 1 <= int(rest.rsplit(":", 1)[1]) <= 65535:
        raise ReselError(f"--dask {address}: not an address; give {FORMS}")
    if scheme == "tcp" and not insecure:
        raise ReselError(
            f"--dask {address}: a tcp:// Dask scheduler authenticates nobody — any user who can reach "
            "that port can run code as you through it, or answer in its place with a result that runs "
            "their code in resel. Use --dask local[:N] (a private cluster resel starts), tls://HOST:PORT "
            "with Dask's TLS settings, or add --dask-insecure if no one else can reach it (docs/security.md)")
    return DaskTarget(scheme, address=f"{scheme}://{rest}")


def tls_security() -> Any:
    """A Dask ``Security`` for a ``tls://`` scheduler, from Dask's configuration, checked.

    Raises:
        ReselError: a setting is missing, or a file is another user's, writable by others, or (the
            key) readable by others — saying which and the fix.
    """
    import dask
    from distributed.security import Security
    values = {key: dask.config.get(key, None) for key in TLS_KEYS}
    missing = [key for key, value in values.items() if not value]
    if missing:
        raise ReselError(
            f"--dask tls://…: Dask's TLS settings {', '.join(missing)} are not set: give the CA that signed "
            "the scheduler's certificate and your client certificate and key in Dask's configuration, e.g. "
            "~/.config/dask/distributed.yaml (docs/peers.md shows one) or DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
            "…__CLIENT__CERT and …__CLIENT__KEY")
    ca, cert, key = (os.path.expanduser(str(values[k])) for k in TLS_KEYS)
    for what, path in (("the CA file", ca), ("the client certificate", cert)):
        _not_changeable_by_others(what, path)
    read_secret(key, "--dask tls://…: the client key")       # the user's, readable by nobody else
    return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)


def _not_changeable_by_others(what: str, path: str) -> None:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ReselError(f"--dask tls://…: cannot read {what} {path}: {exc.strerror or exc}") from None
    if not trusted_owner(st.st_uid, os.geteuid()):
        raise ReselError(f"--dask tls://…: {what} {path} belongs to {who(st.st_uid)}, who could make resel trust "
                         "a scheduler of theirs; use a copy of your own")
    can = writers(st.st_mode)
    if can:
        raise ReselError(f"--dask tls://…: {what} {path} is writable by {can} (mode {stat.S_IMODE(st.st_mode):04o}), "
                         f"who could make resel trust a scheduler of theirs; run `chmod go-w {path}`")


#: what a Dask cluster's failure raises into resel (a lost connection, a worker killed, a worker
#: without resel); turned into one clear error
_CLUSTER_FAILURES: tuple[type[BaseException], ...] = (OSError, TimeoutError, ImportError, CancelledError)


@contextmanager
def dask_client(target: DaskTarget, *, default_workers: int = 1) -> Iterator[Any]:
    """A connected ``distributed.Client`` for ``target``; a local cluster is started and closed here.

    Raises:
        ReselError: Dask is missing, the cluster cannot be started or reached, or it fails while
            the repetitions run.
    """
    try:
        from distributed import Client, LocalCluster
        from distributed.scheduler import KilledWorker
        from distributed.security import Security
    except ImportError:
        raise ReselError("--dask needs Dask's distributed scheduler: pip install 'resel[sweep]'") from None
    shown = "a local Dask cluster" if target.kind == "local" else f"the Dask scheduler at {target.address}"
    cluster = None
    try:
        if target.kind == "local":
            security = Security.temporary()       # this run's CA and key, in memory only
            try:
                cluster = LocalCluster(n_workers=target.workers or default_workers, threads_per_worker=1,
                                       processes=True, host="127.0.0.1", protocol="tls://", security=security,
                                       dashboard_address=None, silence_logs=logging.ERROR)
                client = Client(cluster, security=security)
            except Exception as exc:              # noqa: BLE001 - any failure to start is one error
                raise ReselError(f"could not start a local Dask cluster: {type(exc).__name__}: {exc}") from None
        else:
            security = tls_security() if target.kind == "tls" else None
            try:          # waits distributed.comm.timeouts.connect (Dask's config, 30 s)
                client = Client(target.address, security=security)
            except Exception as exc:              # noqa: BLE001 - any failure to connect is one error
                raise ReselError(f"cannot reach the Dask scheduler at {target.address}: {type(exc).__name__}: "
                                 f"{exc}; start one (dask scheduler, or dask-jobqueue on your cluster) and give its "
                                 "address, e.g. tls://login1:8786, or use --dask local") from None
        try:
            yield client
        except (*_CLUSTER_FAILURES, KilledWorker) as exc:
            raise ReselError(f"{shown} failed while the repetitions ran: {type(exc).__name__}: {exc} "
                             "(its workers need resel installed, the same version as here)") from None
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
