"""HTCondor: the clients (:mod:`.client`: the CLI over a transport and the htcondor2 bindings)
and their parsers (:mod:`.formats`, on the ClassAd library classad2).

Nothing is imported here, so reading recorded replies loads neither htcondor2 nor a transport.
"""
