"""The live testbed itself (scripts/testbed.sh): each daemon answers the way the backends need."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from conftest import TESTBED_SCRIPT
from testbed import Testbed, load, parse


def sinfo_json(testbed: Testbed, cluster: str) -> dict:
    out = subprocess.run(["sinfo", "--json"], env=testbed.slurm_env(cluster), check=True,
                         capture_output=True, text=True, timeout=30).stdout
    return json.loads(out)


def test_env_file_round_trip(tmp_path, testbed):
    text = (tmp_path / "x.env")
    text.write_text("# comment\nRESEL_TB=/r\n\nTB_SSH_PORT=22\n")
    assert parse(text.read_text()) == {"RESEL_TB": "/r", "TB_SSH_PORT": "22"}
    assert load(tmp_path / "absent.env") is None
    assert load(f"{testbed.root}/testbed.env") == testbed
    assert isinstance(testbed.ssh_port, int)


def test_both_clusters_answer_sinfo_json(testbed):
    for cluster, name, cpus in (("A", testbed.cluster_a, 8), ("B", testbed.cluster_b, 4)):
        info = sinfo_json(testbed, cluster)
        assert info["meta"]["plugin"]["type"] == "openapi/v0.0.38"
        nodes = {n["name"]: n for n in info["nodes"]}
        assert set(nodes) == {testbed.host}, name
        assert nodes[testbed.host]["cpus"] == cpus, name
        assert set(nodes[testbed.host]["partitions"]) == ({"debug", "short"} if cluster == "A" else {"debug"}), name


def test_ssh_logs_in_as_the_testbed_user(testbed):
    for host in ("tb-ssh", "tb-via-jump"):
        out = subprocess.run(["ssh", "-F", testbed.ssh_config, host, "id -un"], check=True,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == testbed.user, host


def test_slurmrestd_answers_with_jwt(testbed, rest_token):
    headers = {"X-SLURM-USER-NAME": testbed.rest_user, "X-SLURM-USER-TOKEN": rest_token}
    r = requests.get(f"{testbed.rest_url}/slurm/v0.0.38/nodes", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert not body.get("errors")
    assert [n["name"] for n in body["nodes"]] == [testbed.host]
    # without the token, slurmrestd refuses
    r = requests.get(f"{testbed.rest_url}/slurm/v0.0.38/nodes", timeout=10)
    assert r.status_code in (401, 403)


def test_the_rest_tokens_are_private(testbed):
    """Whoever reads a token acts as its user on the cluster; resel refuses a token file others
    can read (resel/trust.py), so the testbed's own must be its owner's alone."""
    for path in filter(None, (testbed.rest_token_file, testbed.rest_token_file_c)):
        st = os.stat(path)
        assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600, (path, oct(st.st_mode))


def test_restart_ctld_returns_with_the_cluster_answering(testbed):
    out = subprocess.run(["bash", str(TESTBED_SCRIPT), "restart-ctld", "A"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    info = sinfo_json(testbed, "A")
    assert info["nodes"][0]["cpus"] == 8


def test_accounting_on_tbb_only_with_a_private_database(testbed):
    """tbb's sacctmgr knows the cluster, the account and both users; tba keeps no accounting.
    slurmdbd.conf (the database password) is 0600 and slurm's; the password is long and random,
    in no other testbed file; MariaDB listens on 127.0.0.1 only, on the testbed's own port."""
    assert testbed.accounting_b, ("the testbed's env file says tbb has no accounting: scripts/testbed.sh up "
                                  "starts MariaDB and slurmdbd; see its output")
    env_b = testbed.slurm_env("B")
    assocs = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"cluster={testbed.cluster_b}",
                             f"account={testbed.account_b}", "format=user,qos"], env=env_b, check=True,
                            capture_output=True, text=True, timeout=30).stdout.split()
    assert {f"root|normal,{testbed.limit_qos}", f"{testbed.user}|normal,{testbed.limit_qos}"} <= set(assocs)
    a = subprocess.run(["sacctmgr", "-n", "-P", "show", "assoc"], env=testbed.slurm_env("A"),
                       capture_output=True, text=True, timeout=30)
    assert "accounting_storage/slurmdbd" in a.stdout + a.stderr          # tba: "not ... slurmdbd"
    conf = Path(testbed.slurm_conf_b).parent / "slurmdbd.conf"
    st = conf.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert pwd.getpwuid(st.st_uid).pw_name == "slurm"
    [password] = [ln.split("=", 1)[1] for ln in conf.read_text().splitlines() if ln.startswith("StoragePass=")]
    assert len(password) >= 24 and password.isalnum()
    for f in Path(testbed.root).rglob("*"):
        if f.is_file() and not f.is_symlink() and f != conf and "mariadb" not in f.parts[-2] \
                and f.stat().st_size < 1_000_000:
            assert password not in f.read_text(errors="replace"), f
    listen = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    db = [ln.split()[3] for ln in listen.splitlines() if f":{testbed.accounting_db_port} " in ln]
    assert db == [f"127.0.0.1:{testbed.accounting_db_port}"] and "mariadbd" in listen, db


# ---------------------------------------------------------------- the testbed's own folder
#
# $RESEL_TB is a fixed, predictable path (by default /tmp/resel-testbed) where root writes the
# configuration its daemons obey. Whatever another user made or planted on that path is refused
# before anything is installed, written or started; these tests never start a daemon. Each
# plants under a private root-owned folder in /tmp, made by the test, with the user `nobody`
# as the other user.

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="scripts/testbed.sh runs as root")


def _testbed_at(tb: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(TESTBED_SCRIPT), *args], env={**os.environ, "RESEL_TB": str(tb)},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def _snapshot(base: Path) -> dict[str, tuple]:
    """Every path under ``base`` with its type, owner, mode, size, mtime and link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p)] = (stat.S_IFMT(st.st_mode), st.st_uid, stat.S_IMODE(st.st_mode), st.st_size,
                           st.st_mtime_ns, os.readlink(p) if p.is_symlink() else None)
    return out


@pytest.fixture
def plant_base():
    """A private root-owned 0700 folder in /tmp, removed afterwards (symlinks are not followed)."""
    base = Path(tempfile.mkdtemp(prefix="resel-tb-plant-", dir="/tmp"))
    try:
        yield base
    finally:
        shutil.rmtree(base)


def _plant(base: Path, kind: str) -> tuple[Path, str]:
    """Plant ``kind`` under ``base``; returns the RESEL_TB to try and the reason expected."""
    nobody = pwd.getpwnam("nobody")
    tb = base / "tb"
    if kind == "folder of another user":
        tb.mkdir()
        os.chown(tb, nobody.pw_uid, nobody.pw_gid)
        return tb, "is owned by nobody, not root"
    if kind == "group-writable folder":
        tb.mkdir()
        tb.chmod(0o775)
        return tb, "is writable by group or others (mode 775)"
    if kind == "symlink of another user":
        target = base / "target"
        target.mkdir()
        os.chown(target, nobody.pw_uid, nobody.pw_gid)
        tb.symlink_to(target)
        os.lchown(tb, nobody.pw_uid, nobody.pw_gid)
        return tb, f"is a symbolic link (to {target})"
    if kind == "parent of another user":
        parent = base / "made-by-nobody"
        parent.mkdir()
        os.chown(parent, nobody.pw_uid, nobody.pw_gid)
        return parent / "tb", f"{parent} is owned by nobody, not root"
    if kind == "parent writable by all, not sticky":
        parent = base / "open"
        parent.mkdir()
        parent.chmod(0o777)
        return parent / "tb", f"{parent} is writable by group or others (mode 777)"
    raise AssertionError(kind)


PLANTS = ["folder of another user", "group-writable folder", "symlink of another user",
          "parent of another user", "parent writable by all, not sticky"]


@needs_root
@pytest.mark.parametrize("kind", PLANTS)
def test_up_refuses_a_planted_testbed_folder_and_touches_nothing(plant_base, kind):
    tb, reason = _plant(plant_base, kind)
    before = _snapshot(plant_base)
    out = _testbed_at(tb, "up")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.startswith(f"testbed.sh: refusing the testbed folder {tb}: "), out.stderr
    assert reason in out.stderr
    assert "remove it (as root) or choose another RESEL_TB" in out.stderr
    assert "Traceback" not in out.stderr and "failed at line" not in out.stderr
    # refused before anything was installed, written or started
    assert out.stdout == ""
    assert _snapshot(plant_base) == before


@needs_root
@pytest.mark.parametrize("kind", PLANTS)
def test_down_and_status_refuse_a_planted_testbed_folder(plant_base, kind):
    tb, reason = _plant(plant_base, kind)
    before = _snapshot(plant_base)
    for cmd in ("down", "status", "restart-ctld"):
        out = _testbed_at(tb, *([cmd, "A"] if cmd == "restart-ctld" else [cmd]))
        assert out.returncode == 1, (cmd, out.stdout + out.stderr)
        assert reason in out.stderr, (cmd, out.stderr)
    assert _snapshot(plant_base) == before


@needs_root
def test_down_in_a_folder_of_another_user_kills_nothing(plant_base):
    """A pid file planted there names one of our processes; one whose command line names a path
    in $RESEL_TB counts as the testbed's (that is how its sshd is recognised), so before the
    check `down` killed it."""
    tb, _ = _plant(plant_base, "folder of another user")
    # "; :" keeps bash from exec'ing sleep, so the command line keeps naming the path
    victim = subprocess.Popen(["bash", "-c", "sleep 300; :", f"{tb}/sshd"])
    try:
        (tb / "run").mkdir()
        (tb / "run" / "sshd.pid").write_text(f"{victim.pid}\n")
        before = _snapshot(plant_base)
        out = _testbed_at(tb, "down")
        assert out.returncode == 1 and "is owned by nobody, not root" in out.stderr, out.stderr
        assert victim.poll() is None
        assert _snapshot(plant_base) == before
    finally:
        victim.kill()
        victim.wait()


@needs_root
def test_up_refuses_a_symlink_in_place_of_its_own_folders(plant_base):
    """Only root can plant inside a safe $RESEL_TB, but a daemon would follow a symlink left in
    place of its log folder: `up` refuses it before any daemon starts, and writes nothing there."""
    tb = plant_base / "tb"
    tb.mkdir(mode=0o755)
    elsewhere = plant_base / "elsewhere"
    elsewhere.mkdir()
    (tb / "log").symlink_to(elsewhere)
    out = _testbed_at(tb, "up")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"refusing the testbed folder {tb}: {tb}/log is a symbolic link" in out.stderr
    assert "starting" not in out.stdout
    assert list(elsewhere.iterdir()) == []
    assert (tb / "log").is_symlink()
