#!/usr/bin/env bash
# ruff over the whole tree (rules in ruff.toml), from its own virtualenv .venv-lint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/tool-venv.sh .venv-lint "ruff==0.17.5"
exec .venv-lint/bin/ruff check --no-cache "$@" .
