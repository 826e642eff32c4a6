"""PBSCLI.queue_snapshot (Torque dialect) against real commands: Debian's slurm-wlm-torque
wrappers over the testbed's cluster ``tba`` (one node, 8 CPUs, queues debug (4 h) and short
(10 min), Slurm 22.05 with ``sched/backfill``).

The scene (under 30 s): a 3-core filler with a 1-minute limit runs, a 1-core job is held
(``qsub -h``: the wrappers print it as Q with priority 0). The snapshot lists the filler with
its limit and leaves the held job out, saying so; the policy is Slurm's own, asked through
``scontrol``, and noted as assumed. Every job is cancelled in a ``finally``.
"""

from __future__ import annotations

import os
import subprocess

from live_helpers import wait_for
from resel.models.twin import twin_start
from test_pbs_live import SLEEP, cli_a, idle, tag, wd  # noqa: F401  (wd: a fixture)


def _held_job(testbed, wd: str) -> str:
    """A 1-core job submitted on hold with the wrappers' own qsub — it stands for another user's:
    resel refuses -h for its own pilots (a held pilot never starts)."""
    script = os.path.join(wd, "held.sh")
    with open(script, "w") as f:
        f.write(SLEEP.format(s=1))
    proc = subprocess.run(["qsub", "-h", "-q", "debug", "-l", "nodes=1:ppn=1,walltime=00:01:00", "-N", tag(), script],
                          env={**os.environ, "SLURM_CONF": testbed.slurm_conf_a}, cwd=wd, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip(), proc
    return proc.stdout.strip()


def test_snapshot_lists_a_running_filler_with_its_limit(testbed, wd):  # noqa: F811
    cli = cli_a(testbed, queue="debug")                     # dialect="auto": the wrappers are found
    filler = held = None
    try:
        idle(cli, 3)
        filler = cli.submit(SLEEP.format(s=20), name=tag(), cores=3, walltime=60, workdir=wd)
        held = _held_job(testbed, wd)
        assert wait_for(lambda: (j := cli.jobs([filler]).get(filler)) and j.state == "running",
                        timeout=15, every=0.5), cli.jobs([filler])
        snap = cli.queue_snapshot()
        assert cli.flavour == "slurm-torque"
        assert (snap.site, snap.total_cores, snap.default_limit, snap.policy) == ("debug", 8, 4 * 3600.0,
                                                                                "conservative")
        mine = [j for j in snap.running if j.job_id == filler]
        assert [(j.cores, j.time_limit) for j in mine] == [(3, 60.0)], snap
        assert 0 <= mine[0].elapsed <= 20, mine
        assert held not in {j.job_id for j in (*snap.running, *snap.pending)}, snap
        notes = "\n".join(snap.notes)
        assert "policy assumed" in notes and "sched/backfill" in notes
        assert "held (priority 0 under Slurm's wrappers)" in notes, notes
        # an 8-core pilot must wait for the filler's limit (the twin assumes every job runs it)
        est = twin_start(snap, 8, 60)
        assert est.wait >= 60 - mine[0].elapsed - 1, est
        # no queue configured: the wrappers name no default queue, so the whole cluster
        whole = cli_a(testbed).queue_snapshot()
        assert whole.site == "(all queues)" and whole.total_cores == 8
        assert filler in {j.job_id for j in whole.running}
    finally:
        for jid in (filler, held):
            if jid:
                cli.cancel([jid])
