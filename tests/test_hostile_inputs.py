"""Every hostile input of issue 13 §5 (and §4's store cases) gets one clear line, never a traceback.

ONE table, run through the real command line (click's CliRunner, the same ``cli`` object the
``resel`` script calls): each case is an input, the exit status it must give, a fragment of the
message it must print, and — for all of them — no traceback and no exception escaping click.
Before the fixes of issue 13 every case of this table but the BOM ones crashed with a
traceback (RecursionError, OverflowError, MemoryError, MarkupError, BrokenProcessPool, ...) or
was silently accepted (nan options, a backwards trace in grid, a report written over the store).
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from resel.cli import cli

BAG = '[bag]\nname = "{name}"\ncommand = "true"\ncount = {count}\n\n[bag.profile]\ninstructions = 1e12\n'
SITE = ('[[site]]\nname = "{name}"\nkind = "simulated"\ncores = 8\nclock = {{ base = {clock} }}\nkappa = {kappa}\n'
        'wait = {{ dist = "lognormal", median = 60, sigma = {sigma}, size_exponent = {exponent}, cores_per_node = 1 }}\n')
LIVE_SITE = ('[[site]]\nname = "live"\nkind = "slurm"\ncores = 4\nclock = { base = 2.0 }\n'
             'access = { transport = "local", workdir = "/tmp/resel-hostile-never-used" }\n')
JOB = "{id} {submit} 0 10 1 -1 -1 1 100 -1 1 1 1 1 1 1 -1 -1\n"
BIG = "1" + "0" * 400


def site(name="s", clock=2.0, kappa=1.0, sigma=0.5, exponent=0.0) -> str:
    return SITE.format(name=name, clock=clock, kappa=kappa, sigma=sigma, exponent=exponent)


def trace(*submits) -> str:
    return "; MaxProcs: 4\n" + "".join(JOB.format(id=i + 1, submit=s) for i, s in enumerate(submits))


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> Path:
    """Every hostile file once, in one folder (names are what the cases refer to)."""
    d = tmp_path_factory.mktemp("hostile")
    w = lambda name, text: (d / name).write_text(text, encoding="utf-8")  # noqa: E731
    w("bag.toml", BAG.format(name="b", count=4))
    w("sites.toml", site("a") + "\n" + site("b", clock=2.5))
    w("live-sites.toml", LIVE_SITE)
    w("deep-bag.toml", "[bag]\nname = " + "[" * 2000 + "]" * 2000 + "\n")
    w("deep-sites.toml", "x = " + "[" * 2000 + "]" * 2000 + "\n")
    with open(d / "huge.toml", "wb") as f:         # 2 GB without a newline (sparse: costs nothing)
        f.truncate(2 * 1024**3)
    (d / "bom-bag.toml").write_bytes(b"\xef\xbb\xbf" + BAG.format(name="bom", count=4).encode())
    (d / "bom-sites.toml").write_bytes(b"\xef\xbb\xbf" + site("bomsite").encode())
    w("sigma.toml", site(sigma=1e10))
    w("exponent.toml", site(exponent="1e308"))
    w("kappa.toml", site(kappa="1e308"))
    w("clock.toml", site(clock="1e-300"))
    w("control-name.toml", site(name="evil\\u001b]0;pwned\\u0007"))
    w("markup-sites.toml", site(name="a$b[/x]") + "\n" + site(name="[link=http://evil]c[/link][on red]", clock=2.5)
      + "\n" + site(name="us$_$east", clock=3.0))      # two '$': matplotlib read '$_$' as (bad) mathtext
    w("markup-bag.toml", BAG.format(name="bag[/b]$x", count=4))
    w("count.toml", BAG.format(name="b", count=1_000_000_000))
    w("count-beyond.toml", BAG.format(name="b", count=10_000_000_000))
    w("big.swf", trace(0, BIG))
    w("ok.swf", trace(0, 5, 7))
    w("backwards.swf", trace(100, 50))
    (d / "ok.swf.gz").write_bytes(gzip.compress(trace(*range(0, 4000, 2)).encode()))
    whole = gzip.compress(trace(*range(0, 40000, 2)).encode())
    (d / "cut.swf.gz").write_bytes(whole[:len(whole) // 2])
    w("sacct-time.json", json.dumps({"jobs": [{"job_id": 1, "state": {"current": "COMPLETED"}, "time": "x"}]}))
    w("sacct-deep.json", '{"jobs":' + "[" * 200_000 + "]" * 200_000 + "}")
    w("sacct-huge.json", json.dumps({"jobs": [{"job_id": 1, "state": {"current": "COMPLETED"},
                                               "time": {"submission": 100, "start": 160}, "required": {"CPUs": 10**30}}]}))
    (d / "empty").mkdir()
    bad = d / "badtraces"
    bad.mkdir()
    (bad / "wagap-2013.swf").write_text("not a trace\n", encoding="utf-8")
    (bad / "hpc2n.swf").write_text(trace(0, 5), encoding="utf-8")
    # a store with one run whose names are hostile, and damaged or foreign stores
    run(["simulate", d / "markup-bag.toml", "--sites", d / "markup-sites.toml", "--db", d / "names.db",
         "--sizes", "4", "--repeat", "1", "--strategies", "model", "--json"])
    with sqlite3.connect(d / "names.db") as c:    # as another program (or an older resel) may have stored
        c.execute("update runs set bag = ?, strategy = ? where id = 1", ["evil\x1b]0;pwned\x07[/x]", "m\x1b[2J"])
    run(["simulate", d / "bag.toml", "--sites", d / "sites.toml", "--db", d / "store.db",
         "--sizes", "4", "--repeat", "1", "--strategies", "model", "--json"])
    settle(d / "names.db", d / "store.db")
    (d / "figs").mkdir()
    os.link(d / "store.db", d / "figs" / "gantt.png")          # a figure's name, hard-linked to the store
    (d / "figs2").mkdir()
    os.link(d / "bag.toml", d / "figs2" / "workload_by_size.png")
    for name in ("newer.db", "dropped.db", "json.db"):
        (d / name).write_bytes((d / "store.db").read_bytes())
    with sqlite3.connect(d / "newer.db") as c:
        c.execute("insert into _sqlite_migrations (migration_set, name, applied_at) "
                  "values ('resel', 'm099_from_the_future', '2030')")
    with sqlite3.connect(d / "dropped.db") as c:
        c.execute("alter table runs drop column ttc_wkd")
    with sqlite3.connect(d / "json.db") as c:
        c.execute("update runs set audit = '{not json' where id = 1")
    with sqlite3.connect(d / "foreign.db") as c:
        c.execute("create table notes (id integer primary key, body text)")
        c.execute("insert into notes (body) values ('mine, not resel''s')")
    w("notadb.db", "<html>a report, not a store</html>\n")
    return d


def settle(*stores: Path) -> None:
    """Close what the in-process commands left open and fold each WAL into its store file, so
    copying the file copies every run."""
    gc.collect()
    for path in stores:
        with sqlite3.connect(path) as c:
            c.execute("pragma wal_checkpoint(truncate)")


def run(args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


@dataclass
class Case:
    args: list
    code: int
    fragment: str
    env: dict = field(default_factory=dict)


D = "{d}"    # replaced by the fixture's folder
CASES = {
    # --- TOML (bag and sites files)
    "bag nested 2000 deep": Case(["sites", "show", "--bag", f"{D}/deep-bag.toml"], 1, "nested too deeply"),
    "sites nested 2000 deep": Case(["sites", "show", "--sites", f"{D}/deep-sites.toml"], 1, "nested too deeply"),
    "2 GB without a newline": Case(["sites", "show", "--bag", f"{D}/huge.toml"], 1, "is larger than 4 MiB"),
    "byte-order mark, bag (read)": Case(["sites", "show", "--bag", f"{D}/bom-bag.toml", "--json"], 0, '"bag": "bom"'),
    "byte-order mark, sites (read)": Case(["sites", "show", "--sites", f"{D}/bom-sites.toml"], 0, "bomsite"),
    "sigma = 1e10": Case(["simulate", "--sites", f"{D}/sigma.toml", "--no-store"], 1, "sigma <= 10"),
    "size_exponent = 1e308": Case(["simulate", "--sites", f"{D}/exponent.toml", "--no-store"], 1,
                                  "wait.size_exponent (line 7): bad value 1e+308"),
    "kappa = 1e308": Case(["simulate", "--sites", f"{D}/kappa.toml", "--no-store"], 1, "site[0].kappa (line 6)"),
    "clock = 1e-300": Case(["simulate", "--sites", f"{D}/clock.toml", "--no-store"], 1, "a clock in GHz, 0.001 to 1000"),
    "control character in a name": Case(["sites", "show", "--sites", f"{D}/control-name.toml"], 1,
                                        "without control characters"),
    # --- SWF traces
    "400-digit field, replay": Case(["replay", f"{D}/big.swf"], 1, "line 3: field 2 (submit) is '1000"),
    "400-digit field, grid": Case(["grid", f"{D}/big.swf", "--cluster", "a:4"], 1, "line 3: field 2 (submit)"),
    "400-digit field, history import": Case(["history", "import", "--site", "x", "--swf", f"{D}/big.swf",
                                             "--db", f"{D}/h.db"], 1, "field 2 (submit)"),
    "gzipped trace, replay (read)": Case(["replay", f"{D}/ok.swf.gz"], 0, "2,000 jobs on 4 cores"),
    "gzipped trace, grid (read)": Case(["grid", f"{D}/ok.swf.gz", "--cluster", "a:4"], 0, "2,000 jobs over a"),
    "damaged gzip": Case(["replay", f"{D}/cut.swf.gz"], 1, "cannot be decompressed"),
    "backwards submit, replay": Case(["replay", f"{D}/backwards.swf"], 1,
                                     "job 2: submitted at 50, before the previous job (100)"),
    "backwards submit, grid": Case(["grid", f"{D}/backwards.swf", "--cluster", "a:4"], 1,
                                   "job 2: submitted at 50, before the previous job (100)"),
    # --- numeric options
    "--load nan": Case(["grid", f"{D}/ok.swf", "--cluster", "a:4", "--load", "nan"], 2, "not a finite number"),
    "--load inf": Case(["grid", f"{D}/ok.swf", "--cluster", "a:4", "--load", "inf"], 2, "--load"),
    "--load 1e-300": Case(["grid", f"{D}/ok.swf", "--cluster", "a:4", "--load", "1e-300"], 2, "--load"),
    "--speed nan": Case(["replay", f"{D}/ok.swf", "--speed", "nan"], 2, "not a finite number"),
    "--speed inf": Case(["replay", f"{D}/ok.swf", "--speed", "inf"], 2, "--speed"),
    "--period nan": Case(["grid", f"{D}/ok.swf", "--cluster", "a:4", "--realloc", "regular", "--period", "nan"],
                         2, "not a finite number"),
    "--period 1e-300": Case(["grid", f"{D}/ok.swf", "--cluster", "a:4", "--realloc", "regular", "--period",
                             "1e-300"], 2, "at least 1 second"),
    "--margin nan": Case(["grid", f"{D}/ok.swf", "--cluster", "a:4", "--realloc", "regular", "--margin", "nan"],
                         2, "not a finite number"),
    "scenario --load nan": Case(["scenario", "seed004", "--load", "nan"], 2, "not a finite number"),
    "cluster cores 10^400": Case(["grid", f"{D}/ok.swf", "--cluster", f"a:{BIG}"], 2, "cores from 1 to 10^9"),
    "--seed beyond SQLite": Case(["simulate", "--seed", BIG, "--no-store"], 2, "--seed"),
    "report RUN beyond SQLite": Case(["report", BIG, "--db", f"{D}/store.db"], 2, "RUN_ID"),
    "report --decisions beyond SQLite": Case(["report", "1", "--decisions", BIG, "--db", f"{D}/store.db"], 2,
                                             "--decisions"),
    "cancel RUN beyond SQLite": Case(["cancel", BIG, "--db", f"{D}/store.db"], 2, "RUN_ID"),
    "status RUN beyond SQLite": Case(["status", BIG, "--db", f"{D}/store.db"], 2, "RUN_ID"),
    "run --resume beyond SQLite": Case(["run", "--resume", BIG, "--db", f"{D}/store.db"], 2, "--resume"),
    "runs --limit beyond SQLite": Case(["runs", "--limit", BIG, "--db", f"{D}/store.db"], 2, "--limit"),
    "replay --first beyond islice": Case(["replay", f"{D}/ok.swf", "--first", BIG], 2, "--first"),
    # --- sacct imports
    'sacct "time": "x"': Case(["history", "import", "--site", "x", "--sacct", f"{D}/sacct-time.json",
                               "--db", f"{D}/h.db"], 1, "job 1: time is str, expected an object"),
    "sacct JSON nested 200,000 deep": Case(["history", "import", "--site", "x", "--sacct", f"{D}/sacct-deep.json",
                                            "--db", f"{D}/h.db"], 1, "JSON nested too deeply"),
    "sacct CPUs beyond SQLite": Case(["history", "import", "--site", "x", "--sacct", f"{D}/sacct-huge.json",
                                      "--db", f"{D}/h.db"], 0, "1 with impossible numbers"),
    # --- sizes beyond memory
    "count = 1e9, run": Case(["run", f"{D}/count.toml", "--sites", f"{D}/live-sites.toml", "--db", f"{D}/r.db"],
                             1, "bag.count 1,000,000,000: a run of that many tasks needs about 2.0 TB"),
    "count = 1e9, plan": Case(["plan", f"{D}/count.toml", "--sites", f"{D}/live-sites.toml", "--db", f"{D}/r.db"],
                              1, "bag.count 1,000,000,000: a run of that many tasks needs about"),
    "count = 1e10": Case(["sites", "show", "--bag", f"{D}/count-beyond.toml"], 1, "<= 1,000,000,000"),
    "simulate --sizes 1e9": Case(["simulate", "--sizes", "1000000000", "--no-store"], 1,
                                 "--sizes 1,000,000,000: a run of that many tasks needs about"),
    # --- names with markup, control characters, '$'
    "markup names, sites show": Case(["sites", "show", "--sites", f"{D}/markup-sites.toml"], 0, "a$b[/x]"),
    "markup names, simulate": Case(["simulate", f"{D}/markup-bag.toml", "--sites", f"{D}/markup-sites.toml",
                                    "--sizes", "4", "--repeat", "1", "--no-store"], 0, "bag bag[/b]$x"),
    "stored hostile names, runs": Case(["runs", "--wide", "--db", f"{D}/names.db"], 0, "evil\\x1b]0;pwned\\x07[/x]"),
    "stored hostile names, report": Case(["report", "1", "--db", f"{D}/names.db"], 0, "strategy m\\x1b[2J"),
    "'$' in a site name, --plot": Case(["report", "1", "--db", f"{D}/names.db", "--plot", f"{D}/plots", "--json"],
                                       0, "/plots/gantt.png"),
    "'$' in a site name, --html": Case(["report", "1", "--db", f"{D}/names.db", "--html", f"{D}/r.html", "--json"],
                                       0, "/r.html"),
    # --- commands and workers
    "profile -- nonexistent-command": Case(["profile", "--db", f"{D}/p.db", "--", "nonexistent-command-xyz"], 1,
                                           "command not found: nonexistent-command-xyz"),
    "RESEL_TRACES=/empty scenario seed004": Case(["scenario", "seed004"], 1, "wagap-2013.swf: file not found",
                                                 env={"RESEL_TRACES": f"{D}/empty"}),
    "bad trace inside a worker": Case(["scenario", "seed004", "--first", "5", "--workers", "2"], 1,
                                      "wagap-2013.swf: line 1: has 3 fields",
                                      env={"RESEL_TRACES": f"{D}/badtraces"}),
    # --- the store (§4)
    "--html over the store": Case(["report", "1", "--db", f"{D}/store.db", "--html", f"{D}/store.db"], 1,
                                  "--html {d}/store.db is the run store"),
    "--plot figure hard-linked to the store": Case(["report", "1", "--db", f"{D}/store.db", "--plot", f"{D}/figs"],
                                                   1, "is the run store"),
    "--plot figure hard-linked to the bag": Case(["simulate", f"{D}/bag.toml", "--sites", f"{D}/sites.toml",
                                                  "--db", f"{D}/s2.db", "--plot", f"{D}/figs2"], 1,
                                                 "workload_by_size.png is the bag file"),
    "another application's SQLite file": Case(["runs", "--db", f"{D}/foreign.db"], 1,
                                              "is not a resel run store: it holds another application's tables (notes)"),
    "a file that is no database": Case(["simulate", "--db", f"{D}/notadb.db", "--sizes", "4"], 1,
                                       "is not a resel run store (not an SQLite database)"),
    "a store from a newer resel": Case(["runs", "--db", f"{D}/newer.db"], 1, "was made by a newer resel"),
    "a store with a dropped column": Case(["report", "1", "--db", f"{D}/dropped.db"], 1,
                                          "is damaged: table runs lacks column(s) ttc_wkd"),
    "a store with damaged JSON": Case(["report", "1", "--db", f"{D}/json.db"], 1,
                                      "runs.audit of run 1 is not JSON"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_hostile_input_gets_one_clear_error(d, name):
    case = CASES[name]
    args = [str(a).replace(D, str(d)) for a in case.args]
    env = {k: v.replace(D, str(d)) for k, v in case.env.items()}
    result = run(args, env=env or None)
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == case.code, (result.exit_code, output)
    assert case.fragment.replace(D, str(d)) in output, output
    if case.code == 1:   # an error is one line (click's usage errors, exit 2, add a usage hint)
        assert len([line for line in output.splitlines() if line.startswith("Error:")]) == 1, output
    assert "\x1b" not in output and "\x07" not in output, output


def test_the_hostile_stores_and_inputs_are_unchanged(d):
    """After the whole table: the foreign database, the store written over and the inputs are intact."""
    with sqlite3.connect(f"file:{d / 'foreign.db'}?mode=ro", uri=True) as c:
        assert c.execute("select body from notes").fetchall() == [("mine, not resel's",)]
        assert [r[0] for r in c.execute("select name from sqlite_master")] == ["notes"]
    assert (d / "notadb.db").read_text() == "<html>a report, not a store</html>\n"
    with sqlite3.connect(d / "store.db") as c:
        assert c.execute("select count(*) from runs").fetchone() == (1,)
    assert (d / "bag.toml").read_text().startswith("[bag]")
