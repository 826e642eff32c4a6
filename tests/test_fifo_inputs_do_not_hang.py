"""A FIFO given as an input file is read or refused, never waited on for ever (issue 24's
independent review: `sites show --sites FIFO`, `simulate FIFO`, `replay FIFO` and
`history import --sacct FIFO` blocked in open() until killed; `--sacct /dev/zero` read without
end). A pipe with a writer (`--sites <(…)`) still works."""

from __future__ import annotations

import os
import threading

import pytest
from click.testing import CliRunner

from resel.cli import cli

SITES = ('[[site]]\nname="a"\nkind="simulated"\ncores=8\nclock={base=2.0}\n'
         'pilot={mode="single", walltime=3600}\nwait=60\n')


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def _run(argv):
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", CliRunner().invoke(cli, argv)), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), f"{argv} still waits on the FIFO"
    return result["r"]


@pytest.mark.parametrize("argv", [
    ["sites", "show", "--sites", "{f}"],
    ["simulate", "{f}", "--sizes", "2", "--no-store"],
    ["replay", "{f}"],
    ["history", "import", "--site", "s", "--swf", "{f}", "--db", "{db}"],
    ["history", "import", "--site", "s", "--sacct", "{f}", "--db", "{db}"],
])
def test_a_fifo_nobody_writes_to_is_an_error_not_a_hang(tmp_path, fifo, argv):
    r = _run([a.replace("{f}", str(fifo)).replace("{db}", str(tmp_path / "h.db")) for a in argv])
    assert r.exit_code == 1, r.output


def test_sacct_from_a_device_is_refused(tmp_path):
    r = _run(["history", "import", "--site", "s", "--sacct", "/dev/zero", "--db", str(tmp_path / "h.db")])
    assert r.exit_code == 1 and "is a device" in r.output


def test_a_pipe_with_a_writer_is_still_read():
    """What `--sites <(cat sites.toml)` gives: /dev/fd/N, a pipe whose writer is there."""
    read, write = os.pipe()
    try:
        os.write(write, SITES.encode())
        os.close(write)
        r = _run(["sites", "show", "--sites", f"/dev/fd/{read}"])
        assert r.exit_code == 0, r.output
    finally:
        os.close(read)


@pytest.mark.parametrize("name", ["", "a\nb", "\x1b[31m"])
def test_history_import_refuses_a_site_name_no_sites_file_can_give(tmp_path, name):
    """(issue 24's review) `--site ""` stored 29 waits under an empty name and exited 0."""
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n1 0 5 100 1 -1 -1 1 200 -1 1 1 1 -1 1 -1 -1 -1\n")
    r = CliRunner().invoke(cli, ["history", "import", "--site", name, "--swf", str(trace), "--db", str(tmp_path / "h.db")])
    assert r.exit_code == 2 and "--site" in r.output
