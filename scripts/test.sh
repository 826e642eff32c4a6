#!/usr/bin/env bash
# Install everything the tests need and run them: `./scripts/test.sh [pytest args]`.
#
# - system packages: python3-venv, only when this Python cannot make a venv (Debian/Ubuntu
#   system Python); slurm, slurmrestd, munge, the Torque wrappers and openssh-server come with
#   the live testbed below (scripts/testbed.sh installs what is missing);
# - Python packages: resel with its [test] and [htcondor] extras (the HTCondor tests parse
#   ClassAds with the real classad2), in ./.venv (never the system Python);
# - the live testbed (two Slurm clusters, slurmrestd, an sshd; needs root): brought up before
#   pytest and taken down when this script exits, however it exits. A testbed that was
#   already up when we started is someone else's: it is used and left running.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c "import ensurepip" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    else
        echo "scripts/test.sh: $PY cannot create a virtual environment; install python3-venv" >&2
        exit 1
    fi
fi
# the probe tests measure real programs: perf (counters, or task-clock on a VM), valgrind
# (callgrind instruction counts) and GROMACS (gmx, a real MD run and its md.log)
missing=()
command -v perf >/dev/null || missing+=(linux-perf)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v gmx >/dev/null || missing+=(gromacs)
command -v chromium >/dev/null || missing+=(chromium)   # the HTML report is opened in a real headless browser
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "scripts/test.sh: install ${missing[*]} (the probe tests run them)" >&2
        exit 1
    fi
fi
PYTHON=$PY bash scripts/venv.sh .venv     # made, or repaired if an earlier try left it without pip
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test,htcondor]"

TB_ENV=${RESEL_TB:-/tmp/resel-testbed}/testbed.env
if [ ! -f "$TB_ENV" ]; then
    trap 'bash scripts/testbed.sh down || echo "scripts/test.sh: testbed down failed" >&2' EXIT
fi
bash scripts/testbed.sh up
# Not exec: the EXIT trap must run after pytest.
.venv/bin/python -m pytest -p no:cacheprovider --durations=30 "$@"
