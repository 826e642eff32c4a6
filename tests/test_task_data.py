"""A bag's task data (docs/data.md): the bag file's `inputs`/`outputs`/`results`/`[bag.data]`
read and checked, and the manifest — every task's inputs found, checked and hashed before a
run submits anything, the shared ones recognised by content.

Expected digests are hashlib's over the bytes each test wrote.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from resel import task_data
from resel.config import load_bag
from resel.errors import InputError
from resel.live.stored import bag_from_json
from resel.store import to_json
import json


def write_bag(tmp_path: Path, extra: str, count: int = 3, name: str = "b") -> Path:
    path = tmp_path / "bag.toml"
    path.write_text(f'[bag]\nname = "{name}"\ncommand = "run"\ncount = {count}\n{extra}\n'
                    '[bag.profile]\ninstructions = 1e9\n', encoding="utf-8")
    return path


def files(tmp_path: Path, contents: dict[str, bytes]) -> None:
    for rel, data in contents.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_inputs_expand_per_task_and_the_common_file_is_shared(tmp_path):
    files(tmp_path, {f"sys/{i}/topol.tpr": f"system {i}".encode() for i in range(3)})
    files(tmp_path, {"ff/a.itp": b"A", "ff/b.itp": b"B", "md.mdp": b"mdp"})
    bag = load_bag(write_bag(tmp_path, 'inputs = ["sys/{index}/topol.tpr", "ff/*.itp", '
                                       '{ path = "md.mdp", as = "params.mdp" }]'))
    m = task_data.build(bag)
    assert [[(f.name, f.size, f.sha256) for f in t] for t in m.tasks] == [
        [("topol.tpr", 8, sha(f"system {i}".encode())), ("a.itp", 1, sha(b"A")), ("b.itp", 1, sha(b"B")),
         ("params.mdp", 3, sha(b"mdp"))] for i in range(3)]
    assert m.shared == {("a.itp", sha(b"A")), ("b.itp", sha(b"B")), ("params.mdp", sha(b"mdp"))}
    assert m.shared_bytes == 5 and m.own_bytes_mean == 8.0
    assert len(m.distinct_files) == 6


def test_the_same_content_under_each_task_is_shared_even_from_different_paths(tmp_path):
    """Shared is recognised by content, not by a flag or a path: three copies of one file are one."""
    files(tmp_path, {f"copy{i}/ff.itp": b"same" for i in range(3)})
    m = task_data.build(load_bag(write_bag(tmp_path, 'inputs = ["copy{index}/ff.itp"]')))
    assert m.shared == {("ff.itp", sha(b"same"))}
    assert len(m.distinct_files) == 1


def test_index_format_spec_and_the_bag_name_in_a_path(tmp_path):
    files(tmp_path, {"b[1]*/run-0002.dat": b"x"})
    bag = load_bag(write_bag(tmp_path, 'inputs = ["{name}/run-{index:04d}.dat"]', count=3, name="b[1]*"))
    with pytest.raises(InputError, match="task 0: .*run-0000.dat.* matches no file"):
        task_data.build(bag)            # the name is taken literally, never as a glob
    files(tmp_path, {f"b[1]*/run-{i:04d}.dat": b"x" for i in range(3)})
    assert [t[0].name for t in task_data.build(bag).tasks] == ["run-0000.dat", "run-0001.dat", "run-0002.dat"]


@pytest.mark.parametrize("extra, layout, message", [
    ('inputs = ["missing/{index}.tpr"]', {}, r"bag.inputs\[0\].*task 0: input .*missing/0.tpr not found"),
    ('inputs = ["in/*.tpr"]', {"in/x.txt": b""}, r"task 0: 'in/\*.tpr' .* matches no file"),
    ('inputs = ["in"]', {"in/x": b""}, r"task 0: input .*/in is a folder"),
    ('inputs = [{ path = "in/*", as = "x" }]', {"in/a": b"", "in/b": b""}, r"renames one file, but 'in/\*' matches 2"),
    ('inputs = ["a/x", "b/x"]', {"a/x": b"1", "b/x": b"2"}, r"two inputs are named 'x'"),
])
def test_a_bad_input_is_one_error_naming_it(tmp_path, extra, layout, message):
    files(tmp_path, layout)
    with pytest.raises(InputError, match=message):
        task_data.build(load_bag(write_bag(tmp_path, extra)))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_input_is_named(tmp_path):
    files(tmp_path, {"secret": b"x"})
    os.chmod(tmp_path / "secret", 0)
    with pytest.raises(InputError, match="secret cannot be read"):
        task_data.build(load_bag(write_bag(tmp_path, 'inputs = ["secret"]')))


@pytest.mark.parametrize("entry, message", [
    ('outputs = ["/etc/passwd"]', "an absolute path"),
    ('outputs = ["../x"]', "'..'"),
    ('outputs = ["a//b"]', "empty"),
    ('outputs = ["a\\\\b"]', "backslash"),
    ('outputs = [{ glob = "x", optional = "yes" }]', "true or false"),
    ('outputs = [{ path = "x" }]', "unknown key 'path'"),
    ('outputs = [3]', "bad value 3"),
    ('inputs = [{ path = "x", as = "../y" }]', "'..'"),
    ('inputs = [{ path = "x", as = "y*" }]', "glob characters"),
    ('inputs = ["{idx}.tpr"]', "did you mean '{index}'"),
    ('[bag.data]\noutput_mb = -1', "megabytes >= 0"),
])
def test_bad_data_keys_are_clear_errors(tmp_path, entry, message):
    with pytest.raises(InputError, match=message):
        load_bag(write_bag(tmp_path, entry))


def test_the_data_spec_survives_the_store(tmp_path):
    """A live run stores its bag as JSON; --resume reads the same DataSpec back."""
    bag = load_bag(write_bag(tmp_path, 'inputs = ["x/{index}", { path = "y", as = "z" }]\n'
                                       'outputs = ["md.log", { glob = "*.xtc", optional = true }]\nresults = "out"\n'
                                       '[bag.data]\noutput_mb = 20\n'))
    assert bag_from_json(json.loads(to_json(bag))) == bag
    assert bag.data.base == str(tmp_path.resolve()) and bag.data.output_mb == 20.0


def test_manifest_rows_round_trip_with_shared_files_once(tmp_path):
    files(tmp_path, {"ff": b"shared", **{f"t{i}": bytes([i]) for i in range(3)}})
    m = task_data.build(load_bag(write_bag(tmp_path, 'inputs = ["ff", "t{index}"]')))
    rows = list(m.rows(7))
    assert [(r["task"], r["name"]) for r in rows] == [(-1, "ff"), (0, "t0"), (1, "t1"), (2, "t2")]
    back = task_data.Manifest.from_rows(rows, 3)
    assert back.tasks == m.tasks and back.shared == m.shared


def test_a_dry_run_checks_without_reading(tmp_path):
    files(tmp_path, {"a": b"data"})
    m = task_data.build(load_bag(write_bag(tmp_path, 'inputs = ["a"]')), hashed=False)
    assert [f.sha256 for f in m.inputs(0)] == [""] and m.shared == frozenset()


def test_a_dry_run_counts_each_unread_file_once_by_its_path(tmp_path):
    """`resel run --dry-run` prints the distinct files and their MB: unread files (no digest)
    are told apart by path, not all taken for one file of empty digest."""
    files(tmp_path, {f"sys/{i}/topol.tpr": f"system {i}".encode() for i in range(3)})
    files(tmp_path, {"md.mdp": b"mdp"})
    bag = load_bag(write_bag(tmp_path, 'inputs = ["sys/{index}/topol.tpr", "md.mdp"]'))
    m = task_data.build(bag, hashed=False)
    assert len(m.distinct_files) == 4
    assert sum(f.size for f in m.distinct_files.values()) == 3 * 8 + 3


def test_task_folders_are_padded_to_the_bag_width():
    assert [task_data.task_folder(i, 1000) for i in (0, 7, 999)] == ["task-000", "task-007", "task-999"]
    assert task_data.task_folder(0, 1) == "task-0"


@pytest.mark.parametrize("bad", ["back\\slash.tpr", "new\nline.tpr", "nel\u0085.tpr"])
def test_an_input_whose_name_the_agent_refuses_is_an_error_before_anything_starts(tmp_path, bad):
    """A glob's match named with a backslash or a control character: the agent refuses such a
    name (every task's inbox file a bad task file, three times each, after pilots were
    submitted); the check that runs before any submission says so instead."""
    files(tmp_path, {f"sys/{bad}": b"x", "sys/ok.tpr": b"y"})
    with pytest.raises(InputError, match="cannot be a file name in the task's folder"):
        task_data.build(load_bag(write_bag(tmp_path, 'inputs = ["sys/*.tpr"]', count=1)))


def test_an_input_named_with_glob_characters_is_taken(tmp_path):
    files(tmp_path, {"sys/run[0].tpr": b"x"})
    m = task_data.build(load_bag(write_bag(tmp_path, 'inputs = ["sys/*.tpr"]', count=1)))
    assert [f.name for f in m.tasks[0]] == ["run[0].tpr"]


@pytest.mark.parametrize("layout", ["glob", "as"])
def test_an_input_named_like_the_agents_own_files_is_an_error_before_anything_starts(tmp_path, layout):
    files(tmp_path, {"sys/stderr": b"x"})
    spec = '"sys/*"' if layout == "glob" else '{ path = "sys/stderr", as = "stderr" }'
    with pytest.raises(InputError, match="the agent writes its own file under that name"):
        task_data.build(load_bag(write_bag(tmp_path, f"inputs = [{spec}]", count=1)))
