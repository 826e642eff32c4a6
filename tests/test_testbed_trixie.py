"""The Debian 13 part of the testbed itself (scripts/testbed-trixie.sh): its env keys, its daemons,
the isolation of its access point, and that `down` stops only what the script started."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import requests

from conftest import REPO
from testbed import load
from trixie_helpers import ap, trixie  # noqa: F401

SCRIPT = REPO / "scripts" / "testbed-trixie.sh"

OLD_ENV = """RESEL_TB=/r
TB_SLURM_CONF_A=/r/tba/slurm.conf
TB_SLURM_CONF_B=/r/tbb/slurm.conf
TB_CLUSTER_A=tba
TB_CLUSTER_B=tbb
TB_HOST=vm
TB_USER=reseltb
TB_SSH_HOST=127.0.0.1
TB_SSH_PORT=2222
TB_SSH_KEY=/r/ssh/k
TB_KNOWN_HOSTS=/r/ssh/known_hosts
TB_SSH_CONFIG=/r/ssh/config
TB_REST_URL=http://127.0.0.1:6820
TB_REST_USER=reseltb
TB_REST_TOKEN_FILE=/r/rest/token
TB_WORK_A=/r/work-a
TB_WORK_B=/home/reseltb/resel-work
"""


def test_env_files_with_and_without_the_trixie_keys_load(tmp_path):
    old = tmp_path / "old.env"
    old.write_text(OLD_ENV)
    tb = load(old)
    assert not tb.has_trixie and tb.trixie_ssh_port is None and tb.condor_collector is None
    new = tmp_path / "new.env"
    new.write_text(OLD_ENV + "TB_TRIXIE_ROOT=/c/trixie\nTB_TRIXIE_SSH_PORT=2223\nTB_CONDOR_VERSION=23.9.6\n")
    tb = load(new)
    assert tb.has_trixie and tb.trixie_ssh_port == 2223 and tb.condor_version == "23.9.6" and tb.work_c is None
    bad = tmp_path / "bad.env"
    bad.write_text(OLD_ENV + "TB_TRIXIE_SSH_PORT=twenty\n")
    try:
        load(bad)
    except ValueError as e:
        assert "TB_TRIXIE_SSH_PORT='twenty' is not a number" in str(e)
    else:
        raise AssertionError("a bad port loaded")


def _root_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/root")
    except OSError:
        return None


def _environ(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_every_daemon_runs_inside_the_root_with_the_mark(trixie):
    mark = f"RESEL_TB_OWNER={trixie.trixie_dir}"
    inside = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and _root_of(int(p.name)) == trixie.trixie_root:
            inside[int(p.name)] = (p / "comm").read_text().strip()
    names = set(inside.values())
    assert {"munged", "slurmctld", "slurmd", "slurmrestd", "sshd", "condor_master", "condor_schedd",
            "condor_startd", "condor_collecto", "condor_negotiat"} <= names, names
    for pid, name in inside.items():
        if name in ("munged", "slurmctld", "slurmd", "slurmrestd", "condor_master", "condor_schedd"):
            assert mark in _environ(pid), (pid, name)
    # and nothing of it carries the Slurm 22.05 testbed's own mark (its `down` must not see them)
    assert all(f"RESEL_TB_OWNER={trixie.root}" not in _environ(pid) for pid in inside)


def test_the_access_point_is_private_and_for_reselap_only(trixie):
    assert ap(trixie, "id -un").stdout.strip() == trixie.trixie_user
    assert ap(trixie, "stat -c %a ~").stdout.strip() == "700"      # jobs (as nobody) cannot read it
    refused = subprocess.run(["ssh", "-F", trixie.trixie_ssh_config, "-o", "User=root", "tb-ap", "true"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    # the root's Slurm is 24.11 and the access point needs no SLURM_CONF; 22.05's files are not there
    assert ap(trixie, "sinfo --version").stdout.split()[-1] == trixie.slurm_version_c
    assert not ap(trixie, f"test -e {trixie.slurm_conf_a}", check=False).returncode == 0


def test_slurmrestd_serves_the_data_parser_versions_and_wants_a_token(trixie):
    token = Path(trixie.rest_token_file_c).read_text().strip()
    head = {"X-SLURM-USER-NAME": trixie.rest_user_c, "X-SLURM-USER-TOKEN": token}
    served = {v: requests.get(f"{trixie.rest_url_c}/slurm/{v}/ping", headers=head, timeout=10).status_code
              for v in ("v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42")}
    assert served == {"v0.0.38": 404, "v0.0.39": 404, "v0.0.40": 200, "v0.0.41": 200, "v0.0.42": 200}
    assert requests.get(f"{trixie.rest_url_c}/slurm/v0.0.42/jobs", timeout=10).status_code == 401


def test_status_names_every_daemon_running(trixie):
    out = subprocess.run(["bash", str(SCRIPT), "status"], env={**os.environ, "RESEL_TB": str(Path(trixie.trixie_dir).parent)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in ("munged", "slurmctld tbc", "slurmd tbc", "slurmrestd tbc", "condor_master", "sshd (tb-ap)"):
        line = next(line for line in out.stdout.splitlines() if line.strip().startswith(name))
        assert "running (pid" in line, out.stdout
    assert "cluster tbc: debug*" in out.stdout and "pool: slot1@" in out.stdout


def _sleeper(env_mark: str | None) -> subprocess.Popen:
    env = {"PATH": os.environ["PATH"]}
    if env_mark:
        env["RESEL_TB_OWNER"] = env_mark
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)


def test_down_stops_only_processes_with_its_own_mark(tmp_path):
    """`down` of a Debian 13 part that has no root (here: an empty cache) still sweeps processes
    carrying its mark, RESEL_TB_OWNER=$RESEL_TB/trixie, and leaves alone the Slurm 22.05
    testbed's mark (RESEL_TB_OWNER=$RESEL_TB), unmarked processes, and processes with its mark
    in another PID namespace."""
    tb = tmp_path / "tb"
    ours = _sleeper(f"{tb}/trixie")
    main = _sleeper(str(tb))
    other = _sleeper(None)
    # the same mark in another PID namespace: a testbed of the same folder names in a container
    # or in fresh-check.sh's namespaces — visible here, never ours to stop
    elsewhere = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child",
                                  "env", f"RESEL_TB_OWNER={tb}/trixie", "sleep", "300"],
                                 env={"PATH": os.environ["PATH"]}, start_new_session=True)
    try:
        env = {**os.environ, "RESEL_TB": str(tb), "RESEL_TB_CACHE": str(tmp_path / "cache")}
        (tb / "trixie").mkdir(parents=True)
        out = subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert ours.wait(timeout=10) is not None
        time.sleep(0.2)
        assert main.poll() is None and other.poll() is None, out.stdout
        assert elsewhere.poll() is None, out.stdout
        inner = subprocess.run(["pgrep", "-P", str(elsewhere.pid)], capture_output=True, text=True).stdout.split()
        assert inner and all(f"process {pid} " not in out.stdout for pid in inner), out.stdout
        assert f"stopping leftover process {ours.pid}" in out.stdout
    finally:
        for p in (ours, main, other, elsewhere):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_restart_schedd_refuses_a_testbed_that_is_down(tmp_path):
    """`restart-schedd` (the live HTCondor fault tests' schedd restart) on a testbed folder with
    no env file: refused with the reason, nothing started (no condor_master may be resurrected
    without the rest of the testbed)."""
    out = subprocess.run(["bash", str(SCRIPT), "restart-schedd"], env={**os.environ, "RESEL_TB": str(tmp_path)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "the testbed is not up" in out.stderr, out.stderr
    assert not (tmp_path / "trixie").exists()
