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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["check_condor_lines", "check_qsub_options", "check_sbatch_options", "check_setup",
           "setup_block", "torque_resources", "SBATCH_RESERVED", "QSUB_RESERVED", "CONDOR_RESERVED"]

#: control characters: a newline would start another directive or command
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: what Slurm's Torque wrapper (a shell passing its arguments on unquoted) may be given
TORQUE_SAFE = re.compile(r"[A-Za-z0-9_.,:=@%+/-]+\Z")

#: sbatch's long options and what each takes, as getopt_long reads them (0 no value, 1 a value —
#: attached, --opt=value, or the next word —, 2 an optional value, only attached): the union of
#: the tables the real sbatch of Slurm 22.05.8 and 24.11.5 hands getopt_long (read from both by
#: intercepting the call; tests/test_site_options_live.py checks every entry against both)
SBATCH_LONG: dict[str, int] = {
    **dict.fromkeys((
        "contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot requeue "
        "spread-job stepmgr test-only usage use-min-nodes verbose version wait").split(), 0),
    **dict.fromkeys((
        "account acctg-freq array autocomplete batch bb bbf begin chdir cluster cluster-constraint clusters "
        "comment constraint container container-id context core-spec cores-per-socket cpu-freq cpus-per-gpu "
        "cpus-per-task deadline delay-boot dependency distribution error exclude export export-file extra "
        "extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres "
        "gres-flags hint input job-name kill-on-invalid-dep licenses mail-type mail-user mcs-label mem "
        "mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core "
        "ntasks-per-gpu ntasks-per-node ntasks-per-socket ntasks-per-tres open-mode output partition power "
        "prefer priority profile qos reservation segment signal sockets-per-node switches tasks-per-node "
        "thread-spec threads-per-core time time-min tmp tres-bind tres-per-task uid wait-all-nodes wckey "
        "wrap").split(), 1),
    **dict.fromkeys("exclusive get-user-env nice no-kill oom-kill-step propagate resv-ports".split(), 2),
}
#: sbatch's short options (its getopt optstring, the same in both versions; '+': the first word
#: that is not an option ends them, and is the batch script) and the long option each is
SBATCH_OPTSTRING = "+A:a:b:D:M:C:S:c:d:m:e:x:B:G:hHi:J:L:k::F:w:N:n:o:Osp:q:Qt:vVW"
SBATCH_SHORT: dict[str, str] = {
    "A": "account", "a": "array", "b": "begin", "D": "chdir", "M": "clusters", "C": "constraint",
    "S": "core-spec", "c": "cpus-per-task", "d": "dependency", "m": "distribution", "e": "error",
    "x": "exclude", "B": "extra-node-info", "G": "gpus", "h": "help", "H": "hold", "i": "input",
    "J": "job-name", "L": "licenses", "k": "no-kill", "F": "nodefile", "w": "nodelist", "N": "nodes",
    "n": "ntasks", "o": "output", "O": "overcommit", "s": "oversubscribe", "p": "partition", "q": "qos",
    "Q": "quiet", "t": "time", "v": "verbose", "V": "version", "W": "wait"}
#: the same option under two long names
SBATCH_ALIASES = {"tasks-per-node": "ntasks-per-node"}

_PRINTS = "sbatch would print and exit without submitting anything"
#: sbatch options resel sets itself, or that would stop a pilot from being one (name → why, what
#: to use instead)
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
    "clusters": "a site is one Slurm cluster, the one resel polls (another cluster is another site: "
                "give its SLURM_CONF in access.env)",
    "cluster": "a site is one Slurm cluster, the one resel polls (another cluster is another site: "
               "give its SLURM_CONF in access.env)",
    "hold": "a held pilot never starts until someone releases it, so the run would wait on it for ever "
            "(to start pilots later, use --begin)",
    "help": _PRINTS, "usage": _PRINTS, "version": _PRINTS, "autocomplete": _PRINTS,
}

#: qsub options resel sets itself (letter → why)
QSUB_RESERVED: dict[str, str] = {
    "N": "resel names every pilot resel-RUN-pPILOT: it finds its pilots again by that name",
    "o": "a pilot's output goes to pilot.out in its directory",
    "e": "a pilot's errors go to pilot.out in its directory",
    "j": "resel joins stdout and stderr (-j oe)",
    "k": "a pilot's output goes to pilot.out in its directory",
    "q": "use access.queue",
    "A": "use access.account",
    "r": "use the site's requeue = true",
    "d": "a pilot runs in its own directory under access.workdir",
    "w": "a pilot runs in its own directory under access.workdir",
    "J": "one batch job is one pilot",
    "t": "one batch job is one pilot",
    "I": "a pilot is a batch job",
    "z": "resel reads the job id qsub prints",
    "S": "the pilot script is resel's, run by /bin/sh",
    "b": "the batch script is the pilot's, which starts the agent",
    "pe": "resel sizes pilots (Slurm's Torque qsub makes -pe shm N --cpus-per-task)",
    "h": "a held pilot never starts until someone releases it, so the run would wait on it for ever "
         "(to start pilots later, use -a)",
}
#: the options of the qsub programs written in C, read with POSIX getopt (letters grouped, a
#: value attached, -lmem=1gb, or the next word): PBS Pro/OpenPBS's and Torque's, as their
#: manuals list them — the letters that take a value in either (none takes one in one and none
#: in the other) and those that take none
QSUB_VALUED = set("aAbcCdDeFjJKlLmMNopPqrRStTuvwW")
QSUB_FLAGS = set("fhInVxXz")
#: Slurm's Torque wrapper (the qsub of slurm-wlm-torque, a Perl script): its Getopt::Long
#: specification as that script gives it (no bundling, abbreviations, '-' or '--', require_order:
#: the first word that is not an option begins the script); 's' a value, 'i' a whole number,
#: 's?' an optional value, 's2' two values, '' none
QSUB_TORQUE: dict[str, str] = {
    "a": "s", "A": "s", "b": "s", "cwd": "", "e": "s", "h": "", "I": "", "j": "s?", "J": "s", "l": "s",
    "m": "s", "M": "s", "N": "s", "o": "s", "p": "i", "pe": "s2", "P": "s", "q": "s", "r": "s", "S": "s",
    "t": "s", "v": "s", "V": "", "wd": "s", "W": "s", "help": "", "?": "", "man": "", "sbatchline": ""}
#: what the Torque wrapper's long names are in the letters above
QSUB_TORQUE_LETTER = {"wd": "w", "help": "help", "?": "help", "man": "help", "sbatchline": "sbatchline",
                      "cwd": "cwd", "pe": "pe"}
_TORQUE_ONLY = {"help": "qsub would print its help and exit without submitting anything",
                "sbatchline": "qsub would print the sbatch command and exit without submitting anything"}
#: -l resources resel sets itself, or that Slurm's Torque wrapper turns into what resel sets (cput
#: and pcput into sbatch's time limit, mppwidth into --ntasks, mppdepth into --cpus-per-task)
QSUB_RESOURCES = {"select": "resel asks select=1:ncpus=N (PBS Pro) or nodes=1:ppn=N (Torque)",
                  "ncpus": "resel sizes pilots from pilot.max_cores and the bag",
                  "nodes": "a pilot is one agent on one node", "ppn": "resel sizes pilots",
                  "walltime": "use pilot.walltime", "place": "a pilot is one agent on one node",
                  "cput": "use pilot.walltime (Slurm's Torque qsub makes it the time limit)",
                  "pcput": "use pilot.walltime (Slurm's Torque qsub makes it the time limit)",
                  "mppwidth": "a pilot is one agent process (Slurm's Torque qsub makes it --ntasks)",
                  "mppdepth": "resel sizes pilots (Slurm's Torque qsub makes it --cpus-per-task)"}
#: -W attributes that would stop qsub from returning at once (it would wait for the pilot to end)
QSUB_ATTRIBUTES = {"block": "qsub must return at once, not wait for the pilot to end"}

#: HTCondor submit commands (and job attributes) resel writes itself, lowercased, and those that
#: change an attribute resel writes (found by giving condor_submit -dry-run every key its library
#: names, tests/test_option_parsing_live.py)
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
    **{k: "use access.accounting_group (HTCondor makes AccountingGroup of the group and this user)"
       for k in ("accounting_group_user", "acctgroupuser")},
    **{k: "the pilot transfers only its own inputs and runs as itself (an image would be transferred "
          "with them and the pilot run inside it; for the OSG's images use +SingularityImage)"
       for k in ("container_image", "containerimage")},
    **{k: "the pilot transfers only its own inputs (a tool daemon is transferred and run beside it)"
       for k in ("tool_daemon_cmd", "tooldaemoncmd")},
    "queue": "one submission is one pilot",
    **{k: "a held pilot never starts until someone releases it, so the run would wait on it for ever "
          "(to start pilots later, use deferral_time)" for k in ("hold",)},
}
_CONDOR_KEY = re.compile(r"(\+|(?i:my)\.)?[A-Za-z_][A-Za-z0-9_.]*\Z")


def _word_problem(opt: object) -> str | None:
    if not isinstance(opt, str) or opt == "":
        return "must be a non-empty string"
    if _CONTROL.search(opt):
        return "holds a newline or another control character (one option per list item, on one line)"
    return None


@dataclass(frozen=True)
class _Option:
    """One option as the submit command reads it: the item that names it (``index``, written
    ``shown``), the option (``name``: sbatch's long name, qsub's letter) and its value(s)."""

    index: int
    shown: str
    name: str
    values: tuple[str, ...] = ()
    grouped: bool = False          # one of several short options in one word (-vJ1)
    value_index: int = -1          # the item holding the (last) value: this one or the next

    @property
    def at(self) -> int:
        """The item a problem of the value is reported at."""
        return self.value_index if self.value_index >= 0 else self.index


_POSITIONAL = ("{word!r} is not an option: {tool} would take it as the batch script (and resel's own "
               "options after it as the script's arguments); give each option as one item, with its "
               "value attached or as the next item")


@dataclass
class _Reading:
    """What a reading of the words found: options, problems (dangers), unknown options."""

    found: list[_Option] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)
    unknown: list[tuple[int, str]] = field(default_factory=list)


def _scan(options: Sequence[str], tool: str, option: Callable[[int, str, _Reading], int]) -> _Reading:
    """The words in order: ``--`` and words that are not options are problems (the tool would
    take what follows as the script and its arguments), an option is read by ``option(i, word,
    reading)``, which returns the index of the last word it took (its value's)."""
    reading = _Reading()
    i = 0
    while i < len(options):
        word = options[i]
        if word == "--":
            reading.problems.append((i, f"'--' ends {tool}'s options: resel's own after it would become the "
                                        "batch script and its arguments"))
        elif word.startswith("-") and len(word) > 1:
            i = option(i, word, reading)
        else:
            reading.problems.append((i, _POSITIONAL.format(word=word, tool=tool)))
        i += 1
    return reading


def _getopt(options: Sequence[str], tool: str, shorts: Mapping[str, int], longs: Mapping[str, int]) -> _Reading:
    """``options`` read as GNU getopt_long reads them (short options grouped, a value attached or
    the next word, ``--name``, ``--name=value``, a long name abbreviated): the options, and the
    problems that make the words unsafe to put before resel's own — a word that is not an option
    (the tool would take it as the script), ``--`` (the same for every word after it), and a
    value the next word must give when there is none (the tool would take resel's next option as
    that value).

    ``shorts``: letter → 0/1/2 (no value, a value, an optional attached one); ``longs``: name →
    the same. Long names are given as the canonical option name they resolve to. Options the
    tool does not know (or cannot tell apart) come in a list of their own: the tool refuses the
    whole command for them, so they are failures rather than dangers.
    """
    def option(i: int, word: str, r: _Reading) -> int:
        if word.startswith("--") and longs:
            name, eq, value = word[2:].partition("=")
            resolved = _long_name(name, longs)
            takes = longs.get(resolved)
            if takes is None:
                r.unknown.append((i, f"{word!r} {resolved[1:]}"))
            elif eq and takes == 0:
                r.problems.append((i, f"{word!r}: --{resolved} takes no value"))
            elif eq or takes != 1:
                r.found.append(_Option(i, word, resolved, (value,) if eq else ()))
            elif i + 1 < len(options):
                r.found.append(_Option(i, word, resolved, (options[i + 1],), value_index=i + 1))
                return i + 1
            else:
                r.found.append(_Option(i, word, resolved))
                r.problems.append((i, f"{word!r} needs a value: attach it (--{resolved}=VALUE) or give it as "
                                      "the next item"))
            return i
        letters = word[1:]
        for at, letter in enumerate(letters):
            takes = shorts.get(letter)
            grouped = len(letters) > 1
            if takes is None:
                r.unknown.append((i, f"{word!r}: -{letter} is not an option of {tool}"))
                break
            rest = letters[at + 1:]
            if takes == 0:
                r.found.append(_Option(i, word, letter, (), grouped))
                continue
            if rest or takes == 2:
                r.found.append(_Option(i, word, letter, (rest,) if rest else (), grouped and at > 0))
            elif i + 1 < len(options):
                r.found.append(_Option(i, word, letter, (options[i + 1],), grouped, i + 1))
                return i + 1
            else:
                r.found.append(_Option(i, word, letter, (), grouped))
                r.problems.append((i, f"{word!r}: -{letter} needs a value, attached or as the next item"))
            break
        return i
    return _scan(options, tool, option)


def _long_name(name: str, longs: Mapping[str, int]) -> str:
    """The long option ``--name`` is, as getopt_long finds it: the exact name, else the one
    option it abbreviates (several with the same value rule count as one); "!why" if none."""
    if name in longs:
        return name
    matches = [n for n in longs if n.startswith(name)] if name else []
    if not matches:
        return "!is not an option of sbatch (Slurm 22.05–24.11)"
    if len({longs[n] for n in matches}) > 1 or len(matches) > 1 and not _same_option(matches):
        return f"!is ambiguous: it abbreviates {', '.join('--' + n for n in matches[:6])}"
    return matches[0]


def _same_option(names: Sequence[str]) -> bool:
    return len({SBATCH_ALIASES.get(n, n) for n in names}) == 1


def check_sbatch_options(options: Sequence[str]) -> list[tuple[int, str]]:
    """Problems of extra ``sbatch`` options: ``(index, why)`` for each refused item.

    The words are read as sbatch reads them (its own getopt_long table, :data:`SBATCH_LONG`):
    short options in groups (``-vo/tmp/x`` is ``-v -o /tmp/x``), values attached or in the next
    word, long names abbreviated (``--out=x`` is ``--output``). Refused: an option resel sets
    itself (:data:`SBATCH_RESERVED`), a word that is not an option (sbatch would take it as the
    batch script), ``--``, an option sbatch does not know, and an option whose value would be the
    next word when there is none (resel's own next option would become that value).
    """
    problems: list[tuple[int, str]] = []
    for i, opt in enumerate(options):
        why = _word_problem(opt)
        if why:
            problems.append((i, f"{opt!r} {why}"))
    if problems:
        return problems
    shorts = {c: (2 if SBATCH_OPTSTRING[k + 1:k + 3] == "::" else 1 if SBATCH_OPTSTRING[k + 1:k + 2] == ":" else 0)
              for k, c in enumerate(SBATCH_OPTSTRING) if c.isalpha()}
    reading = _getopt(options, "sbatch", shorts, SBATCH_LONG)
    for o in reading.found:
        name = SBATCH_SHORT.get(o.name, o.name) if len(o.name) == 1 else SBATCH_ALIASES.get(o.name, o.name)
        if name not in SBATCH_RESERVED:
            continue
        if o.grouped:
            why = (f"{o.shown!r} groups short options, one of which (-{o.name}) is --{name}, which resel sets "
                   f"itself: {SBATCH_RESERVED[name]}")
        elif o.shown.startswith("--") and not o.shown[2:].split("=", 1)[0] == name:
            why = f"{o.shown!r} abbreviates --{name}, which resel does not take: {SBATCH_RESERVED[name]}"
        elif o.shown.startswith("--"):
            why = f"{o.shown!r} sets --{name}, which resel does not take: {SBATCH_RESERVED[name]}"
        else:
            why = f"{o.shown!r} is --{name}, which resel does not take: {SBATCH_RESERVED[name]}"
        problems.append((o.index, why))
    return _one_each(problems + reading.problems + reading.unknown)


def _one_each(problems: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """The first reason given for each item, in the order of the items."""
    first: dict[int, str] = {}
    for index, why in problems:
        first.setdefault(index, why)
    return sorted(first.items())


def _torque_getopt(options: Sequence[str]) -> _Reading:
    """``options`` read as Slurm's Torque wrapper reads them (Perl's Getopt::Long with
    :data:`QSUB_TORQUE`: ``-name`` or ``--name``, ``=value`` or the next word, names abbreviated,
    no groups), with the same problems as :func:`_getopt`. Names are given as the letter (or
    word) of :data:`QSUB_RESERVED` they stand for."""
    def option(i: int, word: str, r: _Reading) -> int:
        name, eq, value = word.lstrip("-").partition("=")
        matches = [name] if name in QSUB_TORQUE else [n for n in QSUB_TORQUE if name and n.startswith(name)]
        if len(matches) != 1:
            r.unknown.append((i, f"{word!r} is " + ("ambiguous on a Torque site" if matches
                                                    else "not an option of Slurm's Torque qsub")))
            return i
        spec = QSUB_TORQUE[matches[0]]
        letter = QSUB_TORQUE_LETTER.get(matches[0], matches[0])
        if spec == "":
            if eq:
                r.problems.append((i, f"{word!r}: -{matches[0]} takes no value"))
            r.found.append(_Option(i, word, letter))
        elif eq and spec != "s2":
            r.found.append(_Option(i, word, letter, (value,)))
        elif spec == "s?":
            if i + 1 < len(options) and not options[i + 1].startswith("-"):
                r.found.append(_Option(i, word, letter, (options[i + 1],), value_index=i + 1))
                return i + 1
            r.found.append(_Option(i, word, letter))
        else:
            need = 2 if spec == "s2" else 1
            have = ([value] if eq else []) + list(options[i + 1:i + 1 + need - bool(eq)])
            taken = len(have) - bool(eq)
            r.found.append(_Option(i, word, letter, tuple(have), value_index=i + taken if taken else -1))
            if len(have) < need:
                r.problems.append((i, f"{word!r} needs {need} value(s) as the next item(s)"))
            return i + taken
        return i
    return _scan(options, "qsub", option)


def check_qsub_options(options: Sequence[str], torque: bool = False, dialect: str | None = None
                       ) -> list[tuple[int, str]]:
    """Problems of extra ``qsub`` options (PBS Pro/OpenPBS and Torque): ``(index, why)``.

    The words are read as each qsub that may answer reads them — PBS Pro's and Torque's with
    POSIX getopt (letters grouped, ``-lmem=4gb``), and for a Torque site (or one whose dialect is
    ``auto``) Slurm's Torque wrapper with Perl's Getopt::Long (``-l mem=4gb`` or ``-l=mem=4gb``,
    names abbreviated) — and refused if one would see an option resel sets (``-N``, ``-o``, ...;
    ``-l`` resources ``walltime``/``select``/``nodes``/...; ``-W block``), a word that is not an
    option (qsub would take it as the script), ``--`` or a missing value. A reading in which qsub
    would refuse an unknown option counts only if every reading would.
    With ``torque`` (or dialect "torque") every item must also be shell-safe: Slurm's Torque
    wrapper passes its arguments through a shell unquoted.
    """
    dialect = dialect or ("torque" if torque else "auto")
    problems: list[tuple[int, str]] = []
    for i, opt in enumerate(options):
        why = _word_problem(opt)
        if why:
            problems.append((i, f"{opt!r} {why}"))
        elif dialect == "torque" and not TORQUE_SAFE.match(opt):
            problems.append((i, f"{opt!r} may hold only letters, digits and _ . , : = @ % + / - on a Torque "
                                "site (Slurm's qsub wrapper passes it through a shell unquoted)"))
    if problems:
        return problems
    # PBS Pro's and Torque's own qsub, and Slurm's Torque wrapper where it may answer
    readings = [_getopt(options, "qsub", {**dict.fromkeys(QSUB_VALUED, 1), **dict.fromkeys(QSUB_FLAGS, 0)}, {})]
    if dialect in ("torque", "auto"):
        readings.append(_torque_getopt(options))
    # a dialect whose qsub would refuse an option it does not know submits nothing: its reading
    # counts only if every reading would (then that refusal is the problem)
    usable = [r for r in readings if not r.unknown] or [_Reading(problems=r.unknown) for r in readings[:1]]
    reserved: list[tuple[int, str]] = []
    for reading in usable:
        for o in reading.found:
            if o.name in QSUB_RESERVED:
                why = (f"{o.shown!r} groups options, one of which is -{o.name}" if o.grouped
                       else f"{o.shown!r} sets -{o.name}")
                reserved.append((o.index, f"{why}, which resel does not take: {QSUB_RESERVED[o.name]}"))
            elif o.name in _TORQUE_ONLY:
                reserved.append((o.index, f"{o.shown!r}: {_TORQUE_ONLY[o.name]}"))
            elif o.name == "l":
                reserved += [(o.at, why) for value in o.values for why in _resource_problems(value)]
            elif o.name == "W":
                reserved += [(o.at, why) for value in o.values for why in _attribute_problems(value)]
    return _one_each(reserved + [p for r in usable for p in r.problems])


def torque_resources(options: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``-l`` values of checked extra qsub options, and the other items, for a Torque site:
    Slurm's Torque wrapper keeps only the last ``-l`` it is given, so an extra ``-l mem=4gb``
    after resel's ``-l nodes=1:ppn=N,walltime=W`` dropped the pilot's size and walltime;
    the backend joins them into its own ``-l`` instead."""
    resources, taken = [], set()
    for o in _torque_getopt(options).found:
        if o.name == "l":
            resources += list(o.values)
            taken.update(range(o.index, max(o.index, o.at) + 1))
    return resources, [opt for i, opt in enumerate(options) if i not in taken]


def _attribute_problems(value: str) -> list[str]:
    key = value.split("=", 1)[0].strip().lower()
    return [f"-W {value!r} sets {key}: {QSUB_ATTRIBUTES[key]}"] if key in QSUB_ATTRIBUTES else []


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
            problems.append((key, f"{key!r} is one resel does not take: {CONDOR_RESERVED[bare]}"))
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
