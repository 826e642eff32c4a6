"""Sweeps in parallel (issue 17): local processes give the serial results, in the serial order.

Real parts: the simulator and `resel simulate` as a user runs them; the processes are real
(ProcessPoolExecutor on this machine's cores).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import resel
from resel.cli import cli
from resel.sim import experiment as resel_experiment
from resel.sim.experiment import run_experiment

STRATEGIES = ["model+reselect", "reselect", "race", "failover", "rebroker"]


def _digest(exp) -> list:
    return [(c.strategy, c.size, [(r.metrics, r.audit) for r in c.runs]) for c in exp.cells.values()]


@pytest.fixture(params=[0.0, 0.05])
def serial_first(request, monkeypatch):
    """Local sweeps run their first SERIAL_FIRST_S seconds in this process: 0 puts every run in
    the worker processes, 0.05 s some here and the rest there (both must give the serial order)."""
    monkeypatch.setattr(resel_experiment, "SERIAL_FIRST_S", request.param)
    return request.param


def test_workers_give_the_serial_results_in_the_serial_order(serial_first):
    bag, sites = resel.default_bag(), resel.default_sites()
    seen = {1: [], 2: []}
    exps = {}
    for workers in (1, 2):
        exps[workers] = run_experiment(bag, sites, STRATEGIES, [16, 64], repeat=3, seed=7, workers=workers,
                                       on_run=lambda r, w=workers: seen[w].append((r.strategy, r.bag.count, r.seed,
                                                                                    len(r.decisions))))
    assert _digest(exps[1]) == _digest(exps[2])
    assert seen[1] == seen[2] and len(seen[1]) == len(STRATEGIES) * 2 * 3


def test_simulate_cli_workers_json_identical(tmp_path, serial_first):
    runner = CliRunner()
    docs = []
    for workers in ("1", "2"):
        res = runner.invoke(cli, ["simulate", "--strategies", "model,race,earliest", "--sizes", "16,32",
                                  "--repeat", "2", "--no-store", "--json", "--workers", workers])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.output)
        docs.append(doc["results"])
    assert docs[0] == docs[1]


def test_simulate_cli_rejects_bad_workers():
    res = CliRunner().invoke(cli, ["simulate", "--workers", "0", "--no-store"])
    assert res.exit_code == 2 and "--workers" in res.output


def test_dask_cluster_gives_the_serial_results():
    """A real Dask scheduler with two worker processes on this machine, as `--dask` reaches one
    (over tcp://, which needs --dask-insecure: tests/test_dask_security.py has the TLS ones)."""
    distributed = __import__("pytest").importorskip("distributed")
    bag, sites = resel.default_bag(), resel.default_sites()
    serial = run_experiment(bag, sites, ["model+reselect", "race"], [16], repeat=3, seed=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        res = CliRunner().invoke(cli, ["simulate", "--strategies", "model+reselect,race", "--sizes", "16",
                                       "--repeat", "3", "--seed", "2", "--no-store", "--json",
                                       "--dask", lc.scheduler_address, "--dask-insecure"])
        assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)          # stderr has the --dask-insecure warning
    assert doc["results"] == [c.as_dict() for c in serial.cells.values()]


def test_dask_unreachable_is_one_clear_error():
    __import__("pytest").importorskip("distributed")
    import dask
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):   # Dask's own setting, not 30 s
        res = CliRunner().invoke(cli, ["simulate", "--sizes", "4", "--repeat", "1", "--no-store",
                                       "--dask", "tcp://127.0.0.1:1", "--dask-insecure"])
    assert res.exit_code == 1
    assert "cannot reach the Dask scheduler" in res.output and "Traceback" not in res.output


def test_a_short_sweep_stays_in_this_process(monkeypatch):
    """Under SERIAL_FIRST_S no worker process is started (they would cost more than they save)."""
    import concurrent.futures

    def refuse(*a, **kw):
        raise AssertionError("a process pool was started for a short sweep")
    monkeypatch.setattr(resel_experiment, "SERIAL_FIRST_S", 60.0)
    monkeypatch.setattr(resel_experiment, "ProcessPoolExecutor", refuse)
    exp = run_experiment(resel.default_bag(), resel.default_sites(), ["model"], [16], repeat=3, workers=2)
    assert len(exp.cells[("model", 16)].runs) == 3
    assert concurrent.futures.ProcessPoolExecutor is not refuse
