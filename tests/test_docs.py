"""Documentation tests, in the style of sqlite-utils: the CLI documents itself and the README
mentions every command."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from resel.cli import cli

README = Path(__file__).resolve().parent.parent / "README.md"


def _walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):   # lazy groups: every command, loaded
            yield from _walk(command.get_command(ctx, name), path + (name,))


COMMANDS = list(_walk(cli))
TOP_LEVEL = [" ".join(path) for path, _ in COMMANDS if len(path) == 1]


def _id(item) -> str:
    return " ".join(item[0]) or "resel"


@pytest.mark.parametrize("item", COMMANDS, ids=[_id(c) for c in COMMANDS])
def test_command_has_help(item):
    path, command = item
    assert command.help and command.help.strip(), f"`resel {' '.join(path)}` has no help text"


@pytest.mark.parametrize("item", [c for c in COMMANDS if not isinstance(c[1], click.Group)],
                         ids=[_id(c) for c in COMMANDS if not isinstance(c[1], click.Group)])
def test_command_help_has_example(item):
    path, command = item
    help_text = command.help or ""
    assert re.search(r"^\s*Examples?:", help_text, re.MULTILINE), f"`resel {' '.join(path)}` has no Example block"
    # the example lines invoke this very command
    examples = [line.strip() for line in help_text.splitlines() if line.strip().startswith("resel ")]
    assert examples, f"`resel {' '.join(path)}`: the Example block shows no `resel ...` line"
    for line in examples:
        assert line.split()[1:1 + len(path)] == list(path), line


def test_expected_commands_exist():
    assert {"simulate", "runs", "report", "sites"} <= set(TOP_LEVEL)
    assert {"show", "defaults", "check", "status", "probe"} <= {p[1] for p, _ in COMMANDS if p[:1] == ("sites",) and len(p) == 2}


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_readme_mentions_command(name):
    text = README.read_text(encoding="utf-8")
    assert re.search(rf"\bresel {re.escape(name)}\b", text) or re.search(rf"`{re.escape(name)}`", text), (
        f"README.md does not mention the `{name}` command")
