# -*- coding: utf-8 -*-
"""engine_calibration on the controller runs in Ansible's process and answers as the module does."""
from unittest.mock import MagicMock

import pytest
from action_harness import action
from ansible.errors import AnsibleActionFail
from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.action.engine_calibration import ActionModule
from ansible_collections.hy3.fleet.plugins.modules import engine_calibration

GIB = 1024 ** 3
KEY = {"gpu_name": "NVIDIA H200", "engine_version": "0.30.0", "model": "hy3", "quantization": "fp8",
       "tensor_parallel_size": 8, "max_num_batched_tokens": 8192, "max_num_seqs": 16, "enforce_eager": False,
       "kv_cache_dtype": "auto", "dtype": "bfloat16"}
BUDGET = {"engine_request": 128 * GIB, "weights": 40 * GIB, "overhead": 4 * GIB, "kv_available": 84 * GIB,
          "kv_cache_tokens": 1_000_000, "overhead_source": "model"}


def record_args(path):
    return {"path": path, "state": "record", "key": KEY, "budget": BUDGET, "host": "gpu-1",
            "measured_at": "2026-12-03T07:00:00Z", "engine": {"kv_cache_tokens": 900_000}}


def run(args, **kw):
    return action(ActionModule, args, **kw).run(task_vars={})


@pytest.mark.parametrize("check_mode", [False, True])
def test_record_then_read_as_the_module_does(tmp_path, check_mode):
    mine, theirs = str(tmp_path / "action.json"), str(tmp_path / "module.json")
    recorded = run(record_args(mine), check_mode=check_mode)
    expected = run_module(engine_calibration.main, record_args(theirs), check_mode=check_mode).result
    assert {k: recorded[k] for k in ("changed", "status", "count", "measurement")} == \
        {k: expected[k] for k in ("changed", "status", "count", "measurement")}
    assert list(recorded["entries"]) == list(expected["entries"])
    read = run({"path": mine})
    assert read["status"] == "read" and read["count"] == (0 if check_mode else 1) and not read["changed"]


def test_a_corrupt_store_fails_naming_the_file(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    result = run({"path": str(path)})
    assert result["failed"] and result["status"] == "bad_store" and str(path) in result["msg"]
    assert result["entries"] == {} and path.read_text() == "{not json"


def test_a_record_without_its_fields_is_refused(tmp_path):
    with pytest.raises(AnsibleActionFail, match="key, engine, budget"):
        run({"path": str(tmp_path / "c.json"), "state": "record"})


@pytest.mark.parametrize("transport, become", [("ssh", None), ("local", MagicMock())])
def test_anywhere_but_the_controller_itself_the_module_runs(tmp_path, transport, become):
    plugin = action(ActionModule, {"path": str(tmp_path / "c.json")}, transport=transport, become=become)
    plugin._execute_module = MagicMock(return_value={"status": "read", "entries": {}, "count": 0})
    plugin._remove_tmp_path = MagicMock()
    assert plugin.run(task_vars={})["status"] == "read"
    plugin._execute_module.assert_called_once()
    assert plugin._execute_module.call_args.kwargs["module_name"] == "hy3.fleet.engine_calibration"
