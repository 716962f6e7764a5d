#!/usr/bin/env bash
# make's set-up of the project's virtual environment: `tools/venv.sh EXTRAS` (e.g. `sim` for `make demo`,
# `sim,exec,test,dev` for `make test`), or `tools/venv.sh --check-only` for the first two steps alone.
#
#   1. PYTHON (default python3) must be 3.11 or newer: said in one line, before anything is created.
#   2. A VENV (default .venv) made by another Python (an older make run, another PYTHON=) is rebuilt, so a
#      first run with the wrong Python does not leave a venv that every later run reuses and fails in.
#   3. edgeagent is installed in editable mode with EXTRAS, at the versions of constraints.txt, once per
#      content of pyproject.toml + constraints.txt (a stamp in the venv remembers which).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${1:?usage: tools/venv.sh EXTRAS | --check-only}

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

want=$(version_of "$PYTHON") || { echo "make: '$PYTHON' does not run; edgeagent needs Python 3.11 or newer (make PYTHON=python3.11 ...)" >&2; exit 1; }
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "make: edgeagent needs Python 3.11 or newer; '$PYTHON' is Python $want (try: make PYTHON=python3.11 ...)" >&2
    exit 1
fi
if [[ -e $VENV ]]; then
    have=$(version_of "$VENV/bin/python") || have="a broken interpreter"
    if [[ $have != "$want" ]]; then
        echo "make: $VENV has Python $have, not $PYTHON's $want: rebuilding it"
        rm -rf "$VENV"
    fi
fi
[[ $EXTRAS == --check-only ]] && exit 0

stamp="$VENV/.installed-$EXTRAS"
digest=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
[[ -f $stamp && $(cat "$stamp") == "$digest" ]] && exit 0

if [[ ! -x $VENV/bin/python ]]; then
    echo "== creating $VENV with $PYTHON (Python $want)"
    "$PYTHON" -m venv "$VENV"
fi
# The first run downloads the dependencies from PyPI (up to a minute): pip lists each package as it comes.
echo "== installing edgeagent[$EXTRAS] into $VENV at the versions of constraints.txt"
# With pipefail the pipe fails exactly when pip does (grep reads to the end, and finding nothing is fine).
if ! "$VENV/bin/python" -m pip install --progress-bar off -c constraints.txt -e ".[$EXTRAS]" 2>&1 \
        | { grep --line-buffered -E '^(Collecting|Successfully|ERROR)' || true; }; then
    echo "make: the install into $VENV failed; see pip's messages above" >&2
    exit 1
fi
echo "$digest" > "$stamp"
