"""Wait history per site and shape class (models/history.py) and ``resel history`` (resel/cli/history.py).

Coverage is checked the way a bound is stated: over many independent histories drawn from a
known distribution, the share of bounds at or above the true quantile must reach the
confidence, less three binomial standard errors of that share (the slack of a finite check).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from statistics import NormalDist

import click
import pytest
from click.testing import CliRunner

from resel.cli.history import error_sizes, history_group, register
from resel.errors import InputError, ReselError
from resel.models.history import (HistoryBound, WaitHistory, WaitRecord, cores_class, load_history,
                                  records_from_jobs, records_from_sacct_file, records_from_store,
                                  records_from_swf, save_records, shape_class, walltime_class)
from resel.models.qbets import min_history
from resel.store import open_store

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SACCT_RECORD = DATA / "formats" / "slurm" / "ssh_sacct_command.json"
HPC2N = DATA / "swf" / "hpc2n.swf"


def rec(wait: float, i: int, *, site: str = "s", cores: int = 1, walltime: float | None = 600.0,
        source: str = "sacct") -> WaitRecord:
    submit = 1000.0 * i
    return WaitRecord(site, None, cores, walltime, submit, submit + wait, source, str(i))


def slack(confidence: float, trials: int) -> float:
    """Three binomial standard errors of a share whose expected value is ``confidence``."""
    return 3 * math.sqrt(confidence * (1 - confidence) / trials)


# ---------------------------------------------------------------------------- shape classes


@pytest.mark.parametrize("cores,label", [(1, "1"), (2, "2"), (3, "3-4"), (4, "3-4"), (5, "5-8"), (8, "5-8"),
                                         (9, "9-16"), (64, "33-64"), (65, "65-128")])
def test_cores_buckets_are_powers_of_two(cores, label):
    assert cores_class(cores) == label


@pytest.mark.parametrize("walltime,label", [(60, "<=1h"), (3600, "<=1h"), (3601, "<=4h"), (4 * 3600, "<=4h"),
                                            (12 * 3600, "<=12h"), (86400, "<=24h"), (86401, ">24h"),
                                            (None, "unknown")])
def test_walltime_buckets(walltime, label):
    assert walltime_class(walltime) == label


def test_shape_class_joins_both_and_rejects_zero_cores():
    assert shape_class(6, 7200) == "5-8c/<=4h"
    assert shape_class(1, None) == "1c/unknown"
    with pytest.raises(ValueError, match="cores"):
        shape_class(0, 60)


def test_wait_record_wait_and_checks():
    assert rec(42.0, 1).wait == 42.0
    skewed = WaitRecord("s", None, 1, None, 100.0, 99.5, "resel", "1")
    assert skewed.wait == 0.0                       # clock skew is not a negative wait
    with pytest.raises(ValueError, match="source"):
        WaitRecord("s", None, 1, None, 0.0, 1.0, "squeue", "1")


# ---------------------------------------------------------------------------- coverage


def _exponential(rng: random.Random) -> float:
    return rng.expovariate(1 / 600.0)


def _lognormal(rng: random.Random) -> float:
    return rng.lognormvariate(6.0, 1.5)


def _true_quantile(name: str, q: float) -> float:
    if name == "exponential":
        return -600.0 * math.log(1 - q)
    return math.exp(6.0 + 1.5 * NormalDist().inv_cdf(q))


@pytest.mark.parametrize("dist", ["exponential", "lognormal"])
@pytest.mark.parametrize("quantile,confidence", [(0.95, 0.95), (0.9, 0.95), (0.5, 0.9)])
def test_bound_covers_the_true_quantile_with_the_stated_confidence(dist, quantile, confidence):
    """Through WaitHistory (so with change-point trimming): of the bounds given, the stated
    share covers; a stable queue rarely has its bound withheld after a false alarm."""
    draw = _exponential if dist == "exponential" else _lognormal
    true = _true_quantile(dist, quantile)
    trials, n = 300, 120
    rng = random.Random(f"{dist}-{quantile}-{confidence}")
    covered, missing, ratios = 0, 0, []
    for _ in range(trials):
        history = WaitHistory(rec(draw(rng), i) for i in range(n))
        b = history.bound("s", 1, 600, quantile, confidence)
        if b.seconds is None:
            # a false change point near the end left too little history: no bound, not a wrong one
            missing += 1
            continue
        assert b.level == "shape"
        covered += b.seconds >= true
        ratios.append(b.seconds / true)
    given = trials - missing
    assert covered / given >= confidence - slack(confidence, given), (covered, missing, trials)
    assert missing / trials < 0.1                   # measured: 0 to 0.077
    ratios.sort()
    assert ratios[len(ratios) // 2] < 3             # and not trivially loose (the maximum would be)


def test_bound_adapts_to_a_tenfold_change_within_min_history_plus_twenty_waits():
    """500 waits of mean 100 s, then the queue turns ten times slower. 79 waits after the change
    (59 to rebuild a 95 %/95 % bound plus 20 to notice the change) the bound covers the new
    quantile in about as many histories as a bound should (measured: 0.96 of 200)."""
    q = c = 0.95
    new_true = -1000.0 * math.log(1 - q)
    after = min_history(q, c) + 20
    trials = 200
    covered = changed = 0
    for seed in range(trials):
        rng = random.Random(seed)
        waits = [rng.expovariate(1 / 100) for _ in range(500)] + [rng.expovariate(1 / 1000) for _ in range(after)]
        b = WaitHistory(rec(w, i) for i, w in enumerate(waits)).bound("s", 1, 600, q, c)
        covered += b.seconds is not None and b.seconds >= new_true
        changed += b.change_points >= 1 and b.n < len(waits)
    assert covered / trials >= c - slack(c, trials), covered
    assert changed / trials > 0.9


# ---------------------------------------------------------------------------- fallback and reasons


def test_thin_shape_class_falls_back_to_cores_then_site():
    rng = random.Random(1)
    records = ([rec(rng.uniform(0, 100), i, walltime=600) for i in range(30)]
               + [rec(rng.uniform(0, 100), 100 + i, walltime=7200) for i in range(40)]
               + [rec(rng.uniform(0, 900), 200 + i, cores=16) for i in range(100)])
    h = WaitHistory(records)
    b = h.bound("s", 1, 600)
    assert (b.level, b.group, b.n) == ("cores", "s/1c", 70)
    assert "too few waits for s/1c/<=1h (30 < 59)" in b.reason
    assert h.bound("s", 16, 600).level == "shape"
    assert h.bound("s", 2, 600).level == "site"
    assert h.bound("s", 1, None).level == "cores"     # no walltime: no shape level to try


def test_no_bound_says_why_in_words():
    h = WaitHistory(rec(10.0 * i, i) for i in range(12))
    b = h.bound("s", 1, 600)
    assert b.seconds is None and b.level is None
    assert b.reason == ("only 12 waits for s/1c/<=1h (12 for s/1c, 12 for s); "
                        "a 95 % bound at 95 % confidence needs 59")
    unknown = h.bound("elsewhere", 1, 600)
    assert unknown.seconds is None and "no waits recorded for elsewhere" in unknown.reason
    assert "resel history import" in unknown.reason
    assert HistoryBound(**b.as_dict()) == b


def test_same_job_from_sacct_and_from_resel_counts_once():
    pilot = WaitRecord("s", None, 4, 3600.0, 0.0, 40.0, "resel", "77")
    acct = WaitRecord("s", "debug", 4, 3600.0, 0.0, 37.0, "sacct", "77")
    swf = WaitRecord("s", None, 4, 3600.0, 0.0, 5.0, "swf", "77")
    h = WaitHistory([pilot, acct, swf])
    assert len(h) == 2
    assert {r.source for r in h.records("s")} == {"sacct", "swf"}


# ---------------------------------------------------------------------------- sacct importers


def _real_sacct() -> dict:
    return json.loads(SACCT_RECORD.read_text())


def test_real_recorded_sacct_without_a_cpu_column_is_skipped_and_counted():
    got = records_from_sacct_file(SACCT_RECORD, "testbed")
    assert got.records == () and got.skipped == {"without a CPU count": 1}
    assert got.describe() == "0 wait(s) from ssh_sacct_command.json; skipped 1 job(s) (1 without a CPU count)"


def test_real_recorded_sacct_with_assumed_cores():
    got = records_from_sacct_file(SACCT_RECORD, "testbed", default_cores=1)
    (r,) = got.records
    assert r == WaitRecord("testbed", "part01", 1, 7200 * 60.0, 1750232859.0, 1750232859.0, "sacct", "1")
    assert r.wait == 0.0


def test_sacct_text_with_its_header_line(tmp_path):
    doc = _real_sacct()
    header = doc["command"].split("--format='")[1].rstrip("'").replace(",", "|")
    path = tmp_path / "sacct.txt"
    path.write_text(f"{header}\n{doc['stdout']}\n")
    (r,) = records_from_sacct_file(path, "testbed", default_cores=2).records
    assert (r.job_id, r.cores, r.partition, r.submit) == ("1", 2, "part01", 1750232859.0)


def test_sacct_text_in_resels_own_columns_skips_steps_and_pending(tmp_path):
    # no header: resel's own SACCT_FIELDS (JobID JobName State Submit Start End Elapsed AllocCPUS
    # ExitCode Timelimit User Partition Reason)
    path = tmp_path / "acct.txt"
    path.write_text("7|job|COMPLETED|100|160|200|00:00:40|4|0:0|01:00:00|u|debug|None\n"
                    "7.batch|batch|COMPLETED|100|160|200|00:00:40|4|0:0|||debug|\n"
                    "8|job|PENDING|150|Unknown|Unknown|00:00:00|0|0:0|02:00:00|u|debug|Priority\n"
                    "9|job|CANCELLED by 0|150|None|170|00:00:00|0|0:0|02:00:00|u|debug|None\n")
    got = records_from_sacct_file(path, "s")
    assert [(r.job_id, r.wait, r.cores, r.walltime) for r in got.records] == [("7", 60.0, 4, 3600.0)]
    assert got.skipped == {"never started": 2}


def test_sacct_json_constructed(tmp_path):
    """CONSTRUCTED: sacct --json (data_parser v0.0.40 style) with one started and one pending job."""
    n = lambda v: {"set": True, "infinite": False, "number": v}  # noqa: E731
    doc = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.40"}}, "errors": [], "jobs": [
        {"job_id": 31, "name": "a", "partition": "long", "state": {"current": ["COMPLETED"], "reason": "None"},
         "required": {"CPUs": 8}, "time": {"submission": 1000, "start": 1300, "end": 2000, "limit": n(120)}},
        {"job_id": 32, "name": "b", "partition": "long", "state": {"current": ["PENDING"], "reason": "Priority"},
         "required": {"CPUs": 8}, "time": {"submission": 1100, "start": 0, "end": 0, "limit": n(120)}}]}
    path = tmp_path / "acct.json"
    path.write_text(json.dumps(doc))
    got = records_from_sacct_file(path, "s")
    assert [(r.job_id, r.wait, r.cores, r.walltime, r.partition) for r in got.records] == [
        ("31", 300.0, 8, 7200.0, "long")]
    assert got.skipped == {"never started": 1}


def test_records_from_jobs_counts_each_reason():
    from resel.backends.jobs import JobInfo, slurm_state

    def job(jid, state, submit, start, cpus=1):
        return JobInfo(jid, "n", slurm_state(state), submit, start, None, None, cpus, None, None, native=state)
    jobs = {"1": job("1", "COMPLETED", 10.0, 20.0), "2": job("2", "RUNNING", None, 20.0),
            "3": job("3", "COMPLETED", 1000.0, 20.0), "4": job("4", "PENDING", 10.0, None)}
    got = records_from_jobs(jobs, "s")
    assert [r.job_id for r in got.records] == ["1"]
    assert got.skipped == {"without a submit time": 1, "starting before their submit time": 1, "never started": 1}


@pytest.mark.parametrize("content,where,problem", [
    ('{"jobs": [', "line 1 column", "not valid JSON"),
    ('{"meta": {}}', None, "a JSON object with keys meta"),
    ("[1, 2]", None, "is a JSON list"),
    ("", None, "is empty"),
    ("JobID|State|Submit|Start\n5|COMPLETED|100\n", None, "line 1: expected 4 '|'-separated fields, got 3"),
    ("JobID|State|Submit|Start|AllocCPUS\n5|COMPLETED|yesterday|100|1\n", None, "submit: not a time"),
    ("Submit|Start\n1|2\n", None, "needs JobID and State columns"),
    ('{"command": "sacct", "stdout": "", "stderr": "sacct: error: Slurm accounting storage is disabled", '
     '"exit_code": 1}', "exit_code", "Slurm accounting storage is disabled"),
])
def test_a_malformed_sacct_file_names_the_file_and_the_problem(tmp_path, content, where, problem):
    path = tmp_path / "bad-sacct.txt"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        records_from_sacct_file(path, "s")
    text = str(info.value)
    assert text.startswith(str(path)) and problem in text, text
    if where:
        assert where in text
    if where != "exit_code":
        assert "sacct -P" in text                     # what the file should have been


def test_a_missing_sacct_file():
    with pytest.raises(InputError, match="file not found"):
        records_from_sacct_file("/nonexistent/sacct.txt", "s")


# ---------------------------------------------------------------------------- SWF importer


def test_swf_importer_on_the_real_hpc2n_trace():
    got = records_from_swf(HPC2N, "seth")
    assert len(got.records) == 3170 and got.skipped == {}
    first = got.records[0]
    # line 1: id 1, submit 0, wait 308434, 30 procs requested, 37980 s requested; UnixStartTime 1027839845
    assert first == WaitRecord("seth", "1", 30, 37980.0, 1027839845.0, 1027839845.0 + 308434, "swf", "hpc2n.swf#1")
    assert all(r.wait >= 0 for r in got.records)
    assert len(records_from_swf(HPC2N, "seth", limit=100).records) == 100


def test_swf_skips_jobs_without_a_wait_or_cancelled_before_start(tmp_path):
    path = tmp_path / "t.swf"
    path.write_text("; UnixStartTime: 1000\n"
                    "1 0 10 100 4 -1 -1 4 3600 -1 1 1 1 -1 -1 1 -1 -1\n"
                    "2 5 -1 100 4 -1 -1 4 3600 -1 1 1 1 -1 -1 1 -1 -1\n"
                    "3 6 50 -1 -1 -1 -1 2 -1 -1 5 1 1 -1 -1 -1 -1 -1\n"
                    "4 7 20 30 8 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1 -1\n")
    got = records_from_swf(path, "t")
    assert [(r.job_id, r.submit, r.wait, r.cores, r.walltime, r.partition) for r in got.records] == [
        ("t.swf#1", 1000.0, 10.0, 4, 3600.0, "1"), ("t.swf#4", 1007.0, 20.0, 8, None, None)]
    assert got.skipped == {"without a recorded wait": 1, "cancelled before they started": 1}


def test_a_malformed_swf_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.swf"
    path.write_text("; Version: 2.2\n"
                    "1 0 10 100 4 -1 -1 4 3600 -1 1 1 1 -1 -1 1 -1 -1\n"
                    "2 5 ten 100 4 -1 -1 4 3600 -1 1 1 1 -1 -1 1 -1 -1\n")
    with pytest.raises(InputError) as info:
        records_from_swf(path, "s")
    assert str(info.value).startswith(f"{path}: line 3: field 3 (wait) is 'ten'")


# ---------------------------------------------------------------------------- store


def _add_live_pilots(db, rows):
    db["runs"].insert({"id": 1, "mode": "live"})
    db["live_pilots"].insert_all({"run_id": 1, "pilot": i, **row} for i, row in enumerate(rows))


def test_migration_creates_wait_history_keyed_for_idempotent_imports(tmp_path):
    db = open_store(tmp_path / "r.db")
    assert "wait_history" in db.table_names()
    assert db["wait_history"].pks == ["site", "source", "job_id"]


def test_reimporting_the_same_file_adds_nothing(tmp_path):
    db = open_store(tmp_path / "r.db")
    got = records_from_swf(HPC2N, "seth", limit=500)
    assert save_records(db, got.records) == 500
    assert save_records(db, got.records) == 0
    assert save_records(db, records_from_swf(HPC2N, "seth", limit=600).records) == 100
    assert db["wait_history"].count == 600
    h = load_history(open_store(tmp_path / "r.db", write=False))
    assert len(h) == 600 and h.sites() == ["seth"]
    assert [r.submit for r in h.records("seth")] == sorted(r.submit for r in h.records("seth"))


def test_load_history_adds_resels_own_pilots_that_started(tmp_path):
    db = open_store(tmp_path / "r.db")
    _add_live_pilots(db, [
        {"site": "a", "job_id": "101", "cores": 4, "walltime": 3600.0, "submitted": 10.0, "started": 70.0},
        {"site": "a", "job_id": "102", "cores": 4, "walltime": 3600.0, "submitted": 20.0, "started": None},
        {"site": "b", "job_id": None, "cores": 1, "walltime": None, "submitted": 30.0, "started": 31.0}])
    assert [(r.site, r.job_id, r.wait, r.source) for r in records_from_store(db)] == [
        ("a", "101", 60.0, "resel"), ("b", "run1.pilot2", 1.0, "resel")]
    assert [r.job_id for r in records_from_store(db, "b")] == ["run1.pilot2"]
    save_records(db, [WaitRecord("a", "debug", 4, 3600.0, 10.0, 65.0, "sacct", "101"),
                      WaitRecord("a", "debug", 1, 600.0, 40.0, 45.0, "sacct", "103")])
    h = load_history(db, "a")
    assert [(r.job_id, r.source, r.wait) for r in h.records()] == [("101", "sacct", 55.0), ("103", "sacct", 5.0)]
    assert len(load_history(db)) == 3


# ---------------------------------------------------------------------------- CLI


@pytest.fixture
def cli():
    @click.group()
    def top() -> None:
        """A stand-in for resel's top-level group."""
    register(top)
    return top


def invoke(cli, *args):
    return CliRunner().invoke(cli, ["history", *map(str, args)])


def test_cli_import_is_idempotent_and_show_prints_the_classes(cli, tmp_path):
    db = tmp_path / "r.db"
    first = invoke(cli, "import", "--site", "seth", "--swf", HPC2N, "--db", db)
    assert first.exit_code == 0, first.output
    assert "seth: 3170 wait(s) from hpc2n.swf; 3170 new, 0 already stored" in first.output
    again = invoke(cli, "import", "--site", "seth", "--swf", HPC2N, "--db", db, "--json")
    assert again.exit_code == 0 and json.loads(again.output)["new"] == 0
    shown = invoke(cli, "show", "--db", db)
    assert shown.exit_code == 0, shown.output
    assert "5-8c/<=1h" in shown.output and "95 % bound at 95 % confidence" in shown.output
    doc = json.loads(invoke(cli, "show", "--db", db, "--json", "--quantile", "0.9").output)
    assert doc["quantile"] == 0.9 and sum(c["n"] for c in doc["classes"]) == 3170


def test_cli_show_one_shape(cli, tmp_path):
    db = tmp_path / "r.db"
    invoke(cli, "import", "--site", "seth", "--swf", HPC2N, "--db", db)
    doc = json.loads(invoke(cli, "show", "--db", db, "--cores", 16, "--walltime", 3000, "--json").output)
    (b,) = doc["bounds"]
    assert b["site"] == "seth" and b["seconds"] > 0 and b["level"] in ("shape", "cores", "site")
    table = invoke(cli, "show", "--db", db, "--cores", 16, "--walltime", 3000)
    assert table.exit_code == 0 and "16-core job" in table.output and "(9-16c/<=1h)" in table.output


def test_cli_import_sacct_record(cli, tmp_path):
    db = tmp_path / "r.db"
    out = invoke(cli, "import", "--site", "tb", "--sacct", SACCT_RECORD, "--cores-if-unknown", 1, "--db", db)
    assert out.exit_code == 0 and "1 new" in out.output
    skipped = invoke(cli, "import", "--site", "tb", "--sacct", SACCT_RECORD, "--db", db, "--json")
    assert json.loads(skipped.output)["skipped"] == {"without a CPU count": 1}


def test_cli_errors_are_one_line_without_traceback(cli, tmp_path):
    db = tmp_path / "r.db"
    bad = tmp_path / "bad.txt"
    bad.write_text("not sacct at all\n")
    out = invoke(cli, "import", "--site", "x", "--sacct", bad, "--db", db)
    assert out.exit_code == 1 and out.output.startswith(f"Error: {bad}: ") and "Traceback" not in out.output
    neither = invoke(cli, "import", "--site", "x", "--db", db)
    assert neither.exit_code == 2 and "exactly one of --sacct FILE or --swf FILE" in neither.output
    empty = invoke(cli, "show", "--db", db)
    assert empty.exit_code == 1 and "no wait history" in empty.output and "resel history import" in empty.output
    lonely = invoke(cli, "show", "--db", db, "--walltime", 60)
    assert lonely.exit_code == 2 and "--walltime needs --cores" in lonely.output


def test_help_texts_teach(cli):
    out = " ".join(CliRunner().invoke(cli, ["history", "--help"]).output.split())
    assert "resel history import --site" in out and "needs 59 waits" in out
    sub = " ".join(CliRunner().invoke(cli, ["history", "import", "--help"]).output.split())
    assert "Importing the same file again adds nothing" in sub and "--cores-if-unknown" in sub
    assert history_group.name == "history"


def test_error_sizes_by_definition():
    """P10/median/P90 as statistics.quantiles' inclusive method gives them, computed by hand on
    ten errors; the share within ±10 min counts both ends; nothing to size gives None."""
    errors = [-900.0, -600.0, -60.0, 0.0, 0.0, 30.0, 120.0, 600.0, 601.0, 7200.0]
    d = error_sizes(errors)
    # inclusive method: position (n - 1) * k / 10 between sorted values
    assert d["p10"] == pytest.approx(-900 + 0.9 * 300) and d["p90"] == pytest.approx(601 + 0.1 * 6599)
    assert d["p50"] == 15.0 and d["n"] == 10
    assert d["mean_abs"] == pytest.approx(sum(abs(e) for e in errors) / 10)
    assert d["within_10min"] == pytest.approx(0.7)          # -600 and 600 count, -900, 601, 7200 do not
    assert error_sizes([])["p50"] is None


def test_errors_are_resel_errors():
    assert issubclass(InputError, ReselError)


def test_start_latency_is_the_median_start_of_pilots_that_did_not_queue():
    """WaitHistory.start_latency (issue 26 item 2): resel's own pilots that started within a
    minute, their median wait; other sources and pilots that queued do not count."""
    from resel.models.history import WaitHistory, WaitRecord
    recs = [WaitRecord("tba", None, 2, 60.0, 100.0 + i * 10, 100.0 + i * 10 + w, "resel", f"j{i}")
            for i, w in enumerate([0.9, 5.2, 1.4, 2.0, 300.0])]
    recs.append(WaitRecord("tba", None, 2, 60.0, 0.0, 0.1, "sacct", "other"))
    history = WaitHistory(recs)
    seconds, n = history.start_latency("tba")
    assert n == 4 and seconds == pytest.approx((1.4 + 2.0) / 2)
    assert history.start_latency("tbb") is None
