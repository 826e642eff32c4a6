"""Discrete-event simulation of batch queues: one event core and one batch queue.

``resel.sim.core`` is the clock and the event heap every simulation in resel runs on (the
bag simulator, the trace replay, the wait-bound evaluation, the twin, the grid);
``resel.sim.queue`` is one site's batch queue on it; ``resel.sim.closed`` runs a whole trace
under FCFS or EASY in one loop (the replay's kernels). The batch policies themselves are in
:mod:`resel.backends.batch`.
"""
