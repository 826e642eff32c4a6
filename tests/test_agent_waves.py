"""Results waves out of the agent (agent protocol 6, issue 29 §2): everything one turn of the
agent's loop started, and everything it ended, in one file each; the coordinator reads them with
a cursor (``backends/waves.py``), wave after wave to the first missing one, without listing.

The agent runs for real as a subprocess (as in test_agent.py) on a local pilot directory laid
out as a site's (``{workdir}/{run_key}/p0``), and the coordinator's side is the real
:meth:`PilotSite.collect` over a local transport that counts what it is asked: a listing is
``entries``/``listdir``, a wave costs a ``stat`` (the owner check, which also finds the end) and
a ``read_file``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from resel.backends.pilotsite import PilotSite
from resel.backends.transport import LocalTransport
from resel.backends.waves import LIST_EVERY, QUIET_READS, TORN_READS, WaveCursor, parse_wave_name
from resel.config import load_sites
from resel.shipped import agent as agent_module
from agent_files import keyed, records
from waiting import wait_until

AGENT = Path(agent_module.__file__)
RUN_KEY = "r1-0a11ce"
FAST = ["--poll", "0.05", "--heartbeat", "0.2"]


class CountingTransport(LocalTransport):
    """The local transport, counting each call by name (what an SFTP round trip would be)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter = Counter()

    def entries(self, path):
        self.calls["entries"] += 1
        return super().entries(path)

    def listdir(self, path):
        self.calls["listdir"] += 1
        return super().listdir(path)

    def stat(self, path, *, follow=False):
        self.calls["stat"] += 1
        return super().stat(path, follow=follow)

    def read_file(self, path, *, limit=None):
        self.calls["read_file"] += 1
        return super().read_file(path, limit=limit)

    def stat_files(self, paths):
        self.calls["stat_files"] += 1          # a batch: over SSH its requests in flight together
        return super().stat_files(paths)

    def read_files(self, items):
        self.calls["read_files"] += 1
        return super().read_files(items)


def site(tmp_path: Path, kind: str = "slurm") -> PilotSite:
    path = tmp_path / f"{kind}.toml"
    path.write_text(f'[[site]]\nname = "s"\nkind = "{kind}"\ncores = 4\nclock = {{ base = 2.0 }}\n'
                    f'pilot = {{ mode = "per-task", max_cores = 1 }}\n'
                    f'access = {{ transport = "local", workdir = "{tmp_path}/w" }}\n')
    return PilotSite(load_sites(path)[0], CountingTransport(), scheduler=None)


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    return wait_until(predicate, timeout, what, every=0.02)


class Agent:
    """One agent process on the pilot directory ``pdir``."""

    def __init__(self, pdir: Path, slots: int = 4):
        (pdir / "inbox").mkdir(parents=True, exist_ok=True)
        os.chmod(pdir, 0o700)
        self.dir = pdir
        self.proc = subprocess.Popen([sys.executable, str(AGENT), "--dir", str(pdir), "--pilot", "0", "--slots",
                                      str(slots), "--walltime", "300", *FAST],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self.beat().get("pid") == self.proc.pid, 10, "the agent's heartbeat")
        self.incarnation = self.beat()["incarnation"]

    def beat(self) -> dict:
        try:
            return json.loads((self.dir / "heartbeat.json").read_text())
        except (OSError, ValueError):
            return {}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def submit(pdir: Path, task: int, command: str, attempt: int = 1) -> str:
    key = f"t{task}-a{attempt}"
    tmp = pdir / "inbox" / f".{key}.part"
    tmp.write_text(json.dumps({"task": task, "attempt": attempt, "command": command}))
    os.replace(tmp, pdir / "inbox" / f"{key}.json")
    return key


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def keys(recs: list[dict]) -> list[str]:
    return sorted(f"t{r['task']}-a{r['attempt']}" for r in recs)


@pytest.fixture
def pilot(tmp_path):
    ps = site(tmp_path)
    pdir = Path(ps.pilot_dir(RUN_KEY, 0))
    (pdir / "inbox").mkdir(parents=True)
    agents: list[Agent] = []

    def start(slots: int = 4) -> Agent:
        agents.append(Agent(pdir, slots))
        return agents[-1]

    yield ps, pdir, start
    for a in agents:
        a.kill()


# ---------------------------------------------------------------------------- the agent


def test_a_turn_s_starts_go_into_one_wave_and_the_waves_count_from_1(pilot):
    """Four attempts in the inbox of a 4-slot agent are claimed in its first turn: one started
    wave holds all four. Every file the agent wrote in started/ and results/ is a wave of its
    incarnation, numbered 1, 2, … without a gap, each key once; the heartbeat and agent.json
    say the agent's protocol (waves since 6)."""
    ps, pdir, start = pilot
    for task in range(4):
        submit(pdir, task, "sleep 0.3")
    agent = start()
    wait_for(lambda: len(records(pdir / "results")) == 4, 10, "four results")
    inc = agent.incarnation
    assert names(pdir / "started") == [f"{inc}-1.json"]
    assert keys(json.loads((pdir / "started" / f"{inc}-1.json").read_text())) == [f"t{i}-a1" for i in range(4)]
    waves = names(pdir / "results")
    assert sorted(parse_wave_name(n) for n in waves) == [(inc, n) for n in range(1, len(waves) + 1)]
    assert {k: len(v) for k, v in keyed(pdir / "results").items()} == {f"t{i}-a1": 1 for i in range(4)}
    said = json.loads((pdir / "agent.json").read_text())["protocol"]
    assert said == agent_module.PROTOCOL_VERSION == agent.beat()["protocol"] and said >= 6


def test_a_result_is_written_once_per_key_across_incarnations(tmp_path):
    """The agent keeps the keys it has an outcome for, and at start reads those an earlier agent
    wrote (waves and protocol-5 per-key files): a second word on a key is never written."""
    pdir = tmp_path / "p"
    args = agent_module.parse_args(["--dir", str(pdir), "--pilot", "0", "--slots", "1", "--walltime", "60"])
    first = agent_module.Agent(args)
    first.make_dirs()
    first.result(1, 1, "lost", "walltime")
    first.result(1, 1, "done", None)                     # the same key again: not written
    first.write_waves()
    (pdir / "results" / "t2-a1.json").write_text(json.dumps({"task": 2, "attempt": 1, "outcome": "done"}))
    second = agent_module.Agent(args)
    second.make_dirs()
    second.finished |= agent_module.result_keys(second.path("results"))
    second.result(1, 1, "done", None)
    second.result(2, 1, "lost", "agent restarted")
    second.result(3, 1, "done", None)
    second.write_waves()
    got = keyed(pdir / "results")
    assert {k: [r["outcome"] for r in v] for k, v in got.items()} == {"t1-a1": ["lost"], "t2-a1": ["done"],
                                                                      "t3-a1": ["done"]}
    assert names(pdir / "results") == sorted(["t2-a1.json", f"{first.incarnation}-1.json",
                                              f"{second.incarnation}-1.json"])


def test_a_wave_is_cut_before_it_outgrows_its_limit():
    recs = [{"task": i, "attempt": 1, "stdout_tail": "x" * 400} for i in range(10)]
    one = len(json.dumps(recs[0], sort_keys=True)) + 2
    assert agent_module.wave_chunk(recs, limit=3 * one) == recs[:3]
    assert agent_module.wave_chunk(recs, limit=1) == recs[:1]        # a record longer than the limit goes alone
    assert agent_module.wave_chunk(recs) == recs


# ---------------------------------------------------------------------------- the coordinator's read


def looks(new: int, first: int) -> tuple[int, int]:
    """(names looked at, rounds) to find the end of a folder with ``new`` unread waves, looking
    for ``first`` names in the first round and twice as many in each next one (up to 32), until
    a round finds a name missing — the rule of docs/live.md, counted here by hand."""
    looked = rounds = 0
    size = first
    while True:
        rounds += 1
        looked += size
        if looked > new:
            return looked, rounds
        size = min(2 * size, 32)


def test_a_cursor_read_costs_what_is_new_and_no_listing(pilot):
    """The first read of a pilot lists started/ and results/ once (an incarnation the cursor
    does not know); from then on a read looks for the next wave names of each folder (one more
    than the last read found there, doubling in each round until one is missing) in one batch
    of stats per round and reads the new ones in one batch — and never lists, however many
    waves there are."""
    ps, pdir, start = pilot
    agent = start()
    cursor, seen = WaveCursor(), set()
    first = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert ps.transport.calls["entries"] == 2 and first.heartbeat["incarnation"] == agent.incarnation
    assert first.started == first.results == []
    for task in range(6):
        submit(pdir, task, "true")
    wait_for(lambda: len(records(pdir / "results")) == 6, 10, "six results")
    before = {sub: len(names(pdir / sub)) for sub in ("started", "results")}
    ps.transport.calls.clear()
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == keys(found.results) == [f"t{i}-a1" for i in range(6)]
    waves = before["started"] + before["results"]
    assert ps.transport.calls["entries"] == ps.transport.calls["listdir"] == 0
    (s_looked, s_rounds), (r_looked, r_rounds) = looks(before["started"], 1), looks(before["results"], 1)
    assert ps.transport.calls["stat"] == s_looked + r_looked
    assert ps.transport.calls["stat_files"] == max(s_rounds, r_rounds)   # both folders in each round
    assert ps.transport.calls["read_file"] == waves + 1              # + heartbeat.json
    # heartbeat.json's batch, then one batch per round that found waves
    assert 2 <= ps.transport.calls["read_files"] <= 1 + ps.transport.calls["stat_files"]
    ps.transport.calls.clear()
    again = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert again.started == again.results == [] and again.bad == []
    # one round: the next (last found + 1) names of each folder, all missing
    assert dict(ps.transport.calls) == {"stat": before["started"] + before["results"] + 2, "stat_files": 1,
                                        "read_file": 1, "read_files": 1}
    ps.transport.calls.clear()
    quiet = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert quiet.started == quiet.results == []
    assert dict(ps.transport.calls) == {"stat": 2, "stat_files": 1, "read_file": 1,   # an idle pilot: one look
                                        "read_files": 1}


@pytest.fixture
def three_pilots(tmp_path):
    """One site, three pilots with an agent each (a pool's one-core pilots, or a site's several)."""
    ps = site(tmp_path)
    pdirs = [Path(ps.pilot_dir(RUN_KEY, p)) for p in range(3)]
    agents = [Agent(pdir) for pdir in pdirs]
    yield ps, pdirs
    for a in agents:
        a.kill()


def test_a_site_s_pilots_are_read_in_one_exchange_whatever_their_number(three_pilots):
    """The coordinator reads all of a site's pilots at once (collect_many): their heartbeats in
    one batch, then every pilot's due wave names in the same rounds — a round trip count that
    does not grow with the pilots (it did: a pool's one-core pilots were read one after
    another, a few round trips each) — and each pilot gets its own records."""
    ps, pdirs = three_pilots
    cursors, seens = [WaveCursor() for _ in pdirs], [set() for _ in pdirs]

    def read():
        return ps.collect_many(RUN_KEY, [(p, seens[p], cursors[p]) for p in range(3)], heartbeat=True)
    first = read()
    assert ps.transport.calls["entries"] == 2 * 3 and all(first[p].heartbeat for p in range(3))
    for p, pdir in enumerate(pdirs):
        for task in range(2):
            submit(pdir, 10 * p + task, "true")
    wait_for(lambda: all(len(records(pdir / "results")) == 2 for pdir in pdirs), 10, "two results a pilot")
    rounds = max(looks(len(names(pdir / sub)), 1)[1] for pdir in pdirs for sub in ("started", "results"))
    ps.transport.calls.clear()
    found = read()
    assert {p: keys(found[p].results) for p in range(3)} == {p: [f"t{10 * p}-a1", f"t{10 * p + 1}-a1"]
                                                             for p in range(3)}
    assert {p: keys(found[p].started) for p in range(3)} == {p: keys(found[p].results) for p in range(3)}
    assert ps.transport.calls["entries"] == 0
    assert ps.transport.calls["stat_files"] == rounds            # as for one pilot: the pilots share rounds
    ps.transport.calls.clear()
    quiet = read()
    assert all(q.started == q.results == [] for q in quiet.values())
    ahead = sum(len(names(pdir / sub)) + 1 for pdir in pdirs for sub in ("started", "results"))   # last found + 1
    assert dict(ps.transport.calls) == {"stat": ahead, "stat_files": 1, "read_files": 1, "read_file": 3}


def test_a_site_s_read_that_fails_half_way_loses_no_pilot_s_records(three_pilots):
    """A read of several pilots is all or nothing: the waves' batch fails (the connection
    dropped) after the heartbeats came back — no cursor and no ``seen`` moves, so the next read
    returns every pilot's records, and the one after it none again."""
    ps, pdirs = three_pilots
    cursors, seens = [WaveCursor() for _ in pdirs], [set() for _ in pdirs]

    def read():
        return ps.collect_many(RUN_KEY, [(p, seens[p], cursors[p]) for p in range(3)], heartbeat=True)
    read()
    for p, pdir in enumerate(pdirs):
        submit(pdir, 10 * p, "true")
    wait_for(lambda: all(len(records(pdir / "results")) == 1 for pdir in pdirs), 10, "a result a pilot")
    batches = {"n": 0}
    real = ps.transport.read_files

    def second_batch_fails(items):
        batches["n"] += 1
        if batches["n"] == 2:
            raise OSError("connection dropped")
        return real(items)
    ps.transport.read_files = second_batch_fails
    with pytest.raises(OSError, match="connection dropped"):
        read()
    assert seens == [{"agent.json"}] * 3     # only what the first, listing read took
    found = read()
    assert {p: keys(found[p].results) for p in range(3)} == {p: [f"t{10 * p}-a1"] for p in range(3)}
    assert all(f.started == f.results == [] for f in read().values())


def test_a_relaunched_agent_s_predecessor_is_read_to_its_end(pilot):
    """The agent is killed outright with one attempt running, after writing a wave the
    coordinator has not read; a new agent starts in its directory. The next read finds the new
    incarnation (one listing), reads the old one's remaining wave (it is gone: its waves are
    complete) and the new one's first wave, which says the running attempt was lost."""
    ps, pdir, start = pilot
    old = start()
    cursor, seen = WaveCursor(), set()
    running = submit(pdir, 1, "sleep 30")
    wait_for(lambda: running in keyed(pdir / "started"), 10, "the long attempt's start")
    assert keys(ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor).started) == [running]
    read_before = wave_names(pdir)
    quick = submit(pdir, 2, "true")
    wait_for(lambda: quick in keyed(pdir / "results"), 10, "the quick attempt's result")
    old.kill()
    new = start()
    assert new.incarnation != old.incarnation
    ps.transport.calls.clear()
    at_relaunch_read = wave_names(pdir)
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert ps.transport.calls["entries"] == 2
    by_key = {f"t{r['task']}-a{r['attempt']}": r for r in found.results}
    assert set(by_key) == {running, quick}
    assert (by_key[quick]["outcome"], by_key[quick]["incarnation"]) == ("done", old.incarnation)
    assert (by_key[running]["outcome"], by_key[running]["reason"]) == ("lost", "agent restarted")
    assert by_key[running]["incarnation"] == new.incarnation
    assert keys(found.started) == [quick]
    # the old incarnation stays followed while it may still write (a superseded agent's last
    # turn), then is dropped: QUIET_READS reads without a wave of it
    ps.transport.calls.clear()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    # 2 folders x 2 incarnations, each looked at one name further than the last read found
    new_waves = Counter(at_relaunch_read) - Counter(read_before)
    assert ps.transport.calls["stat"] == sum(new_waves[(sub, inc)] + 1 for sub in ("started", "results")
                                             for inc in (old.incarnation, new.incarnation))
    assert ps.transport.calls["stat_files"] == 1
    for _ in range(QUIET_READS):
        ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    ps.transport.calls.clear()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert ps.transport.calls["stat"] == 2 and ps.transport.calls["entries"] == 0


def test_a_read_that_fails_leaves_the_cursor_where_it_was(pilot):
    """The site drops the connection while a read's waves come back: that read fails whole, and
    the next one takes every one of those waves (before, the cursor had already moved past
    the wave being read: its records were found again only by a listing)."""
    from resel.errors import TransportError
    ps, pdir, start = pilot
    start()
    cursor, seen = WaveCursor(), set()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    for task in range(4):
        submit(pdir, task, "true")
    wait_for(lambda: len(records(pdir / "results")) == 4, 10, "four results")
    real_one, real_many = ps.transport.read_file, ps.transport.read_files

    def drops(path: str) -> None:
        if "/started/" in path or "/results/" in path:      # a wave: the link drops there
            raise TransportError("tb: the connection dropped")

    def read_file(path, *, limit=None):
        drops(path)
        return real_one(path, limit=limit)

    def read_files(items):
        for path, _limit in items:
            drops(path)
        return real_many(items)
    ps.transport.read_file, ps.transport.read_files = read_file, read_files
    with pytest.raises(TransportError):
        ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    ps.transport.read_file, ps.transport.read_files = real_one, real_many
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == keys(found.results) == [f"t{i}-a1" for i in range(4)]


def test_a_read_that_fails_in_a_later_round_leaves_the_cursor_where_it_was(pilot):
    """A read of many new waves takes several rounds; the link drops in the second one: the
    waves the first round read are read again next time, with the rest (the cursor moves only
    once every round came back)."""
    from resel.errors import TransportError
    ps, pdir, start = pilot
    start(slots=1)
    cursor, seen = WaveCursor(), set()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)      # nothing yet: one name ahead
    for task in range(6):
        submit(pdir, task, "true")
    wait_for(lambda: len(records(pdir / "results")) == 6, 10, "six results")
    assert len([n for n in names(pdir / "results") if not n.startswith(".")]) >= 3   # at least two rounds
    real = ps.transport.read_files
    calls = []

    def second_drops(items):
        calls.append(len(items))
        if len(calls) == 2:
            raise TransportError("tb: the connection dropped")
        return real(items)
    ps.transport.read_files = second_drops
    with pytest.raises(TransportError):
        ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    ps.transport.read_files = real
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == keys(found.results) == [f"t{i}-a1" for i in range(6)]


def wave_names(pdir: Path) -> list[tuple[str, str]]:
    """(folder, incarnation) of every wave file there now, one entry per wave."""
    return [(sub, name.split("-")[0]) for sub in ("started", "results") for name in names(pdir / sub)
            if re.fullmatch(r"[0-9a-f]+-[0-9]+\.json", name)]


def test_a_resumed_coordinator_reads_every_wave_once_more(pilot):
    """A resumed coordinator's cursor is fresh: its first read takes every record of the
    pilot again, once (the journal's consumed set skips what it holds), and the next read none."""
    ps, pdir, start = pilot
    start()
    for task in range(5):
        submit(pdir, task, "true")
    wait_for(lambda: len(records(pdir / "results")) == 5, 10, "five results")
    ps.collect(RUN_KEY, 0, set(), heartbeat=True, cursor=WaveCursor())
    cursor, seen = WaveCursor(), {"started/t0-a1.json", "results/t0-a1.json"}   # as resume marks them
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == keys(found.results) == [f"t{i}-a1" for i in range(5)]
    again = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert again.started == again.results == []


def test_a_torn_wave_is_ignored_and_its_attempt_reported_lost_by_the_successor(pilot):
    """An agent killed while writing a wave leaves a temporary file (a dot-name) and the attempt
    in claimed/ without a result. Neither reader takes the temporary file, and the next agent
    writes the attempt lost in its first wave."""
    ps, pdir, start = pilot
    old = start()
    key = submit(pdir, 7, "sleep 30")
    wait_for(lambda: key in keyed(pdir / "started"), 10, "the attempt's start")
    old.kill()
    torn = pdir / "results" / f".{old.incarnation}-1.json.0123456789abcdef.tmp"
    torn.write_text('[{"task": 7, "attempt": 1, "outcome": "do')
    for cursor in (WaveCursor(), None):                              # the cursor's read, and a listing
        found = ps.collect(RUN_KEY, 0, set(), heartbeat=True, cursor=cursor)
        assert found.results == [] and found.bad == [] and keys(found.started) == [key]
    new = start()
    found = ps.collect(RUN_KEY, 0, set(), heartbeat=True, cursor=WaveCursor())
    assert [(r["task"], r["outcome"], r["reason"], r["incarnation"]) for r in found.results] == \
        [(7, "lost", "agent restarted", new.incarnation)]
    assert found.bad == []


def test_a_wave_s_bad_records_and_a_wave_that_is_not_the_users_are_refused_alone(pilot):
    """Each record of a wave goes through the checks a per-key file did; a bad one is listed
    in ``bad`` and the others are taken. A wave that is a link is not read: listed, and the
    cursor moves on past it."""
    ps, pdir, _start = pilot
    inc = "00aa"
    for sub in ("started", "results", "inbox"):
        (pdir / sub).mkdir(parents=True, exist_ok=True)
    (pdir / "agent.json").write_text(json.dumps({"protocol": 6, "incarnation": inc}))
    (pdir / "heartbeat.json").write_text(json.dumps({"time": 1.0, "incarnation": inc, "protocol": 6}))
    good = {"task": 1, "attempt": 1, "outcome": "done", "start": 1.0, "end": 2.0}
    (pdir / "results" / f"{inc}-1.json").write_text(json.dumps([good, {"task": 2, "attempt": 1, "outcome": "won"},
                                                                "text"]))
    (pdir / "results" / f"{inc}-2.json").symlink_to(pdir / "results" / f"{inc}-1.json")
    (pdir / "results" / f"{inc}-3.json").write_text(json.dumps([{**good, "task": 3}]))
    (pdir / "started" / f"{inc}-1.json").write_text(json.dumps({"task": 1}))     # not a list
    found = ps.collect(RUN_KEY, 0, set(), heartbeat=True, cursor=WaveCursor())
    assert [r["task"] for r in found.results] == [1, 3]
    bad = dict(found.bad)
    assert set(bad) == {f"p0/results/{inc}-1.json record 2", f"p0/results/{inc}-1.json record 3",
                        f"p0/results/{inc}-2.json", f"p0/started/{inc}-1.json"}, bad
    assert "outcome must be one of" in bad[f"p0/results/{inc}-1.json record 2"]
    assert "a link" in bad[f"p0/results/{inc}-2.json"]
    assert "must be a JSON list" in bad[f"p0/started/{inc}-1.json"]


def test_a_pilot_of_an_older_agent_is_read_by_listing_as_before(pilot):
    """A pilot whose agent speaks protocol 5 (a run stored before, resumed): its per-key files
    are listed every read, each read once, whatever the cursor."""
    ps, pdir, _start = pilot
    for sub in ("started", "results"):
        (pdir / sub).mkdir(parents=True, exist_ok=True)
    (pdir / "agent.json").write_text(json.dumps({"protocol": 5, "incarnation": "0bee"}))
    (pdir / "heartbeat.json").write_text(json.dumps({"time": 1.0, "incarnation": "0bee"}))

    def record(task: int) -> None:
        (pdir / "started" / f"t{task}-a1.json").write_text(json.dumps({"task": task, "attempt": 1, "time": 1.0}))
        (pdir / "results" / f"t{task}-a1.json").write_text(json.dumps({"task": task, "attempt": 1,
                                                                       "outcome": "done"}))

    record(1)
    cursor, seen = WaveCursor(), set()
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == keys(found.results) == ["t1-a1"] and not cursor.waves
    record(2)
    ps.transport.calls.clear()
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == keys(found.results) == ["t2-a1"]
    assert ps.transport.calls["entries"] == 2 and ps.transport.calls["stat"] == 0


def pool_pilot(tmp_path: Path) -> tuple[PilotSite, Path]:
    """A pool's pilot directory on the access point as the chirp wrapper leaves it: the folders
    made at submission, agent.json and heartbeat.json of incarnation ``0c`` pushed."""
    ps = site(tmp_path, "htcondor")
    pdir = Path(ps.pilot_dir(RUN_KEY, 0))
    for sub in ("started", "results"):
        (pdir / sub).mkdir(parents=True)
    (pdir / "agent.json").write_text(json.dumps({"protocol": 6, "incarnation": "0c"}))
    (pdir / "heartbeat.json").write_text(json.dumps({"time": 1.0, "state": "running", "running": [], "free": 1,
                                                     "incarnation": "0c", "started": 1.0, "pid": 7, "protocol": 6}))
    return ps, pdir


def push_wave(pdir: Path, sub: str, n: int, *tasks: int) -> None:
    """A wave of incarnation ``0c`` as the wrapper pushes it (in whatever order it does)."""
    recs = [{"task": t, "attempt": 1, "time": 1.0, "host": "slot1"} if sub == "started" else
            {"task": t, "attempt": 1, "outcome": "done", "exit_code": 0, "start": 1.0, "end": 2.0}
            for t in tasks]
    (pdir / sub / f"0c-{n}.json").write_text(json.dumps(recs))


def evicted(pdir: Path, task: int) -> None:
    """The wrapper's own per-key result for an attempt an evicted run of the pilot had started."""
    (pdir / "results" / f"t{task}-a1.json").write_text(json.dumps({
        "task": task, "attempt": 1, "outcome": "lost", "reason": "evicted", "start": 1.0, "end": 2.0}))


def test_an_htcondor_pool_s_pilot_is_listed_once_then_read_by_its_cursor(tmp_path):
    """On a pool the first read (an incarnation the cursor does not know) lists the folders and
    reads waves and per-key files alike; the reads after it follow the cursor and list nothing,
    and no wave is read twice."""
    ps, pdir = pool_pilot(tmp_path)
    push_wave(pdir, "results", 2, 2)
    evicted(pdir, 5)
    cursor, seen = WaveCursor(), set()
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert sorted(r["task"] for r in found.results) == [2, 5]
    assert ps.transport.calls["entries"] == 2
    push_wave(pdir, "results", 1, 1)           # pushed after wave 2 (held back for its outputs)
    push_wave(pdir, "started", 1, 1, 2, 3)
    ps.transport.calls.clear()
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == ["t1-a1", "t2-a1", "t3-a1"] and keys(found.results) == ["t1-a1"]
    assert ps.transport.calls["entries"] == 0
    assert ps.transport.calls["read_file"] == 3        # heartbeat.json and the two new waves, not 0c-2 again
    ps.transport.calls.clear()
    quiet = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert quiet.started == quiet.results == [] and ps.transport.calls["entries"] == 0


def test_a_pool_s_late_evicted_result_is_found_by_a_whole_read_and_by_the_backstop(tmp_path):
    """A per-key ``evicted`` result pushed after the pilot was first listed is no wave: the
    cursor never finds it. A read asked to be whole (the pilot's state changed, the last read)
    lists and finds it; so does, at the latest, the LIST_EVERY-th ordinary read."""
    ps, pdir = pool_pilot(tmp_path)
    cursor, seen = WaveCursor(), set()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    evicted(pdir, 7)
    assert ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor).results == []
    assert keys(ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor, whole=True).results) == ["t7-a1"]
    evicted(pdir, 8)
    ps.transport.calls.clear()
    reads = 0
    while True:
        reads += 1
        found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
        if found.results:
            break
        assert reads < LIST_EVERY, "the backstop never listed"
    assert keys(found.results) == ["t8-a1"] and reads == LIST_EVERY
    assert ps.transport.calls["entries"] == 2          # one listing of both folders in LIST_EVERY reads


def test_a_pool_s_pilots_started_together_reach_the_backstop_on_different_reads(tmp_path):
    """Five pool pilots first listed on the same read (they started together) are each listed
    again at least once in every LIST_EVERY reads, as one pilot alone, but no longer all on
    the same read: each backstop listing costs a read one pilot's folders, not five's (the
    pool's slowest read at 100,000 tasks listed five pilots at once)."""
    ps, _pdir = pool_pilot(tmp_path)
    pilots = range(5)
    for pilot in pilots[1:]:
        pdir = Path(ps.pilot_dir(RUN_KEY, pilot))
        for sub in ("started", "results"):
            (pdir / sub).mkdir(parents=True)
        for name in ("agent.json", "heartbeat.json"):
            (pdir / name).write_bytes((_pdir / name).read_bytes())
    asks = [(pilot, set(), WaveCursor()) for pilot in pilots]
    ps.collect_many(RUN_KEY, asks, heartbeat=True)          # each pilot's first read lists it
    listed_per_read = []
    for _ in range(2 * LIST_EVERY):
        ps.transport.calls.clear()
        ps.collect_many(RUN_KEY, asks, heartbeat=True)
        listed_per_read.append(ps.transport.calls["entries"] // 2)       # two folders a pilot
    assert max(listed_per_read) == 1
    for first in range(len(listed_per_read) - LIST_EVERY + 1):
        assert sum(listed_per_read[first:first + LIST_EVERY]) >= len(pilots)


def test_a_pool_s_wave_after_a_gap_is_read_by_a_listing_and_not_again_by_the_cursor(tmp_path):
    """Wave 1 is missing (its push failed) and wave 2 is there: the cursor stops at the gap,
    a whole read finds wave 2 by listing, and when wave 1 comes the cursor reads it alone."""
    ps, pdir = pool_pilot(tmp_path)
    cursor, seen = WaveCursor(), set()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    push_wave(pdir, "results", 2, 2)
    assert ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor).results == []
    assert keys(ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor, whole=True).results) == ["t2-a1"]
    push_wave(pdir, "results", 1, 1)
    push_wave(pdir, "results", 3, 3)
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.results) == ["t1-a1", "t3-a1"]


def test_a_pool_s_read_that_fails_after_its_listing_moves_nothing(tmp_path):
    """The listing and its reads came back, then the cursor's look at the waves failed: neither
    ``seen`` nor the cursor moved, so the next read returns everything, the listed per-key
    result included."""
    ps, pdir = pool_pilot(tmp_path)
    cursor, seen = WaveCursor(), set()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    evicted(pdir, 4)
    push_wave(pdir, "results", 1, 1)
    before, place = set(seen), dict(cursor.next)

    def fails(paths):
        raise OSError("connection reset")
    ps.transport.stat_files = fails
    with pytest.raises(OSError):
        ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor, whole=True)
    assert seen == before and cursor.next == place
    del ps.transport.stat_files
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor, whole=True)
    assert keys(found.results) == ["t1-a1", "t4-a1"]



def torn_wave(pdir: Path, sub: str, n: int, *tasks: int) -> None:
    """The first half of a wave of incarnation ``0c``, as a reader finds it while the wrapper
    puts it under its own name (its ``link`` refused: docs/htcondor.md); ``push_wave`` with the
    same tasks then leaves it whole."""
    push_wave(pdir, sub, n, *tasks)
    path = pdir / sub / f"0c-{n}.json"
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


@pytest.mark.parametrize("by", ["cursor", "listing"])
def test_a_pool_s_wave_read_half_written_is_read_again_and_its_records_taken_once_whole(tmp_path, by):
    """A pool's wave caught half written (by the cursor, or by the listing of the pilot's first
    read) is not bad: it is held and read again at the next read, which takes all its records
    once it is whole; the waves after it are read meanwhile, and none is read twice (before:
    reported bad at once and passed over, its task's results lost)."""
    ps, pdir = pool_pilot(tmp_path)
    cursor, seen = WaveCursor(), set()
    if by == "cursor":
        ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)     # the first read lists nothing yet
    push_wave(pdir, "started", 1, 1, 2, 3)
    torn_wave(pdir, "results", 1, 1, 2)
    push_wave(pdir, "results", 2, 3)
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.started) == ["t1-a1", "t2-a1", "t3-a1"] and keys(found.results) == ["t3-a1"]
    assert found.bad == [] and found.torn == ["results/0c-1.json"]
    push_wave(pdir, "results", 1, 1, 2)                                  # its put is over
    push_wave(pdir, "results", 3, 4)
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.results) == ["t1-a1", "t2-a1", "t4-a1"] and found.started == []
    assert found.bad == found.torn == [] and cursor.torn == {}
    ps.transport.calls.clear()
    again = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert again.started == again.results == again.bad == again.torn == []
    assert ps.transport.calls["read_file"] == 1                          # heartbeat.json only


def test_a_pool_s_wave_torn_on_every_read_up_to_the_limit_is_reported_bad_once(tmp_path):
    """A wave that stays half written (its wrapper killed in the middle of the put) is read
    again at each of TORN_READS reads, reported bad by the last of them, once, and then left as
    any bad wave; the waves after it are read all along. A read that fails does not count."""
    ps, pdir = pool_pilot(tmp_path)
    cursor, seen = WaveCursor(), set()
    ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    torn_wave(pdir, "results", 1, 1)
    push_wave(pdir, "results", 2, 2)
    reads = [ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)]

    def fails(paths):
        raise OSError("connection reset")
    ps.transport.stat_files = fails
    with pytest.raises(OSError):
        ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert cursor.torn == {"results/0c-1.json": 1}
    del ps.transport.stat_files
    push_wave(pdir, "results", 3, 3)
    reads += [ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor) for _ in range(TORN_READS - 1)]
    assert [keys(found.results) for found in reads] == [["t2-a1"], ["t3-a1"]] + [[]] * (TORN_READS - 2)
    assert all(found.bad == [] and found.torn == ["results/0c-1.json"] for found in reads[:-1])
    assert reads[-1].torn == [] and [path for path, _why in reads[-1].bad] == ["p0/results/0c-1.json"]
    why = reads[-1].bad[0][1]
    assert why.startswith("not JSON") and f"on {TORN_READS} reads in a row" in why, why
    push_wave(pdir, "results", 1, 1)                                     # too late: left, as before
    push_wave(pdir, "results", 4, 4)
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.results) == ["t4-a1"] and found.bad == found.torn == [] and cursor.torn == {}


def test_a_wave_that_is_whole_but_breaks_the_protocol_and_a_shared_filesystem_s_torn_one_are_bad_at_once(tmp_path):
    """Only a pool's wave that is not JSON is held: one that parses but is no list was written
    whole and is bad at the first read, as before; and where the agent renames its waves into
    place (a shared filesystem) one that is not JSON is never half written, so bad at once."""
    ps, pdir = pool_pilot(tmp_path)
    (pdir / "started" / "0c-1.json").write_text(json.dumps({"task": 1}))
    torn_wave(pdir, "results", 1, 1)
    found = ps.collect(RUN_KEY, 0, set(), heartbeat=True, cursor=WaveCursor())
    assert found.torn == ["results/0c-1.json"]
    assert [(path, why.startswith("a wave must be a JSON list")) for path, why in found.bad] == \
        [("p0/started/0c-1.json", True)]
    shared = tmp_path / "shared"
    shared.mkdir()
    ps = site(shared)
    pdir = Path(ps.pilot_dir(RUN_KEY, 0))
    for sub in ("started", "results"):
        (pdir / sub).mkdir(parents=True)
    (pdir / "agent.json").write_text(json.dumps({"protocol": 6, "incarnation": "0c"}))
    (pdir / "heartbeat.json").write_text(json.dumps({"time": 1.0, "incarnation": "0c", "protocol": 6}))
    torn_wave(pdir, "results", 1, 1)
    found = ps.collect(RUN_KEY, 0, set(), heartbeat=True, cursor=WaveCursor())
    assert found.torn == [] and [path for path, _why in found.bad] == ["p0/results/0c-1.json"]


def torn_evicted(pdir: Path, task: int) -> None:
    """The first half of the wrapper's per-key ``evicted`` result, as a reader finds it while
    the wrapper puts it under its own name (its ``link`` refused); ``evicted`` then leaves it
    whole."""
    evicted(pdir, task)
    path = pdir / "results" / f"t{task}-a1.json"
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


def test_a_pool_s_evicted_result_read_half_written_is_held_and_taken_once_whole(tmp_path):
    """The wrapper's per-key ``evicted`` result is put as a wave is, under its own name where
    chirp refuses ``link``: caught half written by a listing it is held, read again at each next
    read (no listing needed), its record taken once whole and never twice (before: bad at once,
    its attempt left waiting for the pilot's end); one that stays half written is reported bad
    by the TORN_READS-th read; one that parses but is no object was written whole: bad at once."""
    ps, pdir = pool_pilot(tmp_path)
    cursor, seen = WaveCursor(), set()
    torn_evicted(pdir, 5)
    torn_evicted(pdir, 6)
    (pdir / "results" / "t9-a1.json").write_text("[1, 2]")
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert found.results == [] and found.torn == ["results/t5-a1.json", "results/t6-a1.json"]
    assert [(path, why) for path, why in found.bad] == [("p0/results/t9-a1.json", "not a JSON object but list")]
    evicted(pdir, 5)                                                     # its put is over
    ps.transport.calls.clear()
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor)
    assert keys(found.results) == ["t5-a1"] and found.results[0]["reason"] == "evicted"
    assert found.torn == ["results/t6-a1.json"] and found.bad == [] and ps.transport.calls["entries"] == 0
    reads = [ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor) for _ in range(TORN_READS - 2)]
    assert all(r.results == [] for r in reads) and reads[-1].torn == []
    assert [path for path, _why in reads[-1].bad] == ["p0/results/t6-a1.json"]
    assert all(r.bad == [] and r.torn == ["results/t6-a1.json"] for r in reads[:-1])
    found = ps.collect(RUN_KEY, 0, seen, heartbeat=True, cursor=cursor, whole=True)
    assert found.results == found.bad == found.torn == [] and cursor.torn == {}


def test_wave_names():
    assert parse_wave_name("0123abcd-7.json") == ("0123abcd", 7)
    for name in ("t1-a2.json", "0123-0.json", "0123-7.json.tmp", ".0123-7.json", "0123-07.json", "XY-1.json",
                 "../x-1.json"):
        assert parse_wave_name(name) is None, name
    assert re.fullmatch(agent_module.WAVE_RE, "0123abcd-7") and not agent_module.KEY_RE.match("0123abcd-7")


# ---------------------------------------------------------------------------- the coordinator


def live_coordinator(tmp_path: Path, ps: PilotSite, **kw):
    """The real coordinator of a stored live run of four tasks on ``ps``'s one site, its store
    beside it; the engine's tasks are not what these tests are about (``foreign`` says none is)."""
    from conftest import make_bag
    from resel.live.coordinator import Coordinator
    from resel.live.stored import LiveOptions
    from resel.store import open_store, to_json

    db = open_store(tmp_path / "s.db")
    run = db["runs"].insert({"mode": "live", "bag": "b", "status": "running", "t0": 0.0, "run_key": RUN_KEY,
                             "options": json.dumps({"strategy": "model"}), "sites": "[]",
                             "bag_spec": to_json({"name": "b", "command": "true", "count": 1, "cores_per_task": 1,
                                                  "profile": {"instructions": 1e9}})}).last_pk
    coord = Coordinator(db, run, make_bag(4), [ps.site], LiveOptions(), RUN_KEY, 0.0, lambda s: ps, **kw)
    coord.findings.foreign = lambda task, attempt: None
    return db, coord


def test_a_resumed_coordinator_turns_only_what_its_journal_lacks_into_events(tmp_path):
    """The coordinator's own read (Polling.read, then Findings.file_events) on a pilot of
    protocol 6 after a resume: its fresh view's cursor reads every wave again, and of the two
    attempts in them only the one the journal does not hold yet becomes events (the consumed
    set, as a replay leaves it, holds the other's start, measure and end). A second read: nothing."""
    from resel.events import TaskFinished, TaskStarted
    from resel.live.pilot_views import PilotView
    from resel.states import PilotState

    ps = site(tmp_path)
    pdir = Path(ps.pilot_dir(RUN_KEY, 0))
    for sub in ("started", "results"):
        (pdir / sub).mkdir(parents=True)
    inc = "0abc"
    (pdir / "agent.json").write_text(json.dumps({"protocol": 6, "incarnation": inc, "started": 1.0}))
    (pdir / "heartbeat.json").write_text(json.dumps({"time": 5.0, "incarnation": inc, "started": 1.0,
                                                     "protocol": 6}))
    (pdir / "started" / f"{inc}-1.json").write_text(json.dumps(
        [{"task": t, "attempt": 1, "time": 2.0 + t, "host": "n1"} for t in (0, 1)]))
    (pdir / "results" / f"{inc}-1.json").write_text(json.dumps(
        [{"task": t, "attempt": 1, "outcome": "done", "start": 2.0 + t, "end": 4.0 + t, "exit_code": 0}
         for t in (0, 1)]))
    db, coord = live_coordinator(tmp_path, ps, clock=lambda: 7.0)
    coord.consumed |= {(kind, 0, 1) for kind in ("TaskStarted", "TaskMeasured", "TaskFinished")}   # replayed
    view = coord.pilots.setdefault(0, PilotView(0, ps.name, 4, 900.0, "1", PilotState.ACTIVE))
    found = coord.polls.read(ps.name, [view])[0]
    assert keys(found.results) == ["t0-a1", "t1-a1"]     # every wave read again
    events = coord.findings.file_events(7.0, view, found)
    assert {(type(e).__name__, e.task) for e in events} == {("TaskStarted", 1), ("TaskFinished", 1)} | (
        {("TaskMeasured", 1)} if coord.engine.learning else set())
    assert TaskStarted(time=7.0, task=1, attempt=1) in events and TaskFinished(time=7.0, task=1, attempt=1) in events
    again = coord.polls.read(ps.name, [view])[0]
    assert again.started == again.results == [] and coord.findings.file_events(8.0, view, again) == []


def test_a_pilot_s_end_gives_up_the_waves_its_cursor_held_half_written():
    # held waves are the coordinator's to report once the pilot ended (resel/live/findings.py,
    # torn_at_end): the cursor hands each over once and holds nothing after
    cursor = WaveCursor()
    cursor.hold(["results/0c-2.json", "started/0c-3.json"])
    cursor.hold(["results/0c-2.json", "started/0c-3.json"])
    assert cursor.held() == ["results/0c-2.json", "started/0c-3.json"]
    assert cursor.give_up() == ["results/0c-2.json", "started/0c-3.json"]
    assert cursor.held() == [] and cursor.give_up() == []
    assert cursor.holds("results/0c-2.json")     # a count that starts again from nothing


def test_a_pool_s_pilot_that_ends_with_a_wave_held_half_written_counts_it_as_a_bad_record(tmp_path):
    """Through the coordinator's own read and findings: a pool's wave read half written is held
    (no bad record yet); then the schedd says the pilot's job is done — its wrapper is gone and
    no read will find that wave whole, so it is counted as a bad record of the site, once
    (before: held and never reported, its records lost without a word)."""
    from resel.backends.jobs import JobInfo, JobState
    from resel.events import PilotEnded
    from resel.live.pilot_views import PilotView
    from resel.states import PilotState

    ps, pdir = pool_pilot(tmp_path)
    torn_wave(pdir, "results", 1, 1)
    db, coord = live_coordinator(tmp_path, ps, clock=lambda: 7.0)
    view = coord.pilots.setdefault(0, PilotView(0, ps.name, 1, 900.0, "1", PilotState.ACTIVE))
    found = coord.polls.read(ps.name, [view])[0]
    assert found.torn == ["results/0c-1.json"] and found.bad == []
    coord.findings.site_events(7.0, ([view], None, {0: found}))        # a read of the files alone
    assert coord.health.views[ps.name].bad_records == 0 and view.cursor.held() == ["results/0c-1.json"]
    done = JobInfo("1", f"resel-{RUN_KEY}-p0", JobState.DONE, 0.0, 1.0, 6.0, 900.0, 1, None, "me")
    ended = coord.findings.site_events(8.0, ([view], {"1": done}, {}))
    assert [type(e) for e in ended] == [PilotEnded] and view.state is PilotState.ENDED
    assert coord.health.views[ps.name].bad_records == 1 and view.cursor.held() == []
    notes = [r["detail"] for r in db.query("select detail from live_notes where kind = 'bad-record'")]
    assert notes == ["p0/results/0c-1.json: not JSON when its pilot ended (read half written)"], notes
    coord.findings.site_events(9.0, ([view], {"1": done}, {}))
    assert coord.health.views[ps.name].bad_records == 1


def test_the_last_read_of_a_run_counts_a_pool_wave_still_held_half_written_as_a_bad_record(tmp_path):
    """The bag's last read (Ending.last_read, on the coordinator's file workers) finds a pool's
    wave half written and no read comes after it: the wave is one bad record with its note,
    not held and forgotten."""
    from resel.live.pilot_views import PilotView
    from resel.states import PilotState

    ps, pdir = pool_pilot(tmp_path)
    torn_wave(pdir, "results", 1, 1)           # no attempt left open: one read, no second look
    db, coord = live_coordinator(tmp_path, ps)
    view = coord.pilots.setdefault(0, PilotView(0, ps.name, 1, 900.0, "1", PilotState.ACTIVE))
    try:
        coord.ending.last_read(wait=5.0)
    finally:
        coord._stop_workers()
    assert view.cursor.held() == [] and coord.health.views[ps.name].bad_records == 1
    notes = [r["detail"] for r in db.query("select detail from live_notes where kind = 'bad-record'")]
    assert notes == ["p0/results/0c-1.json: not JSON when its pilot ended (read half written)"], notes
