"""Hypothesis fuzz of what users (and other users) feed resel: the bag, sites and SWF readers and
the command line's numeric options (issue 13 §5). The rule for every input: either it is
accepted and works, or it gives a ReselError (one line at the command line) — never another
exception. Cheap enough for CI: about 400 examples in all.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resel.sim.simulation import simulate
from resel.cli import cli
from resel.config import load_bag, load_sites
from resel.errors import InputError, ReselError
from resel.sim.swf import read_swf

def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# ------------------------------------------------------------------ a tiny TOML writer for generated documents

names = st.text(st.characters(codec="utf-8"), min_size=0, max_size=12)
numbers = st.one_of(st.integers(-(10**30), 10**30), st.floats(), st.sampled_from([0, 1, -1, 2**63, 10**400, 1e308]))
scalars = st.one_of(numbers, names, st.booleans())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(
                                                           ["dist", "median", "sigma", "mean", "std", "value", "low",
                                                            "high", "samples", "min", "max", "size_exponent",
                                                            "cores_per_node", "base", "avg", "mode", "walltime",
                                                            "max_cores", "max_pilots", "kappa", "ipc", "clock"]),
                                                           inner, max_size=4)), max_leaves=6)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v)      # a JSON string (ASCII, \\u escapes) is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"


def toml_table(header: str, table: dict) -> str:
    return f"{header}\n" + "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())


def write(text: str | bytes) -> Path:
    f = tempfile.NamedTemporaryFile("wb", suffix=".toml", delete=False)
    f.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    f.close()
    return Path(f.name)


def mutated(base: dict, pools: dict) -> st.SearchStrategy[dict]:
    """``base`` (a valid table) with one or two keys set from their pools of odd values: most
    documents are then valid but for one thing, which is where readers go wrong."""
    mutation = st.sampled_from(sorted(pools)).flatmap(lambda k: st.tuples(st.just(k), pools[k]))
    return st.lists(mutation, min_size=1, max_size=2).map(lambda ms: {**base, **dict(ms)})


hostile_numbers = st.one_of(st.floats(), st.integers(-(10**30), 10**30),
                            st.sampled_from([0, -1, 1e308, -1e308, 1e-300, 2**63, 10**400, 1e20, 1e12]))
BAG_POOLS = {
    "name": st.one_of(names, st.sampled_from(["[/x]", "a$b", "[link=x]y[/link]", "\x1b]0;t\x07", ""])),
    "command": st.one_of(st.sampled_from(["echo ${HOME} | awk '{print $1}'", "run {index:04d} {name}", "{idx}",
                                          "{{name}}", "{index:q}", "${index}", "${{X}}", "{0}", "{}", "{index!r}",
                                          "{name.attr}", "{index[0]}", "[/x] {"]),
                         st.text(st.sampled_from("{}$:!.[]0index name"), max_size=14), names),
    "count": st.one_of(st.integers(-2, 30), st.integers(2**30, 2**70), hostile_numbers),
    "cores_per_task": st.one_of(st.integers(0, 8), hostile_numbers),
    "perf_every": st.one_of(st.integers(-1, 8), hostile_numbers),
    "profile": st.one_of(st.fixed_dictionaries({"instructions": hostile_numbers},
                                               optional={"ipc": hostile_numbers, "cycles": hostile_numbers}),
                         values),
    "isa": values, "extra": values,
}
GOOD_BAG = {"name": "b", "command": "run {index}", "count": 3, "profile": {"instructions": 1e9}}


def bag_text(t: dict) -> str:
    text = toml_table("[bag]", {k: v for k, v in t.items() if k != "profile"})
    profile = t.get("profile")
    return text + (toml_table("[bag.profile]", profile) if isinstance(profile, dict)
                   else f'"profile" = {toml_value(profile)}\n' if "profile" in t else "")


@fuzz(120)
@given(st.one_of(mutated(GOOD_BAG, BAG_POOLS).map(bag_text),
                 st.binary(max_size=200).map(lambda b: b"[bag]\n" + b)))
def test_the_bag_reader_accepts_or_says_why(text):
    path = write(text)
    try:
        bag = load_bag(path)
    except InputError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc).strip()
        return
    finally:
        path.unlink()
    assert 1 <= bag.count <= 10**9 and 0 < bag.profile.instructions <= 1e20
    assert "\x1b" not in bag.name
    bag.command_for(bag.count - 1)          # a bag that loads has a command that fills


positive = st.one_of(st.floats(1e-6, 1e12), hostile_numbers)
DISTS = st.one_of(
    st.fixed_dictionaries({"dist": st.just("lognormal"), "median": positive, "sigma": st.one_of(st.floats(0, 10),
                                                                                                 hostile_numbers)},
                          optional={"size_exponent": st.one_of(st.floats(0, 10), hostile_numbers),
                                    "cores_per_node": st.one_of(st.integers(1, 64), hostile_numbers), "max": positive}),
    st.fixed_dictionaries({"dist": st.just("normal"), "mean": positive, "std": positive}, optional={"min": positive}),
    st.fixed_dictionaries({"dist": st.sampled_from(["exponential", "fixed"]), "mean": positive, "value": positive}),
    st.fixed_dictionaries({"dist": st.just("uniform"), "low": st.just(1.0), "high": positive}),
    st.fixed_dictionaries({"dist": st.just("empirical"), "samples": st.lists(positive, min_size=1, max_size=3)}),
    values)
SITE_POOLS = {
    "name": BAG_POOLS["name"],
    "cores": st.one_of(st.integers(1, 10**9), hostile_numbers),
    "clock": st.one_of(st.fixed_dictionaries({"base": st.one_of(st.floats(1e-3, 1e3), hostile_numbers)},
                                             optional={"avg": hostile_numbers}), values),
    "kappa": st.one_of(st.floats(1e-6, 1e6), hostile_numbers),
    "wait": st.one_of(positive, DISTS),
    "truth": st.one_of(st.fixed_dictionaries({}, optional={"kappa": st.one_of(st.floats(1e-6, 1e6), hostile_numbers),
                                                           "ipc": st.one_of(positive, DISTS),
                                                           "clock": st.one_of(positive, DISTS)}), values),
    "pilot": st.one_of(st.fixed_dictionaries({}, optional={"mode": st.sampled_from(["single", "per-task", "x"]),
                                                           "walltime": positive, "max_pilots": hostile_numbers,
                                                           "max_cores": st.one_of(st.integers(1, 64),
                                                                                  hostile_numbers)}), values),
    "queue": values, "reselect_target": values, "notes": values, "kind": values,
}
GOOD_SITE = {"name": "s", "kind": "simulated", "cores": 4, "clock": {"base": 2.0}, "wait": 60}


@fuzz(120)
@given(st.lists(mutated(GOOD_SITE, SITE_POOLS), min_size=1, max_size=2))
def test_the_sites_reader_accepts_or_says_why_and_accepted_sites_simulate(tables):
    for i, t in enumerate(tables):          # the default name once per site
        if t["name"] == "s":
            t["name"] = f"s{i}"
    path = write("\n".join(toml_table("[[site]]", t) for t in tables))
    try:
        sites = load_sites(path)
    except InputError as exc:
        assert str(path) in str(exc)
        return
    finally:
        path.unlink()
    from resel.domain import Bag, Profile
    for strategy in ("random", "model+reselect"):
        try:
            result = simulate(Bag("b", "true", 3, 1, Profile(1e12)), sites, strategy, seed=1)
        except ReselError:
            continue                       # e.g. no site can run the bag: said, not crashed
        assert result.metrics.done + result.metrics.failed == 3
        assert math.isfinite(result.metrics.ttc_wkd) or result.metrics.done == 0


tokens = st.one_of(st.sampled_from(["-1", "0", "1", "10", "1.5", "1e3", "nan", "inf", "-inf", "1&2", "+5", ".5",
                                    "1" + "0" * 25, "9" * 400, "0x10", "1_000", "٣", "\x00", ";", "5."]),
                   st.integers(-(10**20), 10**20).map(str), st.floats().map(repr), st.text(max_size=4))
def swf_line(replacements: list[tuple[int, str]]) -> str:
    tokens = ["1", "0", "5", "10", "1", "-1", "-1", "1", "100", "-1", "1", "1", "1", "1", "1", "1", "-1", "-1"]
    for index, token in replacements:
        tokens[index % 18] = token
    return " ".join(tokens)


lines = st.one_of(st.lists(st.tuples(st.integers(0, 17), tokens), max_size=2).map(swf_line),
                  st.lists(tokens, min_size=0, max_size=20).map(" ".join),
                  st.sampled_from(["; MaxProcs: 4", "; MaxProcs: " + "9" * 50, "id submit wait run", ""]))


@fuzz(120)
@given(st.lists(lines, max_size=6), st.booleans(), st.booleans())
def test_the_swf_reader_accepts_or_says_which_line(body, skip_bad, bom):
    raw = ("\n".join(body) + "\n").encode("utf-8", "surrogatepass")
    f = tempfile.NamedTemporaryFile("wb", suffix=".swf", delete=False)
    f.write((b"\xef\xbb\xbf" if bom else b"") + raw)
    f.close()
    outcomes = []
    try:
        for read in (lambda t: [(j.submit, j.run, j.size, j.req_time, j.id) for j in t],
                     lambda t: [row[:5] for row in t.replay_rows()]):
            try:
                trace = read_swf(f.name, skip_bad=skip_bad)
                trace.header.max_procs    # noqa: B018 - a header label may be malformed too
                rows = read(trace)
                assert all(abs(v) < 2**63 for row in rows for v in row)
                outcomes.append(rows)
            except InputError as exc:
                assert f.name in str(exc)
                outcomes.append(("error", str(exc)))
    finally:
        Path(f.name).unlink()
    assert outcomes[0] == outcomes[1]      # the fast path reads what iteration reads, errors included


option_values = st.one_of(st.floats().map(repr), st.sampled_from(["nan", "inf", "-inf", "1e-300", "1e308", "0",
                                                                  "-0", "", " ", "1" + "0" * 400, "0x10"]),
                          st.integers(-(10**25), 10**25).map(str))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("opts")
    (d / "t.swf").write_text("; MaxProcs: 4\n" + "".join(f"{i} {i * 5} 0 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n"
                                                       for i in range(1, 4)), encoding="utf-8")
    runner = CliRunner()
    got = runner.invoke(cli, ["simulate", "--db", str(d / "s.db"), "--sizes", "4", "--repeat", "1",
                              "--strategies", "model", "--json"])
    assert got.exit_code == 0, got.output
    return d


COMMANDS = {
    "grid --load": ["grid", "{d}/t.swf", "--cluster", "a:4", "--load", "{v}"],
    "grid --period": ["grid", "{d}/t.swf", "--cluster", "a:4", "--realloc", "regular", "--period", "{v}"],
    "grid --margin": ["grid", "{d}/t.swf", "--cluster", "a:4", "--realloc", "regular", "--margin", "{v}"],
    "grid --first": ["grid", "{d}/t.swf", "--cluster", "a:4", "--first", "{v}"],
    "grid --cluster": ["grid", "{d}/t.swf", "--cluster", "a:{v}:{v}"],
    "replay --speed": ["replay", "{d}/t.swf", "--speed", "{v}"],
    "replay --cores": ["replay", "{d}/t.swf", "--cores", "{v}"],
    "replay --first": ["replay", "{d}/t.swf", "--first", "{v}"],
    "replay --tau": ["replay", "{d}/t.swf", "--tau", "{v}"],
    "report RUN": ["report", "{v}", "--db", "{d}/s.db"],
    "report --decisions": ["report", "1", "--decisions", "{v}", "--db", "{d}/s.db"],
    "runs --limit": ["runs", "--limit", "{v}", "--db", "{d}/s.db"],
    "status RUN": ["status", "{v}", "--db", "{d}/s.db"],
    "simulate --seed": ["simulate", "--seed", "{v}", "--sizes", "2", "--repeat", "1", "--strategies", "model",
                        "--no-store"],
    "simulate --quantile": ["simulate", "--quantile", "{v}", "--sizes", "2", "--repeat", "1", "--strategies",
                            "model", "--no-store"],
    "history show --walltime": ["history", "show", "--cores", "2", "--walltime", "{v}", "--db", "{d}/s.db"],
    "history show --quantile": ["history", "show", "--quantile", "{v}", "--db", "{d}/s.db"],
}


@fuzz(60)
@given(st.sampled_from(sorted(COMMANDS)), option_values)
def test_numeric_options_are_checked_at_the_command_line(small, command, value):
    args = [a.replace("{d}", str(small)).replace("{v}", value) for a in COMMANDS[command]]
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output


@fuzz(30)
@given(st.text(max_size=20))
def test_simulate_sizes_are_parsed_or_refused(text):
    from resel.cli.simulate import _csv_ints
    import click
    try:
        sizes = _csv_ints(None, None, text)
    except click.BadParameter:
        return
    assert sizes and all(1 <= n <= 10**9 for n in sizes)
