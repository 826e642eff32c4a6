"""The queue twin through slurmrestd (issue 8) against the real testbed: cluster ``tba``
(8 CPUs, Slurm 22.05, ``sched/backfill``) read through its slurmrestd (API v0.0.38, JWT).

slurmrestd v0.0.38 has no endpoint that reports ``SchedulerType``: the REST snapshot's policy
is conservative, and its notes say what that rests on (here ``/diag``'s backfill statistics).
Every job submitted here is named ``NAME`` and cancelled by name at the end.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys

import pytest
from resel.backends.slurm.formats import SchedulerError
from resel.backends.slurm.rest import SlurmREST
from resel.models.twin import twin_start

from live_helpers import REPO, fill, sites_toml, slurm, wait_for, write_inputs
from recorded import RecordedSession, Response
from test_slurm_live import cli_a, idle, rest

NAME = "resel-twinrest"


@pytest.fixture
def clean(testbed):
    yield testbed
    slurm(testbed, "a", "scancel", "-n", NAME, check=False)
    slurm(testbed, "a", "scancel", "-n", "filler", check=False)


def _sbatch(tb, *opts: str) -> str:
    out = slurm(tb, "a", "sbatch", "--parsable", "-J", NAME, "-o", "/dev/null", *opts, "--wrap", "sleep 60")
    return out.stdout.strip().split(";")[0]


def _state(tb, jid: str) -> str:
    return slurm(tb, "a", "squeue", "-h", "-j", jid, "-o", "%T", check=False).stdout.strip()


def _shape(snap):
    return ([(j.job_id, j.cores, j.time_limit, j.user) for j in snap.running],
            [(j.job_id, j.cores, j.time_limit, j.user) for j in snap.pending])


def test_rest_snapshot_equals_the_cli_snapshot(clean):
    """A filler runs on 6 cores; two jobs wait for cores (8, then 4), one is held. Read at the
    same moment, slurmrestd's snapshot and squeue's are the same queue."""
    testbed = clean
    cli, r = cli_a(testbed), rest(testbed)
    idle(cli, 8)
    filler = _sbatch(testbed, "-n", "6", "-t", "2")
    assert wait_for(lambda: _state(testbed, filler) == "RUNNING"), _state(testbed, filler)
    big = _sbatch(testbed, "-n", "8", "-t", "3")
    small = _sbatch(testbed, "-n", "4", "-t", "1")
    held = _sbatch(testbed, "-n", "1", "-t", "1", "-H")
    assert wait_for(lambda: _state(testbed, small) == "PENDING" and _state(testbed, held) == "PENDING")

    via_rest, via_cli = r.queue_snapshot(), cli.queue_snapshot()

    me = getpass.getuser()                            # sbatch ran here, as this user
    assert _shape(via_rest) == _shape(via_cli) == (
        [(filler, 6, 120.0, me)], [(big, 8, 180.0, me), (small, 4, 60.0, me)])
    for a, b in zip(via_rest.running, via_cli.running):
        assert abs(a.elapsed - b.elapsed) <= 2.0, (a, b)
    assert abs(via_rest.taken_at - via_cli.taken_at) <= 2.0
    for field in ("site", "total_cores", "policy", "default_limit"):
        assert getattr(via_rest, field) == getattr(via_cli, field), field
    assert via_rest.site == "debug" and via_rest.total_cores == 8 and via_rest.policy == "conservative"
    # the same jobs left out, for the same reason; REST adds what its policy rests on
    assert "1 job(s) left out: pending for JobHeldUser" in via_cli.notes
    assert via_rest.notes[:-1] == via_cli.notes
    assert "does not report SchedulerType" in via_rest.notes[-1] and "backfill" in via_rest.notes[-1]
    assert via_rest.notes[-1].startswith("policy conservative: ")   # the testbed has backfilled jobs

    # the same queue, so the same prediction: the 1-core pilot backfills into the 2 free cores
    # only if it ends before the 8-core job's planned start (the filler's end)
    for cores, walltime in ((1, 60), (2, 600)):
        t_rest, t_cli = twin_start(via_rest, cores, walltime), twin_start(via_cli, cores, walltime)
        assert abs(t_rest.wait - t_cli.wait) <= 2.0 and t_rest.ahead == t_cli.ahead, (t_rest, t_cli)


def test_plan_through_a_rest_site_uses_the_twin(tmp_path, clean):
    """`resel plan` with tba reached through slurmrestd: tba is full for 5 minutes of limit, so
    its twin says the pilot waits; tbb (SSH, CLI) is idle and gets the bag. slurmrestd cannot
    answer test_only: the rest site's scheduler estimate is missing, and said to be."""
    testbed = clean
    fill(testbed, "a", 8, 120)
    over = {"api": "rest", "rest_url": testbed.rest_url, "rest_user": testbed.rest_user,
            "rest_token_file": testbed.rest_token_file}
    sites, bag = write_inputs(tmp_path, sites_toml(testbed, a=over),
                              '[bag]\nname = "t"\ncommand = "echo hi"\ncount = 4\n\n'
                              '[bag.profile]\ninstructions = 4e9\n')
    res = subprocess.run([sys.executable, "-m", "resel.cli", "plan", str(bag), "--sites", str(sites), "--json",
                          "--db", str(tmp_path / "db")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = {r["site"]: r for r in doc["sites"]}
    a, b = rows["tba"], rows["tbb"]
    assert a["error"] is None, a
    assert a["twin_s"] is not None and a["twin_s"] > 200, a          # behind the filler's 5-minute limit
    assert "conservative twin of debug" in a["twin_note"] and "does not report SchedulerType" in a["twin_note"]
    assert a["scheduler_s"] is None and a["scheduler_note"] == "the scheduler gave no estimate"
    assert a["used"] == "twin" and all(e["twin_s"] is not None for e in a["menu"])
    assert b["twin_s"] is not None and b["twin_s"] < 30
    assert b["role"] == "origin" and b["tasks"] == 4 and doc["submitted"] is False


# ---------------------------------------------------------------- without the testbed: the policy's note


#: canned v0.0.38 replies by path (CONSTRUCTED in slurmrestd's layout)
REPLIES = {
    "partitions": {"partitions": [{"name": "debug", "flags": ["default"], "max_time_limit": 60,
                                   "state": "UP", "total_cpus": 4, "total_nodes": 1}]},
    "nodes": {"nodes": [{"name": "n1", "cpus": 4, "alloc_cpus": 2, "idle_cpus": 2, "state": "mixed",
                         "partitions": ["debug"]}]},
    "jobs": {"jobs": [{"job_id": 7, "name": "x", "job_state": "RUNNING", "cpus": 2, "time_limit": 10,
                       "start_time": 1000, "partition": "debug", "user_name": "u", "priority": 5},
                      {"job_id": 6, "name": "y", "job_state": "CANCELLED", "cpus": 0, "time_limit": 10,
                       "partition": "debug", "user_name": "u"}]},
}


def _rest(diag, **kw):
    """``diag``: /diag's document (read when asked, so a test may change it), or its Response."""
    replies = {path: Response.of(doc) for path, doc in REPLIES.items()}
    replies["diag"] = diag if isinstance(diag, Response) else (lambda path: Response.of(diag))
    session = RecordedSession(replies, key=lambda url: url.rsplit("/", 1)[1])
    return SlurmREST("https://site:6820", "u", "token", session=session, **kw), session


def test_rest_policy_is_assumed_and_said_to_be_without_backfill_evidence():
    idle = {"statistics": {"bf_cycle_counter": 0, "bf_backfilled_jobs": 0, "bf_when_last_cycle": 0}}
    r, session = _rest(idle)
    assert r.scheduler_policy() == "conservative"
    snap = r.queue_snapshot()
    assert snap.policy == "conservative" and snap.total_cores == 4 and snap.default_limit == 3600
    assert [(j.job_id, j.cores, j.time_limit) for j in snap.running] == [("7", 2, 600.0)]
    assert len(snap.notes) == 1                    # the finished job 6 is not the queue's, not even a note
    assert snap.notes[-1].startswith("policy assumed conservative") and "/diag shows no backfill" in snap.notes[-1]
    # backfill seen once is remembered: /diag is not asked again
    idle["statistics"]["bf_cycle_counter"] = 3
    assert r.queue_snapshot().notes[-1].startswith("policy conservative: ")
    r.queue_snapshot()
    assert session.asked.count("diag") == 2

    denied = Response.of({"errors": [{"error": "Access denied", "error_number": 1}]}, status=403)
    r, _ = _rest(denied)
    note = r.queue_snapshot().notes[-1]
    assert note.startswith("policy assumed conservative") and "/diag could not be read" in note


def test_rest_snapshot_refuses_an_unknown_partition():
    r, _ = _rest({"statistics": {}}, partition="nope")
    with pytest.raises(SchedulerError, match="partition nope not found; the site has: debug"):
        r.queue_snapshot()
