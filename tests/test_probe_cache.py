"""The probes learned on a trace site are kept between plans (resel.sim.probe_cache), and only
what nobody else could have written is read back.

What is checked: a plan that reads its probes from the cache is the plan that replays them —
``resel plan --json`` byte for byte, as a user types it, with the cache off, empty and full —
and the models learned from a stored set are those learned by replaying; the key changes
with any input (the trace's bytes, the queue, the shapes, the points, the code). Then the
attacks: a probe set planted to make the site look fast (every estimate right, no wait) under
the right name is not read from a folder others can write, from a folder under one others can
rename, as a link, as a file others can write, as another user's file; a file for other inputs
under this key's name, or one that is not a probe set, is not read either. Each time the plan
replays, so its models are the replayed ones, never the planted ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resel.config import load_sites
from resel.sim import probe_cache
from resel.sim.plan import learn_queue_errors, probe_sites, site_probes

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
#: a small learning (two shapes, six instants) on the example trace: quick, and it teaches
SHAPES = [(1, 1, 3600.0), (4, 4, 7200.0)]
POINTS = 6


def site():
    sites = load_sites(EXAMPLES / "sites-traces.toml")
    return [s for s in sites if s.queue is not None][0]


def key_of(s, shapes=SHAPES, points=POINTS):
    q = s.queue
    return probe_cache.inputs(q.trace, q.policy, s.cores, q.offset, q.load, q.speed,
                              sorted({(c, w) for _, c, w in shapes}), points)


def learned(s) -> dict:
    """What the models learned, group by group (the errors in arrival order)."""
    models = learn_queue_errors([s], {0: SHAPES}, points=POINTS)
    return {src: {k: list(g.order) for k, g in m.groups.items()} for src, m in models.items()}


def fast_lie(s) -> list:
    """A planted probe set: every estimate of every shape exactly right at no wait."""
    return [(c, w, src, 0.0, 0.0) for _, c, w in SHAPES for src in probe_cache.SOURCES for _ in range(50)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(probe_cache.ENV, str(folder))
    return folder


def test_the_models_from_a_stored_set_are_the_replayed_ones(cache, monkeypatch):
    s = site()
    monkeypatch.setenv(probe_cache.ENV, "off")
    replayed = learned(s)
    assert not cache.exists()
    assert sum(len(v) for m in replayed.values() for v in m.values()) > 0   # it taught something
    monkeypatch.setenv(probe_cache.ENV, str(cache))
    assert learned(s) == replayed                       # a miss: replayed, then stored
    (stored,) = cache.iterdir()
    assert stored.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    doc = json.loads(stored.read_text())
    assert doc["inputs"] == key_of(s) and len(doc["probes"]) > 0
    monkeypatch.setattr("resel.sim.plan.probe_sites", lambda *a, **k: pytest.fail("replayed although stored"))
    assert learned(s) == replayed                       # a hit: read back, the same


def test_the_key_changes_with_every_input(tmp_path):
    s = site()
    base = key_of(s)
    trace = tmp_path / "t.swf"
    data = Path(s.queue.trace).read_bytes()
    trace.write_bytes(data)
    q = s.queue
    same = probe_cache.inputs(str(trace), q.policy, s.cores, q.offset, q.load, q.speed,
                              sorted({(c, w) for _, c, w in SHAPES}), POINTS)
    assert same == base                                  # by content, not by path
    trace.write_bytes(data.replace(b"\n", b"\n ", 1))    # one byte more
    others = [probe_cache.inputs(str(trace), q.policy, s.cores, q.offset, q.load, q.speed,
                                 sorted({(c, w) for _, c, w in SHAPES}), POINTS),
              key_of(s, points=POINTS + 1), key_of(s, shapes=SHAPES[:1])]
    for field, value in (("policy", "fcfs"), ("cores", s.cores - 1), ("offset", q.offset + 1), ("load", 2.0),
                         ("speed", 2.0), ("code", "0" * 64), ("format", 2)):
        others.append({**base, field: value})
    names = {probe_cache._name(k) for k in others}
    assert len(names) == len(others) and probe_cache._name(base) not in names


def test_a_plan_with_the_cache_is_the_plan_without_it(tmp_path):
    """``resel plan --json`` on the example trace sites: cache off, cache empty (it replays and
    stores), cache full (it reads) — the same bytes."""
    def plan(cache_dir: str) -> str:
        env = {**os.environ, probe_cache.ENV: cache_dir, "COLUMNS": "200"}
        res = subprocess.run([sys.executable, "-m", "resel.cli", "plan", str(EXAMPLES / "sleep-bag.toml"),
                              "--sites", str(EXAMPLES / "sites-traces-wagap.toml"), "--db", str(tmp_path / "db"),
                              "--json"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr
        return res.stdout
    off = plan("off")
    assert not (tmp_path / "c").exists()
    assert plan(str(tmp_path / "c")) == off
    assert any((tmp_path / "c").iterdir())
    assert plan(str(tmp_path / "c")) == off


def plant(cache: Path, s, rows=None, inputs=None) -> Path:
    cache.mkdir(mode=0o700, exist_ok=True)
    key = key_of(s)
    path = cache / probe_cache._name(key)
    path.write_text(json.dumps({"inputs": inputs or key, "probes": [list(r) for r in rows or fast_lie(s)]}))
    path.chmod(0o600)
    return path


def test_a_planted_set_is_read_only_from_a_private_folder(cache, monkeypatch, capsys):
    s = site()
    monkeypatch.setenv(probe_cache.ENV, "off")
    replayed = learned(s)
    monkeypatch.setenv(probe_cache.ENV, str(cache))
    plant(cache, s)
    lie = learned(s)
    assert lie != replayed                   # read: the lie is what a trusted file would teach
    cache.chmod(0o770)                       # the group may write the folder: nothing in it is read
    assert learned(s) == replayed
    err = capsys.readouterr().err
    assert str(cache) in err and "writable by its group" in err and f"chmod go-w {cache}" in err
    cache.chmod(0o700)
    cache.parent.chmod(0o777)                # a folder above that others could rename it from under
    try:
        assert learned(s) == replayed
        assert "a folder above it" in capsys.readouterr().err
    finally:
        cache.parent.chmod(0o755)
    cache.parent.chmod(0o1777)               # sticky (as /tmp): nobody else may rename the folder
    try:
        assert learned(s) == lie
    finally:
        cache.parent.chmod(0o755)


@pytest.mark.parametrize("how", ["link", "group-writable", "other inputs", "not a probe set", "nan", "another user"])
def test_a_planted_file_is_not_read(cache, monkeypatch, tmp_path, how):
    s = site()
    monkeypatch.setenv(probe_cache.ENV, "off")
    replayed = learned(s)
    monkeypatch.setenv(probe_cache.ENV, str(cache))
    path = plant(cache, s)
    if how == "link":                        # a link to a set the planter controls
        elsewhere = tmp_path / "theirs.json"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    elif how == "group-writable":
        path.chmod(0o620)
    elif how == "other inputs":              # a true set of other inputs, under this key's name
        plant(cache, s, inputs={**key_of(s), "points": POINTS + 1})
    elif how == "not a probe set":
        path.write_text('{"inputs": 1, "probes": "rm -rf ~"}')
    elif how == "nan":
        path.write_text(json.dumps({"inputs": key_of(s), "probes": [[1, 3600.0, "twin", float("nan"), 0.0]]}))
    elif how == "another user":
        if os.geteuid() != 0:
            pytest.skip("making a file another user's needs root (CI runs as root)")
        os.chown(path, 65534, 65534)
    assert probe_cache.load(key_of(s)) is None
    assert learned(s) == replayed
    # replayed and stored again in its place: a file of this user's (a link is replaced, not followed)
    assert not path.is_symlink() and path.stat().st_uid == os.geteuid()
    assert json.loads(path.read_text())["inputs"] == key_of(s)
    if how == "link":
        assert json.loads((tmp_path / "theirs.json").read_text())["probes"][0][3] == 0.0   # theirs untouched


def test_off_writes_nothing(tmp_path, monkeypatch):
    for value in ("off", "", " off "):
        monkeypatch.setenv(probe_cache.ENV, value)
        assert probe_cache.cache_dir() is None
    monkeypatch.delenv(probe_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache.cache_dir() == tmp_path / "xdg" / "resel"


def test_site_probes_are_the_probes_that_started_before_the_bag(monkeypatch):
    """What is stored is what teaches: probes started before the bag's arrival, both sources."""
    s = site()
    rows = site_probes(s.queue, s.cores, [(1, 3600.0)], POINTS)
    assert rows and {r[2] for r in rows} == set(probe_cache.SOURCES)
    assert all(r[0] == 1 and r[1] == 3600.0 and r[4] >= 0 for r in rows)


def _key(n: int) -> dict:
    """A probe set's inputs, told apart by ``n`` (no trace read)."""
    return {"format": probe_cache.FORMAT, "code": "c", "trace_sha256": f"{n:064x}", "policy": "easy", "cores": 4,
            "offset": 0.0, "load": 1.0, "speed": 1.0, "shapes": [[1, 60.0]], "points": 1}


ROWS = [(1, 60.0, "twin", 0.0, 0.0)] * 400      # a set of ~10 KB


def test_sets_unused_for_a_month_go_and_the_folder_keeps_its_size(cache, monkeypatch):
    """Every resel (its code digest) and trace leaves sets the new ones never replace: storing
    a set removes those unused for KEEP_DAYS, then the least recently used over KEEP_BYTES. A
    set read is marked used; only this user's regular probe-set files are ever removed."""
    import time
    for n in range(4):
        probe_cache.save(_key(n), ROWS)
    names = {n: probe_cache._name(_key(n)) for n in range(6)}
    month = time.time() - (probe_cache.KEEP_DAYS + 1) * 86400
    for n in (0, 1):
        os.utime(cache / names[n], (month, month))
    assert probe_cache.load(_key(1)) == ROWS            # read: used now
    (cache / "notes.txt").write_text("mine")
    os.utime(cache / "notes.txt", (month, month))
    os.symlink(cache / names[2], cache / names[5])      # a link named as a set: not ours to judge
    probe_cache.save(_key(4), ROWS)
    assert sorted(p.name for p in cache.iterdir()) == sorted([names[1], names[2], names[3], names[4], names[5],
                                                             "notes.txt"])
    size = (cache / names[4]).stat().st_size
    monkeypatch.setattr(probe_cache, "KEEP_BYTES", 2 * size + size // 2)    # room for two sets
    for n, age in ((4, 400), (2, 300), (3, 200), (1, 100)):
        os.utime(cache / names[n], (time.time() - age,) * 2, follow_symlinks=False)
    probe_cache.save(_key(0), ROWS)                     # the newest and the next most recently used stay
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith("probes-") and not p.is_symlink()) \
        == sorted([names[0], names[1]])
    assert (cache / "notes.txt").exists() and (cache / names[5]).is_symlink()


@pytest.mark.parametrize("workers", [2, 4])
def test_probes_dealt_to_processes_are_the_probes_of_one(workers):
    """probe_sites deals each site's instants out to ``workers`` processes (every k-th instant
    to one); joined back, its rows are site_probes' rows, in their order, site by site."""
    s = site()
    shapes = sorted({(c, w) for _, c, w in SHAPES})
    one = site_probes(s.queue, s.cores, shapes, POINTS + 1)          # 7 instants: uneven parts
    both = probe_sites([(s.queue, s.cores, shapes), (s.queue, s.cores, shapes[:1])], POINTS + 1, workers)
    assert both[0] == one and len(one) > 0
    assert both[1] == [r for r in one if (r[0], r[1]) == shapes[0]]
