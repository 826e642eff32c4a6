"""Peer strategies on the live testbed (issue 17): the engine's own timers and the race's
cancellations go through the real coordinator to two real Slurm clusters (tba local, tbb over SSH).
"""

from __future__ import annotations

import pytest

from live_helpers import bag_toml, cancel_leftovers, our_jobs, sites_toml, slurm, start

CMD = "sleep 1; echo task $RESEL_TASK on $RESEL_SITE"


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(testbed, tmp_path):
    yield
    cancel_leftovers(testbed, tmp_path)


def hold(tb, cluster: str, cores: int = 8, seconds: int = 90) -> str:
    """Another user's job of ``cores`` for ``seconds``, queued ahead of our pilot (running or not:
    the testbed is shared, so we do not wait for it to start — queued first, it keeps our
    later, longer pilot from starting either way)."""
    out = slurm(tb, cluster, "sbatch", "--parsable", "-J", "filler", "-n", str(cores), "-t", "5",
                "-o", "/dev/null", "--wrap", f"sleep {seconds}").stdout
    return out.strip().split(";")[0]


def _decisions(coord) -> list[dict]:
    return list(coord.db.query("select * from decisions where run_id = ? and kind != 'assign'", [coord.run_id]))


def _done_on(coord) -> dict[str, int]:
    rows = coord.db.query("select site, count(*) as n from attempts where run_id = ? and outcome = 'done' "
                          "group by site", [coord.run_id])
    return {r["site"]: r["n"] for r in rows}


def test_failover_moves_the_bag_when_nothing_starts_in_time(tmp_path, testbed):
    """tba (the faster clock, ranked first) is full: after T = 5 s its pilot is cancelled and the
    bag is submitted to tbb, through the engine's own timer (task −1) carried by the coordinator."""
    filler = hold(testbed, "a")
    try:
        coord = start(tmp_path, sites_toml(testbed), bag_toml(6, CMD), strategy="failover:5")
        coord.run(max_time=120)
        coord.close()
    finally:
        slurm(testbed, "a", "scancel", filler, check=False)
    run = coord.db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 6
    moves = [d for d in _decisions(coord) if d["kind"] == "failover"]
    assert moves and moves[0]["origin"] == "tba" and moves[0]["target"] == "tbb"
    assert moves[0]["time"] >= 5.0
    assert _done_on(coord) == {"tbb": 6}
    assert our_jobs(testbed, coord.run_key) == []


def test_race_keeps_the_first_cluster_and_cancels_the_other(tmp_path, testbed):
    """Both clusters are asked for the bag's pilot; tba is full, tbb starts first and keeps the
    whole bag; tba's pending pilot is cancelled (scancel) when tbb starts."""
    filler = hold(testbed, "a")
    try:
        coord = start(tmp_path, sites_toml(testbed), bag_toml(6, CMD), strategy="race")
        coord.run(max_time=120)
        coord.close()
    finally:
        slurm(testbed, "a", "scancel", filler, check=False)
    run = coord.db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 6
    assert _done_on(coord) == {"tbb": 6}
    assert any(d["kind"] == "race-closed" and d["origin"] == "tbb" for d in _decisions(coord))
    pilots = {p["site"] for p in coord.db.query("select site from live_pilots where run_id = ?", [coord.run_id])}
    assert pilots == {"tba", "tbb"}          # both were asked
    assert our_jobs(testbed, coord.run_key) == []
