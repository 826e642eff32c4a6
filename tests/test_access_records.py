"""A live site's access as stored with a run and read back for ``--resume`` / ``status``:
the nested form stored now (transport and per-scheduler options) and the flat form runs stored
before the split, both read back into the same records the sites file gives."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from resel.config import load_sites
from resel.domain import HTCondorOptions, PBSOptions, SlurmOptions
from resel.live.stored import sites_from_json
from resel.store import to_json

DATA = Path(__file__).parent / "data"

SITES = """\
[[site]]
name = "slurm-ssh"
kind = "slurm"
cores = 8
clock = { base = 2.0 }
access = { transport = "ssh", host = "login1", user = "me", port = 2222, key = "k", workdir = "~/w", partition = "debug", account = "a1", qos = "low", sbatch_options = ["--mem=1G"], setup = ["module load x"], requeue = true, env = { SLURM_CONF = "/etc/slurm/b.conf" } }

[[site]]
name = "slurm-rest"
kind = "slurm"
cores = 8
clock = { base = 2.0 }
access = { workdir = "/w", api = "rest", rest_url = "https://h:6820", rest_user = "me", rest_token_file = "tok" }

[[site]]
name = "pbs"
kind = "pbs"
cores = 8
clock = { base = 2.0 }
access = { workdir = "/w", queue = "workq", account = "p", dialect = "torque", qsub_options = ["-l", "mem=2gb"] }

[[site]]
name = "pool"
kind = "htcondor"
cores = 8
clock = { base = 2.0 }
access = { transport = "ssh", host = "ap40", workdir = "~/w", project = "OSG-Staff", accounting_group = "g", submit_lines = { request_memory = "4GB" } }
"""


@pytest.fixture
def sites(tmp_path):
    path = tmp_path / "sites.toml"
    path.write_text(SITES, encoding="utf-8")
    return load_sites(path)


def test_the_stored_form_reads_back_equal(sites):
    stored = json.loads(to_json(sites))
    again = sites_from_json(stored)
    assert [s.access for s in again] == [s.access for s in sites]
    kinds = [type(s.access.scheduler) for s in again]
    assert kinds == [SlurmOptions, SlurmOptions, PBSOptions, HTCondorOptions]


def test_a_run_stored_before_the_split_reads_back_equal(sites):
    """tests/data/sites-stored-flat-access.json is what the code before the split stored for
    these sites (written by it, from this file's SITES loaded in /tmp, so its paths are under
    /tmp): read back, each access equals the one the sites file gives now, paths aside."""
    stored = json.loads((DATA / "sites-stored-flat-access.json").read_text(encoding="utf-8"))
    assert all("partition" in d["access"] and "scheduler" not in d["access"] for d in stored)   # the old form
    again = sites_from_json(stored)
    for old, new in zip(again, sites):
        want = new.access
        want = dataclasses.replace(want, transport=dataclasses.replace(want.transport, key=old.access.transport.key))
        if isinstance(want.scheduler, SlurmOptions):
            want = dataclasses.replace(want, scheduler=dataclasses.replace(
                want.scheduler, rest_token_file=old.access.scheduler.rest_token_file))
        assert old.access == want, new.name
    assert again[0].access.transport.key == "/tmp/k" and again[1].access.scheduler.rest_token_file == "/tmp/tok"


def test_options_of_another_kind_are_an_error_not_a_default(sites):
    slurm, _, pbs, pool = sites
    assert slurm.access.options(SlurmOptions).partition == "debug"
    assert pool.access.options(HTCondorOptions).submit_lines == {"request_memory": "4GB"}
    with pytest.raises(TypeError, match="PBSOptions, not SlurmOptions"):
        pbs.access.options(SlurmOptions)
