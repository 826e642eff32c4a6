"""Task data on an HTCondor pool, without a pool (docs/data.md, "The HTCondor pool: no shared
filesystem"); tests/test_htcondor_data_live.py runs the same in the testbed's real pool.

* the pilot's submit description with its inputs (the run's shared files, URL inputs), as both
  clients build it: the CLI's text read back by the real bindings equals the bindings' own;
* what ``submit(..., inputs=...)`` refuses, and the URL rules of :mod:`resel.url_inputs`;
* where a task's outputs are on each kind of site (``PilotSite.output_path``, ``task_files``);
* the chirp wrapper's edge cases against the recorded-protocol stand-in for condor_chirp of
  tests/test_htcondor_submit.py (condor_chirp's argument order, exit statuses and messages as
  HTCondor 23.9.6 gave them in the live pool): a fetch that fails, an input whose bytes are not
  its sha256, an output that cannot be put; the REAL wrapper runs the REAL agent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import htcondor2
import pytest

from resel.backends.htcondor import client as hc
from resel.backends.pilotsite import PilotSite, url_inputs_note
from resel.backends.transport import LocalTransport
from resel.config import load_bag, load_sites
from resel.errors import InputError, ReselError, SchedulerError
from resel.shipped import agent as agent_module
from resel.shipped import chirp_sync
from resel.live.staging import SiteData
from resel.url_inputs import url_file_name, url_problem
from test_htcondor_submit import AGENT_SHA, condor_words, pilot_script, replay, slot, wait_for  # noqa: F401

A, B = "a" * 64, "b" * 64
URL = "osdf:///ospool/ap20/data/alice/forcefield/amber99.itp"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------- submit description


def test_both_clients_describe_a_pilot_with_inputs_identically(replay):
    """Shared inputs and a URL travel in transfer_input_files; the wrapper is told each one
    (``--shared``, ``--url``) before the agent's options; the CLI's text and the bindings'
    Submit read back the same; ``outputs`` is made beside ``inbox`` at submission."""
    cli, calls, _, tmp = replay
    work = tmp / "work"
    pdir = work / "r1-abcdef" / "p3"
    agent = work / "resel-agent-v3.py"
    work.mkdir()
    agent.write_text("# agent\n")
    cache = work / "r1-abcdef" / "cache"
    inputs = (f"{cache}/{A}", f"{cache}/{B}", URL)
    script = pilot_script(str(agent), str(pdir))
    cli.submit(script, name="resel-r1-abcdef-p3", cores=1, walltime=900, workdir=str(pdir), inputs=inputs)
    sent = htcondor2.Submit([c for c in calls() if c["argv"][0] == "condor_submit"][0]["stdin"])
    assert all((pdir / d).is_dir() for d in ("inbox", "cancel", "started", "results", "outputs"))

    wrapper = str(work / hc.WRAPPER_NAME)
    bindings = hc.HTCondorBindings(project="OSG-Staff", accounting_group="group_osg.alice")
    own = bindings.submit_description(script, name="resel-r1-abcdef-p3", cores=1, walltime=900, workdir=str(pdir),
                                      wrapper=wrapper, inputs=inputs)
    assert dict(sent) == dict(own)
    assert [f.strip() for f in sent["transfer_input_files"].split(",")] == [
        str(agent), wrapper, str(work / hc.WRAPPER_LOG), f"{cache}/{A}", f"{cache}/{B}", URL]
    words = condor_words(sent["arguments"])
    cut = words.index("--")
    assert words[cut - 6:cut] == ["--shared", A, "--shared", B, "--url", URL]
    assert words[cut + 1:cut + 3] == ["--pilot", "3"]


def test_without_inputs_the_description_is_as_before():
    desc = hc.pilot_description(name="resel-r1-abcdef-p3", pilot_dir="/ap/p3", agent="/ap/resel-agent-v3.py",
                                wrapper="/ap/" + hc.WRAPPER_NAME, python="python3", agent_args=["--pilot", "3"],
                                walltime=900, agent_sha256=AGENT_SHA)
    assert desc["transfer_input_files"] == f"/ap/resel-agent-v3.py, /ap/{hc.WRAPPER_NAME}, /ap/{hc.WRAPPER_LOG}"
    assert "--shared" not in desc["arguments"] and "--url" not in desc["arguments"]


@pytest.mark.parametrize("inputs, said", [
    (("cache/" + A,), "absolute path to a file of the run's cache"),
    (("/ap/r1/cache/topol.tpr",), "absolute path to a file of the run's cache"),
    (("/ap/r,1/cache/" + A,), "no comma"),
    (("/ap/r1/cache/" + A, "/ap/r2/cache/" + A), "both arrive in the slot as"),
    (("https://h.org/a/x.dat", "osdf:///b/x.dat"), "both arrive in the slot as 'x.dat'"),
    (("https://h.org/a/x.dat,y",), "commas, blanks"),
    (("https://h.org/data/",), "must be a plain name"),
    (("https://h.org/resel-agent-v3.py",), "one an HTCondor pilot uses itself"),
    (("https://h.org/{index}.dat",), "no {index} or {name}"),
    (("",), "a path or a URL"),
])
def test_pilot_inputs_refused(inputs, said):
    with pytest.raises(SchedulerError, match=None) as err:
        hc.pilot_inputs(inputs)
    assert said in str(err.value)


def test_the_same_shared_input_twice_is_carried_once():
    files, shared, urls = hc.pilot_inputs(("/ap/r1/cache/" + A, "/ap/r1/cache/" + A, URL, URL))
    assert (files, shared, urls) == (["/ap/r1/cache/" + A, URL], [A], [URL])


# ---------------------------------------------------------------------------- URL inputs


@pytest.mark.parametrize("url, name", [
    ("osdf:///ospool/ap20/data/u/ff.itp", "ff.itp"),
    ("https://h.org/a/b.top?X-Amz-Signature=1&y=2#frag", "b.top"),
    ("file:///tmp/x.dat?x=1", "x.dat"),        # as the testbed's pool saved it (23.9.6)
    ("stash:///osgconnect/public/u/big.tar.gz", "big.tar.gz"),
    ("https://h.org/", ""), ("https://h.org", ""), ("s3://bucket", ""), ("https://h.org/data/", ""),
])
def test_a_urls_file_name_is_the_same_for_resel_and_the_wrapper(url, name):
    assert url_file_name(url) == chirp_sync.url_file_name(url) == name


def test_url_problems():
    assert url_problem(URL) is None
    assert "not a URL" in url_problem("/data/x.dat")
    assert "plain name" in url_problem("https://h.org/a/x%20y.dat")
    assert "control" in url_problem("https://h.org/x\n.dat")


def bag_file(tmp_path: Path, inputs: str) -> Path:
    path = tmp_path / "bag.toml"
    path.write_text(f'[bag]\nname = "w"\ncommand = "true"\ncount = 2\ninputs = {inputs}\noutputs = ["md.log"]\n'
                    "[bag.profile]\ninstructions = 1e9\n")
    return path


def test_a_bag_takes_url_inputs_unexpanded(tmp_path):
    bag = load_bag(bag_file(tmp_path, f'["{URL}", {{ path = "https://h.org/b.top?t=1", as = "topol.top" }}, '
                                      '"systems/{index}/topol.tpr"]'))
    assert [(i.pattern, i.file_name) for i in bag.data.urls] == [(URL, "amber99.itp"),
                                                                ("https://h.org/b.top?t=1", "topol.top")]
    assert [i.pattern for i in bag.data.files] == ["systems/{index}/topol.tpr"]


@pytest.mark.parametrize("inputs, said", [
    ('["osdf:///ospool/{index}/ff.itp"]', "no {index} or {name}"),
    ('["https://h.org/a/x.dat", "https://h.org/b/x.dat"]', "URL inputs 0 and 1 both arrive in a slot as 'x.dat'"),
    ('["https://h.org/a/x.dat", { path = "https://h.org/y.dat", as = "x.dat" }]', "both are named 'x.dat'"),
    ('["https://h.org/a,b/x.dat"]', "commas, blanks"),
    ('[{ path = "https://h.org/x.dat", as = "../x.dat" }]', "bad name"),
])
def test_a_bag_with_a_bad_url_input_is_refused_with_its_place(tmp_path, inputs, said):
    with pytest.raises(InputError) as err:
        load_bag(bag_file(tmp_path, inputs))
    assert said in str(err.value) and "bag.inputs[" in str(err.value)


# ---------------------------------------------------------------------------- where outputs are


def site(tmp_path: Path, kind: str) -> PilotSite:
    path = tmp_path / f"{kind}.toml"
    path.write_text(f'[[site]]\nname = "s"\nkind = "{kind}"\ncores = 4\nclock = {{ base = 2.0 }}\n'
                    f'pilot = {{ mode = "per-task", max_cores = 1 }}\n'
                    f'access = {{ transport = "local", workdir = "{tmp_path}/w" }}\n')
    return PilotSite(load_sites(path)[0], LocalTransport(), scheduler=None)


def test_outputs_are_in_the_task_folder_or_under_outputs_on_a_pool(tmp_path):
    slurm, pool = site(tmp_path, "slurm"), site(tmp_path, "htcondor")
    w = f"{tmp_path}/w/r1-abcdef/p2"
    assert slurm.output_path("r1-abcdef", 2, "t5-a1", 1, "traj/a.xtc") == f"{w}/tasks/t5-a1/traj/a.xtc"
    assert pool.output_path("r1-abcdef", 2, "t5-a1", 1, "traj/a.xtc") == f"{w}/outputs/t5-a1.1"
    assert slurm.task_files("r1-abcdef", 2, "t5-a1", 2) == [f"{w}/tasks/t5-a1"]
    assert pool.task_files("r1-abcdef", 2, "t5-a1", 2) == [f"{w}/outputs/t5-a1.0", f"{w}/outputs/t5-a1.1"]
    for bad in (("../t5-a1", 0, "x"), ("t5-a1", -1, "x"), ("t5-a1", 0, "../../etc/passwd"), ("t5-a1", 0, "/x")):
        with pytest.raises(ReselError):
            slurm.output_path("r1-abcdef", 2, *bad)


def test_removing_a_tasks_files_keeps_its_records(tmp_path):
    pool = site(tmp_path, "htcondor")
    pdir = Path(pool.pilot_dir("r1-abcdef", 2))
    (pdir / "outputs").mkdir(parents=True)
    (pdir / "results").mkdir()
    for name in ("outputs/t5-a1.0", "outputs/t5-a1.1", "outputs/t6-a0.0", "results/t5-a1.json"):
        (pdir / name).write_text("x")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (pdir / "outputs" / "t5-a1.1").unlink()
    (pdir / "outputs" / "t5-a1.1").symlink_to(victim)           # a link is removed, never followed
    SiteData(pool, "r1-abcdef").clean(2, 5, 1, 3)                # what the coordinator calls
    assert sorted(p.name for p in (pdir / "outputs").iterdir()) == ["t6-a0.0"]
    assert (pdir / "results" / "t5-a1.json").exists() and victim.read_text() == "precious"


def test_url_inputs_go_into_a_pools_inbox_only(tmp_path):
    bag = load_bag(bag_file(tmp_path, f'["{URL}"]'))
    slurm, pool = site(tmp_path, "slurm"), site(tmp_path, "htcondor")
    assert pool.url_inbox_inputs(bag.data.inputs) == [{"name": "amber99.itp", "url": URL}]
    assert slurm.url_inbox_inputs(bag.data.inputs) == []
    said = url_inputs_note(slurm.site, [URL])
    assert said.startswith(f"resel does not fetch URL inputs ({URL}) on a slurm site") and "setup lines" in said
    assert "pool's file transfer" in url_inputs_note(pool.site, [URL])
    assert url_inputs_note(pool.site, []) is None


# ---------------------------------------------------------------------------- the wrapper


@pytest.fixture
def data_slot(slot):
    """tests/test_htcondor_submit.py's slot, as a run lays it out for task data: the run's
    cache beside the pilot directory (the job's iwd), ``outputs`` made at submission."""
    iwd, scratch, chirp = slot
    (iwd / "outputs").mkdir()
    (iwd.parent / "cache").mkdir(mode=0o700)
    return iwd.parent, iwd, scratch, chirp


def cached(run: Path, data: bytes) -> dict:
    (run / "cache" / sha(data)).write_bytes(data)
    return {"sha256": sha(data), "size": len(data)}


def inbox(iwd: Path, task: int, command: str, inputs=(), outputs=()):
    LocalTransport().write_file(str(iwd / "inbox" / f"t{task}-a0.json"), json.dumps(
        {"task": task, "attempt": 0, "command": command, "inputs": list(inputs),
         "outputs": [{"glob": g} for g in outputs]}).encode())
    return f"t{task}-a0"


def start(iwd: Path, scratch: Path, chirp: Path, inputs=()):
    desc = hc.pilot_description(
        name="resel-r1-abcdef-p3", pilot_dir=str(iwd), agent="/ap/resel-agent-v1.py",
        wrapper="/ap/" + hc.WRAPPER_NAME, python=sys.executable, interval=0.1, agent_sha256=AGENT_SHA,
        agent_args=["--pilot", "3", "--slots", "1", "--walltime", "120", "--poll", "0.05", "--heartbeat", "0.2"],
        walltime=120, inputs=inputs)
    env = {**os.environ, "FAKE_IWD": str(iwd), "PATH": f"{chirp.parent}:{os.environ['PATH']}"}
    return subprocess.Popen([desc["executable"], *condor_words(desc["arguments"])], cwd=scratch, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def result_file(iwd: Path, key: str) -> str | None:
    """The name of the file on the access point that holds ``key``'s result (a wave, agent
    protocol 6), None while there is none."""
    for name, rec in agent_module.folder_records(str(iwd / "results"), own_only=False):
        if isinstance(rec, dict) and (rec.get("task"), rec.get("attempt")) == tuple(map(int, key[1:].split("-a"))):
            return name
    return None


def result(iwd: Path, key: str) -> dict:
    name = wait_for(lambda: result_file(iwd, key), what=f"result {key}")
    return next(r for n, r in agent_module.folder_records(str(iwd / "results"), own_only=False)
                if n == name and f"t{r['task']}-a{r['attempt']}" == key)


def stop(proc, iwd: Path, scratch: Path) -> str:
    LocalTransport().write_file(str(iwd / "stop"), b"stop\n")
    try:
        assert proc.wait(timeout=30) == 0, proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    return (scratch / chirp_sync.LOG_NAME).read_text()


def test_the_wrapper_brings_inputs_once_and_puts_outputs_before_the_result(data_slot):
    run, iwd, scratch, chirp = data_slot
    tpr, ff = b"system 7\n" * 1000, b"; shared force field\n" * 100
    tpr_in, ff_in = cached(run, tpr), cached(run, ff)
    shutil.copy(run / "cache" / ff_in["sha256"], scratch / ff_in["sha256"])    # the job's own transfer
    calls = iwd.parent / "chirp-calls.log"
    k1 = inbox(iwd, 1, "cat topol.tpr ff.itp > md.log; mkdir out; printf x > out/a.xtc",
               [{"name": "topol.tpr", **tpr_in}, {"name": "ff.itp", **ff_in}], ["md.log", "out/*.xtc"])
    proc = start(iwd, scratch, chirp, inputs=(f"{run}/cache/{ff_in['sha256']}",))
    try:
        r1 = result(iwd, k1)
        assert r1["outcome"] == "done", r1
        # the outputs were put (atomically, 0600) before the result
        lines = calls.read_text().splitlines()
        wave = result_file(iwd, k1)
        assert lines.index(f"link outputs/.{k1}.1.chirp.tmp outputs/{k1}.1") < lines.index(
            f"link results/.{wave}.chirp.tmp results/{wave}")
        assert any(line.startswith(f"put -perm 600 ") and f"outputs/.{k1}.0.chirp.tmp" in line for line in lines)
        assert (iwd / "outputs" / f"{k1}.0").read_bytes() == tpr + ff
        assert (iwd / "outputs" / f"{k1}.1").read_bytes() == b"x"
        assert [o["name"] for o in r1["outputs"]] == ["md.log", "out/a.xtc"]
        assert not (scratch / "pilot" / "tasks" / k1 / "md.log").exists()       # gone from the slot
        k2 = inbox(iwd, 2, "cat topol.tpr > md.log", [{"name": "topol.tpr", **tpr_in}], ["md.log"])
        assert result(iwd, k2)["outcome"] == "done"
    finally:
        log = stop(proc, iwd, scratch)
    fetched = [line.split()[1] for line in calls.read_text().splitlines() if line.startswith("fetch ../cache/")]
    assert fetched == [f"../cache/{tpr_in['sha256']}"]          # once for two tasks; the shared one never
    assert "from the job's file transfer" in log
    assert sorted(os.listdir(scratch / "cache")) == sorted([tpr_in["sha256"], ff_in["sha256"]])
    assert all(os.stat(scratch / "cache" / n).st_mode & 0o777 == 0o400 for n in os.listdir(scratch / "cache"))


def test_a_failed_fetch_or_wrong_bytes_leave_the_task_to_the_agent(data_slot):
    """The run's cache lacks one input, and holds another under a name that is not its sha256
    (and a shared one transferred in was damaged): the wrapper keeps none of them and still
    hands every task to the agent, which fails each with its reason — nothing is hidden."""
    run, iwd, scratch, chirp = data_slot
    good = b"good\n"
    wrong = {"sha256": sha(b"what it should be"), "size": len(b"what it should be")}
    (run / "cache" / wrong["sha256"]).write_bytes(b"other bytes here!")          # same size, other sha256
    (scratch / B).write_bytes(b"damaged in transfer")
    k1 = inbox(iwd, 1, "touch ran", [{"name": "a.tpr", "sha256": A, "size": 3}], ["ran"])
    k2 = inbox(iwd, 2, "touch ran", [{"name": "b.tpr", **wrong}], ["ran"])
    k3 = inbox(iwd, 3, "touch ran", [{"name": "c.tpr", "sha256": B, "size": 19}], ["ran"])
    k4 = inbox(iwd, 4, "cat g > ran", [{"name": "g", **cached(run, good)}], ["ran"])
    proc = start(iwd, scratch, chirp, inputs=(f"{run}/cache/{B}",))
    try:
        assert result(iwd, k1)["reason"] == f"input a.tpr: not in the site's cache (sha256 {A})"
        assert result(iwd, k2)["reason"] == f"input b.tpr: not in the site's cache (sha256 {wrong['sha256']})"
        assert result(iwd, k3)["reason"] == f"input c.tpr: not in the site's cache (sha256 {B})"
        assert result(iwd, k4)["outcome"] == "done"
    finally:
        log = stop(proc, iwd, scratch)
    assert f"input {A}: cannot fetch ../cache/{A}: " in log and "No such file or directory" in log
    assert f"not {wrong['size']} bytes with that sha256; dropped" in log
    assert f"shared input {B}: its sha256 is {sha(b'damaged in transfer')}" in log
    assert sorted(os.listdir(scratch / "cache")) == [sha(good)]        # no partial or wrong file kept
    assert not list((scratch / "pilot" / "tasks").glob("t[123]-a0/ran"))


def test_an_output_that_cannot_be_put_holds_its_result_a_few_rounds_only(data_slot):
    """``outputs`` is missing on the access point (a put there fails): the result waits
    OUTPUT_TRIES rounds, then goes without its output — the coordinator finds it missing and
    the task runs again, rather than the pilot hiding a finished task forever."""
    run, iwd, scratch, chirp = data_slot
    (iwd / "outputs").rmdir()
    key = inbox(iwd, 1, "echo hi > md.log", (), ["md.log"])
    proc = start(iwd, scratch, chirp)
    try:
        rec = result(iwd, key)
    finally:
        log = stop(proc, iwd, scratch)
    assert rec["outcome"] == "done" and rec["outputs"][0]["name"] == "md.log"
    assert log.count(f"{key}: cannot put md.log") == chirp_sync.OUTPUT_TRIES
    assert f"after {chirp_sync.OUTPUT_TRIES} rounds; the result goes without it" in log
    assert (scratch / "pilot" / "tasks" / key / "md.log").read_text() == "hi\n"   # kept in the slot


def test_the_agent_links_a_url_input_from_the_slots_cache(data_slot):
    """HTCondor's plugin left the URL's file in the scratch directory: the wrapper moves it
    into the cache (``url-SHA256(URL)``), the agent links it into the task's folder under its
    name. A URL no one fetched fails the task, saying where URL inputs are fetched."""
    run, iwd, scratch, chirp = data_slot
    url = "https://data.example.org/ff/amber99.itp?token=x"
    (scratch / "amber99.itp").write_bytes(b"[ atomtypes ]\n")
    k1 = inbox(iwd, 1, "cat ff.itp > md.log", [{"name": "ff.itp", "url": url}], ["md.log"])
    k2 = inbox(iwd, 2, "true", [{"name": "x.dat", "url": "https://data.example.org/x.dat"}])
    proc = start(iwd, scratch, chirp, inputs=(url,))
    try:
        assert result(iwd, k1)["outcome"] == "done"
        assert (iwd / "outputs" / f"{k1}.0").read_bytes() == b"[ atomtypes ]\n"
        reason = result(iwd, k2)["reason"]
        assert reason.startswith("input x.dat: not in the site's cache (URL https://data.example.org/x.dat:")
        assert "HTCondor pool" in reason and "setup lines" in reason
    finally:
        stop(proc, iwd, scratch)
    assert os.listdir(scratch / "cache") == [chirp_sync.url_cache_name(url)]
    assert chirp_sync.url_cache_name(url) == agent_module.url_cache_name(url)


def test_the_manifest_leaves_url_inputs_to_the_site(tmp_path):
    """A URL input is never expanded, read or hashed here; only its name is taken in each task's
    folder, so a file input under the same name is refused as any two inputs are."""
    from resel import task_data
    (tmp_path / "ff.itp").write_bytes(b"ff")
    manifest = task_data.build(load_bag(bag_file(tmp_path, f'["{URL}", "ff.itp"]')))
    assert [[f.name for f in files] for files in manifest.tasks] == [["ff.itp"], ["ff.itp"]]
    only_urls = task_data.build(load_bag(bag_file(tmp_path, f'["{URL}"]')))
    assert only_urls.tasks == [(), ()]
    (tmp_path / "amber99.itp").write_bytes(b"local")
    with pytest.raises(InputError) as err:
        task_data.build(load_bag(bag_file(tmp_path, f'["{URL}", "amber99.itp"]')))
    assert "two inputs are named 'amber99.itp'" in str(err.value)
