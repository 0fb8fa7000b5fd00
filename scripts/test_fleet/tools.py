# -*- coding: utf-8 -*-
"""debootstrap and systemd-nspawn, unpacked from the Debian archive into the cache.

``apt-get install systemd-container`` would upgrade the machine's own systemd to match; so the
packages are fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x``, and the binaries
run from there with the unpacked libsystemd-shared on LD_LIBRARY_PATH. Nothing on the machine changes.
"""
import fcntl
import glob
import os
import shutil
import tempfile

from test_fleet.common import CACHE_DIR, FleetError, log, run

TOOL_PACKAGES = ("debootstrap", "systemd-container", "libsystemd-shared")
TOOLS_DIR = os.path.join(CACHE_DIR, "tools")
TOOLS_ROOT = os.path.join(TOOLS_DIR, "root")
SYSTEMD_LIBS = os.path.join(TOOLS_ROOT, "usr", "lib", "x86_64-linux-gnu", "systemd")


class CacheLock:
    """An exclusive lock on the cache, so two fleets never build the same thing at once."""

    def __init__(self):
        self._handle = None

    def __enter__(self):
        os.makedirs(CACHE_DIR, exist_ok=True)
        self._handle = open(os.path.join(CACHE_DIR, "lock"), "w")
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self._handle.close()


def _download(packages, dest):
    """apt-get download, refreshing the package lists once when they are missing or stale."""
    proc = run(["apt-get", "download"] + list(packages), check=False, cwd=dest)
    if proc.returncode != 0:
        log("apt-get download failed, running apt-get update once")
        run(["apt-get", "update"], timeout=600)
        run(["apt-get", "download"] + list(packages), cwd=dest)
    return sorted(glob.glob(os.path.join(dest, "*.deb")))


def ensure_tools():
    """Unpack the tool packages into the cache (once); return the list of .deb names unpacked."""
    stamp = os.path.join(TOOLS_DIR, "stamp")
    if os.path.exists(stamp):
        with open(stamp) as handle:
            return handle.read().split()
    log("fetching %s (apt-get download + dpkg-deb -x, the machine's packages stay as they are)"
        % ", ".join(TOOL_PACKAGES))
    shutil.rmtree(TOOLS_DIR, ignore_errors=True)
    os.makedirs(CACHE_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="tools.", dir=CACHE_DIR)
    os.chmod(work, 0o755)                     # apt's _apt user must be able to write the downloads
    try:
        debs = _download(TOOL_PACKAGES, work)
        root = os.path.join(work, "root")
        for deb in debs:
            run(["dpkg-deb", "-x", deb, root])
        names = [os.path.basename(deb) for deb in debs]
        with open(os.path.join(work, "stamp"), "w") as handle:
            handle.write("\n".join(names) + "\n")
        for deb in debs:
            os.unlink(deb)
        os.rename(work, TOOLS_DIR)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return names


def nspawn_env():
    env = dict(os.environ, LD_LIBRARY_PATH=SYSTEMD_LIBS)
    env["SYSTEMD_NSPAWN_LOCK"] = "0"          # every host boots the same read-only base as its lower layer
    return env


def nspawn_binary():
    path = os.path.join(TOOLS_ROOT, "usr", "bin", "systemd-nspawn")
    if not os.path.exists(path):
        raise FleetError("%s is missing: remove %s and run up again" % (path, TOOLS_DIR))
    return path


def debootstrap_command():
    return [os.path.join(TOOLS_ROOT, "usr", "sbin", "debootstrap")]


def debootstrap_env():
    return dict(os.environ, DEBOOTSTRAP_DIR=os.path.join(TOOLS_ROOT, "usr", "share", "debootstrap"))
