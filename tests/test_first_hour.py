"""The first hour of a new user (issue 28): the README's commands, every command's ``--help`` and
``--json``, typed as a person types them — the installed ``resel`` in a fresh process, a fresh
home folder, output piped — and checked on what a person reads.

What is asserted is what the issue saw go wrong: a store that grows without a way to prune it,
``--plot`` failing after the work, errors that mislead and ``--json`` that is not JSON on error,
tables too wide for a terminal or mixing units, options without help, ranges printed as 19-digit
numbers. The live commands of the README need the testbed (tests/test_cli_live.py and the other
``*_live.py`` files run them); here they are run where they must refuse a file of simulated
sites, and say what to type instead.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from resel.cli import cli

REPO = Path(__file__).resolve().parent.parent
SWF = REPO.parent / "shared" / "data" / "swf"
RESEL = str(Path(sys.executable).parent / "resel")
THESIS = str(REPO / "examples" / "sites-thesis.toml")
GROMACS_BAG = str(REPO / "examples" / "gromacs-bag.toml")
SLEEP_BAG = str(REPO / "examples" / "sleep-bag.toml")
#: what a table may span in a pipe (the issue's plan table was 150 columns whatever COLUMNS said)
WIDTH = 100
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A new user's home folder: no store yet, nothing configured."""
    return tmp_path_factory.mktemp("home")


def user_env(home: Path, **extra: str) -> dict:
    """The environment of a new user: their own home (the store goes to ~/.local/share/resel),
    no RESEL_DB, no COLUMNS, no colour settings, unless given."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RESEL_DB", "XDG_DATA_HOME", "COLUMNS", "NO_COLOR", "FORCE_COLOR", "RESEL_LOG")}
    env.update(HOME=str(home), **extra)
    return env


def resel(home: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """``resel ARGS`` as typed in a shell, its output piped (as into less or a file)."""
    return subprocess.run([RESEL, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=user_env(home, **env), cwd=REPO)


def widest(text: str) -> int:
    from rich.cells import cell_len
    return max((cell_len(line.rstrip()) for line in text.splitlines()), default=0)


#: the lines that follow a table (its legend, notes), where its rows end
AFTER_TABLE = ("times in", "the newest", "created:", "  start:", "T̂x model", "stored as", "not stored", "--kind")


def table_lines(text: str, header: str) -> list[str]:
    """The header line that starts with ``header``, its rule and the rows under it, blank
    separator lines left out, up to the legend under the table."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    out = lines[at:at + 2]
    for line in lines[at + 2:]:
        if line.startswith(AFTER_TABLE):
            break
        if line.strip():
            out.append(line)
    return out


# ------------------------------------------------------------------------- the main job, then the store
@pytest.fixture(scope="module")
def main_job(home):
    """The README's main job, `resel simulate`, exactly as typed: the default bag and sites."""
    started = time.monotonic()
    result = resel(home, "simulate")
    return result, time.monotonic() - started


def test_the_main_job_reads_as_the_readme_shows(main_job, home):
    result, _ = main_job
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert not ANSI.search(out), "escape codes in a pipe"
    assert widest(out) <= WIDTH, out
    header = "size  strategy   TTC_wkd [h]  T_x,wkd [h]   T_q,wkd [h]   TTC vs auto  moved  P_RESEL wrong"
    assert header in out
    rows = table_lines(out, "size  strategy")[2:]
    assert len([r for r in rows if "±" in r]) == 12
    # 2 sizes x (auto, 4 peers, the oracle); the README's figures and its one-line verdict
    said = " ".join(out.split())
    assert "73% sooner than earliest" in said and "49% sooner than earliest" in said
    store = home / ".local" / "share" / "resel" / "resel.db"
    assert f"stored as experiment 1 in {store}" in " ".join(out.split())
    assert oct(store.stat().st_mode & 0o777) == "0o600"
    # what one simulate adds to the store (17.4 MB before the redundant events were cut)
    assert store.stat().st_size < 15.5 * 2**20, store.stat().st_size


def test_runs_lists_filters_and_prune_removes(main_job, home):
    assert main_job[0].returncode == 0
    listing = resel(home, "runs", "--limit", "20")
    assert listing.returncode == 0 and widest(listing.stdout) <= WIDTH
    rows = table_lines(listing.stdout, "run  exp")[2:]
    assert len(rows) == 20 and "the newest 20" in listing.stdout              # the limit, said
    assert all(re.match(r"\s*\d+\s+1\s+\d\d-\d\d \d\d:\d\d\s+sim\s+gromacs-1e5\s", r) for r in rows), rows[:3]
    assert "TTC_wkd [h]" in listing.stdout
    doc = json.loads(resel(home, "runs", "--experiment", "1", "--limit", "1000", "--json").stdout)
    runs = 2 * 5 * 3          # the main job: 2 sizes, auto and 4 peers (the oracle is a bound), 3 runs each
    assert len(doc) == runs and {r["experiment_id"] for r in doc} == {1}
    assert json.loads(resel(home, "runs", "--kind", "live", "--json").stdout) == []
    assert len(json.loads(resel(home, "runs", "--since", "1h", "--limit", "1000", "--json").stdout)) == runs
    assert "no stored run matches" in resel(home, "runs", "--kind", "live").stdout
    # one run of it, in words and in a page
    report = resel(home, "report", str(runs), "--decisions", "3")
    assert report.returncode == 0 and widest(report.stdout) <= WIDTH
    assert re.search(r"TTC_wkd [\d.]+ h = T_q,wkd [\d.]+ h \+ T_x,wkd [\d.]+ h", report.stdout)
    # prune: --dry-run says what would go and removes nothing; then it goes, and the file shrinks
    store = home / ".local" / "share" / "resel" / "resel.db"
    size = store.stat().st_size
    dry = resel(home, "prune", "--experiment", "1", "--dry-run")
    assert dry.returncode == 0 and f"would remove experiment 1: {runs} simulated run(s)" in dry.stdout
    assert len(json.loads(resel(home, "runs", "--limit", "1000", "--json").stdout)) == runs
    gone = json.loads(resel(home, "prune", "--run", f"1-{runs - 1}", "--json").stdout)
    assert gone["runs"] == list(range(1, runs)) and gone["experiments"] == [] and gone["bytes_after"] < size / 5
    assert [r["id"] for r in json.loads(resel(home, "runs", "--json").stdout)] == [runs]
    assert resel(home, "prune").returncode == 2                        # says which runs: nothing by default


def test_a_live_run_not_finished_is_never_pruned(tmp_path):
    """A live run still running stays whatever prune is asked; a finished one goes."""
    import resel as api
    from resel.store import open_store, save_run
    db = tmp_path / "r.db"
    store = open_store(db)
    for status in ("running", "cancelling", "done", "cancelled"):
        run = save_run(store, api.simulate(api.default_bag().resized(4), api.default_sites(), "model", seed=1))
        store["runs"].update(run, {"mode": "live", "status": status})
    store.conn.close()
    doc = json.loads(resel(tmp_path, "prune", "--older-than", "0d", "--db", db, "--json").stdout)
    assert doc["runs"] == [3, 4] and [k["run"] for k in doc["kept"]] == [1, 2]
    assert "resel cancel 1" in doc["kept"][0]["why"]
    left = {r["id"]: r["status"] for r in json.loads(resel(tmp_path, "runs", "--db", db, "--json").stdout)}
    assert left == {2: "cancelling", 1: "running"}
    for table in ("tasks", "pilots", "decisions", "events"):
        n = open_store(db, write=False).execute(f"select count(*) from {table} where run_id in (3, 4)").fetchone()[0]
        assert n == 0, table


def test_prune_removes_every_table_of_a_run(tmp_path):
    """Every table a new store has with a ``run_id`` column loses the pruned run's rows — the list
    is read from the schema here, not from the pruning code (the task-data tables of m009 were
    once left behind: a live run's inputs, cache and outputs outliving their run)."""
    import resel as api
    from resel.store import open_store, save_run
    db = tmp_path / "r.db"
    store = open_store(db)
    run = save_run(store, api.simulate(api.default_bag().resized(4), api.default_sites(), "model", seed=1))
    tables = [t for (t,) in store.execute("select name from sqlite_master where type = 'table'").fetchall()
              if "run_id" in {c[1] for c in store.execute(f"pragma table_info([{t}])").fetchall()}]
    assert {"task_inputs", "site_files", "task_outputs", "attempts", "live_notes"} <= set(tables), tables
    for table in tables:                    # a row of the run in each, whatever it holds
        if not store.execute(f"select count(*) from [{table}] where run_id = ?", [run]).fetchone()[0]:
            store.execute(f"insert into [{table}] (run_id) values (?)", [run])
    store.conn.commit()
    store.conn.close()
    assert resel(tmp_path, "prune", "--run", str(run), "--db", db).returncode == 0
    reader = open_store(db, write=False)
    left = {t: reader.execute(f"select count(*) from [{t}] where run_id = ?", [run]).fetchone()[0] for t in tables}
    assert not any(left.values()), left


# ------------------------------------------------------------------------- --plot, checked before the work
def test_plot_is_checked_before_any_work(tmp_path):
    """`--plot` into a path under a file fails at once, before a run is simulated or stored;
    a good folder gets the figure its help promises."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    started = time.monotonic()
    bad = resel(tmp_path, "simulate", "--sizes", "256,1024", "--repeat", "10", "--plot", blocker / "figs",
                "--db", tmp_path / "r.db")
    assert bad.returncode == 1 and time.monotonic() - started < 10
    assert f"{blocker} is a file, not a folder" in bad.stderr and "Hint: give --plot another path" in bad.stderr
    assert not (tmp_path / "r.db").exists() or '"id"' not in resel(tmp_path, "runs", "--db", tmp_path / "r.db",
                                                                       "--json").stdout
    good = resel(tmp_path, "simulate", "--sizes", "16,32", "--repeat", "2", "--plot", tmp_path / "figs",
                 "--db", tmp_path / "r.db")
    assert good.returncode == 0, good.stderr
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["workload_by_size.png", "workload_by_size.svg"]
    assert "workload_by_size.png" in resel(tmp_path, "simulate", "--help").stdout


def test_no_store_and_one_run_are_said_plainly(tmp_path):
    result = resel(tmp_path, "simulate", "--sizes", "16", "--repeat", "1", "--no-store")
    assert result.returncode == 0
    assert "not stored (--no-store)" in result.stdout
    rows = table_lines(result.stdout, "size  strategy")[2:]
    assert rows and not any("±" in r for r in rows) and "one run each" in result.stdout   # no '±0.00' for one run
    assert not (tmp_path / ".local").exists()


# ------------------------------------------------------------------------- every command's --help
def command_paths(group: click.Group = cli, prefix: tuple = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            yield from command_paths(cmd, prefix + (name,))
        else:
            yield prefix + (name,), cmd


COMMANDS = list(command_paths())


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=" ".join)
def test_every_help_teaches(path, tmp_path):
    """Every command's --help: an example to copy, every option explained, no range of
    19-digit numbers, within the terminal's width."""
    result = resel(tmp_path, *path, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "Usage: resel " + " ".join(path) in text
    assert re.search(r"^\s*Examples?:", text, re.M), f"resel {' '.join(path)} --help has no example"
    assert not re.search(r"\d{13,}", text), "a bound printed as a long number"
    assert widest(text) <= WIDTH
    cmd = dict((p, c) for p, c in COMMANDS)[path]
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"resel {' '.join(path)} {param.opts[0]} has no help text"


# ------------------------------------------------------------------------- every command's --json
JSON_COMMANDS = [p for p, c in COMMANDS if any(isinstance(o, click.Option) and "--json" in o.opts for o in c.params)]


@pytest.mark.parametrize("path", JSON_COMMANDS, ids=" ".join)
def test_every_json_error_is_json(path, tmp_path):
    """Bad usage with --json: one JSON object on stdout, {"error", "hint"}, exit status 2 —
    `| python -m json.tool` reads it."""
    # profile passes unknown options to the command it measures: a bad value of its own instead
    bad = ["--repeat", "0", "--", "true"] if path == ("profile",) else ["--no-such-option"]
    result = resel(tmp_path, *path, "--json", *bad)
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert set(doc) == {"error", "hint"} and bad[0] in doc["error"]
    assert doc["hint"] == f"`resel {' '.join(path)} --help` lists the options, with examples"


#: each command with --json, made to fail as a newcomer makes it fail, and a fragment of the
#: error and of the hint a person needs
FAILURES = {
    ("simulate",): (["nope.toml"], "nope.toml: file not found", "check the path"),
    ("runs",): (["--since", "yesterday"], "neither an age nor a date", "--help"),
    ("report",): (["7"], "no run 7 in the store", "list them with `resel runs`"),
    ("results",): (["7"], "no run 7 in the store", "list them with `resel runs --kind live`"),
    ("fetch",): (["7"], "no run 7 in the store", "list them with `resel runs --kind live`"),
    ("prune",): (["--run", "x"], "is not a run id", "--help"),
    ("replay",): ([str(SWF / "hpc2n.swf"), "--tau", "0"], "thresholds > 0", "--help"),
    ("plan",): ([SLEEP_BAG, "--sites", "nope.toml"], "nope.toml: file not found", "check the path"),
    ("run",): ([SLEEP_BAG, "--sites", THESIS], "every site is simulated, and `resel run` asks live sites",
               "`resel simulate BAG --sites"),
    ("status",): ([], "no live run in the store yet", "start one with `resel run"),
    ("cancel",): (["3"], "no run 3 in the store", "resel runs"),
    ("profile",): (["--", "no-such-program"], "command not found: no-such-program", "--help"),
    ("sites", "show"): (["--sites", "nope.toml"], "nope.toml: file not found", "check the path"),
    ("sites", "check"): (["--sites", THESIS], "`resel sites check` asks live sites", "resel sites show --sites"),
    ("sites", "status"): (["--sites", THESIS], "`resel sites status` asks live sites", "resel sites show --sites"),
    ("sites", "probe"): (["--sites", THESIS], "`resel sites probe` asks live sites", "resel sites show --sites"),
    ("history", "import"): (["--site", "x", "--swf", "nope.swf"], "nope.swf: file not found", "check the path"),
    ("history", "show"): ([], "no wait history", "resel history import"),
    ("history", "fetch"): (["--sites", THESIS], "every site is simulated", "resel history import --swf"),
    ("history", "learn"): (["--site", "x", "--swf", str(SWF / "hpc2n.swf"), "--cores", "0"], "'0' is out of range",
                           "--help"),
    ("model", "fit"): ([], "no evidence to fit", "resel run BAG --sites FILE"),
    ("model", "show"): ([], "no model fit in the store", "resel model fit"),
    ("model", "predict"): ([SLEEP_BAG], "no model fit of application 'sleep'", "--help"),
    ("grid",): (["nope.swf", "--cluster", "a:8"], "nope.swf: file not found", "check the path"),
    ("scenario", "seed004"): (["--load", "0"], "--load", "--help"),
}


def test_every_json_command_has_a_failure_case():
    assert set(FAILURES) == set(JSON_COMMANDS)


@pytest.mark.parametrize("path", sorted(FAILURES), ids=" ".join)
def test_every_command_fails_in_one_style(path, tmp_path):
    """The same failure twice: as text, `Error: …` on stderr (and nothing else, no traceback),
    exit status 1 or 2; with --json, the object on stdout with the same message."""
    args, error, hint = FAILURES[path]
    text = resel(tmp_path, *path, *args, "--db", tmp_path / "r.db") if _has_db(path) else resel(tmp_path, *path, *args)
    assert text.returncode in (1, 2), text.stdout
    assert "Traceback" not in text.stderr and error in " ".join(text.stderr.split())
    assert text.stderr.startswith(("Error: ", "Usage: "))
    js_args = [*path, "--json", *args] if "--" in args else [*path, *args, "--json"]
    js = resel(tmp_path, *js_args, *(["--db", tmp_path / "r.db"] if _has_db(path) else []))
    assert js.returncode == text.returncode
    doc = json.loads(js.stdout)
    assert error in doc["error"] and hint in doc["hint"], doc
    assert js.stderr.strip() == ""


def _has_db(path: tuple) -> bool:
    cmd = dict(COMMANDS)[path]
    return any(isinstance(o, click.Option) and "--db" in o.opts for o in cmd.params)


def test_a_failed_profile_fails(tmp_path):
    """`resel profile -- /bin/false` measures, shows what it measured, stores nothing and fails."""
    result = resel(tmp_path, "profile", "--no-callgrind", "--db", tmp_path / "r.db", "--", "/bin/false")
    assert result.returncode == 1
    assert "exited with status 1" in result.stderr and "nothing stored" in result.stderr
    assert "task-clock [s]" in result.stdout and "task_clock_s s" not in result.stdout


# ------------------------------------------------------------------------- live commands on simulated sites
def test_the_dry_run_plans_simulated_sites_as_plan_does(tmp_path):
    """`resel run --dry-run` on the thesis sites shows the plan `resel plan` shows."""
    dry = resel(tmp_path, "run", GROMACS_BAG, "--sites", THESIS, "--dry-run", "--json")
    plan = resel(tmp_path, "plan", GROMACS_BAG, "--sites", THESIS, "--json")
    assert dry.returncode == plan.returncode == 0, dry.stderr
    a, b = json.loads(dry.stdout), json.loads(plan.stdout)
    assert a["sites_kind"] == "simulated" and [r["site"] for r in a["sites"]] == [r["site"] for r in b["sites"]]


def test_the_plan_table_reads_in_one_unit_within_the_width(tmp_path):
    """Numbers only in the cells, the unit in the header; 100 columns; --explain in the same unit;
    --wide shows the three estimates with the one used marked."""
    result = resel(tmp_path, "plan", GROMACS_BAG, "--sites", THESIS, "--explain")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert widest(out) <= WIDTH and not ANSI.search(out)
    rows = table_lines(out, "site ")
    unit = re.search(r"start \[(s|min|h)\]", rows[0]).group(1)
    for row in rows[2:]:
        assert not re.search(r"\d (s|min|h)\b", row), row
    why = out[out.index("why:"):]
    assert not re.search(r"\d,\d{3} s\b", why) and f" {unit}" in why             # not "147,501 s"
    wide = resel(tmp_path, "plan", GROMACS_BAG, "--sites", THESIS, "--wide").stdout
    header = next(line for line in wide.splitlines() if line.startswith("site "))
    assert all(f"{e} [{unit}]" in header for e in ("history", "twin", "scheduler")) and "*" in wide
    narrow = resel(tmp_path, "plan", GROMACS_BAG, "--sites", THESIS, COLUMNS="80").stdout
    assert widest(narrow.split("  start:")[0]) <= 80                           # COLUMNS honoured in a pipe


# ------------------------------------------------------------------------- colours, pipes, small things
def test_no_color_on_a_terminal_and_none_in_a_pipe(tmp_path):
    """On a terminal (a pseudo-terminal here) rich colours its output unless NO_COLOR is set; in a
    pipe nothing but text."""
    def on_tty(**env):
        master, slave = pty.openpty()
        proc = subprocess.Popen([RESEL, "simulate", "--sizes", "16", "--repeat", "1", "--no-store"], stdout=slave,
                                stderr=slave, env=user_env(tmp_path, TERM="xterm-256color", **env), cwd=REPO)
        os.close(slave)
        chunks = []
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
        os.close(master)
        return b"".join(chunks).decode(errors="replace")
    coloured = on_tty()
    plain = on_tty(NO_COLOR="1")
    colour = re.compile(r"\x1b\[[0-9;]*(3[0-9]|9[0-7]|38;[25];[0-9;]+)m")
    assert colour.search(coloured), "no colour on a terminal: the test would prove nothing"
    assert not colour.search(plain)
    piped = resel(tmp_path, "simulate", "--sizes", "16", "--repeat", "1", "--no-store")
    assert not ANSI.search(piped.stdout + piped.stderr)


def test_replay_as_typed(tmp_path):
    """wagap's cores come from its .machines file; a short replay's makespan is not '0.0 days';
    one time unit for the table's waits and responses."""
    wagap = resel(tmp_path, "replay", SWF / "wagap-2013.swf", "--policy", "fcfs", "--first", "2000")
    assert wagap.returncode == 0, wagap.stderr
    assert "2,176 cores (from wagap-2013.swf.machines)" in wagap.stdout
    jaros = resel(tmp_path, "replay", SWF / "jaros1.swf", "--cores", "16")
    assert "makespan 70 min" in jaros.stdout and "days" not in jaros.stdout
    units = set(re.findall(r"^(?:wait|response) \[(\w+)\]", jaros.stdout, re.M))
    assert units == {"min"}


def test_history_learn_says_how_large_the_errors_are(tmp_path):
    result = resel(tmp_path, "history", "learn", "--site", "seth", "--swf", SWF / "hpc2n.swf",
                   "--db", tmp_path / "r.db")
    assert result.returncode == 0, result.stderr
    assert "6,290 errors" in result.stdout
    rows = table_lines(result.stdout, "estimate")
    assert re.search(r"P10 \[(s|min|h)\]", rows[0]) and [r.split()[0] for r in rows[2:]] == ["twin", "scheduler"]


def test_the_agent_doc_names_attempts_as_the_agent_writes_them():
    """docs/agent.md's attempt keys: the engine numbers a task's attempts from 1."""
    import resel as api
    from resel.backends.pilotsite import task_key        # the name of the agent's files
    doc = (REPO / "docs" / "agent.md").read_text(encoding="utf-8")
    assert "t12-a0" not in doc and "`t12-a1`" in doc
    result = api.simulate(api.default_bag().resized(2), api.default_sites(), "model", seed=1)
    first = [e for _, kind, e in result.events if kind == "DispatchTask"][0]
    assert first.attempt == 1 and task_key(12, first.attempt) == "t12-a1"


def test_every_example_loads_from_the_checkout_alone(tmp_path):
    """A user's clone has no ../shared beside it: every example sites file (and the traces it
    replays) must load from a copy of examples/ alone. sites-hetero.toml and
    sites-traces-wagap.toml once pointed at ../../shared/data and failed with 'trace not found'."""
    import shutil
    from resel.config import load_sites
    copy = tmp_path / "deep" / "er" / "examples"          # no shared/ anywhere above it
    shutil.copytree(REPO / "examples", copy)
    files = sorted(copy.glob("sites-*.toml"))
    assert len(files) >= 8
    traces = []
    for f in files:
        for site in load_sites(f):
            if site.queue is not None:
                traces.append(Path(site.queue.trace).resolve())
                assert traces[-1].is_relative_to(copy), (f.name, site.queue.trace)
    assert {t.name for t in traces} == {"hpc2n.swf", "wagap-2013.swf"}
