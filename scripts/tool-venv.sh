#!/usr/bin/env bash
# A tool's own virtualenv: create DIR from Python 3.11 (else python3) when it is missing, then
# pip-install the requirements given, quietly.   scripts/tool-venv.sh DIR PIP-INSTALL-ARGS...
set -euo pipefail
DIR=$1
shift
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x "$DIR/bin/python" ] || "$PYTHON" -m venv "$DIR"
"$DIR/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
  | { grep -v "^WARNING: Location .* is ignored" || true; }
