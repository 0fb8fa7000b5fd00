# -*- coding: utf-8 -*-
"""Faults a test can inject into one running host, and heal: each is applied from the machine side
(nsenter, or the host's files through /proc/PID/root), so it works whatever the fault breaks."""
import collections

from test_fleet import host as hostlib, net
from test_fleet.common import LOGIN_SUDOERS, LOGIN_USER, FleetError, write_file

DEGRADED_UNIT = "hy3-test-fleet-broken"
PORT_UNIT = "hy3-test-fleet-port"
SUDOERS = "/etc/sudoers.d/" + LOGIN_USER
SUDO_PASSWORD = "%s ALL=(ALL:ALL) ALL\n" % LOGIN_USER      # sudo asks for a password the user does not have

Fault = collections.namedtuple("Fault", "inject heal help")


def _unreachable(fleet, name, _arg):
    fleet.close_ssh(name)
    net.set_link(fleet.name, fleet.host(name).index, up=False)


def _reachable(fleet, name, _arg):
    net.set_link(fleet.name, fleet.host(name).index, up=True)


def _refuse_key(fleet, name, _arg):
    fleet.close_ssh(name)
    hostlib.write_authorized_key(fleet.root_path(name, "/"), fleet.rootfs, "# the fleet key was removed\n")


def _accept_key(fleet, name, _arg):
    with open(fleet.key + ".pub") as handle:
        hostlib.write_authorized_key(fleet.root_path(name, "/"), fleet.rootfs, handle.read())


def _sudoers(text):
    def apply(fleet, name, _arg):
        fleet.close_ssh(name)
        write_file(fleet.root_path(name, SUDOERS), text, mode=0o440)
    return apply


def _degrade(fleet, name, _arg):
    fleet.exec_in(name, ["systemd-run", "--unit=" + DEGRADED_UNIT, "--description=hy3 test fleet: a failed unit",
                         "/bin/false"])


def _undegrade(fleet, name, _arg):
    fleet.exec_in(name, ["systemctl", "reset-failed", DEGRADED_UNIT + ".service"], check=False)


def _take_port(fleet, name, port):
    if not port or not str(port).isdigit():
        raise FleetError("take-port needs the port number")
    fleet.exec_in(name, ["systemd-run", "--unit=" + PORT_UNIT, "--description=hy3 test fleet: holds port %s" % port,
                         "/usr/bin/python3", "-m", "http.server", "--bind", "0.0.0.0", str(port)])
    probe = "import socket,time\nfor _ in range(100):\n    try:\n        socket.create_connection(('127.0.0.1', %d), 1).close(); break\n" \
            "    except OSError:\n        time.sleep(0.1)\nelse:\n    raise SystemExit('port %d not taken')\n" % (int(port), int(port))
    fleet.exec_in(name, ["/usr/bin/python3", "-c", probe])


def _free_port(fleet, name, _arg):
    fleet.exec_in(name, ["systemctl", "stop", PORT_UNIT + ".service"], check=False)


FAULTS = collections.OrderedDict([
    ("unreachable", Fault(_unreachable, _reachable, "cut the host's link: SSH times out")),
    ("refuse-key", Fault(_refuse_key, _accept_key, "remove the fleet key from authorized_keys: SSH refuses it")),
    ("sudo-password", Fault(_sudoers(SUDO_PASSWORD), _sudoers(LOGIN_SUDOERS), "sudo asks for a password")),
    ("degraded", Fault(_degrade, _undegrade, "a failed unit: is-system-running says degraded")),
    ("take-port", Fault(_take_port, _free_port, "a process listens on PORT (argument) on all addresses")),
])


def inject(fleet, kind, name, arg=None):
    if kind not in FAULTS:
        raise FleetError("unknown fault %r (known: %s)" % (kind, ", ".join(FAULTS)))
    FAULTS[kind].inject(fleet, name, arg)


def heal(fleet, name, kind=None):
    """Undo one fault, or every fault (each undo is harmless when that fault was not injected)."""
    kinds = [kind] if kind else list(FAULTS)
    for each in kinds:
        if each not in FAULTS:
            raise FleetError("unknown fault %r (known: %s)" % (each, ", ".join(FAULTS)))
        FAULTS[each].heal(fleet, name, None)
