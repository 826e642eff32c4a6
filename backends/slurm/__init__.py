"""Slurm: three clients with the same methods over one set of parsers.

:mod:`.cli` runs sbatch/squeue/sinfo/sacct over a transport, :mod:`.rest` speaks to slurmrestd,
:mod:`.pyslurm` calls the pyslurm bindings; :mod:`.formats` turns every reply into resel's types.
Nothing is imported here, so ``import resel.backends.slurm.formats`` costs only the parsers.
"""
