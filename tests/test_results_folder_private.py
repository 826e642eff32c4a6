"""Outputs come home only into folders of the user's own (issue 24's independent review).

`resel fetch` (and the coordinator, through the same :meth:`SiteData.fetch`) wrote each output
into ``RESULTS/RUN/task-NNNN/`` made with ``os.makedirs(exist_ok=True)``: a folder or a
symbolic link another user had planted there was taken as it was. With the results in a shared
sticky folder (``--results /tmp/res``: the run's number is predictable), another user's link
``/tmp/res/1/task-0 -> ~/project`` had the output ``out.txt`` replace ``~/project/out.txt``,
and another user's ``task-1`` folder received the outputs (theirs to remove or swap). Now every
folder from ``RESULTS/RUN`` down must be a directory of the user's that nobody else may write,
or nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.config import load_bag, load_sites
from resel.live.staging import ResultsFolderRefused, private_folders
from resel.live.stored import LiveOptions
from resel.store import open_store, to_json, utc_now


def _live_run(tmp_path: Path, results: Path, bag_text: str | None = None) -> tuple[Path, int]:
    """A store holding one finished live run of a local site, its two tasks' outputs still on
    the site (``--keep-remote``): what `resel fetch` brings home. ``bag_text``: another bag
    file of two tasks with the output ``out.txt``."""
    work = tmp_path / "work"
    sites = tmp_path / "sites.toml"
    sites.write_text('[[site]]\nname="loc"\nkind="slurm"\ncores=4\nclock={base=2.0}\n'
                     'pilot={mode="single", walltime=600}\n[site.access]\ntransport="local"\n'
                     f'workdir="{work}"\n')
    bag = tmp_path / "bag.toml"
    bag.write_text(bag_text or '[bag]\nname="t"\ncommand="true"\ncount=2\noutputs=["out.txt"]\n'
                               '[bag.profile]\ninstructions=1e9\n')
    db = open_store(tmp_path / "resel.db")
    with db.atomic():
        run_id = db["runs"].insert({"created": utc_now(), "mode": "live", "bag": "t", "strategy": "model", "size": 2,
                                    "seed": 0, "clock": "base", "status": "done", "t0": time.time(),
                                    "options": to_json(LiveOptions(strategy="model", keep_remote=True)),
                                    "sites": to_json(load_sites(sites)), "bag_spec": to_json(load_bag(bag))}).last_pk
        key = f"r{run_id}-abcdef"
        db["runs"].update(run_id, {"run_key": key, "results": str(results / str(run_id))})
        for task in range(2):
            data = f"task {task}\n".encode()
            f = work / key / "p1" / "tasks" / f"t{task}-a1" / "out.txt"
            f.parent.mkdir(parents=True)
            f.write_bytes(data)
            db["attempts"].insert({"run_id": run_id, "task": task, "attempt": 1, "site": "loc", "pilot": 1,
                                   "outcome": "done", "exit_code": 0, "start": 1.0, "end": 2.0,
                                   "outputs": json.dumps([{"name": "out.txt", "size": len(data),
                                                           "sha256": hashlib.sha256(data).hexdigest()}])})
    return tmp_path / "resel.db", run_id


def _fetch(db: Path, run_id: int) -> tuple[int, dict]:
    r = CliRunner().invoke(cli, ["fetch", str(run_id), "--db", str(db), "--json"])
    return r.exit_code, json.loads(r.stdout)


def test_fetch_brings_outputs_into_its_own_private_folders(tmp_path):
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    code, doc = _fetch(db, run_id)
    assert code == 0, doc
    for task in range(2):
        folder = results / str(run_id) / f"task-{task}"
        assert (folder / "out.txt").read_text() == f"task {task}\n"
        assert (os.stat(folder).st_mode & 0o777) == 0o700


def test_a_link_planted_for_a_task_folder_replaces_nothing(tmp_path):
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    project = tmp_path / "project"
    project.mkdir()
    (project / "out.txt").write_text("the user's own file\n")
    (results / str(run_id)).mkdir(parents=True, mode=0o700)
    (results / str(run_id) / "task-0").symlink_to(project)
    code, doc = _fetch(db, run_id)
    assert code == 1
    assert (project / "out.txt").read_text() == "the user's own file\n"
    assert any("symbolic link" in f["error"] for f in doc["failed"])


def test_a_link_planted_for_the_run_folder_is_refused(tmp_path):
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    results.mkdir()
    (results / str(run_id)).symlink_to(elsewhere)
    code, doc = _fetch(db, run_id)
    assert code == 1
    assert list(elsewhere.iterdir()) == []


def test_a_results_folder_others_may_write_is_refused(tmp_path):
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    (results / str(run_id)).mkdir(parents=True)
    os.chmod(results / str(run_id), 0o777)
    code, doc = _fetch(db, run_id)
    assert code == 1
    assert all("chmod go-w" in f["error"] for f in doc["failed"])
    assert not (results / str(run_id) / "task-0").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder of another user")
def test_another_users_task_folder_receives_nothing(tmp_path):
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    theirs = results / str(run_id) / "task-1"
    theirs.mkdir(parents=True)
    os.chmod(results / str(run_id), 0o700)
    os.chown(theirs, 65534, 65534)
    os.chmod(theirs, 0o700)
    code, doc = _fetch(db, run_id)
    assert code == 1
    assert list(theirs.iterdir()) == []
    assert any("belongs to" in f["error"] for f in doc["failed"])


def test_private_folders_makes_each_level_0700(tmp_path):
    last = private_folders(str(tmp_path / "run"), ["task-0", "sub"])
    assert last == str(tmp_path / "run" / "task-0" / "sub")
    for p in (tmp_path / "run", tmp_path / "run" / "task-0", Path(last)):
        assert (os.stat(p).st_mode & 0o777) == 0o700
    os.symlink(tmp_path, tmp_path / "run" / "task-0" / "link")
    with pytest.raises(ResultsFolderRefused):
        private_folders(str(tmp_path / "run"), ["task-0", "link"])


def test_an_output_name_from_a_damaged_store_stays_inside(tmp_path):
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    import sqlite3
    con = sqlite3.connect(db)
    con.execute("update attempts set outputs = ?", [json.dumps([{"name": "../../escaped", "size": 3,
                                                                "sha256": "a" * 64}])])
    con.commit()
    con.close()
    code, doc = _fetch(db, run_id)
    assert code == 1
    assert not (tmp_path / "escaped").exists() and not (results / "escaped").exists()


def _data_bag(tmp_path: Path):
    bag = tmp_path / "data-bag.toml"
    bag.write_text('[bag]\nname="t"\ncommand="true"\ncount=2\noutputs=["out.txt"]\n[bag.profile]\ninstructions=1e9\n')
    return load_bag(bag)


def test_the_results_folder_of_run_is_made_private_and_a_shared_sticky_one_is_fine(tmp_path):
    from resel.cli.live import _results_root
    bag = _data_bag(tmp_path)
    assert _results_root(bag, tmp_path / "mine") == str(tmp_path / "mine")
    assert (os.stat(tmp_path / "mine").st_mode & 0o777) == 0o700
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    assert _results_root(bag, sticky) == str(sticky)


def test_a_results_folder_anyone_may_rename_in_is_refused(tmp_path):
    from resel.cli.live import _results_root
    from resel.errors import ReselError
    open_ = tmp_path / "open"
    open_.mkdir()
    os.chmod(open_, 0o777)
    with pytest.raises(ReselError, match="no sticky bit"):
        _results_root(_data_bag(tmp_path), open_)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another user")
def test_another_users_results_folder_or_link_is_refused(tmp_path, monkeypatch):
    from resel.cli.live import _results_root
    from resel.errors import ReselError
    bag = _data_bag(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "mine")
    os.lchown(link, 65534, 65534)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)     # root trusts everything: act as a user
    with pytest.raises(ReselError, match="belongs to"):
        _results_root(bag, theirs)
    with pytest.raises(ReselError, match="symbolic link owned by"):
        _results_root(bag, link)


def test_a_results_folder_below_one_anyone_may_rename_in_is_refused(tmp_path):
    from resel.cli.live import _results_root
    from resel.errors import ReselError
    open_ = tmp_path / "open"
    open_.mkdir()
    os.chmod(open_, 0o777)
    with pytest.raises(ReselError, match="a folder above the results folder"):
        _results_root(_data_bag(tmp_path), open_ / "sub")
    assert not (open_ / "sub").exists()       # refused before anything is made in it


@pytest.mark.parametrize("owner, mode", [("me", 0o777), ("nobody", 0o755)])
def test_fetch_refuses_a_results_root_another_user_may_rename_in(tmp_path, owner, mode):
    """`resel run` refuses a results folder another user owns or anyone may rename in
    (_results_root), but `resel fetch` and `resel run --resume` took the stored one as they
    found it, checking only from RESULTS/RUN down: a root made 0777 since, or removed and made
    again by another user (nobody, uid 65534, here), received the run's folder — which its
    owner can then rename away and replace with a link between resel's check and its write."""
    if owner != "me" and os.geteuid() != 0:
        pytest.skip("needs root to act as a second user")
    results = tmp_path / "res"
    db, run_id = _live_run(tmp_path, results)
    if owner == "me":
        results.mkdir()
        os.chmod(results, mode)
    else:
        results.mkdir()                 # theirs (pytest's own folders above are closed to them: made, then given)
        os.chown(results, 65534, 65534)
        os.chmod(results, mode)
    code, doc = _fetch(db, run_id)
    assert code == 1, doc
    assert not (results / str(run_id)).exists()
    assert all("results folder" in f["error"] for f in doc["failed"]), doc
