# -*- coding: utf-8 -*-
"""Node groups (one engine across nodes): membership and ranks, the group's GPUs, its plan, its waves and gates,
and a group as one row of the report and of the status."""
import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import node_group, rollout

INVENTORY = ["solo", "b1", "b2", "c1", "c2", "c3"]


def gpus(count=2, name="NVIDIA H100 80GB HBM3", driver="550.54.15", free=70):
    return {"count": count, "driver_version": driver,
            "devices": [{"index": i, "name": name, "memory_total": 80 << 30, "memory_free": free << 30}
                        for i in range(count)]}


def hostvars(**overrides):
    base = {"solo": {"ansible_host": "10.0.0.1"},
            "b1": {"hy3_node_group": "b", "ansible_host": "10.0.0.11"},
            "b2": {"hy3_node_group": "b", "ansible_host": "10.0.0.12"},
            "c1": {"hy3_node_group": "c", "hy3_node_address": "192.168.7.1", "ansible_host": "c1.example"},
            "c2": {"hy3_node_group": "c", "hy3_node_address": "192.168.7.2"},
            "c3": {"hy3_node_group": "c", "hy3_node_address": "192.168.7.3"}}
    for host, values in overrides.items():
        base[host] = dict(base[host], **values)
    return base


def test_a_host_in_no_group_has_none():
    assert node_group.group_info("solo", hostvars(), INVENTORY, INVENTORY) == {}


def test_members_are_ranked_in_inventory_order_and_the_first_is_the_head():
    info = node_group.group_info("c2", hostvars(), INVENTORY, INVENTORY)
    assert info == {"name": "c", "members": ["c1", "c2", "c3"], "head": "c1", "rank": 1, "size": 3,
                    "address": "192.168.7.2", "master_addr": "192.168.7.1", "master_port": 29501}


def test_the_address_defaults_to_ansible_host():
    info = node_group.group_info("b1", hostvars(), INVENTORY, INVENTORY)
    assert (info["address"], info["master_addr"], info["rank"]) == ("10.0.0.11", "10.0.0.11", 0)


@pytest.mark.parametrize("overrides, play, words", [
    ({"b2": {"hy3_node_group": ""}}, INVENTORY, ["node group b has one member (b1)"]),
    ({}, ["solo", "b1"], ["member b2 is not in this run", "include all of b1, b2"]),
    ({"b2": {"ansible_host": "b2.example"}}, INVENTORY, ["member b2 has address 'b2.example', not an IP address",
                                                         "hy3_node_address"]),
    ({"b2": {"hy3_node_group_port": 29600}}, INVENTORY, ["different hy3_node_group_port values (29501, 29600)"]),
])
def test_a_group_that_cannot_form_names_the_member_and_the_cause(overrides, play, words):
    with pytest.raises(node_group.GroupError) as error:
        node_group.group_info("b1", hostvars(**overrides), INVENTORY, play)
    for word in words:
        assert word in str(error.value)


def with_facts(values, **per_host):
    for host, facts in per_host.items():
        values[host] = dict(values[host], ansible_facts={"hy3_gpus": facts})
    return values


def test_the_group_budgets_every_gpu_head_first():
    values = with_facts(hostvars(), b1=gpus(free=70), b2=gpus(free=60))
    info = node_group.group_info("b2", values, INVENTORY, INVENTORY)
    devices = node_group.group_gpus(info, values)
    assert [d["memory_free"] >> 30 for d in devices] == [70, 70, 60, 60]


def test_the_gpu_problem_is_a_sentence_or_none():
    values = with_facts(hostvars(), b1=gpus(), b2=gpus())
    info = node_group.group_info("b1", values, INVENTORY, INVENTORY)
    assert node_group.gpu_problem(info, values) is None
    values = with_facts(values, b2=gpus(count=1))
    assert node_group.gpu_problem(info, values).startswith("node group b: member b2 has 1 x NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize("b2_gpus, words", [
    (None, ["member b2 has no GPU facts"]),
    (gpus(count=4), ["member b2 has 4 x NVIDIA H100 80GB HBM3, driver 550.54.15", "the head b1 has 2 x"]),
    (gpus(driver="560.28.03"), ["driver 560.28.03", "same GPUs and driver"]),
    (gpus(name="NVIDIA A100-SXM4-80GB"), ["NVIDIA A100-SXM4-80GB"]),
])
def test_members_that_disagree_on_gpus_fail_naming_the_member(b2_gpus, words):
    values = with_facts(hostvars(), b1=gpus())
    if b2_gpus:
        values = with_facts(values, b2=b2_gpus)
    info = node_group.group_info("b1", values, INVENTORY, INVENTORY)
    with pytest.raises(node_group.GroupError) as error:
        node_group.group_gpus(info, values)
    for word in words:
        assert word in str(error.value)


WEIGHTS = [{"quantization": "bf16", "status": "ok", "files": 4, "measured_bytes": 1000}]


def planned(b1_plan, b2_plan, b2_weights=None):
    values = hostvars(b1={"hy3_plan": b1_plan, "hy3_budget": {"weight_dirs": WEIGHTS}},
                      b2={"hy3_plan": b2_plan, "hy3_budget": {"weight_dirs": b2_weights or WEIGHTS}})
    return node_group.group_plan(node_group.group_info("b1", values, INVENTORY, INVENTORY), values)


STEADY = {"action": "steady", "reasons": [], "sentence": "runs the config it would get, and serves"}


def test_a_group_whose_members_are_steady_is_steady():
    plan = planned(STEADY, STEADY)
    assert (plan["action"], plan["group"]) == ("steady", "b")
    assert "node group b (b1, b2)" in plan["sentence"]


def test_one_member_that_differs_rolls_the_whole_group():
    plan = planned(STEADY, {"action": "roll", "reasons": ["config_changed"], "sentence": "to roll: vLLM config changed"})
    assert plan["action"] == "roll"
    assert plan["reasons"] == ["b2:config_changed"]
    assert plan["sentence"] == "to roll: node group b as one unit (b2: vLLM config changed)"


def test_one_member_that_faulted_faults_the_group_and_nothing_is_touched():
    plan = planned(STEADY, {"action": "faulted", "reasons": ["unreachable"], "sentence": "b2: ssh: connect timed out"})
    assert (plan["action"], plan["reasons"]) == ("faulted", ["member_faulted"])
    assert plan["sentence"] == "node group b: member b2 faulted: ssh: connect timed out; no member is touched"


def test_a_complaint_about_the_group_that_every_member_raised_is_said_once():
    complaint = "node group b: member b2 has 2 x NVIDIA H200, driver 1, the head b1 has 1 x NVIDIA H200, driver 1"
    plan = planned({"action": "faulted", "reasons": ["failed"], "sentence": "b1: " + complaint},
                   {"action": "faulted", "reasons": ["failed"], "sentence": "b2: " + complaint})
    assert plan["sentence"] == complaint + "; no member is touched"


def test_a_member_without_a_plan_faults_the_group():
    plan = planned(STEADY, None)
    assert plan["action"] == "faulted" and "member b2 was not planned" in plan["sentence"]


def test_members_holding_other_weights_fault_the_group():
    plan = planned(STEADY, STEADY, [dict(WEIGHTS[0], files=3, measured_bytes=750)])
    assert (plan["action"], plan["reasons"]) == ("faulted", ["weights_differ"])
    assert "member b2 holds other weights than the head b1" in plan["sentence"]
    assert "bf16 ok 3 shards 750 B against bf16 ok 4 shards 1000 B" in plan["sentence"]


def test_a_group_that_cannot_hold_says_the_budget_s_reason():
    cannot = {"action": "cannot_hold", "reasons": ["cannot_hold"], "sentence": "short by 3 GiB per GPU"}
    plan = planned(cannot, cannot)
    assert (plan["action"], plan["sentence"], plan["group"]) == ("cannot_hold", "short by 3 GiB per GPU", "b")


def test_waves_hold_one_whole_group_each_in_play_order():
    values = hostvars()
    for host in INVENTORY[1:]:
        values[host]["hy3_node_group_info"] = node_group.group_info(host, values, INVENTORY, INVENTORY)
    assert node_group.roll_waves(["b1", "b2", "c1", "c2", "c3"], values) == [2, 3]
    assert node_group.roll_waves(["c1", "c2", "c3"], values) == [3]
    assert node_group.roll_waves([], values) == [1]


def test_a_wave_that_splits_a_group_says_how_to_list_it():
    info = node_group.group_info("c1", hostvars(), INVENTORY, INVENTORY)
    assert node_group.wave_problem(info, ["c1", "c2", "c3"]) is None
    problem = node_group.wave_problem(info, ["c1", "c2"])
    assert "does not hold member c3" in problem and "next to each other in the inventory" in problem


def test_the_gate_names_each_failed_or_lost_member():
    values = hostvars(b1={"__hy3_roll_member_failure": ""}, b2={"__hy3_roll_member_failure": ""})
    info = node_group.group_info("b1", values, INVENTORY, INVENTORY)
    assert node_group.member_failures(info, values, ["b1", "b2"]) is None
    values["b1"]["__hy3_roll_member_failure"] = "request failure: POST answered 500"
    assert node_group.member_failures(info, values, ["b1"]) == (
        "node group b: member b1 failed: request failure: POST answered 500; "
        "member b2 is unreachable or failed outside the roll")


def report_vars(outcome_b2="steady"):
    budget = {"fits": True, "quantization": "bf16", "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
              "budget_gib": {}, "verdict": "fits", "status": "fits"}
    steady = {"action": "steady", "reasons": [], "sentence": "node group b (b1, b2) runs the config it would get, and serves"}
    values = hostvars(solo={"hy3_budget": dict(budget, pipeline_parallel_size=1), "hy3_plan": dict(steady, sentence="serves")},
                      b1={"hy3_budget": budget, "hy3_plan": steady, "ansible_facts": {"hy3_gpus": gpus()}},
                      b2={"hy3_budget": budget, "hy3_plan": steady, "ansible_facts": {"hy3_gpus": gpus()}})
    if outcome_b2 == "failed":
        values["b2"]["hy3_plan"] = {"action": "roll", "reasons": ["b2:config_changed"], "sentence": "to roll: x"}
        values["b2"]["hy3_roll"] = {"status": "failed", "sentence": "deploy failed: node group b: member b2 failed: boom"}
    return values


def test_the_report_shows_a_group_as_one_row_listing_its_members():
    rows = rollout.report_rows(["solo", "b1", "b2"], report_vars())
    assert [row["host"] for row in rows] == ["solo", "b"]
    group = rows[1]
    assert (group["members"], group["gpus"], group["pipeline_parallel_size"], group["outcome"]) == (["b1", "b2"], 4, 2, "steady")


def test_the_group_row_takes_the_worst_outcome_naming_the_member():
    rows = rollout.report_rows(["solo", "b1", "b2"], report_vars("failed"))
    assert rows[1]["outcome"] == "failed"
    assert rows[1]["why"] == "b2: deploy failed: node group b: member b2 failed: boom"
    assert rollout.run_failures(rows) == ["b: b2: deploy failed: node group b: member b2 failed: boom"]


def test_status_shows_a_group_as_one_row_and_a_worker_needs_no_http():
    record = {"config_checksum": "c1", "max_model_len": 1024, "driver_version": "550.54.15"}
    serving = {"status": "running", "engine": {"running": True}, "serving": {"healthy": True, "max_model_len": 1024},
               "files": {"/opt/hy3/etc/vllm.yaml": "c1"}, "record": record}
    worker = dict(serving, serving={"healthy": False})
    values = hostvars(b1={"hy3_engine_status": serving, "ansible_facts": {"hy3_gpus": gpus()}},
                      b2={"hy3_engine_status": worker, "ansible_facts": {"hy3_gpus": gpus()}})
    rows = rollout.status_rows(["b1", "b2"], values)
    assert len(rows) == 1
    assert (rows[0]["host"], rows[0]["members"], rows[0]["state"], rows[0]["drift"]) == ("b", ["b1", "b2"], "ok", [])
    values["b2"]["hy3_engine_status"] = dict(worker, engine={"running": False})
    rows = rollout.status_rows(["b1", "b2"], values)
    assert (rows[0]["state"], rows[0]["drift"]) == ("down", ["b2:not_running"])


def test_a_worker_is_steady_without_answering_http():
    files = {"/opt/hy3/etc/vllm.yaml": "c1"}
    desired = [{"name": "config", "path": "/opt/hy3/etc/vllm.yaml", "checksum": "c1"}]
    worker = {"files": files, "engine": {"running": True}, "serving": {"healthy": False}}
    assert rollout.plan_host({"fits": True}, worker, desired, headless=True)["action"] == "steady"
    assert rollout.plan_host({"fits": True}, worker, desired)["reasons"] == ["engine_not_serving"]
    stopped = dict(worker, engine={"running": False})
    assert rollout.plan_host({"fits": True}, stopped, desired, headless=True)["reasons"] == ["engine_stopped"]
