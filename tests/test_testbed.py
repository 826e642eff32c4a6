"""The live testbed itself (scripts/testbed.sh): each daemon answers the way the backends need."""

from __future__ import annotations

import json
import subprocess

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


def test_restart_ctld_returns_with_the_cluster_answering(testbed):
    out = subprocess.run(["bash", str(TESTBED_SCRIPT), "restart-ctld", "A"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    info = sinfo_json(testbed, "A")
    assert info["nodes"][0]["cpus"] == 8
