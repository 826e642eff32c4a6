"""Tests of resel.sim.swf: reading the shipped real traces, errors, filters, fuse and round trips."""

from __future__ import annotations

import io
import tempfile
import tracemalloc
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resel.errors import InputError
from resel.sim.swf import (
    FIELDS, Header, Job, Machine, cap_to_request, drop_over_request, drop_zero_runtime, first,
    fuse, only_status, read_jobs, read_machines, read_swf, rebase, time_window, write_swf,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf"
HPC2N = DATA / "hpc2n.swf"
WAGAP = DATA / "wagap-2013.swf"
JAROS = [DATA / f"jaros{i}.swf" for i in (1, 2, 3)]
REAL_TRACES = [HPC2N, WAGAP, *JAROS]


GOOD_LINE = "1 0 5 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 1 -1 -1"


def job(id: int = 1, submit: float = 0, run: float = 100, *, procs: int = 4, req_procs: int = 4,
        req_time: float = 200, status: int = 1, prev_job: int | tuple[int, ...] = -1) -> Job:
    """A hand-made job; the fields not named are -1 (unknown) or 1."""
    return Job(id=id, submit=submit, wait=0, run=run, procs=procs, cpu_time=-1, mem_used=-1,
               req_procs=req_procs, req_time=req_time, req_mem=-1, status=status, user=1,
               group=1, app=-1, queue=-1, partition=1, prev_job=prev_job, think_time=-1)


def write_text(tmp_path: Path, text: str, name: str = "t.swf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------ real traces


def test_hpc2n_job_count():
    """hpc2n holds 3170 jobs (data/README says 3,171; the file has 3170 job lines)."""
    assert len(read_jobs(HPC2N)) == 3170


def test_hpc2n_header_labels():
    """hpc2n's SWF 2.2 header gives MaxProcs 240, MaxNodes 240 and UnixStartTime."""
    header = read_swf(HPC2N).header
    assert (header.max_procs, header.max_nodes, header.unix_start_time) == (240, 240, 1027839845)


def test_hpc2n_header_keeps_every_line_and_repeated_keys():
    """All 23 ';' lines are kept raw; the two Partition lines are both in fields."""
    header = read_swf(HPC2N).header
    assert len(header.comments) == 23 and header.comments[-1] == ";"
    assert header.fields["Partition"] == "1 DEFAULT\n2 ALL"
    assert header.fields["Version"] == "2.2"


def test_hpc2n_float_field_is_float_and_whole_values_are_int():
    """552.21 stays a float; 978.00 and plain integers become int."""
    jobs = {j.id: j for j in read_jobs(HPC2N)}
    assert jobs[12].cpu_time == 552.21
    assert jobs[38].cpu_time == 978 and isinstance(jobs[38].cpu_time, int)
    assert isinstance(jobs[12].submit, int)


def test_hpc2n_statuses():
    """hpc2n has completed (1) and unknown (-1) jobs; the unknown ones have run -1."""
    jobs = read_jobs(HPC2N)
    assert Counter(j.status for j in jobs) == {1: 3145, -1: 25}
    assert all(j.run == -1 for j in jobs if j.status == -1)


def test_wagap_jobs_and_extras():
    """wagap has 17900 jobs, each with 3 extra columns (per-core speeds, queue, node spec)."""
    jobs = read_jobs(WAGAP)
    assert len(jobs) == 17900
    assert all(len(j.extra) == 3 for j in jobs)
    assert jobs[1].extra == ("{1129,1129,1129,1129,1129,1129,1129,1129,1129,1129,1129,1129}",
                             "q_2w", "1:ppn=12")


def test_wagap_has_no_header():
    """wagap has no ';' header, so the labels are None."""
    header = read_swf(WAGAP).header
    assert header.comments == [] and header.max_procs is None and header.unix_start_time is None


def test_jaros1_title_line_and_extras():
    """jaros1's column-name line is not a job: 12 jobs, names kept in header.columns."""
    trace = read_swf(JAROS[0])
    jobs = list(trace)
    assert len(jobs) == 12 and trace.skipped == 0
    assert trace.header.columns[:3] == ("id", "submit", "wait")
    assert jobs[0].extra == ("DAG-1", "1") and jobs[0].submit == 20


def test_jaros_multiple_predecessors_are_tuples():
    """jaros2/3 write several predecessors as '1&2&3&4&5' in field 17: read as a tuple."""
    jobs2, jobs3 = read_jobs(JAROS[1]), read_jobs(JAROS[2])
    assert (len(jobs2), len(jobs3)) == (12, 16)
    assert jobs2[5].prev_job == (1, 2, 3, 4, 5)
    assert jobs3[6].prev_job == (4, 5, 6) and jobs3[7].prev_job == 7


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_round_trip_real_trace(path, tmp_path):
    """Reading, writing and reading again a real trace gives the same jobs and header labels."""
    trace = read_swf(path)
    out = tmp_path / "out.swf"
    write_swf(out, trace, trace.header)
    again = read_swf(out)
    assert list(again) == list(trace)
    assert again.header.fields == trace.header.fields


# ------------------------------------------------------------------ machines


def test_machines_hpc2n():
    """hpc2n.swf.machines: one cluster 'seth' of 120 nodes x 2 CPUs = 240 cores."""
    assert [(m.name, m.nodes, m.cpus_per_node, m.cores) for m in
            read_machines(str(HPC2N) + ".machines")] == [("seth", 120, 2, 240)]


def test_machines_wagap():
    """wagap-2013.swf.machines: zewura 20 x 80 and zegox 48 x 12."""
    machines = read_machines(str(WAGAP) + ".machines")
    assert [(m.id, m.name, m.nodes, m.cpus_per_node, m.cores) for m in machines] == [
        (0, "zewura", 20, 80, 1600), (1, "zegox", 48, 12, 576)]


def test_machines_extra_column_ignored():
    """jaros machines files carry a 7th column, which is ignored."""
    assert read_machines(str(JAROS[0]) + ".machines") == [
        Machine(0, "FIT-demo-cluster", 16, 16, 1, 67108864)]


@pytest.mark.parametrize("line, problem", [
    ("0 seth 120 2 1", "has 5 fields"),
    ("0 seth many 2 1 1048576", "nodes is 'many'"),
    ("0 seth 120 2.5 1 1048576", "cpus_per_node is '2.5'"),
    ("0 seth 0 2 1 1048576", "nodes is '0'"),
], ids=["too-few", "text", "fraction", "zero"])
def test_machines_malformed_line(tmp_path, line, problem):
    """A malformed machines line raises InputError naming the file, line and problem."""
    path = write_text(tmp_path, f"0 ok 1 1 1 1\n\n{line}\n", "bad.machines")
    with pytest.raises(InputError) as info:
        read_machines(path)
    assert info.value.where == "line 3" and problem in info.value.problem
    assert str(path) in str(info.value)


# ------------------------------------------------------------------ malformed traces


def test_too_few_fields_raises_with_line(tmp_path):
    """A line with fewer than 18 fields raises InputError naming the file and 'line N'."""
    path = write_text(tmp_path, f"; Version: 2.2\n{GOOD_LINE}\n1 2 3\n")
    with pytest.raises(InputError) as info:
        list(read_swf(path))
    assert str(info.value).startswith(f"{path}: line 3: has 3 fields (expected 18 SWF fields")


def test_text_in_numeric_field_raises_with_line(tmp_path):
    """Text in one of the 18 fields raises InputError naming the field and the line."""
    path = write_text(tmp_path, f"{GOOD_LINE}\n" + GOOD_LINE.replace(" 100 ", " abc ") + "\n")
    with pytest.raises(InputError) as info:
        list(read_swf(path))
    assert info.value.where == "line 2"
    assert info.value.problem == "field 4 (run) is 'abc'"
    assert "number" in info.value.expected


@pytest.mark.parametrize("token", ["nan", "NaN", "inf", "-Infinity", "1e999", "1_000", "0x10"])
def test_non_finite_or_odd_numbers_rejected(tmp_path, token):
    """NaN, infinities and Python-only number spellings are not SWF numbers."""
    path = write_text(tmp_path, GOOD_LINE.replace(" 200 ", f" {token} ") + "\n")
    with pytest.raises(InputError, match="line 1: field 9 .req_time."):
        list(read_swf(path))


def test_skip_bad_counts_and_reports(tmp_path):
    """skip_bad drops bad lines, counts them in .skipped and calls on_skip(line, reason)."""
    text = f"{GOOD_LINE}\n1 2 3\n{GOOD_LINE.replace(' 100 ', ' x ')}\n{GOOD_LINE}\n"
    seen: list[tuple[int, str]] = []
    trace = read_swf(write_text(tmp_path, text), skip_bad=True,
                     on_skip=lambda n, why: seen.append((n, why)))
    assert len(list(trace)) == 2 and trace.skipped == 2
    assert seen == [(2, "has 3 fields"), (3, "field 4 (run) is 'x'")]


def test_missing_file_is_input_error(tmp_path):
    """A missing trace raises InputError, not an OSError traceback."""
    with pytest.raises(InputError, match="file not found"):
        read_swf(tmp_path / "nope.swf")


def test_tolerates_blanks_tabs_comments_and_crlf(tmp_path):
    """Blank lines, ';' comments mid-file, tabs and CRLF endings are all accepted."""
    tabbed = GOOD_LINE.replace(" ", "\t")
    text = f"; MaxProcs: 8\r\n\r\n{GOOD_LINE}\r\n; a note\r\n\r\n{tabbed}\r\n"
    trace = read_swf(write_text(tmp_path, text))
    assert len(list(trace)) == 2 and trace.header.max_procs == 8


def test_text_first_line_without_submit_is_an_error(tmp_path):
    """Only a line naming 'submit' is taken as column names; other text is a bad line."""
    path = write_text(tmp_path, "hello world\n" + GOOD_LINE + "\n")
    with pytest.raises(InputError, match="line 1"):
        list(read_swf(path))


def test_bad_header_label_is_input_error(tmp_path):
    """A non-numeric MaxProcs raises InputError when asked for, naming the header key."""
    header = read_swf(write_text(tmp_path, "; MaxProcs: lots\n" + GOOD_LINE + "\n")).header
    with pytest.raises(InputError, match="header MaxProcs"):
        header.max_procs


# ------------------------------------------------------------------ streaming


def test_reading_is_lazy(tmp_path):
    """The first job comes out before a bad line further down is ever parsed."""
    path = write_text(tmp_path, f"{GOOD_LINE}\nbroken line\n")
    trace = read_swf(path)
    assert next(iter(trace)).id == 1
    with pytest.raises(InputError):
        list(trace)


def test_trace_iterates_twice():
    """Iterating a Trace twice re-reads the file and gives the same jobs."""
    trace = read_swf(JAROS[0])
    assert list(trace) == list(trace)


def _peak(work) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_streaming_memory_is_flat():
    """Streaming peaks far below holding the jobs, and does not grow with the trace's length."""
    def stream(path):
        return lambda: sum(1 for _ in read_swf(path))
    stream(HPC2N)()    # warm up: first-time allocations (code, caches) are not the trace's
    # tracemalloc sees every thread: the least of three runs ignores a stray allocation elsewhere
    hpc2n = min(_peak(stream(HPC2N)) for _ in range(3))   # 3,170 jobs
    wagap = min(_peak(stream(WAGAP)) for _ in range(3))   # 17,900 jobs
    held = _peak(lambda: read_jobs(HPC2N))
    assert hpc2n < held / 3
    assert wagap < 2 * hpc2n


# ------------------------------------------------------------------ Job properties


def test_size_and_estimate_prefer_requests():
    """size and estimate use the requested values when known, else the actual ones."""
    assert (job(procs=2, req_procs=4).size, job(run=50, req_time=80).estimate) == (4, 80)
    assert (job(procs=2, req_procs=-1).size, job(run=50, req_time=-1).estimate) == (2, 50)


# ------------------------------------------------------------------ filters


def test_only_status_default_completed():
    """only_status keeps status 1 by default and drops unknown (-1) unless asked."""
    jobs = [job(1, status=1), job(2, status=0), job(3, status=-1), job(4, status=5)]
    assert [j.id for j in only_status(jobs)] == [1]
    assert [j.id for j in only_status(jobs, include_unknown=True)] == [1, 3]
    assert [j.id for j in only_status(jobs, {0, 5})] == [2, 4]


def test_drop_zero_runtime():
    """drop_zero_runtime keeps only positive runtimes (drops 0, -1 and negatives)."""
    jobs = [job(1, run=10), job(2, run=0), job(3, run=-1), job(4, run=-500), job(5, run=0.5)]
    assert [j.id for j in drop_zero_runtime(jobs)] == [1, 5]


def test_drop_over_request():
    """drop_over_request drops jobs that ran past a known request, keeps unknown requests."""
    jobs = [job(1, run=100, req_time=200), job(2, run=300, req_time=200),
            job(3, run=300, req_time=-1), job(4, run=200, req_time=200)]
    assert [j.id for j in drop_over_request(jobs)] == [1, 3, 4]


def test_cap_to_request_copies():
    """cap_to_request caps run at req_time in a copy, leaving the input job unchanged."""
    original = job(2, run=300, req_time=200)
    capped = list(cap_to_request([job(1, run=100), original, job(3, run=300, req_time=-1)]))
    assert [j.run for j in capped] == [100, 200, 300]
    assert original.run == 300


def test_first_stops_reading(tmp_path):
    """first(n) takes n jobs without touching the lines after them."""
    path = write_text(tmp_path, f"{GOOD_LINE}\n{GOOD_LINE}\nbroken\n")
    assert len(list(first(read_swf(path), 2))) == 2


def test_time_window_half_open():
    """time_window keeps submit in [start, end)."""
    jobs = [job(i, submit=s) for i, s in enumerate([0, 10, 19, 20, 30], 1)]
    assert [j.id for j in time_window(jobs, 10, 20)] == [2, 3]


def test_rebase_shifts_to_zero():
    """rebase moves the first job to submit 0, keeping the gaps."""
    jobs = [job(1, submit=1000), job(2, submit=1005), job(3, submit=1060)]
    assert [j.submit for j in rebase(jobs)] == [0, 5, 60]
    assert list(rebase([])) == []


def test_filters_compose_on_real_trace():
    """Filters chain lazily: completed, positive-runtime wagap jobs, rebased, first 100."""
    jobs = list(first(rebase(drop_zero_runtime(only_status(read_swf(WAGAP)))), 100))
    assert len(jobs) == 100 and jobs[0].submit == 0 and all(j.run > 0 for j in jobs)


# ------------------------------------------------------------------ fuse


def test_fuse_orders_by_submit_and_tags_sites():
    """fuse interleaves streams by submit time, tags the site and renumbers 1..N."""
    a = [job(10, submit=0), job(11, submit=5), job(12, submit=9)]
    b = [job(7, submit=3), job(8, submit=5)]
    fused = list(fuse({"a": a, "b": b}))
    assert [(j.id, j.site, j.orig_id, j.submit) for j in fused] == [
        (1, "a", 10, 0), (2, "b", 7, 3), (3, "a", 11, 5), (4, "b", 8, 5), (5, "a", 12, 9)]


def test_fuse_leaves_inputs_unchanged():
    """fuse works on copies: the input jobs keep their ids and no site."""
    a = [job(10, submit=0)]
    list(fuse({"a": a}))
    assert (a[0].id, a[0].site, a[0].orig_id) == (10, None, None)


def test_fuse_renumbers_predecessors():
    """prev_job follows the renumbering; unseen predecessors become -1 or are dropped."""
    a = [job(1, submit=0), job(2, submit=2, prev_job=1), job(3, submit=4, prev_job=99),
         job(4, submit=6, prev_job=(1, 2)), job(5, submit=8, prev_job=(1, 99))]
    b = [job(1, submit=1), job(2, submit=3, prev_job=1)]
    fused = {(j.site, j.orig_id): j for j in fuse({"a": a, "b": b})}
    assert fused[("a", 2)].prev_job == 1
    assert fused[("b", 2)].prev_job == 2          # b's job 1 is fused job 2, not a's job 1
    assert fused[("a", 3)].prev_job == -1
    assert fused[("a", 4)].prev_job == (1, 3)
    assert fused[("a", 5)].prev_job == 1


def test_fuse_real_traces():
    """Fusing rebased hpc2n and wagap gives all 21070 jobs in submit order with ids 1..N."""
    fused = list(fuse({"hpc2n": read_swf(HPC2N), "wagap": rebase(read_swf(WAGAP))}))
    assert len(fused) == 21070
    assert [j.id for j in fused] == list(range(1, 21071))
    assert all(x.submit <= y.submit for x, y in zip(fused, fused[1:]))
    assert Counter(j.site for j in fused) == {"hpc2n": 3170, "wagap": 17900}


# ------------------------------------------------------------------ writing


def test_write_header_dict_and_format():
    """A dict header becomes '; Key: value' lines; whole floats lose decimals, no exponents."""
    out = io.StringIO()
    count = write_swf(out, [replace(job(1), run=3.0, cpu_time=1e-05, req_mem=1e16)],
                      {"MaxProcs": 8})
    assert count == 1
    assert out.getvalue().splitlines() == [
        "; MaxProcs: 8",
        "1 0 0 3 4 0.00001 -1 4 200 10000000000000000 1 1 1 -1 -1 1 -1 -1"]


def test_write_header_adds_fields_missing_from_comments():
    """A Header writes its comments verbatim plus fields that no comment carries."""
    header = Header(fields={"MaxProcs": "240", "Note": "fused"}, comments=["; MaxProcs: 240"])
    out = io.StringIO()
    write_swf(out, [], header)
    assert out.getvalue() == "; MaxProcs: 240\n; Note: fused\n"


def test_write_rejects_nan():
    """Writing a NaN field is refused rather than producing an unreadable trace."""
    with pytest.raises(ValueError):
        write_swf(io.StringIO(), [replace(job(1), run=float("nan"))])


# every field is within a signed 64-bit integer (swf.LIMIT; beyond it is an error, tested below)
number = st.one_of(st.integers(-1, 2**63 - 1), st.just(-1),
                   st.floats(min_value=-(2.0**63), max_value=2.0**63, exclude_min=True, exclude_max=True))
token = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)


@st.composite
def jobs(draw) -> Job:
    values = {name: draw(number) for name in FIELDS}
    values["prev_job"] = draw(st.one_of(number, st.tuples(st.integers(0, 10**6),
                                                          st.integers(0, 10**6))))
    return Job(**values, extra=tuple(draw(st.lists(token, max_size=3))))


@settings(max_examples=100, deadline=None)
@given(st.lists(jobs(), max_size=5))
def test_random_jobs_round_trip(generated):
    """Random jobs (ints, floats, -1, predecessor tuples, extras) write and read back equal."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.swf"
        write_swf(path, generated, {"Note": "hypothesis"})
        assert read_jobs(path) == generated


# ------------------------------------------------------------------ replay_rows (the replay's fast reader)


def _typed(rows):
    """Rows with each value's type, so that 30 and 30.0 differ."""
    return [tuple((type(v).__name__, v) for v in row) for row in rows]


def _job_rows(trace):
    return [(j.submit, j.run, j.size, j.req_time, j.id, None) for j in trace]


def _outcome(read):
    """The rows read, or the InputError's text; with what was skipped (see _compare)."""
    try:
        return _typed(read()), None
    except InputError as exc:
        return None, str(exc)


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_replay_rows_equal_the_jobs_fields(path):
    """replay_rows gives each job's submit, run, size, req_time and id, as Job does, typed."""
    trace = read_swf(path)
    assert _typed(trace.replay_rows()) == _typed(_job_rows(trace))


# tokens that the fast paths (one json.loads per block, int()/float() per line) must read
# exactly as the careful parser does, or hand to it: JSON and Python spellings, signs,
# leading zeros, whole floats, exponents, overflow, '_', non-ASCII digits, '&', commas
TRICKY = ["0", "1", "-1", "30", "007", "+5", "-0", "-0.0", ".5", "5.", "1e3", "1E3", "30.0",
          "552.21", "1e-400", "1e999", "-1e999", "12345678901234567890", "1" + "0" * 400,
          "1" + "0" * 400 + ".0", "1_000", "\u0661\u0662", "nan", "inf", "-", "--1", "1-2",
          "1,2", ",", "1]", "abc", "1&2", "&"]
field_token = st.one_of(st.sampled_from(["1", "-1", "0", "4", "100", "200", "3600"]), st.sampled_from(TRICKY))
extra_token = st.sampled_from(["q_1d", "{1,2}", "1:ppn=64", "\u00e9t\u00e9", "1_0", "x"])


@st.composite
def swf_lines(draw) -> str:
    kind = draw(st.sampled_from(["job"] * 8 + ["short", "blank", "comment"]))
    if kind == "blank":
        return draw(st.sampled_from(["", "   ", "\t"]))
    if kind == "comment":
        return draw(st.sampled_from(["; note", "  ;x 1 2"]))
    n = draw(st.integers(1, 17)) if kind == "short" else 18
    fields = [draw(st.sampled_from(["1", "4", "100", "-1"])) if draw(st.booleans()) else draw(field_token)
              for _ in range(n)]
    extras = draw(st.lists(extra_token, max_size=2)) if n == 18 else []
    return draw(st.sampled_from([" ", "\t", "  "])).join(fields + extras)


@settings(max_examples=300, deadline=None)
@given(st.lists(swf_lines(), min_size=1, max_size=40), st.sampled_from([1, 64, 300, 1 << 16]),
       st.booleans())
def test_replay_rows_agree_with_the_careful_parser(lines, block, skip_bad):
    """On any mix of good, odd and bad lines, in blocks of any size: the same rows, the same
    InputError (file, line, field), the same skipped lines, as iterating the Trace."""
    import resel.sim.swf as swf

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.swf"
        path.write_text("\n".join(lines) + "\n")
        outcomes = []
        for read in (lambda t: _job_rows(t), lambda t: list(t.replay_rows())):
            seen: list[tuple[int, str]] = []
            trace = read_swf(path, skip_bad=skip_bad, on_skip=lambda n, why: seen.append((n, why)))
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(swf, "_BLOCK", block)
                rows, error = _outcome(lambda: read(trace))
            outcomes.append((rows, error, trace.skipped, seen))
        assert outcomes[0] == outcomes[1]


def test_replay_rows_bad_line_in_a_later_block(tmp_path):
    """A bad line deep in a long trace is reported with its own line number, after the
    rows before it, as iterating does."""
    import resel.sim.swf as swf

    lines = [GOOD_LINE.replace("1 0 5", f"{i} {i} 5", 1) for i in range(1, 2001)]
    lines[1499] = lines[1499].replace(" 200 ", " 2x0 ")
    path = write_text(tmp_path, "\n".join(lines) + "\n")
    got = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(swf, "_BLOCK", 4096)
        with pytest.raises(InputError) as info:
            for row in read_swf(path).replay_rows():
                got.append(row)
    assert info.value.where == "line 1500" and info.value.problem == "field 9 (req_time) is '2x0'"
    assert [r[4] for r in got] == list(range(1, 1500))


@pytest.mark.parametrize("line", [
    "1 0 5 .5 +4 -1 -1 007 1e3 -1 1 1 1 -1 -1 1 -1 -1",          # not JSON: read line by line
    "2 0 5 552.21 4 30.0 -1 4 5. -1 1 1 1 -1 -1 1 -1 -1",          # fractional and whole floats
    "3 1E2 5 100 4 -1 -1 -0 200 -1 1 1 1 -1 -1 1 -1 -1 q_1d é",    # exponent, -0, extras
    "4 0 5 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 1 1&2 -1",              # Alea's predecessor list
])
def test_replay_rows_odd_but_valid_lines(tmp_path, line):
    """Valid spellings that the block reader leaves to the line reader give the Job's values."""
    trace = read_swf(write_text(tmp_path, line + "\n"))
    assert _typed(trace.replay_rows()) == _typed(_job_rows(trace))


@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_block_reader_takes_every_shared_trace_whole(path):
    """The job lines of every shipped trace are read by the block reader at once, none line by
    line (the replay's speed rests on it): wagap's extra columns, hpc2n's float CPU times,
    jaros' tabs and '&' lists included. And its columns are replay_rows' values."""
    import resel.sim.swf as swf

    trace = read_swf(path)
    lines = path.read_bytes().replace(b"\r\n", b"\n").split(b"\n")
    body = [line for number, line in enumerate(lines, 1)
            if line.strip() and not line.lstrip().startswith(b";") and number != trace._title_line]
    columns = swf._block_columns(b"\n".join(body) + b"\n", len(body))
    assert columns is not None
    assert list(zip(*columns, [None] * len(body))) == _job_rows(trace)


@pytest.mark.parametrize("tail", ["\n", "  \n", "\t\n\n", " \x0b\n \n\x0c\n"])
def test_block_reader_drops_blank_lines_at_a_block_end(tail):
    """Blank lines closing a block (hpc2n's last line is one) give no job and keep the block
    on the fast path: its columns are those of its job lines."""
    import resel.sim.swf as swf

    lines = [GOOD_LINE, GOOD_LINE.replace("1 0 5", "2 3 5", 1)]
    block = ("\n".join(lines) + "\n" + tail).encode()
    columns = swf._block_columns(block, block.count(b"\n"))
    assert columns is not None
    assert [tuple(c) for c in zip(*columns)] == [(0, 100, 4, 200, 1), (3, 100, 4, 200, 2)]
    assert swf._block_columns(b"  \n\t\n", 2) is None        # nothing but blank lines


def _same_as_iterating(path: Path, blocks=(1, 7, 64, 4096, 1 << 17)) -> None:
    """replay_rows and replay_columns read ``path`` as iterating it does (rows, types, the
    InputError's text, what skip_bad skips), in blocks of every size given."""
    import resel.sim.swf as swf

    for skip_bad in (False, True):
        seen: list = []
        trace = read_swf(path, skip_bad=skip_bad, on_skip=lambda n, why: seen.append((n, why)))
        expected = _outcome(lambda: _job_rows(trace)), trace.skipped, list(seen)
        for block in blocks:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(swf, "_BLOCK", block)
                seen.clear()
                assert (_outcome(lambda: list(trace.replay_rows())), trace.skipped, list(seen)) == expected
                seen.clear()

                def columns():
                    return [row + (None,) for block in trace.replay_columns() for row in zip(*block)]
                assert (_outcome(columns), trace.skipped, list(seen)) == expected


LINE2 = GOOD_LINE.replace("1 0 5", "2 3 5", 1)


@pytest.mark.parametrize("raw", [
    pytest.param(f"{GOOD_LINE}\r\n{LINE2}\r\n".encode(), id="crlf"),
    pytest.param(f"{GOOD_LINE}\r{LINE2}\r".encode(), id="bare-cr"),
    pytest.param(f"{GOOD_LINE}\r\n{LINE2}\r{GOOD_LINE}\n\r\n".encode(), id="mixed-line-ends"),
    pytest.param(f"{GOOD_LINE}\n{LINE2}".encode(), id="no-newline-at-end"),
    pytest.param(f"{GOOD_LINE}\n{LINE2[:20]}".encode(), id="truncated-last-line"),
    pytest.param(f"\ufeff; MaxProcs: 8\n{GOOD_LINE}\n".encode(), id="bom-and-header"),
    pytest.param(f"\ufeff{GOOD_LINE}\n".encode(), id="bom-before-a-job"),
    pytest.param(f"; a\n\n  \n;b\n{GOOD_LINE}\n\n; middle\n{LINE2}\n\t\n".encode(), id="comments-blank-lines"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' ', chr(9))}\n".encode(), id="tabs"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' ', '   ')}\n".encode(), id="several-spaces"),
    pytest.param(f"{GOOD_LINE} q_1d {{1,2}}\n{LINE2} q_2w {{3}} x\n".encode(), id="unequal-extras"),
    pytest.param(f"{GOOD_LINE} q_1d {{1,2}}\n{LINE2} q_2w {{3}}\n".encode(), id="equal-extras"),
    pytest.param(" ".join(["-1"] * 18).encode() + b"\n" + LINE2.encode() + b"\n", id="all-unknown"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 100 ', ' 1,2 ')}\n".encode(), id="comma-in-run"),
    pytest.param(f"{GOOD_LINE}\n{LINE2[:-2]}1,2\n".encode(), id="comma-in-think-time"),
    pytest.param(f"{GOOD_LINE[:-5]}1&2 -1\n{LINE2[:-5]}3&-4 -1\n".encode(), id="predecessor-lists"),
    pytest.param(f"{GOOD_LINE[:-5]}1&2 -1\n{LINE2[:-5]}3& -1\n".encode(), id="predecessor-list-cut"),
    pytest.param(f"{GOOD_LINE[:-5]}1&2 -1\n{LINE2[:-5]}2.5 -1\n".encode(), id="predecessor-float"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 4 -1', ' 4.0 -1', 1)}\n".encode(), id="whole-float-size"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 100 ', ' 100.5 ')}\n".encode(), id="fractional-run"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 100 ', ' 0100 ')}\n".encode(), id="leading-zero"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 100 ', ' -0 ')}\n".encode(), id="minus-zero"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', ' 1-2 ')}\n".encode(), id="minus-inside"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', ' 2.0.0 ')}\n".encode(), id="two-dots"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', ' 9' + '9' * 18 + ' ')}\n".encode(), id="19-digits"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', ' 9' + '9' * 17 + ' ')}\n".encode(), id="18-digits"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', ' 2.' + '5' * 30 + ' ')}\n".encode(), id="long-fraction"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 1-2 ')}\n".encode(), id="unread-field-minus-inside"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 --1 ')}\n".encode(), id="unread-field-two-minus"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 1- ')}\n".encode(), id="unread-field-minus-last"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 -.5 ')}\n".encode(), id="unread-field-minus-dot"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 2.0.0 ')}\n".encode(), id="unread-field-two-dots"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 5. ')}\n".encode(), id="unread-field-dot-last"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 .5 ')}\n".encode(), id="unread-field-dot-first"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 5..5 ')}\n".encode(), id="unread-field-dot-dot"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 1e5 ')}\n".encode(), id="unread-field-exponent"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 +5 ')}\n".encode(), id="unread-field-plus"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 1111111111111111111 ')}\n".encode(), id="unread-field-19-digits"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 1.1111111111111111111 ')}\n".encode(), id="unread-field-19-digit-fraction"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 -2.5 ')}\n".encode(), id="unread-field-float"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 1_0 ')}\n".encode(), id="unread-field-underscore"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 -1 ', ' 200 - ')}\n".encode(), id="unread-field-minus-only"),
    pytest.param(f"{GOOD_LINE}\n".encode() + LINE2.replace(" 200 ", " 2\xff0 ").encode("latin-1") + b"\n",
                 id="invalid-utf8-in-a-field"),
    pytest.param(f"{GOOD_LINE} \xe9t\xe9\n".encode("latin-1") + f"{LINE2} x\n".encode(), id="invalid-utf8-in-extras"),
    pytest.param(f"{GOOD_LINE}\n{LINE2}\x00\n".encode(), id="nul-byte"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', chr(12) + '200 ')}\n".encode(), id="form-feed"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', chr(0x1c) + '200 ')}\n".encode(), id="file-separator"),
    pytest.param(f"{GOOD_LINE}\n{LINE2.replace(' 200 ', chr(0xa0) + '200 ')}\n".encode(), id="no-break-space"),
    pytest.param(f"{GOOD_LINE}\n{' '.join(GOOD_LINE.split()[:17])}\n".encode(), id="17-fields"),
    pytest.param(b"", id="empty"),
    pytest.param(b"; only a header\n", id="header-only"),
])
def test_block_reader_corners(tmp_path, raw):
    """Line ends of every kind, a cut last line, a byte-order mark, comments and blank lines
    anywhere, tabs, extras of unequal width, -1 fields, commas, '&' lists, floats, leading
    zeros, long numbers, bytes that are not UTF-8, control characters, short lines: the same
    rows or the same error as iterating, whatever the block size."""
    path = tmp_path / "t.swf"
    path.write_bytes(raw)
    _same_as_iterating(path)


def test_block_reader_reads_compressed_traces(tmp_path):
    """A gzip, bzip2 or xz trace is read by the block reader as iterating reads it."""
    import bz2
    import gzip
    import lzma

    raw = f"; MaxProcs: 8\r\n{GOOD_LINE} q\r\n{LINE2} q\r\n".encode()
    for name, compress in (("t.swf.gz", gzip.compress), ("t.swf.bz2", bz2.compress), ("t.swf.xz", lzma.compress)):
        path = tmp_path / name
        path.write_bytes(compress(raw))
        _same_as_iterating(path, blocks=(1, 1 << 17))
        assert len(list(read_swf(path).replay_rows())) == 2


def test_replay_columns_end_with_the_error_after_the_rows_before_it(tmp_path):
    """A bad line: replay_columns gives the jobs before it (in its block too), then raises the
    error iterating raises, so a replay checks their order first as it did row by row."""
    lines = [GOOD_LINE.replace("1 0 5", f"{i} {i} 5", 1) for i in range(1, 11)]
    lines[6] = lines[6].replace(" 200 ", " 2x0 ")
    path = write_text(tmp_path, "\n".join(lines) + "\n")
    got = []
    with pytest.raises(InputError) as info:
        for block in read_swf(path).replay_columns():
            got.extend(block[4])
    assert info.value.where == "line 7" and got == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("token", ["nan", "NaN", "inf", "-Infinity", "1e999", "1_000", "0x10", "1,2",
                                   "\u0661", "-", "1-2", "true"])
def test_replay_rows_rejects_what_iterating_rejects(tmp_path, token):
    """A bad field fails replay_rows with the same InputError (line and field) as iterating."""
    path = write_text(tmp_path, f"{GOOD_LINE}\n" + GOOD_LINE.replace(" 200 ", f" {token} ") + "\n")
    with pytest.raises(InputError) as expected:
        list(read_swf(path))
    with pytest.raises(InputError) as got:
        list(read_swf(path).replay_rows())
    assert str(got.value) == str(expected.value) and got.value.where == "line 2"
