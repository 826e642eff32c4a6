"""One bad record never stops a run (issue 13 §2), through the real coordinator and store:

* records that break the agent's protocol in a pilot's directory (a stray inbox/README.json,
  a result for a task the run does not have, malformed JSON, wrong types) are logged, counted
  in `resel status`, skipped — also by `--resume`;
* job states resel does not know (Slurm's SIGNALING, STAGE_OUT, RESV_DEL_HOLD, a word a newer
  Slurm adds; a PBS letter; an HTCondor JobStatus code) are never taken as "pilot ended";
* a dispatch that fails for good fails the task with its reason instead of being retried
  forever; a transient one is retried.

Slurm and PBS (Slurm's Torque wrappers) run live on the testbed with their real replies, one
field rewritten; no HTCondor pool runs here, so its schedd's replies are constructed in the
real ``-json`` format (tests/htcondor_samples.py) and read by the real parser, while a real
agent runs the pilot.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_files import run_records
from htcondor_samples import CONSTRUCTED_SCHEDDS, CONSTRUCTED_VERSION, as_json, constructed_status_json
from live_helpers import (
    REPO, bag_toml, cancel_leftovers, done_results, opener_with, our_jobs, sites_toml, start, wait_for, write_inputs,
)
from resel.live import notes as live_notes
from resel.states import PilotState
from resel.backends.connect import open_site
from resel.backends.pilotsite import WAVE_LIMIT
from resel.backends.transport import Completed, LocalTransport
from resel.errors import AuthError, ConnectionLost, SchedulerError, SchedulerReplyError, TransportError
from resel.live.errors import is_transient
from resel.store import open_store

RESEL = [sys.executable, "-m", "resel.cli"]


@pytest.fixture(autouse=True)
def _no_pilot_left_behind(request, tmp_path):
    yield
    if "testbed" in request.fixturenames:
        cancel_leftovers(request.getfixturevalue("testbed"), tmp_path)


def resel(*args, timeout=240):
    return subprocess.run(RESEL + [str(a) for a in args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def kinds(db, run_id: int) -> list[str]:
    return [r["kind"] for r in db.query("select kind from events where run_id = ? order by seq", [run_id])]


# ---------------------------------------------------------------------- bad records
def test_bad_records_are_skipped_counted_and_survive_a_resume(tmp_path, testbed):
    """Six records that break the protocol (one of 2 GiB) land in a running pilot's directory; the
    coordinator is killed and resumed: both skip them, the bag finishes, `resel status`
    counts them on that site (before: a crash, and the same crash on every resume).

    Agent protocol 6: the agent's own bad record (a README.json in its inbox) is in one of its
    waves, read while the coordinator runs; the others are waves of an incarnation no agent had
    (``0bad``), which a running coordinator never lists for (it lists a pilot only when an
    unknown incarnation shows up) but the resumed one finds in its first listing."""
    sites, bag = write_inputs(tmp_path, sites_toml(testbed, clock_b=2.0), bag_toml(40, "sleep 1"))
    db_path = tmp_path / "resel.db"
    cmd = RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db_path), "--poll", "0.3",
                   "--strategy", "topk:2", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        db = open_store(db_path)
        row = wait_for(lambda: list(db.query("select p.pilot, r.run_key, r.id from live_pilots p join runs r "
                                             "on r.id = p.run_id where p.site = 'tba' and p.started is not null")),
                       timeout=90)
        assert row, proc.stderr.read() if proc.poll() is not None else "no tba pilot started"
        pilot, run_key, run_id = row[0]["pilot"], row[0]["run_key"], row[0]["id"]
        pdir = Path(testbed.work_a, run_key, f"p{pilot}")
        assert wait_for(lambda: (pdir / "heartbeat.json").exists(), timeout=30)     # the agent made its folders
        (pdir / "inbox" / "README.json").write_text("this folder is resel's\n")       # the agent fails it
        (pdir / "results" / "0bad-1.json").write_text(json.dumps([
            {"task": 999, "attempt": 1, "outcome": "failed", "start": 1.0, "end": 2.0},    # no such task
            {"task": "1", "attempt": 9, "outcome": 5}]))                                    # wrong types
        (pdir / "results" / "0bad-2.json").write_text("[{not json")                        # malformed
        (pdir / "started" / "0bad-1.json").write_text(json.dumps([{"task": 2, "attempt": 8, "time": "noon"}]))
        with open(pdir / "results" / "0bad-3.json", "wb") as big:                         # 2 GiB, sparse:
            big.truncate(2 << 30)                                                          # never read
        assert wait_for(lambda: len([r for r in db.query("select key from live_notes where kind = 'bad-record'")])
                        >= 1, timeout=30)                                                  # the README's
        assert proc.poll() is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    res = resel("run", "--resume", run_id, "--db", db_path, "--json", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and json.loads(res.stdout)["done"] == 40
    status = json.loads(resel("status", run_id, "--db", db_path, "--json").stdout)
    rows = {s["site"]: s for s in status["sites"]}
    assert rows["tba"]["bad_records"] == 6 and rows["tbb"]["bad_records"] == 0, rows
    table = resel("status", run_id, "--db", db_path).stdout
    assert "6 bad record(s) skipped" in table
    notes = {r["key"]: r["detail"] for r in db.query("select key, detail from live_notes where kind = 'bad-record'")}
    assert any("README.json" in k and "non-negative integers" in v for k, v in notes.items()), notes
    assert any("t999-a1" in k and "no task 999" in v for k, v in notes.items()), notes
    assert any("0bad-1.json record 2" in k and "non-negative integers" in v for k, v in notes.items()), notes
    assert any("0bad-2" in k and "not JSON" in v for k, v in notes.items()), notes
    assert any("started/0bad-1" in k and "time must be a number" in v for k, v in notes.items()), notes
    assert any("0bad-3" in k and f"longer than {WAVE_LIMIT:,} bytes" in v for k, v in notes.items()), notes
    assert done_results(testbed, run_key) == {i: 1 for i in range(40)}
    assert our_jobs(testbed, run_key) == []


# ---------------------------------------------------------------------- unknown job states
SLURM_STATES = ["SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "A_STATE_OF_A_NEWER_SLURM"]


def test_unknown_slurm_states_are_never_taken_as_the_end(tmp_path, testbed):
    """While tasks run on tba's pilot, squeue's real reply (the poll's text form) says SIGNALING, then STAGE_OUT,
    RESV_DEL_HOLD and a word no Slurm has yet, ~1.5 s each: the pilot is not ended, its tasks
    are not requeued (before: each of these ended the pilot and its tasks ran again), the state
    is shown while it lasts; the bag finishes, each task once."""
    plan = {"state": None}

    def rule(argv, out):
        # the poll asks squeue for our job ids in its text form: %i|%j|%T|… (SQUEUE_TEXT_FORMAT)
        if plan["state"] and argv[:2] == ["squeue", "-h"] and any(a.startswith("--jobs=") for a in argv):
            lines = out.split("\n")
            for i, line in enumerate(lines):
                fields = line.split("|")
                if len(fields) > 2 and fields[1].startswith(f"resel-{plan['key']}-"):
                    fields[2] = plan["state"]
                    lines[i] = "|".join(fields)
            return "\n".join(lines)
        return out
    # 24 x 5 s tasks keep tba's 8 slots busy for ~15 s: long enough for the four states (~1.5 s
    # each, after 4 tasks run) and the return to RUNNING to be polled before the bag is done,
    # even on a loaded machine (2 s tasks left the last state in place at the end)
    coord = start(tmp_path, sites_toml(testbed), bag_toml(24, "sleep 5; echo $RESEL_TASK"), strategy="model",
                  opener=opener_with(rule, ("tba",)))
    plan["key"] = coord.run_key
    seen: dict[str, list[str]] = {}
    schedule = {"next": 0, "since": None}

    def on_cycle(co):
        now = co.now()
        if plan["state"]:
            notes = live_notes.read(co.db, co.run_id).get("tba")
            seen.setdefault(plan["state"], []).extend(notes.lines if notes else [])
        if schedule["next"] < len(SLURM_STATES):
            if schedule["since"] is None and sum(t.state.value == "running" for t in co.engine.tasks) < 4:
                return
            # the next state once this one was shown (≥ 1.5 s) — a poll under load can take
            # longer than 1.5 s, and one begun before the change does not count — at most 15 s
            shown = plan["state"] and any(f"in state {plan['state']}" in line for line in seen.get(plan["state"], []))
            if (schedule["since"] is None or (shown and now - schedule["since"] >= 1.5)
                    or now - schedule["since"] >= 15):
                plan["state"] = SLURM_STATES[schedule["next"]]
                schedule["next"] += 1
                schedule["since"] = now
        elif plan["state"] and now - schedule["since"] >= 1.5 and (
                any(f"in state {plan['state']}" in line for line in seen.get(plan["state"], []))
                or now - schedule["since"] >= 15):
            plan["state"] = None
    coord.run(on_cycle=on_cycle, max_time=200)
    coord.close()
    events = kinds(coord.db, coord.run_id)
    assert "PilotRequeued" not in events
    ended_at = [i for i, k in enumerate(events) if k == "PilotEnded"]
    assert not ended_at or ended_at[0] > events.index("BagDone"), events      # only after the bag
    for state in SLURM_STATES:
        assert any(f"in state {state}" in line for line in seen.get(state, [])), (state, seen)
    assert live_notes.read(coord.db, coord.run_id).get("tba") is None or not any(
        "state" in line for line in live_notes.read(coord.db, coord.run_id)["tba"].lines)
    run = coord.db["runs"].get(coord.run_id)
    assert run["done"] == 24 and done_results(testbed, coord.run_key) == {i: 1 for i in range(24)}


def test_an_unknown_pbs_state_letter_is_never_taken_as_the_end(tmp_path, testbed):
    """tbb driven as a PBS site through Slurm's real Torque wrappers: `qstat -f` says
    `job_state = Z` (no PBS has that letter) for a few seconds while tasks run; the pilot
    goes on, the state is shown, the bag finishes with each task once."""
    plan = {"on": False}

    def rule(argv, out):
        if plan["on"] and argv[:2] == ["qstat", "-f"]:        # the poll: qstat -f ID…
            blocks = out.split("\n\n")
            for i, block in enumerate(blocks):
                if f"Job_Name = resel-{plan['key']}-" in block:
                    blocks[i] = re.sub(r"job_state = \w", "job_state = Z", block)
            return "\n\n".join(blocks)
        return out
    sites = sites_toml(testbed, kind_b="pbs", b={"dialect": "torque", "workdir": "~/resel-work-pbs"}, clock_b=4.0)
    coord = start(tmp_path, sites, bag_toml(12, "sleep 2; echo $RESEL_TASK"), strategy="model",
                  opener=opener_with(rule, ("tbb",)))
    plan["key"] = coord.run_key
    seen, window = [], {}

    def on_cycle(co):
        running = sum(t.state.value == "running" for t in co.engine.tasks)
        if "from" not in window and running >= 4:
            plan["on"], window["from"] = True, co.now()
        elif "from" in window and "to" not in window:
            notes = live_notes.read(co.db, co.run_id).get("tbb")
            seen.extend(notes.lines if notes else [])
            # until a poll has shown the state (one qstat -f over SSH: ~0.5 s idle, 2 s and
            # more under load; a poll begun before the window does not count), at most 30 s
            shown = any("in state Z (unknown)" in line for line in seen)
            if (shown and co.now() - window["from"] >= 4) or co.now() - window["from"] >= 30:
                plan["on"], window["to"] = False, co.now()
    coord.run(on_cycle=on_cycle, max_time=200)
    coord.close()
    events = kinds(coord.db, coord.run_id)
    assert "PilotRequeued" not in events
    ended = [i for i, k in enumerate(events) if k == "PilotEnded"]
    assert not ended or ended[0] > events.index("BagDone"), events
    assert any("in state Z (unknown)" in line for line in seen), seen
    work_b = testbed.work_b.replace("resel-work", "resel-work-pbs")
    assert done_results(testbed, coord.run_key, work_b) == {i: 1 for i in range(12)}


class ScriptedSchedd:
    """An HTCondor access point without HTCondor: the schedd's replies are CONSTRUCTED in the
    real ``-json``/``-terse`` formats (read by the real parser), files are local, and a
    submitted pilot really runs — the resel agent, started here as the slot would start it.
    ``override[job] = code`` makes condor_q report that JobStatus for the job."""

    def __init__(self):
        self.local = LocalTransport()
        self.agents: dict[str, subprocess.Popen] = {}
        self.override: dict[str, int] = {}
        self.next = 4300

    def run(self, argv, *, env=None, input=None, timeout=None, idempotent=False, cwd=None):
        tool = argv[0]
        if tool == "condor_version":
            return self._ok(argv, CONSTRUCTED_VERSION)
        if tool == "condor_status":
            return self._ok(argv, as_json(CONSTRUCTED_SCHEDDS) if "-schedd" in argv else constructed_status_json())
        if tool == "condor_submit":
            return self._ok(argv, self._submit(input))
        if tool in ("condor_q", "condor_history"):
            ids = [a for a in argv if re.fullmatch(r"\d+\.\d+", a)]
            return self._ok(argv, as_json([ad for jid in ids if (ad := self._ad(jid, tool))]))
        if tool == "condor_rm":
            for jid in argv[1:]:
                if jid in self.agents and self.agents[jid].poll() is None:
                    self.agents[jid].send_signal(signal.SIGTERM)
            return self._ok(argv, "".join(f"Job {j} marked for removal\n" for j in argv[1:]))
        return self.local.run(argv, env=env, input=input, timeout=timeout, idempotent=idempotent)

    def _ok(self, argv, out):
        return Completed(tuple(argv), 0, out, "")

    def _submit(self, desc: str) -> str:
        kv = dict(line.split(" = ", 1) for line in desc.splitlines() if " = " in line)
        words = shlex.split(kv["arguments"].strip('"').replace("''", "'\\''"))
        agent = kv["transfer_input_files"].split(",")[0].strip()
        args = words[words.index("--") + 1:]
        jid = f"{self.next}.0"
        self.next += 1
        self.agents[jid] = subprocess.Popen([sys.executable, agent, "--dir", kv["initialdir"], *args,
                                             "--poll", "0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.names = getattr(self, "names", {})
        self.names[jid] = kv["batch_name"]
        return f"{jid} - {jid}\n"

    def _ad(self, jid: str, tool: str):
        proc = self.agents.get(jid)
        if proc is None:
            return None
        alive = proc.poll() is None
        if tool == "condor_q" and not alive:
            return None
        if tool == "condor_history" and alive:
            return None
        status = self.override.get(jid, 2 if alive else 4)
        cluster = int(jid.split(".")[0])
        return {"ClusterId": cluster, "ProcId": 0, "JobStatus": status, "JobBatchName": self.names[jid],
                "Owner": "resel", "QDate": int(time.time()) - 5, "JobCurrentStartDate": int(time.time()) - 4,
                "EnteredCurrentStatus": int(time.time()) - 1, "RequestCpus": 1, "ExitCode": 0,
                "ExitBySignal": False, "CompletionDate": 0 if alive else int(time.time())}

    # files go through the local filesystem
    def __getattr__(self, name):
        return getattr(self.local, name)

    def close(self):
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_an_unknown_htcondor_jobstatus_is_never_taken_as_the_end(tmp_path):
    """JobStatus 8 (in no HTCondor table resel knows) for a running pilot: not ended, shown,
    polled on; back to 2, the bag finishes, each task once."""
    schedd = ScriptedSchedd()
    work = tmp_path / "ap"
    sites = (f'[[site]]\nname = "osg"\nkind = "htcondor"\ncores = 4\nclock = {{ base = 2.0 }}\n'
             f'pilot = {{ mode = "per-task", max_pilots = 2, walltime = 600 }}\n'
             f'access = {{ transport = "local", workdir = "{work}" }}\n')

    def opener(site):
        ps = open_site(site)
        ps.transport = schedd
        ps.scheduler.transport = schedd
        return ps
    try:
        coord = start(tmp_path, sites, bag_toml(6, "sleep 1.5; echo $RESEL_TASK"), strategy="model", opener=opener)
        seen, window = [], {}

        def on_cycle(co):
            running = [v for v in co.pilots.values() if v.state is PilotState.ACTIVE and v.job_id]
            if "from" not in window and running and any(t.state.value == "running" for t in co.engine.tasks):
                window["from"], window["job"] = co.now(), running[0].job_id
                schedd.override[running[0].job_id] = 8
            elif "from" in window and "to" not in window:
                notes = live_notes.read(co.db, co.run_id).get("osg")
                seen.extend(notes.lines if notes else [])
                if co.now() - window["from"] >= 2.5:
                    del schedd.override[window["job"]]
                    window["to"] = co.now()
        coord.run(on_cycle=on_cycle, max_time=120)
        coord.close()
    finally:
        schedd.close()
    events = kinds(coord.db, coord.run_id)
    ended = [i for i, k in enumerate(events) if k == "PilotEnded"]
    assert not ended or ended[0] > events.index("BagDone"), events
    assert any("in state JobStatus 8 (unknown)" in line for line in seen), seen
    counts: dict[int, int] = {}
    for rec in run_records(Path(work, coord.run_key)):
        if rec["outcome"] == "done":
            counts[rec["task"]] = counts.get(rec["task"], 0) + 1
    assert counts == {i: 1 for i in range(6)}


# ---------------------------------------------------------------------- failures, classified
@pytest.mark.parametrize("exc, transient", [
    (ConnectionLost("ssh:tbb: connection lost while 'sbatch' was running"), True),
    (TransportError("ssh:tbb: cannot reach 127.0.0.1:1"), True),
    (AuthError("ssh:tbb: the server refused the key"), False),
    (SchedulerError("squeue failed: slurm_load_jobs error: Socket timed out on send/recv operation"), True),
    (SchedulerError("sbatch refused the job: Unable to contact slurm controller (connect failure)"), True),
    (SchedulerError("sbatch refused the job: Invalid partition name specified"), False),
    (SchedulerError("sbatch refused the job: Job violates accounting/QOS policy"), False),
    (SchedulerReplyError("squeue --json", "expected an object"), True),
    (PermissionError(errno.EACCES, "Permission denied"), False),
    (OSError(errno.ENOSPC, "No space left on device"), False),
    (FileNotFoundError(errno.ENOENT, "No such file"), False),
    (OSError(errno.EIO, "Input/output error"), True),
    (TimeoutError("timed out"), True),
    (socket.timeout("timed out"), True),
    (KeyError("HOME"), False),                 # a command template that cannot be filled
    (ValueError("bad"), False),
])
def test_failures_are_transient_or_not_explicitly(exc, transient):
    assert is_transient(exc) is transient


def test_a_dispatch_refused_for_good_fails_the_task_with_its_reason(tmp_path, testbed):
    """tbb's pilot inbox is made root's (permission denied for the SSH user, a real refusal by
    the real sftp server): each dispatch there fails at once with that reason. Five such failures
    of five make tbb a black hole (docs/engine.md): it is quarantined, its tasks move to tba and
    the whole bag is done there — before issue 18 the four tasks of tbb were failed."""
    def opener(site):
        ps = open_site(site)
        if site.name == "tbb":
            submit = ps.submit_pilot

            def submit_then_lock(run_key, pilot, *args, **kw):
                job = submit(run_key, pilot, *args, **kw)
                inbox = Path(testbed.work_b, run_key, f"p{int(pilot)}", "inbox")
                os.chown(inbox, 0, 0)
                os.chmod(inbox, 0o755)
                return job
            ps.submit_pilot = submit_then_lock
        return ps
    coord = start(tmp_path, sites_toml(testbed, clock_b=2.0), bag_toml(8, "echo $RESEL_TASK"), strategy="topk:2",
                  opener=opener)
    coord.run(max_time=180)
    coord.close()
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert run["status"] == "done" and run["done"] == 8 and run["failed"] == 0, run
    failed = list(db.query("select task, attempt, reason from attempts where run_id = ? and site = 'tbb' "
                           "and outcome = 'failed'", [coord.run_id]))
    assert {r["task"] for r in failed} == {1, 3, 5, 7} and len(failed) >= 5
    assert all("dispatch failed" in r["reason"] and "Permission denied" in r["reason"] for r in failed), failed
    quarantined = [json.loads(r["data"]) for r in db.query(
        "select data from events where run_id = ? and kind = 'SiteQuarantined'", [coord.run_id])]
    assert [q["site"] for q in quarantined] == ["tbb"], quarantined
    assert not list(db.query("select 1 from attempts where run_id = ? and site = 'tbb' and outcome = 'done'",
                             [coord.run_id]))
    undone = list(db.query("select count(*) as n from events where run_id = ? and done = 0", [coord.run_id]))
    assert undone[0]["n"] == 0


# ---------------------------------------------------------------------- files the agent refused
def test_files_the_agent_refused_are_shown_per_site(tmp_path, testbed):
    """A link planted in a running pilot's inbox (what another user or a careless script could
    leave) is never run by the agent (resel/shipped/agent.py, docs/security.md); the coordinator reads
    the agent's count from its heartbeat and `resel status` shows it on that site — before, only
    rejected.json on the site knew."""
    sites, bag = write_inputs(tmp_path, sites_toml(testbed, clock_b=2.0), bag_toml(16, "sleep 2"))
    db_path = tmp_path / "resel.db"
    cmd = RESEL + ["run", str(bag), "--sites", str(sites), "--db", str(db_path), "--poll", "0.3",
                   "--strategy", "model", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        db = open_store(db_path)
        row = wait_for(lambda: list(db.query("select p.pilot, r.run_key, r.id from live_pilots p join runs r "
                                             "on r.id = p.run_id where p.site = 'tba' and p.started is not null")),
                       timeout=90)
        assert row, proc.stderr.read() if proc.poll() is not None else "no tba pilot started"
        pilot, run_key, run_id = row[0]["pilot"], row[0]["run_key"], row[0]["id"]
        pdir = Path(testbed.work_a, run_key, f"p{pilot}")
        assert wait_for(lambda: (pdir / "heartbeat.json").exists(), timeout=30)
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"task": 0, "attempt": 9, "command": f"touch {tmp_path}/ran"}))
        (pdir / "inbox" / "t0-a9.json").symlink_to(target)
        assert wait_for(lambda: list(db.query("select detail from live_notes where kind = 'rejected'")),
                        timeout=30), "the coordinator never showed the refused file"
        assert proc.wait(timeout=180) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (tmp_path / "ran").exists()
    status = resel("status", run_id, "--db", db_path)
    assert "refused 1 file(s) that are not your own" in " ".join(status.stdout.split()), status.stdout
    assert done_results(testbed, run_key) == {i: 1 for i in range(16)}


def _record(task: int, attempt: int) -> bytes:
    return json.dumps({"task": task, "attempt": attempt, "exit_code": 0, "start": 1.0, "end": 2.0,
                       "outcome": "done"}).encode()


@pytest.mark.skipif(os.geteuid() != 0, reason="plants files of other users: needs root")
@pytest.mark.parametrize("where", ["local", "ssh"])
def test_a_record_that_is_not_a_regular_file_of_the_sites_user_is_not_read(tmp_path, testbed, where):
    """Only the user's agent writes a pilot's started/ and results/ (the folders are 0700): a
    record another user owns, or a link, is someone else's doing — a forged "done" — and is
    never read, only listed as a bad record. Locally (tba, as root: the other user is nobody)
    and over SFTP (tbb, as reseltb: the other user is root), the owner as the real listing gives it."""
    from resel.config import load_sites
    sites_file = write_inputs(tmp_path, sites_toml(testbed), bag_toml(1, "true"))[0]
    site = next(s for s in load_sites(sites_file) if s.name == ("tba" if where == "local" else "tbb"))
    ps = open_site(site)
    run_key = "r1-0a11ce"
    try:
        ps.ship_agent()
        pdir = ps.make_pilot_dir(run_key, 0)
        results = f"{pdir}/results"
        ps.transport.makedirs(results)
        ps.transport.write_file(f"{results}/t0-a1.json", _record(0, 1))              # the user's own: read
        host = Path(pdir) if where == "local" else Path(pdir.replace("~", str(Path(testbed.work_b).parent)))
        foreign = host / "results" / "t1-a1.json"
        foreign.write_bytes(_record(1, 1))
        os.chown(foreign, 65534 if where == "local" else 0, -1)                      # someone else's
        (host / "results" / "t2-a1.json").symlink_to(host / "results" / "t0-a1.json")  # a link
        if where == "ssh":
            os.lchown(host / "results" / "t2-a1.json", _uid_of(testbed.user), -1)
        found = ps.collect(run_key, 0, set())
        assert [r["task"] for r in found.results] == [0]
        bad = dict(found.bad)
        assert set(bad) == {"p0/results/t1-a1.json", "p0/results/t2-a1.json"}, bad
        assert "not a regular file of yours" in bad["p0/results/t1-a1.json"]
        assert "a link" in bad["p0/results/t2-a1.json"]
    finally:
        ps.transport.run(["rm", "-rf", ps.run_dir(run_key)], idempotent=True)
        ps.transport.close()


def _uid_of(user: str) -> int:
    import pwd
    return pwd.getpwnam(user).pw_uid
