#!/usr/bin/env bash
# The ansible-core matrix: for each release the collection claims (meta/runtime.yml
# requires_ansible ">=2.18.0") that runs on this Python (3.11; 2.20+ needs 3.12 on the
# controller), a virtualenv .venv-ansible-X.Y with that ansible-core, then
#   pytest tests/unit, ansible-test units, ansible-test sanity.
#   scripts/matrix.sh [X.Y ...]        (default: 2.18 2.19; HY3_MATRIX_SKIP_SANITY=X.Y skips one sanity run)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(2.18 2.19)

stamp() { printf '%s matrix %s: %s\n' "$(date -u +%H:%M:%S)" "$1" "$2"; }

for version in "${VERSIONS[@]}"; do
  venv=.venv-ansible-$version
  scripts/tool-venv.sh "$venv" "ansible-core~=$version.0" pytest -r tests/unit/requirements.txt
  about=$("$venv/bin/ansible" --version)
  stamp "$version" "${about%%$'\n'*}"
  stamp "$version" "pytest tests/unit"
  "$venv/bin/python" -m pytest -q tests/unit
  stamp "$version" "ansible-test units"
  scripts/ansible-test.sh --venv-dir "$venv" units --venv --python 3.11
  if [ "${HY3_MATRIX_SKIP_SANITY:-}" != "$version" ]; then
    stamp "$version" "ansible-test sanity"
    scripts/sanity.sh --venv-dir "$venv"
  fi
  stamp "$version" "passed"
done
