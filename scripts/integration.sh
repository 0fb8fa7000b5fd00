#!/usr/bin/env bash
# ansible-test integration targets (tests/integration/targets/<module>/) in a virtualenv made by
# ansible-test from tests/integration/requirements.txt, NVML faked through the environment:
#   scripts/integration.sh [--venv-dir DIR] [TARGET ...]      (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_ARGS=()
if [ "${1:-}" = "--venv-dir" ]; then VENV_ARGS=(--venv-dir "$2"); shift 2; fi
exec scripts/ansible-test.sh "${VENV_ARGS[@]}" integration --venv --python 3.11 --color no "$@"
