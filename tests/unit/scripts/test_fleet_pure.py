# -*- coding: utf-8 -*-
"""The test fleet's pure parts (scripts/test_fleet), without root or namespaces: names and addresses,
the mirror found in apt sources, the base stamp, the virtualenv frame, and the inventory YAML."""
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from test_fleet import base, host as hostlib, inventory, net  # noqa: E402  pylint: disable=wrong-import-position
from test_fleet.common import FleetError, pid_cmdline  # noqa: E402  pylint: disable=wrong-import-position
from test_fleet.fleet import Fleet, venv_version, write_venv_skeleton  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize("texts, expected", [
    (["Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
      "\nTypes: deb\nURIs: http://deb.debian.org/debian-security\n"], "http://deb.debian.org/debian"),
    (["deb [arch=amd64] http://mirror.example/debian/ bookworm main\n"], "http://mirror.example/debian"),
    (["deb https://packages.cloud.google.com/apt cloud-sdk main\n", "URIs: http://m.example/debian\n"],
     "http://m.example/debian"),
    (["# deb http://commented.example/debian bookworm main\n"], None),
])
def test_mirror_from_sources(texts, expected):
    assert base.mirror_from_sources(texts) == expected


def test_base_stamp_follows_the_mirror_and_the_packages(monkeypatch):
    stamp = base.base_stamp("http://a/debian")
    assert stamp == base.base_stamp("http://a/debian") and len(stamp) == 12
    assert stamp != base.base_stamp("http://b/debian")
    monkeypatch.setattr(base, "BASE_PACKAGES", base.BASE_PACKAGES + ("curl",))
    assert stamp != base.base_stamp("http://a/debian")


def test_subnet_is_the_default_one_or_derived_from_the_name():
    assert net.subnet_for("hy3tf") == "10.231.0"
    assert net.subnet_for("sr13lc") == net.subnet_for("sr13lc") != net.subnet_for("sr13cr")
    assert all(1 <= int(net.subnet_for(n).rsplit(".", 1)[1]) <= 254 for n in ("a", "hy3mol", "zzzzzzzz"))
    assert Fleet("hy3mol", ["a"], venv="").subnet == net.subnet_for("hy3mol")


def test_names_and_addresses_fit_the_kernel_limits():
    fleet = Fleet("hy3tf", ["node-a", "node-b"], "10.231.3", data_dir="/srv/x", venv="")
    assert [(h.address, h.veth, h.netns) for h in fleet.hosts] == [
        ("10.231.3.11", "hy3tf-v1", "/run/netns/hy3tf-node-a"), ("10.231.3.12", "hy3tf-v2", "/run/netns/hy3tf-node-b")]
    longest = net.veth_name("abcdefgh", 50)
    assert len(longest) <= 15 and len(net.bridge_name("abcdefgh")) <= 15


@pytest.mark.parametrize("name, hosts, message", [
    ("Hy3", ["a"], "fleet name 'Hy3'"),
    ("toolongname", ["a"], "fleet name 'toolongname'"),
    ("hy3tf", ["a", "a"], "distinct"),
    ("hy3tf", ["a_b"], "host names"),
])
def test_bad_names_are_refused_with_the_name(name, hosts, message):
    with pytest.raises(FleetError, match=message):
        Fleet(name, hosts)


def test_unknown_host_is_named():
    with pytest.raises(FleetError, match="has no host 'zz'"):
        Fleet("hy3tf", ["a"], venv="").host("zz")


@pytest.mark.parametrize("cfg, expected", [
    ("home = /usr/bin\nversion = 3.11.7\n", "3.11"),
    ("home = /x\nversion_info = 3.12.1.final.0\n", "3.12"),
])
def test_venv_version(tmp_path, cfg, expected):
    (tmp_path / "pyvenv.cfg").write_text(cfg)
    assert venv_version(str(tmp_path)) == expected


def test_venv_frame_points_at_the_hosts_interpreter(tmp_path):
    frame = tmp_path / "venv"
    write_venv_skeleton(str(frame), "3.11")
    assert os.readlink(str(frame / "bin" / "python")) == "/usr/bin/python3.11"
    assert os.readlink(str(frame / "bin" / "python3")) == "python"
    assert (frame / "lib" / "python3.11" / "site-packages").is_dir()
    assert "home = /usr/bin\n" in (frame / "pyvenv.cfg").read_text()


def test_inventory_yaml_round_trips():
    fleet = Fleet("hy3tf", ["node-a", "node-b"], "10.231.3", data_dir="/srv/x", venv="/work/.venv")
    data = inventory.build(fleet)
    assert yaml.safe_load(inventory.to_yaml(data)) == data
    group = data["all"]["children"]["gpu_nodes"]
    assert group["hosts"]["node-b"]["ansible_host"] == "10.231.3.12"
    assert group["vars"]["ansible_become"] is True and group["vars"]["ansible_user"] == "hy3admin"
    assert group["vars"]["ansible_python_interpreter"] == "/opt/hy3-test/venv/bin/python"
    assert "ControlPath=%s/%%r@%%h:%%p" % fleet.control_dir in group["vars"]["ansible_ssh_common_args"]


def test_inventory_without_venv_uses_the_hosts_python():
    data = inventory.build(Fleet("hy3tf", ["a"], venv=""))
    assert data["all"]["children"]["gpu_nodes"]["vars"]["ansible_python_interpreter"] == "/usr/bin/python3"


def test_a_host_mid_exec_is_not_taken_for_an_exited_one(tmp_path):
    """The boot's sh joins the cgroups, then execs systemd-nspawn; in that execve the kernel shows an empty
    command line. Read at once after each start (as the boot's wait does), the host must count as running,
    and as gone once it has exited."""
    host = hostlib.Host("h", 1, "10.0.0.1", "/run/netns/x", "x-v1", str(tmp_path))
    script = 'exec "$@"'
    for _attempt in range(20):
        proc = subprocess.Popen(["sh", "-c", script, "sh", sys.executable, "-c", "import time; time.sleep(5)",
                                 "--machine=f-h"])
        (tmp_path / "nspawn.pid").write_text("%d\n" % proc.pid)
        try:
            while pid_cmdline(proc.pid)[0] != sys.executable:      # until sh has become python
                assert hostlib.nspawn_pid("f", host) == proc.pid
            assert hostlib.nspawn_pid("g", host) is None
        finally:
            proc.kill()
            proc.wait()
        assert hostlib.nspawn_pid("f", host) is None
