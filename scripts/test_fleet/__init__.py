# -*- coding: utf-8 -*-
"""A test fleet on one machine: Debian hosts booted with systemd (systemd-nspawn), each in its own
network namespace on a private bridge, reachable over SSH with key auth and sudo.

Entry points: ``scripts/test-fleet.sh`` (command line) and :class:`test_fleet.fleet.Fleet` (Python).
Standard library only, so it runs under any Python 3.9+ on the machine; needs root.
"""
