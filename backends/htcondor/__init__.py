"""HTCondor: the clients (:mod:`.client`: the CLI over a transport and the htcondor2 bindings)
and their parsers (:mod:`.formats`).

Nothing is imported here, so reading recorded replies loads neither the bindings nor a transport.
"""
