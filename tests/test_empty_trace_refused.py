"""An SWF trace with no job to replay or dispatch is an error, not a summary (issue 24's
independent review: `resel replay` of a header-only trace printed a table of dashes and
`resel grid` a mean bounded slowdown of "nan", both with exit status 0)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from resel.cli import cli

LINE = "1 0 5 100 1 -1 -1 1 200 -1 1 1 1 -1 1 -1 -1 -1\n"


def test_replay_of_a_trace_without_jobs_fails(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n")
    r = CliRunner().invoke(cli, ["replay", str(trace), "--json"])
    assert r.exit_code == 1
    assert "no job to replay" in json.loads(r.stdout)["error"]


def test_replay_whose_filters_leave_no_job_fails_and_writes_no_output(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("; MaxProcs: 4\n" + LINE)
    out = tmp_path / "o.swf"
    r = CliRunner().invoke(cli, ["replay", str(trace), "--status", "5", "--output", str(out)])
    assert r.exit_code == 1 and "left by --status" in r.output
    assert not out.exists()
    assert CliRunner().invoke(cli, ["replay", str(trace)]).exit_code == 0


def test_grid_of_an_empty_trace_fails(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("")
    r = CliRunner().invoke(cli, ["grid", str(trace), "--cluster", "a:4"])
    assert r.exit_code == 1 and "no job to dispatch" in r.output and "nan" not in r.output
