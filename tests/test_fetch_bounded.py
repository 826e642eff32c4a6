"""A fetch reads no more of an output than the agent recorded (docs/data.md, "Home").

The coordinator fetched a site's file to its end, whatever size the agent's result gave it,
and compared only then: a file on the site far larger than its record (a process the task left
behind still appending to it, or a site that lies) was copied whole into the results folder,
and when that filled the disk the coordinator stopped the whole run ("the results folder is
full") although the fault was one task's file. Now a file is refused as soon as it passes its
recorded size: that attempt's outputs are not delivered (it runs again), nothing else stops.

Real sites of the testbed: tba's local filesystem and tbb over SFTP; the results folder is a
small tmpfs (root only), so the old behaviour shows as a full disk.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import secrets
import subprocess

import pytest

from live_helpers import sites_toml
from resel.backends.connect import open_site
from resel.config import load_sites
from resel.live.staging import OutputsNotDelivered, SiteData

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the results folder")


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize("site_name", ["tba", "tbb"])
def test_an_output_larger_on_the_site_than_its_record_is_refused_without_filling_home(tmp_path, testbed, results,
                                                                                      site_name):
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    site = next(s for s in load_sites(sites_path) if s.name == site_name)
    psite = open_site(site)
    run_key = f"r9-{secrets.token_hex(3)}"
    recorded = b"0123456789"
    remote = psite.output_path(run_key, 0, "t0-a1", 0, "md.log")
    try:
        psite.transport.makedirs(posixpath.dirname(remote))
        psite.transport.write_file(remote, recorded + b"x" * 8_000_000)    # 8 MB where 10 bytes were recorded
        outputs = [{"name": "md.log", "size": len(recorded), "sha256": hashlib.sha256(recorded).hexdigest()}]
        dest = results / "1" / "task-0"
        with pytest.raises(OutputsNotDelivered):
            SiteData(psite, run_key).fetch(0, 0, 1, outputs, str(dest))
        assert [p.name for p in dest.iterdir()] == []          # no partial file left, nothing under its name
    finally:
        psite.transport.remove_tree(psite.run_dir(run_key))
        psite.transport.close()


def test_an_attempt_not_delivered_leaves_none_of_its_outputs_home(tmp_path, testbed):
    """Attempt 1 lists md.log and traj.xtc; traj.xtc on the site is not what its agent recorded,
    so the attempt is not delivered and runs again. md.log had already been renamed into the
    task's results folder and stayed there: attempt 2 writes only out.gro (its outputs are
    optional globs), and the task's folder at home showed attempt 1's md.log beside it — a file
    of an attempt resel counted as failed, in no record, which `resel results` does not flag."""
    sites_path = tmp_path / "sites.toml"
    sites_path.write_text(sites_toml(testbed), encoding="utf-8")
    site = next(s for s in load_sites(sites_path) if s.name == "tba")
    psite = open_site(site)
    run_key = f"r9-{secrets.token_hex(3)}"
    results = tmp_path / "results"
    dest = results / "1" / "task-0"

    def put(key, index, name, data):
        remote = psite.output_path(run_key, 0, key, index, name)
        psite.transport.makedirs(posixpath.dirname(remote))
        psite.transport.write_file(remote, data)

    def rec(name, data):
        return {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        put("t0-a1", 0, "md.log", b"log of attempt 1")
        put("t0-a1", 1, "traj.xtc", b"not the recorded bytes")
        with pytest.raises(OutputsNotDelivered):
            SiteData(psite, run_key).fetch(0, 0, 1, [rec("md.log", b"log of attempt 1"),
                                                     rec("traj.xtc", b"recorded bytes")], str(dest))
        put("t0-a2", 0, "out.gro", b"gro of attempt 2")
        got = SiteData(psite, run_key).fetch(0, 0, 2, [rec("out.gro", b"gro of attempt 2")], str(dest))
        assert [f.name for f in got] == ["out.gro"]
        assert sorted(p.name for p in dest.iterdir()) == ["out.gro"]
    finally:
        psite.transport.remove_tree(psite.run_dir(run_key))
        psite.transport.close()
