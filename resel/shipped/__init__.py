"""The programs resel ships to the sites: the pilot agent (``agent``) and, on an HTCondor slot,
the chirp wrapper beside it (``chirp_sync``).

Each is one file of the standard library only, run by the sites' own Python (3.6 and later):
they import nothing of resel, so whatever ships them — the pilot site (resel/backends/pilotsite.py),
the HTCondor client — reads their text and protocol version without loading anything else
(tests/test_layers.py keeps them on the lowest floor, tests/test_site_scripts.py to Python 3.6).
Nothing is imported here.
"""
