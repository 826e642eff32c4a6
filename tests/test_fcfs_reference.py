"""resel's FCFS against an independent implementation, job by job, on a full real trace.

tests/data/accasim-fifo-hpc2n.json holds the start time of every job of hpc2n.swf under
AccaSim 1.1.3's FIFO scheduler (plain FCFS), recorded with benchmarks/accasim_runner.py (the
file names the command). AccaSim itself is not needed to run this test.
"""

import json
from pathlib import Path

from resel.sim.replay import replay
from resel.sim.swf import read_swf

DATA = Path(__file__).parent / "data" / "accasim-fifo-hpc2n.json"
TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "swf" / "hpc2n.swf"


def test_fcfs_matches_accasim_fifo_on_every_hpc2n_job():
    """Every one of the 3,145 jobs starts at the same second as under AccaSim's FIFO."""
    reference = json.loads(DATA.read_text())["starts"]
    ours = {}
    replay(read_swf(TRACE), "fcfs", 240, on_done=lambda job: ours.__setitem__(str(job.id), job.submit + job.wait))
    assert len(ours) == len(reference) == 3145
    mismatches = [k for k in reference if ours.get(k) != reference[k]]
    assert mismatches == []


def test_the_fcfs_kernel_matches_accasim_fifo_on_every_hpc2n_job():
    """The schedule that ``replay(read_swf(trace), "fcfs", ...)`` times — the closed-queue kernel
    of resel/sim/closed.py — starts every job at the same second as AccaSim's FIFO too."""
    from resel.sim.replay import kernel_schedule

    reference = json.loads(DATA.read_text())["starts"]
    ours = {str(k): v for k, v in kernel_schedule(read_swf(TRACE), "fcfs", 240).items()}
    assert len(ours) == len(reference) == 3145
    assert [k for k in reference if ours.get(k) != reference[k]] == []
