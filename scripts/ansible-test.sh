#!/usr/bin/env bash
# Run ansible-test from a virtualenv on a copy of the committed-or-staged (and untracked, not
# ignored) tree laid out as ansible_collections/hy3/fleet, the layout ansible-test requires.
#   scripts/ansible-test.sh [--venv-dir DIR] COMMAND [ARGS...]     (DIR defaults to .venv)
# ansible-test's pip bootstrap script lives on a host that is not reachable here; a stand-in
# (scripts/ansible_test_get_pip.py) bootstraps pip from ensurepip instead. Each ansible-core
# release pins its own pip version, so the stand-in is placed under that version's cache name.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
if [ "${1:-}" = "--venv-dir" ]; then VENV=$2; shift 2; fi
PIP_VERSION=$("$VENV/bin/python" - <<'PY'
import os
import re

import ansible_test

path = os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")
with open(path) as handle:
    print(re.search(r"pip='([\d.]+)'", handle.read()).group(1))
PY
)
CACHE="$HOME/.ansible/test/cache/get_pip_${PIP_VERSION//./_}.py"
[ -f "$CACHE" ] || { mkdir -p "$(dirname "$CACHE")"; cp scripts/ansible_test_get_pip.py "$CACHE"; }
ANSIBLE_TEST=$(cd "$VENV/bin" && pwd)/ansible-test
WORK=$(mktemp -d)
# ansible-test's results (junit, coverage, integration logs) come back to tests/output/ (ignored).
OUTPUT=$PWD/tests/output
copy_back() {
  rm -rf "$OUTPUT"
  cp -r "$WORK/ansible_collections/hy3/fleet/tests/output" "$OUTPUT" 2>/dev/null || true
  rm -rf "$WORK"
}
trap copy_back EXIT
DEST="$WORK/ansible_collections/hy3/fleet"
mkdir -p "$DEST"
git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} "$DEST"/ 2>/dev/null || true
cd "$DEST"
git init -q && git add -A && git -c user.email=ci@localhost -c user.name=ci commit -qm ansible-test
"$ANSIBLE_TEST" "$@"
