# -*- coding: utf-8 -*-
"""The fleet's private network: one bridge on the machine, one network namespace and veth pair per host.

Nothing is routed or forwarded past the bridge, so the hosts reach only this machine and each other.
Link and namespace names all start with the fleet name, which is how teardown finds leftovers.
"""
import contextlib
import ipaddress
import os
import zlib

from test_fleet.common import DEFAULT_FLEET, DEFAULT_SUBNET, FleetError, run

NETNS_DIR = "/run/netns"


def subnet_for(fleet):
    """The /24 a fleet gets unless told: DEFAULT_SUBNET for the default fleet, else one derived from
    its name, so fleets of different names run side by side (a clash is refused by check_subnet_free)."""
    if fleet == DEFAULT_FLEET:
        return DEFAULT_SUBNET
    return "10.231.%d" % (1 + zlib.crc32(fleet.encode()) % 254)


def bridge_name(fleet):
    return "%s-br" % fleet


def veth_name(fleet, index):
    return "%s-v%d" % (fleet, index)


def netns_name(fleet, host):
    return "%s-%s" % (fleet, host)


def host_address(subnet, index):
    return "%s.%d" % (subnet, 10 + index)


def gateway_address(subnet):
    return "%s.1" % subnet


def check_subnet_free(subnet, fleet):
    """Refuse a /24 that any other interface on the machine already routes (another fleet, a VPN...)."""
    try:
        net = ipaddress.ip_network("%s.0/24" % subnet)
    except ValueError as exc:
        raise FleetError("subnet %r: %s (expected three octets, e.g. 10.231.0)" % (subnet, exc)) from exc
    if not net.is_private:
        raise FleetError("subnet %s is not a private range" % net)
    for line in run(["ip", "-4", "-o", "route", "show"]).stdout.splitlines():
        dest, _sep, rest = line.partition(" ")
        device = rest.split(" dev ", 1)[1].split()[0] if " dev " in rest else ""
        if dest != "default" and device != bridge_name(fleet) and \
                ipaddress.ip_network(dest, strict=False).overlaps(net):
            raise FleetError("subnet %s overlaps route %r on this machine: choose another --subnet" % (net, line))


def create_bridge(fleet, subnet):
    bridge = bridge_name(fleet)
    run(["ip", "link", "add", bridge, "type", "bridge"])
    run(["ip", "addr", "add", "%s/24" % gateway_address(subnet), "dev", bridge])
    run(["ip", "link", "set", bridge, "up"])


def create_host_link(fleet, host, index, subnet):
    """A namespace for the host with eth0 on the bridge, lo up, and its address. No default route:
    anything beyond the subnet fails at once instead of waiting."""
    netns, veth = netns_name(fleet, host), veth_name(fleet, index)
    run(["ip", "netns", "add", netns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns])
    run(["ip", "link", "set", veth, "master", bridge_name(fleet), "up"])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", netns, "addr", "add", "%s/24" % host_address(subnet, index), "dev", "eth0"])
    run(["ip", "-n", netns, "link", "set", "eth0", "up"])
    return os.path.join(NETNS_DIR, netns)


def set_link(fleet, index, up):
    """Cut or restore a host's cable (its veth on the bridge side)."""
    run(["ip", "link", "set", veth_name(fleet, index), "up" if up else "down"])


def fleet_links(fleet):
    """Names of the links on the machine that belong to this fleet."""
    names = []
    for line in run(["ip", "-o", "link", "show"]).stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@")[0]
        if name.startswith(fleet + "-"):
            names.append(name)
    return names


def fleet_namespaces(fleet):
    if not os.path.isdir(NETNS_DIR):
        return []
    return sorted(name for name in os.listdir(NETNS_DIR) if name.startswith(fleet + "-"))


def netns_dir_mounted():
    """/run/netns is a bind mount of itself (same device), which os.path.ismount cannot see."""
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4] == NETNS_DIR for line in handle)


def leftovers(fleet):
    found = ["netns: %s" % name for name in fleet_namespaces(fleet)]
    found += ["link: %s" % name for name in fleet_links(fleet)]
    if os.path.isdir(NETNS_DIR) and not os.listdir(NETNS_DIR) and netns_dir_mounted():
        found.append("mount: %s (empty, left by ip netns add)" % NETNS_DIR)
    return found


def remove_all(fleet):
    """Delete the fleet's namespaces (their eth0 ends go with them), veths and bridge; then /run/netns
    itself when nothing else uses it (``ip netns add`` bind-mounts it)."""
    for netns in fleet_namespaces(fleet):
        run(["ip", "netns", "del", netns], check=False)
    for link in fleet_links(fleet):
        run(["ip", "link", "del", link], check=False)
    if os.path.isdir(NETNS_DIR) and not os.listdir(NETNS_DIR):
        while netns_dir_mounted():
            if run(["umount", NETNS_DIR], check=False).returncode != 0:
                break
        with contextlib.suppress(OSError):
            os.rmdir(NETNS_DIR)
