"""Light imports (issue 15 item 4): what a fresh interpreter loads for the pure core and for
the commands whose start-up a user feels.

Each check runs a new Python process and reads its ``sys.modules``: the test process itself
has long imported everything, so only a fresh interpreter can tell what an import costs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest

from resel.cli import COMMANDS, cli
from resel.cli.sites import SITES_COMMANDS

#: third-party packages the pure core must never load (the standard library is all it needs)
THIRD_PARTY = ("numpy", "click", "rich", "sqlite_utils", "scipy", "matplotlib", "paramiko", "requests",
               "pandas", "dateutil", "pluggy", "cryptography", "htcondor2", "classad2", "yaml")
#: resel modules that drag those in, or that a command has no business loading
HEAVY_RESEL = ("resel.store", "resel.store_migrations", "resel.sim.simulation", "resel.live.coordinator",
               "resel.backends.transport", "resel.probes.profile", "resel.report.plots")


def _fresh_modules(code: str, *argv: str) -> tuple[set[str], str]:
    """Run ``code`` in a fresh interpreter; return the modules it loaded and what it printed.

    The list is written to stderr's last line by an ``atexit`` hook, so commands that end with
    ``sys.exit`` (click does) are measured too."""
    prelude = ("import atexit, json, sys\n"
               "atexit.register(lambda: sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}     # tables at their width for a pipe
    proc = subprocess.run([sys.executable, "-c", prelude + code, *argv], capture_output=True, text=True,
                          timeout=120, env=env)
    marker = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    assert marker, proc.stderr
    return set(json.loads(marker[-1][len("MODULES "):])), proc.stdout


def _top(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("module", ["resel", "resel.engine", "resel.selection", "resel.domain", "resel.transfer",
                                    "resel.events", "resel.states", "resel.formalism", "resel.metrics"])
def test_core_loads_the_standard_library_only(module):
    loaded, _ = _fresh_modules(f"import {module}")
    bare, _ = _fresh_modules("pass")     # what the interpreter loads by itself (site, .pth hooks)
    foreign = sorted(_top(loaded - bare) - set(sys.stdlib_module_names) - {"resel"})
    assert foreign == [], f"import {module} loads {foreign}"
    assert not set(THIRD_PARTY) & _top(loaded)
    assert not set(HEAVY_RESEL) & loaded, sorted(set(HEAVY_RESEL) & loaded)


def test_import_resel_is_lazy_but_complete():
    """``import resel`` loads nothing else of resel; every public name still resolves."""
    loaded, out = _fresh_modules("import resel\n"
                                 "print(sorted(m for m in sys.modules if m.startswith('resel.')))\n"
                                 "print(all(getattr(resel, n) is not None for n in resel.__all__))")
    assert [line for line in out.splitlines()] == ["[]", "True"]
    import resel
    assert set(resel.__all__) <= set(dir(resel))
    with pytest.raises(AttributeError):
        resel.no_such_name  # noqa: B018 - the attribute error of a lazy module
    loaded, out = _fresh_modules("import resel\nprint(resel.store.open_store.__module__, resel.engine.Engine.__name__)")
    assert out.split() == ["resel.store", "Engine"]   # submodules read as attributes, as before


CLI = "import sys\nfrom resel.cli import main\nsys.argv = ['resel'] + sys.argv[1:]\nmain()\n"


@pytest.mark.parametrize("argv", [["--help"], ["sites", "--help"], ["replay", "--help"], ["status", "--help"]],
                         ids=" ".join)
def test_help_loads_no_store_no_site_clients_and_no_rich(argv):
    loaded, out = _fresh_modules(CLI, *argv)
    assert "Usage:" in out
    assert not {"numpy", "sqlite_utils", "paramiko", "requests", "matplotlib", "rich"} & _top(loaded)
    assert not set(HEAVY_RESEL) & loaded, sorted(set(HEAVY_RESEL) & loaded)


def test_runs_loads_the_store_but_not_the_rest(tmp_path):
    loaded, out = _fresh_modules(CLI, "runs", "--db", str(tmp_path / "r.db"))
    assert "no runs stored yet" in out
    assert "resel.store" in loaded
    assert not {"paramiko", "requests", "matplotlib"} & _top(loaded)
    assert not {"resel.live.coordinator", "resel.sim.simulation", "resel.sim.experiment", "resel.sim.replay"} & loaded


def test_import_resel_store_loads_neither_sqlite_utils_nor_numpy():
    """The store module is the standard library's: sqlite-utils (which pulls in numpy) comes
    with the writing side, resel.store_migrations, when a store is created, written or migrated."""
    loaded, out = _fresh_modules("import resel.store\nprint(resel.store.read_store.__module__)")
    assert out.strip() == "resel.store"
    assert not {"sqlite_utils", "numpy"} & _top(loaded)
    assert "resel.store_migrations" not in loaded
    loaded, _ = _fresh_modules("import resel.store\nresel.store.migrations")
    assert {"sqlite_utils", "resel.store_migrations"} <= loaded       # read on first use, as before


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--json"], ["status"], ["status", "--json"]], ids=" ".join)
def test_runs_and_status_of_a_store_load_neither_sqlite_utils_nor_the_coordinator(bench_store, argv):
    """On a store made by the start-up benchmark's recipe (a live run with its events among
    simulated ones): the store is read through sqlite3, the run replayed without the
    coordinator's site clients; ``--json`` prints no table, so it does not load rich."""
    loaded, out = _fresh_modules(CLI, *argv, "--db", str(bench_store))
    assert ("run 4" in out or '"run_id": 4' in out) if argv[0] == "status" else "gromacs" in out, out
    assert not {"numpy", "sqlite_utils", "paramiko", "requests", "matplotlib", "cryptography"} & _top(loaded)
    assert not {"resel.store_migrations", "resel.live.coordinator", "resel.backends.transport",
                "resel.sim.simulation", "resel.sim.experiment", "resel.sim.replay"} & loaded
    if "--json" in argv:
        assert "rich" not in _top(loaded)


def test_replay_json_loads_neither_store_nor_simulator_nor_rich(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text("1 0 0 10 1 -1 -1 1 20 -1 1 -1 -1 -1 -1 -1 -1 -1\n", encoding="utf-8")
    loaded, out = _fresh_modules(CLI, "replay", str(trace), "--cores", "4", "--json")
    assert json.loads(out)["jobs"] == 1
    assert not {"numpy", "sqlite_utils", "paramiko", "requests", "rich"} & _top(loaded)
    assert not set(HEAVY_RESEL) & loaded, sorted(set(HEAVY_RESEL) & loaded)


def _registered(register, *args) -> set[str]:
    group = click.Group()
    extra = [click.Group() for _ in args]
    register(group, *extra) if extra else register(group)
    return set(group.commands), [set(g.commands) for g in extra]


def test_lazy_commands_are_every_command_of_their_modules():
    """The lazy maps name every command the command modules define: a command added to a
    module's ``register()`` but not to ``resel.cli.COMMANDS`` would silently vanish."""
    from resel.cli import history, live, plan, results
    live_top, (live_sites,) = _registered(live.register, "sites")
    top = (live_top | _registered(plan.register)[0] | _registered(history.register)[0]
           | _registered(results.register)[0])
    assert top <= set(COMMANDS)
    assert live_sites == set(SITES_COMMANDS)
    ctx = click.Context(cli)
    assert set(cli.list_commands(ctx)) == set(COMMANDS)     # the root defines no command itself
    for name, target in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name, target
    sites = cli.get_command(ctx, "sites")
    assert set(SITES_COMMANDS) | {"show", "defaults"} == set(sites.list_commands(click.Context(sites)))


def test_a_wrong_lazy_entry_is_a_clear_error():
    from resel.cli.common import LazyGroup
    group = LazyGroup(lazy={"grid": "resel.cli.grid:scenario_group"})
    with pytest.raises(RuntimeError, match="is not the command 'grid'"):
        group.get_command(click.Context(group), "grid")


class _HostilePlugin:
    """A sqlite-utils plugin as any installed package could ship one."""

    from sqlite_utils import hookimpl

    @staticmethod
    @hookimpl
    def prepare_connection(conn):
        conn.create_function("planted", 0, lambda: 1)


def test_the_store_runs_no_sqlite_utils_plugin(tmp_path):
    """resel's connections skip sqlite-utils' plugins: finding them scanned every installed
    package's entry points at each start-up, and no installed package should change what a
    resel store's connection does."""
    import sqlite3

    from sqlite_utils import Database
    from sqlite_utils.plugins import pm

    from resel.store import open_store
    pm.register(_HostilePlugin, name="resel-test-planted")
    try:
        assert Database(memory=True).execute("select planted()").fetchone() == (1,)   # the plugin works
        for db in (open_store(tmp_path / "s.db"), open_store(tmp_path / "s.db", write=False),
                   open_store(memory=True)):
            with pytest.raises(sqlite3.OperationalError, match="no such function: planted"):
                db.execute("select planted()")
    finally:
        pm.unregister(name="resel-test-planted")
    loaded, out = _fresh_modules("from resel.store import open_store\n"
                                 f"open_store({str(tmp_path / 'f.db')!r})\n"
                                 "import sqlite_utils.plugins as p\nprint(p._plugins_loaded)")
    assert out.strip() == "False"


def test_a_lazy_console_becomes_a_rich_console_on_first_use():
    """``resel.cli.common.out``/``err`` import rich only when a command prints through them, and are
    then genuine Consoles: rich's Live and Progress use them as context managers."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from resel.cli.common import LazyConsole
    for first_use in ("attribute", "with", "progress"):
        buf = io.StringIO()
        con = LazyConsole(file=buf, width=40, force_terminal=False)
        assert not isinstance(con, Console)
        if first_use == "attribute":
            con.print("[bold]hello[/bold]")
        elif first_use == "with":
            with con:
                con.print("hello")
        else:
            with Progress(console=con) as progress:
                progress.add_task("t", total=1)
            con.print("hello")
        assert isinstance(con, Console) and con.width == 40
        assert "hello" in buf.getvalue()
    loaded, _ = _fresh_modules("import resel.cli.common")
    assert "rich" not in _top(loaded)


@pytest.mark.parametrize(("argv", "suggestion"), [(["stauts"], "status"), (["sites", "chek"], "check"),
                                                  (["replya"], "replay")])
def test_a_mistyped_command_is_matched_against_every_command(argv, suggestion):
    from click.testing import CliRunner
    if not hasattr(click.exceptions, "NoSuchCommand"):
        pytest.skip("click < 8.4 makes no suggestion")
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2
    assert "Did you mean" in result.output and f"'{suggestion}'" in result.output.split("Did you mean")[1]


def test_a_command_that_opens_a_store_for_writing_loads_sqlite_utils_without_numpy(bench_store, tmp_path):
    """numpy comes with matplotlib (a dependency since issue 28); sqlite-utils would import it
    for nothing at every `resel report`, `plan`, `model`... (resel/cli/startup.py): the command
    loads sqlite-utils, not numpy — and a command that draws still gets numpy and its figures."""
    loaded, out = _fresh_modules(CLI, "report", "1", "--db", str(bench_store))
    assert "run 1" in out
    assert "sqlite_utils" in _top(loaded) and "numpy" not in _top(loaded)
    loaded, out = _fresh_modules(CLI, "report", "1", "--db", str(bench_store), "--html", str(tmp_path / "r.html"))
    assert {"numpy", "matplotlib"} <= _top(loaded) and (tmp_path / "r.html").read_text().count("<img") >= 3
