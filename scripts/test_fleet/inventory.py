# -*- coding: utf-8 -*-
"""The fleet's Ansible inventory, written as YAML without PyYAML (the scripts use the standard library only)."""
import json

from test_fleet.common import IN_HOST_DATA, IN_HOST_REPO, IN_HOST_SHARE, IN_HOST_VENV, LOGIN_USER


def _scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)      # a JSON string is a valid YAML scalar


def to_yaml(value, indent=0):
    """Block-style YAML for nested dicts of scalars and lists of scalars."""
    pad = "  " * indent
    lines = []
    for key, item in value.items():
        if isinstance(item, dict):
            lines.append("%s%s:%s" % (pad, key, "" if item else " {}"))
            if item:
                lines.append(to_yaml(item, indent + 1))
        elif isinstance(item, (list, tuple)):
            lines.append("%s%s: [%s]" % (pad, key, ", ".join(_scalar(v) for v in item)))
        else:
            lines.append("%s%s: %s" % (pad, key, _scalar(item)))
    return "\n".join(lines)


def ssh_common_args(control_dir):
    """Throw-away host keys are not checked; the ControlPath sits in the fleet's state directory, one
    socket per user@address:port, so teardown or a fault can close the master connections Ansible left."""
    return ("-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no -o LogLevel=ERROR "
            "-o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=2 "
            "-o ControlMaster=auto -o ControlPersist=60s -o ControlPath=%s/%%r@%%h:%%p" % control_dir)


def build(fleet):
    """Inventory dict: the fleet's hosts in fleet.group, with connection and shared-path variables."""
    python = IN_HOST_VENV + "/bin/python" if fleet.venv else "/usr/bin/python3"
    hosts = {}
    for host in fleet.hosts:
        hosts[host.name] = {"ansible_host": host.address,
                            "hy3_test_fleet_share_local": fleet.share_dir(host.name)}
    common = {
        "ansible_user": LOGIN_USER,
        "ansible_ssh_private_key_file": fleet.key,
        "ansible_ssh_common_args": ssh_common_args(fleet.control_dir),
        "ansible_become": True,
        "ansible_python_interpreter": python,
        "hy3_test_fleet_name": fleet.name,
        "hy3_test_fleet_python": python,
        "hy3_test_fleet_repo": IN_HOST_REPO,
        "hy3_test_fleet_data_dir": IN_HOST_DATA,
        "hy3_test_fleet_share": IN_HOST_SHARE,
    }
    return {"all": {"children": {fleet.group: {"hosts": hosts, "vars": common}}}}


def write(fleet, path):
    with open(path, "w") as handle:
        handle.write("---\n# Written by scripts/test-fleet.sh up; removed by down.\n")
        handle.write(to_yaml(build(fleet)) + "\n")
