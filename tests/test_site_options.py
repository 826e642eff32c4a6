"""Site options and setup (issue 18 item 4): sbatch/qsub options and HTCondor submit lines
passed through after validation, setup lines run in the pilot before the agent, per-site
commands of a bag.

No PBS server or HTCondor pool can take a pilot here, so the submit text is checked where it is
made: PBSCLI over a transport that records what qsub would get (its argv and stdin), and that
stdin — the real pilot script with its setup — is then run by /bin/sh with the REAL agent, which
runs a real task whose output shows the setup's effect; the HTCondor description is rendered by
the real ``htcondor2`` bindings, and the REAL chirp wrapper's agent command line is run by
/bin/sh. The Slurm path runs on the live testbed (tests/test_site_options_live.py).
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
from pathlib import Path

import htcondor2
import pytest

from agent_files import keyed  # tests/ is on sys.path (rootdir conftest)
from recorded import Recorded
from waiting import poll
from resel.shipped import chirp_sync
from resel.backends.htcondor import client as hc
from resel.backends.pbs.cli import PBSCLI
from resel.backends.pilotsite import PilotSite
from resel.backends.slurm.cli import SlurmCLI
from resel.backends.transport import LocalTransport
from resel.config import check_site_commands, load_bag, load_sites
from resel.errors import InputError, SchedulerError
from resel.site_options import check_condor_lines, check_qsub_options, check_sbatch_options, setup_block

SITE = """[[site]]
name = "{name}"
kind = "{kind}"
cores = 4
clock = {{ base = 2.0 }}
access = {{ transport = "local", workdir = "{workdir}" }}
"""


def sites_file(tmp_path: Path, body: str, kind: str = "slurm", name: str = "a") -> Path:
    path = tmp_path / "sites.toml"
    path.write_text(SITE.format(name=name, kind=kind, workdir=tmp_path / "w") + body, encoding="utf-8")
    return path


def error_of(tmp_path: Path, body: str, kind: str = "slurm") -> str:
    with pytest.raises(InputError) as info:
        load_sites(sites_file(tmp_path, body, kind))
    return str(info.value)


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize("options", [
    ["--mem=8G", "--constraint=avx2", "--comment=hello world", "--exclusive"],
    ["--mem", "8G", "-C", "avx2", "--gres=gpu:1"],
    ["--wait-all-nodes=1", "--time-min=10", "--nice=5", "-x", "node[1-3]"],   # longer than a reserved name
])
def test_sbatch_options_that_leave_resel_alone_pass(options):
    assert check_sbatch_options(options) == []


@pytest.mark.parametrize("option, reserved", [
    ("--output=/tmp/x", "--output"), ("--job-name=x", "--job-name"), ("--wrap=echo hi", "--wrap"),
    ("-o", "--output"), ("-ofile", "--output"), ("-e", "--error"), ("-J", "--job-name"),
    ("--out=x", "--output"),                 # getopt_long takes an unambiguous prefix
    ("--chdir=/", "--chdir"), ("-D", "--chdir"), ("--time=10", "--time"), ("-t", "--time"),
    ("--partition=x", "--partition"), ("--requeue", "--requeue"), ("--no-requeue", "--no-requeue"),
    ("--cpus-per-task=2", "--cpus-per-task"), ("--ntasks=2", "--ntasks"), ("--array=1-3", "--array"),
    ("--parsable", "--parsable"), ("--wait", "--wait"),
])
def test_sbatch_options_resel_sets_are_refused(option, reserved):
    [(index, why)] = check_sbatch_options(["--mem=1G", option])
    assert index == 1 and reserved in why


def test_sbatch_option_with_newline_or_cluster_is_refused():
    [(_, why)] = check_sbatch_options(["--comment=a\n#SBATCH --output=/tmp/x"])
    assert "newline" in why
    [(_, why)] = check_sbatch_options(["-vJ"])
    assert "groups short options" in why


@pytest.mark.parametrize("options, problem", [
    (["-N", "x"], "-N"), (["-o", "/tmp/o"], "-o"), (["-e", "/tmp/e"], "-e"), (["-j", "oe"], "-j"),
    (["-l", "walltime=1:00:00"], "walltime"), (["-lselect=2:ncpus=4"], "select"),
    (["-l", "mem=2gb,nodes=2"], "nodes"), (["-q", "short"], "access.queue"), (["-r", "y"], "requeue"),
    (["-l"], "needs a value"), (["-z"], "job id"),
])
def test_qsub_options_resel_sets_are_refused(options, problem):
    problems = check_qsub_options(options)
    assert problems and problem in problems[0][1], problems


def test_qsub_options_pass_and_torque_needs_shell_safe_words():
    assert check_qsub_options(["-l", "mem=4gb", "-m", "n", "-W", "group_list=md", "-lvmem=8gb"]) == []
    assert check_qsub_options(["-l", "mem=4gb"], torque=True) == []
    [(index, why)] = check_qsub_options(["-M", "me@x;touch /tmp/pwned"], torque=True)
    assert index == 1 and "shell unquoted" in why


def test_condor_lines_resel_writes_are_refused_whatever_their_case():
    assert check_condor_lines({"request_memory": "8GB", "+SingularityImage": '"/cvmfs/img"',
                               "requirements": 'OpSysMajorVer == 9', "MY.Owner_Note": '"x"'}) == []
    for key in ("executable", "Arguments", "+JobBatchName", "MY.Iwd", "initialdir", "transfer_input_files",
                "batch_name", "periodic_remove", "+ProjectName", "output", "request_cpus", "queue"):
        [(got, why)] = check_condor_lines({key: "x"})
        assert got == key and "resel does not take" in why
    [(_, why)] = check_condor_lines({"request_memory": "1GB\nexecutable = /bin/evil"})
    assert "newline" in why
    [(_, why)] = check_condor_lines({"request memory": "1GB"})
    assert "not a submit command" in why


# ---------------------------------------------------------------------------- the sites and bag files


def test_sites_file_options_and_setup_are_read(tmp_path):
    path = sites_file(tmp_path, 'access.sbatch_options = ["--mem=2G"]\n'
                                'access.setup = ["module load gromacs/2024", "export OMP_NUM_THREADS=1"]\n')
    path.write_text(path.read_text().replace('access = { transport = "local", workdir = "' + str(tmp_path / "w")
                                             + '" }\n', f'[site.access]\ntransport = "local"\nworkdir = '
                                             f'"{tmp_path / "w"}"\n').replace("access.", ""), encoding="utf-8")
    [site] = load_sites(path)
    assert site.access.scheduler.sbatch_options == ("--mem=2G",)
    assert site.access.setup == ("module load gromacs/2024", "export OMP_NUM_THREADS=1")


def test_sites_file_errors_name_file_key_line_and_fix(tmp_path):
    body = '[[site]]\nname = "b"\nkind = "slurm"\ncores = 1\nclock = { base = 1.0 }\n' \
           '[site.access]\nworkdir = "/w"\nsbatch_options = ["--mem=1G", "--output=/tmp/x"]\n'
    text = error_of(tmp_path, body)
    assert "sites.toml: site[1].access.sbatch_options[1] (line 14)" in text and "--output" in text
    assert "pilot.out" in text
    body = '[[site]]\nname = "b"\nkind = "pbs"\ncores = 1\nclock = { base = 1.0 }\n' \
           '[site.access]\nworkdir = "/w"\nsbatch_options = ["--mem=1G"]\n'
    assert "a pbs site takes qsub_options, not sbatch_options" in error_of(tmp_path, body)
    body = '[[site]]\nname = "b"\nkind = "pbs"\ncores = 1\nclock = { base = 1.0 }\n' \
           '[site.access]\nworkdir = "/w"\nqsub_options = ["-l", "walltime=1:00:00"]\n'
    assert "qsub_options[1]" in error_of(tmp_path, body)
    body = '[[site]]\nname = "b"\nkind = "htcondor"\ncores = 1\nclock = { base = 1.0 }\n' \
           '[site.access]\nworkdir = "/w"\nsubmit_lines = { Executable = "/bin/sh" }\n'
    text = error_of(tmp_path, body)
    assert "submit_lines.Executable (line 14)" in text and "sha256" in text
    body = '[[site]]\nname = "b"\nkind = "slurm"\ncores = 1\nclock = { base = 1.0 }\n' \
           '[site.access]\nworkdir = "/w"\nsetup = ["module load a\\nexit 0"]\n'
    text = error_of(tmp_path, body)
    assert "setup[0]" in text and "own list item" in text
    body = '[[site]]\nname = "b"\nkind = "slurm"\ncores = 1\nclock = { base = 1.0 }\n' \
           '[site.access]\nworkdir = "/w"\nsubmit_lines = { request_memory = "1GB" }\n'
    assert "a slurm site takes sbatch_options, not HTCondor submit lines" in error_of(tmp_path, body)


def test_bag_site_commands_are_read_checked_and_chosen_per_site(tmp_path):
    bag_path = tmp_path / "bag.toml"
    bag_path.write_text('[bag]\nname = "md"\ncommand = "gmx mdrun -deffnm md{index}"\ncount = 3\n\n'
                        '[bag.site_commands]\nbig = "gmx_mpi mdrun -deffnm md{index:03d}"\n\n'
                        '[bag.profile]\ninstructions = 1e9\n', encoding="utf-8")
    bag = load_bag(bag_path)
    assert bag.command_for(7, "big") == "gmx_mpi mdrun -deffnm md007"
    assert bag.command_for(7, "small") == bag.command_for(7) == "gmx mdrun -deffnm md7"
    assert bag.resized(10).site_commands == bag.site_commands
    sites = load_sites(sites_file(tmp_path, "", name="small"))
    with pytest.raises(InputError, match=r"bag.toml: bag.site_commands.big: no site named 'big' .*small"):
        check_site_commands(bag, sites)
    check_site_commands(bag, load_sites(sites_file(tmp_path, "", name="big")))
    bag_path.write_text(bag_path.read_text().replace("md{index:03d}", "md{idx}"), encoding="utf-8")
    with pytest.raises(InputError, match=r"bag.site_commands.big \(line 7\).*idx"):
        load_bag(bag_path)


def test_resume_reads_back_options_setup_and_site_commands(tmp_path):
    """A run's bag and sites are stored as JSON; --resume must get the same options back."""
    from resel.live.stored import bag_from_json, sites_from_json
    from resel.store import to_json
    path = sites_file(tmp_path, "", kind="htcondor")
    path.write_text(path.read_text().replace('" }', '", submit_lines = { request_memory = "3GB" }, '
                                                    'setup = ["export A=1"] }'), encoding="utf-8")
    [site] = load_sites(path)
    [back] = sites_from_json(json.loads(to_json([site])))
    assert back.access == site.access
    bag_path = tmp_path / "bag.toml"
    bag_path.write_text('[bag]\nname = "md"\ncommand = "a"\ncount = 1\n[bag.site_commands]\nx = "b"\n'
                        '[bag.profile]\ninstructions = 1e9\n', encoding="utf-8")
    bag = load_bag(bag_path)
    assert bag_from_json(json.loads(to_json(bag))).site_commands == (("x", "b"),)


# ---------------------------------------------------------------------------- submit text


def test_a_slurm_conf_not_on_the_site_is_refused_before_any_command(tmp_path):
    """Every Slurm command retries a SLURM_CONF it cannot stat for 60 s (`SLURM_CONF=/nonexistent
    sinfo` took 59 s here), so a mistyped path in the sites file made `resel plan` take three
    minutes to say the site is unreachable. It is refused before the first command, naming the
    variable and the fix; once the file is there the commands run."""
    class Counting(LocalTransport):
        sent: list = []

        def run(self, argv, **kw):
            self.sent.append(list(argv))
            return super().run(argv, **kw)
    conf = tmp_path / "slurm.conf"
    tr = Counting()
    cli = SlurmCLI(tr, env={"SLURM_CONF": str(conf)})
    for ask in (cli.availability, lambda: cli.jobs(["1"])):
        with pytest.raises(SchedulerError, match=r"SLURM_CONF .*slurm\.conf does not exist on the site") as e:
            ask()
        assert "access.env" in e.value.hint
    assert tr.sent == []
    conf.write_text("ClusterName=none\n")        # there now: the next command is sent (and fails its own way)
    with pytest.raises(SchedulerError) as e:
        cli.availability()
    assert tr.sent and "does not exist on the site" not in str(e.value)


def test_backends_refuse_reserved_options_built_in_python():
    with pytest.raises(SchedulerError, match="--output"):
        SlurmCLI(LocalTransport(), extra_sbatch=["--output=/tmp/x"])
    with pytest.raises(SchedulerError, match="-N"):
        PBSCLI(LocalTransport(), dialect="pro", extra_qsub=["-N", "x"])
    with pytest.raises(SchedulerError, match="resel does not take"):
        hc.HTCondorCLI(LocalTransport(), extra_submit={"arguments": "x"})
    with pytest.raises(SchedulerError, match="own list item"):
        hc.HTCondorCLI(LocalTransport(), setup=["a\nb"])


def _pbs_site(tmp_path: Path, setup: list[str], options: list[str]):
    body = ('[site.access]\ntransport = "local"\nworkdir = "{w}"\npython = "{py}"\nqsub_options = {o}\n'
            'setup = {s}\n').format(w=tmp_path / "work", py=sys.executable, o=json.dumps(options), s=json.dumps(setup))
    path = tmp_path / "sites.toml"
    path.write_text('[[site]]\nname = "p"\nkind = "pbs"\ncores = 2\nclock = { base = 1.0 }\n' + body,
                    encoding="utf-8")
    return load_sites(path)[0]


def test_pbs_pilot_gets_options_and_its_setup_reaches_the_task(tmp_path):
    """The qsub argv carries the options after resel's own; the script on qsub's stdin, run by
    /bin/sh, runs the setup in the agent's shell: the REAL agent's task sees what it exported."""
    site = _pbs_site(tmp_path, ["export RESEL_T_SETUP='set up; really'", "cd /"], ["-l", "mem=2gb", "-m", "n"])
    run_key, pilot = "r1-abcdef", 0
    workdir = str(tmp_path / "work")
    pdir = posixpath.join(workdir, run_key, "p0")
    qsub = ("qsub", "-N", f"resel-{run_key}-p0", "-l", "select=1:ncpus=1", "-l", "walltime=00:02:00",
            "-r", "n", "-l", "mem=2gb", "-m", "n", "-o", f"{pdir}/pilot.out", "-j", "oe")
    replay = Recorded({qsub: "7.pbs\n"})
    ps = PilotSite(site, LocalTransport(), PBSCLI(replay, dialect="pro", extra_qsub=site.access.scheduler.qsub_options))
    assert ps.submit_pilot(run_key, pilot, 1, 120) == "7.pbs"
    [argv], [body] = replay.calls, replay.inputs
    assert tuple(argv) == qsub
    lines = body.splitlines()
    cd = next(i for i, line in enumerate(lines) if line.startswith("cd "))
    setup = lines.index("{ export RESEL_T_SETUP='set up; really'")
    assert lines[0] == "#!/bin/sh" and cd < setup < next(i for i, line in enumerate(lines) if line.startswith("exec "))
    # run it: a task in the inbox prints the variable and the agent's working directory
    ps.dispatch(run_key, pilot, 0, 0, 'echo "seen=$RESEL_T_SETUP"')
    proc = subprocess.Popen(["/bin/sh", "-c", body], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        results = Path(pdir, "results")      # (a wave since agent protocol 6, or a per-key file)

        def result() -> dict | None:
            found = keyed(results).get("t0-a0") if results.is_dir() else None
            return found[0] if found else None
        poll(lambda: result() is not None, 30, every=0.1)
        assert result() is not None, proc.stdout.read1(4096) if proc.poll() is not None else "no result"
        Path(pdir, "stop").write_text("stop\n")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    record = result()
    assert record["outcome"] == "done" and "seen=set up; really" in record["stdout_tail"]


def test_failing_setup_stops_the_pilot_with_its_line(tmp_path):
    block = setup_block(["true", "false && echo never"])
    done = subprocess.run(["/bin/sh", "-c", block + "echo agent-started\n"], capture_output=True, text=True)
    assert done.returncode == 1 and "agent-started" not in done.stdout
    assert done.stderr.strip() == "resel: pilot setup line 2 failed: false && echo never"


def test_htcondor_description_carries_lines_and_setup_for_the_wrapper(tmp_path):
    from test_htcondor_submit import condor_words, osg_description
    desc = osg_description(extra={"request_memory": "8GB", "+SingularityImage": '"/cvmfs/img:latest"'},
                           setup=["export RESEL_T_SETUP=osg", 'echo "it\'s set"'])
    sub = htcondor2.Submit(hc.render_submit(desc))
    assert sub["request_memory"] == "8GB" and sub["MY.SingularityImage"] == '"/cvmfs/img:latest"'
    words = condor_words(desc["arguments"])
    assert words[words.index("--setup") + 1] == "export RESEL_T_SETUP=osg"
    assert words[len(words) - 1 - words[::-1].index("--setup") + 1] == 'echo "it\'s set"'
    # the wrapper's own parser reads them back, and its agent command runs them in /bin/sh first
    sep = words.index("--agent")
    args = chirp_sync.parse_args(words[sep:])
    assert args.setup == ["export RESEL_T_SETUP=osg", 'echo "it\'s set"']
    argv = chirp_sync.agent_argv(args, str(tmp_path))
    tail = argv.index("resel-setup") + 1
    assert argv[tail:tail + 3] == ["python3", "-I", "resel-agent-v1.py"]
    argv[tail:] = ["/bin/sh", "-c", 'echo "seen=$RESEL_T_SETUP"']
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "it's set\nseen=osg\n", done


# ---------------------------------------------------------------------------- read as the tools read them
# (issue 24; tests/test_option_parsing_live.py asks the real sbatch, qsub and condor_submit)


@pytest.mark.parametrize("options, index, reason", [
    (["-vo/tmp/x"], 0, "(-o) is --output"),
    (["-vJ1"], 0, "(-J) is --job-name"),
    (["/tmp/evil.sh"], 0, "would take it as the batch script"),
    (["--exclusive", "user"], 1, "would take it as the batch script"),   # optional values only attach
    (["--mem=1G", "--comment"], 1, "needs a value"),                     # would eat resel's --no-requeue
    (["--"], 0, "ends sbatch's options"),
    ([":", "--mem=1G"], 0, "would take it as the batch script"),
    (["--no"], 0, "ambiguous"),
    (["--frobnicate=1"], 0, "not an option of sbatch"),
    (["-M", "other"], 0, "one Slurm cluster"),
    (["--usage"], 0, "print and exit"),
])
def test_sbatch_options_seen_in_issue_24_refused(options, index, reason):
    problems = check_sbatch_options(options)
    assert problems and problems[0][0] == index and reason in problems[0][1], problems


@pytest.mark.parametrize("options", [
    ["--comment", "/tmp/evil.sh"], ["--exclusive=user", "--exclusive"], ["-C", "avx2", "-Cavx2"], ["-vk", "-kfoo"],
    ["--mail-type", "NONE", "--nice=5"], ["--extra-node-info", "2:4"], ["--get-user-env"],
])
def test_sbatch_values_that_look_like_words_pass(options):
    assert check_sbatch_options(options) == []


@pytest.mark.parametrize("options, dialect, reason", [
    (["-VN", "x"], "auto", "one of which is -N"),
    (["/tmp/evil.sh"], "pro", "would take it as the batch script"),
    (["-pe", "shm", "4"], "torque", "--cpus-per-task"),
    (["-b", "y"], "torque", "the pilot's"),
    (["-l", "cput=1:00:00"], "auto", "time limit"),
    (["-W", "block=true"], "pro", "return at once"),
    (["-wd", "/tmp"], "torque", "own directory"),
    (["-s"], "auto", "print the sbatch command"),
])
def test_qsub_groups_positional_and_wrapper_options_refused(options, dialect, reason):
    problems = check_qsub_options(options, dialect=dialect)
    assert problems and reason in problems[0][1], problems


def test_qsub_an_option_one_qsub_knows_passes():
    """-lvmem=8gb is -l vmem=8gb to PBS Pro's and Torque's own qsub and unknown to Slurm's Torque
    qsub, which would refuse the whole command (submitting nothing, harmless): it passes; an option
    no qsub knows is refused."""
    assert check_qsub_options(["-lvmem=8gb"]) == check_qsub_options(["-lvmem=8gb"], dialect="torque") == []
    [(_, why)] = check_qsub_options(["-Y"])
    assert "not an option" in why


def test_torque_resources_are_joined_into_resel_s_own():
    """Slurm's Torque qsub keeps the last -l it is given: an extra -l mem=4gb after resel's
    -l nodes=1:ppn=N,walltime=W dropped the pilot's size and walltime."""
    from resel.backends.pbs.cli import PBSCLI
    from resel.backends.transport import LocalTransport
    cli = PBSCLI(LocalTransport(), dialect="torque", extra_qsub=["-l", "mem=4gb", "-m", "n", "-l=vmem=8gb"])
    argv = cli._resources(2, 600)
    assert argv.count("-l") == 1
    assert argv[argv.index("-l") + 1] == "nodes=1:ppn=2,walltime=00:10:00,mem=4gb,vmem=8gb"
    assert argv[-2:] == ["-m", "n"]


@pytest.mark.parametrize("check, options", [
    (check_sbatch_options, ["--hold"]), (check_sbatch_options, ["-H"]), (check_sbatch_options, ["-QH"]),
    (check_sbatch_options, ["--ho"]),
    (check_qsub_options, ["-h"]), (check_qsub_options, ["-Vh"]),
])
def test_a_held_pilot_is_refused(check, options):
    """A pilot submitted on hold never starts until someone releases it: the run would wait on it
    for ever, so hold is refused with what to use instead (sbatch --begin, qsub -a)."""
    [(index, why)] = check(options)
    assert index == 0 and "held pilot never starts" in why


def test_a_held_condor_pilot_is_refused():
    [(key, why)] = check_condor_lines({"Hold": "True"})
    assert key == "Hold" and "held pilot never starts" in why and "deferral_time" in why
