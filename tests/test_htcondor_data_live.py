"""Task data on the real HTCondor pool (issue 25 item 4; docs/data.md, "The HTCondor pool: no
shared filesystem"): a pilot's slot shares nothing with the access point, so its chirp wrapper
brings each task's inputs from the run's cache on the access point into a slot-local cache, and
puts each output of a done attempt to ``pN/outputs/KEY.I`` on the access point before the result.

Each test runs once per pool of the testbed (the fixture ``root``: Debian 13's HTCondor 23.9.6,
Debian sid's 25.14.1), reached over SSH as reselap like an OSG access point; pilots run as
``nobody`` in execute slots. The test plays the
coordinator with resel's own parts: it sends the inputs to ``RUN/cache/SHA256`` with the SSH
transport's ``put_file`` (0400), writes the inbox files, submits the pilot through
``PilotSite.submit_pilot`` (the shared input in ``inputs=``), and fetches every output from
``PilotSite.output_path`` with ``get_file`` checking the sha256 the agent recorded. Expected
digests are hashlib's over the bytes the test wrote.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import uuid
from pathlib import Path

import pytest
from resel.backends.htcondor.client import HTCondorCLI
from resel.backends.pilotsite import PilotSite
from resel import task_data
from resel.backends.connect import open_site
from resel.config import load_bag, load_sites
from resel.live.coordinator import Coordinator, LiveOptions
from resel.store import open_store
from resel.live.staging import SiteData
from resel.task_data import InputFile

from agent_files import keyed
from trixie_helpers import ap, ap_ssh, host_path, no_job_left_behind, pool_site, root, wait_for  # noqa: F401

RUN_KEY = "r25-da7a25"
#: the big output the slot puts through chirp (the agent hashes it, the AP copy is checked)
BIG = 120_000_000


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


pytestmark = pytest.mark.usefixtures("no_job_left_behind")


class CoordinatorParts:
    """What the coordinator does for an HTCondor site, with resel's own parts: the run's
    SiteData (inputs staged to the site's cache, outputs fetched home and checked, a delivered
    attempt's files cleaned), PilotSite (inbox files, pilots) and the SSH transport."""

    def __init__(self, tb, ssh, tmp_path):
        self.tb, self.ssh, self.tmp = tb, ssh, tmp_path
        self.workdir = f"{tb.work_c}/data-{uuid.uuid4().hex[:8]}"
        sites = tmp_path / "sites.toml"
        sites.write_text(pool_site(tb, workdir=self.workdir))
        self.site = PilotSite(load_sites(sites)[0], ssh, HTCondorCLI(ssh))
        self.data = SiteData(self.site, RUN_KEY)
        self.site.ship_agent()                       # makes the work directory (0700) first
        self.site.make_pilot_dir(RUN_KEY, 1)

    def send(self, data: bytes, name: str) -> InputFile:
        """An input into the run's cache on the access point (SiteData.stage: once per site)."""
        local = self.tmp / sha(data)
        local.write_bytes(data)
        f = InputFile(name, str(local), len(data), sha(data))
        self.data.stage([f])
        return f

    def dispatch(self, task: int, command: str, inputs=(), outputs=()) -> str:
        self.site.dispatch(RUN_KEY, 1, task, 0, command, inputs=[
            i if isinstance(i, dict) else {"name": i.name, "sha256": i.sha256, "size": i.size} for i in inputs],
            outputs=[{"glob": g, "optional": False} for g in outputs])
        return f"t{task}-a0"

    def result(self, key: str, timeout: float = 180) -> dict:
        folder = host_path(self.tb, posixpath.join(self.site.pilot_dir(RUN_KEY, 1), "results"))
        found = wait_for(lambda: keyed(folder).get(key), timeout=timeout, every=0.2)   # in a wave (protocol 6)
        assert found, f"no result {key} on the access point"
        rec = found[0]
        if rec["outcome"] == "done":
            # the wrapper puts the outputs before the result: they are there when it is
            for i, out in enumerate(rec.get("outputs", [])):
                where = self.site.output_path(RUN_KEY, 1, key, i, out["name"])
                assert host_path(self.tb, where).exists(), (key, out, where)
        return rec

    def fetch(self, task: int, rec: dict) -> dict[str, bytes]:
        """Every output home (SiteData.fetch: checked against the agent's size and sha256)."""
        dest = self.tmp / "results" / f"task-{task}"
        got = self.data.fetch(1, task, 0, rec["outputs"], str(dest))
        assert [(f.name, f.size, f.sha256) for f in got] == [(o["name"], o["size"], o["sha256"]) for o in rec["outputs"]]
        return {f.name: Path(f.path).read_bytes() for f in got}


def test_a_pilot_takes_inputs_from_the_access_point_and_puts_outputs_back(tmp_path, root, ap_ssh):
    """Inputs come into the slot's cache once (a shared one by the job's own file transfer, a
    per-task one over chirp), are checked and linked into each task's folder; a task naming an
    input the access point's cache does not have fails with the agent's reason; outputs, a big
    one among them, are on the access point under ``outputs/KEY.I`` (0600) before the result,
    and their sha256 is the agent's; after they are put the slot keeps no copy; removing a
    task's files after a verified fetch leaves its records."""
    co = CoordinatorParts(root, ap_ssh, tmp_path)
    tpr, ff = os.urandom(300_000), b"; force field\n" * 50_000
    tpr_in, ff_in = co.send(tpr, "topol.tpr"), co.send(ff, "ff.itp")
    missing = sha(b"never sent")
    t1 = co.dispatch(1, "cat topol.tpr ff.itp > md.log && mkdir traj && head -c 3000000 /dev/urandom > traj/a.xtc",
                     [tpr_in, ff_in], ["md.log", "traj/*.xtc"])
    t2 = co.dispatch(2, "touch ran", [{"name": "gone.tpr", "sha256": missing, "size": 10}], ["ran"])
    t3 = co.dispatch(3, f"head -c {BIG} /dev/urandom > big.bin", [ff_in], ["big.bin"])
    job = co.site.submit_pilot(RUN_KEY, 1, 1, 300, inputs=(co.data.cache_path(ff_in.sha256),))
    try:
        r1 = co.result(t1)
        assert r1["outcome"] == "done", r1
        assert [o["name"] for o in r1["outputs"]] == ["md.log", "traj/a.xtc"]
        got = co.fetch(1, r1)
        assert got["md.log"] == tpr + ff and len(got["traj/a.xtc"]) == 3_000_000

        r2 = co.result(t2)
        assert (r2["outcome"], r2["reason"]) == ("failed", f"input gone.tpr: not in the site's cache (sha256 {missing})")
        assert "outputs" not in r2 and not host_path(root, co.site.pilot_dir(RUN_KEY, 1)).joinpath(
            "outputs", f"{t2}.0").exists()

        r3 = co.result(t3, timeout=300)
        assert r3["outcome"] == "done" and r3["outputs"][0]["size"] == BIG, r3
        where = host_path(root, co.site.output_path(RUN_KEY, 1, t3, 0, "big.bin"))
        assert where.stat().st_mode & 0o777 == 0o600
        co.fetch(3, r3)                                    # size and sha256 the agent recorded

        # a fourth task on the same inputs: the slot's cache already holds them; what the
        # slot kept of the earlier tasks is listed from inside it
        t4 = co.dispatch(4, "cmp topol.tpr ../../../cache/$(sha256sum topol.tpr | cut -c1-64) && ls ../../../cache "
                            "&& echo -- && ls ../t3-a0 ../t1-a0/traj", [tpr_in])
        r4 = co.result(t4)
        assert r4["outcome"] == "done", r4
        cache_list, _, kept = r4["stdout_tail"].partition("--")
        assert sorted(cache_list.split()) == sorted([tpr_in.sha256, ff_in.sha256])
        # the outputs are gone from the slot; an input stays (a link to the cache: no space)
        assert kept.split() == ["../t1-a0/traj:", "../t3-a0:", "ff.itp", "stderr", "stdout"]

        # after a verified fetch the coordinator removes the task's files on the site
        co.data.clean(1, 1, 0, len(r1["outputs"]))
        pdir = host_path(root, co.site.pilot_dir(RUN_KEY, 1))
        assert sorted(p.name for p in (pdir / "outputs").iterdir()) == [f"{t3}.0"]
        assert t1 in keyed(pdir / "results")          # the agent's records stay

        ap_ssh.write_file(posixpath.join(co.site.pilot_dir(RUN_KEY, 1), "stop"), b"stop\n")
        log = pdir / "resel-chirp.log"
        assert wait_for(lambda: log.exists() and "chirp calls" in log.read_text(), timeout=90), "the wrapper's log"
    finally:
        co.site.scheduler.cancel([job])
    text = log.read_text()
    # the shared input came with the job's own transfer, never over chirp; the other once
    assert f"shared input {ff_in.sha256} ({len(ff)} bytes) in the cache, from the job's file transfer" in text
    assert text.count(f"input {tpr_in.sha256} ({len(tpr)} bytes) fetched into the cache") == 1
    assert f"input {ff_in.sha256} ({len(ff)} bytes) fetched" not in text
    assert f"input {missing}: cannot fetch ../cache/{missing}" in text


def test_a_url_input_is_fetched_by_the_pools_transfer_plugin(tmp_path, root, ap_ssh):
    """A URL input travels in the pilot's transfer_input_files: HTCondor's plugin fetches it
    (``file://``, the one scheme the testbed's pool serves without a server: the access point
    and the execute point are one machine here), the wrapper puts it into the slot's cache,
    and the agent links it into the task's folder under its name."""
    co = CoordinatorParts(root, ap_ssh, tmp_path)
    data = b"remote parameters\n" * 1000
    name = f"i25-url-{uuid.uuid4().hex[:8]}.mdp"
    ap(root, f"umask 022 && cat > /tmp/{name}", input=data.decode())       # readable by the slot's nobody
    url = f"file:///tmp/{name}?token=ignored"
    try:
        key = co.dispatch(1, "sha256sum md.mdp > md.log", [{"name": "md.mdp", "url": url}], ["md.log"])
        job = co.site.submit_pilot(RUN_KEY, 1, 1, 300, inputs=(url,))
        try:
            rec = co.result(key)
            assert rec["outcome"] == "done", rec
            assert co.fetch(1, rec)["md.log"].split()[0].decode() == sha(data)
        finally:
            co.site.scheduler.cancel([job])
    finally:
        ap(root, f"rm -f /tmp/{name}", check=False)


def test_a_bag_with_data_runs_through_the_pool(tmp_path, root):
    """A whole run (the coordinator, its staging, the pool's pilots): each task's own input and
    the shared one reach the slots (the shared one sent to the access point once, carried by
    every pilot's file transfer), a URL input through the pool's plugin; every output comes home
    with its sha256 checked, and what each task wrote is what its own inputs make. The run
    notes what becomes of its URL input on the pool."""
    count = 6
    (tmp_path / "sys").mkdir()
    own = {i: os.urandom(5000 + i) for i in range(count)}
    for i, data in own.items():
        (tmp_path / "sys" / f"{i}.dat").write_bytes(data)
    ff, mdp = os.urandom(200_000), b"nsteps = 10\n" * 100
    (tmp_path / "ff.itp").write_bytes(ff)
    name = f"i25-params-{uuid.uuid4().hex[:8]}.mdp"
    ap(root, f"umask 022 && cat > /tmp/{name}", input=mdp.decode())       # what the pool's plugin fetches
    url = f"file:///tmp/{name}"
    bag_path = tmp_path / "bag.toml"
    bag_path.write_text(
        '[bag]\nname = "data"\ncount = 6\n'
        'command = "mkdir -p out; cat sys.dat ff.itp params.mdp | sha256sum | cut -c1-64 > md.log; echo $RESEL_TASK > out/n.txt"\n'
        f'inputs = [{{ path = "sys/{{index}}.dat", as = "sys.dat" }}, "ff.itp", {{ path = "{url}", as = "params.mdp" }}]\n'
        'outputs = ["md.log", "out/*.txt"]\n[bag.profile]\ninstructions = 4e9\n')
    sites_path = tmp_path / "sites.toml"
    workdir = f"{root.work_c}/bag-{uuid.uuid4().hex[:8]}"
    sites_path.write_text(pool_site(root, workdir=workdir))
    bag = load_bag(bag_path)
    manifest = task_data.build(bag)
    assert {f.name for f in manifest.tasks[0]} == {"sys.dat", "ff.itp"}       # the URL is not read here
    db = open_store(tmp_path / "resel.db")
    coord = Coordinator.start(db, bag, load_sites(sites_path), LiveOptions(poll=0.3, strategy="topk:1"), open_site,
                              bag_file=str(bag_path), sites_file=str(sites_path), manifest=manifest,
                              results=str(tmp_path / "results"))
    try:
        coord.run(max_time=300)
    finally:
        coord.close()
        ap(root, f"rm -f /tmp/{name}", check=False)
    run = db["runs"].get(coord.run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", count, 0), run
    for i in range(count):
        home = Path(run["results"]) / task_data.task_folder(i, count)
        assert (home / "md.log").read_text().strip() == sha(own[i] + ff + mdp)
        assert (home / "out" / "n.txt").read_text().strip() == str(i)
    rows = list(db.query("select path, size, sha256 from task_outputs where run_id = ?", [coord.run_id]))
    assert len(rows) == 2 * count
    assert all((len(b := Path(r["path"]).read_bytes()), sha(b)) == (r["size"], r["sha256"]) for r in rows)
    sent = [r["sha256"] for r in db.query("select sha256 from site_files where run_id = ?", [coord.run_id])]
    assert sent.count(sha(ff)) == 1 and {sha(d) for d in own.values()} <= set(sent)
    notes = {r["key"]: r["detail"] for r in db.query("select key, detail from live_notes where run_id = ?",
                                                     [coord.run_id])}
    assert notes.get("url-inputs") == f"URL inputs ({url}) are fetched by the pool's file transfer, for each pilot"
    # delivered: the outputs the wrappers put on the access point are removed again
    run_dir = host_path(root, f"{workdir}/{coord.run_key}")
    assert list(run_dir.glob("p*/outputs/*")) == []
