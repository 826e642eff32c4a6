"""PBS (PBS Pro/OpenPBS and Torque): the client (:mod:`.cli`) and its parsers (:mod:`.formats`).

Nothing is imported here, so reading recorded replies loads only the parsers.
"""
