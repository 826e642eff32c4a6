#!/usr/bin/env bash
# The Debian sid part of resel's live testbed (run as root; scripts/testbed.sh calls it):
# Slurm 26.05 cluster "tbd" with slurmrestd and an HTCondor 25 pool behind an access point's
# sshd, in a Debian sid root cached in $RESEL_TB_CACHE/sid. The same script as the Debian 13
# part, for another suite: scripts/testbed-trixie.sh says what it builds and how; the sid
# part's ports and names are in its table of suites.
#
#   scripts/testbed-sid.sh up|down|status|restart-schedd
exec env RESEL_TB_SUITE=sid bash "$(dirname "${BASH_SOURCE[0]}")/testbed-trixie.sh" "$@"
