"""Pilot submission to HTCondor, and the chirp wrapper, without a pool.

No HTCondor pool can run here, so three things stand in for one, none of them a mock of resel:

* **the real bindings** render the submit description resel builds (``htcondor2.Submit``
  needs no daemon), and read the text the CLI backend sends to ``condor_submit``;
* **recorded-output replays** for the CLI backend: :class:`HTCondorCLI` runs over a real
  :class:`LocalTransport` whose PATH starts with a temporary directory of tiny executables named
  ``condor_status``, ``condor_q``, ``condor_history``, ``condor_submit``, ``condor_rm`` and
  ``condor_version``. They print the REAL recorded / CONSTRUCTED outputs of
  tests/htcondor_samples.py and record their argv and stdin, which tests argv building and
  parsing end to end;
* **a recorded-protocol stand-in for condor_chirp** (no shadow exists here): a script that
  maps ``fetch``/``put``/``remove``/``getdir``/``link`` onto a local "access point" directory,
  with condor_chirp's argument order, and its exit statuses and messages as the real
  condor_chirp of HTCondor 23.9.6 and 25.14.1 gave them in the live pools
  (tests/test_htcondor_live.py): ``getdir`` exits 1 after a listing too (23.9.6), or the
  listing's length modulo 256 (25.14.1), a failure of fetch/put/getdir exits 1 with
  ``chirp: couldn't ...`` on stderr, of remove/link 255 with ``\\tError: N (...)`` on stdout.
  The REAL resel/shipped/chirp_sync.py runs the REAL resel/shipped/agent.py against it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import htcondor2
import pytest

import htcondor_samples as S  # tests/ is on sys.path (rootdir conftest)
from recorded import RecordedCollector
from waiting import wait_until
from agent_files import keyed
from resel.shipped import agent as agent_module
from resel.shipped import chirp_sync
from resel.backends.htcondor import client as hc
from resel.backends.transport import LocalTransport
from resel.backends.verified import VERIFY, digest, verified_argv
from resel.errors import SchedulerError

REPO = Path(__file__).resolve().parent.parent
WRAPPER = REPO / "resel" / "shipped" / "chirp_sync.py"
AGENT_SHA = digest(agent_module.source())
WRAPPER_SHA = digest(chirp_sync.source())


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    return wait_until(predicate, timeout, what)


def pilot_script(agent: str, pdir: str, pilot: int = 3, slots: int = 1, walltime: float = 900) -> str:
    """The script PilotSite.pilot_script writes (same exec line, built the same way)."""
    import shlex
    argv = verified_argv("python3", agent, AGENT_SHA, ["--dir", pdir, "--pilot", str(pilot), "--slots", str(slots),
                                                        "--walltime", f"{walltime:g}", "--drain", "60"])
    return f"#!/bin/sh\n# resel pilot\nexec {shlex.join(argv)}\n"


def condor_words(arguments: str) -> list[str]:
    """The argv HTCondor gives the job for an ``arguments`` value in the new syntax (the whole
    value in double quotes, ``""`` a double quote; words split on spaces; ``'...'`` one word,
    ``''`` a single quote inside it) - read back independently of condor_arguments."""
    assert arguments.startswith('"') and arguments.endswith('"')
    text = arguments[1:-1].replace('""', '"')
    words, i = [], 0
    while i < len(text):
        if text[i] == " ":
            i += 1
            continue
        word = ""
        while i < len(text) and text[i] != " ":
            if text[i] == "'":
                i += 1
                while True:
                    if text[i] == "'" and text.startswith("''", i):
                        word, i = word + "'", i + 2
                    elif text[i] == "'":
                        i += 1
                        break
                    else:
                        word, i = word + text[i], i + 1
            else:
                word, i = word + text[i], i + 1
        words.append(word)
    return words


# ---------------------------------------------------------------------------- submit description


def osg_description(**kw):
    args = dict(name="resel-r1-abcdef-p3", pilot_dir="/ap/work/r1-abcdef/p3",
                agent="/ap/work/resel-agent-v1.py", wrapper="/ap/work/resel-chirp-sync-v1.py",
                python="python3", agent_args=["--pilot", "3", "--slots", "1", "--walltime", "900"],
                walltime=900, agent_sha256=AGENT_SHA, project="OSG-Staff", accounting_group="group_osg.alice")
    args.update(kw)
    return hc.pilot_description(**args)


def test_bindings_render_the_pilot_description():
    sub = htcondor2.Submit(osg_description())
    text = str(sub)
    assert "request_cpus = 1" in text
    # the bindings write "+Attr" as its canonical "MY.Attr" (the same thing in submit language)
    assert 'MY.ProjectName = "OSG-Staff"' in text
    assert "MY.WantIOProxy = true" in text
    assert ("transfer_input_files = /ap/work/resel-agent-v1.py, /ap/work/resel-chirp-sync-v1.py, "
            "/ap/work/resel-chirp.log") in text        # the wrapper's log travels in empty
    # the job executes /usr/bin/env, which runs the wrapper only if it is unchanged
    assert "executable = /usr/bin/env" in text and "transfer_executable = false" in text
    assert "(time() - EnteredCurrentStatus) > 960" in text            # walltime 900 + 60 s grace
    assert "periodic_remove = " in text and "NumJobStarts > 0" in text
    assert "should_transfer_files = YES" in text and "when_to_transfer_output = ON_EXIT_OR_EVICT" in text
    assert "accounting_group = group_osg.alice" in text
    assert "initialdir = /ap/work/r1-abcdef/p3" in text
    assert "log = /ap/work/r1-abcdef/p3/pilot.log" in text
    assert "batch_name = resel-r1-abcdef-p3" in text


def test_cli_text_reads_back_identically_in_the_bindings():
    desc = osg_description(requirements='(OSGVO_OS_STRING == "RHEL 9")')
    back = htcondor2.Submit(hc.render_submit(desc))
    assert dict(back) == dict(htcondor2.Submit(desc))
    assert back.getQArgs() == "1"


def test_arguments_use_the_new_quoting():
    assert hc.condor_arguments(["a", "b c", "it's", 'say "hi"']) == \
        "\"'a' 'b c' 'it''s' 'say \"\"hi\"\"'\""
    desc = osg_description(agent_args=["--pilot", "3"])
    sub = htcondor2.Submit(desc)
    assert condor_words(sub["arguments"]) == [
        "python3", "-I", "-c", VERIFY, "resel-chirp-sync-v1.py", WRAPPER_SHA, "--agent", "resel-agent-v1.py",
        "--agent-sha256", AGENT_SHA, "--python", "python3", "--interval", "2", "--", "--pilot", "3"]


def test_description_checks_the_digests():
    with pytest.raises(SchedulerError, match="sha256"):
        osg_description(agent_sha256="not-a-digest")


def test_multicore_pilots_are_refused_with_the_osg_reason():
    cli = hc.HTCondorCLI(LocalTransport())
    with pytest.raises(SchedulerError, match="OSG advises against multi-core pilots"):
        cli.submit(pilot_script("/ap/resel-agent-v1.py", "/ap/p0"), name="n", cores=4, walltime=60,
                   workdir="/ap/p0")
    assert cli.test_only(1, 600) is None        # HTCondor has no start estimate


def test_only_resel_pilot_scripts_are_submitted():
    with pytest.raises(SchedulerError, match="resel pilot script"):
        hc.agent_command("#!/bin/sh\necho hello\n")
    py, agent, sha, opts = hc.agent_command(pilot_script("/ap/w d/resel-agent-v1.py", "/ap/w d/p3"))
    assert (py, agent, sha) == ("python3", "/ap/w d/resel-agent-v1.py", AGENT_SHA)
    assert opts == ["--pilot", "3", "--slots", "1", "--walltime", "900", "--drain", "60"]
    # an exec line that runs the agent without checking it first is not a resel pilot
    with pytest.raises(SchedulerError, match="sha256"):
        hc.agent_command("#!/bin/sh\nexec python3 /ap/resel-agent-v1.py --dir /ap/p3 --pilot 3\n")


# ---------------------------------------------------------------------------- CLI replay


FAKE_TOOL = """\
#!{python}
# a recorded-output replay of an HTCondor tool: prints a sample, records argv and stdin
import json, os, sys
name = os.path.basename(sys.argv[0])
here = os.path.dirname(os.path.abspath(sys.argv[0]))
stdin = sys.stdin.read() if name == "condor_submit" else None
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": [name] + sys.argv[1:], "stdin": stdin}}) + "\\n")
key = name + ("-schedd" if "-schedd" in sys.argv else "")
outs = json.load(open(os.path.join(here, "outputs.json")))
out = outs[key]
if isinstance(out, dict):
    sys.stdout.write(out.get("stdout", ""))
    sys.stderr.write(out.get("stderr", ""))
    sys.exit(out.get("rc", 0))
sys.stdout.write(out)
"""


@pytest.fixture
def replay(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    outputs = {
        "condor_status": S.constructed_status_json(),
        "condor_status-schedd": S.as_json(S.CONSTRUCTED_SCHEDDS),
        "condor_q": S.as_json(S.CONSTRUCTED_QUEUE),
        "condor_history": S.as_json(S.CONSTRUCTED_HISTORY),
        "condor_submit": S.CONSTRUCTED_TERSE,
        "condor_rm": S.CONSTRUCTED_RM_OK,
        "condor_version": S.CONSTRUCTED_VERSION,
    }
    (bindir / "outputs.json").write_text(json.dumps(outputs))
    for tool in ("condor_status", "condor_q", "condor_history", "condor_submit", "condor_rm", "condor_version"):
        path = bindir / tool
        path.write_text(FAKE_TOOL.format(python=sys.executable))
        path.chmod(0o755)

    def calls():
        log = bindir / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def set_output(tool, out):
        outputs[tool] = out
        (bindir / "outputs.json").write_text(json.dumps(outputs))

    cli = hc.HTCondorCLI(LocalTransport(), env={"PATH": f"{bindir}:{os.environ['PATH']}"},
                         project="OSG-Staff", accounting_group="group_osg.alice")
    return cli, calls, set_output, tmp_path


def test_cli_availability_and_cpu_info(replay):
    cli, calls, _, _ = replay
    av = cli.availability()
    assert (av.scheduler, av.version, av.free_cores, av.total_cores) == ("htcondor", "23.0.3", 18, 24)
    assert (av.running_jobs, av.pending_jobs) == (10000, 15400)
    argvs = [c["argv"] for c in calls()]
    assert argvs[0][:3] == ["condor_status", "-json", "-attributes"]
    assert "CPUModel" in argvs[0][3].split(",") and "Cpus" in argvs[0][3].split(",")
    assert argvs[1][:3] == ["condor_status", "-schedd", "-json"]
    assert ["condor_version"] in argvs
    info = cli.cpu_info()
    assert info["base_mhz"] == pytest.approx(2309.1, abs=0.1)


def test_cli_jobs_by_id_reach_history_for_finished_ones(replay):
    cli, calls, _, _ = replay
    jobs = cli.jobs(["4242.0", "4244.0", "4240.0"])
    assert set(jobs) == {"4242.0", "4244.0", "4240.0"}
    assert jobs["4242.0"].state == "running" and jobs["4240.0"].state == "done"
    assert jobs["4244.0"].reason.startswith("Held: ")
    q, h = [c["argv"] for c in calls()]
    assert q[:3] == ["condor_q", "-json", "-attributes"] and q[4:] == ["4240.0", "4242.0", "4244.0"]
    assert h[0] == "condor_history" and h[-1] == "4240.0" and "-limit" in h


def test_cli_jobs_by_name_prefix_and_user(replay):
    cli, calls, _, _ = replay
    mine = cli.jobs(name_prefix="resel-r1-abcdef-p")
    assert set(mine) == {"4242.0", "4243.0", "4244.0"}
    assert set(cli.jobs(user="bob")) == {"5000.0"}
    assert calls()[-1]["argv"][-1] == "bob"
    with pytest.raises(SchedulerError):
        cli.jobs(["4242"])


def test_cli_submit_sends_the_description_on_stdin(replay):
    cli, calls, _, tmp = replay
    work = tmp / "work"
    pdir = work / "r1-abcdef" / "p3"
    agent = work / "resel-agent-v1.py"
    work.mkdir()
    agent.write_text("# agent\n")
    job = cli.submit(pilot_script(str(agent), str(pdir)), name="resel-r1-abcdef-p3", cores=1,
                     walltime=900, workdir=str(pdir), output=str(pdir / "pilot.out"))
    assert job == "4245.0"
    call = [c for c in calls() if c["argv"][0] == "condor_submit"][0]
    assert call["argv"] == ["condor_submit", "-terse"]
    sub = htcondor2.Submit(call["stdin"])
    assert sub["request_cpus"] == "1" and sub["MY.WantIOProxy"] == "true"
    assert sub["MY.ProjectName"] == '"OSG-Staff"' and sub["accounting_group"] == "group_osg.alice"
    assert sub["initialdir"] == str(pdir) and sub["batch_name"] == "resel-r1-abcdef-p3"
    assert sub["executable"] == "/usr/bin/env"
    words = condor_words(sub["arguments"])
    assert words[4:6] == [hc.WRAPPER_NAME, WRAPPER_SHA] and words[words.index("--agent-sha256") + 1] == AGENT_SHA
    assert "--dir" not in words and "'--pilot' '3'" in sub["arguments"]
    # the wrapper was shipped next to the agent; chirp cannot mkdir, so the directories exist
    assert (work / hc.WRAPPER_NAME).read_text() == chirp_sync.source()
    assert all((pdir / d).is_dir() for d in ("inbox", "cancel", "started", "results"))


def test_cli_submit_refusal_and_cancel(replay):
    cli, calls, set_output, tmp = replay
    set_output("condor_submit", {"stdout": "", "rc": 1,
                                 "stderr": "ERROR: No ProjectName was specified for this job\n"})
    with pytest.raises(SchedulerError, match="No ProjectName"):
        cli.submit(pilot_script(str(tmp / "resel-agent-v1.py"), str(tmp / "p0")), name="resel-x-p0",
                   cores=1, walltime=60, workdir=str(tmp / "p0"))
    cli.cancel(["4242.0"])
    assert calls()[-1]["argv"] == ["condor_rm", "4242.0"]
    set_output("condor_rm", {"stdout": "", "stderr": S.CONSTRUCTED_RM_GONE, "rc": 1})
    cli.cancel(["4239.0"])                                       # already gone: not an error
    set_output("condor_rm", {"stdout": "", "stderr": S.CONSTRUCTED_RM_DENIED, "rc": 1})
    with pytest.raises(SchedulerError, match="Permission denied"):
        cli.cancel(["5000.0"])


def test_cli_missing_tools_say_so(tmp_path):
    cli = hc.HTCondorCLI(LocalTransport(), env={"PATH": str(tmp_path)})
    with pytest.raises(SchedulerError, match="not on the PATH"):
        cli.version()


# ---------------------------------------------------------------------------- bindings


def recorded_collector() -> RecordedCollector:
    """The collector daemon answering with the REAL recorded startd ads (parsed by classad2)
    and the CONSTRUCTED schedd ads: a stand-in for the daemon, not for resel code."""
    import classad2
    return RecordedCollector({htcondor2.AdTypes.Startd: lambda: list(classad2.parseAds(S.real_long_text())),
                              htcondor2.AdTypes.Schedd: lambda: [classad2.ClassAd(ad) for ad in S.CONSTRUCTED_SCHEDDS]})


def test_bindings_backend_reads_the_recorded_pool():
    collector = recorded_collector()
    b = hc.HTCondorBindings(collector=collector, project="OSG-Staff")
    av = b.availability()
    assert (av.free_cores, av.total_cores, av.pending_jobs) == (18, 24, 15400)
    assert collector.calls[0][0] == htcondor2.AdTypes.Startd and "Cpus" in collector.calls[0][1]
    assert b.cpu_info()["base_mhz"] is None
    sub = b.submit_description(pilot_script("/ap/resel-agent-v1.py", "/ap/p3"), name="resel-r1-abcdef-p3",
                               cores=1, walltime=900, workdir="/ap/p3", wrapper="/ap/" + hc.WRAPPER_NAME)
    assert isinstance(sub, htcondor2.Submit) and sub["MY.ProjectName"] == '"OSG-Staff"'


def test_bindings_import_guard_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "htcondor2", None)
    with pytest.raises(SchedulerError, match=r"pip install 'resel\[htcondor\]'"):
        hc.HTCondorBindings()


# ---------------------------------------------------------------------------- chirp wrapper


FAKE_CHIRP = """\
#!{python}
# a recorded-protocol stand-in for condor_chirp (no shadow here): remote paths are relative to
# $FAKE_IWD, the "access point" directory; exit statuses and messages as HTCondor {release}'s
# condor_chirp gave them in a live pool: getdir exits 1 (23.9.6) or the listing's length in
# bytes modulo 256 (25.14.1) after a listing (and a blank line), fetch/put/getdir failures exit 1
# with "chirp: couldn't ..." on stderr, remove/link failures exit 255 with "\\tError: N (...)"
# on stdout
import errno, os, shutil, sys
iwd = os.environ["FAKE_IWD"]
args = sys.argv[1:]
with open(os.path.join(iwd, "..", "chirp-calls.log"), "a") as log:
    log.write(" ".join(args) + "\\n")
def remote(p):
    return os.path.join(iwd, p)
cmd = args[0]
fail = os.environ.get("FAKE_CHIRP_FAIL", "").split()   # "getdir results 2": the first 2 such calls fail
if fail and args[:2] == fail[:2]:
    with open(os.path.join(iwd, "..", "chirp-calls.log")) as log:
        calls = sum(1 for line in log if line.split() == fail[:2])
    if calls <= int(fail[2]):
        sys.stderr.write("chirp: couldn't %s: %s\\n" % (cmd, os.strerror(errno.ETIMEDOUT)))
        sys.exit(1)
try:
    if cmd == "fetch":
        shutil.copyfile(remote(args[1]), args[2])
    elif cmd == "put":
        rest = args[1:]
        while rest and rest[0] in ("-mode", "-perm"):
            rest = rest[2:]
        shutil.copyfile(rest[0], remote(rest[1]))
    elif cmd == "remove":
        os.remove(remote(args[1]))
    elif cmd == "getdir":
        names = sorted(os.listdir(remote(args[1])))
        listing = "".join(n + "\\n" for n in names) + "\\n"
        sys.stdout.write(listing)
        sys.exit(1 if "{release}" == "23.9.6" else len(listing.encode()) % 256)
    elif cmd == "link":
        os.link(remote(args[1]), remote(args[2]))
    else:
        raise SystemExit("unknown chirp command " + cmd)
except OSError as e:
    if cmd in ("remove", "link"):
        print("\\tError: %d (%s)" % (e.errno, os.strerror(e.errno)))
        sys.exit(255)
    verb = {{"fetch": "getfile", "put": "putfile"}}.get(cmd, cmd)
    sys.stderr.write("chirp: couldn't %s: %s\\n" % (verb, os.strerror(e.errno or errno.EIO)))
    sys.exit(1)
"""


@pytest.fixture
def slot(tmp_path, request):
    """An access point directory (the job's iwd = the pilot directory) and a slot's scratch;
    condor_chirp answers as HTCondor 23.9.6's, or as the release given as the fixture's param."""
    iwd = tmp_path / "ap" / "p3"
    for d in ("inbox", "cancel", "started", "results"):      # what HTCondorCLI.submit creates
        (iwd / d).mkdir(parents=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    shutil.copy(WRAPPER, scratch / hc.WRAPPER_NAME)
    shutil.copy(agent_module.__file__, scratch / "resel-agent-v1.py")
    chirp = tmp_path / "condor_chirp"
    chirp.write_text(FAKE_CHIRP.format(python=sys.executable, release=getattr(request, "param", "23.9.6")))
    chirp.chmod(0o755)
    return iwd, scratch, chirp


def job_argv(walltime=120, agent_sha256=AGENT_SHA) -> list[str]:
    """The command line the execute point runs for resel's pilot description: executable, then
    the arguments as HTCondor splits them."""
    desc = hc.pilot_description(
        name="resel-r1-abcdef-p3", pilot_dir="/ap/p3", agent="/ap/resel-agent-v1.py",
        wrapper="/ap/" + hc.WRAPPER_NAME, python=sys.executable, interval=0.1, agent_sha256=agent_sha256,
        agent_args=["--pilot", "3", "--slots", "1", "--walltime", str(walltime), "--poll", "0.05",
                    "--heartbeat", "0.2"], walltime=walltime)
    assert desc["transfer_executable"] == "false"
    return [desc["executable"], *condor_words(desc["arguments"])]


def start_wrapper(iwd, scratch, chirp, walltime=120, agent_sha256=AGENT_SHA, fail=""):
    """The pilot job as the execute point starts it, in the slot's scratch directory (where
    HTCondor put the transferred agent and wrapper), condor_chirp on the PATH (``fail``: which
    chirp calls fail first, FAKE_CHIRP's FAKE_CHIRP_FAIL)."""
    env = {**os.environ, "FAKE_IWD": str(iwd), "PATH": f"{chirp.parent}:{os.environ['PATH']}",
           "FAKE_CHIRP_FAIL": fail}
    return subprocess.Popen(job_argv(walltime, agent_sha256), cwd=scratch, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("slot", ["23.9.6", "25.14.1"], indirect=True)
def ap_record(iwd: Path, sub: str, key: str) -> dict | None:
    """The record of ``key`` the wrapper pushed to the access point (in a wave: agent protocol 6;
    its own ``evicted`` results are per-key files), None if there is none yet."""
    found = keyed(iwd / sub).get(key)
    return found[0] if found else None


def test_chirp_wrapper_runs_a_task_from_the_access_point(slot):
    """A whole exchange through each release's condor_chirp. 25.14.1's getdir exits with the
    listing's length modulo 256 (2 to 255 for most listings): a wrapper that took a status above
    1 for a failure never saw its inbox (found live: its pilots idled until their walltime)."""
    iwd, scratch, chirp = slot
    ap = LocalTransport()      # the coordinator's side: atomic writes, as on a shared filesystem
    ap.write_file(str(iwd / "inbox" / "t1-a0.json"),
                  json.dumps({"task": 1, "attempt": 0, "command": "echo hello from the slot"}).encode())
    proc = start_wrapper(iwd, scratch, chirp)
    try:
        rec = wait_for(lambda: ap_record(iwd, "results", "t1-a0"), what="the result on the AP")
        assert rec["outcome"] == "done" and rec["stdout_tail"].strip() == "hello from the slot"
        assert ap_record(iwd, "started", "t1-a0")["task"] == 1
        agent_json = json.loads((iwd / "agent.json").read_text())
        assert agent_json["pilot"] == "3" and agent_json["protocol"] == agent_module.PROTOCOL_VERSION
        assert wait_for(lambda: (iwd / "heartbeat.json").exists(), what="a heartbeat")
        # a cancel for an attempt not yet dispatched, then the attempt: cancelled, not run
        ap.write_file(str(iwd / "cancel" / "t2-a0"), b"cancel\n")
        # the attempt is written only once the cancel is in the slot's mirror (a sync pass
        # starts a condor_chirp process per call: a fixed sleep lost the race under load)
        wait_for(lambda: (scratch / "pilot" / "cancel" / "t2-a0").exists(), what="the cancel in the slot")
        ap.write_file(str(iwd / "inbox" / "t2-a0.json"),
                      json.dumps({"task": 2, "attempt": 0, "command": "touch ran"}).encode())
        assert wait_for(lambda: ap_record(iwd, "results", "t2-a0"), what="the cancelled result")["outcome"] == \
            "cancelled"
        # a withdraw request (agent protocol 4) crosses with its content: withdrawn, never run
        ap.write_file(str(iwd / "cancel" / "t4-a0"), b"withdraw\n")
        wait_for(lambda: (scratch / "pilot" / "cancel" / "t4-a0").exists(), what="the withdraw in the slot")
        assert (scratch / "pilot" / "cancel" / "t4-a0").read_bytes() == b"withdraw\n"
        ap.write_file(str(iwd / "inbox" / "t4-a0.json"),
                      json.dumps({"task": 4, "attempt": 0, "command": "touch ran4"}).encode())
        assert wait_for(lambda: ap_record(iwd, "results", "t4-a0"), what="the withdrawn result")["reason"] == \
            "withdrawn"
        # stop: the agent exits, the wrapper pushes exit.json and agent.log, then exits itself
        ap.write_file(str(iwd / "stop"), b"stop\n")
        assert proc.wait(timeout=20) == 0, proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads((iwd / "exit.json").read_text())["reason"] == "stopped"
    assert "exited: stopped" in (iwd / "agent.log").read_text()
    assert not list(iwd.glob("**/.*.chirp.tmp"))           # every push was put + link + remove
    log = (iwd.parent / "chirp-calls.log").read_text().splitlines()
    assert "fetch inbox/t1-a0.json" in " ".join(log) and any(line.startswith("link ") for line in log)
    assert not (scratch / "pilot" / "tasks" / "t2-a0" / "ran").exists()
    assert (scratch / chirp_sync.LOG_NAME).exists()


def _evicted_records(iwd, waves: bool) -> None:
    """The evicted run's records on the access point: task 5 started without a result, task 6
    finished — as per-key files (agent protocol 5 and earlier) or as waves (protocol 6)."""
    started = [{"task": 5, "attempt": 1, "time": 1.0, "host": "old"}, {"task": 6, "attempt": 0, "time": 1.0, "host": "old"}]
    done = {"task": 6, "attempt": 0, "outcome": "done"}
    if waves:
        (iwd / "started" / "00ff-1.json").write_text(json.dumps(started))
        (iwd / "results" / "00ff-1.json").write_text(json.dumps([done]))
    else:
        for rec in started:
            (iwd / "started" / f"t{rec['task']}-a{rec['attempt']}.json").write_text(json.dumps(rec))
        (iwd / "results" / "t6-a0.json").write_text(json.dumps(done))


@pytest.mark.parametrize("waves", [False, True], ids=["per-key files", "waves"])
def test_chirp_wrapper_reports_attempts_of_an_evicted_run_lost(slot, waves):
    """The attempt the evicted run started without a result is reported lost (evicted); the
    finished one is neither reported again nor fetched — whether the evicted run's agent wrote
    per-key files or (protocol 6) waves."""
    iwd, scratch, chirp = slot
    _evicted_records(iwd, waves)
    (iwd / "inbox" / "t6-a0.json").write_text(json.dumps({"task": 6, "attempt": 0, "command": "touch again"}))
    (iwd / "stop").write_text("stop\n")
    proc = start_wrapper(iwd, scratch, chirp)
    assert proc.wait(timeout=20) == 0
    lost = json.loads((iwd / "results" / "t5-a1.json").read_text())
    assert (lost["outcome"], lost["reason"], lost["task"], lost["attempt"]) == ("lost", "evicted", 5, 1)
    kept = "00ff-1.json" if waves else "t6-a0.json"
    assert sorted(p.name for p in (iwd / "results").iterdir()) == sorted([kept, "t5-a1.json"])
    assert "done" in (iwd / "results" / kept).read_text()                  # untouched
    assert not (scratch / "pilot" / "inbox" / "t6-a0.json").exists()    # finished: never fetched


def test_a_listing_that_fails_at_start_is_not_taken_as_nothing_to_recover(slot):
    """condor_chirp's first two listings of results/ fail (a shadow busy or reconnecting):
    the wrapper pulls nothing until it has both listings, then reports the evicted run's
    unfinished attempt lost, leaves the finished one's result as it was (before: listed as
    having none, it got a second result, "lost", over its "done") and runs the new task."""
    iwd, scratch, chirp = slot
    (iwd / "started" / "t5-a1.json").write_text(json.dumps({"task": 5, "attempt": 1, "time": 1.0, "host": "old"}))
    (iwd / "started" / "t6-a0.json").write_text(json.dumps({"task": 6, "attempt": 0, "time": 1.0, "host": "old"}))
    done = json.dumps({"task": 6, "attempt": 0, "outcome": "done"})
    (iwd / "results" / "t6-a0.json").write_text(done)
    (iwd / "inbox" / "t6-a0.json").write_text(json.dumps({"task": 6, "attempt": 0, "command": "touch again"}))
    (iwd / "inbox" / "t7-a0.json").write_text(json.dumps({"task": 7, "attempt": 0, "command": "echo seven"}))
    proc = start_wrapper(iwd, scratch, chirp, fail="getdir results 2")
    try:
        wait_for(lambda: ap_record(iwd, "results", "t7-a0"), what="the new task's result")
        ap_lost = json.loads((iwd / "results" / "t5-a1.json").read_text())
        assert (ap_lost["outcome"], ap_lost["reason"]) == ("lost", "evicted")
        assert (iwd / "results" / "t6-a0.json").read_text() == done
        assert ap_record(iwd, "results", "t7-a0")["outcome"] == "done"
        (iwd / "stop").write_text("stop\n")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (scratch / "pilot" / "inbox" / "t6-a0.json").exists()
    assert not (scratch / "pilot" / "claimed" / "t6-a0.json").exists()      # never run again
    assert "cannot list results/ and started/" in (scratch / chirp_sync.LOG_NAME).read_text()


def test_chirp_wrapper_help_mentions_usage():
    out = subprocess.run([sys.executable, str(WRAPPER), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--agent" in out.stdout
    assert textwrap.dedent(chirp_sync.__doc__).count("condor_chirp") >= 2


HOSTILE = "import os\nopen(os.path.join(os.environ['FAKE_IWD'], '..', 'pwned'), 'w').write('ran')\n"


@pytest.mark.parametrize("swapped", ["wrapper", "agent"])
def test_a_file_changed_on_the_access_point_is_not_run(slot, swapped):
    """Another user swaps the wrapper or the agent between submission and transfer: the job
    refuses it (the digests are in the job's arguments, which the schedd keeps) and runs
    nothing of theirs."""
    iwd, scratch, chirp = slot
    (iwd / "inbox" / "t1-a0.json").write_text(json.dumps({"task": 1, "attempt": 0, "command": "touch ran"}))
    name = hc.WRAPPER_NAME if swapped == "wrapper" else "resel-agent-v1.py"
    (scratch / name).write_text(HOSTILE)
    proc = start_wrapper(iwd, scratch, chirp)
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == (1 if swapped == "wrapper" else chirp_sync.EXIT_MODIFIED), out
    assert "refusing to run" in out and "sha256" in out
    assert not (iwd.parent / "pwned").exists()
    assert not (scratch / "pilot" / "tasks" / "t1-a0").exists() and ap_record(iwd, "results", "t1-a0") is None
    if swapped == "agent":
        assert "refusing to run resel-agent-v1.py" in (scratch / chirp_sync.LOG_NAME).read_text()


def test_the_wrapper_makes_its_mirror_private_whatever_the_umask(slot):
    iwd, scratch, chirp = slot
    (iwd / "stop").write_text("stop\n")
    old = os.umask(0o002)
    try:
        proc = start_wrapper(iwd, scratch, chirp)
    finally:
        os.umask(old)
    assert proc.wait(timeout=20) == 0, proc.stdout.read().decode()
    for folder in [scratch / "pilot", *(scratch / "pilot").iterdir()]:
        if folder.is_dir():
            assert folder.stat().st_mode & 0o777 == 0o700, folder
