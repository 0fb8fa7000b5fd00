#!/usr/bin/env bash
# Create .venv (Python 3.11+) with ansible-core and the test tools, and make the checkout
# importable as the collection hy3.fleet through .collections/ansible_collections/hy3/fleet.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/test.txt 2>&1 \
  | { grep -v "^WARNING: Location .* is ignored" || true; }
mkdir -p .collections/ansible_collections/hy3
ln -sfn ../../.. .collections/ansible_collections/hy3/fleet
