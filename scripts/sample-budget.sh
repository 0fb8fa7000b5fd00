#!/usr/bin/env bash
# Set up, then budget Hy3 on the sample inventory of three fake GPU hosts (nothing is changed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# Stand-in Hy3 checkpoints (sparse files with real headers), written once outside the checkout
# ($HY3_SAMPLE_WEIGHTS or ~/.cache/hy3-fleet/sample-weights); see examples/weights/README.md.
.venv/bin/python scripts/make_sample_checkpoints.py
exec .venv/bin/ansible-playbook playbooks/budget_report.yml -i examples/inventory "$@"
