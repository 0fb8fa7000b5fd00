#!/usr/bin/env bash
# Set up, then run every test: unit tests (fake NVML, budget math) and the playbook over the sample inventory.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m pytest -q tests "$@"
