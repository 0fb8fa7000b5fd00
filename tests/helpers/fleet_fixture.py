# -*- coding: utf-8 -*-
"""pytest side of the test fleet (scripts/test_fleet, README "Test fleet").

``nspawn_fleet`` is a session fixture: the fleet comes up once per pytest session and goes down at
its end, after a failure or an interrupt too; ``up`` itself first clears what a crashed session
left. Use it from a test module with ``from fleet_fixture import nspawn_fleet  # noqa: F401``.
Tests write per-host files (a fake NVML profile) into ``fleet.share_dir(host)``, seen inside the
host at IN_HOST_SHARE, and shared data (checkpoints) into ``fleet.data_dir`` (IN_HOST_DATA).
"""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from test_fleet import faults  # noqa: E402  pylint: disable=wrong-import-position
from test_fleet.common import (IN_HOST_DATA, IN_HOST_REPO, IN_HOST_SHARE, IN_HOST_VENV,  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import
                               FleetError)
from test_fleet.fleet import Fleet  # noqa: E402  pylint: disable=wrong-import-position

FLEET_HOSTS = ("node-a", "node-b", "node-c")
# Two test sessions on one machine (two checkouts) need different fleet names: the name prefixes
# every fleet a session makes (<= 5 characters) and picks its subnets (test_fleet.net.subnet_for).
SESSION_FLEET = os.environ.get("HY3_TEST_FLEET_NAME", "hy3tf")


def skip_unless_root():
    if os.geteuid() != 0:
        pytest.skip("the test fleet needs root (network namespaces, mounts, cgroups)")


def fleet_name(suffix=""):
    """This session's fleet name, or the name of another fleet it makes (SESSION_FLEET + suffix)."""
    return SESSION_FLEET[:8 - len(suffix)] + suffix


def managed_fleet(name, host_names, data_dir):
    """Generator: a fleet that is up while the generator is suspended and down once it resumes."""
    fleet = Fleet(name, host_names, data_dir=data_dir)
    try:
        fleet.up()
        yield fleet
    finally:
        fleet.down()


@pytest.fixture(scope="session")
def nspawn_fleet(tmp_path_factory):
    """Three hosts (FLEET_HOSTS) over SSH with become; their shared data dir starts empty."""
    skip_unless_root()
    data_dir = tmp_path_factory.mktemp("fleet-data")
    os.chmod(str(data_dir), 0o755)           # readable by unprivileged service users in the hosts
    yield from managed_fleet(fleet_name(), FLEET_HOSTS, str(data_dir))


__all__ = ["nspawn_fleet", "managed_fleet", "fleet_name", "skip_unless_root", "faults", "Fleet", "FleetError", "FLEET_HOSTS",
           "IN_HOST_DATA", "IN_HOST_REPO", "IN_HOST_SHARE", "IN_HOST_VENV"]
