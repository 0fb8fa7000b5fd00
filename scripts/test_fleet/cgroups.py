# -*- coding: utf-8 -*-
"""Per-host cgroups, so each host's systemd-nspawn gets its own subtree (without it every container
shares /payload and /supervisor at the hierarchy root and leaves them behind), and so teardown and
the memory figure can find every process of a host.
"""
import contextlib
import os

from test_fleet.common import CGROUP_GROUP

CGROUP_ROOT = "/sys/fs/cgroup"


def hierarchies():
    """The hierarchies systemd uses: hybrid (name=systemd v1 + cgroup2 at unified), pure v2, or v1."""
    unified = os.path.join(CGROUP_ROOT, "unified")
    if os.path.exists(os.path.join(unified, "cgroup.procs")):
        return [os.path.join(CGROUP_ROOT, "systemd"), unified]
    if os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
        return [CGROUP_ROOT]
    return [os.path.join(CGROUP_ROOT, "systemd")]


def fleet_dirs(fleet):
    return [os.path.join(top, CGROUP_GROUP, fleet) for top in hierarchies()]


def host_dirs(fleet, host):
    return [os.path.join(top, host) for top in fleet_dirs(fleet)]


def create(fleet, host):
    dirs = host_dirs(fleet, host)
    for path in dirs:
        os.makedirs(path, exist_ok=True)
    return dirs


def pids(paths):
    """Every PID in these cgroups and their descendants."""
    found = set()
    for top in paths:
        for current, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(current, "cgroup.procs")) as handle:
                        found.update(int(line) for line in handle if line.strip())
                except OSError:
                    pass
    return sorted(found)


def remove_tree(path):
    """rmdir a cgroup subtree bottom-up (cgroup directories are removed empty, never unlinked)."""
    for current, _dirs, _files in os.walk(path, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(current)


def leftovers(fleet):
    return [path for path in fleet_dirs(fleet) if os.path.exists(path)]


def remove_fleet(fleet):
    for path in fleet_dirs(fleet):
        remove_tree(path)
        parent = os.path.dirname(path)
        if os.path.isdir(parent) and not any(os.path.isdir(os.path.join(parent, n)) for n in os.listdir(parent)):
            remove_tree(parent)
