# -*- coding: utf-8 -*-
"""The rollout's decisions: plan groups, report outcomes, what fails the run, preflight sentences."""
import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import rollout

FITS = {"fits": True, "status": "fits", "verdict": "fits"}
DESIRED = [{"name": "config", "path": "/opt/hy3/etc/vllm.yaml", "checksum": "c1"},
           {"name": "environment", "path": "/opt/hy3/etc/engine.env", "checksum": "e1"},
           {"name": "driver", "path": "/opt/hy3/state/driver_version", "checksum": "d1"}]
SAME = {"/opt/hy3/etc/vllm.yaml": "c1", "/opt/hy3/etc/engine.env": "e1", "/opt/hy3/state/driver_version": "d1"}


def status(files=None, running=True, healthy=True):
    return {"files": SAME if files is None else files, "engine": {"running": running},
            "serving": {"healthy": healthy}}


@pytest.mark.parametrize("files, running, healthy, action, reasons", [
    (SAME, True, True, "steady", []),
    (dict(SAME, **{"/opt/hy3/etc/vllm.yaml": "c0"}), True, True, "roll", ["config_changed"]),
    (dict(SAME, **{"/opt/hy3/state/driver_version": "d0"}), True, True, "roll", ["driver_changed"]),
    (dict.fromkeys(SAME), False, False, "roll", ["not_deployed", "engine_stopped"]),
    (dict(SAME, **{"/opt/hy3/etc/engine.env": None}), True, True, "roll", ["environment_changed"]),
    (SAME, False, False, "roll", ["engine_stopped"]),
    (SAME, True, False, "roll", ["engine_not_serving"]),
])
def test_plan_groups_a_host_by_what_differs(files, running, healthy, action, reasons):
    plan = rollout.plan_host(FITS, status(files, running, healthy), DESIRED)
    assert (plan["action"], plan["reasons"]) == (action, reasons)
    assert plan["sentence"]


def test_a_host_that_cannot_hold_is_not_compared():
    plan = rollout.plan_host({"fits": False, "status": "cannot_hold", "reason": "short by 3 GiB per GPU"}, {}, DESIRED)
    assert plan == {"action": "cannot_hold", "reasons": ["cannot_hold"], "sentence": "short by 3 GiB per GPU"}


def test_roll_sentence_names_each_reason():
    plan = rollout.plan_host(FITS, status(dict(SAME, **{"/opt/hy3/etc/vllm.yaml": "x"}), True, False), DESIRED)
    assert plan["sentence"] == "to roll: vLLM config changed, the engine does not serve"


@pytest.mark.parametrize("result, code", [
    ({"unreachable": True, "msg": "ssh: connect timed out"}, "unreachable"),
    ({"nvml_state": "driver_library_mismatch", "msg": "reboot"}, "nvml_driver_library_mismatch"),
    ({"status": "weight_loading", "msg": "weight loading would fail"}, "weight_loading"),
    ({"msg": "node-a: port 8000 is taken"}, "failed"),
    ({}, "failed"),
])
def test_fault_keeps_a_code_and_names_the_host(result, code):
    plan = rollout.fault(result, "Read the GPUs through NVML", "node-a")
    assert plan["action"] == "faulted" and plan["reasons"] == [code]
    assert plan["sentence"].startswith("node-a: ") and plan["sentence"].count("node-a:") == 1


def host_vars(plan=None, roll=None, budget=None):
    hostvars = {"hy3_budget": budget if budget is not None else dict(FITS, max_model_len=4096)}
    if plan:
        hostvars["hy3_plan"] = plan
    if roll:
        hostvars["hy3_roll"] = roll
    return hostvars


STEADY = {"action": "steady", "reasons": [], "sentence": "runs the config it would get, and serves"}
ROLL = {"action": "roll", "reasons": ["config_changed"], "sentence": "to roll: vLLM config changed"}


def test_report_rows_give_every_host_one_outcome_in_inventory_order():
    hostvars = {
        "a": host_vars(ROLL, {"status": "rolled", "sentence": "rolled (config_changed): serves, verified"}),
        "b": host_vars(ROLL, {"status": "failed", "sentence": "deploy failed: boom. Rollback (restored_serving): x"}),
        "c": host_vars(ROLL),
        "d": host_vars(STEADY),
        "e": host_vars({"action": "faulted", "reasons": ["unreachable"], "sentence": "e: unreachable"}, budget={}),
        "f": host_vars({"action": "cannot_hold", "reasons": ["cannot_hold"], "sentence": "short by 3 GiB"},
                       budget={"fits": False, "status": "cannot_hold", "verdict": "cannot hold"}),
        "g": {},
    }
    rows = rollout.report_rows(list("abcdefg"), hostvars, stopped_by="b")
    assert [(r["host"], r["outcome"]) for r in rows] == [
        ("a", "rolled"), ("b", "failed"), ("c", "not_rolled"), ("d", "steady"), ("e", "faulted"),
        ("f", "cannot_hold"), ("g", "no_plan")]
    assert rows[2]["why"] == "not rolled: the rollout stopped at b"
    assert rows[0]["plan_reasons"] == ["config_changed"] and rows[0]["max_model_len"] == 4096
    assert rollout.tally(rows) == {"rolled": 1, "failed": 1, "not_rolled": 1, "steady": 1, "faulted": 1,
                                   "cannot_hold": 1, "no_plan": 1}
    failures = rollout.run_failures(rows)
    assert [f.split(":")[0] for f in failures] == ["b", "e", "f", "g"]
    assert [f.split(":")[0] for f in rollout.run_failures(rows, check_mode=True)] == ["b", "e", "g"]


def test_check_mode_says_what_would_roll_and_a_budget_only_run_says_the_verdict():
    rows = rollout.report_rows(["a", "b"], {"a": host_vars(ROLL), "b": host_vars()}, check_mode=True)
    assert [(r["outcome"], r["why"]) for r in rows] == [("would_roll", "would roll (--check): vLLM config changed"),
                                                        ("budgeted", "fits")]
    assert rollout.run_failures(rows, check_mode=True) == []


def test_a_host_without_variables_still_gets_a_row():
    row = rollout.report_row("lost", None)
    assert row["outcome"] == "no_plan" and row["quantization"] is None and row["verdict"].startswith("no budget")


@pytest.mark.parametrize("status, mode, problems", [
    ({"system": {"state": "running", "usable": True, "failed_units": []}, "port": {"strangers": []}}, "systemd", []),
    ({"system": {"state": "degraded", "usable": True, "failed_units": ["x.service"]}, "port": {"strangers": []}},
     "systemd", ["h: systemd is degraded, failed units: x.service; nothing was changed. Next step: repair those units"]),
    ({"system": {"state": "offline", "usable": False, "failed_units": []}, "port": {"strangers": []}},
     "systemd", ["h: systemd is offline; nothing was changed. Next step: boot the host with systemd as PID 1"]),
    ({"system": {"state": None, "usable": True, "failed_units": []}, "port": {"strangers": ["12 1 nc"]}},
     "pid", ["h: port 8000 is taken by another process (12 1 nc); nothing was changed."]),
])
def test_preflight_names_the_host_and_the_cause(status, mode, problems):
    found = rollout.preflight_problems(status, "h", mode, 8000)
    assert len(found) == len(problems)
    assert all(sentence.startswith(prefix) for sentence, prefix in zip(found, problems))


RECORD = {"config_checksum": "c1", "max_model_len": "4096", "driver_version": "570.1", "quantization": "fp8"}


@pytest.mark.parametrize("files, served, driver, healthy, state, drift", [
    ({"/opt/hy3/etc/vllm.yaml": "c1"}, 4096, "570.1", True, "ok", []),
    ({"/opt/hy3/etc/vllm.yaml": "c2"}, 4096, "570.1", True, "drift", ["config_changed"]),
    ({"/opt/hy3/etc/vllm.yaml": "c1"}, 2048, "575.0", True, "drift", ["max_model_len", "driver_changed"]),
    ({"/opt/hy3/etc/vllm.yaml": "c1"}, None, "570.1", False, "down", ["not_serving"]),
])
def test_status_row_names_the_drift(files, served, driver, healthy, state, drift):
    hostvars = {"hy3_engine_status": {"status": "serving" if healthy else "stopped", "record": RECORD, "files": files,
                                      "serving": {"healthy": healthy, "max_model_len": served, "running": 0}},
                "ansible_facts": {"hy3_gpus": {"driver_version": driver}}}
    row = rollout.status_row("h", hostvars)
    assert (row["state"], row["drift"]) == (state, drift)


def test_status_rows_of_a_host_not_read_and_one_without_record():
    rows = rollout.status_rows(["lost", "fresh"], {"fresh": {"hy3_engine_status": {
        "status": "stopped", "record": None, "files": {}, "serving": {"healthy": False}}}})
    assert [(r["state"], r["drift"]) for r in rows] == [("unknown", ["unreachable"]), ("down", ["no_record", "not_serving"])]
