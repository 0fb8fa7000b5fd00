# -*- coding: utf-8 -*-
"""Paths, names and small helpers shared by the test fleet modules; every default lives here."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

CACHE_DIR = os.environ.get("HY3_TEST_FLEET_CACHE", "/var/cache/hy3-test-fleet")
STATE_ROOT = os.environ.get("HY3_TEST_FLEET_STATE", "/var/tmp/hy3-test-fleet")
CGROUP_GROUP = "hy3-test-fleet"          # per-host cgroups live under <hierarchy>/hy3-test-fleet/<fleet>/<host>

DEFAULT_FLEET = "hy3tf"
DEFAULT_SUBNET = "10.231.0"              # the default fleet's /24; it exists only on this machine's bridge
LOGIN_USER = "hy3admin"
LOGIN_SUDOERS = "%s ALL=(ALL:ALL) NOPASSWD: ALL\n" % LOGIN_USER       # /etc/sudoers.d/hy3admin in every host

# Where the shared directories appear inside every host. Fixed paths outside /tmp and /root, so a
# unit with PrivateTmp=yes or ProtectHome=yes, or a non-root service user, still reaches them.
IN_HOST_REPO = "/opt/hy3-test/repo"      # the checkout, read-only (roles' test fakes, stub engine)
IN_HOST_VENV = "/opt/hy3-test/venv"      # the engine virtualenv on the host's own python3.11, read-only
IN_HOST_DATA = "/srv/hy3-test/data"      # data shared by all hosts (model checkpoints), read-only
IN_HOST_SHARE = "/srv/hy3-test/host"     # one writable directory per host (e.g. its fake NVML profile)

FLEET_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")       # names of links: "<fleet>-v<n>" <= 15 chars
HOST_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


class FleetError(Exception):
    """A failure with a message that names what failed; the command line prints it without a traceback."""


def log(message):
    sys.stderr.write("test-fleet: %s\n" % message)
    sys.stderr.flush()


def run(argv, check=True, env=None, input_text=None, timeout=600, cwd=None):
    """Run a command, capture its output; on failure raise FleetError quoting the command and stderr."""
    try:
        proc = subprocess.run(argv, check=False, env=env, input=input_text, timeout=timeout, cwd=cwd, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FleetError("%s: %s" % (" ".join(argv), exc)) from exc
    if check and proc.returncode != 0:
        raise FleetError("%s failed (rc=%d): %s" % (" ".join(argv), proc.returncode,
                                                    (proc.stderr or proc.stdout).strip()[-2000:]))
    return proc


def write_file(path, text, mode=0o644, uid=None, gid=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, gid)


def wait_until(predicate, timeout, interval=0.2):
    """Poll predicate() until it returns a true value or timeout seconds pass; return the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def pid_alive(pid):
    """True when the process exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def signal_all(pids, signum):
    """Send signum to each PID, ignoring those that are already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def terminate(pids, grace):
    """SIGTERM, then SIGKILL to whatever is still alive after grace seconds."""
    signal_all(pids, signal.SIGTERM)
    if not wait_until(lambda: not any(pid_alive(p) for p in pids), grace):
        signal_all(pids, signal.SIGKILL)


def pid_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return []
