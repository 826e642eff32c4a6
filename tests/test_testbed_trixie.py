"""The Debian parts of the testbed themselves (scripts/testbed-trixie.sh; scripts/testbed-sid.sh runs
it for Debian sid): their env keys, their daemons, the isolation of their access points, and that
`down` stops only what the script started — the live ones once per root (the fixture ``root``)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import REPO
from testbed import ROOT_FIELDS, load, root_key
from trixie_helpers import ap, release, root  # noqa: F401

SCRIPT = REPO / "scripts" / "testbed-trixie.sh"


def script_env(tb_dir, suite: str = "trixie", **more) -> dict[str, str]:
    return {**os.environ, "RESEL_TB": str(tb_dir), "RESEL_TB_SUITE": suite, **more}


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


SID_ENV = "".join(f"{root_key('sid', name)}={value}\n" for name, value in {
    "trixie_root": "/c/sid", "trixie_dir": "/r/sid", "trixie_user": "reselap", "trixie_ssh_port": "2224",
    "trixie_ssh_key": "/r/sid/ssh/k", "trixie_known_hosts": "/r/sid/ssh/known_hosts",
    "trixie_ssh_config": "/r/sid/ssh/config", "cluster_c": "tbd", "slurm_conf_c": "/etc/slurm/slurm.conf",
    "slurm_version_c": "26.05.5", "rest_url_c": "http://127.0.0.1:6822", "rest_user_c": "reselap",
    "rest_token_file_c": "/r/sid/rest/token", "work_c": "/home/reselap/resel-work",
    "work_c_host": "/c/sid/home/reselap/resel-work", "condor_collector": "127.0.0.1:9619",
    "condor_version": "25.14.1", "condor_token_dir": "/r/sid/condor-tokens"}.items())


def test_the_sid_keys_load_as_a_view_of_the_testbed(tmp_path):
    env = tmp_path / "sid.env"
    env.write_text(OLD_ENV + "TB_TRIXIE_ROOT=/c/trixie\nTB_REST_URL_C=http://127.0.0.1:6821\n" + SID_ENV)
    tb = load(env)
    sid = tb.debian_root("sid")
    assert tb.debian_root("trixie") is tb and tb.rest_url_c == "http://127.0.0.1:6821"
    assert (sid.debian_suite, sid.trixie_root, sid.trixie_ssh_port, sid.cluster_c, sid.rest_url_c, sid.work_c_host) == (
        "sid", "/c/sid", 2224, "tbd", "http://127.0.0.1:6822", "/c/sid/home/reselap/resel-work")
    assert (sid.cluster_a, sid.ssh_port) == ("tba", 2222)              # the rest of the testbed, the same
    assert sid.debian_root("sid") is None and sid.debian_root("trixie") is None
    # the sid part alone (RESEL_TB_TRIXIE=0), and no sid part
    env.write_text(OLD_ENV + SID_ENV)
    assert load(env).debian_root("trixie") is None and load(env).debian_root("sid").condor_version == "25.14.1"
    env.write_text(OLD_ENV)
    assert load(env).debian_root("sid") is None
    # a sid part without one of its keys, or with a port that is not a number: said, by key
    env.write_text(OLD_ENV + SID_ENV.replace("TB_SID_WORK_HOST=", "TB_SID_WORK_HOSTS="))
    with pytest.raises(ValueError, match="lacks TB_SID_WORK_HOST$"):
        load(env)
    env.write_text(OLD_ENV + SID_ENV.replace("TB_SID_SSH_PORT=2224", "TB_SID_SSH_PORT=x"))
    with pytest.raises(ValueError, match="TB_SID_SSH_PORT='x' is not a number"):
        load(env)
    with pytest.raises(ValueError, match="no Debian root 'forky'"):
        tb.debian_root("forky")


@pytest.mark.parametrize("suite", ["trixie", "sid"])
def test_the_script_writes_the_keys_tests_read(suite):
    """The env file's keys, by the script's own env_key over the values write_env lists, are
    root_key's for every root field (the script in bash, tests/testbed.py in Python)."""
    text = SCRIPT.read_text()
    func = text[text.index("env_key() {"):]
    func = func[:func.index("\n}\n") + 3]
    body = text[text.index('done >"$ENV_FILE.new" <<EOF\n'):]
    whats = [line.split()[0] for line in body.split("\n")[1:body.split("\n").index("EOF")]]
    out = subprocess.run(["bash", "-c", func + 'for w in "$@"; do env_key "$w"; done', "-", *whats],
                         env={"SUITE": suite, "PATH": os.environ["PATH"]}, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [root_key(suite, name) for name in ROOT_FIELDS]


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


def test_every_daemon_runs_inside_the_root_with_the_mark(root):
    mark = f"RESEL_TB_OWNER={root.trixie_dir}"
    inside = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and _root_of(int(p.name)) == root.trixie_root:
            inside[int(p.name)] = (p / "comm").read_text().strip()
    names = set(inside.values())
    assert {"munged", "slurmctld", "slurmd", "slurmrestd", "sshd", "condor_master", "condor_schedd",
            "condor_startd", "condor_collecto", "condor_negotiat"} <= names, names
    for pid, name in inside.items():
        if name in ("munged", "slurmctld", "slurmd", "slurmrestd", "condor_master", "condor_schedd"):
            assert mark in _environ(pid), (pid, name)
    # and nothing of it carries the Slurm 22.05 testbed's own mark (its `down` must not see them)
    assert all(f"RESEL_TB_OWNER={root.root}" not in _environ(pid) for pid in inside)


def test_the_access_point_is_private_and_for_reselap_only(root):
    assert ap(root, "id -un").stdout.strip() == root.trixie_user
    assert ap(root, "stat -c %a ~").stdout.strip() == "700"      # jobs (as nobody) cannot read it
    refused = subprocess.run(["ssh", "-F", root.trixie_ssh_config, "-o", "User=root", "tb-ap", "true"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    # the root's Slurm is its own (24.11, 26.05) and the access point needs no SLURM_CONF; 22.05's
    # files are not there
    assert ap(root, "sinfo --version").stdout.split()[-1] == root.slurm_version_c
    assert not ap(root, f"test -e {root.slurm_conf_a}", check=False).returncode == 0


def test_slurmrestd_serves_the_data_parser_versions_and_wants_a_token(root):
    token = Path(root.rest_token_file_c).read_text().strip()
    head = {"X-SLURM-USER-NAME": root.rest_user_c, "X-SLURM-USER-TOKEN": token}
    versions = [f"v0.0.{n}" for n in range(38, 47)]
    served = {v: requests.get(f"{root.rest_url_c}/slurm/{v}/ping", headers=head, timeout=10).status_code
              for v in versions}
    assert served == {v: 200 if v in release(root).rest else 404 for v in versions}
    assert requests.get(f"{root.rest_url_c}/slurm/{release(root).rest[-1]}/jobs", timeout=10).status_code == 401


def test_status_names_every_daemon_running(root):
    out = subprocess.run(["bash", str(SCRIPT), "status"], env=script_env(Path(root.trixie_dir).parent, root.debian_suite),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    c = root.cluster_c
    for name in ("munged", f"slurmctld {c}", f"slurmd {c}", f"slurmrestd {c}", "condor_master", "sshd (tb-ap)"):
        line = next(line for line in out.stdout.splitlines() if line.strip().startswith(name))
        assert "running (pid" in line, out.stdout
    assert f"cluster {c}: debug*" in out.stdout and "pool: slot1@" in out.stdout


def _sleeper(env_mark: str | None) -> subprocess.Popen:
    env = {"PATH": os.environ["PATH"]}
    if env_mark:
        env["RESEL_TB_OWNER"] = env_mark
    return subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)


@pytest.mark.parametrize("suite, other_suite", [("trixie", "sid"), ("sid", "trixie")])
def test_down_stops_only_processes_with_its_own_mark(tmp_path, suite, other_suite):
    """`down` of a Debian part that has no root (here: an empty cache) still sweeps processes
    carrying its mark, RESEL_TB_OWNER=$RESEL_TB/SUITE, and leaves alone the other Debian part's
    mark, the Slurm 22.05 testbed's (RESEL_TB_OWNER=$RESEL_TB), unmarked processes, and
    processes with its mark in another PID namespace."""
    tb = tmp_path / "tb"
    ours = _sleeper(f"{tb}/{suite}")
    main = _sleeper(str(tb))
    other = _sleeper(None)
    sibling = _sleeper(f"{tb}/{other_suite}")
    # the same mark in another PID namespace: a testbed of the same folder names in a container
    # or in fresh-check.sh's namespaces — visible here, never ours to stop
    elsewhere = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child",
                                  "env", f"RESEL_TB_OWNER={tb}/{suite}", "sleep", "300"],
                                 env={"PATH": os.environ["PATH"]}, start_new_session=True)
    try:
        (tb / suite).mkdir(parents=True)
        out = subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=60,
                             env=script_env(tb, suite, RESEL_TB_CACHE=str(tmp_path / "cache")))
        assert out.returncode == 0, out.stderr
        assert ours.wait(timeout=10) is not None
        time.sleep(0.2)     # kept: the test is that the others are still alive a moment after `down`
        assert main.poll() is None and other.poll() is None and sibling.poll() is None, out.stdout
        assert elsewhere.poll() is None, out.stdout
        inner = subprocess.run(["pgrep", "-P", str(elsewhere.pid)], capture_output=True, text=True).stdout.split()
        assert inner and all(f"process {pid} " not in out.stdout for pid in inner), out.stdout
        assert f"testbed-{suite}: " in out.stdout and f"stopping leftover process {ours.pid}" in out.stdout
    finally:
        for p in (ours, main, other, sibling, elsewhere):
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("suite", ["trixie", "sid"])
def test_restart_schedd_refuses_a_testbed_that_is_down(tmp_path, suite):
    """`restart-schedd` (the live HTCondor fault tests' schedd restart) on a testbed folder with
    no env file: refused with the reason, nothing started (no condor_master may be resurrected
    without the rest of the testbed)."""
    out = subprocess.run(["bash", str(SCRIPT), "restart-schedd"], env=script_env(tmp_path, suite),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "the testbed is not up" in out.stderr, out.stderr
    assert not (tmp_path / suite).exists()


def test_an_unknown_suite_is_refused_before_anything_is_done(tmp_path):
    out = subprocess.run(["bash", str(SCRIPT), "up"], env=script_env(tmp_path, "bookworm"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "RESEL_TB_SUITE must be trixie or sid (got 'bookworm')" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_sid_script_runs_the_same_script_for_sid(tmp_path):
    out = subprocess.run(["bash", str(REPO / "scripts" / "testbed-sid.sh"), "restart-schedd"],
                         env={**os.environ, "RESEL_TB": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and out.stderr.startswith("testbed-sid.sh: the testbed is not up"), out.stderr
