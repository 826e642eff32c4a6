"""Where `resel scenario` finds the real traces: ``$RESEL_TRACES`` or ``shared/data/swf`` in a
folder above the installed module — but only a folder no other user owns or can write (an
install in /tmp would otherwise read the traces anyone can leave in /tmp/shared)."""
from __future__ import annotations

import os

import pytest

from resel.sim import scenarios
from resel.sim.scenarios import _trusted, shared_swf_dir


def _tree(root):
    swf = root / "shared" / "data" / "swf"
    swf.mkdir(parents=True)
    for d in (root / "shared", root / "shared" / "data", swf):
        d.chmod(0o755)
    return swf


def test_a_private_tree_is_trusted(tmp_path):
    assert _trusted(_tree(tmp_path), tmp_path)


@pytest.mark.parametrize("level", ["shared", "shared/data", "shared/data/swf"])
def test_a_folder_others_can_write_is_not(tmp_path, level):
    swf = _tree(tmp_path)
    (tmp_path / level).chmod(0o777)
    assert not _trusted(swf, tmp_path)
    (tmp_path / level).chmod(0o775)
    assert not _trusted(swf, tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_another_user_owns_is_not(tmp_path):
    swf = _tree(tmp_path)
    os.chown(tmp_path / "shared" / "data", 65534, 65534)     # nobody
    assert not _trusted(swf, tmp_path)


def test_the_search_skips_an_untrusted_tree_and_says_how_to_point_at_one(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "resel" / "sim" / "scenarios.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    swf = _tree(tmp_path)
    (tmp_path / "shared").chmod(0o777)                 # like /tmp: anyone may have made it
    monkeypatch.delenv("RESEL_TRACES", raising=False)
    monkeypatch.setattr(scenarios, "__file__", str(fake))
    with pytest.raises(scenarios.ReselError, match="RESEL_TRACES"):
        shared_swf_dir()
    (tmp_path / "shared").chmod(0o755)
    assert shared_swf_dir() == swf
    monkeypatch.setenv("RESEL_TRACES", str(tmp_path / "elsewhere"))
    assert shared_swf_dir() == tmp_path / "elsewhere"
