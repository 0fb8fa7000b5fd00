# -*- coding: utf-8 -*-
"""deploy_hy3.yml on this machine in pid mode with the stand-in engine (tests/fakes/stub_engine): the
serve role's preflight, file modes, rollback and the report's exposure warning, in seconds.

The systemd side (restarts, hardening, the unit's wait) needs real hosts: tests/e2e/test_fleet_e2e.py.
"""
import json
import os
import re
import socket
import stat

import pytest
import sample_checkpoints
import yaml
from ansible_cli import ROOT, run

STUB = os.path.join(ROOT, "tests", "fakes", "stub_engine")
# the stand-in engine on PYTHONPATH; the KV cache size the budget needs for a CPU engine
ENGINE_ENV = {"PYTHONPATH": STUB, "VLLM_CPU_KVCACHE_SPACE": "1"}
BROKEN_ENV = dict(ENGINE_ENV, PYTHONHOME="/nonexistent")          # python itself cannot start


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return sample_checkpoints.write(tmp_path_factory.mktemp("weights") / "hy3-fp8", "fp8")


@pytest.fixture()
def host(tmp_path, weights):
    root = tmp_path / "engine"
    gpus = tmp_path / "gpus.json"                                   # one idle H200
    gpus.write_text(json.dumps({"gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 1}]}))
    state = {"root": root, "tmp": tmp_path, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "hy3_serve_mode": "pid", "hy3_serve_root": str(root), "hy3_facts_dir": str(tmp_path / "facts.d"),
        "hy3_serve_user": "root", "hy3_serve_group": "root",
        "hy3_serve_python": "{{ ansible_playbook_python }}", "hy3_serve_port": free_port(),
        "hy3_serve_environment": ENGINE_ENV,
        "hy3_environment": {"PYTHONPATH": os.path.join(ROOT, "tests", "fakes"),
                            "HY3_FAKE_NVML_PROFILE": str(gpus)},
        "hy3_tiers": [{"name": "fp8", "weights_dir": weights}],
        "hy3_max_model_len": 4096, "hy3_max_num_seqs": 4, "hy3_verify_timeout": 60,
    }}
    yield state
    run("ansible", "all", "-i", inventory(state), "-m", "ansible.builtin.command",
        "-a", "%s/bin/engine.sh stop" % root)


def inventory(host, **overrides):
    path = host["tmp"] / "inventory.yml"
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"node": dict(host["vars"], **overrides)}}}))
    return str(path)


def deploy(host, *extra, **overrides):
    return run("ansible-playbook", "playbooks/deploy_hy3.yml", "-i", inventory(host, **overrides),
               "-e", "hy3_report_dir=%s" % (host["tmp"] / "report"), *extra)


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def failure(output):
    return " ".join(re.findall(r'"msg": "([^"]*deploy failed[^"]*)"', output))


def test_deploy_writes_private_files_and_warns_about_an_open_port(host):
    proc = deploy(host)
    assert proc.returncode == 0, proc.stdout[-4000:]
    root = host["root"]
    assert mode(root / "etc" / "vllm.yaml") == 0o640 and mode(root / "etc" / "engine.env") == 0o640
    assert mode(root / "log" / "engine.log") == 0o640          # umask 027 in the control script
    rows = json.loads((host["tmp"] / "report" / "fleet_budget.json").read_text())
    assert rows[0]["exposure"] == "open"
    assert "node: WARNING: listens on 0.0.0.0:%d without an API key" % host["vars"]["hy3_serve_port"] in proc.stdout


def test_loopback_or_api_key_is_not_warned_about(host):
    proc = deploy(host, "--check", hy3_serve_host="127.0.0.1")
    assert proc.returncode == 0, proc.stdout[-4000:]
    rows = json.loads((host["tmp"] / "report" / "fleet_budget.json").read_text())
    assert rows[0]["exposure"] == "loopback" and "WARNING: listens" not in proc.stdout


def test_port_taken_by_another_process_fails_before_any_change(host):
    with socket.socket() as other:
        other.bind(("127.0.0.1", host["vars"]["hy3_serve_port"]))
        other.listen(1)
        proc = deploy(host)
    assert proc.returncode != 0
    assert re.search(r"node: port %d is taken by another process \(\s*\d+\s+\d+\s+python" % host["vars"]["hy3_serve_port"],
                     proc.stdout), proc.stdout[-4000:]
    assert not (host["root"] / "etc").exists()                 # nothing half-configured


def test_a_failed_change_of_only_the_environment_restores_it_and_serves_again(host):
    assert deploy(host).returncode == 0
    env_before = (host["root"] / "etc" / "engine.env").read_text()
    proc = deploy(host, hy3_serve_environment=BROKEN_ENV)
    assert proc.returncode != 0
    msg = failure(proc.stdout)
    assert "the engine process exited" in msg and "No module named 'encodings'" in msg
    assert "Rollback (restored_serving): restored %s/etc/engine.env;" % host["root"] in msg
    assert (host["root"] / "etc" / "engine.env").read_text() == env_before
    proc = run("ansible", "all", "-i", inventory(host), "-m", "ansible.builtin.uri",
               "-a", "url=http://127.0.0.1:%d/health" % host["vars"]["hy3_serve_port"])
    assert proc.returncode == 0, proc.stdout


def test_a_failed_first_deploy_stops_the_engine(host):
    proc = deploy(host, hy3_serve_environment=BROKEN_ENV)
    assert proc.returncode != 0
    assert "Rollback (stopped): no earlier version of the changed files to restore; the engine, not running " \
           "before this deploy, was stopped" in failure(proc.stdout)
    assert not (host["root"] / "run" / "engine.pid").exists()
