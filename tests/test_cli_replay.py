"""Tests of ``resel replay`` (resel/cli/trace.py), driven through click's CliRunner.

The real traces under ../shared/data/swf are read-only inputs; every file the command
writes goes under ``tmp_path``. hpc2n replays in a fraction of a second, so the whole file
runs in a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from resel.cli import cli
from resel.sim.swf import read_jobs, read_swf

SWF = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"   # ../shared beside the checkout
HPC2N = SWF / "hpc2n.swf"
WAGAP = SWF / "wagap-2013.swf"
ESTIMATORS = {"mean", "median", "p95", "iqr"}

GOOD = "{id} {submit} 0 10 1 -1 -1 1 20 -1 1 1 1 1 1 1 -1 -1\n"


def invoke(*args):
    return CliRunner().invoke(cli, ["replay", *map(str, args)])


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_clean_failure(result) -> str:
    """Exit status 1, no traceback, a message on stderr; returns the message."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.strip()
    return result.stderr


def test_conservative_json_summary():
    """--json on hpc2n: policy, cores 240 from the header, 3145 jobs and every metric's estimators."""
    doc = as_json(invoke(HPC2N, "--policy", "conservative", "--json"))
    assert doc["policy"] == "conservative"
    assert doc["cores"] == 240
    assert doc["jobs"] == 3145
    for metric in ("wait", "response", "slowdown", "bsld_10", "bsld_60"):
        assert ESTIMATORS <= doc[metric].keys(), metric
        assert all(isinstance(doc[metric][k], (int, float)) for k in ESTIMATORS), metric
    assert doc["wait"]["mean"] >= 0 and doc["bsld_10"]["median"] >= 1


def test_output_keeps_header_and_adds_note(tmp_path):
    """--output writes the original header comments, a 'simulated schedule' note and 3145 jobs."""
    out = tmp_path / "hpc2n-cbf.swf"
    result = invoke(HPC2N, "--policy", "conservative", "--output", out)
    assert result.exit_code == 0, result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    comments = [line for line in lines if line.startswith(";")]
    original = read_swf(HPC2N).header.comments
    assert comments[:len(original)] == original
    notes = [c for c in comments[len(original):] if c.startswith("; Note: simulated schedule by resel replay")]
    assert len(notes) == 1
    assert "--policy conservative" in notes[0]
    job_lines = [line for line in lines if line.strip() and not line.startswith(";")]
    assert len(job_lines) == 3145


def test_output_jobs_carry_simulated_waits(tmp_path):
    """The --output schedule reads back with ids in order and waits >= 0 matching the JSON mean."""
    out = tmp_path / "hpc2n-easy.swf"
    doc = as_json(invoke(HPC2N, "--output", out, "--json"))
    jobs = read_jobs(out)
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    assert all(j.wait >= 0 for j in jobs)
    assert sum(j.wait for j in jobs) / len(jobs) == pytest.approx(doc["wait"]["mean"])
    assert read_swf(out).header.max_procs == 240


def test_trace_without_maxprocs_takes_its_machines_file(tmp_path):
    """wagap has no MaxProcs: its cores come from wagap-2013.swf.machines beside it (zewura
    20 × 80 + zegox 48 × 12 = 2,176, by the Alea format's nodes × cpus per node), and the
    table says so; a copy of the trace without that file fails naming the file and --cores."""
    doc = as_json(invoke(WAGAP, "--first", 500, "--json"))
    assert doc["cores"] == 20 * 80 + 48 * 12 and doc["cores_from"] == "wagap-2013.swf.machines"
    assert "2,176 cores (from wagap-2013.swf.machines)" in invoke(WAGAP, "--first", 500).stdout
    alone = tmp_path / "wagap-2013.swf"
    alone.write_bytes(WAGAP.read_bytes())
    message = assert_clean_failure(invoke(alone))
    assert str(alone) in message and "wagap-2013.swf.machines" in message
    assert "--cores" in message
    failed = invoke(alone, "--json")
    assert failed.exit_code == 1
    assert json.loads(failed.stdout) == {"error": message.strip()[len("Error: "):].splitlines()[0],
                                         "hint": "say how many cores the site has with --cores N"}


def test_trace_without_maxprocs_runs_with_cores():
    """wagap with --cores 2176 --first 500 replays 500 jobs on 2176 cores."""
    doc = as_json(invoke(WAGAP, "--cores", 2176, "--first", 500, "--json"))
    assert doc["cores"] == 2176
    assert doc["jobs"] == 500


def write_bad_trace(tmp_path: Path) -> Path:
    path = tmp_path / "bad.swf"
    path.write_text("; MaxProcs: 4\n" + GOOD.format(id=1, submit=0) + GOOD.format(id=2, submit=5)
                    + "3 7 0 ten 1 -1 -1 1 20 -1 1 1 1 1 1 1 -1 -1\n" + GOOD.format(id=4, submit=9),
                    encoding="utf-8")
    return path


def test_malformed_line_fails_naming_file_and_line(tmp_path):
    """A non-numeric field on line 4 fails with exit 1, the file and 'line 4'."""
    path = write_bad_trace(tmp_path)
    message = assert_clean_failure(invoke(path))
    assert str(path) in message
    assert "line 4" in message


def test_skip_bad_replays_the_rest_and_reports_skipped(tmp_path):
    """--skip-bad drops the bad line, replays the 3 good jobs and says 1 line was skipped."""
    path = write_bad_trace(tmp_path)
    result = invoke(path, "--skip-bad")
    assert result.exit_code == 0, result.output
    assert "skipped 1" in result.stderr
    doc = as_json(invoke(path, "--skip-bad", "--json"))
    assert doc["jobs"] == 3
    assert doc["skipped_bad_lines"] == 1


def test_unsorted_trace_fails_cleanly(tmp_path):
    """A trace whose submit times go backwards fails with exit 1 and no traceback."""
    path = tmp_path / "unsorted.swf"
    path.write_text(GOOD.format(id=1, submit=10) + GOOD.format(id=2, submit=5), encoding="utf-8")
    message = assert_clean_failure(invoke(path, "--cores", 4))
    assert "job 2" in message


def test_unsorted_trace_message_names_the_file(tmp_path):
    """The unsorted-trace error names the trace file, as every InputError must."""
    path = tmp_path / "unsorted.swf"
    path.write_text(GOOD.format(id=1, submit=10) + GOOD.format(id=2, submit=5), encoding="utf-8")
    message = assert_clean_failure(invoke(path, "--cores", 4))
    assert str(path) in message


def test_output_in_missing_directory_fails_cleanly(tmp_path):
    """--output into a directory that does not exist fails with exit 1, naming the file, no traceback."""
    out = tmp_path / "missing" / "schedule.swf"
    message = assert_clean_failure(invoke(SWF / "jaros1.swf", "--cores", 8, "--output", out))
    assert str(out) in message


def test_output_onto_the_trace_itself_is_refused(tmp_path):
    """--output naming the input trace is refused (exit 1) and the trace is left intact."""
    trace = tmp_path / "jaros1.swf"
    trace.write_bytes((SWF / "jaros1.swf").read_bytes())
    result = invoke(trace, "--cores", 8, "--output", trace)
    assert trace.read_bytes() == (SWF / "jaros1.swf").read_bytes()
    assert_clean_failure(result)


def test_status_keeps_only_completed_jobs():
    """--status 1 drops hpc2n's 25 status -1 jobs before the replay: 3145 jobs, none skipped."""
    doc = as_json(invoke(HPC2N, "--status", 1, "--json"))
    assert doc["jobs"] == 3145
    assert doc["skipped_unknown_runtime"] == 0
    unfiltered = as_json(invoke(HPC2N, "--json"))
    assert unfiltered["skipped_unknown_runtime"] == 25


def test_kill_counts_overrunning_jobs():
    """--kill on hpc2n kills exactly the replayed jobs that ran longer than requested (320)."""
    overrun = sum(1 for j in read_swf(HPC2N) if j.run >= 0 and 0 < j.req_time < j.run)
    assert overrun == 320
    doc = as_json(invoke(HPC2N, "--kill", "--json"))
    assert doc["killed"] == overrun
    assert doc["kill"] is True
    assert as_json(invoke(HPC2N, "--json"))["killed"] == 0


def test_help_shows_an_example():
    """replay -h prints the help with its options and an Example."""
    result = invoke("-h")
    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout
    assert "resel replay" in result.stdout
    assert "--policy" in result.stdout and "--cores" in result.stdout


def test_the_command_reads_the_trace_by_its_fast_reader(monkeypatch, tmp_path):
    """With or without --first, --status or --output, ``resel replay`` hands replay() the Trace
    itself, so it is read by the block reader under Trace.replay_rows and replay_columns (no
    Job per line); a Job is parsed only for --skip-bad with --output (its skipped lines are
    known to the reader alone)."""
    from resel.sim.swf import Trace
    calls = []
    original = Trace._blocks
    monkeypatch.setattr(Trace, "_blocks", lambda self, status=False: calls.append(self.path) or original(self, status))
    parsed = []
    parse = Trace._parse
    monkeypatch.setattr(Trace, "_parse", lambda self, *a: parsed.append(a[0]) or parse(self, *a))
    whole, first = as_json(invoke(HPC2N, "--policy", "easy", "--json")), as_json(invoke(HPC2N, "--first", "500", "--json"))
    assert calls == [str(HPC2N)] * 2
    assert whole["jobs"] == 3145 and first["jobs"] + first["skipped_unknown_runtime"] == 500
    as_json(invoke(HPC2N, "--status", "1", "--json"))
    as_json(invoke(HPC2N, "--status", "1", "--policy", "conservative", "--output", tmp_path / "o.swf", "--json"))
    assert len(calls) == 4 and not parsed


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative", "easy-sjbf"])
@pytest.mark.parametrize("options", [[], ["--status", "1", "--first", "3000"], ["--kill", "--speed", "1.3"]])
def test_output_is_the_trace_with_the_simulated_wait_and_run(tmp_path, policy, options):
    """--output by the second read of the trace (swf.write_schedule) against the definition:
    the trace's replayed jobs in trace order, each record equal to the trace's with fields 3
    and 4 replaced by the wait and run that --skip-bad's path writes (a record per job, by
    BatchQueue's in-order hook), every other field as the trace writes it."""
    for trace in (HPC2N, WAGAP):
        fast, slow = tmp_path / f"fast-{trace.name}", tmp_path / f"slow-{trace.name}"
        a = as_json(invoke(trace, "--policy", policy, *options, "--output", fast, "--json"))
        b = as_json(invoke(trace, "--policy", policy, *options, "--skip-bad", "--output", slow, "--json"))
        assert {k: v for k, v in a.items() if k != "output"} == {k: v for k, v in b.items() if k != "output"}
        assert read_jobs(fast) == read_jobs(slow) and len(read_jobs(fast)) == a["jobs"]
        original = {}
        for line in trace.read_text().splitlines():
            tokens = line.split()
            if tokens and not tokens[0].startswith(";"):
                original.setdefault(tokens[0], tokens)
        for line in fast.read_text().splitlines():
            tokens = line.split()
            if tokens and not tokens[0].startswith(";"):
                src = original[tokens[0]]
                assert tokens[:2] == src[:2] and tokens[4:] == src[4:]


def test_first_counts_jobs_read_as_before(tmp_path):
    """--first N keeps the first N jobs read (after --status), as slicing the Job stream did."""
    from resel.sim.replay import replay
    from resel.sim.swf import first, only_status
    direct = replay(first(only_status(iter(read_swf(HPC2N)), {1}), 700), "easy", 240).summary()
    summary = as_json(invoke(HPC2N, "--status", "1", "--first", "700", "--json"))
    assert {k: summary[k] for k in direct} == direct


def test_schedule_lines_are_what_write_swf_writes_for_the_replaced_records(tmp_path):
    """The output's lines, written without copying each record, equal write_swf of
    dataclasses.replace(record, wait=…, run=…) — whole numbers and fractions, extra columns."""
    import dataclasses

    from resel.sim.swf import schedule_line, write_swf
    jobs = read_jobs(WAGAP)[:300] + read_jobs(HPC2N)[:300]
    values = [(0, 7), (12.5, 3.25), (1e-3, 1e6), (3.0, 2.0004), (86400 * 400, 0.1)]
    expected, got = tmp_path / "a.swf", []
    with open(expected, "w") as fh:
        for i, job in enumerate(jobs):
            wait, run = values[i % len(values)]
            num = (lambda v: int(v) if float(v).is_integer() else round(v, 3))
            write_swf(fh, [dataclasses.replace(job, wait=num(wait), run=num(run))])
            got.append(schedule_line(job, wait, run))
    assert expected.read_text().splitlines() == got
