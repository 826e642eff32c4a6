"""The live side: resel driving real sites.

``coordinator`` records each event and its actions before acting and resumes a run from them,
through ``journal`` (an event or action as its row of the store and back, marked done by that
row); ``sites`` runs each site's polls and actions on a thread of its own, ``errors`` tells a
transient failure from a lasting one, ``notes`` keeps what the coordinator noticed per site;
``stored`` and ``view`` read a live run back for ``resel status`` without the site clients;
the program shipped to the sites and run inside every pilot is not here but in
:mod:`resel.shipped` (it imports nothing of resel); ``plan``, ``site_limits`` and
``site_probe`` ask the live sites before a run (``resel plan``, the user's limits,
``resel sites probe``; the plan itself is computed by :mod:`resel.planning`, as for simulated sites).

Nothing is imported here: ``resel status`` loads ``stored``, ``view`` and ``journal`` without the
coordinator (tests/test_imports.py), and a pilot site loads the agent's text without either.
"""
