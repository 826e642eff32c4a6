"""One contract for every scheduler client (issue 14 §5, §6), on real recorded replies.

Every client — Slurm's CLI and slurmrestd, PBS Pro and Torque, HTCondor's CLI and its htcondor2
bindings — must:

* be a :class:`~resel.backends.jobs.Scheduler` (what ``PilotSite`` relies on, checked with
  ``isinstance``, never ``getattr``);
* answer a poll in resel's vocabulary: each job a :class:`~resel.backends.jobs.JobState` that the
  scheduler's documentation gives for its own word (``native``, kept for display), an id the
  scheduler no longer knows simply absent;
* ask only for the ids it was given — no all-users listing in a poll;
* turn a word its table does not know into ``unknown``, which is never final.

Replies: Slurm 24.11 (``tests/data/trixie``, recorded on the testbed) and 24.11.3 slurmrestd
(``shared/data/formats/slurm``), OpenPBS 23.06 (``shared/data/formats/pbs``), Debian's Torque
wrappers over Slurm 22.05 (``tests/data/torque``), HTCondor 23.9.6 (``tests/data/trixie``). Where
a reply is cut to the ids asked for (what the scheduler prints for those alone) or an unknown
state is written into it, the test says so: CONSTRUCTED from the recording. The same contract
runs live, against the daemons, in tests/test_poll_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from resel.backends.slurm import formats as sf
from resel.backends.jobs import (
    HTCONDOR_STATES,
    PBS_STATES,
    SLURM_STATES,
    JobInfo,
    JobState,
    Scheduler,
    htcondor_state,
    pbs_state,
    slurm_state,
)
from resel.backends.pbs.cli import PBSCLI
from resel.backends.pilotsite import job_phase
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.slurm.rest import SlurmREST
from recorded import Recorded, RecordedSchedd, RecordedSession, Reply, Response  # tests/ is on sys.path

HERE = Path(__file__).resolve().parent
TRIXIE = HERE / "data" / "trixie"
TORQUE = HERE / "data" / "torque"
SHARED = HERE.parent.parent / "shared" / "data" / "formats"
STATE = json.loads((TRIXIE / "STATE.json").read_text())
GONE = "4242"          # an id no scheduler here knows any more (Slurm, PBS); 4242.0 for HTCondor


# ---------------------------------------------------------------------------- the clients


def slurm_cli(word: str | None = None):
    """SlurmCLI: squeue's text reply for our ids, CONSTRUCTED from the recorded 24.11
    ``squeue --json`` (its jobs' fields in the ``-o`` format the poll asks for); sacct answers
    as the testbed's controller does (accounting disabled), so a gone id stays absent."""
    doc = json.loads((TRIXIE / "slurm-24.11" / "squeue.json").read_text())
    jobs = sf.parse_jobs_json(doc)
    run, pend = STATE["slurm_running"], STATE["slurm_pending"]

    def line(j: JobInfo, state: str) -> str:
        return "|".join([j.job_id, j.name, state, str(j.cpus), f"{j.submit:.0f}", f"{j.start or 0:.0f}",
                         f"{j.end or 0:.0f}", f"{(j.time_limit or 60) / 60:.0f}", j.reason or "None", j.user or "",
                         j.partition or ""])

    def squeue(argv):
        asked = next(a for a in argv if a.startswith("--jobs=")).split("=", 1)[1].split(",")
        rows = [line(jobs[i], word if (word and i == run) else jobs[i].native) for i in asked if i in jobs]
        return "".join(r + "\n" for r in rows)
    tr = Recorded({"squeue": squeue, "sacct": Reply("", "sacct: error: Slurm accounting storage is disabled\n", 1)})
    return SlurmCLI(tr), tr, {run: slurm_state(jobs[run].native), pend: slurm_state(jobs[pend].native)}, GONE


def rest_session(word: str | None = None) -> RecordedSession:
    """slurmrestd 24.11 as recorded: ``GET /job/{id}`` answers the recorded job (16), the
    testbed's 24.11 "Invalid job id specified" (404, error 2017) for any other id."""
    doc = json.loads((SHARED / "slurm" / "slurmrestd_slurm_get_job.json").read_text())
    if word:
        doc["jobs"][0]["job_state"] = [word]      # CONSTRUCTED: a state 24.11 never says
    gone = {"meta": doc["meta"], "jobs": [], "warnings": [], "errors": [
        {"description": "Unable to query JobId=4242", "error_number": 2017,
         "error": "Invalid job id specified", "source": "_handle_job_get"}]}
    return RecordedSession({"v0.0.40/job/16": Response.of(doc)}, default=Response.of(gone, 404))


def slurm_rest(word: str | None = None):
    session = rest_session(word)
    rest = SlurmREST("http://127.0.0.1:6821", "fireuser", "t", api_version="v0.0.40", session=session)
    return rest, session, {"16": slurm_state(word or "RUNNING")}, GONE


def pbs_pro(word: str | None = None):
    """OpenPBS 23.06: ``qstat -F json -f 1 -x`` as recorded; other ids are unknown to the server
    (stderr and exit status 153, as qstat says for an id it has no record of)."""
    rec = json.loads((SHARED / "pbs" / "ssh_qstat_command.json").read_text())
    doc = json.loads(rec["stdout"])
    if word:
        doc["Jobs"]["1.pbs"]["job_state"] = word          # CONSTRUCTED: a letter PBS does not have
    letter = doc["Jobs"]["1.pbs"]["job_state"]
    status = doc["Jobs"]["1.pbs"].get("Exit_status")

    def qstat(argv):
        if argv[:5] != ["qstat", "-f", "-F", "json", "-x"]:
            return None
        ids = argv[5:]
        gone = [i for i in ids if i not in ("1", "1.pbs")]
        out = json.dumps({**doc, "Jobs": doc["Jobs"] if len(gone) < len(ids) else {}})
        return Reply(out, "".join(f"qstat: Unknown Job Id {i}.pbs\n" for i in gone), 153 if gone else 0)
    tr = Recorded({"qstat": qstat, ("date", "+%z"): "+0000\n"})
    return PBSCLI(tr, dialect="pro"), tr, {"1.pbs": pbs_state(letter, status, "pro")}, GONE


def torque(word: str | None = None):
    """Debian's Torque wrappers over Slurm 22.05: ``qstat -f`` blocks as recorded, cut to the
    ids asked for (what ``qstat -f ID…`` prints, CONSTRUCTED); an id it does not know alone is
    exit 153 with nothing said, as the wrapper does."""
    text = (TORQUE / "qstat_f_running_pending.txt").read_text()
    blocks = {b.split("\n", 1)[0].split()[-1]: b for b in text.strip().split("\n\n")}
    if word:
        blocks["1420"] = blocks["1420"].replace("job_state = R", f"job_state = {word}")

    def qstat(argv):
        if argv[:2] != ["qstat", "-f"]:
            return None
        found = [blocks[i] for i in argv[2:] if i in blocks]
        return Reply("\n\n".join(found) + ("\n" if found else ""), "", 0 if found else 153)
    tr = Recorded({"qstat": qstat, ("date", "+%z"): "+0000\n"})
    letters = {"1420": "R", "1422": "Q", "1417": "C"}
    return PBSCLI(tr, dialect="torque"), tr, {j: pbs_state(c, None, "torque") for j, c in letters.items()}, GONE


def _condor_ads(word: int | None = None) -> tuple[list[dict], list[dict]]:
    queue = json.loads((TRIXIE / "htcondor-23.9" / "condor_q.json").read_text())
    history = json.loads((TRIXIE / "htcondor-23.9" / "condor_history.json").read_text())
    if word is not None:
        for ad in queue:
            if f"{ad['ClusterId']}.{ad['ProcId']}" == STATE["condor_running"]:
                ad["JobStatus"] = word                  # CONSTRUCTED: a code past the manual's 7
    return queue, history


def _condor_expected(word: int | None = None) -> dict[str, JobState]:
    return {STATE["condor_running"]: htcondor_state(word or 2)[1], STATE["condor_idle"]: JobState.PENDING,
            STATE["condor_removed"]: JobState.CANCELLED}


def htcondor_cli(word: int | None = None):
    """HTCondor 23.9.6 over its CLI: ``condor_q``/``condor_history -json`` as recorded, each
    answering the ids named on its command line (the recording's jobs among them)."""
    from resel.backends.htcondor.client import HTCondorCLI
    queue, history = _condor_ads(word)

    def pick(ads, argv):
        ids = [a for a in argv if a[:1].isdigit() and "." in a]
        return json.dumps([ad for ad in ads if f"{ad['ClusterId']}.{ad['ProcId']}" in ids])

    tr = Recorded({"condor_q": lambda argv: pick(queue, argv), "condor_history": lambda argv: pick(history, argv)})
    return HTCondorCLI(tr), tr, _condor_expected(word), "4242.0"


def htcondor_bindings(word: int | None = None):
    pytest.importorskip("htcondor2")
    from resel.backends.htcondor.client import HTCondorBindings
    schedd = RecordedSchedd(*_condor_ads(word))
    return HTCondorBindings(schedd=schedd, collector=object()), schedd, _condor_expected(word), "4242.0"


CLIENTS = {"slurm-cli": slurm_cli, "slurm-rest": slurm_rest, "pbs-pro": pbs_pro, "torque": torque,
           "htcondor-cli": htcondor_cli, "htcondor-bindings": htcondor_bindings}
#: per client, a word its scheduler never says
UNKNOWN_WORDS = {"slurm-cli": "A_STATE_OF_A_NEWER_SLURM", "slurm-rest": "A_STATE_OF_A_NEWER_SLURM",
                 "pbs-pro": "Z", "torque": "Z", "htcondor-cli": 8, "htcondor-bindings": 8}


def _asked(name: str, record) -> list:
    """What the client asked the scheduler, one entry per call."""
    return list(record.asked if name == "slurm-rest" else record.calls)


# ---------------------------------------------------------------------------- the contract


@pytest.mark.parametrize("name", CLIENTS)
def test_every_client_is_a_scheduler(name):
    client, *_ = CLIENTS[name]()
    assert isinstance(client, Scheduler)


@pytest.mark.parametrize("name", CLIENTS)
def test_a_poll_answers_in_resel_words_from_the_schedulers_own(name):
    client, _, expected, gone = CLIENTS[name]()
    jobs = client.jobs([*expected, gone])
    assert set(jobs) == set(expected), jobs              # the gone id is absent, nothing else came
    for jid, want in expected.items():
        info = jobs[jid]
        assert isinstance(info.state, JobState) and info.state is want, (jid, info)
        assert info.native and info.job_id == jid


@pytest.mark.parametrize("name", CLIENTS)
def test_a_poll_asks_for_our_ids_only(name):
    client, record, expected, gone = CLIENTS[name]()
    client.jobs([*expected, gone])
    asked = _asked(name, record)
    assert asked
    ids = {*expected, gone}
    for call in asked:
        if call == ["date", "+%z"]:
            continue                    # the site's zone for ctime text: not a job listing
        text = json.dumps(call)
        # every call of the poll names ids we asked for (no all-users listing): argv, a REST
        # path, or a schedd constraint
        assert any(i.split(".")[0] in text for i in ids), call
        assert "--states=all\", \"-o" not in text and call not in (["qstat", "-f"], ["squeue", "--json"])


@pytest.mark.parametrize("name", CLIENTS)
def test_an_unknown_word_is_unknown_and_never_ends_a_pilot(name):
    word = UNKNOWN_WORDS[name]
    client, _, expected, _ = CLIENTS[name](word)
    jobs = client.jobs(list(expected))
    unknown = [j for j in jobs.values() if j.state is JobState.UNKNOWN]
    assert len(unknown) == 1, jobs
    info = unknown[0]
    assert job_phase(info.state) == "unknown" and not info.state.final
    assert str(word) in info.native and info.shown.endswith("(unknown)")


def test_batches_of_at_most_100_ids():
    """A poll of 250 pilots is three commands, none naming more than 100 ids."""
    client, record, _, _ = slurm_cli()
    client.jobs([str(900000 + i) for i in range(250)])
    squeues = [c for c in record.calls if c[0] == "squeue"]
    sizes = [len(next(a for a in c if a.startswith("--jobs=")).split(",")) for c in squeues]
    assert sizes == [100, 100, 50]


# ---------------------------------------------------------------------------- the tables


def test_every_documented_word_has_its_state_and_unknown_is_never_final():
    """Each table covers the words its documentation lists (squeue's JOB STATE CODES, PBS's
    job states, HTCondor's JobStatus 1–7), and only ``unknown`` has the unknown phase."""
    assert set(sf.STATE_CODES.values()) == set(SLURM_STATES)
    assert set(PBS_STATES) | {"U"} == set("BEFHMQRSTUWXC")
    assert set(HTCONDOR_STATES) == set(range(1, 8))
    for state in JobState:
        assert (state.phase == "unknown") is (state is JobState.UNKNOWN)
        assert state.final is (state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT))
    for word in ("", "R2", "NEW_STATE"):
        assert slurm_state(word) is JobState.UNKNOWN
    for letter in ("", "Z", "?", "1"):
        assert pbs_state(letter) is JobState.UNKNOWN
    for code in (0, 8, 99, -1):
        assert htcondor_state(code) == (f"JobStatus {code}", JobState.UNKNOWN)


def test_pbs_and_htcondor_no_longer_speak_slurm():
    """The old vocabulary turned PBS letters and HTCondor codes into Slurm's words; now each
    is resel's own, and a held job is ``held`` (not a pending one with a reason)."""
    assert pbs_state("H") is JobState.HELD and htcondor_state(5) == ("Held", JobState.HELD)
    assert {s.value for s in JobState}.isdisjoint(SLURM_STATES)


def test_jobinfo_refuses_an_untranslated_word():
    with pytest.raises(TypeError, match="must be a JobState"):
        JobInfo("1", "x", "RUNNING", None, None, None, None, 1, None, None)
