"""``--dask``: no unauthenticated pickle across users (issue 24, Seen 3 and the --dask part of 8).

Real Dask clusters on this machine and, as the other user, the unprivileged ``nobody``:

* ``--dask local[:N]`` starts a private cluster (TLS, certificates made for the run): nobody can
  connect to it — without a certificate, over tcp://, or with a certificate of their own;
* a ``tcp://`` address (the user's own unauthenticated scheduler, or another user's listener
  squatting the port) is refused before it is contacted, unless ``--dask-insecure``;
* a ``tls://`` scheduler is reached with Dask's own TLS settings; a squatter with a
  certificate of their own is refused by the TLS handshake, before anything is unpickled;
* ``tls://`` without the settings and ``ucx://`` are one clear error; a failed ``--dask`` leaves
  no empty experiment in the store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import resel
from resel.errors import ReselError
from resel.sim.dask_access import DaskTarget, dask_client, parse_target
from resel.sim.experiment import run_experiment

distributed = pytest.importorskip("distributed")

RESEL = [sys.executable, "-m", "resel.cli"]
SWEEP = ["simulate", "--sites", str(resel.default_sites_path()), "--strategies", "model+reselect,race", "--sizes",
         "16", "--repeat", "3", "--seed", "2"]


def resel_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*RESEL, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd="/")


@pytest.fixture(scope="module")
def serial():
    exp = run_experiment(resel.default_bag(), resel.default_sites(), ["model+reselect", "race"], [16], repeat=3, seed=2)
    return [c.as_dict() for c in exp.cells.values()]


def as_nobody():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as another user")
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def nobody_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python of user nobody (Dask's packages readable to it)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
           **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    return subprocess.run([*as_nobody(), sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd="/")


def tls_files(folder: Path, security) -> dict[str, str]:
    """A Security's PEMs as files (0600) and the DASK_* variables that point Dask's config at them."""
    paths = {}
    for name, pem in (("ca.pem", security.tls_ca_file), ("cert.pem", security.tls_client_cert),
                      ("key.pem", security.tls_client_key)):
        path = folder / name
        path.write_text(pem)
        path.chmod(0o600)
        paths[name] = str(path)
    return {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": paths["ca.pem"],
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": paths["cert.pem"],
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": paths["key.pem"],
            "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}


def experiments(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("select count(*) from experiments").fetchone()[0]


def test_dask_local_cluster_is_private_and_gives_the_serial_results(serial, tmp_path):
    db = tmp_path / "resel.db"
    got = resel_cli(*SWEEP, "--db", str(db), "--json", "--dask", "local:2")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert [{k: v for k, v in r.items() if k != "run_ids"} for r in doc["results"]] == \
        [{k: v for k, v in r.items() if k != "run_ids"} for r in serial]
    assert experiments(db) == 1 and doc["experiment_id"] == 1


def test_a_private_local_cluster_lets_no_other_user_in():
    """The user's own scheduler took code from another user (Seen 3). The cluster resel starts
    accepts only its run's certificate: nobody cannot connect without one, over tcp://, or with
    a certificate of their own — so they cannot submit ``os.system`` to its workers."""
    with dask_client(DaskTarget("local", workers=1)) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        probes = {
            "no certificate": f"from distributed import Client; Client({address!r}, timeout=5)",
            "tcp": f"from distributed import Client; Client({address.replace('tls://', 'tcp://')!r}, timeout=5)",
            "their own certificate": ("from distributed import Client; from distributed.security import Security; "
                                      f"Client({address!r}, security=Security.temporary(), timeout=5)"),
        }
        marker = Path(tempfile.mkdtemp(prefix="resel-dask-")) / "pwned"
        marker.parent.chmod(0o1777)
        try:
            for what, connect in probes.items():
                code = f"{connect}.submit(__import__('os').system, 'id > {marker}').result()"
                got = nobody_python(code)
                assert got.returncode != 0, (what, got.stdout)
                assert "Error" in got.stderr, (what, got.stderr)
            assert not marker.exists()
            assert client.submit(sum, [1, 2]).result() == 3          # the owner's own client works
        finally:
            shutil.rmtree(marker.parent, ignore_errors=True)


SQUATTER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0)); s.listen(8); s.settimeout(0.2)
    print(s.getsockname()[1], flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        try:
            conn, _ = s.accept()
        except OSError:
            continue
        print("CONNECTED", flush=True)
        conn.close()
""")


def test_a_tcp_scheduler_is_refused_before_it_is_contacted(tmp_path):
    """Seen 3: another user listening on the port the user expects. resel never connects to a
    tcp:// address without --dask-insecure: the squatter sees no connection, and no experiment is
    stored."""
    env = {"PATH": "/usr/bin:/bin", **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    squatter = subprocess.Popen([*as_nobody(), sys.executable, "-c", SQUATTER, "20"], stdout=subprocess.PIPE,
                                text=True, env=env, cwd="/")
    try:
        port = int(squatter.stdout.readline())
        db = tmp_path / "resel.db"
        for address in (f"tcp://127.0.0.1:{port}", f"127.0.0.1:{port}"):
            got = resel_cli("simulate", "--sizes", "4", "--repeat", "1", "--db", str(db), "--dask", address)
            assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
            assert "a tcp:// Dask scheduler authenticates nobody" in got.stderr and "--dask-insecure" in got.stderr
        time.sleep(0.5)     # kept: the test is that no connection reaches the squatter, not even a late one
    finally:
        squatter.terminate()
        out, _ = squatter.communicate(timeout=30)
    assert "CONNECTED" not in out
    assert not db.exists() or experiments(db) == 0


def test_a_tls_scheduler_is_reached_with_dask_settings_and_a_squatter_is_not(serial, tmp_path):
    """The user's TLS scheduler gives the serial results; another user's scheduler on the same
    kind of address, with a certificate of their own, fails the handshake: one clear error,
    nothing unpickled, no experiment stored."""
    from distributed import LocalCluster
    from distributed.security import Security
    mine = Security.temporary()
    env = tls_files(tmp_path, mine)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tls://",
                      security=mine, dashboard_address=None) as cluster:
        got = resel_cli(*SWEEP, "--no-store", "--json", "--dask", cluster.scheduler_address, env=env)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["results"] == [{**r, "run_ids": []} for r in serial]
    # the other user's scheduler, TLS with their own certificate, on an address the user gives
    squat = textwrap.dedent("""
        import sys, time
        from distributed import Scheduler
        from distributed.security import Security
        import asyncio
        async def main():
            async with Scheduler(host="127.0.0.1", port=0, protocol="tls://", security=Security.temporary(),
                                 dashboard_address=None) as s:
                print(s.address, flush=True)
                await asyncio.sleep(float(sys.argv[1]))
        asyncio.run(main())
    """)
    pyenv = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
             **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}}
    squatter = subprocess.Popen([*as_nobody(), sys.executable, "-c", squat, "60"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=pyenv, cwd="/")
    try:
        address = squatter.stdout.readline().strip()
        assert address.startswith("tls://"), address
        db = tmp_path / "resel.db"
        got = resel_cli(*SWEEP, "--db", str(db), "--dask", address, env=env)
        assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
        assert f"cannot reach the Dask scheduler at {address}" in got.stderr, got.stderr
        assert experiments(db) == 0
    finally:
        squatter.terminate()
        squatter.communicate(timeout=30)


def test_dask_tls_settings_must_be_private(tmp_path):
    from resel.sim.dask_access import tls_security
    from distributed.security import Security
    env = tls_files(tmp_path, Security.temporary())
    names = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": "distributed.comm.tls.ca-file",
             "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": "distributed.comm.tls.client.cert",
             "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": "distributed.comm.tls.client.key"}
    import dask
    settings = {names[k]: v for k, v in env.items() if k in names}
    key = Path(settings["distributed.comm.tls.client.key"])
    ca = Path(settings["distributed.comm.tls.ca-file"])
    with dask.config.set(settings):
        assert tls_security().require_encryption
        key.chmod(0o640)
        with pytest.raises(ReselError, match=rf"the client key {key} can be read or written by other users "
                                             rf"\(mode 0640\).*chmod 600"):
            tls_security()
        key.chmod(0o600)
        ca.chmod(0o664)
        with pytest.raises(ReselError, match=rf"the CA file {ca} is writable by its group \(mode 0664\), who could "
                                             "make resel trust a scheduler of theirs"):
            tls_security()


def test_dask_tls_address_without_settings_is_one_clear_error(tmp_path):
    """Seen 8: ``--dask tls://127.0.0.1:1`` was a traceback (TLS expects a ssl_context)."""
    db = tmp_path / "resel.db"
    got = resel_cli("simulate", "--sizes", "4", "--repeat", "1", "--db", str(db), "--dask", "tls://127.0.0.1:1")
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert "Dask's TLS settings distributed.comm.tls.ca-file" in got.stderr
    assert not db.exists() or experiments(db) == 0


@pytest.mark.parametrize("address", ["ucx://127.0.0.1:1", "ws://127.0.0.1:1", "inproc://x", "tls://", "local:0"])
def test_dask_ucx_and_other_addresses_are_one_clear_error(address):
    """Seen 8: ``--dask ucx://…`` was a traceback."""
    got = resel_cli("simulate", "--sizes", "4", "--repeat", "1", "--no-store", "--dask", address)
    assert got.returncode == 1 and "Traceback" not in got.stderr, got.stderr
    assert f"--dask {address}:" in got.stderr


def test_a_failed_dask_leaves_no_empty_experiment(tmp_path):
    """Seen 8: a sweep that could not reach its cluster left an experiment row with no run."""
    from distributed.security import Security
    env = tls_files(tmp_path, Security.temporary())
    db = tmp_path / "resel.db"
    got = resel_cli("simulate", "--sizes", "4", "--repeat", "1", "--db", str(db), "--dask", "tls://127.0.0.1:1",
                    env=env)
    assert got.returncode == 1 and "cannot reach the Dask scheduler at tls://127.0.0.1:1" in got.stderr, got.stderr
    got = resel_cli("simulate", "--sizes", "4", "--repeat", "1", "--db", str(db), "--dask", "tcp://127.0.0.1:1",
                    "--dask-insecure", env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"})
    assert got.returncode == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in got.stderr
    assert "authenticates nobody" in got.stderr               # the warning --dask-insecure prints
    assert experiments(db) == 0


def test_dask_addresses_are_parsed_before_any_work():
    assert parse_target("local") == DaskTarget("local")
    assert parse_target("local:3") == DaskTarget("local", workers=3)
    assert parse_target("tls://login1:8786") == DaskTarget("tls", address="tls://login1:8786")
    assert parse_target("login1:8786", insecure=True) == DaskTarget("tcp", address="tcp://login1:8786")
    assert parse_target("TCP://[::1]:8786", insecure=True).address == "tcp://[::1]:8786"
    for bad in ("local:x", "local:2000", "tcp://h:0", "tcp://h:65536", "ucx://h:1", "h", "tls://h"):
        with pytest.raises(ReselError, match=f"--dask {bad}"):
            parse_target(bad, insecure=True)
