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
