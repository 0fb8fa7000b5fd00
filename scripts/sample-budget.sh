#!/usr/bin/env bash
# Set up, then budget Hy3 on the sample inventory of three fake GPU hosts (nothing is changed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/ansible-playbook playbooks/budget_report.yml -i examples/inventory "$@"
