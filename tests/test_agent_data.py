"""The agent's side of task data (protocol 3, docs/data.md), against the real agent process:
inputs taken from the run's cache only when their sha256 is right, outputs found without
following a link, hashed, and a missing required one failing the attempt.

Digests are hashlib's over the bytes the test wrote, never the agent's own code.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from test_agent import Pilot, write_atomic


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def run(tmp_path):
    """A run folder holding a cache beside the pilot's folder, as the coordinator lays it out."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o700)
    pilot = Pilot(tmp_path, slots=2).start()
    yield pilot, cache
    pilot.proc.kill()
    pilot.proc.wait()


def cached(cache: Path, data: bytes) -> dict:
    digest = sha(data)
    path = cache / digest
    path.write_bytes(data)
    os.chmod(path, 0o400)
    return {"sha256": digest, "size": len(data)}


def submit(pilot: Pilot, task: int, command: str, inputs=(), outputs=()) -> str:
    doc = {"task": task, "attempt": 1, "command": command, "inputs": list(inputs), "outputs": list(outputs)}
    write_atomic(pilot.dir / "inbox" / f"t{task}-a1.json", json.dumps(doc))
    return f"t{task}-a1"


def test_inputs_are_linked_in_and_outputs_hashed(run):
    pilot, cache = run
    tpr, mdp = b"system 7\n" * 100, b"nsteps = 10\n"
    inputs = [{"name": "topol.tpr", **cached(cache, tpr)}, {"name": "params/md.mdp", **cached(cache, mdp)}]
    key = submit(pilot, 7, "cat topol.tpr params/md.mdp > md.log; mkdir -p traj; printf x > traj/a.xtc",
                 inputs, [{"glob": "md.log"}, {"glob": "traj/*.xtc"}, {"glob": "*.cpt", "optional": True}])
    res = pilot.result(key)
    assert res["outcome"] == "done", res
    assert res["outputs"] == [{"name": "md.log", "size": len(tpr + mdp), "sha256": sha(tpr + mdp)},
                              {"name": "traj/a.xtc", "size": 1, "sha256": sha(b"x")}]
    assert "refused" not in res
    linked = pilot.dir / "tasks" / key / "topol.tpr"
    assert linked.stat().st_ino == (cache / sha(tpr)).stat().st_ino     # a hard link, not a copy


def test_a_missing_input_fails_the_attempt_before_the_command_runs(run, tmp_path):
    pilot, cache = run
    marker = tmp_path / "ran"
    key = submit(pilot, 1, f"touch {marker}", [{"name": "topol.tpr", "sha256": "a" * 64, "size": 3}])
    res = pilot.result(key)
    assert res["outcome"] == "failed" and res["reason"].startswith("input topol.tpr: not in the site's cache")
    assert not marker.exists()


def test_a_cached_file_with_other_bytes_is_never_used(run, tmp_path):
    """The cache file under the expected digest holds other bytes (a damaged disk, a tamper):
    the attempt fails with both digests and the command never runs."""
    pilot, cache = run
    good = b"right content"
    (cache / sha(good)).write_bytes(b"wrong content")
    marker = tmp_path / "ran"
    key = submit(pilot, 2, f"touch {marker}", [{"name": "in", "sha256": sha(good), "size": len(good)}])
    res = pilot.result(key)
    assert res["outcome"] == "failed"
    assert f"sha256 is {sha(b'wrong content')}" in res["reason"] and sha(good) in res["reason"]
    assert not marker.exists()


def test_a_link_in_the_cache_is_refused(run, tmp_path):
    pilot, cache = run
    target = tmp_path / "elsewhere"
    target.write_bytes(b"data")
    (cache / sha(b"data")).symlink_to(target)
    key = submit(pilot, 3, "true", [{"name": "in", "sha256": sha(b"data"), "size": 4}])
    res = pilot.result(key)
    assert res["outcome"] == "failed" and "symbolic link" in res["reason"]


def test_a_cache_others_can_write_is_refused(run):
    pilot, cache = run
    inp = {"name": "in", **cached(cache, b"data")}
    os.chmod(cache, 0o770)
    res = pilot.result(submit(pilot, 4, "true", [inp]))
    assert res["outcome"] == "failed" and "writable by its group" in res["reason"]


def test_a_missing_required_output_fails_with_its_name(run):
    pilot, _cache = run
    key = submit(pilot, 5, "echo hi > other.txt",
                 outputs=[{"glob": "md.log"}, {"glob": "other.txt"}, {"glob": "*.cpt", "optional": True}])
    res = pilot.result(key)
    assert (res["outcome"], res["reason"]) == ("failed", "missing output: md.log")


def test_links_and_inputs_are_never_outputs(run):
    """A task that leaves a link to /etc/passwd where an output should be gets it refused (not
    sent, listed); the input linked into its folder does not count as an output of `*`."""
    pilot, cache = run
    inp = {"name": "topol.tpr", **cached(cache, b"tpr")}
    key = submit(pilot, 6, "ln -s /etc/passwd secret.log; echo ok > md.log; ln -s /etc passwords",
                 [inp], [{"glob": "*.log"}, {"glob": "*"}])
    res = pilot.result(key)
    assert res["outcome"] == "done"
    assert [o["name"] for o in res["outputs"]] == ["md.log", "stderr", "stdout"]
    assert res["refused"] == [{"name": "passwords", "why": "a symbolic link"},
                              {"name": "secret.log", "why": "a symbolic link"}]


def test_a_required_output_matched_only_by_a_link_is_missing(run):
    pilot, _cache = run
    key = submit(pilot, 8, "ln -s /etc/passwd md.log", outputs=[{"glob": "md.log"}])
    res = pilot.result(key)
    assert (res["outcome"], res["reason"]) == ("failed", "missing output: md.log")
    assert res["refused"] == [{"name": "md.log", "why": "a symbolic link"}]


def test_double_star_matches_any_depth(run):
    pilot, _cache = run
    key = submit(pilot, 9, "mkdir -p a/b/c; echo 1 > a/x.cpt; echo 2 > a/b/c/y.cpt; echo 3 > z.cpt",
                 outputs=[{"glob": "**/*.cpt"}])
    res = pilot.result(key)
    assert [o["name"] for o in res["outputs"]] == ["a/b/c/y.cpt", "a/x.cpt", "z.cpt"]


@pytest.mark.parametrize("inputs, outputs, why", [
    ([{"name": "../x", "sha256": "a" * 64, "size": 1}], [], "'..'"),
    ([{"name": "/etc/x", "sha256": "a" * 64, "size": 1}], [], "absolute"),
    ([{"name": "x", "sha256": "not-hex", "size": 1}], [], "64 hexadecimal"),
    ([{"name": "x", "sha256": "a" * 64, "size": -1}], [], "non-negative"),
    ([], [{"glob": "../../etc/passwd"}], "'..'"),
    ([], [{"glob": "md.log", "optional": "yes"}], "true or false"),
])
def test_bad_data_in_a_task_file_is_a_bad_task_file(run, tmp_path, inputs, outputs, why):
    pilot, _cache = run
    marker = tmp_path / "ran"
    res = pilot.result(submit(pilot, 10, f"touch {marker}", inputs, outputs))
    assert res["outcome"] == "failed" and res["reason"].startswith("bad task file:") and why in res["reason"]
    assert not marker.exists()


def test_names_the_coordinator_cannot_carry_home_are_refused_not_sent(run):
    """A task's file named with bytes that are not UTF-8, a newline, a C1 control character
    or a backslash, matched by an output glob: the agent used to list it in the result's
    outputs, and the coordinator then skipped the whole result as breaking the protocol (the
    attempt stayed running until its pilot ended) or, for the non-UTF-8 name, crashed storing
    it (and again at every --resume). Such a name is refused, like a link, and named in a
    form safe to print; the task's other outputs are sent."""
    pilot, _cache = run
    cmd = ("echo ok > md.log; echo 1 > \"$(printf 'bad\\377.dat')\"; echo 2 > \"$(printf 'nl\\nx.dat')\"; "
           "echo 3 > \"$(printf 'nel\\302\\205.dat')\"; echo 4 > 'back\\slash.dat'; echo 5 > 'run[0].dat'")
    key = submit(pilot, 11, cmd, outputs=[{"glob": "md.log"}, {"glob": "*.dat"}])
    res = pilot.result(key)
    assert res["outcome"] == "done", res
    assert [o["name"] for o in res["outputs"]] == ["md.log", "run[0].dat"]
    refused = {r["name"]: r["why"] for r in res["refused"]}
    assert set(refused) == {"bad\\xff.dat", "nl\\nx.dat", "nel\\xc2\\x85.dat", "back\\\\slash.dat"}
    assert all("cannot carry" in why for why in refused.values())
    from resel.backends.pilotsite import check_result
    assert check_result(res, key) is None


def test_a_required_output_matched_only_by_a_name_that_cannot_go_home_is_missing(run):
    pilot, _cache = run
    key = submit(pilot, 12, "echo 1 > \"$(printf 'bad\\377.dat')\"", outputs=[{"glob": "*.dat"}])
    res = pilot.result(key)
    assert (res["outcome"], res["reason"]) == ("failed", "missing output: *.dat")


def test_an_input_named_with_glob_characters_is_linked_in(run):
    """`run[0].tpr` is a name, not a pattern: the agent used to fail every such task as a bad
    task file ("glob characters in a name") after the run had checked and sent the file."""
    pilot, cache = run
    inp = {"name": "run[0].tpr", **cached(cache, b"tpr bytes")}
    key = submit(pilot, 13, "cat 'run[0].tpr' > md.log", [inp], [{"glob": "md.log"}])
    res = pilot.result(key)
    assert res["outcome"] == "done", res
    assert res["outputs"][0]["sha256"] == sha(b"tpr bytes")


@pytest.mark.parametrize("name", ["stdout", "stderr"])
def test_an_input_named_like_the_agents_own_files_never_runs_on_other_bytes(run, name):
    """An input named `stdout` or `stderr` was linked in, then unlinked by the agent to make the
    task's own output file under that name: the command ran, reading its own output instead
    of the checked input, and the attempt was `done`. Now it is a bad task file, never run."""
    pilot, cache = run
    inp = {"name": name, **cached(cache, b"INPUT BYTES")}
    key = submit(pilot, 14, f"cat {name} > copy.log", [inp], [{"glob": "copy.log"}])
    res = pilot.result(key)
    assert res["outcome"] == "failed" and "bad task file" in res["reason"], res
    assert not (pilot.dir / "tasks" / key / "copy.log").exists()
