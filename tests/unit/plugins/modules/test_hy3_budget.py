# -*- coding: utf-8 -*-
import json

from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.modules import hy3_budget

GIB = 1024 ** 3
TINY = {"name": "tiny", "total_params_b": 1.0, "num_layers": 2, "num_kv_heads": 2, "head_dim": 64,
        "max_context": 8192}


def weights(tmp_path, name, total_size=None):
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 16)
    if total_size:
        (path / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total_size}, "weight_map": {"x": "model-00001-of-00001.safetensors"}}))
    return str(path)


def devices(n, total_gib, free_gib, **extra):
    return [dict({"index": i, "memory_total": int(total_gib * GIB), "memory_free": int(free_gib * GIB)}, **extra)
            for i in range(n)]


def test_defaults_to_the_hy3_profile(tmp_path):
    out = run_module(hy3_budget.main, {
        "gpus": devices(8, 140, 139), "max_model_len": 32768, "max_num_seqs": 4,
        "tiers": [{"name": "bf16", "weights_dir": weights(tmp_path, "bf16")}]})
    assert not out.failed and out.result["changed"] is False
    assert out.result["total_params_b"] == 295.0 and out.result["active_params_b"] == 21.0
    assert out.result["quantization"] == "bf16" and out.result["tensor_parallel_size"] == 8
    assert out.result["weight_dirs"][0]["present"]


def test_skips_missing_tier_and_reports_measured_size(tmp_path):
    out = run_module(hy3_budget.main, {
        "gpus": devices(1, 16, 16), "model": TINY, "max_model_len": 1024, "max_num_seqs": 1,
        "tiers": [{"name": "bf16", "weights_dir": str(tmp_path / "absent")},
                  {"name": "fp8", "weights_dir": weights(tmp_path, "fp8", total_size=3_000_000_000)}]})
    r = out.result
    assert r["quantization"] == "fp8" and r["skipped_tiers"][0]["quantization"] == "bf16"
    assert r["vllm_quantization"] == "fp8" and r["dtype"] == "bfloat16"
    assert r["budget_bytes"]["weights_nominal"] == 1_000_000_000
    assert r["budget_bytes"]["weights_measured"] == 3_000_000_000 == r["budget_bytes"]["weights"]


def test_reclaims_memory_of_our_own_engine(tmp_path):
    gpus = devices(1, 80, 8, memory_free_for_engine=int(78 * GIB))
    r = run_module(hy3_budget.main, {"gpus": gpus, "model": TINY, "max_model_len": 1024, "max_num_seqs": 1,
                                     "tiers": [{"name": "bf16", "weights_dir": weights(tmp_path, "b")}]}).result
    assert r["gpu_memory_utilization"] == 0.9


def test_cannot_hold_fails_or_reports(tmp_path):
    args = {"gpus": devices(4, 40, 40), "max_model_len": 8192, "max_num_seqs": 4,
            "tiers": [{"name": "fp8", "weights_dir": weights(tmp_path, "fp8")}]}
    out = run_module(hy3_budget.main, args)
    assert out.failed and "this host cannot hold the model" in out.result["msg"]
    assert out.result["shortfall_gib"] > 0
    out = run_module(hy3_budget.main, dict(args, fail_when_cannot_hold=False), check_mode=True)
    assert not out.failed and out.result["verdict"] == "cannot hold"


def test_bad_inputs_fail_cleanly(tmp_path):
    base = {"gpus": devices(2, 16, 16), "model": TINY,
            "tiers": [{"name": "bf16", "weights_dir": weights(tmp_path, "bf16")}]}
    cases = [
        ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization must be in (0, 1]"),
        ({"tensor_parallel_size": 3}, "more than the 2 GPU(s)"),
        ({"tiers": [{"name": "int2", "weights_dir": "/x"}]}, "value of name must be one of"),
        ({"model": dict(TINY, head_dim=-1)}, "head_dim must be a positive number"),
        ({"model": {"total_params_b": 1}}, "missing required arguments"),
        ({"gpus": devices(1, 16, 16, mig_mode={"current": True, "pending": True})}, "MIG is enabled on GPU(s) 0"),
        ({"max_num_seqs": "many"}, "cannot be converted to an int"),
    ]
    for extra, message in cases:
        out = run_module(hy3_budget.main, dict(base, **extra))
        assert out.failed, extra
        assert message in out.result["msg"], (extra, out.result["msg"])


def test_tier_quantization_override(tmp_path):
    r = run_module(hy3_budget.main, {"gpus": devices(1, 16, 16), "model": TINY, "max_model_len": 1024,
                                     "max_num_seqs": 1, "tiers": [{"name": "int4", "quantization": "awq_marlin",
                                                                   "weights_dir": weights(tmp_path, "int4")}]}).result
    assert r["vllm_quantization"] == "awq_marlin"
    r = run_module(hy3_budget.main, {"gpus": devices(1, 16, 16), "model": TINY, "max_model_len": 1024,
                                     "max_num_seqs": 1, "tiers": [{"name": "int4", "weights_dir": str(tmp_path / "int4")}]})
    assert r.result["vllm_quantization"] is None                      # read from the checkpoint
