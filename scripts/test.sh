#!/usr/bin/env bash
# Install everything the tests need and run them: `./scripts/test.sh [pytest args]`.
#
# - system packages: only python3-venv, and only when this Python cannot make a venv
#   (Debian/Ubuntu system Python); the live-backend issues will add slurm, munge, sshd here
#   together with starting and stopping those services;
# - Python packages: resel with its [test] extra, in ./.venv (never the system Python).
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
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
