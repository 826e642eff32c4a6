"""Site options read the way the real sbatch, qsub and condor_submit read them (issue 24, "Seen" 7).

resel refuses an extra option that would override what it sets itself (a pilot's name, output,
shape, walltime, ...), a word the submit command would take as the batch script, and a value that
would swallow resel's next option. Whether it reads the words as the real tools do is asked of the
tools themselves, on the testbed:

* **sbatch** of Slurm 22.05 (cluster tba, here) and 24.11 (tbc, in the Debian 13 root): its option
  table (every name, and whether it takes a value) against resel's; and for each case, resel's
  real argv (captured from ``SlurmCLI.submit``) given to ``sbatch -v --test-only``, which prints
  the options it read: resel accepts a case exactly when sbatch still sees resel's own options
  as resel set them and reads the script from stdin.
* **qsub**, Slurm's Torque wrapper: resel's real argv (``PBSCLI.submit``, dialect torque) given
  to ``qsub -sbatchline``, which prints the sbatch command it would run.
* **condor_submit** (HTCondor 23.9 on the access point): resel's real submit description with
  each extra line, through ``condor_submit -dry-run``: resel accepts a line exactly when the job
  ad keeps every attribute resel writes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from resel.backends.htcondor.client import pilot_description, render_submit
from resel.backends.pbs import cli as pbs_cli
from resel.backends.slurm.cli import SlurmCLI
from resel.site_options import (
    SBATCH_LONG, SBATCH_OPTSTRING, check_condor_lines, check_qsub_options, check_sbatch_options,
)
from recorded import Recorded
from trixie_helpers import ap, trixie  # noqa: F401 - the fixture

#: options one Slurm version has and the other not (from the two tables, tests below check them)
ONLY_IN = {"22.05": {"power"},
           "24.11": {"autocomplete", "container-id", "extra", "oom-kill-step", "resv-ports", "segment", "stepmgr",
                     "tres-bind", "tres-per-task"}}


def sbatch_on(tb, cluster: str, argv: list[str], stdin: str = "", cwd: str | None = None) -> subprocess.CompletedProcess:
    """``argv`` (an sbatch command) on tba (here, 22.05) or tbc (the access point, 24.11)."""
    if cluster == "tba":
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd,
                              env={**os.environ, "SLURM_CONF": tb.slurm_conf_a})
    return ap(tb, (f"cd {shlex.quote(cwd)} && " if cwd else "cd /tmp && ") + shlex.join(argv), input=stdin,
              check=False, timeout=120)


@pytest.fixture(params=["tba", "tbc"])
def cluster(request, testbed):
    if request.param == "tbc":
        request.getfixturevalue("trixie")
    return request.param


def version_of(cluster: str) -> str:
    return "22.05" if cluster == "tba" else "24.11"


# --------------------------------------------------------------------------- sbatch's own table

PROBE = r"""
for n in {names}; do
  a=$(sbatch --test-only "--$n=x" </dev/null 2>&1 | head -1)
  case "$a" in
    *"unrecognized option"*) echo "$n missing"; continue;;
    *"doesn't allow an argument"*) echo "$n 0"; continue;;
  esac
  b=$(sbatch --test-only "--$n" </dev/null 2>&1 | head -1)
  case "$b" in *"requires an argument"*) echo "$n 1";; *) echo "$n 2";; esac
done
for c in {letters}; do
  a=$(sbatch --test-only "-$c" </dev/null 2>&1 | head -1)
  b=$(sbatch --test-only "-$c%" </dev/null 2>&1 | head -1)
  case "$a" in *"requires an argument"*) echo "-$c 1"; continue;; esac
  case "$b" in *"invalid option -- '%'"*) echo "-$c 0";; "Usage: sbatch"*|"slurm"*) echo "-$c exits";;
               *) echo "-$c 2";; esac
done
"""


def test_sbatch_option_table_is_sbatch_s_own(testbed, cluster):
    """Every long option of resel's table takes a value exactly as the real sbatch's does (none,
    one — attached or the next word —, or an optional attached one), every short letter too, and
    every option sbatch's --help lists is in the table: the parser sees the words sbatch sees."""
    letters = [c for c in SBATCH_OPTSTRING if c.isalpha()]
    script = PROBE.format(names=" ".join(sorted(SBATCH_LONG)), letters=" ".join(letters))
    if cluster == "tba":
        done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "SLURM_CONF": testbed.slurm_conf_a})
    else:
        done = ap(testbed, script, timeout=300)
    seen = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
    other = ONLY_IN["24.11" if cluster == "tba" else "22.05"]
    wrong = {n: (k, seen.get(n)) for n, k in SBATCH_LONG.items()
             if seen.get(n) != str(k) and not (seen.get(n) == "missing" and n in other)}
    assert wrong == {}, wrong
    missing = {n for n, k in seen.items() if k == "missing"}
    assert missing <= other
    # the other version's names this one knows only as abbreviations (22.05: --extra is
    # --extra-node-info) take a value as the option they abbreviate does
    for n in other - missing:
        assert any(m != n and m.startswith(n) and str(SBATCH_LONG[m]) == seen[n] for m in SBATCH_LONG), n
    shorts = {c: ("2" if SBATCH_OPTSTRING[i + 1:i + 3] == "::" else "1" if SBATCH_OPTSTRING[i + 1:i + 2] == ":"
                  else "0") for i, c in enumerate(SBATCH_OPTSTRING) if c.isalpha()}
    # -h and -V print and exit before the next letter is read: they take no value
    assert {c: seen[f"-{c}"].replace("exits", "0") for c in letters} == shorts
    assert {c for c in letters if seen[f"-{c}"] == "exits"} == {"h", "V"}
    helped = sbatch_on(testbed, cluster, ["sbatch", "--help"]).stdout
    assert set(re.findall(r"--([a-z][a-z0-9-]*)", helped)) <= set(SBATCH_LONG)
    assert set(re.findall(r"^\s+-([A-Za-z]),", helped, re.M)) <= set(letters)


# --------------------------------------------------------------------------- sbatch, resel's argv

#: (extra options, accepted by resel, what sbatch makes of resel's argv with them: True if it keeps
#: every option resel set and reads the script from stdin). resel refuses what sbatch reads as
#: one of resel's options even where resel's own comes later and wins (-o, --output): it does not
#: rely on the order of its options
SBATCH_CASES = [
    (["--mem=100M"], True, True),
    (["--mem", "100M"], True, True),
    (["--comment", "/tmp/evil.sh"], True, True),         # a value, not the script
    (["--comment=a b", "-O"], True, True),
    (["-vk"], True, True),                               # --verbose --no-kill
    (["--nice=5", "--mail-type", "NONE"], True, True),
    (["--exclusive=user"], True, True),
    (["--open-mode", "append", "--begin=now"], True, True),
    (["-vJ1"], False, False),                            # -v -J 1: the job's name
    (["/tmp/evil.sh"], False, False),                    # the batch script
    (["--exclusive", "user"], False, False),             # --exclusive takes its value only attached
    (["--comment"], False, False),                       # would take --no-requeue as its value
    (["--"], False, False),
    ([":", "--mem=100M"], False, False),                 # a heterogeneous job's next component
    (["--time-min=1", "-t", "600"], False, False),
    (["-n", "4"], False, False),
    (["--usage"], False, False),
    (["-vo/tmp/resel-hijack.out"], False, True),         # -v -o /tmp/x: resel's later --output wins
    (["--out=/tmp/x"], False, True),                     # --output abbreviated: the same
]


def captured_sbatch(options: list[str], tmp_path: Path) -> tuple[list[str], str]:
    """The argv and stdin ``SlurmCLI.submit`` runs, for a pilot with these extra options (the
    options set after the constructor, so that those it refuses can be shown to sbatch too)."""
    sbatch = Recorded({"sbatch": "123\n"})
    cli = SlurmCLI(sbatch)
    cli.extra_sbatch = tuple(options)
    cli.submit("#!/bin/sh\ntrue\n", name="resel-r1-p7", cores=2, walltime=600, workdir=str(tmp_path),
               output=str(tmp_path / "pilot.out"))
    return sbatch.calls[0], sbatch.inputs[0]


def sbatch_keeps_resel_s_options(done: subprocess.CompletedProcess, workdir: str) -> bool:
    """sbatch -v's 'defined options' hold resel's own as resel set them, and it read the
    script from stdin (test-only: 'to start at')."""
    text = done.stderr + done.stdout
    if text.count("end of defined options") != 1:       # a heterogeneous job: one block a component
        return False
    defined = dict(re.findall(r"^sbatch: (\S+)\s+: (.*)$", text, re.M))
    wanted = {"job-name": "resel-r1-p7", "output": f"{workdir}/pilot.out", "chdir": workdir, "ntasks": "1",
              "cpus-per-task": "2", "time": "00:10:00", "no-requeue": "no-requeue"}
    return done.returncode == 0 and "to start at" in text and all(defined.get(k) == v for k, v in wanted.items())


@pytest.mark.parametrize("options, accepted, kept", SBATCH_CASES, ids=[" ".join(c[0]) for c in SBATCH_CASES])
def test_sbatch_options_resel_accepts_are_those_sbatch_reads_as_resel_does(testbed, cluster, tmp_path, options,
                                                                           accepted, kept):
    if cluster == "tbc":
        workdir = f"/tmp/resel-optparse-{os.getpid()}"
        ap(testbed, f"mkdir -p {workdir}")
    else:
        workdir = str(tmp_path)
    assert (check_sbatch_options(options) == []) is accepted
    argv, stdin = captured_sbatch(options, Path(workdir))
    assert argv[0] == "sbatch" and "--parsable" in argv
    argv = ["sbatch", "-v", "--test-only", *[a for a in argv[1:] if a != "--parsable"]]
    try:
        done = sbatch_on(testbed, cluster, argv, stdin, cwd=workdir)
    finally:
        if cluster == "tbc":
            ap(testbed, f"rm -rf {workdir}", check=False)
    assert sbatch_keeps_resel_s_options(done, workdir) is kept, (done.returncode, done.stderr[-2000:])


# --------------------------------------------------------------------------- Slurm's Torque qsub

#: (extra options, accepted by resel, what the wrapper makes of resel's argv: True if its sbatch
#: line keeps resel's size, walltime, name, output, no-requeue and script)
QSUB_CASES = [
    (["-m", "n"], True, True),
    (["-l", "mem=4gb"], True, True),             # joined into resel's own -l (the wrapper keeps the last)
    (["-l=mem=4gb", "-M", "me@example.org"], True, True),
    (["-V", "-P", "proj"], True, True),
    (["-W", "depend=afterok:1"], True, True),
    (["-l", "walltime=99:00:00"], False, False),
    (["-l", "mppwidth=8"], False, False),        # the wrapper makes it --ntasks
    (["-pe", "shm", "4"], False, False),         # ... --cpus-per-task
    (["/tmp/evil.sh"], False, False),
    (["-N", "other"], False, False),
    (["-b", "y"], False, False),                 # --wrap: the script is no longer the pilot's
    (["-r", "y"], False, False),
    (["-l", "cput=10:00:00"], False, True),      # the time limit, were walltime not beside it
    (["-wd", "/tmp"], False, True),              # -D: harmless where the script cds itself, refused all the same
]


def script_of(line: list[str]) -> str | None:
    """The batch script of the wrapper's sbatch line: the first word that is neither an option
    nor the value of one the wrapper writes as two words (-e, -o, -J, -p)."""
    words = iter(line[1:])
    for word in words:
        if word in ("-e", "-o", "-J", "-p"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def last_values(line: list[str]) -> dict[str, str]:
    """What sbatch would read from the wrapper's line for the options resel sets (the last of
    each wins): -N, -n, -t (attached), -J, -o (the next word), --cpus-per-task=."""
    out: dict[str, str] = {}
    for i, word in enumerate(line):
        if word in ("-J", "-o") and i + 1 < len(line):
            out[word] = line[i + 1]
        elif word[:2] in ("-N", "-n", "-t") and len(word) > 2:
            out[word[:2]] = word[2:]
        elif word.startswith("--cpus-per-task="):
            out["-c"] = word.split("=", 1)[1]
    return out


def captured_qsub(options: list[str], tmp_path: Path, monkeypatch) -> list[str]:
    """The argv ``PBSCLI.submit`` (Torque dialect) runs; options it refuses are put through too
    (its checks patched out), so that the wrapper can show what they would do."""
    qsub = Recorded({"qsub": "123.vm\n"})
    cli = pbs_cli.PBSCLI(qsub, dialect="torque")
    cli.extra_qsub = tuple(options)
    monkeypatch.setattr(pbs_cli, "check_qsub_options", lambda *a, **k: [])
    cli.submit("#!/bin/sh\ntrue\n", name="resel-r1-p7", cores=2, walltime=600, workdir=str(tmp_path))
    return qsub.calls[0]


@pytest.mark.parametrize("options, accepted, kept", QSUB_CASES, ids=[" ".join(c[0]) for c in QSUB_CASES])
def test_qsub_options_resel_accepts_are_those_the_torque_wrapper_reads_as_resel_does(testbed, tmp_path, monkeypatch,
                                                                                     options, accepted, kept):
    assert (check_qsub_options(options, dialect="torque") == []) is accepted
    argv = captured_qsub(options, tmp_path, monkeypatch)
    script = argv[-1]
    Path(script).write_text("#!/bin/sh\ntrue\n")
    done = subprocess.run(["qsub", "-sbatchline", *argv[1:]], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_CONF": testbed.slurm_conf_a})
    line = done.stdout.split()
    wanted = {"-N": "1", "-n": "2", "-t": "10", "-J": "resel-r1-p7", "-o": f"{tmp_path}/resel-r1-p7.out"}
    ok = (done.returncode == 0 and script_of(line) == script == line[-1] and "--no-requeue" in line and "--wrap" not in done.stdout
          and last_values(line) == wanted)
    assert ok is kept, done.stdout + done.stderr
    if options == ["-l", "mem=4gb"]:
        assert "--mem=4096M" in line


def test_qsub_auto_dialect_is_never_less_strict_than_torque():
    """A site whose dialect is found at run time ("auto") is checked against every qsub that
    may answer: what the Torque reading refuses, auto refuses too."""
    for options, accepted, _ in QSUB_CASES:
        if not accepted:
            assert check_qsub_options(options) != [], options


# --------------------------------------------------------------------------- condor_submit

#: submit commands that set an attribute of resel's — found by giving condor_submit -dry-run every
#: key its library's strings name (and their tails after an '_'), each with a path, a number and a
#: boolean, and keeping those that changed one: 8,672 keys, 20 hits, the others resel's own or
#: input/stdin (In, which resel leaves alone) — and some a site may set
CONDOR_CASES = {
    "request_memory": ("300MB", True), "request_disk": ("1GB", True), "+SingularityImage": ('"/cvmfs/x"', True),
    "requirements": ("OpSysMajorVer == 9", True), "MY.Note": ('"x"', True), "getenv": ("false", True),
    "executable": ("/bin/sh", False), "Arguments": ("x", False), "initialdir": ("/tmp", False),
    "batch_name": ("other", False), "request_cpus": ("4", False), "log": ("/tmp/l", False),
    "output": ("/tmp/o", False), "error": ("/tmp/e", False), "transfer_input_files": ("/tmp/x", False),
    "accounting_group": ("x", False), "accounting_group_user": ("x", False), "acctgroupuser": ("x", False),
    "container_image": ("/tmp/img.sif", False), "universe": ("local", False), "+JobBatchName": ('"x"', False),
    "MY.Iwd": ('"/tmp"', False), "periodic_remove": ("false", False), "+ProjectName": ('"other"', False),
}
CONDOR_ATTRIBUTES = ("JobUniverse Cmd TransferExecutable Arguments Args Iwd JobBatchName ShouldTransferFiles "
                     "WhenToTransferOutput TransferInput TransferOutput Out Err UserLog RequestCpus WantIOProxy "
                     "ReselWalltime PeriodicRemove ProjectName AcctGroup AccountingGroup AcctGroupUser").split()


def test_condor_submit_lines_resel_accepts_leave_its_attributes_alone(trixie):  # noqa: F811
    workdir = f"/tmp/resel-optparse-condor-{os.getpid()}"
    files = [f"{workdir}/resel-agent.py", f"{workdir}/chirp.py", f"{workdir}/resel-chirp.log"]
    ap(trixie, f"mkdir -p {workdir} && touch {' '.join(files)}")

    def ad(extra: dict[str, str]) -> dict[str, str]:
        desc = pilot_description(name="resel-r1-p7", pilot_dir=workdir, agent=files[0], wrapper=files[1],
                                 python="python3", agent_args=["--dir", "x"], walltime=600, agent_sha256="a" * 64,
                                 project="proj", accounting_group="grp")
        desc.update(extra)                  # as the backend adds them (after its own checks)
        done = ap(trixie, f"cat > {workdir}/p.sub && condor_submit -dry-run - {workdir}/p.sub",
                  input=render_submit(desc), check=False)
        return {k: v for k, v in re.findall(r"^(\w+)=(.*)$", done.stdout, re.M) if k in CONDOR_ATTRIBUTES}

    base = ad({})
    assert base["Cmd"] and base["Iwd"] == f'"{workdir}"' and base["JobBatchName"] == '"resel-r1-p7"'
    try:
        for key, (value, accepted) in CONDOR_CASES.items():
            assert (check_condor_lines({key: value}) == []) is accepted, key
            changed = ad({key: value}) != base
            assert changed is not accepted, (key, value)
    finally:
        ap(trixie, f"rm -rf {workdir}", check=False)
