# -*- coding: utf-8 -*-
import json

from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.modules import engine_calibration

GIB = 1024 ** 3
KEY = {"gpu_name": "NVIDIA H200", "engine_version": "0.30.0", "model": "hy3", "quantization": "fp8",
       "tensor_parallel_size": 8, "max_num_batched_tokens": 8192, "max_num_seqs": 16, "enforce_eager": False,
       "kv_cache_dtype": "auto", "dtype": "bfloat16"}
BUDGET = {"engine_request": 128 * GIB, "weights": 40 * GIB, "overhead": 4 * GIB, "kv_available": 84 * GIB,
          "kv_cache_tokens": 1_000_000, "overhead_source": "model"}


def record_args(path, **extra):
    return dict({"path": path, "state": "record", "key": KEY, "budget": BUDGET, "host": "gpu-1",
                 "measured_at": "2026-12-03T07:00:00Z", "engine": {"kv_cache_tokens": 900_000}}, **extra)


def test_record_writes_once_and_read_returns_it(tmp_path):
    path = str(tmp_path / "calibration.json")
    first = run_module(engine_calibration.main, record_args(path))
    assert not first.failed and first.result["changed"] and first.result["status"] == "recorded"
    second = run_module(engine_calibration.main, record_args(path, host="gpu-2"))
    assert not second.result["changed"] and second.result["status"] == "unchanged"
    read = run_module(engine_calibration.main, {"path": path})
    (entry,) = read.result["entries"].values()
    assert entry["host"] == "gpu-1" and entry["overhead_bytes"] == 128 * GIB - 40 * GIB - int(84 * GIB * 0.9)


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "calibration.json"
    out = run_module(engine_calibration.main, record_args(str(path)), check_mode=True)
    assert out.result["changed"] and not path.exists()


def test_an_unmeasured_log_changes_nothing(tmp_path):
    path = tmp_path / "calibration.json"
    out = run_module(engine_calibration.main, record_args(str(path), engine={}))
    assert not out.result["changed"] and out.result["status"] == "not_measured" and not path.exists()


def test_a_corrupt_store_fails_naming_it(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"format": 7}))
    out = run_module(engine_calibration.main, {"path": str(path)})
    assert out.failed and str(path) in out.result["msg"] and out.result["status"] == "bad_store"
    assert path.read_text() == json.dumps({"format": 7})


def test_record_needs_key_engine_and_budget(tmp_path):
    out = run_module(engine_calibration.main, {"path": str(tmp_path / "c.json"), "state": "record"})
    assert out.failed and "key" in out.result["msg"]
