#!/usr/bin/env bash
# ansible-test sanity (every test, shellcheck included) on the collection, with the ansible-core of
# a virtualenv (default .venv):  scripts/sanity.sh [--venv-dir DIR] [ansible-test sanity options]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_ARGS=()
if [ "${1:-}" = "--venv-dir" ]; then VENV_ARGS=(--venv-dir "$2"); shift 2; fi
# The shellcheck sanity test is skipped, not failed, when shellcheck is missing: install it.
if ! command -v shellcheck >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; }
fi
exec scripts/ansible-test.sh "${VENV_ARGS[@]}" sanity --venv --python 3.11 "$@"
