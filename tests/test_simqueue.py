"""Simulated sites whose queues replay a trace: pilots wait behind other users' jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

import resel
from resel.config import load_sites
from resel.domain import Bag, Clock, PilotPolicy, Profile, QueueModel, Site
from resel.errors import InputError

REPO = Path(__file__).resolve().parent.parent


def trace(tmp_path: Path, lines: list[str]) -> str:
    """An SWF file of (id submit run procs req_time) jobs, -1 elsewhere."""
    path = tmp_path / "load.swf"
    rows = []
    for line in lines:
        i, submit, run, procs, req = line.split()
        rows.append(f"{i} {submit} -1 {run} {procs} -1 -1 {procs} {req} -1 1 1 1 -1 -1 -1 -1 -1")
    path.write_text("; MaxProcs: 4\n" + "\n".join(rows) + "\n")
    return str(path)


def queue_site(name: str, path: str, policy: str = "fcfs", offset: float = 100.0, clock: float = 1.0) -> Site:
    return Site(name, "simulated", 4, Clock(clock, clock), pilot=PilotPolicy("single", walltime=10_000),
                reselect_target=False, queue=QueueModel(policy, path, offset))


def bag(count: int, instructions: float = 1e11) -> Bag:
    return Bag("t", "true", count, 1, Profile(instructions))


def test_pilot_waits_behind_the_background_job(tmp_path):
    """A 4-core job started at trace time 50 (= -50 here) for 1000 s: the pilot starts at 950."""
    path = trace(tmp_path, ["1 50 1000 4 1000"])
    result = resel.simulate(bag(2), [queue_site("q", path)], "model")
    assert [p.start for p in result.pilots] == [950.0]
    assert result.metrics.done == 2
    assert result.metrics.ttc_wkd == pytest.approx(950 + 100)   # 1e11 instructions at 1 GHz, IPC 1


def test_background_job_after_the_pilot_waits_for_it_under_fcfs(tmp_path):
    """FCFS: a background job submitted after the pilot (trace 150 = +50) starts when it ends."""
    path = trace(tmp_path, ["1 50 1000 4 1000", "2 150 10 4 10"])
    result = resel.simulate(bag(1), [queue_site("q", path)], "model")
    assert result.pilots[0].start == 950.0
    queue = result.engine  # the run finished: the pilot was released when the bag was done
    assert queue.finished


def test_queue_aware_avoids_the_loaded_queue(tmp_path):
    """Two equal sites, one blocked for 1000 s: queue picks the free one, model the first."""
    busy = trace(tmp_path, ["1 50 1000 4 1000"])
    free_path = tmp_path / "free.swf"
    free_path.write_text("; MaxProcs: 4\n1 0 -1 10 1 -1 -1 1 10 -1 1 1 1 -1 -1 -1 -1 -1\n")
    sites = [queue_site("busy", busy), queue_site("free", str(free_path))]
    model = resel.simulate(bag(2), sites, "model")
    queue = resel.simulate(bag(2), sites, "queue")
    assert model.metrics.per_site == {"busy": 2}
    assert queue.metrics.per_site == {"free": 2}
    assert queue.metrics.ttc_wkd < model.metrics.ttc_wkd
    assert queue.events[0][2].wait_estimates == {"busy": 950.0, "free": 0.0}


def test_every_task_completes_once_on_the_trace_example():
    """The shipped example (two hpc2n-loaded queues and a pool) finishes every task once."""
    sites = load_sites(REPO / "examples" / "sites-traces.toml")
    for strategy in ("random", "queue", "queue+reselect", "reselect"):
        result = resel.simulate(resel.default_bag().resized(40), sites, strategy, seed=2)
        assert result.metrics.done == 40
        assert all(sum(a.outcome == "done" for a in t.attempts) == 1 for t in result.engine.tasks)
        assert result.audit.bound_violations == 0


def test_missing_queue_trace_is_an_input_error(tmp_path):
    """A queue whose trace file does not exist names the key and the file."""
    sites = tmp_path / "sites.toml"
    sites.write_text('[[site]]\nname = "q"\nkind = "simulated"\ncores = 4\nclock = { base = 1.0 }\n'
                     'queue = { policy = "easy", trace = "nowhere.swf" }\n')
    with pytest.raises(InputError, match=r"site\[0\]\.queue\.trace.*nowhere\.swf"):
        load_sites(sites)


def test_wait_and_queue_together_is_an_input_error(tmp_path):
    """A simulated site takes a wait distribution or a queue, not both."""
    (tmp_path / "t.swf").write_text("; MaxProcs: 4\n")
    sites = tmp_path / "sites.toml"
    sites.write_text('[[site]]\nname = "q"\nkind = "simulated"\ncores = 4\nclock = { base = 1.0 }\n'
                     'wait = 60\nqueue = { policy = "easy", trace = "t.swf" }\n')
    with pytest.raises(InputError, match="exactly one of 'wait' and 'queue'"):
        load_sites(sites)
