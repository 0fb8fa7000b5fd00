#!/usr/bin/env bash
# The test fleet: N Debian hosts booted with systemd (systemd-nspawn) on a private bridge, SSH and sudo.
#   scripts/test-fleet.sh up [--hosts 3] [--data-dir DIR]    # prints the inventory path
#   scripts/test-fleet.sh down                               # and check-clean, status, restart, inject, heal, exec
# Needs root; see README.md "Test fleet". Standard library Python only.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${HY3_TEST_FLEET_PYTHON:-python3}
PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m test_fleet "$@"
