"""Property (fuzz) tests for the probe parsers: perf CSV, lscpu/cpuinfo, callgrind, GROMACS md.log,
and the pilot agent's own perf CSV reader.

Every parser gets arbitrary text and mutations of the real captured inputs in tests/data
(deleted / duplicated lines, truncation at any byte, replaced characters, localized numbers). The
contract checked is the one each docstring states: the documented result type, or the module's
typed error (:class:`resel.errors.InputError`) where one is documented — never any other
exception. Round trips check that values written in the tool's own format read back unchanged.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from resel.shipped import agent as agent_module
from resel.errors import InputError
from resel.probes.cpu import ghz_in_model_name, parse_cpuinfo, parse_lscpu_json
from resel.probes.fallback import (GromacsTiming, parse_callgrind_out, parse_callgrind_stderr,
                                   parse_gromacs_log)
from resel.probes.perf import _TIME_UNITS, Counter, figures_from_counters, parse_perf_csv

DATA = Path(__file__).parent / "data"
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PERF_FILES = sorted((DATA / "perf").glob("*.csv"))
PERF_TEXTS = [p.read_text() for p in PERF_FILES]
CG_OUT = (DATA / "callgrind" / "python_sum.callgrind.trimmed").read_text()
CG_ERR = (DATA / "callgrind" / "python_sum_stderr.txt").read_text()
# the md.log is 23 kB; its end holds the timing block, its start the header — keep both ends
_MD = (DATA / "gromacs" / "md_water_200steps.log").read_text()
MD_LOG = _MD[:1500] + _MD[-1500:]

# ---------------------------------------------------------------- mutation strategy

# Text that looks like the parsers' inputs: digits, separators, the status words' characters,
# whitespace, and a few non-ASCII characters (NBSP, Arabic-Indic digits, replacement char).
_ALPHABET = st.sampled_from(list("0123456789.,:-+<>_ e#\t\n/") + ["\u00a0", "\u0661", "\ufffd", "é"])


@st.composite
def mutated(draw, texts: list[str]) -> str:
    """One of ``texts`` after 1–4 random edits: line deletion/duplication, char replacement,
    truncation at any byte (decoded like the probes do: utf-8, errors='replace')."""
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.splitlines(keepends=True)
        op = draw(st.sampled_from(["delete", "duplicate", "replace", "truncate", "insert"]))
        if op == "delete" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "".join(lines)
        elif op == "duplicate" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
            text = "".join(lines)
        elif op == "replace" and text:
            i = draw(st.integers(0, len(text) - 1))
            # any character the probes can meet: their text is decoded from bytes with
            # errors='replace', so it never holds a lone surrogate (which 'truncate' could
            # not encode again)
            c = draw(st.one_of(_ALPHABET, st.characters(codec="utf-8")))
            text = text[:i] + c + text[i + 1:]
        elif op == "truncate":
            raw = text.encode("utf-8")
            text = raw[:draw(st.integers(0, len(raw)))].decode("utf-8", "replace")
        elif op == "insert":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.text(_ALPHABET, max_size=12)) + text[i:]
    return text


ANY_TEXT = st.one_of(st.text(), st.text(_ALPHABET))

# ---------------------------------------------------------------- perf CSV (probes/perf.py)

STATUSES = {"counted", "not supported", "not counted"}


def _check_counters(counters: dict) -> None:
    assert isinstance(counters, dict) and counters
    for event, c in counters.items():
        assert isinstance(c, Counter) and c.event == event and isinstance(event, str) and event
        assert c.status in STATUSES
        assert isinstance(c.line, int) and c.line >= 1
        if c.status == "counted":
            assert isinstance(c.value, float) and math.isfinite(c.value) and c.value >= 0
        else:
            assert c.value is None
        if event.split(":")[0] in ("task-clock", "cpu-clock") and c.value is not None:
            assert c.unit in _TIME_UNITS
    figs = figures_from_counters(counters)           # what run_perf does next: must not raise
    for name in ("instructions", "cycles", "ipc", "task_clock_s", "avg_ghz"):
        assert figs[name] is None or isinstance(figs[name], float)


def _perf_ok_or_input_error(text: str) -> None:
    try:
        counters = parse_perf_csv(text, path="fuzz.csv")
    except InputError as exc:
        assert "fuzz.csv" in str(exc)
        return
    _check_counters(counters)


@FUZZ
@given(ANY_TEXT)
def test_perf_csv_arbitrary_text(text):
    _perf_ok_or_input_error(text)


@FUZZ
@given(mutated(PERF_TEXTS))
def test_perf_csv_mutated_real_files(text):
    _perf_ok_or_input_error(text)


# Localized renderings of a number: decimal comma, dot/space/NBSP/apostrophe thousands.
def _localized(value: float) -> list[str]:
    whole, frac = f"{value:.2f}".split(".")
    groups = f"{int(whole):,}".split(",")
    return [".".join(groups) + "," + frac, " ".join(groups) + "," + frac,
            "\u00a0".join(groups) + "," + frac, "'".join(groups) + "." + frac,
            ",".join(groups) + "." + frac, whole + "," + frac]


@FUZZ
@given(st.sampled_from(PERF_TEXTS),
       st.floats(min_value=1000, max_value=1e12, allow_nan=False),
       st.data())
def test_perf_csv_localized_numbers_never_misread(text, value, data):
    """A value printed with a locale's separators is rejected or lost — never read as another number
    for the same event (perf is run with LC_ALL=C, but a site may override it)."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    i = data.draw(st.integers(0, len(lines) - 1))
    loc = data.draw(st.sampled_from(_localized(value)))
    fields = lines[i].split(",")
    event = fields[2]
    lines[i] = ",".join([loc] + fields[1:])
    try:
        counters = parse_perf_csv("\n".join(lines), path="loc.csv")
    except InputError:
        return
    _check_counters(counters)
    c = counters.get(event)
    assert c is None or c.line != i + 1, (loc, c)


EVENT_NAMES = ["task-clock", "cpu-clock", "cycles", "instructions", "cycles:u", "instructions:u",
               "branches", "cache-misses", "cpu_core/instructions/u", "cpu_atom/cycles/"]


@FUZZ
@given(st.lists(
    st.tuples(st.sampled_from(EVENT_NAMES),
              st.one_of(st.floats(min_value=0, max_value=1e18, allow_nan=False),
                        st.integers(0, 10**15),
                        st.sampled_from(["<not supported>", "<not counted>"])),
              st.sampled_from(sorted(_TIME_UNITS)),
              st.sampled_from(["repr", "%.2f", "%d"])),
    min_size=1, max_size=8, unique_by=lambda t: t[0]))
def test_perf_csv_round_trip(rows):
    """Counters written in perf's -x, format read back as the same values, statuses and units."""
    lines = ["# started on Thu Nov 26 01:29:30 2026", ""]
    expected = {}
    for event, value, unit, fmt in rows:
        norm = {"cpu_core/instructions/u": "instructions:u", "cpu_atom/cycles/": "cycles"}.get(event, event)
        if norm in expected:                          # two spellings of one event: first wins
            continue
        is_clock = event in ("task-clock", "cpu-clock")
        unit = unit if is_clock else ""
        if isinstance(value, str):
            text, want = value, None
        else:
            text = repr(float(value)) if fmt == "repr" else (fmt % value)
            want = float(text)
        lines.append(f"{text},{unit},{event},195395002,100.00,0.785,CPUs utilized")
        expected[norm] = (want, unit, "counted" if want is not None else value.strip("<>"))
    counters = parse_perf_csv("\n".join(lines) + "\n")
    _check_counters(counters)
    assert {e: (c.value, c.unit, c.status) for e, c in counters.items()} == expected


# ---------------------------------------------------------------- agent's perf CSV (resel/shipped/agent.py)


def _agent_parse(raw: bytes) -> dict:
    fd, path = tempfile.mkstemp(suffix=".csv")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        return agent_module.parse_perf_csv(path)
    finally:
        os.unlink(path)


def _check_agent(out: dict) -> None:
    assert isinstance(out, dict) and out
    if set(out) == {"error"} and isinstance(out["error"], str):
        return
    assert "task-clock-ms" in out
    for k, v in out.items():
        assert isinstance(k, str)
        assert v is None or isinstance(v, float), (k, v)


@FUZZ
@given(st.one_of(ANY_TEXT.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary(max_size=200),
                 mutated(PERF_TEXTS).map(str.encode)))
def test_agent_perf_csv_never_raises(raw):
    """The agent runs unattended on a site: its reader returns a dict, never raises."""
    _check_agent(_agent_parse(raw))


@FEW
@given(st.lists(st.tuples(st.sampled_from(["cycles", "instructions", "cycles:u", "branches"]),
                          st.one_of(st.floats(min_value=0, max_value=1e18, allow_nan=False),
                                    st.sampled_from(["<not supported>", "<not counted>"]))),
                min_size=1, max_size=5, unique_by=lambda t: t[0]),
       st.floats(min_value=0, max_value=1e9, allow_nan=False),
       st.sampled_from([("msec", 1.0), ("usec", 1e-3), ("nsec", 1e-6), ("sec", 1e3), ("", 1.0)]))
def test_agent_perf_csv_round_trip(rows, clock, unit_scale):
    unit, scale = unit_scale
    lines = [f"{clock!r},{unit},task-clock,1,100.00,0.5,CPUs utilized"]
    lines += [f"{v if isinstance(v, str) else repr(v)},,{e},1,100.00,," for e, v in rows]
    out = _agent_parse(("\n".join(lines) + "\n").encode())
    _check_agent(out)
    assert out["task-clock"] == clock
    assert out["task-clock-ms"] == clock * scale
    for e, v in rows:
        assert out[e] == (None if isinstance(v, str) else v)


# ---------------------------------------------------------------- lscpu / cpuinfo (probes/cpu.py)

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10))
_json = st.recursive(_json_leaf, lambda ch: st.one_of(st.lists(ch, max_size=4),
                                                       st.dictionaries(st.sampled_from(
                                                           ["lscpu", "field", "data", "children", "x"]),
                                                           ch, max_size=4)),
                     max_leaves=20)


def _check_lscpu(out) -> None:
    assert isinstance(out, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in out.items())


@FUZZ
@given(st.one_of(ANY_TEXT, _json.map(json.dumps)))
def test_lscpu_json_arbitrary(text):
    """Bad JSON (or JSON of another shape) gives {} or some fields — never an exception."""
    _check_lscpu(parse_lscpu_json(text))


@FEW
@given(st.integers(1, 5000), st.sampled_from(["[", "{\"lscpu\":[", "{\"a\":"]))
def test_lscpu_json_deeply_nested(depth, opener):
    """Nesting deeper than the interpreter's recursion limit is bad JSON too: {}."""
    _check_lscpu(parse_lscpu_json(opener * depth))


def _lscpu_key(field: str) -> str:
    """The key a field name must read back as, by definition: trailing colons and blanks dropped,
    one character at a time (the parser uses a regex), then leading blanks."""
    while field and (field[-1] == ":" or field[-1].isspace()):
        field = field[:-1]
    return field.strip()


@FEW
@given(st.lists(st.tuples(st.text(st.characters(blacklist_characters='"\\', blacklist_categories=("Cs", "Cc")),
                                  min_size=1, max_size=15),
                          st.text(st.characters(blacklist_characters='"\\', blacklist_categories=("Cs", "Cc")),
                                  max_size=15)),
                min_size=1, max_size=6, unique_by=lambda t: _lscpu_key(t[0])),
       st.booleans())
@example(pairs=[(": ", "")], nested=False)       # CI's find: a field that is only a colon and a blank
@example(pairs=[("a: :", "x"), ("b", "y")], nested=True)
def test_lscpu_json_round_trip(pairs, nested):
    """Fields in either lscpu layout (flat, or nested under "children") read back stripped."""
    entries = [{"field": f + ":", "data": d} for f, d in pairs]
    if nested:
        for parent, child in zip(entries, entries[1:]):
            parent["children"] = [child]
        entries = entries[:1]
    out = parse_lscpu_json(json.dumps({"lscpu": entries}))
    want = {}
    for f, d in pairs:
        want.setdefault(_lscpu_key(f), d.strip())
    assert out == want


@FUZZ
@given(st.one_of(ANY_TEXT, st.lists(st.tuples(st.sampled_from(["model name", "cpu MHz", "flags", "x"]),
                                              ANY_TEXT.filter(lambda s: "\n" not in s and "\r" not in s)))
                 .map(lambda rows: "\n".join(f"{k}\t: {v}" for k, v in rows))))
def test_cpuinfo_arbitrary(text):
    model, mhz = parse_cpuinfo(text)
    assert model is None or (isinstance(model, str) and model)
    assert isinstance(mhz, list) and all(isinstance(x, float) for x in mhz)


@FEW
@given(st.lists(st.floats(min_value=0, max_value=1e5, allow_nan=False), max_size=8),
       st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=30))
def test_cpuinfo_round_trip(mhz_values, model):
    blocks = [f"processor\t: {i}\nmodel name\t: {model}\ncpu MHz\t\t: {v!r}\n" for i, v in enumerate(mhz_values)]
    got_model, got_mhz = parse_cpuinfo("\n".join(blocks))
    assert got_mhz == mhz_values
    assert got_model == (model if mhz_values else None)


@FUZZ
@given(st.one_of(st.none(), ANY_TEXT))
def test_ghz_in_model_name_arbitrary(model):
    ghz = ghz_in_model_name(model)
    assert ghz is None or (isinstance(ghz, float) and math.isfinite(ghz) and ghz >= 0)


@FEW
@given(st.decimals(min_value=0, max_value=100, places=2, allow_nan=False, allow_infinity=False),
       st.sampled_from(["Intel(R) Xeon(R) CPU E5-2680 v4", "Intel(R) Core(TM) i7-8650U CPU"]),
       st.sampled_from(["@ {}GHz", "@{}GHz", "@ {} GHz", "@ {}ghz"]))
def test_ghz_in_model_name_round_trip(ghz, name, fmt):
    assert ghz_in_model_name(f"{name} {fmt.format(ghz)}") == float(ghz)


# ---------------------------------------------------------------- callgrind (probes/fallback.py)


def _callgrind_ok_or_input_error(text: str) -> None:
    try:
        total = parse_callgrind_out(text, path="cg.out")
    except InputError as exc:
        assert "cg.out" in str(exc)
        return
    assert isinstance(total, int)


@FUZZ
@given(st.one_of(ANY_TEXT, mutated([CG_OUT]),
                 st.text("0123456789", min_size=4290, max_size=4400).map(lambda d: f"events: Ir\ntotals: {d}\n")))
def test_callgrind_out_arbitrary_and_mutated(text):
    _callgrind_ok_or_input_error(text)


@FUZZ
@given(st.integers(0, 10**30), st.integers(0, 10**30), st.sampled_from(["both", "totals", "summary"]),
       st.sampled_from(["", " 12 34", "  "]))
def test_callgrind_out_round_trip(totals, summary, which, tail):
    """``totals:`` wins over ``summary:``; either one alone reads back its integer."""
    header = CG_OUT.split("summary:")[0]
    text = header
    if which in ("both", "summary"):
        text += f"summary: {summary}{tail}\n"
    if which in ("both", "totals"):
        text += f"totals: {totals}{tail}\n"
    assert parse_callgrind_out(text) == (summary if which == "summary" else totals)


@FUZZ
@given(st.one_of(ANY_TEXT, mutated([CG_ERR]),
                 st.text("0123456789", min_size=4290, max_size=4400)
                 .flatmap(lambda d: st.sampled_from([f"==1== Collected : {d}\n", f"==1== I   refs: {d}\n"]))))
def test_callgrind_stderr_arbitrary_and_mutated(text):
    """Documented: the summed count, or None — no error type, so nothing may be raised.
    (The program's own stderr is mixed into valgrind's, so any text can arrive here.)"""
    total = parse_callgrind_stderr(text)
    assert total is None or isinstance(total, int)


@FUZZ
@given(st.lists(st.integers(0, 10**15), min_size=1, max_size=4), st.booleans())
def test_callgrind_stderr_round_trip(counts, collected):
    """Per-process ``Collected :`` (or ``I refs:`` with thousands commas) sum back to the total."""
    text = ""
    for pid, n in enumerate(counts, start=100):
        text += f"=={pid}== Events    : Ir\n"
        text += f"=={pid}== Collected : {n}\n" if collected else f"=={pid}== I   refs:      {n:,}\n"
    assert parse_callgrind_stderr(text) == sum(counts)


# ---------------------------------------------------------------- GROMACS md.log (probes/fallback.py)


def _gromacs_ok_or_input_error(text: str) -> None:
    try:
        t = parse_gromacs_log(text, path="md.log")
    except InputError as exc:
        assert "md.log" in str(exc)
        return
    assert isinstance(t, GromacsTiming)
    for v in (t.core_s, t.wall_s):
        assert isinstance(v, float) and v >= 0
    for v in (t.percent, t.ns_per_day, t.hour_per_ns):
        assert v is None or (isinstance(v, float) and v >= 0)


@FUZZ
@given(st.one_of(ANY_TEXT, mutated([MD_LOG])))
def test_gromacs_log_arbitrary_and_mutated(text):
    _gromacs_ok_or_input_error(text)


_pos = st.floats(min_value=0, max_value=1e9, allow_nan=False)


@FUZZ
@given(_pos, _pos, st.one_of(st.none(), _pos), st.one_of(st.none(), _pos), st.one_of(st.none(), _pos),
       st.sampled_from(["%.3f", "%.1f", "%g", "%.3e"]))
def test_gromacs_log_round_trip(core, wall, pct, nsd, hpn, fmt):
    """The timing block as mdrun prints it reads back the printed values (the last block wins)."""
    def f(x):
        return fmt % x

    block = "               Core t (s)   Wall t (s)        (%)\n"
    block += f"       Time:    {f(core)}    {f(wall)}" + (f"    {f(pct)}" if pct is not None else "") + "\n"
    if nsd is not None:
        block += "                 (ns/day)    (hour/ns)\n"
        block += f"Performance:    {f(nsd)}" + (f"    {f(hpn)}" if hpn is not None else "") + "\n"
    if "inf" in block or "nan" in block:
        return
    text = _MD[:-200].replace("Time:", "Time:  garbage") + block + "Finished mdrun on rank 0\n"
    t = parse_gromacs_log(text)
    assert (t.core_s, t.wall_s) == (float(f(core)), float(f(wall)))
    assert t.percent == (float(f(pct)) if pct is not None else None)
    assert t.ns_per_day == (float(f(nsd)) if nsd is not None else None)
    assert t.hour_per_ns == (float(f(hpn)) if nsd is not None and hpn is not None else None)
