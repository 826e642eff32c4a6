"""The simulated backend: the engine driven in virtual time instead of on real sites.

:mod:`.simulation` runs a bag to the end on the event core, :mod:`.queuesite` is a site whose
queue replays a workload trace under a batch policy, :mod:`.estimates` answers start-time
questions as a live site's probes would. Nothing is imported here: the package is only a folder.
"""
