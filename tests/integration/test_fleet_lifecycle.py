# -*- coding: utf-8 -*-
"""The test fleet itself (scripts/test_fleet): hosts that boot systemd and answer Ansible over SSH
with become, shared and per-host directories, the engine virtualenv inside the hosts, each fault
and its cure, a restart that keeps the host's files, and a teardown that leaves nothing behind.

Runs on fleets of its own (fleet_name("lc"), fleet_name("cr")) so faults never touch the session
fleet the end-to-end test uses.
"""
import json
import os
import subprocess

import pytest
from ansible_cli import run
from fleet_fixture import (IN_HOST_DATA, IN_HOST_REPO, IN_HOST_SHARE, IN_HOST_VENV, Fleet, FleetError, faults,
                           fleet_name, managed_fleet, skip_unless_root)

HOSTS = ("lc-a", "lc-b")
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "scripts", "test-fleet.sh")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    skip_unless_root()
    data_dir = tmp_path_factory.mktemp("lifecycle-data")
    os.chmod(str(data_dir), 0o755)
    (data_dir / "weights.txt").write_text("shared\n")
    yield from managed_fleet(fleet_name("lc"), HOSTS, str(data_dir))


def ansible(fleet, host_pattern, module, args="", *extra):
    return run("ansible", "-i", fleet.inventory_path, host_pattern, "-m", module, "-a", args, *extra, timeout=300)


def ssh(fleet, name, *command):
    host = fleet.host(name)
    return subprocess.run(["ssh", "-i", fleet.key, "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3",
                           "hy3admin@%s" % host.address] + list(command),
                          check=False, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)


def test_hosts_answer_ansible_over_ssh_with_become(fleet):
    proc = ansible(fleet, "all", "ansible.builtin.setup", "filter=ansible_service_mgr,ansible_user_id,ansible_hostname")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in HOSTS:
        facts = json.loads(proc.stdout.split("%s | SUCCESS => " % name, 1)[1].split("\n}\n", 1)[0] + "\n}")
        assert facts["ansible_facts"] == {"ansible_service_mgr": "systemd", "ansible_user_id": "root",
                                          "ansible_hostname": name}


def test_login_user_is_not_root_and_systemd_runs(fleet):
    proc = ssh(fleet, "lc-a", "id -un; systemctl is-system-running; hostname")
    assert proc.stdout.split() == ["hy3admin", "running", "lc-a"], proc.stdout


def test_each_host_has_its_own_host_key_and_filesystem(fleet):
    keys = [fleet.exec_in(n, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.split()[1] for n in HOSTS]
    assert len(set(keys)) == 2
    fleet.exec_in("lc-a", ["touch", "/etc/only-on-a"])
    assert fleet.exec_in("lc-b", ["test", "-e", "/etc/only-on-a"], check=False).returncode == 1


def test_shared_data_is_read_only_and_host_dir_writable(fleet):
    assert fleet.exec_in("lc-a", ["cat", IN_HOST_DATA + "/weights.txt"]).stdout == "shared\n"
    assert fleet.exec_in("lc-a", ["touch", IN_HOST_DATA + "/x"], check=False).returncode != 0
    with open(os.path.join(fleet.share_dir("lc-b"), "gpus.json"), "w") as handle:
        handle.write('{"gpus": []}')
    assert fleet.exec_in("lc-b", ["cat", IN_HOST_SHARE + "/gpus.json"]).stdout == '{"gpus": []}'
    assert fleet.exec_in("lc-a", ["test", "-e", IN_HOST_SHARE + "/gpus.json"], check=False).returncode == 1
    assert fleet.exec_in("lc-a", ["test", "-f", IN_HOST_REPO + "/tests/fakes/fake_nvml.py"]).returncode == 0


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(SCRIPT), "..", ".venv")), reason="no .venv")
def test_engine_venv_runs_in_host_as_unprivileged_user(fleet):
    code = "import sys, yaml, pynvml; print(sys.prefix, sys.version_info[:2])"
    proc = fleet.exec_in("lc-a", ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                  IN_HOST_VENV + "/bin/python", "-c", code], check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(IN_HOST_VENV + " (3, 11)")


def test_unreachable_host_times_out_and_heals(fleet):
    assert ansible(fleet, "all", "ansible.builtin.ping").returncode == 0
    sockets = ["hy3admin@%s:22" % fleet.host(name).address for name in HOSTS]
    assert sorted(os.listdir(fleet.control_dir)) == sockets
    faults.inject(fleet, "unreachable", "lc-b")
    assert os.listdir(fleet.control_dir) == sockets[:1]                       # only lc-b's master closed
    try:
        proc = ansible(fleet, "lc-b", "ansible.builtin.ping")
        assert proc.returncode != 0 and "UNREACHABLE" in proc.stdout
    finally:
        faults.heal(fleet, "lc-b", "unreachable")
    assert ansible(fleet, "lc-b", "ansible.builtin.ping").returncode == 0


def test_refused_key(fleet):
    faults.inject(fleet, "refuse-key", "lc-b")
    try:
        proc = ssh(fleet, "lc-b", "true")
        assert proc.returncode == 255 and "Permission denied (publickey)" in proc.stdout
    finally:
        faults.heal(fleet, "lc-b", "refuse-key")
    assert ssh(fleet, "lc-b", "true").returncode == 0


def test_sudo_asks_for_a_password(fleet):
    faults.inject(fleet, "sudo-password", "lc-b")
    try:
        proc = ansible(fleet, "lc-b", "ansible.builtin.ping")
        assert proc.returncode != 0 and "password" in proc.stdout.lower(), proc.stdout
    finally:
        faults.heal(fleet, "lc-b", "sudo-password")
    assert ansible(fleet, "lc-b", "ansible.builtin.ping").returncode == 0


def test_degraded_systemd(fleet):
    faults.inject(fleet, "degraded", "lc-b")
    try:
        assert ssh(fleet, "lc-b", "systemctl is-system-running").stdout.strip() == "degraded"
    finally:
        faults.heal(fleet, "lc-b", "degraded")
    assert ssh(fleet, "lc-b", "systemctl is-system-running").stdout.strip() == "running"


def test_port_taken(fleet):
    faults.inject(fleet, "take-port", "lc-b", "18888")
    try:
        proc = ssh(fleet, "lc-b", "python3 -c \"import socket; socket.socket().bind(('127.0.0.1', 18888))\"")
        assert proc.returncode == 1 and "Address already in use" in proc.stdout
    finally:
        faults.heal(fleet, "lc-b", "take-port")
    assert ssh(fleet, "lc-b", "python3 -c \"import socket; socket.socket().bind(('127.0.0.1', 18888))\"").returncode == 0


def test_unknown_fault_is_named(fleet):
    with pytest.raises(FleetError, match="unknown fault 'meteor'"):
        faults.inject(fleet, "meteor", "lc-a")


def test_restart_keeps_the_host_files_and_boots_again(fleet):
    booted = ["systemctl", "show", "--property=ActiveEnterTimestampMonotonic", "--value", "sysinit.target"]
    fleet.exec_in("lc-a", ["sh", "-c", "echo kept > /var/lib/restart-marker"])
    before = int(fleet.exec_in("lc-a", booted).stdout)
    fleet.restart("lc-a")
    assert int(fleet.exec_in("lc-a", booted).stdout) > before            # a new boot of its systemd
    assert fleet.exec_in("lc-a", ["cat", "/var/lib/restart-marker"]).stdout == "kept\n"
    assert ssh(fleet, "lc-a", "systemctl is-system-running").stdout.strip() == "running"


def test_memory_is_measured_per_host(fleet):
    usage = fleet.memory_mib()
    assert sorted(usage) == sorted(HOSTS)
    assert all(5 < mib < 400 for mib in usage.values()), usage


def test_leftover_fleet_is_cleared_by_up_and_down_leaves_nothing(tmp_path):
    skip_unless_root()
    name = fleet_name("cr")
    crashed = Fleet(name, ["cr-a"], data_dir=str(tmp_path))
    crashed.up()                      # and never brought down, as after a crashed session
    assert any(line.startswith("netns:") for line in crashed.leftovers())
    again = Fleet(name, ["cr-b"], data_dir=str(tmp_path)).up()
    assert [h.name for h in Fleet.load(name).hosts] == ["cr-b"]
    again.down()
    assert again.leftovers() == []
    proc = subprocess.run([SCRIPT, "--name", name, "check-clean"], check=False, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert (proc.returncode, proc.stdout) == (0, "")


def test_check_clean_names_what_is_left(fleet):
    proc = subprocess.run([SCRIPT, "--name", fleet.name, "check-clean"], check=False, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.returncode == 3
    assert "netns: %s-lc-a" % fleet.name in proc.stdout and "link: %s-br" % fleet.name in proc.stdout
