# -*- coding: utf-8 -*-
"""One host of the fleet: its overlay upper layer, its systemd-nspawn process, readiness, power off,
and commands run inside it (nsenter into the container's namespaces, so they work even when SSH
is the thing a test has broken)."""
import collections
import contextlib
import os
import signal
import subprocess
import time

from test_fleet import cgroups, tools
from test_fleet.common import (LOGIN_USER, FleetError, pid_alive, pid_cmdline, run, signal_all, terminate, wait_until,
                               write_file)

Host = collections.namedtuple("Host", "name index address netns veth home")

BOOT_TIMEOUT = 180       # seconds to running + SSH; 3 hosts need ~3 s on an idle 2-core machine
STOP_TIMEOUT = 30
# systemd-nspawn processes started by this Python process, kept so power_off can reap them (a
# fleet driven from one process, e.g. a pytest session, leaves no zombie even where PID 1 never reaps).
_CHILDREN = {}
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3")


def upper_dir(host):
    return os.path.join(host.home, "upper")


def share_dir(host):
    return os.path.join(host.home, "share")


def console_log(host):
    return os.path.join(host.home, "console.log")


class BootExited(FleetError):
    """The host's systemd-nspawn exited while it booted (the message quotes the console's last lines)."""


def console_tail(host, lines=8):
    """The last lines of the host's console, for an error message (the fleet's files go with its teardown)."""
    try:
        with open(console_log(host), "rb") as handle:
            text = handle.read()[-4096:].decode("utf-8", "replace")
    except OSError:
        return "(no console log)"
    return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())


def _pid_file(host):
    return os.path.join(host.home, "nspawn.pid")


def _mkdirs_like_lower(lower, upper, relative):
    """Create upper/relative with each component's owner and mode copied from the lower layer: in an
    overlay, a directory present in the upper layer lends its attributes to the merged directory."""
    path_lower, path_upper = lower, upper
    for part in relative.strip("/").split("/"):
        path_lower, path_upper = os.path.join(path_lower, part), os.path.join(path_upper, part)
        if not os.path.isdir(path_upper):
            info = os.stat(path_lower)
            os.mkdir(path_upper)
            os.chown(path_upper, info.st_uid, info.st_gid)
            os.chmod(path_upper, info.st_mode & 0o7777)
    return path_upper


def _login_ids(rootfs):
    with open(os.path.join(rootfs, "etc", "passwd")) as handle:
        for line in handle:
            fields = line.split(":")
            if fields[0] == LOGIN_USER:
                return int(fields[2]), int(fields[3])
    raise FleetError("%s has no user %s: remove the cached base and run up again" % (rootfs, LOGIN_USER))


def prepare(host, rootfs, public_key):
    """The host's own files, written into its upper layer before the first boot: name, /etc/hosts,
    machine-id, SSH host key, the login user's authorized key."""
    upper = upper_dir(host)
    os.makedirs(upper, exist_ok=True)
    os.makedirs(share_dir(host), exist_ok=True)
    etc = _mkdirs_like_lower(rootfs, upper, "etc")
    write_file(os.path.join(etc, "hostname"), host.name + "\n")
    write_file(os.path.join(etc, "hosts"), "127.0.0.1 localhost\n::1 localhost\n%s %s\n"
               % (host.address, host.name))
    write_file(os.path.join(etc, "machine-id"), os.urandom(16).hex() + "\n", mode=0o444)
    ssh_dir = _mkdirs_like_lower(rootfs, upper, "etc/ssh")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "root@" + host.name,
         "-f", os.path.join(ssh_dir, "ssh_host_ed25519_key")])
    write_authorized_key(upper, rootfs, public_key)


def write_authorized_key(root, rootfs, public_key):
    """~LOGIN_USER/.ssh/authorized_keys under root (an upper layer, or a running host's /proc/PID/root)."""
    uid, gid = _login_ids(rootfs)
    home = _mkdirs_like_lower(rootfs, root, "home/" + LOGIN_USER)
    ssh_dir = os.path.join(home, ".ssh")
    os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
    os.chown(ssh_dir, uid, gid)
    write_file(os.path.join(ssh_dir, "authorized_keys"), public_key, mode=0o600, uid=uid, gid=gid)


def nspawn_argv(fleet_name, host, rootfs, binds):
    """systemd-nspawn booting systemd as PID 1 on the host's overlay, in the host's namespace.
    --register=no: there is no system bus on the machine; --keep-unit: stay in the cgroup prepared
    for it instead of asking systemd for a scope."""
    argv = [tools.nspawn_binary(), "--quiet", "--register=no", "--keep-unit", "--console=passive",
            "--directory=" + rootfs, "--overlay=+/:%s:/" % upper_dir(host), "--resolv-conf=off",
            "--timezone=off", "--link-journal=no", "--network-namespace-path=" + host.netns,
            "--hostname=" + host.name, "--machine=%s-%s" % (fleet_name, host.name)]
    for source, dest, writable in binds:
        argv.append("%s=%s:%s" % ("--bind" if writable else "--bind-ro", source, dest))
    return argv + ["--boot"]


def boot(fleet_name, host, rootfs, binds):
    """Start the host's systemd-nspawn in its own cgroups, detached; return its PID."""
    dirs = cgroups.create(fleet_name, host.name)
    # the shell joins the cgroups, then becomes systemd-nspawn (same PID)
    script = 'for cg in $HY3_CGROUPS; do echo $$ > "$cg/cgroup.procs"; done; exec "$@"'
    env = dict(tools.nspawn_env(), HY3_CGROUPS=" ".join(dirs))
    with open(console_log(host), "ab") as console:
        proc = subprocess.Popen(["sh", "-c", script, "sh"] + nspawn_argv(fleet_name, host, rootfs, binds),
                                stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    _CHILDREN[proc.pid] = proc
    write_file(_pid_file(host), "%d\n" % proc.pid)
    return proc.pid


def _recorded_pid(host):
    """The PID boot wrote for the host's systemd-nspawn, or None."""
    try:
        with open(_pid_file(host)) as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def _exit_status(host):
    """' (exit status N)' when this process started the host's systemd-nspawn and it has exited, else ''."""
    child = _CHILDREN.get(_recorded_pid(host))
    status = child.poll() if child is not None else None
    return "" if status is None else " (exit status %d)" % status


def nspawn_pid(fleet_name, host):
    """The PID of the host's running systemd-nspawn, or None (checked against its command line)."""
    pid = _recorded_pid(host)
    if pid is None:
        return None
    if "--machine=%s-%s" % (fleet_name, host.name) in _settled_cmdline(pid):
        return pid
    return None


def _settled_cmdline(pid, tries=100):
    """pid's command line, [] once it is gone. While execve swaps the image in (the sh that joins the cgroups
    becoming systemd-nspawn), the kernel shows a live process with an empty one, so read again: taking that
    moment for an exit failed a CI boot with "systemd-nspawn exited during boot" and an empty console."""
    for _attempt in range(tries):
        if not pid_alive(pid):
            return []
        cmdline = pid_cmdline(pid)
        if any(cmdline):
            return cmdline
        time.sleep(0.01)
    return []


def init_pid(fleet_name, host):
    """PID (in the machine's namespace) of the host's systemd, a child of its systemd-nspawn."""
    parent = nspawn_pid(fleet_name, host)
    if parent is None:
        raise FleetError("host %s is not running (no systemd-nspawn for it)" % host.name)

    def child():
        try:
            with open("/proc/%d/task/%d/children" % (parent, parent)) as handle:
                pids = [int(p) for p in handle.read().split()]
        except OSError:
            return None
        return next((p for p in pids if pid_cmdline(p)[:1] and "systemd" in pid_cmdline(p)[0]), None)

    pid = wait_until(child, 10)
    if pid is None:
        raise FleetError("host %s: systemd-nspawn %d has no systemd child" % (host.name, parent))
    return pid


def exec_in(fleet_name, host, argv, check=True, timeout=120):
    """Run argv inside the host as root (its mount, UTS, IPC, network and PID namespaces)."""
    pid = init_pid(fleet_name, host)
    return run(["nsenter", "--target", str(pid), "--mount", "--uts", "--ipc", "--net", "--pid", "--",
                "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"] + list(argv),
               check=check, timeout=timeout)


def root_path(fleet_name, host, path):
    """The machine-side path of a file inside the running host."""
    return "/proc/%d/root/%s" % (init_pid(fleet_name, host), path.lstrip("/"))


def ssh_argv(host, key, *command):
    return ["ssh", "-i", key] + list(SSH_OPTIONS) + ["%s@%s" % (LOGIN_USER, host.address)] + list(command)


def wait_ready(fleet_name, host, key, timeout=BOOT_TIMEOUT):
    """Wait until the host's systemd reports `running` over SSH; fail naming the host and the state."""
    deadline = time.monotonic() + timeout
    state = "no answer over SSH"
    while time.monotonic() < deadline:
        if nspawn_pid(fleet_name, host) is None:
            raise BootExited("host %s: systemd-nspawn exited during boot%s; console: %s"
                             % (host.name, _exit_status(host), console_tail(host)))
        proc = run(ssh_argv(host, key, "systemctl", "is-system-running", "--wait"), check=False, timeout=timeout)
        state = proc.stdout.strip() or proc.stderr.strip()
        if state == "running":
            return
        if state in ("degraded", "maintenance", "stopping"):
            failed = run(ssh_argv(host, key, "systemctl", "--failed", "--no-legend", "--plain"), check=False)
            raise FleetError("host %s booted %s: failed units: %s" % (host.name, state, failed.stdout.strip()))
        time.sleep(0.3)
    raise FleetError("host %s not ready after %d s (%s); see %s" % (host.name, timeout, state, console_log(host)))


def power_off(fleet_name, host, timeout=STOP_TIMEOUT):
    """SIGTERM to systemd-nspawn powers the container off cleanly; SIGKILL whatever is left after timeout."""
    pid = nspawn_pid(fleet_name, host)
    if pid is not None:
        terminate([pid], timeout)
        if pid in _CHILDREN:
            _CHILDREN.pop(pid).wait()
    dirs = cgroups.host_dirs(fleet_name, host.name)
    for _attempt in range(20):
        left = cgroups.pids(dirs)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        time.sleep(0.1)
    for path in dirs:
        cgroups.remove_tree(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_pid_file(host))
