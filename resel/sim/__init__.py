"""The simulation side of resel (issue 15 item 3); this ``__init__`` imports nothing.

``core`` is the clock and the event heap every simulation in resel runs on (the bag simulator,
the trace replay, the wait-bound evaluation, the twin, the grid); ``queue`` is one site's batch
queue on it and ``policies`` the batch policies it runs (FCFS, EASY, conservative); ``closed``
runs a whole trace under FCFS or EASY in one loop (the replay's kernels). On them: the
simulator itself (``simulation``: the engine in virtual time; ``queuesite``, a site whose queue
replays a trace; ``estimates``, its start estimates), SWF traces (``swf``) and their replay on one site (``replay``, ``jobstats``), clusters behind a
meta-scheduler (``grid``, ``scenarios``), the strategy experiments (``experiment``) and their
lower bound (``oracle``), ``resel plan`` on simulated sites (``plan``), and the evaluations of
the predictions (``wait_eval``, ``finish_eval``, ``hit_eval``, ``runtime_eval``). A simulated
site is the simulator, not a scheduler client: it lives here, not in backends/. Importing nothing here keeps
``import resel.sim.swf`` (``resel replay``) from paying for the simulator, the store or rich.
"""
