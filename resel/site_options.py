"""A site's own scheduler options and pilot setup, checked before they reach a scheduler.

Real sites need options resel cannot guess (``--mem=8G``, ``--constraint=avx512``,
``-l mem=4gb``, ``request_memory = 8GB``, ``+SingularityImage``) and a setup before anything
runs (``module load gromacs/2024``, a conda activation). A sites file passes them through, but
resel's pilots depend on a few options being exactly what resel wrote: the job's name (how a
pilot is found again after a crash), its output file, working directory, shape (one agent on
one node with N cores), walltime, partition/account/QOS (their own keys), no requeue, and on
HTCondor the executable and arguments that verify the agent before running it. An option that
would override one of those is refused here, with the key that does the job instead, before
any run — not silently overridden, and not discovered when a pilot disappears.

Every option is one word (a list item), no control characters: it reaches the scheduler as one
argv element, quoted by the transport. Setup lines are shell commands the sites file's author
wrote (a sites file is code, docs/configuration.md) and go into the pilot's batch script as
written, one line each; a line may not hold a newline, so one setup line is one shell line.

Pure functions only: :mod:`resel.config` calls them with the file's key path for its errors,
and the backends call them again (a site built in Python bypasses the file).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

__all__ = ["check_condor_lines", "check_qsub_options", "check_sbatch_options", "check_setup",
           "setup_block", "SBATCH_RESERVED", "QSUB_RESERVED", "CONDOR_RESERVED"]

#: control characters: a newline would start another directive or command
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: what Slurm's Torque wrapper (a shell passing its arguments on unquoted) may be given
TORQUE_SAFE = re.compile(r"[A-Za-z0-9_.,:=@%+/-]+\Z")

#: sbatch long options resel sets itself (name → what to use instead)
SBATCH_RESERVED: dict[str, str] = {
    "job-name": "resel names every pilot resel-RUN-pPILOT: it finds its pilots again by that name",
    "output": "a pilot's output goes to pilot.out in its directory (the agent's messages)",
    "error": "a pilot's errors go to pilot.out in its directory",
    "input": "the pilot script is read from resel",
    "wrap": "the batch script is the pilot's, which starts the agent",
    "chdir": "a pilot runs in its own directory under access.workdir",
    "parsable": "resel reads sbatch's reply itself",
    "requeue": "use the site's requeue = true",
    "no-requeue": "resel submits --no-requeue unless requeue = true",
    "ntasks": "a pilot is one agent process: resel asks --ntasks=1 --cpus-per-task=N",
    "cpus-per-task": "resel sizes pilots from pilot.max_cores and the bag",
    "nodes": "a pilot is one agent on one node (its cores must be on that node)",
    "time": "use pilot.walltime",
    "partition": "use access.partition",
    "account": "use access.account",
    "qos": "use access.qos",
    "test-only": "resel asks for start estimates itself",
    "array": "one batch job is one pilot",
    "wait": "sbatch must return at once",
}
#: sbatch short options and the long option each stands for
SBATCH_SHORT = {"J": "job-name", "o": "output", "e": "error", "i": "input", "D": "chdir", "n": "ntasks",
                "c": "cpus-per-task", "N": "nodes", "t": "time", "p": "partition", "A": "account",
                "q": "qos", "a": "array", "W": "wait"}

#: qsub options resel sets itself (letter → why)
QSUB_RESERVED: dict[str, str] = {
    "N": "resel names every pilot resel-RUN-pPILOT: it finds its pilots again by that name",
    "o": "a pilot's output goes to pilot.out in its directory",
    "e": "a pilot's errors go to pilot.out in its directory",
    "j": "resel joins stdout and stderr (-j oe)",
    "q": "use access.queue",
    "A": "use access.account",
    "r": "use the site's requeue = true",
    "d": "a pilot runs in its own directory under access.workdir",
    "w": "a pilot runs in its own directory under access.workdir",
    "J": "one batch job is one pilot",
    "t": "one batch job is one pilot",
    "I": "a pilot is a batch job",
    "z": "resel reads the job id qsub prints",
}
#: qsub options that take a value (the next word, or the rest of the word: -lmem=1gb)
QSUB_VALUED = set("aAcCdDeJjklmMNoPpqrSstuvWw")
#: -l resources resel sets itself
QSUB_RESOURCES = {"select": "resel asks select=1:ncpus=N (PBS Pro) or nodes=1:ppn=N (Torque)",
                  "ncpus": "resel sizes pilots from pilot.max_cores and the bag",
                  "nodes": "a pilot is one agent on one node", "ppn": "resel sizes pilots",
                  "walltime": "use pilot.walltime", "place": "a pilot is one agent on one node"}

#: HTCondor submit commands (and job attributes) resel writes itself, lowercased
CONDOR_RESERVED: dict[str, str] = {
    **{k: "the job runs /usr/bin/env python, which runs the chirp wrapper and agent only if "
          "their sha256 is the one in the job" for k in
       ("executable", "arguments", "args", "transfer_executable", "universe", "cmd", "jobuniverse",
        "transfer_input_files", "transferin", "transferinput")},
    **{k: "a pilot's files live in its directory on the access point" for k in
       ("initialdir", "iwd", "output", "error", "log", "out", "err", "userlog", "transfer_output_files",
        "transfer_output_remaps", "should_transfer_files", "when_to_transfer_output", "wantioproxy")},
    **{k: "resel names every pilot resel-RUN-pPILOT: it finds its pilots again by that name" for k in
       ("batch_name", "jobbatchname")},
    **{k: "resel sizes pilots (one core each on HTCondor)" for k in ("request_cpus", "requestcpus")},
    **{k: "the walltime comes from pilot.walltime" for k in ("reselwalltime", "periodic_remove", "periodicremove")},
    **{k: "use access.project" for k in ("projectname",)},
    **{k: "use access.accounting_group" for k in ("accounting_group", "acctgroup", "accountinggroup")},
    "queue": "one submission is one pilot",
}
_CONDOR_KEY = re.compile(r"(\+|(?i:my)\.)?[A-Za-z_][A-Za-z0-9_.]*\Z")


def _word_problem(opt: object) -> str | None:
    if not isinstance(opt, str) or opt == "":
        return "must be a non-empty string"
    if _CONTROL.search(opt):
        return "holds a newline or another control character (one option per list item, on one line)"
    return None


def check_sbatch_options(options: Sequence[str]) -> list[tuple[int, str]]:
    """Problems of extra ``sbatch`` options: ``(index, why)`` for each refused item.

    Long options may be abbreviated (sbatch reads them with getopt_long), so ``--out=x`` is
    ``--output`` and refused too. A short-option cluster holding a reserved letter (``-vJx``)
    is refused: write it as separate items or in its long form.
    """
    problems: list[tuple[int, str]] = []
    for i, opt in enumerate(options):
        why = _word_problem(opt)
        if why:
            problems.append((i, f"{opt!r} {why}"))
            continue
        if opt.startswith("--"):
            name = opt[2:].split("=", 1)[0]
            if name in SBATCH_RESERVED:
                problems.append((i, f"{opt!r} sets --{name}, which resel sets itself: {SBATCH_RESERVED[name]}"))
            elif name:
                longer = [r for r in SBATCH_RESERVED if r.startswith(name)]
                if longer:
                    problems.append((i, f"{opt!r} abbreviates --{longer[0]}, which resel sets itself: "
                                        f"{SBATCH_RESERVED[longer[0]]}"))
        elif opt.startswith("-") and len(opt) > 1:
            letter = opt[1]
            if letter in SBATCH_SHORT:
                name = SBATCH_SHORT[letter]
                problems.append((i, f"{opt!r} is --{name}, which resel sets itself: {SBATCH_RESERVED[name]}"))
            elif opt[1:].isalpha() and any(c in SBATCH_SHORT for c in opt[1:]):
                problems.append((i, f"{opt!r} groups short options, one of which resel sets itself: "
                                    "give each option as its own item (or its long form)"))
    return problems


def check_qsub_options(options: Sequence[str], torque: bool = False) -> list[tuple[int, str]]:
    """Problems of extra ``qsub`` options (PBS Pro/OpenPBS and Torque): ``(index, why)``.

    ``-l`` resources are read too: ``mem=4gb`` passes, ``walltime=…``/``select=…``/``nodes=…``
    are resel's. With ``torque`` every item must also be shell-safe: Slurm's Torque wrapper
    passes its arguments through a shell unquoted.
    """
    problems: list[tuple[int, str]] = []
    expect_value_of: str | None = None
    for i, opt in enumerate(options):
        why = _word_problem(opt)
        if why:
            problems.append((i, f"{opt!r} {why}"))
            expect_value_of = None
            continue
        if torque and not TORQUE_SAFE.match(opt):
            problems.append((i, f"{opt!r} may hold only letters, digits and _ . , : = @ % + / - on a Torque "
                                "site (Slurm's qsub wrapper passes it through a shell unquoted)"))
        if expect_value_of is not None:
            if expect_value_of == "l":
                problems += [(i, why) for why in _resource_problems(opt)]
            expect_value_of = None
            continue
        if opt.startswith("-") and len(opt) > 1:
            letter, rest = opt[1], opt[2:]
            if letter in QSUB_RESERVED:
                problems.append((i, f"{opt!r} sets -{letter}, which resel sets itself: {QSUB_RESERVED[letter]}"))
                continue
            if letter in QSUB_VALUED:
                if rest:
                    if letter == "l":
                        problems += [(i, why) for why in _resource_problems(rest)]
                else:
                    expect_value_of = letter
    if expect_value_of is not None:
        problems.append((len(options) - 1, f"-{expect_value_of} needs a value as the next item"))
    return problems


def _resource_problems(value: str) -> list[str]:
    out = []
    for part in re.split(r"[,:]", value):
        key = part.split("=", 1)[0].strip().lower()
        if key in QSUB_RESOURCES:
            out.append(f"-l {value!r} sets {key}, which resel sets itself: {QSUB_RESOURCES[key]}")
    return out


def check_condor_lines(lines: Mapping[str, str]) -> list[tuple[str, str]]:
    """Problems of extra HTCondor submit commands (``command = value``): ``(command, why)``.

    Commands are compared case-insensitively, and ``+Attr`` / ``MY.Attr`` with the attribute
    they set, because HTCondor reads them so.
    """
    problems: list[tuple[str, str]] = []
    for key, value in lines.items():
        if not isinstance(key, str) or not _CONDOR_KEY.match(key):
            problems.append((str(key), f"{key!r} is not a submit command (letters, digits, _ and ., "
                                       "optionally after + or MY.)"))
            continue
        bare = re.sub(r"^(\+|(?i:my)\.)", "", key).lower()
        if bare in CONDOR_RESERVED:
            problems.append((key, f"{key!r} is set by resel: {CONDOR_RESERVED[bare]}"))
            continue
        if not isinstance(value, str) or value == "":
            problems.append((key, f"the value of {key!r} must be a non-empty string"))
        elif _CONTROL.search(value):
            problems.append((key, f"the value of {key!r} holds a newline or another control character"))
    return problems


def check_setup(lines: Sequence[str]) -> list[tuple[int, str]]:
    """Problems of pilot setup lines: each one non-empty shell line."""
    problems: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        if not isinstance(line, str) or not line.strip():
            problems.append((i, f"setup line {line!r} must be a non-empty string"))
        elif _CONTROL.search(line.replace("\t", " ")):
            problems.append((i, f"setup line {line!r} holds a newline or another control character: "
                                "give each command as its own list item"))
    return problems


def setup_block(lines: Sequence[str]) -> str:
    """The pilot script's lines that run the site's setup in the pilot's own shell (so a
    ``module load`` or ``conda activate`` changes the environment the agent and its tasks
    inherit), each stopping the pilot with a message on its output if it fails.

    ``{ LINE
    } || { echo ...; exit 1; }`` groups the whole line, so ``a; b`` or ``a && b`` is judged as
    one command; the message quotes the line with :func:`shlex.quote`.
    """
    problems = check_setup(lines)
    if problems:
        raise ValueError(problems[0][1])
    out = []
    for n, line in enumerate(lines, 1):
        said = shlex.quote(f"resel: pilot setup line {n} failed: {line}")
        out.append(f"{{ {line}\n}} || {{ echo {said} >&2; exit 1; }}\n")
    return "".join(out)
