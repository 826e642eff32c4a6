"""Bags of unequal tasks (issue 26 item 3): the task table, its errors, its placeholders, and
each task's own T̂x through LIM, the engine, the simulator and the oracle.

Expected values are worked out from the definitions: LIM's T̂x = κ · I / clock (eq. 3.2–3.6),
a class's size law I(n) = instructions + per_size · n, a task's true T_x on a slot of speed
IPC × clock = κ · I / (IPC × clock)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resel
from conftest import make_site
from resel.sim.simulation import simulate
from resel.config import check_site_commands, load_bag
from resel.domain import Bag, Profile, TaskSpec
from resel.engine import Engine
from resel.errors import InputError
from resel.events import BagSubmitted, Decision, DispatchTask, PilotStarted, SubmitPilot, TaskFinished
from resel.sim.oracle import oracle_bound

ROOT = Path(__file__).resolve().parent.parent


def bag_file(tmp_path, body: str, csv: str | None = None, head: str = "") -> str:
    """A bag file (``tasks = "tasks.csv"`` unless ``body`` says otherwise) and its CSV."""
    if csv is not None:
        (tmp_path / "tasks.csv").write_text(csv)
    path = tmp_path / "bag.toml"
    path.write_text(f'''[bag]
name = "sweep"
command = "gmx mdrun -s {{task}}.tpr -nsteps {{size}} {{args}}"
{head}
{body}
''')
    return str(path)


PROFILE = '''
[bag.profile]
instructions = 1e9
per_size = 2e6
'''


def table_bag(tasks: list[tuple[str, float]], order: str = "given", cores: int = 1) -> Bag:
    """A bag built directly: (name, instructions) per task, the profile their mean."""
    specs = tuple(TaskSpec(n, i, cores=cores) for n, i in tasks)
    mean = sum(i for _, i in tasks) / len(tasks)
    return Bag("t", "run {task}", len(specs), cores, Profile(mean), tasks=specs, order=order)


# ------------------------------------------------------------------ reading the table
def test_csv_table_reads_sizes_classes_args_and_counts(tmp_path):
    """I(n) per row from its class; count, cores and the mean follow from the rows."""
    path = bag_file(tmp_path, 'tasks = "tasks.csv"\n' + PROFILE + '[bag.classes.big]\ninstructions = 5e9\n'
                    'per_size = 1e7\n', "name,size,cores,args,class\na,100,1,-v,\nb,0,4,\"-ntomp 4\",big\n")
    bag = load_bag(path)
    a, b = bag.tasks
    assert a.instructions == 1e9 + 2e6 * 100 and b.instructions == 5e9
    assert (bag.count, bag.cores_per_task) == (2, 4)
    assert bag.profile.instructions == (a.instructions + b.instructions) / 2
    assert bag.weights == (a.instructions / bag.profile.instructions, b.instructions / bag.profile.instructions)
    assert bag.command_for(0) == "gmx mdrun -s a.tpr -nsteps 100 -v"
    assert bag.command_for(1) == "gmx mdrun -s b.tpr -nsteps 0 -ntomp 4"


def test_inline_table_is_the_same_bag(tmp_path):
    """[[bag.tasks]] rows read as the CSV's do."""
    body = PROFILE + '''
[[bag.tasks]]
name = "a"
size = 100
args = "-v"

[[bag.tasks]]
name = "b"
size = 3
'''
    bag = load_bag(bag_file(tmp_path, body))
    assert [t.name for t in bag.tasks] == ["a", "b"]
    assert [t.instructions for t in bag.tasks] == [1e9 + 2e6 * 100, 1e9 + 2e6 * 3]
    assert bag.command_for(1) == "gmx mdrun -s b.tpr -nsteps 3 "


def test_one_task_and_size_zero(tmp_path):
    """One row of size 0: the law's intercept, weight 1."""
    bag = load_bag(bag_file(tmp_path, 'tasks = "tasks.csv"\n' + PROFILE, "name,size\nonly,0\n"))
    assert bag.count == 1 and bag.tasks[0].instructions == 1e9 and bag.weights == (1.0,)


def test_equal_bag_leaves_row_placeholders_to_the_shell():
    """{task}, {size}, {args} are placeholders only in a table bag: an equal bag's command is as before."""
    bag = Bag("b", "echo {size} {task} {args} {index}", 2, 1, Profile(1e9))
    assert bag.command_for(1) == "echo {size} {task} {args} 1"


@pytest.mark.parametrize("csv, where, words", [
    ("size,cores\n1,1\n", "line 1", "no 'name' column"),
    ("name,size\na,lots\n", "line 2", "size 'lots' is not a number"),
    ("name,size\na,1\nb,2\na,3\n", "line 4", "already used by line 2"),
    ("name,cores\na,1.5\n", "line 2", "cores '1.5' is not a whole number"),
    ("name,size\na,1,2\n", "line 2", "3 fields for 2 columns"),
    ("name,klass\na,1\n", "line 1", "unknown column 'klass'"),
    ("name,class\na,huge\n", "line 2", "unknown class 'huge'"),
    ("name,size\na,-1\n", "line 2", "out of range"),
    ("name\n", None, "no task rows"),
])
def test_bad_rows_name_file_line_and_fix(tmp_path, csv, where, words):
    """Every bad row names the CSV file, its line, what is wrong and the fix."""
    with pytest.raises(InputError) as err:
        load_bag(bag_file(tmp_path, 'tasks = "tasks.csv"\n' + PROFILE, csv))
    assert err.value.path == str(tmp_path / "tasks.csv")
    assert err.value.where == where
    assert words in err.value.problem and err.value.expected


def test_bad_inline_row_names_its_line(tmp_path):
    """An inline row's error names bag.tasks[i] and its line in the bag file."""
    body = PROFILE + '\n[[bag.tasks]]\nname = "a"\n\n[[ bag . tasks ]]\nname = "b"\nsize = "x"\n'
    path = bag_file(tmp_path, body)
    with pytest.raises(InputError) as err:
        load_bag(path)
    # the row's line is the line of its own name (not the bag's `name =` at the top of the file)
    line = Path(path).read_text().splitlines().index('name = "b"') + 1
    assert err.value.where == f"bag.tasks[1] (line {line})" and "size 'x'" in err.value.problem
    path = bag_file(tmp_path, PROFILE + '\n[[bag.tasks]]\nname = "a"\nbogus = 1\n')
    with pytest.raises(InputError) as err:
        load_bag(path)
    line = Path(path).read_text().splitlines().index('name = "a"') + 1
    assert err.value.where == f"bag.tasks[0] (line {line})" and "unknown key 'bogus'" in err.value.problem


def test_count_must_match_and_table_keys_need_a_table(tmp_path):
    """count beside a table must be its rows; classes, order and per_size need a table."""
    with pytest.raises(InputError, match="count = 3 but the task table has 1 rows"):
        load_bag(bag_file(tmp_path, 'tasks = "tasks.csv"\ncount = 3\n' + PROFILE, "name\na\n"))
    with pytest.raises(InputError, match="a size law needs tasks"):
        load_bag(bag_file(tmp_path, "count = 2\n" + PROFILE))
    with pytest.raises(InputError, match="'order' needs a task table"):
        load_bag(bag_file(tmp_path, 'count = 2\norder = "largest"\n[bag.profile]\ninstructions = 1e9\n'))


def test_cores_beyond_every_site_is_refused_and_equal_cores_fit(tmp_path):
    """A row wider than every site fails naming its line; one exactly as wide as a site fits."""
    bag = load_bag(bag_file(tmp_path, 'tasks = "tasks.csv"\n' + PROFILE, "name,cores\na,1\nb,8\n"))
    check_site_commands(bag, [make_site("s", 2.0, cores=8)])   # 8 cores fit 8
    with pytest.raises(InputError) as err:
        check_site_commands(bag, [make_site("s", 2.0, cores=4), make_site("t", 2.0, cores=6)])
    assert err.value.where == "line 3" and "8 cores" in err.value.problem and "t, 6" in err.value.problem


def test_resized_table_repeats_rows():
    bag = table_bag([("a", 1.0), ("b", 3.0)])
    assert [t.name for t in bag.resized(5).tasks] == ["a", "b", "a.1", "b.1", "a.2"]
    assert bag.resized(5).profile.instructions == pytest.approx((1 + 3 + 1 + 3 + 1) / 5)
    assert [t.name for t in bag.resized(1).tasks] == ["a"]


# ------------------------------------------------------------------ each task's own T̂x
def test_engine_prices_each_task_by_lim():
    """A 2-task bag on one 2 GHz site, κ 1.5: T̂x_i = 1.5 · I_i / 2e9, by hand."""
    site = make_site("s", 2.0, kappa=1.5)
    bag = table_bag([("small", 1e10), ("big", 3e10)])
    eng = Engine(bag, [site], "model")
    acts = eng.handle(BagSubmitted(time=0.0))
    assigned = {a.task: a.tx_r for a in acts if isinstance(a, Decision)}
    assert assigned[0] == pytest.approx(1.5 * 1e10 / 2e9)      # 7.5 s
    assert assigned[1] == pytest.approx(1.5 * 3e10 / 2e9)      # 22.5 s


@pytest.mark.parametrize("order, expected", [("given", [0, 1, 2, 3]), ("largest", [1, 3, 0, 2])])
def test_largest_first_dispatch_order_with_ties(order, expected):
    """One slot: tasks are dispatched in the table's order, or largest first with ties by index."""
    site = make_site("s", 1.0, cores=1)
    bag = table_bag([("a", 1e9), ("b", 4e9), ("c", 1e9), ("d", 4e9)], order=order)
    eng = Engine(bag, [site], "model")
    acts = eng.handle(BagSubmitted(time=0.0))
    pid = next(a.pilot for a in acts if isinstance(a, SubmitPilot))
    seen, t = [], 0.0
    acts = eng.handle(PilotStarted(time=t, pilot=pid))
    while not eng.finished:
        (d,) = [a for a in acts if isinstance(a, DispatchTask)]
        seen.append(d.task)
        t += 1.0
        acts = eng.handle(TaskFinished(time=t, task=d.task, attempt=d.attempt))
    assert seen == expected


def test_simulator_runs_each_task_for_its_true_tx():
    """No wait, one 2-core pilot at clock 2 GHz, IPC 1: each task ends at I_i / 2e9."""
    site = make_site("s", 2.0, cores=2)
    bag = table_bag([("a", 2e10), ("b", 6e10)])
    res = simulate(bag, [site], "model", seed=0)
    ends = sorted(t.attempts[-1].end for t in res.engine.tasks)
    assert ends == pytest.approx([10.0, 30.0])
    assert res.metrics.ttc_wkd == pytest.approx(30.0)


def test_task_cores_equal_to_site_cores_run():
    """A task as wide as the site runs there, one at a time."""
    site = make_site("s", 1.0, cores=8)
    bag = table_bag([("a", 1e9), ("b", 2e9)], cores=8)
    res = simulate(bag, [site], "model", seed=0)
    assert res.metrics.done == 2 and res.metrics.ttc_wkd == pytest.approx(3.0)


def test_oracle_bounds_an_unequal_bag_by_work_and_its_largest_task():
    """Two 1 GHz slots, tasks of 1, 1 and 4 G instructions: work 6 s over 2 slots is 3 s, but
    the largest task alone takes 4 s — the bound is 4 s, and the run (4 s) meets it."""
    site = make_site("s", 1.0, cores=2)
    bag = table_bag([("a", 1e9), ("b", 1e9), ("c", 4e9)], order="largest")
    bound = oracle_bound(bag, [site], 0, 1).ttc
    assert bound == pytest.approx(4.0, rel=1e-6)
    res = simulate(bag, [site], "model", seed=0)
    assert res.metrics.ttc_wkd >= bound - 1e-6
    assert res.metrics.ttc_wkd == pytest.approx(4.0)


def test_oracle_is_a_bound_on_mixed_bags(default_sites):
    """On the thesis sites, a mixed bag: no strategy in either order beats the oracle."""
    tasks = [(f"t{i}", (1 + (i * 7919) % 50) * 1e12) for i in range(40)]
    for order in ("given", "largest"):
        bag = table_bag(tasks, order=order)
        for seed in (0, 1):
            for strategy in ("model+reselect", "auto"):
                res = simulate(bag, default_sites, strategy, seed=seed, record=False)
                counts: dict[str, int] = {}
                for p in res.engine.pilots.values():
                    counts[default_sites[p.site].name] = counts.get(default_sites[p.site].name, 0) + 1
                assert res.metrics.done == 40
                assert res.metrics.ttc_wkd >= oracle_bound(bag, default_sites, seed, counts).ttc - 1e-6


def test_equal_weights_table_runs_as_the_equal_bag(default_sites):
    """A table of equal rows and the equal bag of the same size finish at the same time."""
    eq = Bag("t", "run", 24, 1, Profile(2e13))
    table = table_bag([(f"t{i}", 2e13) for i in range(24)])
    a = simulate(eq, default_sites, "model+reselect", seed=3, record=False)
    b = simulate(table, default_sites, "model+reselect", seed=3, record=False)
    assert b.metrics.ttc_wkd == pytest.approx(a.metrics.ttc_wkd)


def test_stored_bag_keeps_its_table(tmp_path):
    """A live run's stored bag (what --resume rebuilds) keeps every row, its args and the order."""
    from resel.live.stored import bag_from_json
    from resel.store import to_json
    bag = load_bag(bag_file(tmp_path, 'tasks = "tasks.csv"\norder = "largest"\n' + PROFILE,
                            'name,size,args\na,1,"-x \'y z\'"\nb,2,\n'))
    back = bag_from_json(json.loads(to_json(bag)))
    assert back.tasks == bag.tasks and back.order == "largest"
    assert back.command_for(0) == bag.command_for(0) == "gmx mdrun -s a.tpr -nsteps 1 -x 'y z'"


def test_size_format_spec_must_fit_every_row(tmp_path):
    """{size:06d} on a size of 2.5 fails when the bag is read, naming the row, not at dispatch."""
    path = tmp_path / "bag.toml"
    (tmp_path / "tasks.csv").write_text("name,size\na,12\nb,2.5\n")
    path.write_text('[bag]\nname = "s"\ncommand = "run -n {size:06d}"\ntasks = "tasks.csv"\n'
                    '[bag.profile]\ninstructions = 1e9\n')
    with pytest.raises(InputError) as err:
        load_bag(path)
    assert err.value.where == "line 3" and "size 2.5" in err.value.problem
    (tmp_path / "tasks.csv").write_text("name,size\na,12\n")
    assert load_bag(path).command_for(0) == "run -n 000012"


# ------------------------------------------------------------------ the oracle, on random tables
STRATEGIES = ["model", "model+reselect", "queue+reselect", "auto", "race", "earliest", "failover", "rebroker"]


def _check_bound(bag, sites, seed, strategies):
    results = [simulate(bag, sites, s, seed=seed, record=False) for s in strategies]
    counts: dict[str, int] = {}
    for r in results:
        mine: dict[str, int] = {}
        for p in r.engine.pilots.values():
            mine[sites[p.site].name] = mine.get(sites[p.site].name, 0) + 1
        for k, v in mine.items():
            counts[k] = max(counts.get(k, 1), v)
    bound = oracle_bound(bag, sites, seed, counts).ttc
    for s, r in zip(strategies, results):
        assert r.metrics.done == bag.count
        assert r.metrics.ttc_wkd >= bound - 1e-6 * bound, (s, seed, r.metrics.ttc_wkd, bound)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), order=st.sampled_from(["given", "largest"]),
       sizes=st.lists(st.floats(0.0, 1e6), min_size=1, max_size=60))
def test_no_strategy_beats_the_oracle_on_unequal_bags(seed, order, sizes):
    """Random tables (sizes 0–10⁶ steps on an affine law) on the thesis sites, either order."""
    bag = table_bag([(f"t{i}", 1e9 + 2e8 * n) for i, n in enumerate(sizes)], order=order)
    _check_bound(bag, resel.default_sites(), seed, STRATEGIES)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.floats(1e4, 1e6), min_size=16, max_size=48))
def test_no_strategy_beats_the_oracle_on_unequal_bags_on_trace_queues(seed, sizes):
    """The same on queues replaying the HPC2N trace with a pool (the bound with the backlog)."""
    sites = resel.load_sites(ROOT / "examples" / "sites-traces.toml")
    bag = table_bag([(f"t{i}", 1e9 + 2e8 * n) for i, n in enumerate(sizes)], order="largest")
    _check_bound(bag, sites, seed, ["model", "model+reselect", "queue+reselect", "auto", "earliest"])


@pytest.mark.parametrize("order, expected", [("given", 0), ("largest", 1)])
def test_reselection_takes_the_head_of_the_origins_queue(order, expected):
    """The pool re-selects the head of the origin's waiting tasks: the table's first, or (largest
    first) the largest; its window is that task's, w_i · (T̂x(pool) − T̂x(hpc)), by hand."""
    hpc = make_site("hpc", 2.0)
    pool = make_site("pool", 1.0, mode="per-task", target=True)
    bag = table_bag([("mid", 2e9), ("big", 4e9), ("small", 1e9)], order=order)
    eng = Engine(bag, [hpc, pool], "model+reselect")
    acts = eng.handle(BagSubmitted(time=0.0))
    assert {t.origin for t in eng.tasks} == {0}
    pool_pilot = next(a.pilot for a in acts if isinstance(a, SubmitPilot) and a.site == "pool")
    acts = eng.handle(PilotStarted(time=1.0, pilot=pool_pilot))
    (d,) = [a for a in acts if isinstance(a, DispatchTask)]
    assert d.task == expected
    (moved,) = [a for a in acts if isinstance(a, Decision) and a.task == expected]
    instr = bag.tasks[expected].instructions
    assert moved.window == pytest.approx(instr / 1e9 - instr / 2e9)


def test_order_auto_is_largest_first_unless_a_site_is_a_pool():
    """The default order: largest first on batch sites only; the table's order with a pool."""
    bag = table_bag([("a", 1e9), ("b", 2e9)], order="auto")
    assert Engine(bag, [make_site("h", 2.0), make_site("i", 1.0)], "model").largest_first
    assert not Engine(bag, [make_site("h", 2.0), make_site("p", 1.0, mode="per-task")], "model").largest_first
    assert not Engine(Bag("e", "x", 2, 1, Profile(1e9)), [make_site("h", 2.0)], "model").largest_first


def test_each_task_has_inputs_of_its_own(tmp_path):
    """inputs = ["systems/{task}.tpr"]: each row's own file (what a live run stages for it)."""
    from resel import task_data
    (tmp_path / "systems").mkdir()
    for name in ("lyso", "membrane"):
        (tmp_path / "systems" / f"{name}.tpr").write_bytes(name.encode())
    path = bag_file(tmp_path, 'tasks = "tasks.csv"\ninputs = ["systems/{task}.tpr"]\n' + PROFILE,
                    "name,size\nlyso,10\nmembrane,20\n")
    m = task_data.build(load_bag(path))
    assert [[(f.name, f.size) for f in t] for t in m.tasks] == [[("lyso.tpr", 4)], [("membrane.tpr", 8)]]


def test_simulate_runs_a_table_bag_at_its_own_size(tmp_path):
    """`resel simulate BAG` of a table bag runs its rows (not 256 and 1,024 of them) unless --sizes
    says otherwise; a row wider than every site is the usual one-line error."""
    from click.testing import CliRunner
    from resel.cli import cli
    path = bag_file(tmp_path, 'tasks = "tasks.csv"\n' + PROFILE, "name,size\na,10\nb,2000\nc,0\n")
    sites = str(resel.default_sites_path())
    run = CliRunner().invoke(cli, ["simulate", path, "--sites", sites, "--strategies", "model", "--repeat", "1",
                                   "--no-store", "--db", str(tmp_path / "r.db"), "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["sizes"] == [3]
    (tmp_path / "tasks.csv").write_text("name,cores\na,1\nwide,100000\n")
    run = CliRunner().invoke(cli, ["simulate", path, "--sites", sites, "--no-store", "--db", str(tmp_path / "r.db")])
    assert run.exit_code == 1 and "line 3" in run.output and "100000 cores" in run.output
