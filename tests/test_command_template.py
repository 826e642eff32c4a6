"""A bag command is a shell command (issue 13 §3): resel fills in only {index} and {name}.

Before the fix ``Bag.command_for`` used ``str.format``, so ``echo ${HOME} | awk '{print $1}'``
raised ``KeyError('HOME')`` at every dispatch and a live run never finished.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from resel.command_template import fill, problems
from resel.config import load_bag
from resel.domain import Bag, Profile
from resel.errors import InputError

SHELLISH = "echo ${HOME} | awk '{print $1}'"


def bag(command: str, name: str = "b") -> Bag:
    return Bag(name, command, 4, 1, Profile(1e9))


@pytest.mark.parametrize("command", [
    SHELLISH,
    "f() { echo hi; }; f",
    "echo ${X:-${HOME}}",                      # nested expansion ends in '}}'
    "docker inspect -f '{{.Id}}' c",           # another program's doubled braces
    "find . -exec {} + ; echo {a,b} {1..3}",
    "echo { } {} {{ }} } {",
])
def test_every_other_brace_is_left_alone(command):
    assert bag(command).command_for(3) == command
    assert problems(command) == []


def test_placeholders_are_filled():
    b = bag("gmx -deffnm md{index} -o {name}-{index:04d}.log", name="water")
    assert b.command_for(7) == "gmx -deffnm md7 -o water-0007.log"


def test_a_name_is_shell_quoted():
    """A bag name reaches the shell as one word, whatever it holds."""
    b = bag("echo {name}; echo {name}-{index}", name="a b; touch /tmp/pwned #")
    cmd = b.command_for(2)
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    assert out == "a b; touch /tmp/pwned #\na b; touch /tmp/pwned #-2\n"


def test_doubled_braces_escape_a_placeholder_only():
    assert fill("{{index}} {{name}} {{Index}} {{.Id}} {{x}}", 1, "n") == "{index} {name} {Index} {{.Id}} {{x}}"


@pytest.mark.parametrize("command, fragment", [
    ("run {idx}", "unknown placeholder '{idx}': did you mean '{index}'?"),
    ("run {Index}", "did you mean '{index}'?"),
    ("run { name }", "did you mean '{name}'?"),
    ("run {names}", "did you mean '{name}'?"),
    ("run ${index}", "'${index}' is ambiguous"),
    ("run ${{RESEL_WATER:-$HOME}}", "'${{' is the brace escape of older resel versions"),
    ("run {index:q}", "format spec 'q' does not fit"),
])
def test_a_doubtful_template_fails_when_the_bag_is_read(tmp_path, command, fragment):
    path = tmp_path / "bag.toml"
    path.write_text(f'[bag]\nname = "b"\ncount = 2\ncommand = {json.dumps(command)}\n'
                    '[bag.profile]\ninstructions = 1e9\n', encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_bag(path)
    text = str(info.value)
    assert text.startswith(f"{path}: bag.command (line 4): ") and fragment in text, text


def test_shell_variables_and_awk_are_accepted_when_read(tmp_path):
    path = tmp_path / "bag.toml"
    path.write_text('[bag]\nname = "b"\ncount = 2\ncommand = "echo ${HOME} | awk \'{print $1}\' # {{idx}}"\n'
                    "[bag.profile]\ninstructions = 1e9\n", encoding="utf-8")
    assert load_bag(path).command_for(0) == "echo ${HOME} | awk '{print $1}' # {idx}"


def test_the_examples_still_read(repo):
    for path in sorted((repo / "examples").glob("*bag*.toml")):
        b = load_bag(path)
        assert "{index}" not in b.command_for(5), path


def test_the_water_example_runs_in_a_shell(repo):
    """The GROMACS water bag's command reaches the shell as written: its input by the name it
    has in the task's folder (docs/data.md), its outputs named md.*."""
    cmd = load_bag(repo / "examples" / "gromacs-water-bag.toml").command_for(3)
    probe = cmd.replace("gmx mdrun", "echo", 1)
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True,
                         env={"HOME": "/h", "PATH": "/usr/bin:/bin"}).stdout
    assert "-s topol.tpr" in out and "-deffnm md" in out


def test_a_shell_command_with_braces_runs_on_the_testbed(tmp_path, testbed):
    """Live: the issue's command runs on a real Slurm cluster and every task finishes."""
    from live_helpers import bag_toml, our_jobs, sites_toml, slurm, start

    command = SHELLISH + "; echo task {index} of {name}"
    coord = start(tmp_path, sites_toml(testbed), bag_toml(4, command, name="brace"), strategy="model")
    try:
        coord.run(max_time=180)
    finally:
        coord.close()
        for line in our_jobs(testbed, coord.run_key):   # only after a failure: this run's pilots
            for cluster in ("a", "b"):
                slurm(testbed, cluster, "scancel", "-n", line.split()[0], check=False)
    db = coord.db
    run = db["runs"].get(coord.run_id)
    assert (run["status"], run["done"], run["failed"]) == ("done", 4, 0)
    rows = list(db.query("select task, stdout_tail from attempts where run_id = ? and outcome = 'done' "
                         "order by task", [coord.run_id]))
    assert [r["task"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        lines = r["stdout_tail"].strip().splitlines()
        assert lines[0].startswith("/") and lines[-1] == f"task {r['task']} of brace", lines
