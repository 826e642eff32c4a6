"""An output option never replaces a device, a pipe or a socket (issue 24's independent review).

resel writes an output to a fresh file and renames it over the target, so `replay --output
/dev/full` (and `report --html /dev/full`) replaced the device node with a regular file when
run as root, and reported success; a FIFO another program reads would be replaced the same
way. Such a target is now refused before any work."""

from __future__ import annotations

import os
import stat

import pytest
from click.testing import CliRunner

from resel.cli import cli

LINE = "1 0 5 100 1 -1 -1 1 200 -1 1 1 1 -1 1 -1 -1 -1\n"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_replay_output_to_a_fifo_is_refused_and_the_fifo_stays(tmp_path, fifo):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n" + LINE)
    r = CliRunner().invoke(cli, ["replay", str(trace), "--output", str(fifo)])
    assert r.exit_code == 1 and "device, pipe or socket" in r.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_the_writer_refuses_a_device(tmp_path):
    from resel.errors import ReselError
    from resel.outputs import create
    with pytest.raises(ReselError, match="device, pipe or socket"):
        create("/dev/null", option="--html")
