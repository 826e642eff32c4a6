#!/usr/bin/env bash
# Make the virtual environment DIR (default .venv), or repair one that cannot run pip:
#
#   scripts/venv.sh [DIR]        (the Python is $PYTHON, default python3)
#
# Why repair: on a Debian or Ubuntu without python3-venv, `python3 -m venv .venv` fails half-way
# and leaves .venv/bin/python without pip. A new user who tries the README's main-job command
# before the test command has such a .venv; the test command installs python3-venv and then
# must not take that .venv as made. `python3 -m venv` run again over it fills in what is missing.
set -euo pipefail
PY=${PYTHON:-python3}
DIR=${1:-.venv}
if ! "$DIR/bin/python" -m pip --version >/dev/null 2>&1; then
    "$PY" -m venv "$DIR"
fi
