# -*- coding: utf-8 -*-
"""Speculative decoding in the budget, against vLLM's source (wheels 0.19.0 - 0.34.0) and printed startup lines:
the drafter's runner, KV layers, profile phase, rejection sampler, input buffers and CUDA graphs."""
import os
import sys

import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import budget, engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import kv_accuracy  # noqa: E402  pylint: disable=wrong-import-position

GIB = engine_memory.GIB
DENSE = {"hidden_size": 4096, "vocab_size": 128256, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336, "architecture": "LlamaForCausalLM",
         "num_nextn_predict_layers": 0}


def spec(method, tokens=2, **more):
    return dict({"speculative_method": method, "num_speculative_tokens": tokens, "max_num_batched_tokens": 8192,
                 "max_num_seqs": 256}, **more)


CASES = {c["id"]: c for c in kv_accuracy.load_cases(kv_accuracy.CASES)}


def case(case_id):
    return CASES[case_id]


@pytest.mark.parametrize("method, version, v2", [
    ("mtp", "0.29.0", True), ("eagle3", "0.29.0", True),         # V2 speculates with eagle, eagle3 and mtp
    ("ngram", "0.29.0", False), ("draft_model", "0.29.0", False),  # the rest keep the V1 runner ...
    ("ngram", "0.34.0", True),                                     # ... until it is gone
    ("mtp", "0.19.0", False),
])
def test_the_drafter_decides_the_runner(method, version, v2):
    assert engine_memory.model_runner_v2(version, DENSE, method) is v2


@pytest.mark.parametrize("method, version, v2", [
    ("dspark", "0.26.0", True),      # only V2 implements DSpark: vLLM runs it for any model (config/vllm.py, 0.25 - 0.28)
    ("dspark", "0.24.0", False),     # before DSpark
    ("mtp", "0.26.0", False),        # an MoE model that is not listed keeps V1
])
def test_a_v2_only_drafter_puts_an_moe_model_on_model_runner_v2(method, version, v2):
    experts = {"num_experts": 256, "moe_intermediate_size": 2048, "num_experts_per_tok": 6}
    moe = dict(DENSE, architecture="DeepseekV4ForCausalLM", moe=experts)
    assert engine_memory.model_runner_v2(version, moe, method) is v2


def test_drafter_kv_layers_by_method():
    mtp_model = dict(DENSE, num_nextn_predict_layers=1)
    assert engine_memory.draft_kv_layers(mtp_model, spec("mtp", 3)) == 1     # the MTP layers, whatever the tokens
    assert engine_memory.draft_kv_layers(mtp_model, {}, load_mtp=True) == 1
    assert engine_memory.draft_kv_layers(DENSE, spec("eagle3")) == 1
    assert engine_memory.draft_kv_layers(DENSE, spec("ngram")) == 0
    assert engine_memory.draft_kv_layers(mtp_model, {}) == 0
    assert engine_memory.loads_mtp(spec("mtp")) and not engine_memory.loads_mtp(spec("eagle"))


def test_rejection_sampler_is_profiled_on_the_v1_runner_only():
    rows, tokens = 256, 8192
    v1 = engine_memory.rejection_sampler_bytes(DENSE, tokens, rows, spec("ngram", version="0.19.0"))
    hidden = tokens * 4096 * 2
    assert v1 == hidden + 30 * rows * 128256              # 3 x 2 bytes of bf16 logits + 24
    # a sorting sampler's bonus pass outgrows the fp32 pipeline (v0.11 - v0.16)
    legacy = engine_memory.rejection_sampler_bytes(DENSE, tokens, rows, spec("ngram", version="0.15.0"))
    assert legacy == hidden + int(42.4 * rows * 128256)
    assert engine_memory.rejection_sampler_bytes(DENSE, tokens, rows, spec("mtp", version="0.29.0")) == 0
    assert engine_memory.rejection_sampler_bytes(DENSE, tokens, rows, {"version": "0.19.0"}) == 0


def test_drafter_buffers_count_from_0_27():
    assert engine_memory.drafter_buffer_bytes(DENSE, spec("eagle", version="0.26.0")) == 0
    assert engine_memory.drafter_buffer_bytes(DENSE, spec("eagle", version="0.27.0")) == 8192 * (13 + 2 * 4096)
    assert engine_memory.drafter_buffer_bytes(DENSE, spec("draft_model", version="0.27.0")) == 8192 * (24 + 4 * 4096)
    assert engine_memory.drafter_buffer_bytes(DENSE, spec("ngram", version="0.29.0")) == 0


def test_drafter_phase_holds_the_targets_output():
    one = 8192 * 4096 * 2
    assert engine_memory.drafter_held_bytes(DENSE, spec("eagle")) == one
    assert engine_memory.drafter_held_bytes(DENSE, spec("eagle3")) == 4 * one     # and three auxiliary states
    assert engine_memory.drafter_held_bytes(DENSE, spec("mtp")) == 3 * one        # and [embedding, hidden]
    assert engine_memory.drafter_held_bytes(DENSE, spec("ngram")) == 0


def test_capture_sizes_follow_the_decode_step_as_a_printed_qwen36_start():
    """Qwen3.6-35B-A3B on vLLM 0.20.0 (V1 runner), max_num_seqs 32: "PIECEWISE=11 (largest=64)" without speculation,
    "PIECEWISE=33 (largest=256), FULL=17 (largest=128)" with MTP 3 (the cap doubles 32 x 4; sizes multiples of 4)."""
    qwen36 = case("moe-qwen36-35b-a3b-h200nvl-tp1-ep-v0200-mtp3")
    profile = model_profile(qwen36["model"]["config"])
    settings = {"version": "0.20.0", "gpu_name": "NVIDIA H200 NVL", "max_num_seqs": 32, "max_num_batched_tokens": 8192}
    graphs, sizes = engine_memory.cudagraph_count(settings, profile)
    assert (len(sizes), sizes[-1], graphs - len(sizes)) == (11, 64, 7)
    drafting = dict(settings, **spec("mtp", 3, max_num_seqs=32))
    graphs, sizes = engine_memory.cudagraph_count(drafting, profile)
    assert (len(sizes), sizes[-1], graphs - len(sizes)) == (33, 256, 17)
    assert all(size % 4 == 0 for size in sizes)
    assert engine_memory.drafter_graph_count(drafting, profile, (graphs, sizes)) == 33


def test_the_qwen36_pair_moves_as_the_engine_did():
    """The same start with and without MTP 3, minutes apart: the engine's KV cache fell 1.86 GiB (weights +1.57,
    graph estimate +0.29), its attention block grew 1056 -> 1072 (the MTP layer joins the full-attention group)."""
    rows = {}
    for name in ("nospec", "mtp3"):
        result = kv_accuracy.predict(case("moe-qwen36-35b-a3b-h200nvl-tp1-ep-v0200-" + name), weights_from_log=True)
        rows[name] = result["budget_bytes"]
    assert (rows["nospec"]["kv_block_size"], rows["mtp3"]["kv_block_size"]) == (1056, 1072)
    drop = (rows["nospec"]["kv_available"] - rows["mtp3"]["kv_available"]) / GIB
    assert abs(drop - 1.86) <= 0.15
    assert abs((rows["mtp3"]["cudagraph"] - rows["nospec"]["cudagraph"]) / GIB - 0.29) <= 0.05


def test_hy3_with_its_readme_launch_loads_and_caches_the_mtp_layer():
    """tencent/Hy3's README serves with --speculative-config.method mtp, num_speculative_tokens 2: the budget counts
    the MTP layer's weights and KV layer as with load_mtp, and the drafter's phase."""
    hy3 = case("moe-hy3-fp8-h200-tp4-ep-v0251-run1")
    profile = model_profile(hy3["model"]["config"])
    tier = [{"name": "fp8", "present": True, "bits": 8}]
    gpus = [{"index": i, "total": 140 * GIB, "free": 140 * GIB} for i in range(8)]
    plain = budget.plan(profile, tier, gpus, max_model_len=65536, max_num_seqs=64, engine={"version": "0.25.1"})
    drafting = engine_memory.config_settings({"speculative-config.method": "mtp",
                                              "speculative-config.num_speculative_tokens": 2})[0]
    mtp = budget.plan(profile, tier, gpus, max_model_len=65536, max_num_seqs=64,
                      engine=dict(drafting, version="0.25.1"))
    told = budget.plan(profile, tier, gpus, max_model_len=65536, max_num_seqs=64, engine={"version": "0.25.1"},
                       load_mtp=True)
    assert mtp["budget_bytes"]["weights"] == told["budget_bytes"]["weights"] > plain["budget_bytes"]["weights"]
    assert mtp["budget_bytes"]["kv_bytes_per_token"] == plain["budget_bytes"]["kv_bytes_per_token"] * 81 // 80
    assert mtp["budget_bytes"]["speculative"] > 0 == told["budget_bytes"]["speculative"]
    assert mtp["engine"]["speculative_method"] == "mtp" and mtp["calibration_fields"]["engine_config"] == (
        "num_speculative_tokens=2,speculative_method=mtp")


def test_hy3_readme_launch_on_4xh200_is_within_five_percent_of_the_engine():
    """The write-up's MTP-2 variant of the 4 x H200 start (same host and flags, kept beside run 1 in the corpus: it
    quotes the token count alone): 951,680 tokens against 1,049,888 without."""
    run1 = case("moe-hy3-fp8-h200-tp4-ep-v0251-run1")
    variant = run1["engine_extra"]["same_host_mtp2_variant"]
    mtp2 = dict(run1, settings=dict(run1["settings"], speculative=variant["speculative"]),
                engine_reported={"gpu_kv_cache_tokens": variant["gpu_kv_cache_tokens"]})
    tokens = kv_accuracy.predict(mtp2)["kv_cache_tokens"]
    assert abs(tokens - 951680) <= 0.05 * 951680
