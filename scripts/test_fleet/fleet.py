# -*- coding: utf-8 -*-
"""A fleet: bring N hosts up (base, network, overlays, boot, inventory), tear it all down, and find
anything a fleet left behind. State lives in STATE_ROOT/<fleet>/fleet.json, written before the first
resource is made, so ``down`` can clean up after a crash at any step."""
import concurrent.futures
import json
import os
import shutil
import time

from test_fleet import base, cgroups, host as hostlib, inventory, net
from test_fleet.common import (DEFAULT_FLEET, FLEET_NAME_RE, HOST_NAME_RE, IN_HOST_DATA,
                               IN_HOST_REPO, IN_HOST_SHARE, IN_HOST_VENV, STATE_ROOT, FleetError, log,
                               pid_alive, pid_cmdline, run, terminate, write_file)

# Commands the fleet runs on the machine, and the Debian package that has each.
MACHINE_COMMANDS = {"ip": "iproute2", "ssh": "openssh-client", "ssh-keygen": "openssh-client", "nsenter": "util-linux",
                    "chroot": "coreutils", "dpkg-deb": "dpkg", "apt-get": "apt", "umount": "mount",
                    "wget": "wget", "gpgv": "gpgv"}     # the last two: debootstrap's download and signature check
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_GROUP = "gpu_nodes"


def preflight():
    """Fail before touching anything when the machine cannot run a fleet, naming what is missing."""
    if os.geteuid() != 0:
        raise FleetError("the test fleet needs root (namespaces, mounts, cgroups)")
    missing = sorted("%s (package %s)" % (cmd, pkg) for cmd, pkg in MACHINE_COMMANDS.items() if not shutil.which(cmd))
    if missing:
        raise FleetError("commands missing on this machine: %s" % ", ".join(missing))


def default_host_names(count):
    return ["h%d" % (i + 1) for i in range(count)]


def venv_version(venv):
    """major.minor from pyvenv.cfg ('version = 3.11.7' or 'version_info = 3.11.7...')."""
    with open(os.path.join(venv, "pyvenv.cfg")) as handle:
        for line in handle:
            key, _sep, value = line.partition("=")
            if key.strip() in ("version", "version_info"):
                return ".".join(value.strip().split(".")[:2])
    raise FleetError("%s/pyvenv.cfg names no Python version" % venv)


def write_venv_skeleton(dest, version):
    """A virtualenv frame whose interpreter is the HOST's own /usr/bin/pythonX.Y; the engine's
    site-packages are bind-mounted into it. The machine's venv may come from an interpreter the hosts
    lack (here pyenv's 3.11.7 under /root, 0700 and hidden by ProtectHome); wheels built for 3.11 run on
    any 3.11.x, so the packages are shared as they are and only the frame changes."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(dest, "bin"))
    os.makedirs(os.path.join(dest, "lib", "python" + version, "site-packages"))
    os.symlink("lib", os.path.join(dest, "lib64"))
    os.symlink("/usr/bin/python" + version, os.path.join(dest, "bin", "python"))
    for alias in ("python3", "python" + version):
        os.symlink("python", os.path.join(dest, "bin", alias))
    config = "home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\n" % version
    write_file(os.path.join(dest, "pyvenv.cfg"), config)


class Fleet:
    """Hosts named `host_names` on <subnet>.0/24 (default: net.subnet_for(name)); `data_dir` shared read-only into every host at
    IN_HOST_DATA, `repo` at IN_HOST_REPO, the engine `venv`'s packages at IN_HOST_VENV."""

    def __init__(self, name=DEFAULT_FLEET, host_names=None, subnet=None, data_dir=None,
                 repo=REPO_ROOT, venv=None, group=DEFAULT_GROUP):
        if not FLEET_NAME_RE.match(name):
            raise FleetError("fleet name %r: use 1-8 lower-case letters and digits, starting with a letter" % name)
        names = list(host_names or default_host_names(3))
        bad = [n for n in names if not HOST_NAME_RE.match(n)]
        if bad or len(set(names)) != len(names) or not 1 <= len(names) <= 50:
            raise FleetError("host names %r: 1-50 distinct names of lower-case letters, digits and '-'" % names)
        subnet = subnet or net.subnet_for(name)
        self.name, self.subnet, self.group, self.repo = name, subnet, group, os.path.abspath(repo)
        self.state_dir = os.path.join(STATE_ROOT, name)
        self.data_dir = os.path.abspath(data_dir) if data_dir else os.path.join(self.state_dir, "data")
        default_venv = os.path.join(self.repo, ".venv")
        self.venv = venv if venv is not None else (default_venv if os.path.exists(default_venv) else "")
        self.venv = os.path.abspath(self.venv) if self.venv else ""
        self.hosts = [hostlib.Host(n, i + 1, net.host_address(subnet, i + 1), "/run/netns/" + net.netns_name(name, n),
                                   net.veth_name(name, i + 1), os.path.join(self.state_dir, "hosts", n))
                      for i, n in enumerate(names)]
        self.rootfs = None
        self.timings = {}

    # -- paths -------------------------------------------------------------------------------------
    @property
    def key(self):
        return os.path.join(self.state_dir, "keys", "id_ed25519")

    @property
    def control_dir(self):
        return os.path.join(self.state_dir, "cp")

    @property
    def inventory_path(self):
        return os.path.join(self.state_dir, "inventory.yml")

    @property
    def _record_path(self):
        return os.path.join(self.state_dir, "fleet.json")

    def host(self, name):
        for candidate in self.hosts:
            if candidate.name == name:
                return candidate
        raise FleetError("fleet %s has no host %r (hosts: %s)" % (self.name, name, ", ".join(h.name for h in self.hosts)))

    def share_dir(self, name):
        """Machine-side path of the host's writable directory (IN_HOST_SHARE inside it)."""
        return hostlib.share_dir(self.host(name))

    # -- state ---------------------------------------------------------------------------------------
    def _save(self):
        record = {"name": self.name, "subnet": self.subnet, "group": self.group, "repo": self.repo,
                  "venv": self.venv, "data_dir": self.data_dir, "rootfs": self.rootfs,
                  "hosts": [h.name for h in self.hosts], "timings": self.timings}
        write_file(self._record_path, json.dumps(record, indent=1) + "\n")

    @classmethod
    def load(cls, name=DEFAULT_FLEET):
        """The fleet as `up` recorded it; FleetError when there is none."""
        path = os.path.join(STATE_ROOT, name, "fleet.json")
        try:
            with open(path) as handle:
                record = json.load(handle)
        except (OSError, ValueError) as exc:
            raise FleetError("no fleet %r is up (%s)" % (name, exc)) from exc
        fleet = cls(name, record["hosts"], record["subnet"], record["data_dir"], record["repo"], record["venv"],
                    record["group"])
        fleet.rootfs, fleet.timings = record.get("rootfs"), record.get("timings", {})
        return fleet

    # -- up --------------------------------------------------------------------------------------------
    def _binds(self, host):
        binds = [(self.repo, IN_HOST_REPO, False), (self.data_dir, IN_HOST_DATA, False),
                 (hostlib.share_dir(host), IN_HOST_SHARE, True)]
        if self.venv:
            version = base.python_version(self.rootfs)
            site = "lib/python%s/site-packages" % version
            binds += [(os.path.join(self.state_dir, "venv"), IN_HOST_VENV, False),
                      (os.path.join(self.venv, site), "%s/%s" % (IN_HOST_VENV, site), False)]
        return binds

    def _check_venv(self):
        if not self.venv:
            return
        want, have = base.python_version(self.rootfs), venv_version(self.venv)
        if want != have:
            raise FleetError("engine venv %s is Python %s but the hosts run Python %s: create it with python%s"
                             % (self.venv, have, want, want))
        write_venv_skeleton(os.path.join(self.state_dir, "venv"), want)

    def _prepare_state(self):
        os.makedirs(self.state_dir, mode=0o700)
        for path in (self.control_dir, os.path.dirname(self.key), self.data_dir):
            os.makedirs(path, mode=0o700, exist_ok=True)
        self._save()
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hy3-test-fleet-%s" % self.name, "-f", self.key])

    def _boot_all(self):
        with open(self.key + ".pub") as handle:
            public_key = handle.read()
        for host in self.hosts:
            hostlib.prepare(host, self.rootfs, public_key)
            hostlib.boot(self.name, host, self.rootfs, self._binds(host))
        with concurrent.futures.ThreadPoolExecutor(len(self.hosts)) as pool:
            for future in [pool.submit(hostlib.wait_ready, self.name, h, self.key) for h in self.hosts]:
                future.result()

    def up(self):
        """Bring the fleet up from nothing (a leftover fleet of the same name is torn down first)."""
        preflight()
        if self.leftovers():
            log("tearing down what a previous fleet %r left behind" % self.name)
            try:
                previous = Fleet.load(self.name)
            except FleetError:
                previous = self
            previous.down()
        net.check_subnet_free(self.subnet, self.name)
        started = time.monotonic()
        self.rootfs = base.ensure_base()
        self.timings["base_s"] = round(time.monotonic() - started, 2)
        self._prepare_state()
        try:
            self._check_venv()
            started = time.monotonic()
            net.create_bridge(self.name, self.subnet)
            for host in self.hosts:
                net.create_host_link(self.name, host.name, host.index, self.subnet)
            self._boot_all()
            self.timings["boot_s"] = round(time.monotonic() - started, 2)
            inventory.write(self, self.inventory_path)
            self._save()
        except BaseException:
            for host in self.hosts:
                if os.path.exists(hostlib.console_log(host)):
                    with open(hostlib.console_log(host), errors="replace") as handle:
                        log("console of %s (last lines):\n%s" % (host.name, "".join(handle.readlines()[-15:])))
            self.down()
            raise
        log("fleet %s up: %s in %.1f s (base %.1f s); inventory %s" % (
            self.name, ", ".join("%s=%s" % (h.name, h.address) for h in self.hosts), self.timings["boot_s"],
            self.timings["base_s"], self.inventory_path))
        return self

    # -- running hosts -----------------------------------------------------------------------------------
    def exec_in(self, name, argv, check=True, timeout=120):
        return hostlib.exec_in(self.name, self.host(name), argv, check=check, timeout=timeout)

    def root_path(self, name, path):
        return hostlib.root_path(self.name, self.host(name), path)

    def close_ssh(self, name=None):
        """Close Ansible's master connections (all, or those to one host)."""
        if not os.path.isdir(self.control_dir):
            return
        address = self.host(name).address if name else ""
        for socket_name in os.listdir(self.control_dir):      # named user@address:port (inventory.py)
            if not name or "@%s:" % address in socket_name:
                sock = os.path.join(self.control_dir, socket_name)
                run(["ssh", "-o", "ControlPath=" + sock, "-O", "exit", "fleet-host"], check=False, timeout=10)

    def restart(self, name):
        """Power a host off (SIGTERM to its systemd-nspawn) and boot it again on the same upper layer. A boot whose
        systemd-nspawn exits at once (the machine of the run just powered off not yet gone, seen once under load)
        is tried once more; a second exit fails, quoting the console."""
        host = self.host(name)
        self.close_ssh(name)
        for attempt in (1, 2):
            hostlib.power_off(self.name, host)
            hostlib.boot(self.name, host, self.rootfs, self._binds(host))
            try:
                hostlib.wait_ready(self.name, host, self.key)
                return
            except hostlib.BootExited:
                if attempt == 2:
                    raise
                time.sleep(2)

    def memory_mib(self):
        """Proportional set size (MiB) of every process of each host, its systemd-nspawn included."""
        usage = {}
        for host in self.hosts:
            total = 0
            for pid in cgroups.pids(cgroups.host_dirs(self.name, host.name)):
                try:
                    with open("/proc/%d/smaps_rollup" % pid) as handle:
                        total += sum(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
                except OSError:
                    pass
            usage[host.name] = round(total / 1024.0, 1)
        return usage

    # -- down ----------------------------------------------------------------------------------------
    def _stray_processes(self):
        """Processes of this fleet outside any host cgroup: a systemd-nspawn for one of its machines,
        or an ssh master whose ControlPath is in the fleet's state directory."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            cmdline = " ".join(pid_cmdline(int(entry)))
            # an ssh master renames itself "ssh: <ControlPath> [mux]"
            ours = "--machine=%s-" % self.name in cmdline or \
                (cmdline.startswith("ssh") and self.control_dir + "/" in cmdline)
            if ours and pid_alive(int(entry)):
                found.append(int(entry))
        return found

    def _mounts(self):
        with open("/proc/self/mountinfo") as handle:
            points = [line.split()[4] for line in handle]
        return [p for p in points if p == self.state_dir or p.startswith(self.state_dir + "/")]

    def down(self):
        """Power every host off and remove the fleet's processes, cgroups, links, namespaces, mounts and state."""
        self.close_ssh()
        for host in self.hosts:
            hostlib.power_off(self.name, host)
        terminate(self._stray_processes(), 15)
        terminate(cgroups.pids(cgroups.fleet_dirs(self.name)), 15)
        cgroups.remove_fleet(self.name)
        net.remove_all(self.name)
        for point in reversed(self._mounts()):
            run(["umount", "--lazy", point], check=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        left = self.leftovers()
        if left:
            raise FleetError("fleet %s: teardown left %s" % (self.name, "; ".join(left)))
        log("fleet %s down, nothing left behind" % self.name)

    def leftovers(self):
        """Everything of this fleet still on the machine, one 'kind: what' line each (empty when clean)."""
        found = ["process: %d %s" % (pid, " ".join(pid_cmdline(pid))[:120]) for pid in self._stray_processes()]
        found += ["process: %d (in a fleet cgroup)" % pid for pid in cgroups.pids(cgroups.fleet_dirs(self.name))]
        found += ["cgroup: %s" % path for path in cgroups.leftovers(self.name)]
        found += net.leftovers(self.name)
        found += ["mount: %s" % point for point in self._mounts()]
        if os.path.exists(self.state_dir):
            found.append("state: %s" % self.state_dir)
        return found
